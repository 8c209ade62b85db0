//! What a run prints, or a machine or instance login sends and does, can't
//! wedge a run or the scheduler, take orca's locks, or make objects
//! (issue 10, sections C). Every test runs orca as the README's role, not a
//! superuser; machine logins are roles of the `orca_worker` /
//! `orca_instance` groups, made by hand where the test plays the machine.

use crate::harness::*;
use crate::pools::{pool_scheduler, pool_test, with_pool};

/// Pipelines whose output holds a NUL byte, invalid UTF-8, and a flood of
/// random bytes (control characters, NULs), with an alert URL so a final
/// failure's alert body is written too.
fn nasty_output_pipelines(placement: &str) -> String {
    format!(
        r#"
[pipelines.nul]
command = "printf 'a\\000b\\n'"
placement = "{placement}"
alert = "http://127.0.0.1:9/hook"

[pipelines.badutf]
command = "printf 'x\\377\\376\\000y\\n'; exit 3"
placement = "{placement}"
alert = "http://127.0.0.1:9/hook"

[pipelines.flood]
command = "head -c 300000 /dev/urandom; printf '\\000\\001\\002\\033[2J\\r'; exit 1"
placement = "{placement}"
alert = "http://127.0.0.1:9/hook"
"#
    )
}

/// Queues a run of each nasty pipeline and checks that each ends as its
/// command did, with its output kept byte for byte where it fits, and an
/// alert for the failures.
fn nasty_runs_end(db: &TestDb) {
    let nul = db.queue("nul");
    let badutf = db.queue("badutf");
    let flood = db.queue("flood");
    wait_until("every run's end is recorded", 60.0, || {
        db.state(nul) == "succeeded" && db.state(badutf) == "failed" && db.state(flood) == "failed"
    });
    let out = db.output(nul);
    assert_eq!(out, b"a\0b\n", "the output is kept as it was");
    let code: Option<i32> = db
        .client()
        .query_one("SELECT exit_code FROM orca.runs WHERE id = $1", &[&badutf])
        .unwrap()
        .get(0);
    assert_eq!(code, Some(3));
    let alerts: i64 = db.one("SELECT count(*) FROM orca.alerts");
    assert_eq!(alerts, 2, "one alert for each final failure");
    let size: i32 = db
        .client()
        .query_one(
            "SELECT octet_length(output) FROM orca.runs WHERE id = $1",
            &[&flood],
        )
        .unwrap()
        .get(0);
    assert_eq!(size, 64 * 1024, "the flood's last 64 KiB are kept");
    // What orca shows of them is fine too.
    let logs = db.run(&["logs", &nul.to_string()]);
    assert!(logs.status.success(), "{}", text(&logs.stderr));
    assert_eq!(crate::harness::logs_body(&logs.stdout), b"a\0b\n");
    for args in [
        vec!["runs"],
        vec!["runs", "--json"],
        vec!["events", "--json"],
    ] {
        let out = db.run(&args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
}

#[test]
fn nul_bytes_bad_utf8_and_floods_in_output_never_wedge_a_local_run() {
    let (db, dir) = setup(&nasty_output_pipelines("local"));
    let mut s = db.scheduler(&dir, &[]);
    nasty_runs_end(&db);
    s.stop();
    assert!(
        !s.output().contains("can't record its end"),
        "{}",
        s.output()
    );
}

#[test]
fn nul_bytes_bad_utf8_and_floods_in_output_never_wedge_a_worker_s_run() {
    let (db, dir) = setup(&with_pool(
        "p",
        &format!("slots = 3\n{}", nasty_output_pipelines("worker:p")),
    ));
    let role = hand_machine(&db, "p", "nasty", "s3cret");
    db.client()
        .execute("UPDATE orca.pool_machines SET slots = 3", &[])
        .unwrap();
    let mut w = hand_worker(&db, &dir, "p", &role, "s3cret");
    nasty_runs_end(&db);
    w.signal(libc::SIGTERM);
    assert_eq!(w.wait(30.0).code(), Some(0), "{}", w.output());
}

/// A running run of pipeline `job` claimed by machine login `role` (made
/// by hand): its attempt `(id, start)`, and the login's session.
fn claimed_by_hand(db: &TestDb, dir: &TempDir, role: &str) -> (i64, i32, postgres::Client) {
    db.register(
        dir,
        &with_pool(
            "p",
            "[pipelines.job]\ncommand = \"true\"\nplacement = \"worker:p\"\nalert = \"http://127.0.0.1:9/hook\"\n",
        ),
    );
    hand_made_machine(db, "p", role, "pw");
    let run = db.queue("job");
    let mut c = db.client_as(role, "pw");
    c.execute("SELECT * FROM orca.worker_hello()", &[]).unwrap();
    let row = c
        .query_one("SELECT id, start FROM orca.worker_claim(1)", &[])
        .unwrap();
    let (id, start): (i64, i32) = (row.get(0), row.get(1));
    assert_eq!(id, run);
    (id, start, c)
}

#[test]
fn what_a_machine_login_sends_is_bounded_whatever_its_size() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let role = machine_role("big");
    let (id, start, mut c) = claimed_by_hand(&db, &dir, &role);
    let big = vec![b'x'; 5 << 20];
    c.execute(
        "SELECT orca.worker_output($1, $2, $3)",
        &[&id, &start, &big],
    )
    .unwrap();
    let why = "w".repeat(5 << 20);
    let body = serde_json::json!({
        "output": "o".repeat(1 << 20),
        "pipeline": "forged",
        "extra": "forged",
    });
    let state: Option<String> = c
        .query_one(
            "SELECT orca.worker_finish($1, $2, 'failed', 1, NULL, $3, $4, $5)",
            &[&id, &start, &why, &big, &body],
        )
        .unwrap()
        .get(0);
    assert_eq!(state.as_deref(), Some("failed"));
    let row = db
        .client()
        .query_one(
            "SELECT length(why), octet_length(output) FROM orca.runs WHERE id = $1",
            &[&id],
        )
        .unwrap();
    let (why_len, out_len): (i32, i32) = (row.get(0), row.get(1));
    assert!(why_len <= 4096, "why stored {why_len} characters");
    assert_eq!(out_len, 64 * 1024);
    let events: i32 = db.one("SELECT max(length(why)) FROM orca.events");
    assert!(events <= 4096, "an event stored {events} characters");
    let body: serde_json::Value = db.one("SELECT body FROM orca.alerts");
    assert_eq!(body["pipeline"], "job", "the body is the run's own: {body}");
    assert!(body.get("extra").is_none(), "{body}");
    assert!(body["output"].as_str().unwrap().len() <= 4096);
    assert!(body.to_string().len() < 16 * 1024);
    // `orca runs` prints a bounded line.
    let shown = db.ok(&["runs"]);
    assert!(
        shown.len() < 16 * 1024,
        "orca runs printed {} bytes",
        shown.len()
    );
    // A beat naming a flood of attempts is refused, not unnested.
    let ids: Vec<i64> = (0..100_000).collect();
    let starts: Vec<i32> = vec![1; 100_000];
    let e = c
        .query(
            "SELECT * FROM orca.worker_beat($1, $2, $2)",
            &[&ids, &starts],
        )
        .unwrap_err();
    let said = e
        .as_db_error()
        .map(|d| d.message().to_string())
        .unwrap_or_default();
    assert!(said.contains("at most 1024"), "{e:?}");
}

#[test]
fn what_an_instance_login_sends_is_bounded_whatever_its_size() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let login = format!("orca_i_big_{}", std::process::id());
    db.register(
        &dir,
        "[pipelines.job]\ncommand = \"true\"\nplacement = \"ec2\"\n\n[pipelines.job.ec2]\ntype = \"small\"\nlocations = [\"here\"]\n",
    );
    db.login_role(&login, "pw", "orca_instance");
    let mut admin = db.client();
    let run: i64 = admin
        .query_one(
            "INSERT INTO orca.runs (pipeline, state, start) VALUES ('job', 'running', 1) RETURNING id",
            &[],
        )
        .unwrap()
        .get(0);
    admin
        .execute(
            "INSERT INTO orca.instances (instance, run, start, role, login, state)
             VALUES ('i-1', $1, 1, 'head', $2, 'joined')",
            &[&run, &login],
        )
        .unwrap();
    let mut c = db.client_as(&login, "pw");
    let big = vec![0u8; 3 << 20];
    c.execute("SELECT orca.instance_head_output($1, 1, $2)", &[&run, &big])
        .unwrap();
    let out_len: i32 = db.one("SELECT octet_length(output) FROM orca.runs");
    assert_eq!(out_len, 64 * 1024);
    let why = "w".repeat(3 << 20);
    c.query_one(
        "SELECT orca.instance_head_requeue($1, 1, $2, $3)",
        &[&run, &why, &big],
    )
    .unwrap();
    let row = db
        .client()
        .query_one(
            "SELECT state, length(why), octet_length(output) FROM orca.runs",
            &[],
        )
        .unwrap();
    let (state, why_len, out_len): (String, i32, i32) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(state, "queued");
    assert!(why_len <= 4096, "why stored {why_len} characters");
    assert_eq!(out_len, 64 * 1024);
}

/// The scheduler's figures from `ORCA_TICK_STATS` (written at its exit).
pub fn tick_max_ms(path: &std::path::Path) -> f64 {
    let line = std::fs::read_to_string(path).unwrap();
    line.split_whitespace()
        .find_map(|f| f.strip_prefix("max_ms="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no max_ms in {line:?}"))
}

#[test]
fn a_machine_holding_a_transaction_open_delays_no_tick_by_more_than_two_seconds() {
    let (db, dir) = pool_test(
        "idle_seconds = 1\n\n[pipelines.job]\ncommand = \"true\"\nplacement = \"worker:p\"\n\n[pipelines.here]\ncommand = \"echo here\"\n",
    );
    let role = hand_machine(&db, "p", "hold", "pw");
    // The machine's login: seen, then a hello left open in a transaction
    // (it holds its machine row's lock: a claim with nothing queued takes
    // none since migration 9), then nothing.
    let mut c = db.client_as(&role, "pw");
    c.execute("SELECT * FROM orca.worker_hello()", &[]).unwrap();
    c.batch_execute("SET statement_timeout = 0; SET idle_in_transaction_session_timeout = 0; BEGIN; SELECT * FROM orca.worker_hello()")
        .unwrap();
    let stats = dir.path("stats");
    let mut s = pool_scheduler(
        &db,
        &dir,
        &[
            ("ORCA_TICK_STATS", stats.to_str().unwrap()),
            ("ORCA_LOGIN_XACT_SECONDS", "6"),
        ],
    );
    // The idle machine's removal waits on that lock; the tick goes on.
    let run = db.queue("here");
    wait_until("a local run starts and ends meanwhile", 20.0, || {
        db.state(run) == "succeeded"
    });
    // The login stuck in its transaction has its session ended, with an
    // event naming it; then the machine is removed.
    s.wait_for("the stuck login's session is ended", 30.0, || {
        c.is_closed() || c.simple_query("SELECT 1").is_err()
    });
    let why: String =
        db.one("SELECT string_agg(why, ' | ') FROM orca.events WHERE kind = 'intruder'");
    assert!(why.contains(&role), "{why}");
    wait_until("the machine is removed", 30.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.pool_machines WHERE ended_at IS NULL") == 0
    });
    s.stop();
    let max = tick_max_ms(&stats);
    assert!(max < 3000.0, "a tick took {max} ms");
}

#[test]
fn machine_logins_orca_makes_have_timeouts_and_a_connection_limit() {
    let db = TestDb::new();
    let role = machine_role("made");
    db.client()
        .execute("SELECT orca.machine_role_make($1, 'x')", &[&role])
        .unwrap();
    let row = db
        .client()
        .query_one(
            "SELECT r.rolconnlimit, s.setconfig FROM pg_roles r
             JOIN pg_db_role_setting s ON s.setrole = r.oid WHERE r.rolname = $1",
            &[&role],
        )
        .unwrap();
    let (limit, settings): (i32, Vec<String>) = (row.get(0), row.get(1));
    assert_eq!(limit, 4);
    for want in [
        "statement_timeout=10s",
        "lock_timeout=5s",
        "idle_in_transaction_session_timeout=5s",
    ] {
        assert!(settings.contains(&want.to_string()), "{settings:?}");
    }
    let dropped: bool = db
        .client()
        .query_one("SELECT orca.machine_role_drop($1)", &[&role])
        .unwrap()
        .get(0);
    assert!(dropped, "orca's role (not a superuser) drops what it made");
}

/// A login of `group` made by hand, holding advisory lock `key` on a session
/// of its own (its application_name forged to look like orca's).
fn squatter(db: &TestDb, name: &str, group: &str, key: i64, app: &str) -> postgres::Client {
    db.login_role(name, "pw", group);
    let mut config: postgres::Config = db.url_as(name, "pw").parse().unwrap();
    config.application_name(app);
    let mut c = config.connect(postgres::NoTls).unwrap();
    c.execute("SELECT pg_advisory_lock($1)", &[&key]).unwrap();
    c
}

const LEAD_LOCK: i64 = 1869767525;
const MIGRATE_LOCK: i64 = 1869767524;

#[test]
fn a_machine_login_holding_the_lead_lock_is_ended_and_the_scheduler_leads() {
    // Unhardened (as on RDS): else a login can take no advisory lock.
    let (db, dir) = setup_in(
        TestDb::unhardened(),
        "[pipelines.job]\ncommand = \"echo ran\"\n",
    );
    let name = machine_role("lead");
    let mut held = squatter(
        &db,
        &name,
        "orca_worker",
        LEAD_LOCK,
        "orca scheduler host x pid 1",
    );
    // Overlap off: not refused as "another scheduler is running".
    let mut s = db.scheduler(&dir, &[]);
    let run = db.queue("job");
    wait_until("the run succeeds", 30.0, || db.state(run) == "succeeded");
    assert!(
        held.simple_query("SELECT 1").is_err(),
        "the squatter's session lives"
    );
    let why: String =
        db.one("SELECT string_agg(why, ' | ') FROM orca.events WHERE kind = 'intruder'");
    assert!(why.contains(&name) && why.contains("lead lock"), "{why}");
    // The log line starts with the event's kind, for grep.
    assert!(
        s.output()
            .contains(&format!("intruder: the lead lock was held by role {name}")),
        "{}",
        s.output()
    );
    s.stop();
    // Overlap on: the instance doesn't wait for ever.
    let mut held = db.client_as(&name, "pw");
    held.execute("SELECT pg_advisory_lock($1)", &[&LEAD_LOCK])
        .unwrap();
    let mut s = db.scheduler(&dir, &[("ORCA_OVERLAP", "on")]);
    let run = db.queue("job");
    wait_until("the run succeeds with overlap on", 30.0, || {
        db.state(run) == "succeeded"
    });
    assert!(held.simple_query("SELECT 1").is_err());
    s.stop();
}

#[test]
fn an_instance_login_holding_the_migration_lock_does_not_stop_migrate() {
    let db = TestDb::unhardened();
    let name = format!("orca_i_mig_{}", std::process::id());
    let mut held = squatter(&db, &name, "orca_instance", MIGRATE_LOCK, "orca migrate");
    let mut m = Proc::spawn(
        db.orca(&["migrate"]),
        &std::env::temp_dir().join(format!("{name}.log")),
    );
    let status = m.wait(30.0);
    assert!(status.success(), "{}", m.output());
    assert!(
        held.simple_query("SELECT 1").is_err(),
        "the squatter's session lives"
    );
    let why: String =
        db.one("SELECT string_agg(why, ' | ') FROM orca.events WHERE kind = 'intruder'");
    assert!(
        why.contains(&name) && why.contains("migration lock"),
        "{why}"
    );
}

#[test]
fn a_login_holding_the_old_claim_key_keeps_no_run_queued() {
    // Unhardened (as on RDS): else a login can take no advisory lock.
    let (db, dir) = setup_in(
        TestDb::unhardened(),
        &with_pool(
            "p",
            "[pipelines.job]\ncommand = \"echo ran\"\nplacement = \"worker:p\"\n",
        ),
    );
    let name = machine_role("claim");
    let mut held = squatter(&db, &name, "orca_worker", 0, "x");
    // The key claims took (1869767526, hashtext(pipeline)) before.
    held.execute("SELECT pg_advisory_lock(1869767526, hashtext('job'))", &[])
        .unwrap();
    // And the lock claims take now is a row no login can reach.
    refused(&mut held, "SELECT * FROM orca.claim_locks FOR UPDATE");
    let role = hand_machine(&db, "p", "claimer", "pw");
    let mut w = hand_worker(&db, &dir, "p", &role, "pw");
    let run = db.queue("job");
    wait_until("the worker claims and runs it", 30.0, || {
        db.state(run) == "succeeded"
    });
    w.signal(libc::SIGTERM);
    w.wait(30.0);
}

#[test]
fn machine_and_instance_logins_can_make_no_temporary_objects() {
    let db = TestDb::new();
    for (name, group) in [
        (machine_role("tmp"), "orca_worker"),
        (
            format!("orca_i_tmp_{}", std::process::id()),
            "orca_instance",
        ),
    ] {
        db.login_role(&name, "pw", group);
        let mut c = db.client_as(&name, "pw");
        for sql in [
            "CREATE TEMP TABLE t (x int)",
            "CREATE FUNCTION pg_temp.f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
            "CREATE TABLE public.t (x int)",
            "CREATE TABLE orca.t (x int)",
        ] {
            refused(&mut c, sql);
        }
    }
    // orca's own role keeps what it needs.
    db.client()
        .batch_execute("CREATE TEMP TABLE t (x int)")
        .unwrap();
}

#[test]
fn a_run_has_no_controlling_terminal_even_when_orca_has_one() {
    let (db, dir) = setup(
        "[pipelines.tty]\ncommand = \"if (exec 3</dev/tty) 2>/dev/null; then echo HAS_TTY; else echo NO_TTY; fi\"\n",
    );
    // script(1) runs the scheduler on a terminal of its own, as an
    // operator's shell would; a run that could open it could type into it.
    let mut c = std::process::Command::new("script");
    c.args(["-qfec", &format!("{} scheduler", bin()), "/dev/null"])
        .env("SHELL", "/bin/sh")
        .env("ORCA_DATABASE_URL", &db.url)
        .env("ORCA_TICK_SECONDS", "0.2")
        .env("ORCA_STOP_GRACE_SECONDS", "2")
        .stdin(std::process::Stdio::piped());
    let mut s = Proc::spawn(c, &dir.path("script.log"));
    let run = db.queue("tty");
    wait_until("the run succeeds", 30.0, || db.state(run) == "succeeded");
    let out = db.output(run);
    assert_eq!(text(&out).trim(), "NO_TTY");
    // The scheduler leads a session of its own on script's terminal: it is
    // stopped there, not left to the hang-up script's exit would send (a
    // suite run under nohup ignores SIGHUP, and the scheduler outlived it).
    let pid = s.pid();
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    for child in children
        .split_whitespace()
        .filter_map(|c| c.parse::<i32>().ok())
    {
        // SAFETY: kill(2) of the session script started for this test.
        unsafe { libc::kill(-child, libc::SIGTERM) };
    }
    let _ = s.child.wait();
}

#[test]
fn a_machine_login_holding_any_advisory_lock_is_ended() {
    // Logins need none; thousands of them fill the server's lock table.
    // (Unhardened, as on RDS: else they can take none.)
    let (db, dir) = setup_in(
        TestDb::unhardened(),
        "[pipelines.job]\ncommand = \"true\"\n",
    );
    let name = machine_role("adv");
    let mut held = squatter(&db, &name, "orca_worker", 42, "x");
    held.execute(
        "SELECT pg_advisory_lock(7, n) FROM generate_series(1, 50) n",
        &[],
    )
    .unwrap();
    let mut s = db.scheduler(&dir, &[("ORCA_LOGIN_XACT_SECONDS", "2")]);
    wait_until("the login's session is ended", 20.0, || {
        held.simple_query("SELECT 1").is_err()
    });
    let why: String =
        db.one("SELECT string_agg(why, ' | ') FROM orca.events WHERE kind = 'intruder'");
    assert!(why.contains(&name) && why.contains("advisory"), "{why}");
    assert!(
        s.output()
            .contains(&format!("intruder: login {name} (backend pid")),
        "{}",
        s.output()
    );
    s.stop();
}

#[test]
fn a_transaction_a_machine_login_prepared_is_rolled_back() {
    let cluster = Cluster::new("max_prepared_transactions = 5\n");
    cluster.start();
    // Unhardened (as on RDS): else a login can take no advisory lock.
    let db = TestDb::unhardened_on(&cluster.url());
    let migrate = db.run(&["migrate"]);
    assert!(
        text(&migrate.stderr).contains("max_prepared_transactions is 5"),
        "{}",
        text(&migrate.stderr)
    );
    let dir = TempDir::new();
    db.register(
        &dir,
        &with_pool(
            "p",
            "[pipelines.job]\ncommand = \"true\"\nplacement = \"worker:p\"\n",
        ),
    );
    let role = hand_machine(&db, "p", "prep", "pw");
    let run = db.queue("job");
    let mut c = db.client_as(&role, "pw");
    // Holding the migration lock, with no session to end.
    c.batch_execute(
        "BEGIN; SELECT pg_advisory_xact_lock(1869767524); PREPARE TRANSACTION 'migrate'",
    )
    .unwrap();
    let mut m = Proc::spawn(db.orca(&["migrate"]), &dir.path("migrate.log"));
    assert!(m.wait(30.0).success(), "{}", m.output());
    // Prepared as its group role, so its owner is not the login: still
    // not orca's. And one holding the lead lock.
    c.batch_execute(
        "SET ROLE orca_worker; BEGIN; SELECT * FROM orca.worker_claim(1); PREPARE TRANSACTION 'evil'",
    )
    .unwrap();
    c.batch_execute("BEGIN; SELECT pg_advisory_xact_lock(1869767525); PREPARE TRANSACTION 'lead'")
        .unwrap();
    assert_eq!(db.one::<i64>("SELECT count(*) FROM pg_prepared_xacts"), 2);
    // Overlap off: not refused as "another scheduler is running".
    let mut s = db.scheduler(&dir, &[("ORCA_LOGIN_XACT_SECONDS", "2")]);
    s.wait_for("the prepared transaction is rolled back", 20.0, || {
        db.one::<i64>("SELECT count(*) FROM pg_prepared_xacts") == 0
    });
    let why: String =
        db.one("SELECT string_agg(why, ' | ') FROM orca.events WHERE kind = 'intruder'");
    for gid in ["evil", "migrate", "lead"] {
        assert!(
            why.contains(&format!("{gid:?} holding its locks: it was rolled back")),
            "{why}"
        );
    }
    // Its claim went with it: another worker of the pool takes the run.
    let other = hand_machine(&db, "p", "prep2", "pw");
    let mut w = hand_worker(&db, &dir, "p", &other, "pw");
    wait_until("the run succeeds", 30.0, || db.state(run) == "succeeded");
    w.signal(libc::SIGTERM);
    w.wait(30.0);
    s.stop();
}

#[test]
fn an_instance_login_holding_its_row_holds_up_no_other_instance_s_end() {
    let (db, _dir) = setup(
        "[pipelines.job]\ncommand = \"true\"\nplacement = \"ec2\"\n\n[pipelines.job.ec2]\ntype = \"small\"\nlocations = [\"here\"]\n",
    );
    let evil = format!("orca_i_evil_{}", std::process::id());
    let good = format!("orca_i_good_{}", std::process::id());
    db.login_role(&evil, "pw", "orca_instance");
    db.login_role(&good, "pw", "orca_instance");
    for (instance, login) in [("inst-evil", &evil), ("inst-good", &good)] {
        db.client()
            .execute(
                "INSERT INTO orca.instances (instance, run, start, role, login, state, idle_at, polled)
                 VALUES ($1, 5, 1, 'head', $2, 'idle', now(), now() - interval '1 hour')",
                &[&instance, login],
            )
            .unwrap();
    }
    let mut held = db.client_as(&evil, "pw");
    held.batch_execute("BEGIN; SELECT orca.instance_idle('inst-evil', 5, 1)")
        .unwrap();
    // The leader's statement, on a session set as the scheduler's are.
    let mut c = db.client();
    c.batch_execute("SET lock_timeout = 2000").unwrap();
    let ended = c
        .query(
            include_str!("../../sql/instances_to_end.sql"),
            &[&60.0f64, &30.0f64, &30.0f64],
        )
        .unwrap();
    let rows: Vec<(String, String, bool)> = ended
        .iter()
        .map(|r| (r.get(0), r.get(4), r.get(5)))
        .collect();
    assert!(
        rows.contains(&("inst-good".into(), good.clone(), true)),
        "{rows:?}"
    );
    // The held one comes back with its login, to be revoked first.
    assert!(
        rows.contains(&("inst-evil".into(), evil.clone(), false)),
        "{rows:?}"
    );
    assert_eq!(rows.len(), 2, "{rows:?}");
    held.batch_execute("COMMIT").unwrap();
    let ended = c
        .query(
            include_str!("../../sql/instances_to_end.sql"),
            &[&60.0f64, &30.0f64, &30.0f64],
        )
        .unwrap();
    let ended: Vec<bool> = ended.iter().map(|r| r.get(5)).collect();
    assert_eq!(ended, vec![true], "the held one is ended on a later pass");
}

#[test]
fn an_attempt_s_last_output_is_recorded_with_its_end() {
    // The end used to be written from what the output thread had read when
    // the process was reaped; the last lines could still be in the pipe
    // (seen once in CI, under load: the reading thread had not had its turn).
    // A stress check: it fails only when that thread is slow.
    let (db, dir) = setup(
        "[pipelines.chatty]\ncommand = \"seq 1 20000; echo LAST $ORCA_RUN_ID; exit 3\"\nmax_runs = 8\n",
    );
    let runs: Vec<i64> = (0..30).map(|_| db.queue("chatty")).collect();
    let mut s = db.scheduler(&dir, &[]);
    wait_until("every run ends", 60.0, || {
        runs.iter().all(|r| db.state(*r) == "failed")
    });
    for r in runs {
        let out = text(&db.output(r));
        assert!(
            out.ends_with(&format!("LAST {r}\n")),
            "run {r}: ...{}",
            &out[out.len().saturating_sub(80)..]
        );
    }
    s.stop();
}

/// A machine login holding its own row's lock must not stop another
/// pool from growing (the scaler's first phase marks it ending and the mark
/// waits out lock_timeout).
#[test]
fn a_held_machine_row_blocks_no_other_pool_s_growth() {
    let toml = format!(
        "{}idle_seconds = 1\n\n{}\n[pipelines.qjob]\ncommand = \"sleep 30\"\nplacement = \"worker:q\"\n",
        with_pool("p", ""),
        with_pool("q", "")
    );
    let (db, dir) = setup(&toml);
    let role = hand_machine(&db, "p", "rhold", "pw");
    let mut c = db.client_as(&role, "pw");
    c.execute("SELECT * FROM orca.worker_hello()", &[]).unwrap();
    wait_until("the machine is idle past its idle_seconds", 30.0, || {
        db.one::<bool>(
            "SELECT now() - busy_at > interval '1.2 s' FROM orca.pool_machines WHERE pool = 'p'",
        )
    });
    c.batch_execute("SET statement_timeout = 0; SET idle_in_transaction_session_timeout = 0; BEGIN; SELECT * FROM orca.worker_hello()")
        .unwrap();
    db.queue("qjob");
    let mut s = pool_scheduler(&db, &dir, &[("ORCA_LOGIN_XACT_SECONDS", "120")]);
    s.wait_for(
        "pool q gets a machine while p's machine row is held",
        25.0,
        || db.one::<i64>("SELECT count(*) FROM orca.pool_machines WHERE pool = 'q'") > 0,
    );
    s.stop();
}

/// A run's command starts with no signal blocked and none of those the
/// shim ignores or the Rust runtime does (SIGHUP, SIGINT, SIGPIPE, SIGTERM)
/// ignored, so a timeout's SIGTERM ends it; a script with no `#!` line
/// runs under /bin/sh, as `execvp(3)` would run it; one that isn't there
/// fails with exit code 127 and says so in its output.
#[test]
fn a_run_starts_with_its_signals_at_their_defaults_and_a_missing_command_fails_127() {
    // A script with no `#!` line runs under /bin/sh, as execvp(3) runs it.
    let script = std::env::temp_dir().join(format!("orca-no-shebang-{}", std::process::id()));
    std::fs::write(&script, "echo \"no shebang: $1\"\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (db, dir) = setup(&format!(
        "[pipelines.sigs]\ncommand = [\"grep\", \"-E\", \"^Sig(Blk|Ign)\", \"/proc/self/status\"]\n\n\
         [pipelines.missing]\ncommand = [\"no-such-command-for-orca\"]\n\n\
         [pipelines.script]\ncommand = [\"{}\", \"its arg\"]\n",
        script.display()
    ));
    let sigs = db.queue("sigs");
    let missing = db.queue("missing");
    let plain = db.queue("script");
    let mut s = db.scheduler(&dir, &[]);
    wait_until("the runs end", 30.0, || {
        db.state(sigs) == "succeeded"
            && db.state(missing) == "failed"
            && ["succeeded", "failed"].contains(&db.state(plain).as_str())
    });
    let ran = text(&db.output(plain));
    let _ = std::fs::remove_file(&script);
    assert_eq!(db.state(plain), "succeeded", "{ran}");
    assert!(ran.contains("no shebang: its arg"), "{ran}");
    let out = text(&db.output(sigs));
    let mask = |name: &str| -> u64 {
        let line = out
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {out:?}"));
        u64::from_str_radix(line.trim(), 16).unwrap()
    };
    assert_eq!(mask("SigBlk:"), 0, "{out}");
    let bit = |sig: i32| 1u64 << (sig - 1);
    for sig in [libc::SIGHUP, libc::SIGINT, libc::SIGPIPE, libc::SIGTERM] {
        assert_eq!(mask("SigIgn:") & bit(sig), 0, "signal {sig} ignored: {out}");
    }
    let code: Option<i32> = db.one(&format!(
        "SELECT exit_code FROM orca.runs WHERE id = {missing}"
    ));
    assert_eq!(code, Some(127));
    let said = text(&db.output(missing));
    assert!(
        said.contains("can't run no-such-command-for-orca"),
        "{said}"
    );
    s.terminate(10.0);
}

/// A run holds no descriptor of orca's (not the keeper's socket, which
/// starts commands as orca's user; not another run's output), and, run as
/// another user, can neither signal its keeper nor read its environment.
#[test]
fn a_run_holds_no_descriptor_of_orca_s_and_can_t_reach_its_keeper() {
    // SAFETY: geteuid(2) can't fail.
    let root = unsafe { libc::geteuid() } == 0;
    let (db, dir) = setup(
        "[pipelines.fds]\ncommand = [\"ls\", \"-l\", \"/proc/self/fd\"]\n\n\
         [pipelines.reach]\ncommand = 'if kill -0 $PPID 2>/dev/null; then echo SIGNALS_KEEPER; fi; \
         if cat /proc/$PPID/environ >/dev/null 2>&1; then echo READS_KEEPER; fi; echo \"checked $PPID\"'\n\n\
         [pipelines.other]\ncommand = \"sleep 30\"\n",
    );
    let other = db.queue("other");
    let run_as: &[(&str, &str)] = if root {
        &[("ORCA_RUN_AS", "nobody")]
    } else {
        &[]
    };
    let mut s = db.scheduler(&dir, run_as);
    wait_until("the other run runs", 30.0, || db.state(other) == "running");
    let (fds, reach) = (db.queue("fds"), db.queue("reach"));
    wait_until("both runs end", 30.0, || {
        db.state(fds) != "queued"
            && db.state(fds) != "running"
            && db.state(reach) != "queued"
            && db.state(reach) != "running"
    });
    let listed = text(&db.output(fds));
    assert_eq!(db.state(fds), "succeeded", "{listed}");
    for line in listed.lines().filter(|l| l.contains(" -> ")) {
        let (head, target) = line.split_once(" -> ").unwrap();
        let fd: i32 = head.split_whitespace().last().unwrap().parse().unwrap();
        // ls's own descriptor of the directory it lists aside.
        assert!(
            fd <= 2 || target.ends_with("/fd"),
            "a run holds descriptor {fd} of orca's: {line}\n{listed}"
        );
    }
    let said = text(&db.output(reach));
    assert!(said.contains("checked "), "{said}");
    if root {
        assert!(!said.contains("SIGNALS_KEEPER"), "{said}");
        assert!(!said.contains("READS_KEEPER"), "{said}");
    }
    // The run's parent is the keeper, a child of the scheduler.
    let parent: i32 = said
        .lines()
        .find_map(|l| l.strip_prefix("checked "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        children(s.pid()).contains(&parent),
        "the run's parent is its keeper, a child of the scheduler"
    );
    s.terminate(10.0);
}

/// A run as another user that SIGSTOPs every process of its user without
/// end: a command being started is its user's before it execs, and must
/// not be the keeper's to wait on then (the keeper, and every run after,
/// would wait with it). Its timeout kills it, and the next run runs.
#[test]
fn a_run_stopping_its_user_s_processes_wedges_no_keeper() {
    // SAFETY: geteuid(2) can't fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: ORCA_RUN_AS needs the tests to run as root");
        return;
    }
    let mark = format!("orca-stopper-{}", std::process::id());
    let (db, dir) = setup(&format!(
        "[pipelines.stopper]\ncommand = [\"perl\", \"-e\", \"$0 = '{mark}'; kill 'STOP', -1 while 1\"]\ntimeout = 3\n\n\
         [pipelines.next]\ncommand = \"echo next\"\ntimeout = 60\nmax_runs = 20\n"
    ));
    let mut s = db.scheduler(
        &dir,
        // `games`, a user no other test runs as: the stopper stops every
        // process of its user on the box, other tests' runs too.
        &[("ORCA_RUN_AS", "games"), ("ORCA_KILL_GRACE_SECONDS", "1")],
    );
    let stopper = db.queue("stopper");
    wait_until("the stopper runs", 30.0, || !named(&mark).is_empty());
    // Commands started while it runs are its prey (they are its user's):
    // started, stopped before or after their exec, killed at their end.
    let prey: Vec<i64> = (0..10).map(|_| db.queue("next")).collect();
    wait_until("the stopper ends at its timeout", 30.0, || {
        db.state(stopper) == "failed"
    });
    wait_until("its process is gone", 10.0, || named(&mark).is_empty());
    // (Some may have run before it stopped them.)
    for p in prey {
        db.run(&["cancel", &p.to_string()]);
    }
    let next = db.queue("next");
    wait_until("the next run succeeds", 30.0, || {
        db.state(next) == "succeeded"
    });
    s.terminate(30.0);
}
