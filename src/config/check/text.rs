//! A config file as text: read within its bound, a problem's line found
//! in a table of line starts, and the problems said as `file:LINE: message`
//! lines (each one line, the first [`MAX_PROBLEMS_SHOWN`] of them).

use std::io::Read;

/// The largest config file read (1 MiB); a larger one is refused.
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// Problems printed at most; the rest are counted in one more line.
pub const MAX_PROBLEMS_SHOWN: usize = 100;

/// A problem found in the file, on a line.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// The text of `path`, read up to `limit` bytes and one more: a file (or a
/// device, or a pipe) that has more is refused without reading the rest.
pub fn read_limited(path: &str, limit: u64) -> Result<String, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{path}: {e}"))?;
    if bytes.len() as u64 > limit {
        return Err(format!(
            "{path}: over {}, the most a config file may hold: refused",
            size(limit as usize)
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "{path}: not UTF-8 text (at byte {})",
            e.utf8_error().valid_up_to()
        )
    })
}

/// The lines that say `problems` of file `path`: the first `max` as
/// `path:LINE: message` (control characters escaped, so each stays one
/// line), then how many more there are, if any.
pub fn shown(path: &str, problems: &[Problem], max: usize) -> Vec<String> {
    let mut lines: Vec<String> = problems
        .iter()
        .take(max)
        .map(|p| format!("{path}:{}: {}", p.line, one_line(&p.message)))
        .collect();
    if problems.len() > max {
        lines.push(format!(
            "{path}: ... and {}",
            crate::plural::count((problems.len() - max) as i64, "more problem")
        ));
    }
    lines
}

/// `s` with its control characters (a NUL, a newline) escaped as `\u{0}`.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// `n` bytes for people: `64 KiB`, `1 MiB`.
pub(super) fn size(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1024 && n.is_multiple_of(1024) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

/// Where each line of `text` starts (the first at 0), for [`line_of`].
pub fn line_starts(text: &str) -> Vec<usize> {
    std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect()
}

/// The 1-based line of byte `offset`, given the text's [`line_starts`].
pub fn line_of(starts: &[usize], offset: usize) -> usize {
    starts.partition_point(|&s| s <= offset).max(1)
}
