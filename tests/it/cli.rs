//! The one-shot commands: migrate, check, register, run, runs, logs, events,
//! cancel, pause, and how they fail.

use crate::harness::*;

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
fn check_reports_every_problem_with_its_line() {
    let dir = TempDir::new();
    let path = dir.write(
        "orca.toml",
        "[pipelines.a]\ncommand = \"true\"\nbogus = 1\n\n[pipelines.b]\nschedule = \"99 * * * *\"\n\n[pipelines.c]\ncommand = \"true\"\nretries = -2\nplacement = \"moon\"\n",
    );
    let out = std::process::Command::new(bin())
        .args(["check", "-c", &path])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = text(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    let want = [
        (3, "unknown key 'bogus'"),
        (5, "missing command"),
        (
            6,
            "schedule \"99 * * * *\": minute field: 99 is out of range 0-59",
        ),
        (10, "negative"),
        (11, "bad placement"),
    ];
    for (line, msg) in want {
        let prefix = format!("{path}:{line}: ");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&prefix) && l.contains(msg)),
            "no '{prefix}...{msg}' in:\n{err}"
        );
    }
    assert_eq!(lines.len(), want.len(), "one line per problem:\n{err}");

    let good = dir.write(
        "good.toml",
        "[pipelines.a]\ncommand = \"true\"\nschedule = \"0 3 * * *\"\n",
    );
    let out = std::process::Command::new(bin())
        .args(["check", "-c", &good])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty() && out.stderr.is_empty());
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let (db, _dir) = setup("[pipelines.a]\ncommand = \"true\"\n");
    for args in [
        vec!["run", "nope"],
        vec!["logs", "999999"],
        vec!["cancel", "999999"],
        vec!["pause", "nope"],
        vec!["runs", "--state", "weird"],
        vec!["runs", "--pipeline", "nope"],
        vec!["runs", "--limit", "x"],
        vec!["frobnicate"],
        vec!["run"],
    ] {
        let out = db.run(&args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "orca {args:?}: {}",
            text(&out.stderr)
        );
        let err = text(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "orca {args:?}: {err}");
        assert!(err.starts_with("orca: "), "orca {args:?}: {err}");
    }
    // Nothing was written by the failed commands.
    assert_eq!(db.one::<i64>("SELECT count(*) FROM orca.runs"), 0);
}

#[test]
fn an_unreachable_database_is_named_without_its_password() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // The port is closed again once the listener is dropped.
    let url = format!("postgres://orca:hunter2secret@127.0.0.1:{port}/orca");
    let started = std::time::Instant::now();
    let out = std::process::Command::new(bin())
        .args(["runs", "--wait", "1"])
        .env("ORCA_DATABASE_URL", &url)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    assert!(!err.contains("hunter2secret"), "{err}");
    assert!(
        started.elapsed().as_secs_f64() < 8.0,
        "--wait 1 took {:?}",
        started.elapsed()
    );
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

#[test]
fn a_config_file_over_the_size_limit_is_refused_with_one_line() {
    let dir = TempDir::new();
    let big = dir.write(
        "big.toml",
        &format!(
            "# {}\n[pipelines.a]\ncommand = \"true\"\n",
            "x".repeat(1 << 20)
        ),
    );
    for path in ["/dev/zero", big.as_str()] {
        for cmd in [
            vec!["check", "-c", path],
            vec!["register", "-c", path],
            vec!["scheduler", "-c", path],
        ] {
            let out = orca_within(&cmd, 20.0);
            assert_eq!(
                out.status.code(),
                Some(2),
                "orca {cmd:?}: {}",
                text(&out.stderr)
            );
            let err = text(&out.stderr);
            assert_eq!(err.trim_end().lines().count(), 1, "orca {cmd:?}: {err}");
            assert!(
                err.contains(path) && err.contains("1 MiB"),
                "orca {cmd:?}: {err}"
            );
        }
    }
}

#[test]
fn a_file_with_many_problems_is_checked_and_its_problems_shown_bounded() {
    let dir = TempDir::new();
    let mut toml = String::from("[pipelines.a]\ncommand = \"true\"\n");
    for n in 0..20_000 {
        toml.push_str(&format!("bogus{n} = 1\n"));
    }
    let path = dir.write("orca.toml", &toml);
    let out = orca_within(&["check", "-c", &path], 60.0);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines.len(),
        101,
        "the first 100, then a count:\n{}",
        &err[..err.len().min(2000)]
    );
    assert!(
        lines[0].starts_with(&format!("{path}:3: unknown key 'bogus0'")),
        "{}",
        lines[0]
    );
    assert!(
        lines[99].starts_with(&format!("{path}:102: unknown key 'bogus99'")),
        "{}",
        lines[99]
    );
    assert!(lines[100].contains("19900 more"), "{}", lines[100]);
}

#[test]
fn a_nul_is_refused_by_check_and_register_before_the_database_sees_it() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let path = dir.write(
        "orca.toml",
        "[pipelines.a]\ncommand = \"true\"\nenv = { A = \"x\\u0000y\" }\n",
    );
    for cmd in ["check", "register"] {
        let out = db.run(&[cmd, "-c", &path]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "orca {cmd}: {err}");
        assert_eq!(
            err.trim_end(),
            format!("{path}:3: env.A contains a NUL byte"),
            "orca {cmd}"
        );
    }
    assert_eq!(db.one::<i64>("SELECT count(*) FROM orca.pipelines"), 0);
}

/// The one line commands that need the schema print before `orca migrate`.
const NO_SCHEMA: &str = "orca: the database has no orca schema yet: run `orca migrate`";

#[test]
fn orca_alone_prints_the_whole_usage_and_exits_2() {
    let out = std::process::Command::new(bin()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = text(&out.stderr);
    assert!(err.contains("Usage: orca <COMMAND>"), "{err}");
    assert!(err.contains("Commands:"), "{err}");
    for command in ["migrate", "run", "runs", "logs", "pools", "deploy"] {
        assert!(
            err.lines()
                .any(|l| l.trim_start().starts_with(&format!("{command} "))),
            "no {command} in:\n{err}"
        );
    }
}

#[test]
fn before_migrate_every_command_says_to_migrate() {
    let db = TestDb::empty_on(&admin_url());
    let dir = TempDir::new();
    let config = dir.write("orca.toml", "[pipelines.a]\ncommand = \"true\"\n");
    for args in [
        vec!["runs"],
        vec!["runs", "--json"],
        vec!["pools"],
        vec!["events"],
        vec!["instances"],
        vec!["register", "-c", &config],
        vec!["run", "a"],
        vec!["run", "a", "--wait"],
        vec!["logs", "1"],
        vec!["logs", "-f", "1"],
        vec!["cancel", "1"],
        vec!["pause", "a"],
        vec!["deploy", "check"],
        vec!["deploy", "wait"],
        vec!["scheduler", "drain"],
    ] {
        let out = db.run(&args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "orca {args:?}: {err}");
        assert_eq!(err.trim_end(), NO_SCHEMA, "orca {args:?}");
    }
    // The long-lived ones say so too, and exit.
    let mut scheduler = db.scheduler(&dir, &[]);
    assert_eq!(scheduler.wait(60.0).code(), Some(1));
    assert!(
        scheduler.output().lines().any(|l| l == NO_SCHEMA),
        "{}",
        scheduler.output()
    );
    let role = machine_role("noschema");
    db.plain_login_role(&role, "pw-noschema");
    let mut worker = hand_worker(&db, &dir, "p", &role, "pw-noschema");
    assert_eq!(worker.wait(60.0).code(), Some(1));
    assert!(
        worker.output().lines().any(|l| l == NO_SCHEMA),
        "{}",
        worker.output()
    );
    // Migrated, the same commands work.
    db.ok(&["migrate"]);
    db.ok(&["runs"]);
}

/// `orca runs --wait 120` with `url`: its output, and how long it took.
fn runs_with(url: &str) -> (std::process::Output, f64) {
    let started = std::time::Instant::now();
    let out = orca_with_url(&["runs", "--wait", "120"], url, 60.0);
    (out, started.elapsed().as_secs_f64())
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
fn a_refused_login_exits_at_once_naming_why_and_never_its_password() {
    let db = TestDb::new();
    let wrong_password = with_user(&db.url, OWNER, "wrong-pw-hunter2");
    let no_such_role = with_user(&db.url, "orca_no_such_role", "role-pw-hunter3");
    let no_such_db = with_db(&db.url, "orca_no_such_database");
    for (url, secret, why) in [
        (
            &wrong_password,
            "wrong-pw-hunter2",
            "password authentication failed",
        ),
        // scram-sha-256 answers an unknown role as a wrong password.
        (&no_such_role, "role-pw-hunter3", "orca_no_such_role"),
        (&no_such_db, OWNER_PASSWORD, "does not exist"),
    ] {
        let (out, took) = runs_with(url);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            took < 30.0,
            "gave up after {took:.1}s, not at once (--wait 120)"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(
            err.contains("refused the login") && err.contains(why),
            "{err}"
        );
        assert!(!err.contains("can't reach"), "{err}");
        assert!(!err.contains(secret) && out.stdout.is_empty(), "{err}");
    }
}

/// A URL with no password, for a server that asks for one, is bad input:
/// one line and exit 2 at once, for a one-shot command and the scheduler
/// alike, not ten seconds of "can't reach". (No password against a server
/// that asks for none still works: `outage::tls_require_and_verify_full`.)
#[test]
fn a_url_with_no_password_for_a_server_that_asks_is_bad_input() {
    let db = TestDb::new();
    let url = db.url.replacen(&format!(":{OWNER_PASSWORD}@"), "@", 1);
    assert_ne!(url, db.url);
    let (out, took) = runs_with(&url);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        took < 30.0,
        "gave up after {took:.1}s, not at once (--wait 120)"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.starts_with("orca: ")
            && err.contains("asked for a password and ORCA_DATABASE_URL has none"),
        "{err}"
    );
    let dir = TempDir::new();
    let mut s = Proc::spawn(
        {
            let mut c = db.orca(&["scheduler"]);
            c.env("ORCA_DATABASE_URL", &url);
            c
        },
        &dir.path("scheduler.log"),
    );
    let status = s.wait(60.0);
    let log = s.output();
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(
        log.contains("asked for a password and ORCA_DATABASE_URL has none")
            && !log.contains("can't be reached"),
        "{log}"
    );
}

#[test]
fn a_bad_schedule_names_its_field_and_range() {
    let dir = TempDir::new();
    let path = dir.write(
        "orca.toml",
        "[pipelines.a]\ncommand = \"true\"\nschedule = \"0 0 * 13 *\"\n\n\
         [pipelines.b]\ncommand = \"true\"\nschedule = \"61 * * * *\"\n\n\
         [pipelines.c]\ncommand = \"true\"\nschedule = \"* * *\"\n\n\
         [pipelines.d]\ncommand = \"true\"\nschedule = \"0 0 * * MON-FRI\"\n",
    );
    let out = std::process::Command::new(bin())
        .args(["check", "-c", &path])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines,
        [
            format!("{path}:3: schedule \"0 0 * 13 *\": month field: 13 is out of range 1-12"),
            format!("{path}:7: schedule \"61 * * * *\": minute field: 61 is out of range 0-59"),
            format!(
                "{path}:11: schedule \"* * *\": 5 or 6 fields are accepted (minute hour \
                 day-of-month month day-of-week, or second first and then those 5); it has 3"
            ),
        ],
        "{err}"
    );
}

#[test]
fn every_listing_has_a_header_when_empty_and_its_json_is_an_array() {
    let db = TestDb::new();
    for (listing, header) in [
        ("runs", "ID"),
        ("events", "AT"),
        ("pools", "POOL"),
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

/// A command that prints `line 1`, waits for file `go`, then prints lines
/// 2 to 6 over a second or two and exits 0.
fn chatty(go: &std::path::Path) -> String {
    toml_str(&format!(
        "echo line 1; while [ ! -e {go} ]; do sleep 0.1; done; \
         for i in 2 3 4 5 6; do echo line $i; sleep 0.3; done",
        go = go.display()
    ))
}

/// The lines `chatty` prints.
const CHATTY: &str = "line 1\nline 2\nline 3\nline 4\nline 5\nline 6\n";

/// Run `run` of `chatty`: `orca logs -f` started while it runs follows it
/// to its end, shows every line once, and exits 0 once the run has ended.
fn follow_to_the_end(db: &TestDb, dir: &TempDir, run: i64, go: &std::path::Path) {
    wait_until("the run has printed its first line", 120.0, || {
        db.state(run) == "running" && text(&db.output(run)).contains("line 1")
    });
    let mut logs = Running::start(db, dir, &["logs", "-f", &run.to_string()]);
    // The attempt's line, then its output.
    let header = "--- attempt 1 of 1: running since ";
    wait_until("logs -f shows the first line", 60.0, || {
        let out = logs.stdout();
        out.starts_with(header) && out.lines().skip(1).collect::<Vec<_>>() == ["line 1"]
    });
    assert!(logs.running(), "logs -f ended early: {}", logs.stderr());
    assert_eq!(db.state(run), "running");
    std::fs::write(go, "").unwrap();
    let status = logs.wait(120.0);
    assert!(status.success(), "{status:?}: {}", logs.stderr());
    assert_eq!(
        db.state(run),
        "succeeded",
        "logs -f exits when the run ends"
    );
    let out = logs.stdout();
    let (first, rest) = out.split_once('\n').unwrap();
    assert!(
        first.starts_with(header) && first.ends_with(" UTC"),
        "{out}"
    );
    assert_eq!(rest, CHATTY, "stderr: {}", logs.stderr());
    assert_eq!(logs.stderr(), "");
}

#[test]
fn logs_follow_a_local_run_to_its_end() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let go = dir.path("go");
    db.register(
        &dir,
        &format!("[pipelines.chatty]\ncommand = {}\n", chatty(&go)),
    );
    let run = db.queue("chatty");
    let mut s = db.scheduler(&dir, &[]);
    follow_to_the_end(&db, &dir, run, &go);
    // An ended run: its output, and exit 0 at once.
    let again = Running::start(&db, &dir, &["logs", "--follow", &run.to_string()]).wait(30.0);
    assert!(again.success());
    // An unknown run: one line, exit 2.
    let out = db.run(&["logs", "-f", "999999"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stderr).trim_end(), "orca: unknown run: 999999");
    s.stop();
}

#[test]
fn logs_follow_a_worker_run_to_its_end() {
    let dir0 = TempDir::new();
    let go = dir0.path("go");
    let (db, dir) = crate::pools::pool_test(&format!(
        "[pipelines.chatty]\ncommand = {}\nplacement = \"worker:p\"\n",
        chatty(&go)
    ));
    let role = hand_machine(&db, "p", "follow", "pw-follow");
    let run = db.queue("chatty");
    let mut w = hand_worker(&db, &dir, "p", &role, "pw-follow");
    follow_to_the_end(&db, &dir, run, &go);
    w.stop();
}

#[test]
fn logs_follow_an_ec2_run_to_its_end() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let go = dir.path("go");
    db.register(
        &dir,
        &format!(
            "[pipelines.chatty]\ncommand = {}\nplacement = \"ec2\"\n\n\
             [pipelines.chatty.ec2]\nprovider = \"local\"\ntype = \"small\"\nlocations = [\"here\"]\n",
            chatty(&go)
        ),
    );
    let run = db.queue("chatty");
    let mut s = db.scheduler(&dir, &[]);
    follow_to_the_end(&db, &dir, run, &go);
    s.stop();
}

#[test]
fn run_wait_exits_with_the_run_s_final_outcome() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let tries = dir.path("tries");
    db.register(
        &dir,
        &format!(
            "[pipelines.good]\ncommand = \"echo fine\"\n\n\
             [pipelines.bad]\ncommand = {}\nretries = 2\nretry_delay = 0\n",
            toml_str(&format!("echo try >> {}; exit 3", tries.display()))
        ),
    );
    let mut s = db.scheduler(&dir, &[]);
    let mut good = Running::start(&db, &dir, &["run", "good", "--wait"]);
    let status = good.wait(120.0);
    assert!(status.success(), "{status:?}: {}", good.stderr());
    let id: i64 = good.stdout().trim().parse().unwrap();
    assert_eq!(db.state(id), "succeeded");

    let mut bad = Running::start(&db, &dir, &["run", "bad", "--wait", "--db-wait", "5"]);
    let status = bad.wait(120.0);
    assert_eq!(status.code(), Some(1), "{}", bad.stderr());
    let id: i64 = bad.stdout().trim().parse().unwrap();
    assert_eq!(db.state(id), "failed");
    // It waited through both retries: three attempts ran.
    assert_eq!(std::fs::read_to_string(&tries).unwrap().lines().count(), 3);
    let err = bad.stderr();
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.starts_with(&format!("orca: run {id} failed")), "{err}");
    s.stop();
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

#[test]
fn a_missing_argument_is_named() {
    for (args, missing) in [(vec!["run"], "<PIPELINE>"), (vec!["logs"], "<RUN>")] {
        let out = orca_within(&args, 20.0);
        assert_eq!(out.status.code(), Some(2));
        let err = text(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "orca {args:?}: {err}");
        assert!(
            err.starts_with("orca: ") && err.contains(missing),
            "orca {args:?}: {err}"
        );
    }
}

/// clap's hints (a subcommand it takes for a typo, how to pass a value that
/// looks like a flag) stay on the one line an error is said on.
#[test]
fn a_command_line_error_keeps_clap_s_hint_on_its_one_line() {
    for (args, hint) in [
        (vec!["log", "5"], "logs"),
        (vec!["run", "a", "-x"], "-- -x"),
    ] {
        let out = orca_within(&args, 20.0);
        assert_eq!(out.status.code(), Some(2));
        let err = text(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "orca {args:?}: {err}");
        assert!(
            err.starts_with("orca: ") && err.contains("tip: ") && err.contains(hint),
            "orca {args:?}: {err}"
        );
    }
}

/// `orca --version` names the commit it was built from (this checkout's
/// HEAD: cargo builds it again when HEAD moves), or `unknown` outside git.
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
        "orca {} ({})\n",
        env!("CARGO_PKG_VERSION"),
        head.as_deref().unwrap_or("unknown")
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

/// A pipeline `a` whose command prints `line 1` and waits for file `go`.
fn waiting_pipeline(go: &std::path::Path) -> String {
    format!(
        "[pipelines.a]\ncommand = {}\n",
        toml_str(&format!(
            "echo line 1; while [ ! -e {go} ]; do sleep 0.1; done",
            go = go.display()
        ))
    )
}

#[test]
fn logs_follow_ends_when_its_reader_goes() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let go = dir.path("go");
    db.register(&dir, &waiting_pipeline(&go));
    let run = db.queue("a");
    let mut s = db.scheduler(&dir, &[]);
    wait_until("the run has printed its first line", 120.0, || {
        db.state(run) == "running" && text(&db.output(run)).contains("line 1")
    });
    let (out, line) = read_one_line_and_go(&db, &["logs", "-f", &run.to_string()]);
    assert!(
        line.starts_with("--- attempt 1 of 1: running since "),
        "{line}"
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    assert_eq!(db.state(run), "running", "it ended before the run did");
    std::fs::write(&go, "").unwrap();
    wait_until("the run ends", 60.0, || db.state(run) == "succeeded");
    s.stop();
}

#[test]
fn run_wait_and_logs_follow_say_why_a_queued_run_waits() {
    let (db, dir) = setup("[pipelines.a]\ncommand = \"echo done\"\n");
    db.ok(&["pause", "a"]);
    let mut wait = Running::start(&db, &dir, &["run", "a", "--wait"]);
    wait_until("run --wait printed the run's id", 60.0, || {
        wait.stdout().ends_with('\n')
    });
    let id: i64 = wait.stdout().trim().parse().unwrap();
    let mut follow = Running::start(&db, &dir, &["logs", "-f", &id.to_string()]);
    let paused = format!("orca: pipeline a is paused: run {id} waits for `orca resume a`");
    for (who, r) in [("run --wait", &wait), ("logs -f", &follow)] {
        wait_until(&format!("{who} says the pipeline is paused"), 60.0, || {
            r.stderr().lines().any(|l| l == paused)
        });
    }
    db.ok(&["resume", "a"]);
    let leaderless = format!("orca: no scheduler leads: run {id} waits for one");
    for (who, r) in [("run --wait", &wait), ("logs -f", &follow)] {
        wait_until(&format!("{who} says no scheduler leads"), 60.0, || {
            r.stderr().lines().any(|l| l == leaderless)
        });
    }
    assert!(wait.running() && follow.running());
    let mut s = db.scheduler(&dir, &[]);
    let status = wait.wait(120.0);
    assert!(status.success(), "{status:?}: {}", wait.stderr());
    assert!(follow.wait(60.0).success(), "{}", follow.stderr());
    let out = follow.stdout();
    assert!(out.starts_with("--- attempt 1 of 1: "), "{out}");
    assert_eq!(crate::harness::logs_body(out.as_bytes()), b"done\n");
    // Each cause said once.
    for r in [&wait, &follow] {
        let err = r.stderr();
        assert_eq!(err.lines().filter(|l| *l == paused).count(), 1, "{err}");
        assert_eq!(err.lines().filter(|l| *l == leaderless).count(), 1, "{err}");
    }
    s.stop();
}

#[test]
fn run_wait_and_logs_follow_exit_at_once_when_their_login_is_refused() {
    let (db, dir) = setup("[pipelines.a]\ncommand = \"true\"\n");
    let role = format!("orca_op_{}", std::process::id());
    let secret = "op-pw-hunter4";
    db.owner_member_role(&role, secret);
    let url = with_user(&db.url, &role, secret);
    let start = |args: &[&str]| {
        let name = args.join("_").replace(['/', ' '], "_");
        let (out, err) = (
            dir.path(&format!("{name}.out")),
            dir.path(&format!("{name}.err")),
        );
        let child = db
            .orca(args)
            .env("ORCA_DATABASE_URL", &url)
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        Running { child, out, err }
    };
    // Queued, and no scheduler: both wait as long as the run does.
    let mut wait = start(&["run", "a", "--wait"]);
    wait_until("run --wait printed the run's id", 60.0, || {
        wait.stdout().ends_with('\n')
    });
    let id = wait.stdout().trim().to_string();
    let mut follow = start(&["logs", "-f", &id]);
    wait_until(
        "both follow the run on a session of their own",
        60.0,
        || {
            db.one::<i64>(&format!(
                "SELECT count(DISTINCT application_name) FROM pg_stat_activity
             WHERE usename = '{role}' AND application_name IN ('orca run --wait', 'orca logs -f')"
            )) == 2
        },
    );
    // The password changes; sessions the role has are ended, again each
    // round (one that logged in just before the change may not show yet).
    db.admin(&format!("ALTER ROLE \"{role}\" PASSWORD 'rotated'"));
    let terminate =
        format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'");
    for (who, r) in [("run --wait", &mut wait), ("logs -f", &mut follow)] {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while r.running() {
            assert!(
                std::time::Instant::now() < deadline,
                "{who} still runs 30 s after its login was refused: {}",
                r.stderr()
            );
            db.admin(&terminate);
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let status = r.wait(1.0);
        let err = r.stderr();
        assert_eq!(status.code(), Some(1), "{who}: {err}");
        let last = err.trim_end().lines().last().unwrap_or("");
        assert!(
            last.starts_with("orca: ")
                && last.contains("refused the login")
                && last.contains("password authentication failed"),
            "{who}: {err}"
        );
        assert!(
            !err.contains(secret) && !err.contains("rotated"),
            "{who}: {err}"
        );
    }
}

/// Issue 26 §4.2: a setting out of its range is refused at start, as `orca
/// check` refuses bad config: one line naming the variable, its value and
/// the range, exit 2, nothing started (never clamped in silence).
#[test]
fn settings_out_of_range_are_refused_at_start() {
    let (db, dir) = setup("[pipelines.p]\ncommand = \"true\"\n");
    let cases = [
        ("ORCA_TICK_SECONDS", "0", "0.05 to 60"),
        ("ORCA_TICK_SECONDS", "61", "0.05 to 60"),
        ("ORCA_STALE_SECONDS", "0", "1 to 86400"),
        ("ORCA_STALE_SECONDS", "0.5", "1 to 86400"),
        ("ORCA_LOGIN_XACT_SECONDS", "0", "1 to 86400"),
        ("ORCA_KILL_GRACE_SECONDS", "-1", "0 to 86400"),
        ("ORCA_POOL_TRY_SECONDS", "0", "0.1 to 86400"),
        ("ORCA_POOL_BOOT_SECONDS", "0", "1 to 86400"),
        ("ORCA_POOL_LOST_SECONDS", "0", "1 to 86400"),
        ("ORCA_POOL_IMAGE_SECONDS", "0", "1 to 86400"),
        ("ORCA_EC2_MAKE_PER_TICK", "0", "1 to 1000"),
    ];
    let mut procs: Vec<(&str, &str, &str, Proc)> = cases
        .iter()
        .map(|&(var, value, range)| {
            let mut c = db.orca(&["scheduler"]);
            c.env(var, value);
            let p = Proc::spawn(c, &dir.path(&format!("{var}-{value}.log")));
            (var, value, range, p)
        })
        .collect();
    for (var, value, range, p) in procs.iter_mut() {
        let status = p.wait_exit(30.0);
        let out = p.output();
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(2),
            "{var}={value}: refused with exit 2:\n{out}"
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 1, "{var}={value}: one line:\n{out}");
        assert!(
            lines[0].contains(&format!("{var}={value}")) && lines[0].contains(*range),
            "{var}={value}: names the variable, its value and {range}:\n{out}"
        );
    }
    // The same bounds hold wherever the setting is read: the one-shot
    // commands that read the stale limit, an idle instance's grace.
    let out = db
        .orca(&["instances"])
        .env("ORCA_STALE_SECONDS", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("ORCA_STALE_SECONDS=0"));
    let out = db
        .orca(&["pool-next", "orca-i-1", "1", "1", "5"])
        .env("ORCA_POOL_NEXT_GRACE_SECONDS", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("ORCA_POOL_NEXT_GRACE_SECONDS=0"),
        "{}",
        text(&out.stderr)
    );
}

/// Issue 26 §4.4: `orca run` of a paused pipeline still queues the run
/// (its id on stdout, exit 0) and says on stderr that it waits for `orca
/// resume`; of a pipeline not paused it says nothing more.
#[test]
fn run_of_a_paused_pipeline_says_it_waits() {
    let (db, _dir) = setup("[pipelines.p]\ncommand = \"true\"\n");
    let out = db.run(&["run", "p"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    db.ok(&["pause", "p"]);
    let out = db.run(&["run", "p"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let id: i64 = text(&out.stdout).trim().parse().expect("the run's id");
    assert_eq!(
        text(&out.stderr).trim_end(),
        format!("orca: pipeline p is paused: run {id} waits for `orca resume p`")
    );
    assert_eq!(db.state(id), "queued");
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

/// Issue 26 §4.5: `orca run --wait` interrupted by Ctrl-C (a real SIGINT)
/// leaves the run going and says so, with its id, exit 130.
#[test]
fn run_wait_interrupted_says_the_run_goes_on() {
    let (db, dir) = setup("[pipelines.p]\ncommand = \"sleep 600\"\n");
    let mut s = db.scheduler(&dir, &[]);
    let mut c = db.orca(&["run", "p", "--wait"]);
    c.stdin(std::process::Stdio::null());
    let log = dir.path("wait.log");
    let mut w = Proc::spawn(c, &log);
    let mut run = 0i64;
    w.wait_for("the run runs", 30.0, || {
        run = text(&std::fs::read(&log).unwrap_or_default())
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or(0);
        run != 0 && db.state(run) == "running"
    });
    w.signal(libc::SIGINT);
    let status = w.wait(30.0);
    let out = w.output();
    assert_eq!(status.code(), Some(130), "{out}");
    assert!(
        out.contains(&format!(
            "interrupted: run {run} goes on (orca cancel {run} to stop it)"
        )),
        "{out}"
    );
    assert_eq!(db.state(run), "running", "the run goes on");
    db.ok(&["cancel", &run.to_string()]);
    s.stop();
}
