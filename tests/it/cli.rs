//! The one-shot commands: migrate, check, register, run, runs, logs, events,
//! cancel, pause, and how they fail.

use crate::harness::*;

mod each;
mod follow;
mod input;
mod login;

#[test]
fn migrate_twice_and_concurrently() {
    let db = TestDb::empty_on(&admin_url());
    let procs: Vec<_> = (0..4)
        .map(|_| db.orca(&["migrate"]).output_handle())
        .collect();
    for p in procs {
        let out = p.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let known = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/sql/migrations"))
        .unwrap()
        .count() as i64;
    let applied: i64 = db.one("SELECT count(*) FROM orca.migrations");
    assert_eq!(applied, known, "each migration recorded once");
    let again = db.ok(&["migrate"]);
    assert!(again.contains("nothing to apply"), "{again}");
    assert_eq!(db.one::<i64>("SELECT count(*) FROM orca.migrations"), known);
}

trait OutputHandle {
    fn output_handle(&mut self) -> std::process::Child;
}

impl OutputHandle for std::process::Command {
    fn output_handle(&mut self) -> std::process::Child {
        self.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }
}

#[test]
fn register_upserts_and_retires() {
    let (db, dir) = setup(
        "[pipelines.a]\ncommand = \"true\"\n[pipelines.b]\ncommand = \"true\"\nmax_runs = 3\n",
    );
    let id = db.queue("b");
    db.register(&dir, "[pipelines.a]\ncommand = \"echo changed\"\n");
    let retired: bool = db.one("SELECT retired FROM orca.pipelines WHERE name = 'b'");
    assert!(retired);
    // Its history stays; it takes no new runs.
    assert_eq!(db.state(id), "queued");
    let out = db.run(&["run", "b"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("retired"));
    let spec: serde_json::Value = db.one("SELECT spec FROM orca.pipelines WHERE name = 'a'");
    assert_eq!(spec["command"], "echo changed");
    // Back in the file: live again.
    db.register(
        &dir,
        "[pipelines.a]\ncommand = \"true\"\n[pipelines.b]\ncommand = \"true\"\n",
    );
    assert!(!db.one::<bool>("SELECT retired FROM orca.pipelines WHERE name = 'b'"));
}

#[test]
fn runs_logs_events_cancel_pause() {
    let (db, _dir) = setup("[pipelines.a]\ncommand = \"true\"\n");
    let fill_out = db.ok(&["run", "a", "--fill", "--", "x", "y z"]);
    let id: i64 = fill_out.trim().parse().unwrap();
    let json: serde_json::Value = serde_json::from_str(&db.ok(&["runs", "--json"])).unwrap();
    assert_eq!(json[0]["id"], id);
    assert_eq!(json[0]["state"], "queued");
    assert_eq!(json[0]["fill"], true);
    assert_eq!(json[0]["args"], serde_json::json!(["x", "y z"]));
    let table = db.ok(&["runs", "--pipeline", "a", "--state", "queued"]);
    assert!(table.lines().nth(1).unwrap().contains("queued"), "{table}");

    assert_eq!(db.ok(&["pause", "a"]).trim(), "a paused");
    assert!(db.one::<bool>("SELECT paused FROM orca.pipelines WHERE name = 'a'"));
    assert_eq!(db.ok(&["resume", "a"]).trim(), "a resumed");

    assert!(db.ok(&["cancel", &id.to_string()]).contains("cancelled"));
    assert_eq!(db.state(id), "cancelled");
    let again = db.run(&["cancel", &id.to_string()]);
    assert_eq!(
        again.status.code(),
        Some(1),
        "cancelling an ended run is a 'no'"
    );

    let events = db.ok(&["events", "--run", &id.to_string()]);
    let kinds: Vec<&str> = events
        .lines()
        .map(|l| l.split_whitespace().nth(4).unwrap_or(""))
        .collect();
    assert!(
        kinds.contains(&"queued") && kinds.contains(&"cancelled"),
        "{events}"
    );
    let all: serde_json::Value = serde_json::from_str(&db.ok(&["events", "--json"])).unwrap();
    assert!(
        all.as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "paused")
    );
    // An empty log is printed as nothing.
    assert_eq!(db.ok(&["logs", &id.to_string()]), "");
}

/// `orca ARGS` with no database, its output; killed and failed after `secs`.
fn orca_within(args: &[&str], secs: f64) -> std::process::Output {
    orca_with_url(args, "postgres://nobody@127.0.0.1:1/none", secs)
}

/// `orca ARGS` with `ORCA_DATABASE_URL=url`; killed and failed after `secs`.
fn orca_with_url(args: &[&str], url: &str, secs: f64) -> std::process::Output {
    let mut child = std::process::Command::new(bin())
        .args(args)
        .env("ORCA_DATABASE_URL", url)
        .stdin(std::process::Stdio::null())
        .output_handle();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs_f64(secs);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("orca {args:?} did not finish within {secs}s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn every_listing_has_a_header_when_empty_and_its_json_is_an_array() {
    let db = TestDb::new();
    for (listing, header) in [
        ("runs", "ID"),
        ("events", "AT"),
        ("pools", "POOL"),
        ("schedulers", "ID"),
        ("instances", "ID"),
    ] {
        let shown = db.ok(&[listing]);
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(lines.len(), 1, "orca {listing}:\n{shown}");
        assert_eq!(
            lines[0].split_whitespace().next(),
            Some(header),
            "orca {listing}:\n{shown}"
        );
        let json: serde_json::Value = serde_json::from_str(&db.ok(&[listing, "--json"]))
            .unwrap_or_else(|e| panic!("orca {listing} --json: {e}"));
        assert_eq!(json, serde_json::json!([]), "orca {listing} --json");
    }
    // Not empty: still one array of objects each.
    let dir = TempDir::new();
    db.register(
        &dir,
        &crate::pools::with_pool("p", "[pipelines.a]\ncommand = \"true\"\n"),
    );
    db.queue("a");
    for listing in ["runs", "events", "pools"] {
        let json: serde_json::Value = serde_json::from_str(&db.ok(&[listing, "--json"])).unwrap();
        let items = json
            .as_array()
            .unwrap_or_else(|| panic!("{listing}: {json}"));
        assert!(
            !items.is_empty() && items.iter().all(|i| i.is_object()),
            "{listing}: {json}"
        );
    }
    let pools: serde_json::Value = serde_json::from_str(&db.ok(&["pools", "--json"])).unwrap();
    assert_eq!(pools[0]["pool"], "p");
    let shown = db.ok(&["pools"]);
    assert!(
        shown.lines().nth(1).unwrap().starts_with("p "),
        "a row for pool p:\n{shown}"
    );
}

#[test]
fn counts_are_singular_for_one() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let one = dir.write(
        "one.toml",
        &crate::pools::with_pool("p", "[pipelines.a]\ncommand = \"true\"\n"),
    );
    assert_eq!(
        db.ok(&["register", "-c", &one]).trim(),
        "registered 1 pipeline and 1 pool"
    );
    let two = dir.write(
        "two.toml",
        &format!(
            "{}{}[pipelines.b]\ncommand = \"true\"\n",
            crate::pools::with_pool("p", "[pipelines.a]\ncommand = \"true\"\n"),
            crate::pools::with_pool("q", "")
        ),
    );
    assert_eq!(
        db.ok(&["register", "-c", &two]).lines().next(),
        Some("registered 2 pipelines and 2 pools")
    );
    let none = dir.write("none.toml", "");
    assert_eq!(
        db.ok(&["register", "-c", &none]).lines().next(),
        Some("registered 0 pipelines and 0 pools")
    );
}

#[test]
fn deploy_check_with_no_scheduler_running_exits_0_and_says_so() {
    let db = TestDb::new();
    let out = db.run(&["deploy", "check"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim_end(),
        "no scheduler is running: nothing blocks a start"
    );
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
}

/// `orca ARGS` running with its stdout and stderr in files of their own.
struct Running {
    child: std::process::Child,
    out: std::path::PathBuf,
    err: std::path::PathBuf,
}

impl Running {
    fn start(db: &TestDb, dir: &TempDir, args: &[&str]) -> Running {
        let name = args.join("_").replace(['/', ' '], "_");
        let out = dir.path(&format!("{name}.out"));
        let err = dir.path(&format!("{name}.err"));
        let child = db
            .orca(args)
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        Running { child, out, err }
    }

    fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Its exit status, within `secs`.
    fn wait(&mut self, secs: f64) -> std::process::ExitStatus {
        let mut status = None;
        wait_until("the command exits", secs, || {
            status = self.child.try_wait().unwrap();
            status.is_some()
        });
        status.unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether a one-shot command's stderr shows a panic (Rust's 101).
fn panicked(out: &std::process::Output) -> bool {
    let err = text(&out.stderr);
    out.status.code() == Some(101) || err.contains("panicked") || err.contains("Broken pipe")
}

/// `orca ARGS` whose reader reads one line and goes (as `| head -1` does):
/// its output and the line read.
fn read_one_line_and_go(db: &TestDb, args: &[&str]) -> (std::process::Output, String) {
    use std::io::BufRead;
    let mut child = db.orca(args).output_handle();
    let mut line = String::new();
    {
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        out.read_line(&mut line).unwrap();
        // Dropped: the pipe's only reader is gone.
    }
    let mut status = None;
    wait_until("the command exits", 60.0, || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    (child.wait_with_output().unwrap(), line)
}

#[test]
fn a_listing_whose_reader_goes_ends_quietly() {
    let (db, _dir) = setup("[pipelines.a]\ncommand = \"true\"\n");
    // More than a pipe holds (64 KiB) and more than the reader buffers.
    db.client()
        .batch_execute(
            "INSERT INTO orca.runs (pipeline, why)
               SELECT 'a', repeat('x', 60) FROM generate_series(1, 3000);
             INSERT INTO orca.events (kind, pipeline, why)
               SELECT 'queued', 'a', repeat('y', 60) FROM generate_series(1, 3000);",
        )
        .unwrap();
    for args in [
        vec!["runs", "--limit", "3000"],
        vec!["events", "--limit", "3000"],
        vec!["runs", "--limit", "3000", "--json"],
        vec!["events", "--limit", "3000", "--json"],
    ] {
        let (out, line) = read_one_line_and_go(&db, &args);
        assert!(!line.is_empty(), "orca {args:?} printed nothing");
        assert!(
            !panicked(&out),
            "orca {args:?}: {:?}: {}",
            out.status,
            text(&out.stderr)
        );
        assert!(
            out.stderr.is_empty(),
            "orca {args:?}: {}",
            text(&out.stderr)
        );
    }
}

/// `orca --version` names the commit it was built from (this checkout's
/// HEAD: cargo builds it again when HEAD moves), or `unknown` outside git,
/// and the architecture it was built for (the tests' own).
#[test]
fn version_names_the_commit_it_was_built_from() {
    let out = orca_within(&["--version"], 20.0);
    assert!(out.status.success());
    let v = text(&out.stdout);
    let root = env!("CARGO_MANIFEST_DIR");
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(root)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| text(&o.stdout).trim().to_string());
    let want = format!(
        "orca {} ({}, {})\n",
        env!("CARGO_PKG_VERSION"),
        head.as_deref().unwrap_or("unknown"),
        std::env::consts::ARCH
    );
    assert_eq!(v, want);
}

#[test]
fn hostile_text_in_listings_is_escaped() {
    let (db, _dir) = setup("[pipelines.a]\ncommand = \"true\"\n");
    let id = db.queue("a");
    let hostile = "\u{1b}[31mred\nsecond line\u{7}";
    let mut c = db.client();
    c.execute(
        "UPDATE orca.runs SET why = $2 WHERE id = $1",
        &[&id, &hostile],
    )
    .unwrap();
    c.execute(
        "INSERT INTO orca.events (run, pipeline, kind, why) VALUES ($1, 'a', 'queued', $2)",
        &[&id, &hostile],
    )
    .unwrap();
    for listing in ["runs", "events"] {
        let shown = db.ok(&[listing]);
        assert!(
            !shown.contains('\u{1b}') && !shown.contains('\u{7}'),
            "orca {listing}: {shown:?}"
        );
        assert!(
            shown.contains("\\x1b[31mred\\nsecond line\\x07"),
            "orca {listing}: {shown:?}"
        );
        assert!(
            !shown.contains("\nsecond line"),
            "orca {listing}: {shown:?}"
        );
        // --json keeps the text as it is (JSON escapes it).
        let json: serde_json::Value = serde_json::from_str(&db.ok(&[listing, "--json"])).unwrap();
        assert!(
            json.as_array().unwrap().iter().any(|r| r["why"] == hostile),
            "orca {listing} --json: {json}"
        );
    }
}

#[test]
fn runs_shows_the_host_a_run_runs_on() {
    let (db, _dir) = setup("[pipelines.a]\ncommand = \"true\"\n");
    let queued = db.queue("a");
    let running = db.queue("a");
    db.client()
        .execute(
            "UPDATE orca.runs SET state = 'running', start = 1, host = 'box-7' WHERE id = $1",
            &[&running],
        )
        .unwrap();
    let shown = db.ok(&["runs"]);
    let lines: Vec<&str> = shown.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    let col = header.iter().position(|h| *h == "HOST").expect(&shown);
    let row = |id: i64| -> Vec<&str> {
        lines
            .iter()
            .find(|l| l.split_whitespace().next() == Some(&id.to_string()))
            .unwrap_or_else(|| panic!("no run {id}:\n{shown}"))
            .split_whitespace()
            .collect()
    };
    assert_eq!(row(running)[col], "box-7", "{shown}");
    assert_eq!(row(queued)[col], "-", "{shown}");
}

/// Issue 26 §4.4: cancelling a run twice records one cancel: a second
/// `orca cancel` of a run whose cancel is asked and under way says so
/// (exit 0) and records nothing; of a run already ended, exit 1 as before,
/// nothing recorded.
#[test]
fn a_second_cancel_records_nothing() {
    // TERM ignored: the run stays running through its kill grace.
    let (db, dir) = setup("[pipelines.p]\ncommand = \"trap '' TERM; sleep 600\"\n");
    let mut s = db.scheduler(&dir, &[("ORCA_KILL_GRACE_SECONDS", "20")]);
    let run = db.queue("p");
    let id = run.to_string();
    s.wait_for("the run runs", 30.0, || db.state(run) == "running");
    let cancels = || {
        db.client()
            .query_one(
                "SELECT count(*) FROM orca.events WHERE run = $1 AND kind LIKE 'cancel%'",
                &[&run],
            )
            .unwrap()
            .get::<_, i64>(0)
    };
    db.ok(&["cancel", &id]);
    assert_eq!(cancels(), 1);
    let again = db.run(&["cancel", &id]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert!(
        text(&again.stdout).contains("already asked"),
        "{}",
        text(&again.stdout)
    );
    assert_eq!(db.state(run), "running", "still in its kill grace");
    assert_eq!(cancels(), 1, "the second cancel records nothing");
    s.wait_for("the run is cancelled", 60.0, || db.state(run) != "running");
    let before: i64 = db.one(&format!(
        "SELECT count(*) FROM orca.events WHERE run = {run}"
    ));
    let ended = db.run(&["cancel", &id]);
    assert_eq!(ended.status.code(), Some(1), "{}", text(&ended.stderr));
    assert!(text(&ended.stderr).contains("already ended"));
    let after: i64 = db.one(&format!(
        "SELECT count(*) FROM orca.events WHERE run = {run}"
    ));
    assert_eq!(after, before, "nothing recorded for an ended run");
    s.stop();
}
