use super::*;

fn bad_line(text: &[u8]) -> (usize, BadLine) {
    match lines(text) {
        Err(BadBatch::Line { number, why }) => (number, why),
        other => panic!("{text:?}: {other:?}"),
    }
}

#[test]
fn each_line_is_a_run_and_its_tabs_split_its_arguments() {
    assert_eq!(lines(b"a\tb\nc\n").unwrap(), ["a\tb", "c"]);
    // The last line's newline is optional; nothing else is special.
    assert_eq!(lines(b"a\tb\nc").unwrap(), ["a\tb", "c"]);
    // Empty fields are arguments too: two tabs in a row, a tab at the end.
    assert_eq!(lines(b"a\t\tb\t\n").unwrap(), ["a\t\tb\t"]);
    assert_eq!(lines(b"\t\n").unwrap(), ["\t"]);
    // Spaces, quotes, backslashes, other control characters: as they are.
    assert_eq!(
        lines("x y\t'\"\\n\x1b é\n".as_bytes()).unwrap(),
        ["x y\t'\"\\n\x1b é"]
    );
}

#[test]
fn a_bad_line_is_named_by_its_number() {
    assert_eq!(bad_line(b"a\n\nb\n"), (2, BadLine::Empty));
    assert_eq!(bad_line(b"\n"), (1, BadLine::Empty));
    // A trailing newline is the last line's end; a second is an empty line.
    assert_eq!(bad_line(b"a\n\n"), (2, BadLine::Empty));
    assert_eq!(bad_line(b"a\r\nb\r\n"), (1, BadLine::Cr));
    assert_eq!(bad_line(b"a\nb\rc\n"), (2, BadLine::Cr));
    assert_eq!(bad_line(b"a\nb\nc\0\n"), (3, BadLine::Nul));
    assert_eq!(bad_line(b"ok\n\xff\xfe\n"), (2, BadLine::NotUtf8));
    // A character cut in two is not UTF-8 either.
    assert_eq!(
        bad_line("é".as_bytes().split_at(1).0),
        (1, BadLine::NotUtf8)
    );
}

#[test]
fn a_line_is_bounded_in_bytes_and_fields() {
    let long = "x".repeat(MAX_LINE_BYTES);
    assert_eq!(lines(long.as_bytes()).unwrap().len(), 1);
    let over = format!("ok\n{long}y\n");
    assert_eq!(bad_line(over.as_bytes()), (2, BadLine::TooLong));
    let most = vec!["f"; MAX_FIELDS].join("\t");
    assert_eq!(lines(most.as_bytes()).unwrap().len(), 1);
    let more = vec![""; MAX_FIELDS + 1].join("\t");
    assert_eq!(bad_line(more.as_bytes()), (1, BadLine::TooManyFields));
}

#[test]
fn a_batch_is_bounded_in_lines_and_bytes() {
    let most = "1\n".repeat(MAX_LINES);
    assert_eq!(lines(most.as_bytes()).unwrap().len(), MAX_LINES);
    let more = "1\n".repeat(MAX_LINES + 1);
    assert_eq!(lines(more.as_bytes()), Err(BadBatch::TooManyLines));
    assert_eq!(lines(&vec![b'x'; MAX_BYTES + 1]), Err(BadBatch::TooBig));
    assert_eq!(lines(b""), Err(BadBatch::NoLines));
}

#[test]
fn refusals_name_the_source_the_line_and_the_bound() {
    assert_eq!(
        BadBatch::Line {
            number: 7,
            why: BadLine::Nul
        }
        .said("runs.tsv"),
        "runs.tsv:7: a NUL byte (Postgres can't store it): nothing queued"
    );
    let said = BadBatch::TooManyLines.said("stdin");
    assert!(said.starts_with("stdin: more than 100000 lines"), "{said}");
    let said = BadBatch::TooBig.said("f");
    assert!(said.contains("64 MiB"), "{said}");
    let said = BadLine::TooLong.to_string();
    assert!(said.contains("65536 bytes"), "{said}");
}

#[test]
fn the_batch_is_its_id_range_but_for_others_ids_in_it() {
    let b = Batch::of("p", &[3, 4, 7, 8, 10]);
    assert_eq!((b.first, b.last), (3, 10));
    assert_eq!(b.gaps, [5, 6, 9]);
    let b = Batch::of("p", &[5]);
    assert_eq!((b.first, b.last, b.gaps.len()), (5, 5, 0));
}

#[test]
fn wait_succeeds_only_when_every_run_did() {
    assert!(outcome(3, 3, 3, &[]).is_ok());
    let f = outcome(3, 3, 2, &[(5, "failed".into())]).unwrap_err();
    assert_eq!(f.code, 1);
    assert_eq!(
        f.lines().collect::<Vec<_>>(),
        ["orca: 1 of 3 runs did not succeed: 5 failed"]
    );
    let bad: Vec<(i64, String)> = (1..=5).map(|i| (i, "cancelled".into())).collect();
    let f = outcome(10, 10, 3, &bad).unwrap_err();
    assert!(
        f.lines().next().unwrap().ends_with("5 cancelled, ..."),
        "{f:?}"
    );
    // A run pruned before it was looked at is not counted a success.
    let f = outcome(3, 2, 2, &[]).unwrap_err();
    assert!(f.lines().next().unwrap().contains("1 run gone"), "{f:?}");
}

#[test]
fn a_big_batch_is_looked_at_less_often() {
    assert_eq!(pace(1), POLL);
    assert_eq!(pace(19_999), POLL);
    assert_eq!(pace(MAX_LINES), std::time::Duration::from_secs(3));
    assert!(pace(usize::MAX / 2) <= std::time::Duration::from_secs(5));
}
