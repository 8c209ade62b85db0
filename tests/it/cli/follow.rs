//! `orca logs -f` and `orca run --wait`: a run followed to its end wherever
//! it runs, the run's outcome as the exit code, why a queued run waits, an
//! interrupt or a reader that goes.

use super::*;

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
