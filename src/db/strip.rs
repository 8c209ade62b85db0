//! What of a `.sql` file goes into the binary: the file without its
//! whole-line comments (`-- …` lines outside string literals; over a
//! hundred kilobytes of the embedded SQL was comment). Marker lines
//! (`-- orca:…`, such as [`super::FLOOR_MARKER`]) stay, and so does every
//! line of code, its trailing comments too. Used by `build.rs`, which
//! writes the stripped files that [`super::sql`] and the migrations embed;
//! pure, and unit-tested here.

/// `text` without its whole-line comments (see the module's doc).
pub fn strip_sql(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    // Whether a single-quoted literal is open at the start of the line.
    let mut quoted = false;
    for line in text.split_inclusive('\n') {
        let lead = line.trim_start();
        if !quoted && lead.starts_with("--") && !lead.starts_with("-- orca:") {
            continue;
        }
        quoted = quoted_after(line, quoted);
        out.push_str(line);
    }
    out
}

/// Whether a single-quoted literal is open after `line`, given whether one
/// was before it: quotes toggle it (a doubled quote toggles twice), and
/// `--` outside a literal ends the line's code.
fn quoted_after(line: &str, mut quoted: bool) -> bool {
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => quoted = !quoted,
            '-' if !quoted && chars.peek() == Some(&'-') => break,
            _ => {}
        }
    }
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_line_comments_go_and_code_markers_and_literals_stay() {
        let sql = "-- What it does.\n  -- indented\nSELECT 1; -- trailing stays\n\
                   -- orca:raises-floor\nSELECT 'a\n-- inside a literal\nb' -- it's\n\
                   -- after\nSELECT $$\n    -- in a body\n    RETURN 1;\n$$;\n";
        assert_eq!(
            strip_sql(sql),
            "SELECT 1; -- trailing stays\n-- orca:raises-floor\nSELECT 'a\n-- inside a literal\n\
             b' -- it's\nSELECT $$\n    RETURN 1;\n$$;\n"
        );
    }

    #[test]
    fn doubled_quotes_keep_a_literal_open_or_closed() {
        assert!(!quoted_after("SELECT 'it''s'", false));
        assert!(quoted_after("SELECT 'it''s", false));
        assert!(!quoted_after("x -- 'open?", false));
        assert!(!quoted_after("still', 'done'", true));
    }
}
