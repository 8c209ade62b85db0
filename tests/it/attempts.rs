//! Every attempt's output kept (`orca logs`, `--attempt`, `-f` across
//! retries), and why a queued run waits (`orca runs`, `--json`'s `waits`).

use crate::harness::{
    TempDir, TestDb, hand_machine, hand_worker, local_machines, refused, setup, text, toml_str,
    wait_until,
};

/// A command that fails with `upstream 503` (exit 7) the first time it
/// runs, and the next time prints `second`, waits for file `go` if given,
/// and prints `done`.
fn flaky(dir: &TempDir, go: Option<&std::path::Path>) -> String {
    let marker = dir.path("tried");
    let wait = go.map_or(String::new(), |g| {
        format!("while [ ! -e {} ]; do sleep 0.1; done; ", g.display())
    });
    toml_str(&format!(
        "if [ ! -e {m} ]; then touch {m}; echo upstream 503; exit 7; fi; echo second; {wait}echo done",
        m = marker.display()
    ))
}

/// The line of `orca runs` (text) for run `id`.
fn runs_line(db: &TestDb, id: i64) -> String {
    let out = db.ok(&["runs"]);
    let id = id.to_string();
    out.lines()
        .find(|l| l.split_whitespace().next() == Some(id.as_str()))
        .unwrap_or_else(|| panic!("run {id} not in:\n{out}"))
        .to_string()
}

/// `orca runs --json`'s `waits` of run `id`.
fn waits(db: &TestDb, id: i64) -> serde_json::Value {
    let all: serde_json::Value = serde_json::from_str(&db.ok(&["runs", "--json"])).unwrap();
    all.as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("run {id} not in {all}"))["waits"]
        .clone()
}

/// The header lines (`--- attempt …`) of `out`.
fn headers(out: &str) -> Vec<&str> {
    out.lines()
        .filter(|l| l.starts_with("--- attempt "))
        .collect()
}

/// A local run fails with `upstream 503`, waits for its retry (which `orca
/// runs` says, with when), and succeeds on its second attempt; `orca logs
/// -f`, started before the scheduler, prints the first attempt under its
/// line and the second's line as the retry starts; `orca logs` keeps both
/// attempts' output, `--attempt 1` only the first's; the durations are in
/// the precision they were measured.
#[test]
fn a_retried_run_keeps_each_attempt_s_output_under_its_line() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let go = dir.path("go");
    db.register(
        &dir,
        &format!(
            "[pipelines.flaky]\ncommand = {}\nretries = 1\nretry_delay = 10\n",
            flaky(&dir, Some(&go))
        ),
    );
    let run = db.queue("flaky");
    let id = run.to_string();
    // Followed from before it starts (no scheduler yet: it says so).
    let mut follow = db
        .orca(&["logs", "-f", &id])
        .stdout(std::fs::File::create(dir.path("follow.out")).unwrap())
        .stderr(std::fs::File::create(dir.path("follow.err")).unwrap())
        .spawn()
        .unwrap();
    let followed = || std::fs::read_to_string(dir.path("follow.out")).unwrap_or_default();
    let follow_err = || std::fs::read_to_string(dir.path("follow.err")).unwrap_or_default();
    wait_until("logs -f says no scheduler leads", 30.0, || {
        follow_err().contains(&format!("no scheduler leads: run {run} waits for one"))
    });
    assert!(runs_line(&db, run).ends_with("no scheduler leads"));
    assert_eq!(waits(&db, run), "no scheduler leads");

    let mut s = db.scheduler(&dir, &[]);
    wait_until(
        "the first attempt failed and the run waits for its retry",
        60.0,
        || db.one::<i32>(&format!("SELECT failures FROM orca.runs WHERE id = {run}")) == 1,
    );
    assert_eq!(db.state(run), "queued");
    let line = runs_line(&db, run);
    assert!(line.contains(" retry 2 of 2 at "), "{line}");
    // Then why the last attempt ended.
    assert!(line.contains(" UTC; exit code 7 after "), "{line}");
    let w = waits(&db, run);
    assert!(w.as_str().unwrap().starts_with("retry 2 of 2 at "), "{w}");
    // The follower printed the first attempt under its line, whole.
    wait_until("logs -f shows the first attempt", 30.0, || {
        followed().contains("upstream 503\n")
    });
    assert_eq!(db.state(run), "queued", "the retry waits 10 s");
    let shown = followed();
    // (Running as it was first seen, or already failed: it is quick.)
    assert!(shown.starts_with("--- attempt 1 of 2: "), "{shown}");
    assert_eq!(headers(&shown).len(), 1, "{shown}");
    assert!(
        follow_err().contains(&format!("run {run} waits: retry 2 of 2 at ")),
        "{}",
        follow_err()
    );

    // The retry starts: the follower prints its line while it runs.
    wait_until("logs -f shows the second attempt's line", 60.0, || {
        followed().contains("--- attempt 2 of 2: running since ")
            && followed().ends_with("second\n")
    });
    assert_eq!(db.state(run), "running");
    assert!(follow.try_wait().unwrap().is_none(), "logs -f ended early");
    std::fs::write(&go, "").unwrap();
    let mut status = None;
    wait_until("logs -f exits as the run ends", 60.0, || {
        status = follow.try_wait().unwrap();
        status.is_some()
    });
    assert!(status.unwrap().success(), "{}", follow_err());
    assert_eq!(db.state(run), "succeeded");
    let shown = followed();
    let body: Vec<&str> = shown.lines().filter(|l| !l.starts_with("--- ")).collect();
    assert_eq!(body, ["upstream 503", "second", "done"], "{shown}");
    assert_eq!(headers(&shown).len(), 2, "{shown}");

    // Both attempts kept, each under its line: how it ended, when, why.
    let logs = db.ok(&["logs", &id]);
    let h = headers(&logs);
    assert_eq!(h.len(), 2, "{logs}");
    assert!(
        h[0].starts_with("--- attempt 1 of 2: failed (exit 7) at ")
            && h[0].contains(" UTC: exit code 7 after "),
        "{logs}"
    );
    assert!(
        h[1].starts_with("--- attempt 2 of 2: succeeded (exit 0) at "),
        "{logs}"
    );
    let body: Vec<&str> = logs.lines().filter(|l| !l.starts_with("--- ")).collect();
    assert_eq!(body, ["upstream 503", "second", "done"], "{logs}");
    // The first attempt's duration as measured: a fraction of a second in
    // hundredths or finer, never rounded to `0.0s`.
    let took = h[0].rsplit("after ").next().unwrap();
    assert!(
        took.ends_with('s')
            && took
                .trim_end_matches('s')
                .split('.')
                .nth(1)
                .is_some_and(|d| d.len() >= 2),
        "{took}"
    );
    assert_ne!(took, "0.0s");

    let one = db.ok(&["logs", &id, "--attempt", "1"]);
    assert_eq!(headers(&one), [h[0]]);
    assert_eq!(one.lines().nth(1), Some("upstream 503"));
    assert_eq!(one.lines().count(), 2, "{one}");
    // No such attempt: one line, exit 2.
    let out = db.run(&["logs", &id, "--attempt", "3"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr).trim_end(),
        format!("orca: run {run} has no attempt 3")
    );
    assert!(out.stdout.is_empty());
    // The listing names the column what it is.
    let header = db.ok(&["runs"]);
    let first = header.lines().next().unwrap();
    assert!(
        first.contains(" ATTEMPT ") && !first.contains(" START "),
        "{first}"
    );
    // The end's why in the precision measured.
    assert!(runs_line(&db, run).contains("exit code 0 after "));
    s.stop();
}

/// A pool run's attempts are kept as a local run's are; the machine's
/// login can neither read nor write them itself.
#[test]
fn a_pool_run_keeps_each_attempt_and_its_login_cannot_touch_them() {
    let dir0 = TempDir::new();
    let (db, dir) = crate::pools::pool_test(&format!(
        "[pipelines.flaky]\ncommand = {}\nplacement = \"worker:p\"\nretries = 1\nretry_delay = 0\n",
        flaky(&dir0, None)
    ));
    let role = hand_machine(&db, "p", "attempts", "pw-attempts");
    let run = db.queue("flaky");
    let mut w = hand_worker(&db, &dir, "p", &role, "pw-attempts");
    wait_until("the run succeeds on its second attempt", 60.0, || {
        db.state(run) == "succeeded"
    });
    w.stop();
    let rows: Vec<(i32, String, Option<i32>)> = db
        .client()
        .query(
            "SELECT attempt, outcome, exit_code FROM orca.attempts WHERE run = $1 ORDER BY attempt",
            &[&run],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        rows,
        [
            (1, "failed".to_string(), Some(7)),
            (2, "succeeded".to_string(), Some(0))
        ]
    );
    let logs = db.ok(&["logs", &run.to_string()]);
    let body: Vec<&str> = logs.lines().filter(|l| !l.starts_with("--- ")).collect();
    assert_eq!(body, ["upstream 503", "second", "done"], "{logs}");
    let one = db.ok(&["logs", &run.to_string(), "--attempt", "1"]);
    assert!(
        one.starts_with("--- attempt 1 of 2: failed (exit 7) at "),
        "{one}"
    );
    assert_eq!(one.lines().nth(1), Some("upstream 503"));
    // The login, on its own: no read, no write of any attempt.
    let mut c = db.client_as(&role, "pw-attempts");
    refused(&mut c, "SELECT output FROM orca.attempts");
    refused(
        &mut c,
        &format!(
            "INSERT INTO orca.attempts (run, attempt, ended_at, outcome) VALUES ({run}, 9, now(), 'failed')"
        ),
    );
    refused(&mut c, "SELECT orca.attempt_keep()");
}

/// Each attempt keeps its own last 64 KiB, however much it printed.
#[test]
fn each_attempt_s_tail_is_bounded_at_64_kib() {
    let dir0 = TempDir::new();
    let marker = dir0.path("tried");
    let (db, dir) = setup(&format!(
        "[pipelines.loud]\ncommand = {}\nretries = 1\nretry_delay = 0\n",
        toml_str(&format!(
            "head -c 3000000 /dev/zero | tr '\\0' a; if [ ! -e {m} ]; then touch {m}; echo; echo first end; exit 1; fi; echo; echo second end",
            m = marker.display()
        ))
    ));
    let run = db.queue("loud");
    let mut s = db.scheduler(&dir, &[]);
    wait_until("the run succeeds on its second attempt", 120.0, || {
        db.state(run) == "succeeded"
    });
    s.stop();
    let rows: Vec<(i32, i32)> = db
        .client()
        .query(
            "SELECT attempt, octet_length(output) FROM orca.attempts WHERE run = $1 ORDER BY attempt",
            &[&run],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(rows, [(1, 65536), (2, 65536)]);
    let logs = db.ok(&["logs", &run.to_string()]);
    let lines: Vec<&str> = logs.lines().collect();
    assert!(lines.contains(&"first end") && lines.contains(&"second end"));
    assert_eq!(headers(&logs).len(), 2);
    assert!(logs.len() < 2 * 65536 + 1024, "{}", logs.len());
}

/// A queued run says why it waits: its pipeline paused, or `max_runs`
/// reached by a run it names, in `orca runs` and its `--json`.
#[test]
fn a_queued_run_says_it_waits_for_a_resume_or_for_max_runs() {
    let dir0 = TempDir::new();
    let go = dir0.path("go");
    let (db, dir) = setup(&format!(
        "[pipelines.slow]\ncommand = {}\n\n[pipelines.held]\ncommand = \"true\"\n",
        toml_str(&format!(
            "while [ ! -e {} ]; do sleep 0.1; done",
            go.display()
        ))
    ));
    db.ok(&["pause", "held"]);
    let held = db.queue("held");
    let first = db.queue("slow");
    let second = db.queue("slow");
    let mut s = db.scheduler(&dir, &[]);
    wait_until("the first slow run runs", 60.0, || {
        db.state(first) == "running"
    });
    let expected = format!("max_runs (1) reached: running {first}");
    wait_until("orca runs says the second waits for max_runs", 30.0, || {
        runs_line(&db, second).ends_with(&expected)
    });
    assert_eq!(waits(&db, second), expected.as_str());
    assert!(
        runs_line(&db, held).ends_with("paused: waits for `orca resume held`"),
        "{}",
        runs_line(&db, held)
    );
    assert_eq!(waits(&db, held), "paused: waits for `orca resume held`");
    // A run that isn't queued waits for nothing.
    assert_eq!(waits(&db, first), serde_json::Value::Null);
    std::fs::write(&go, "").unwrap();
    wait_until("both slow runs end", 60.0, || {
        db.state(second) == "succeeded"
    });
    s.stop();
}

/// A queued pool run whose pool stands at `max_machines` with no room says
/// so.
#[test]
fn a_queued_pool_run_says_its_pool_is_at_max_machines() {
    let dir0 = TempDir::new();
    let go = dir0.path("go");
    let (db, dir) = setup(&format!(
        "[pools.p]\nprovider = \"local\"\ntypes = [{{ type = \"small\", wait = 0 }}]\n\
         locations = [\"here\"]\nmax_machines = 1\nslots = 1\n\n\
         [pipelines.job]\ncommand = {}\nplacement = \"worker:p\"\nmax_runs = 2\n",
        toml_str(&format!(
            "while [ ! -e {} ]; do sleep 0.1; done",
            go.display()
        ))
    ));
    let first = db.queue("job");
    let second = db.queue("job");
    let mut s = crate::pools::pool_scheduler(&db, &dir, &[]);
    let stack = crate::pools::stack(&db);
    wait_until("one run runs on the pool's machine", 90.0, || {
        db.state(first) == "running" || db.state(second) == "running"
    });
    let waiting = if db.state(first) == "running" {
        second
    } else {
        first
    };
    let expected = "pool p has no room: at max_machines (1)";
    wait_until("orca runs says the pool is at max_machines", 30.0, || {
        runs_line(&db, waiting).ends_with(expected)
    });
    assert_eq!(waits(&db, waiting), expected);
    std::fs::write(&go, "").unwrap();
    wait_until("both runs end", 90.0, || {
        db.state(first) == "succeeded" && db.state(second) == "succeeded"
    });
    s.stop();
    crate::harness::end_local_machines(&stack);
    assert!(local_machines(&stack).is_empty());
}

/// A queued pool run whose pool's only machine is still booting says so,
/// naming the machine (the fake EC2's instances never run a worker: the
/// machine boots for ever).
#[test]
fn a_queued_pool_run_says_its_machine_is_booting() {
    use crate::ec2::{ec2_env, start, with_keys};
    let ec2 = crate::fake_aws::FakeEc2::start(crate::ec2::KEY, crate::ec2::SECRET);
    let (db, dir) = setup(
        "[pools.p]\nprovider = \"ec2\"\nami = \"ami-0123456789abcdef0\"\n\
         types = [{ type = \"m7i.large\", wait = 0 }]\nlocations = [\"subnet-a\"]\n\
         max_machines = 1\n\n\
         [pipelines.job]\ncommand = \"true\"\nplacement = \"worker:p\"\n",
    );
    let run = db.queue("job");
    let mut s = start(&db, &dir, &with_keys(ec2_env(&ec2)));
    wait_until("the pool's machine is made", 60.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.pool_machines WHERE ended_at IS NULL") == 1
    });
    let name: String = db.one("SELECT name FROM orca.pool_machines WHERE ended_at IS NULL LIMIT 1");
    let expected = format!("pool p has no room: machine {name} is booting");
    wait_until("orca runs says the machine is booting", 30.0, || {
        runs_line(&db, run).ends_with(&expected)
    });
    assert_eq!(waits(&db, run), expected.as_str());
    assert_eq!(db.state(run), "queued");
    s.stop();
}
