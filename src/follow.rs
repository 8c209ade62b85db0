//! `orca logs -f`: which bytes of a run's stored output are new since the
//! last look.
//!
//! A running attempt's output reaches the database as its last 64 KiB
//! (`supervise::tail::TAIL_BYTES`), written whole about once a second by whatever
//! supervises it (the scheduler, a worker, an EC2 run's head), and once more
//! when the attempt ends. Each look sees such a window of one attempt's
//! stream; the new bytes are what follows the longest end of the previous
//! window that begins the current one. While the output is under 64 KiB
//! that is exact (the previous window begins the current one). Past it, a
//! stream that repeats itself exactly over a whole window (the same line
//! printed over and over) may be shown shorter than it was, and more than
//! 64 KiB written between two looks can't be shown at all: only the last
//! 64 KiB of it is.

/// Where following a run's output has got to.
#[derive(Default, Debug)]
pub struct Follow {
    /// The attempt (`runs.start`) last seen.
    attempt: Option<i32>,
    /// Its output as last seen.
    seen: Vec<u8>,
}

impl Follow {
    /// The part of `output` (attempt `start`'s, as stored now) not shown
    /// yet. A new attempt's output is new from its first byte.
    pub fn next<'a>(&mut self, start: i32, output: &'a [u8]) -> &'a [u8] {
        if self.attempt != Some(start) {
            self.attempt = Some(start);
            self.seen.clear();
        }
        let from = overlap(&self.seen, output);
        self.seen.clear();
        self.seen.extend_from_slice(output);
        &output[from..]
    }
}

/// The length of the longest end of `prev` that begins `cur` (Knuth-Morris-
/// Pratt over `cur`, linear in both lengths).
pub fn overlap(prev: &[u8], cur: &[u8]) -> usize {
    if prev.is_empty() || cur.is_empty() {
        return 0;
    }
    if cur.starts_with(prev) {
        return prev.len();
    }
    // pi[i]: the longest proper prefix of cur[..=i] that also ends it.
    let mut pi = vec![0usize; cur.len()];
    let mut k = 0;
    for i in 1..cur.len() {
        while k > 0 && cur[i] != cur[k] {
            k = pi[k - 1];
        }
        if cur[i] == cur[k] {
            k += 1;
        }
        pi[i] = k;
    }
    let mut j = 0;
    for &b in prev {
        if j == cur.len() {
            j = pi[j - 1];
        }
        while j > 0 && cur[j] != b {
            j = pi[j - 1];
        }
        if cur[j] == b {
            j += 1;
        }
    }
    j
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growing_output_is_shown_once() {
        let mut f = Follow::default();
        assert_eq!(f.next(1, b""), b"");
        assert_eq!(f.next(1, b"line 1\n"), b"line 1\n");
        assert_eq!(f.next(1, b"line 1\n"), b"");
        assert_eq!(f.next(1, b"line 1\nline 2\n"), b"line 2\n");
        // Repeated lines under the window are exact.
        let mut f = Follow::default();
        assert_eq!(f.next(1, b"x\n"), b"x\n");
        assert_eq!(f.next(1, b"x\nx\nx\n"), b"x\nx\n");
    }

    #[test]
    fn a_new_attempt_starts_over() {
        let mut f = Follow::default();
        assert_eq!(f.next(1, b"first try\n"), b"first try\n");
        assert_eq!(f.next(2, b""), b"");
        assert_eq!(f.next(2, b"first"), b"first");
        assert_eq!(f.next(3, b"first try\n"), b"first try\n");
    }

    #[test]
    fn a_sliding_window_shows_what_was_added() {
        let stream: Vec<u8> = (0..200u32)
            .flat_map(|i| format!("line {i}\n").into_bytes())
            .collect();
        let window = 300;
        let mut f = Follow::default();
        let mut shown = Vec::new();
        let ends = (1..)
            .map(|k| k * 137)
            .take_while(|&e| e < stream.len())
            .chain([stream.len(), stream.len()]);
        for end in ends {
            let cur = &stream[end.saturating_sub(window)..end];
            shown.extend_from_slice(f.next(1, cur));
        }
        assert_eq!(shown, stream);
    }

    #[test]
    fn more_than_a_window_between_looks_shows_the_latest_window() {
        let mut f = Follow::default();
        assert_eq!(f.next(1, b"abcdef"), b"abcdef");
        assert_eq!(f.next(1, b"uvwxyz"), b"uvwxyz");
    }

    #[test]
    fn overlap_is_the_longest_end_that_begins_the_next() {
        assert_eq!(overlap(b"abcab", b"abx"), 2);
        assert_eq!(overlap(b"aaaa", b"aab"), 2);
        assert_eq!(overlap(b"abc", b"abc"), 3);
        assert_eq!(overlap(b"xabc", b"abc"), 3);
        assert_eq!(overlap(b"abc", b"d"), 0);
        assert_eq!(overlap(b"", b"d"), 0);
        assert_eq!(overlap(b"d", b""), 0);
        // A 64 KiB window of one repeated byte: linear, not quadratic.
        let big = vec![b'x'; 64 * 1024];
        assert_eq!(overlap(&big, &big), big.len());
        let mut shifted = big[1..].to_vec();
        shifted.push(b'y');
        assert_eq!(overlap(&big, &shifted), big.len() - 1);
    }
}
