//! What a machine or instance login can do to the rest: what it sends is
//! bounded, an open transaction, a held lock or row or a prepared
//! transaction holds up no tick, lead, migration, claim or other's end, and
//! it can make no temporary object.

use super::*;

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
    // Overlap on: the scheduler doesn't wait for ever.
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
            include_str!("../../../sql/instances_to_end.sql"),
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
            include_str!("../../../sql/instances_to_end.sql"),
            &[&60.0f64, &30.0f64, &30.0f64],
        )
        .unwrap();
    let ended: Vec<bool> = ended.iter().map(|r| r.get(5)).collect();
    assert_eq!(ended, vec![true], "the held one is ended on a later pass");
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
