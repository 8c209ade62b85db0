//! A command's output as a supervisor keeps it ([`Tail`]): the last
//! [`TAIL_BYTES`] of its stdout and stderr, interleaved, and where they are
//! in everything it wrote. The output thread ([`super::output`]) writes it;
//! beats and ends read it.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::Ordering;

/// How much of a run's output is kept: the last 64 KiB.
pub const TAIL_BYTES: usize = 64 * 1024;

/// The last [`TAIL_BYTES`] of a child's stdout and stderr, interleaved, and
/// where they are in everything it wrote (its output stream).
#[derive(Default)]
pub struct Tail {
    kept: Mutex<Kept>,
    /// The pipe reached its end: every writer is gone, all is read.
    pub(super) done: std::sync::atomic::AtomicBool,
}

/// What a [`Tail`] holds.
#[derive(Default)]
struct Kept {
    /// The last bytes of the stream, at most [`TAIL_BYTES`].
    bytes: VecDeque<u8>,
    /// How many bytes the stream has had in all.
    total: u64,
}

impl Tail {
    /// Keeps `data`, which the child wrote next.
    pub(super) fn push(&self, data: &[u8]) {
        let mut kept = self.kept.lock().expect("tail lock");
        kept.bytes.extend(data);
        kept.total += data.len() as u64;
        let excess = kept.bytes.len().saturating_sub(TAIL_BYTES);
        kept.bytes.drain(..excess);
    }

    /// A copy of what is kept now.
    pub fn snapshot(&self) -> Vec<u8> {
        let kept = self.kept.lock().expect("tail lock");
        kept.bytes.iter().copied().collect()
    }

    /// How many bytes the child has written so far: where its stream ends.
    pub fn total(&self) -> u64 {
        self.kept.lock().expect("tail lock").total
    }

    /// What follows byte `from` of the stream, as much of it as is kept:
    /// where that begins in the stream (`from`, or later when more than
    /// what is kept came since), and the bytes.
    pub fn since(&self, from: u64) -> (u64, Vec<u8>) {
        let kept = self.kept.lock().expect("tail lock");
        let first = kept.total - kept.bytes.len() as u64;
        let at = from.clamp(first, kept.total);
        let skip = (at - first) as usize;
        (at, kept.bytes.iter().skip(skip).copied().collect())
    }

    /// Waits, at most `limit`, until everything written to the pipe has
    /// been read (its writers are gone once the command and what it left
    /// behind have ended, so this is at once but for the reading thread's
    /// turn). True if it has.
    pub fn drained(&self, limit: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        while !self.done.load(Ordering::Acquire) {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_says_what_followed_a_byte_of_its_stream() {
        let t = Tail::default();
        t.push(b"hello ");
        t.push(b"world");
        assert_eq!(t.total(), 11);
        assert_eq!(t.since(0), (0, b"hello world".to_vec()));
        assert_eq!(t.since(6), (6, b"world".to_vec()));
        assert_eq!(t.since(11), (11, Vec::new()));
        assert_eq!(t.since(99), (11, Vec::new()));
        // More than is kept came since: what is kept, from where it begins.
        t.push(&vec![0; TAIL_BYTES + 100]);
        let total = 11 + TAIL_BYTES as u64 + 100;
        assert_eq!(t.total(), total);
        let (at, bytes) = t.since(5);
        assert_eq!(at, total - TAIL_BYTES as u64);
        assert_eq!(bytes, vec![0; TAIL_BYTES]);
        assert_eq!(t.snapshot(), bytes);
    }
}
