//! Text from the database made safe to print on one line of a terminal.
//!
//! A run's `why` and `host` may be written by a machine orca doesn't trust
//! (a compromised worker), so the human listings (`orca runs`, `orca
//! events`, `orca run --wait`'s last line) show control characters escaped:
//! no escape sequence reaches the operator's terminal and no newline forges
//! a row. `--json` escapes by itself, and `orca logs` prints a run's output
//! as it is, by design.

use std::borrow::Cow;
use std::fmt::Write;

/// `text` with every control character (C0, DEL, C1) and every bidirectional
/// override or isolate escaped: `\n`, `\r`, `\t`, else `\xHH` (`\u{HHHH}`
/// beyond one byte). Text with none is returned as it is.
pub fn line(text: &str) -> Cow<'_, str> {
    if !text.chars().any(hostile) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if hostile(c) && (c as u32) < 0x100 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if hostile(c) => {
                let _ = write!(out, "\\u{{{:04x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Whether `c` may not reach a terminal as it is.
fn hostile(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_left_as_it_is() {
        for s in ["", "orca run by ann@box", "exit 3", "déjà vu ✓", "a\\nb"] {
            assert!(matches!(line(s), Cow::Borrowed(_)), "{s}");
            assert_eq!(line(s), s);
        }
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(line("\u{1b}[31mred\u{1b}[0m"), "\\x1b[31mred\\x1b[0m");
        assert_eq!(line("one\ntwo\r\tthree"), "one\\ntwo\\r\\tthree");
        assert_eq!(
            line("bell\u{7} del\u{7f} nul\0"),
            "bell\\x07 del\\x7f nul\\x00"
        );
        // C1: the one-byte CSI.
        assert_eq!(line("\u{9b}31m"), "\\x9b31m");
        // Bidirectional overrides would reorder what follows.
        assert_eq!(line("a\u{202e}b\u{2066}"), "a\\u{202e}b\\u{2066}");
        // What comes out has no control character left.
        let all: String = (0u32..0x3000).filter_map(char::from_u32).collect();
        assert!(!line(&all).chars().any(hostile));
    }
}
