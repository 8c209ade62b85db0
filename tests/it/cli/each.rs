//! `orca run P --each FILE`: one run per line, all queued or none, a bad
//! line named by its number, the batch's bounds, and `--wait` on them all.

use std::io::Write;
use std::process::{Output, Stdio};

use super::Running;
use crate::harness::*;

/// `orca ARGS` with `input` on its standard input, waited for.
fn piped(db: &TestDb, args: &[&str], input: &[u8]) -> Output {
    let mut child = db
        .orca(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its reader may refuse before reading it all (a bound): not an error.
    let _ = child.stdin.take().unwrap().write_all(input);
    child.wait_with_output().unwrap()
}

fn runs_of(db: &TestDb, pipeline: &str) -> i64 {
    db.client()
        .query_one(
            "SELECT count(*) FROM orca.runs WHERE pipeline = $1",
            &[&pipeline],
        )
        .unwrap()
        .get(0)
}

/// Each line's run has its fields as arguments, the ids follow the lines,
/// each run has its `queued` event naming its line, and the plain output
/// is the first and last id.
#[test]
fn each_line_is_a_run_with_its_fields_as_arguments_in_order() {
    let (db, dir) = setup("[pipelines.p]\ncommand = \"true\"\n");
    let file = dir.write("runs.tsv", "a\tb c\nx\n\tlast\t\nd\x1b'\"\\\n");
    let json = db.ok(&["run", "p", "--each", &file, "--json"]);
    let ids: Vec<i64> = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(ids.len(), 4, "{json}");
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids follow the lines: {ids:?}"
    );
    let want: [&[&str]; 4] = [&["a", "b c"], &["x"], &["", "last", ""], &["d\x1b'\"\\"]];
    let mut c = db.client();
    for (i, (id, args)) in ids.iter().zip(want).enumerate() {
        let row = c
            .query_one(
                "SELECT args, fill, state FROM orca.runs WHERE id = $1",
                &[id],
            )
            .unwrap();
        assert_eq!(row.get::<_, Vec<String>>(0), args, "line {}", i + 1);
        assert!(!row.get::<_, bool>(1));
        assert_eq!(row.get::<_, String>(2), "queued");
        let why: String = c
            .query_one(
                "SELECT why FROM orca.events WHERE run = $1 AND kind = 'queued'",
                &[id],
            )
            .unwrap()
            .get(0);
        assert!(why.ends_with(&format!(", line {}", i + 1)), "{why}");
    }
    // Without --json: the first and last id, one line; --fill reaches each.
    let out = db.ok(&["run", "p", "--fill", "--each", &file]);
    let (first, last) = out.trim().split_once(' ').expect("first and last");
    let (first, last): (i64, i64) = (first.parse().unwrap(), last.parse().unwrap());
    assert_eq!(last - first, 3, "{out}");
    let fills: i64 = db.one(&format!(
        "SELECT count(*) FROM orca.runs WHERE fill AND id BETWEEN {first} AND {last}"
    ));
    assert_eq!(fills, 4);
    assert_eq!(runs_of(&db, "p"), 8);
}

#[test]
fn each_reads_standard_input_given_as_a_dash() {
    let (db, _dir) = setup("[pipelines.p]\ncommand = \"true\"\n");
    let out = piped(&db, &["run", "p", "--each", "-", "--json"], b"1\n2\n3");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ids: Vec<i64> = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    let args: Vec<Vec<String>> = ids
        .iter()
        .map(|id| {
            db.client()
                .query_one("SELECT args FROM orca.runs WHERE id = $1", &[id])
                .unwrap()
                .get(0)
        })
        .collect();
    assert_eq!(args, [["1"], ["2"], ["3"]]);
}

/// Every kind of bad line, among good ones: exit 2, one line naming it
/// by its number, and no run queued (all or none).
#[test]
fn a_bad_line_is_named_by_its_number_and_nothing_is_queued() {
    let (db, _dir) = setup("[pipelines.p]\ncommand = \"true\"\n");
    let long = "x".repeat(65_537);
    let fields = vec!["f"; 257].join("\t");
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"a\n\nb\n".to_vec(), "stdin:2: an empty line"),
        (b"a\nb\n\n".to_vec(), "stdin:3: an empty line"),
        (b"a\r\nb\r\n".to_vec(), "stdin:1: a carriage return"),
        (b"a\nb\0c\n".to_vec(), "stdin:2: a NUL byte"),
        (b"a\nb\n\xff\n".to_vec(), "stdin:3: not UTF-8"),
        (
            format!("a\n{long}\n").into_bytes(),
            "stdin:2: over 65536 bytes",
        ),
        (
            format!("a\nb\nc\n{fields}\n").into_bytes(),
            "stdin:4: more than 256 tab-separated fields",
        ),
        (Vec::new(), "stdin: no lines"),
    ];
    for (input, said) in cases {
        let out = piped(&db, &["run", "p", "--each", "-"], &input);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{said}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with(&format!("orca: {said}")), "{said}: {err}");
        assert!(err.trim_end().ends_with("nothing queued"), "{err}");
        assert!(text(&out.stdout).is_empty());
    }
    assert_eq!(runs_of(&db, "p"), 0, "nothing queued");
    assert_eq!(db.events_of_kind("queued"), 0);
}

/// What isn't a batch of a known pipeline: exit 2, nothing queued.
#[test]
fn each_is_refused_with_arguments_an_unknown_pipeline_or_a_missing_file() {
    let (db, dir) =
        setup("[pipelines.p]\ncommand = \"true\"\n[pipelines.old]\ncommand = \"true\"\n");
    db.register(&dir, "[pipelines.p]\ncommand = \"true\"\n");
    let file = dir.write("runs.tsv", "a\n");
    for (args, said) in [
        (
            vec!["run", "p", "--each", &file, "--", "x"],
            "cannot be used with",
        ),
        (vec!["run", "p", "--json"], "--each"),
        (
            vec!["run", "nope", "--each", &file],
            "unknown pipeline: nope",
        ),
        (
            vec!["run", "old", "--each", &file],
            "pipeline old is retired",
        ),
        (
            vec!["run", "p", "--each", "/nonexistent/runs.tsv"],
            "/nonexistent/runs.tsv: No such file",
        ),
        (
            vec!["run", "p", "--each", &dir.0.to_string_lossy()],
            "directory",
        ),
    ] {
        let out = db.run(&args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(said), "{args:?}: {err}");
    }
    assert_eq!(db.one::<i64>("SELECT count(*) FROM orca.runs"), 0);
}

/// The batch's bounds: 100,000 lines are queued in one go (every run and
/// its event), one more line is refused, as is a file over 64 MiB.
#[test]
fn a_batch_of_100000_is_queued_in_one_go_and_its_bounds_are_refused() {
    let (db, dir) = setup("[pipelines.p]\ncommand = \"true\"\n");
    let most: String = (1..=100_000).map(|i| format!("{i}\tx\n")).collect();
    let file = dir.write("most.tsv", &most);
    let out = db.ok(&["run", "p", "--each", &file]);
    let (first, last) = out.trim().split_once(' ').expect("first and last");
    let (first, last): (i64, i64) = (first.parse().unwrap(), last.parse().unwrap());
    assert_eq!(runs_of(&db, "p"), 100_000);
    assert_eq!(last - first, 99_999, "nothing else queued meanwhile");
    assert_eq!(db.events_of_kind("queued"), 100_000);
    let (a, b): (Vec<String>, Vec<String>) = {
        let mut c = db.client();
        let get = |c: &mut postgres::Client, id: i64| -> Vec<String> {
            c.query_one("SELECT args FROM orca.runs WHERE id = $1", &[&id])
                .unwrap()
                .get(0)
        };
        (get(&mut c, first), get(&mut c, last))
    };
    assert_eq!(
        (a, b),
        (
            vec!["1".into(), "x".into()],
            vec!["100000".into(), "x".into()]
        )
    );

    let over = dir.write("over.tsv", &format!("{most}100001\tx\n"));
    let out = db.run(&["run", "p", "--each", &over]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("more than 100000 lines"), "{err}");

    // 64 MiB and a byte, in lines well within their own bound.
    let line = format!("{}\n", "y".repeat(1023));
    let big = line.repeat(64 * 1024) + "z";
    let big = dir.write("big.tsv", &big);
    let out = db.run(&["run", "p", "--each", &big]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("over 64 MiB"), "{err}");
    assert_eq!(runs_of(&db, "p"), 100_000, "nothing more queued");
}

/// `--wait` waits for every run of the batch, after its retries: exit 0
/// when all succeeded, 1 naming the one that failed.
#[test]
fn each_wait_exits_1_when_any_run_failed_and_0_when_all_succeeded() {
    let (db, dir) =
        setup("[pipelines.p]\ncommand = \"exit $1\"\nmax_runs = 4\nretries = 1\nretry_delay = 0\n");
    let mut s = db.scheduler(&dir, &[]);
    let good = dir.write("good.tsv", &"0\n".repeat(6));
    let mut all = Running::start(&db, &dir, &["run", "p", "--each", &good, "--wait"]);
    let status = all.wait(120.0);
    assert!(status.success(), "{status:?}: {}", all.stderr());
    assert_eq!(
        db.one::<i64>("SELECT count(*) FROM orca.runs WHERE state = 'succeeded'"),
        6
    );

    let mixed = dir.write("mixed.tsv", "0\n0\n3\n0\n");
    let mut one = Running::start(
        &db,
        &dir,
        &["run", "p", "--each", &mixed, "--wait", "--json"],
    );
    let status = one.wait(120.0);
    let err = one.stderr();
    assert_eq!(status.code(), Some(1), "{err}");
    let ids: Vec<i64> = serde_json::from_str(one.stdout().trim()).unwrap();
    // It waited for all of them, the failing one through its retry.
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(
            db.state(*id),
            if i == 2 { "failed" } else { "succeeded" },
            "line {}",
            i + 1
        );
    }
    let attempts: i32 = db.one(&format!(
        "SELECT start FROM orca.runs WHERE id = {}",
        ids[2]
    ));
    assert_eq!(attempts, 2, "its retry ran before the wait ended");
    assert_eq!(
        err.trim_end(),
        format!("orca: 1 of 4 runs did not succeed: {} failed", ids[2])
    );
    s.stop();
}

/// A paused pipeline's batch is queued and said to wait; `--wait`
/// interrupted by Ctrl-C (a real SIGINT) leaves the runs queued and says
/// so, exit 130.
#[test]
fn each_wait_of_a_paused_pipeline_says_so_and_ctrl_c_leaves_the_runs() {
    let (db, dir) = setup("[pipelines.p]\ncommand = \"true\"\n");
    db.ok(&["pause", "p"]);
    let file = dir.write("runs.tsv", "1\n2\n");
    let log = dir.path("wait.log");
    let mut w = Proc::spawn(db.orca(&["run", "p", "--each", &file, "--wait"]), &log);
    w.wait_for("the batch is said to wait", 30.0, || {
        text(&std::fs::read(&log).unwrap_or_default())
            .contains("orca: pipeline p is paused: its 2 runs wait for `orca resume p`")
    });
    w.signal(libc::SIGINT);
    let status = w.wait(30.0);
    let out = w.output();
    assert_eq!(status.code(), Some(130), "{out}");
    assert!(out.contains("interrupted: the runs go on"), "{out}");
    assert_eq!(
        db.one::<i64>("SELECT count(*) FROM orca.runs WHERE state = 'queued'"),
        2,
        "the runs go on"
    );
}
