//! `make demo` (`scripts/demo.sh`) as a test: it shows the builders pool's
//! type/location walk, a machine made, builds run on it, the machine removed
//! after `idle_seconds`, and it ends with no run running and no live
//! machine. One run (about a minute), with the scheduler part shortened.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::{Proc, TempDir, admin_url, bin, connect};

/// The demo's database, dropped at the end (and what its machines left).
struct DemoDb {
    name: String,
}

impl Drop for DemoDb {
    fn drop(&mut self) {
        let mut c = connect(&admin_url());
        let _ = c.batch_execute(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ));
    }
}

/// The line of `out` that contains `what`, else a panic showing `out`.
fn line_with<'a>(out: &'a str, what: &str) -> (usize, &'a str) {
    out.lines()
        .enumerate()
        .find(|(_, l)| l.contains(what))
        .unwrap_or_else(|| panic!("the demo's output has no line with {what:?}:\n{out}"))
}

#[test]
fn the_demo_shows_the_pool_walk_grow_and_shrink_and_ends_clean() {
    let db = DemoDb {
        name: format!("orca_demo_t_{}", std::process::id()),
    };
    let dir = TempDir::new();
    let mut cmd = Command::new("bash");
    cmd.arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/demo.sh"))
        .env("ORCA_BIN", bin())
        .env("ORCA_DEMO_DATABASE", &db.name)
        .env("ORCA_DEMO_SECONDS", "30")
        .env_remove("RUST_LOG");
    let mut demo = Proc::spawn(cmd, &dir.path("demo.log"));
    // Its own deadlines are well within this one (the scheduler part runs
    // at most 90 s, the wind-down at most 90 s).
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(s) = demo.child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() >= deadline {
            // SIGTERM: its clean-up ends the scheduler and the machines.
            demo.signal(libc::SIGTERM);
            let _ = demo.wait(60.0);
            panic!("the demo did not end within 300 s:\n{}", demo.output());
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let out = demo.output();
    assert!(status.success(), "the demo failed ({status:?}):\n{out}");

    // The walk, in words: big has no room in rack-a nor rack-b, is kept
    // for its wait, then small is made in rack-b.
    let (walk, _) = line_with(
        &out,
        "pool builders: no room for big in rack-a: rack-a is full (0 of 0); trying rack-b",
    );
    line_with(
        &out,
        "pool builders: no room for big in rack-b: big@rack-b is full (0 of 0); no location left",
    );
    let (kept, _) = line_with(
        &out,
        "pool builders: big unavailable in every location; waited ",
    );
    assert!(
        out.contains("of its 10 s wait; trying it again"),
        "big was not kept for its wait:\n{out}"
    );
    let (moved, line) = line_with(&out, "of its 10 s wait; moving to small");
    let waited: u32 = line
        .split("waited ")
        .nth(1)
        .and_then(|w| w.split(' ').next())
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no seconds waited in {line:?}"));
    assert!(waited >= 10, "big given up after {waited} s: {line}");
    let (made, line) = line_with(&out, "pool builders: made machine orca-builders-");
    assert!(line.ends_with("(small in rack-b)"), "{line}");
    let machine = line
        .split("made machine ")
        .nth(1)
        .and_then(|m| m.split(' ').next())
        .unwrap()
        .to_string();
    assert!(
        walk < kept && kept < moved && moved < made,
        "out of order:\n{out}"
    );

    // Builds ran on it; then, build paused, it was removed once idle.
    let (ran, _) = line_with(&out, &format!("attempt 1 on machine {machine}"));
    let (paused, _) = line_with(&out, "build paused");
    let (removing, line) = line_with(
        &out,
        &format!("pool builders: removing machine {machine}: "),
    );
    assert!(
        line.contains(": idle for ") && line.ends_with("with no demand (idle_seconds 20)"),
        "{line}"
    );
    let (removed, _) = line_with(&out, &format!("pool builders: machine {machine} removed"));
    assert!(
        made < ran && ran < paused && paused < removing && removing < removed,
        "out of order:\n{out}"
    );

    // The cryptic line is not said at info; no token (`ROLE:SECRET`) is.
    assert!(!out.contains("dropped role"), "{out}");
    for (at, _) in out.match_indices("orca_m_") {
        let rest = out[at..].trim_start_matches(|c: char| c.is_ascii_alphanumeric() || c == '_');
        let secret = rest
            .strip_prefix(':')
            .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_hexdigit()));
        assert!(!secret, "a token in the output:\n{out}");
    }

    // It ends consistent: the final `orca pools` lists no machine, the
    // final `orca runs` no run running, and the script says so last.
    let (pools, _) = line_with(&out, "== orca pools");
    let (runs, _) = line_with(&out, "== orca runs");
    assert!(pools < runs, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    for l in &lines[pools..runs] {
        for state in [" booting ", " idle ", " busy ", " silent ", " removing "] {
            assert!(!l.contains(state), "a live machine at the end: {l}\n{out}");
        }
    }
    // The sensor saw the file the demo dropped in its own folder.
    assert!(
        lines[runs..]
            .iter()
            .any(|l| l.contains(" watcher ") && l.contains(" succeeded ")),
        "no watcher run succeeded:\n{out}"
    );
    for l in &lines[runs..] {
        assert!(
            !l.contains(" running "),
            "a run running at the end: {l}\n{out}"
        );
    }
    assert_eq!(
        lines.last(),
        Some(&"== done: no run running, no live machine"),
        "{out}"
    );
}
