//! A machine login filling the server's shared lock table with advisory
//! locks (possible where logins may run the advisory lock functions, as on
//! RDS): every session of every database fails while the flooder stays
//! connected, so orca must end it from a session it already has. On a
//! cluster of the test's own with a small lock table: the lock table is
//! the whole server's, and a flood on the shared test server would break
//! every test running beside this one.

use crate::harness::*;
use std::time::{Duration, Instant};

/// What fills the lock table: it fails with `out of shared memory`, and
/// the session keeps every lock it took before that.
const FLOOD: &str = "SELECT count(pg_advisory_lock(g)) FROM generate_series(1, 200000) g";

/// Floods the lock table as `login` on `url`, checks it is full, and
/// returns the flooding session, left idle.
fn flood(url: &str) -> postgres::Client {
    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let e = c.batch_execute(FLOOD).unwrap_err();
    assert_eq!(
        e.code(),
        Some(&postgres::error::SqlState::OUT_OF_MEMORY),
        "the flood fills the lock table: {e:?}"
    );
    c
}

/// `orca runs` until it answers (exit 0), each try bounded; how long that
/// took.
fn runs_answer(db: &TestDb, since: Instant, secs: f64) -> Duration {
    let deadline = since + Duration::from_secs_f64(secs);
    loop {
        let mut cmd = db.orca(&["runs"]);
        cmd.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let mut p = cmd.spawn().unwrap();
        let tried = Instant::now();
        let ok = loop {
            if let Some(st) = p.try_wait().unwrap() {
                break st.success();
            }
            if tried.elapsed() > Duration::from_secs(5) {
                let _ = p.kill();
                let _ = p.wait();
                break false;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        if ok {
            return since.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "orca runs did not answer within {secs} s of the flood"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_login_filling_the_lock_table_is_ended_and_orca_answers_again() {
    // A small lock table (max_locks_per_transaction × about 50 backends),
    // filled in milliseconds.
    let cluster = Cluster::new("max_connections = 30\nmax_locks_per_transaction = 10\n");
    cluster.start();
    // Unhardened (as on RDS, where EXECUTE on the advisory lock functions
    // can't be revoked from PUBLIC).
    let db = TestDb::unhardened_on(&cluster.url());
    let dir = TempDir::new();
    db.register(
        &dir,
        "[pipelines.job]\ncommand = \"sleep 3; echo done\"\nmax_runs = 2\n",
    );
    let before: Vec<i64> = (0..4).map(|_| db.queue("job")).collect();
    let logins = [db.role_name("m_flood1"), db.role_name("m_flood2")];
    for name in &logins {
        db.login_role(name, "pw", "orca_worker");
    }
    // The stale limit as in production: a run is not judged lost for the
    // few seconds the flood lasts.
    let mut s = db.scheduler(&dir, &[("ORCA_STALE_SECONDS", "10")]);
    wait_until("runs running", 60.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.runs WHERE state = 'running'") == 2
    });

    for (round, database) in [(1, db.name().to_string()), (2, "postgres".to_string())] {
        // In orca's database, then in another one of the server's (a login
        // may connect to it where the administrator couldn't revoke that).
        let name = &logins[round - 1];
        let url = with_db(&db.url_as(name, "pw"), &database);
        // A second session kept ready to flood again once the first ends.
        let mut spare = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let mut held = flood(&url);
        let flooded = Instant::now();
        wait_until("the flooding session is ended", 10.0, || {
            held.simple_query("SELECT 1").is_err()
        });
        let ended = flooded.elapsed();
        let answered = runs_answer(&db, flooded, 15.0);
        eprintln!(
            "flood {round} (in {database}): ended after {:.1}s, orca runs answered after {:.1}s",
            ended.as_secs_f64(),
            answered.as_secs_f64()
        );
        assert!(
            ended < Duration::from_secs(5),
            "ended within a few seconds: {ended:?}"
        );
        wait_until("an intruder event names the login", 15.0, || {
            db.one::<i64>(&format!(
                "SELECT count(*) FROM orca.events WHERE kind = 'intruder' \
                 AND why LIKE '%{name}%' AND why LIKE '%advisory locks%'"
            )) >= 1
        });
        // Its login is revoked: the spare session is ended, and it can't
        // log in to flood again.
        wait_until("the login's other session is ended", 10.0, || {
            spare.simple_query("SELECT 1").is_err()
        });
        let again = postgres::Client::connect(&url, postgres::NoTls).map(|_| ());
        assert!(again.is_err(), "the login is revoked");
    }
    let why: String = db
        .one("SELECT string_agg(why, ' | ' ORDER BY id) FROM orca.events WHERE kind = 'intruder'");
    assert!(why.contains("in database postgres"), "{why}");
    assert!(why.contains("its login was revoked"), "{why}");
    // The runs queued before the floods all ran to their end.
    wait_until("the runs queued before the floods end", 60.0, || {
        before.iter().all(|r| db.state(*r) == "succeeded")
    });
    for name in &logins {
        assert!(
            s.output().contains(&format!("intruder: login {name}")),
            "{}",
            s.output()
        );
    }
    // It survived the floods: SIGTERM ends it with exit 0.
    s.stop();
}

#[test]
fn the_administrator_s_hardening_leaves_logins_no_function_that_takes_an_advisory_lock() {
    // docs/security.md's SQL (run by TestDb::new) names each such function
    // of the server's; a server that adds one would open the flood again.
    let db = TestDb::new();
    let login = db.role_name("m_hardened");
    db.login_role(&login, "pw", "orca_worker");
    let open: Vec<String> = db
        .client()
        .query(
            "SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc p
             WHERE p.pronamespace = 'pg_catalog'::regnamespace
               AND p.proname LIKE '%advisory%' AND p.proname NOT LIKE '%unlock%'
               AND has_function_privilege($1, p.oid, 'EXECUTE')
             ORDER BY 1",
            &[&login],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(open.is_empty(), "logins may still run {open:?}");
    let mut c = db.client_as(&login, "pw");
    refused(&mut c, "SELECT pg_advisory_lock_shared(1, 2)");
    // orca's role keeps what it uses: the guard's reserve among them.
    let kept: bool = db.one(
        "SELECT has_function_privilege('pg_try_advisory_lock(bigint)', 'EXECUTE')
            AND has_function_privilege('pg_advisory_unlock_all()', 'EXECUTE')",
    );
    assert!(kept);
    // And a scheduler there holds its guard's reserve, with nothing to say.
    let dir = TempDir::new();
    db.register(&dir, "[pipelines.job]\ncommand = \"true\"\n");
    let mut s = db.scheduler(&dir, &[]);
    s.wait_for("the guard's reserve held", 30.0, || {
        db.one::<i64>(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
               AND classid = 1869767521 AND objsubid = 1
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        ) == 32
    });
    assert!(!s.output().contains("flood guard"), "{}", s.output());
    s.stop();
}

#[test]
fn many_logins_filling_the_lock_table_a_few_locks_each_are_ended() {
    // Each session under the bar of one flooder, together filling the
    // table (a fleet's image compromised, say): while it is full, every
    // login holding any advisory lock is ended.
    let cluster = Cluster::new("max_connections = 40\nmax_locks_per_transaction = 10\n");
    cluster.start();
    let db = TestDb::unhardened_on(&cluster.url());
    let dir = TempDir::new();
    db.register(&dir, "[pipelines.job]\ncommand = \"true\"\n");
    let mut s = db.scheduler(&dir, &[("ORCA_STALE_SECONDS", "10")]);
    let run = db.queue("job");
    wait_until("the scheduler runs a run", 60.0, || {
        db.state(run) == "succeeded"
    });
    let mut held = Vec::new();
    let mut full = false;
    let mut key = 0i64;
    'fill: for n in 0..8 {
        let name = db.role_name(&format!("m_many{n}"));
        db.login_role(&name, "pw", "orca_worker");
        let url = with_db(&db.url_as(&name, "pw"), "postgres");
        for _ in 0..4 {
            let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            for _ in 0..60 {
                key += 1;
                if let Err(e) = c.execute("SELECT pg_advisory_lock($1)", &[&key]) {
                    assert_eq!(e.code(), Some(&postgres::error::SqlState::OUT_OF_MEMORY));
                    held.push(c);
                    full = true;
                    break 'fill;
                }
            }
            held.push(c);
        }
    }
    assert!(full, "the test's sessions filled the table");
    let flooded = Instant::now();
    let answered = runs_answer(&db, flooded, 15.0);
    eprintln!(
        "{} sessions of 60 locks or fewer: orca runs answered after {:.1}s",
        held.len(),
        answered.as_secs_f64()
    );
    wait_until("every flooding session is ended", 15.0, || {
        held.iter_mut().all(|c| c.simple_query("SELECT 1").is_err())
    });
    wait_until("intruder events name them", 15.0, || {
        db.one::<i64>(
            "SELECT count(*) FROM orca.events WHERE kind = 'intruder' AND why LIKE '%advisory locks%'",
        ) >= 1
    });
    s.stop();
}

#[test]
fn a_flood_orca_may_not_end_is_survived_and_its_runs_end_afterwards() {
    // Another role of the server's (no login orca made) fills the table
    // for longer than the stale limit: it is left alone, said once; the
    // scheduler's statements fail meanwhile and it goes on.
    let cluster = Cluster::new("max_connections = 30\nmax_locks_per_transaction = 10\n");
    cluster.start();
    let db = TestDb::unhardened_on(&cluster.url());
    let dir = TempDir::new();
    let ended = dir.path("ended");
    // Each run longer than the stale limit, writing when its command ends.
    db.register(
        &dir,
        &format!(
            "[pipelines.job]\ncommand = \"sleep 6; echo $ORCA_RUN_ID >> {}\"\nmax_runs = 2\n",
            ended.display()
        ),
    );
    let runs: Vec<i64> = (0..4).map(|_| db.queue("job")).collect();
    let other = db.role_name("someone");
    db.plain_login_role(&other, "pw");
    let mut s = db.scheduler(&dir, &[("ORCA_STALE_SECONDS", "5")]);
    wait_until("runs running", 60.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.runs WHERE state = 'running'") == 2
    });
    let held = flood(&with_db(&db.url_as(&other, "pw"), "postgres"));
    s.wait_for("the flooder is said to be left alone", 10.0, || {
        s.output().contains("is no login of orca's: left alone")
    });
    // Held until the two runs running end their commands (over the stale
    // limit): their ends wait in memory.
    wait_until("the running runs' commands end", 30.0, || {
        std::fs::read_to_string(&ended).is_ok_and(|t| t.lines().count() == 2)
    });
    drop(held);
    wait_until("the runs end", 60.0, || {
        runs.iter().all(|r| db.state(*r) == "succeeded")
    });
    for r in &runs {
        assert_eq!(db.events(*r, "started"), 1, "run {r} started once");
    }
    s.stop();
}

#[test]
fn a_login_s_second_session_waiting_to_flood_again_is_ended_with_the_first() {
    flood_then_spin(false);
}

#[test]
fn another_login_waiting_to_flood_again_is_ended_with_the_flooder() {
    // Two machines' logins acting together (a fleet's image compromised):
    // one floods, the other, holding no lock, waits to take the table back.
    flood_then_spin(true);
}

/// A login floods the lock table while a second session (of another login
/// with `another`, else of the same) asks for locks without pause: the
/// moment the first is ended and its locks are free, it takes them, before
/// the guard has its reserve back (or the login is revoked). The server
/// must answer again all the same.
fn flood_then_spin(another: bool) {
    let cluster = Cluster::new("max_connections = 30\nmax_locks_per_transaction = 10\n");
    cluster.start();
    let db = TestDb::unhardened_on(&cluster.url());
    let dir = TempDir::new();
    db.register(&dir, "[pipelines.job]\ncommand = \"true\"\n");
    let name = db.role_name("m_spin");
    db.login_role(&name, "pw", "orca_worker");
    let spins_as = if another {
        let other = db.role_name("m_spin2");
        db.login_role(&other, "pw", "orca_worker");
        other
    } else {
        name.clone()
    };
    let mut s = db.scheduler(&dir, &[("ORCA_STALE_SECONDS", "10")]);
    let run = db.queue("job");
    wait_until("the scheduler runs a run", 60.0, || {
        db.state(run) == "succeeded"
    });
    let url = with_db(&db.url_as(&name, "pw"), "postgres");
    let mut spinner = postgres::Client::connect(
        &with_db(&db.url_as(&spins_as, "pw"), "postgres"),
        postgres::NoTls,
    )
    .unwrap();
    let mut held = flood(&url);
    let flooded = Instant::now();
    let spinning = std::thread::spawn(move || {
        // Keys of its own; each try keeps what it took before it failed.
        let mut from = 1_000_000i64;
        while flooded.elapsed() < Duration::from_secs(30) {
            match spinner.execute(
                "SELECT count(pg_advisory_lock(g)) FROM generate_series($1::bigint, $1::bigint + 200000) g",
                &[&from],
            ) {
                Err(e) if e.code() == Some(&postgres::error::SqlState::OUT_OF_MEMORY) => {
                    from += 200_001
                }
                Ok(_) => from += 200_001,
                // Ended: terminated by the guard, or its connection gone.
                Err(e) => {
                    return e.code() == Some(&postgres::error::SqlState::ADMIN_SHUTDOWN)
                        || spinner.is_closed();
                }
            }
        }
        false
    });
    wait_until("the flooding session is ended", 10.0, || {
        held.simple_query("SELECT 1").is_err()
    });
    let answered = runs_answer(&db, flooded, 15.0);
    eprintln!("orca runs answered after {:.1}s", answered.as_secs_f64());
    assert!(spinning.join().unwrap(), "the second session was ended");
    s.stop();
}
