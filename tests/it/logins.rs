//! What a machine login can't do to orca however it tries (issue 28,
//! sections 2 and 3): keep its machine from being removed by holding the
//! machine's row in transactions just short of `ORCA_LOGIN_XACT_SECONDS`,
//! or leave behind anything it made. Every test runs orca as the README's
//! role, not a superuser; the machine is made by hand, its login playing
//! the attacker.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::harness::*;
use crate::pools::{pool_scheduler, pool_test};

/// A worker's round as a machine's login sends it with nothing to report
/// and no room: it beats its machine's row (and holds that row's lock to
/// the end of its transaction).
const ROUND: &str = "SELECT * FROM orca.worker_round('{}', '{}', '{}', '{}', '{}', '{}', '{}', 0, \
     '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}')";

/// Transactions of `hold` seconds, each beginning with a worker's round
/// and ended with `end` (`COMMIT`, or `ROLLBACK`: its beats never land, so
/// its machine goes silent), as `role`'s login, in two sessions that take
/// turns: each waits on the row while the other holds it, so that it is
/// never free between them, and no transaction lasts over 2 x `hold`.
/// Until `stop`, or both sessions are ended: whether they were.
fn holds_its_row(
    db: &TestDb,
    role: &str,
    hold: f64,
    end: &str,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<bool> {
    let batch = format!("BEGIN; {ROUND}; SELECT pg_sleep({hold}); {end}");
    let turns: Vec<_> = (0..2)
        .map(|_| {
            let mut c = db.client_as(role, "pw");
            c.batch_execute(
                "SET statement_timeout = 0; SET lock_timeout = 0; \
                 SET idle_in_transaction_session_timeout = 0",
            )
            .unwrap();
            let (batch, stop) = (batch.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    if c.batch_execute(&batch).is_err() {
                        return true;
                    }
                }
                false
            })
        })
        .collect();
    std::thread::spawn(move || turns.into_iter().all(|t| t.join().unwrap()))
}

#[test]
fn a_login_holding_its_machine_s_row_in_short_transactions_can_t_keep_it_from_removal() {
    // The bound: ORCA_POOL_SCALE_SECONDS + 2 x ORCA_LOGIN_XACT_SECONDS from
    // when the machine is due, whatever its login does.
    const SCALE: f64 = 1.0;
    const XACT: f64 = 4.0;
    let (db, dir) = pool_test("idle_seconds = 1\n");
    let role = hand_machine(&db, "p", "loop", "pw");
    // Seen, then idle past its idle_seconds: due for removal.
    db.client_as(&role, "pw").batch_execute(ROUND).unwrap();
    wait_until("the machine is idle past its idle_seconds", 30.0, || {
        db.one::<bool>(
            "SELECT now() - busy_at > interval '1.2 s' FROM orca.pool_machines WHERE pool = 'p'",
        )
    });
    // Its login holds the row in transactions short of the limit, two
    // sessions taking turns.
    let stop = Arc::new(AtomicBool::new(false));
    let looping = holds_its_row(&db, &role, XACT / 2.0 - 0.4, "COMMIT", stop.clone());
    let mut s = pool_scheduler(
        &db,
        &dir,
        &[
            ("ORCA_POOL_SCALE_SECONDS", &SCALE.to_string()),
            ("ORCA_LOGIN_XACT_SECONDS", &XACT.to_string()),
        ],
    );
    s.wait_for("the scheduler leads", 30.0, || db.lead_held());
    let leads = Instant::now();
    // Removed within the bound (and a margin for a loaded box), as idle.
    s.wait_for("the machine is removed", SCALE + 2.0 * XACT + 6.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.pool_machines WHERE ended_at IS NULL") == 0
    });
    let took = leads.elapsed().as_secs_f64();
    let why: String = db.one("SELECT why FROM orca.pool_machines");
    assert!(why.contains("idle"), "{why}");
    // Its login was revoked: its loop's session ended, and it can't log in.
    // Taken from its login, an event says so; on a loaded box a removal may
    // also find the row free in the instant between the two sessions'
    // transactions (and then it is an idle machine's removal, no event).
    stop.store(true, Ordering::SeqCst);
    assert!(looping.join().unwrap(), "the login's session was not ended");
    let said: String = db.one(
        "SELECT coalesce(string_agg(why, ' | '), '') FROM orca.events WHERE kind = 'intruder'",
    );
    assert!(
        said.is_empty() || (said.contains(&role) && said.contains("held its machine")),
        "{said}"
    );
    let again = postgres::Client::connect(&db.url_as(&role, "pw"), postgres::NoTls);
    assert!(again.is_err(), "the removed machine's login still logs in");
    s.stop();
    eprintln!("removed {took:.1}s after the scheduler led");
}

#[test]
fn a_lost_machine_whose_login_holds_its_row_is_removed_all_the_same() {
    const XACT: f64 = 4.0;
    let (db, dir) = pool_test("idle_seconds = 600\n");
    let role = hand_machine(&db, "p", "lost", "pw");
    db.client_as(&role, "pw").batch_execute(ROUND).unwrap();
    // Its rounds are rolled back: it is never heard from again, and it
    // holds its row all along.
    let stop = Arc::new(AtomicBool::new(false));
    let looping = holds_its_row(&db, &role, XACT / 2.0 - 0.4, "ROLLBACK", stop.clone());
    let mut s = pool_scheduler(
        &db,
        &dir,
        &[
            ("ORCA_POOL_SCALE_SECONDS", "1"),
            ("ORCA_POOL_LOST_SECONDS", "4"),
            ("ORCA_LOGIN_XACT_SECONDS", &XACT.to_string()),
        ],
    );
    s.wait_for("the lost machine is removed", 40.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.pool_machines WHERE ended_at IS NULL") == 0
    });
    let why: String = db.one("SELECT why FROM orca.pool_machines");
    assert!(why.contains("silent"), "{why}");
    let said: String = db.one(
        "SELECT coalesce(string_agg(why, ' | '), '') FROM orca.events WHERE kind = 'intruder'",
    );
    assert!(
        said.contains(&format!("login {role} held its machine")),
        "{said}"
    );
    stop.store(true, Ordering::SeqCst);
    assert!(looping.join().unwrap(), "the login's session was not ended");
    assert!(postgres::Client::connect(&db.url_as(&role, "pw"), postgres::NoTls).is_err());
    s.stop();
}

/// One statement for every kind of object a role can own, or make by
/// another's rights, as a machine login would try them: in this database's
/// schemas, as its group role, shared across the server. Each may be
/// refused; none may leave anything behind.
const EVERY_KIND: &[&str] = &[
    "CREATE SCHEMA evil",
    "CREATE TABLE public.t (x int)",
    "CREATE TABLE orca.t (x int)",
    "CREATE TEMP TABLE t (x int)",
    "CREATE UNLOGGED TABLE public.u (x int)",
    "CREATE SEQUENCE public.s",
    "CREATE VIEW public.v AS SELECT 1 AS x",
    "CREATE MATERIALIZED VIEW public.mv AS SELECT 1 AS x",
    "CREATE FUNCTION public.f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "CREATE FUNCTION pg_temp.f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "CREATE PROCEDURE public.p() LANGUAGE sql AS 'SELECT 1'",
    "CREATE AGGREGATE public.a (int) (SFUNC = int4pl, STYPE = int)",
    "CREATE TYPE public.ty AS (x int)",
    "CREATE TYPE public.en AS ENUM ('a')",
    "CREATE DOMAIN public.d AS int",
    "CREATE COLLATION public.c (locale = 'C')",
    "CREATE OPERATOR public.=== (FUNCTION = int4eq, LEFTARG = int, RIGHTARG = int)",
    "CREATE OPERATOR FAMILY public.of USING btree",
    "CREATE CAST (int AS text) WITH INOUT",
    "CREATE CONVERSION public.cv FOR 'UTF8' TO 'LATIN1' FROM utf8_to_iso8859_1",
    "CREATE TEXT SEARCH CONFIGURATION public.ts (COPY = simple)",
    "CREATE TEXT SEARCH DICTIONARY public.td (TEMPLATE = simple)",
    "CREATE STATISTICS public.st ON oid, relname FROM pg_class",
    "CREATE PUBLICATION pub",
    "CREATE SUBSCRIPTION sub CONNECTION 'host=nowhere' PUBLICATION pub WITH (connect = false)",
    "CREATE EVENT TRIGGER et ON ddl_command_start EXECUTE FUNCTION pg_catalog.now()",
    "CREATE FOREIGN DATA WRAPPER fdw",
    "CREATE SERVER srv FOREIGN DATA WRAPPER postgres_fdw",
    "CREATE EXTENSION IF NOT EXISTS pgcrypto",
    "CREATE LANGUAGE plperl",
    "CREATE ACCESS METHOD am TYPE TABLE HANDLER heap_tableam_handler",
    "CREATE ROLE evil",
    "CREATE DATABASE evil",
    "CREATE TABLESPACE evil LOCATION '/tmp'",
    // Default privileges: its own (inert), its group's, and in a schema.
    "ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO PUBLIC",
    "ALTER DEFAULT PRIVILEGES FOR ROLE orca_worker GRANT SELECT ON TABLES TO PUBLIC",
    "ALTER DEFAULT PRIVILEGES FOR ROLE orca_worker GRANT EXECUTE ON FUNCTIONS TO orca_instance",
    "ALTER DEFAULT PRIVILEGES FOR ROLE orca_worker IN SCHEMA public GRANT SELECT ON TABLES TO PUBLIC",
    // Large objects: its own, given to its group, made as its group, and
    // readable by anyone.
    "SELECT lo_from_bytea(0, 'made by the login')",
    "SELECT lo_create(0)",
    "SELECT lo_creat(-1)",
    "DO $$ BEGIN EXECUTE format('ALTER LARGE OBJECT %s OWNER TO orca_worker', \
       lo_from_bytea(0, 'given to its group')); END $$",
    "DO $$ BEGIN EXECUTE format('GRANT SELECT ON LARGE OBJECT %s TO PUBLIC', \
       lo_from_bytea(0, 'given to all')); END $$",
    "SET ROLE orca_worker; SELECT lo_from_bytea(0, 'made as its group'); RESET ROLE",
];

#[test]
fn nothing_a_machine_login_makes_outlives_it_or_is_read_by_another() {
    // Unhardened, as on RDS: PUBLIC may execute the large object functions.
    let (db, dir) = setup_in(
        TestDb::unhardened(),
        &crate::pools::with_pool("p", "idle_seconds = 1\n"),
    );
    let role = hand_machine(&db, "p", "objs", "pw");
    let other = machine_role("peek");
    db.login_role(&other, "pw", "orca_worker");
    let groups = "('orca_worker', 'orca_instance')";
    let mut c = db.client_as(&role, "pw");
    let mut made = Vec::new();
    for sql in EVERY_KIND {
        if c.batch_execute(sql).is_ok() {
            made.push(*sql);
        }
        let _ = c.batch_execute("RESET ROLE");
    }
    let login: u32 = db.one(&format!(
        "SELECT oid FROM pg_roles WHERE rolname = '{role}'"
    ));
    let objects: Vec<u32> = db
        .client()
        .query("SELECT oid FROM pg_largeobject_metadata", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        !objects.is_empty(),
        "the login made no large object: {made:?}"
    );
    // orca removes the machine (idle), and its login with it.
    let mut s = pool_scheduler(&db, &dir, &[("ORCA_LOGIN_XACT_SECONDS", "2")]);
    s.wait_for("the machine and its login are gone", 30.0, || {
        db.one::<i64>(&format!(
            "SELECT (SELECT count(*) FROM orca.pool_machines WHERE ended_at IS NULL)
                  + (SELECT count(*) FROM pg_roles WHERE rolname = '{role}')"
        )) == 0
    });
    // Nothing of what it made is left, in this database or the server's
    // shared catalogs: owned by it, or by the group roles (other tests'
    // databases, on the same server, are theirs).
    let left: String = db.one(&format!(
        "SELECT coalesce(string_agg(classid::regclass::text || ' ' || objid, ', '), '')
         FROM pg_shdepend
         WHERE deptype = 'o'
           AND dbid IN (0, (SELECT oid FROM pg_database WHERE datname = current_database()))
           AND (refobjid = {login}
               OR refobjid IN (SELECT oid FROM pg_roles WHERE rolname IN {groups}))"
    ));
    assert_eq!(
        left, "",
        "left owned by the login or its group (it made {made:?})"
    );
    let kept: i64 = db.one("SELECT count(*) FROM pg_largeobject_metadata");
    assert_eq!(kept, 0, "large objects left");
    // Events said what was removed, whose it was.
    let said: String = db.one(
        "SELECT coalesce(string_agg(why, ' | '), '') FROM orca.events WHERE kind = 'intruder'",
    );
    assert!(
        said.contains(&format!("login {role} owned large object"))
            && said
                .contains("group orca_worker (a login gave them to it or made them as it) owned"),
        "{said}"
    );
    // Another machine's login reads none of them.
    let mut peek = db.client_as(&other, "pw");
    for oid in &objects {
        let read = peek.query_one("SELECT lo_get($1)", &[oid]);
        assert!(read.is_err(), "another login read large object {oid}");
    }
    s.stop();
}

#[test]
fn a_large_object_a_live_login_gives_its_group_is_removed_within_seconds() {
    let (db, dir) = setup_in(
        TestDb::unhardened(),
        "[pipelines.job]\ncommand = \"true\"\n",
    );
    let giver = format!("orca_i_give_{}", std::process::id());
    let taker = format!("orca_i_take_{}", std::process::id());
    db.login_role(&giver, "pw", "orca_instance");
    db.login_role(&taker, "pw", "orca_instance");
    let oid: u32 = db
        .client_as(&giver, "pw")
        .query_one("SELECT lo_from_bytea(0, 'for every instance')", &[])
        .unwrap()
        .get(0);
    db.client_as(&giver, "pw")
        .batch_execute(&format!("ALTER LARGE OBJECT {oid} OWNER TO orca_instance"))
        .unwrap();
    let mut taker_c = db.client_as(&taker, "pw");
    let read: Vec<u8> = taker_c
        .query_one("SELECT lo_get($1)", &[&oid])
        .unwrap()
        .get(0);
    assert_eq!(
        read, b"for every instance",
        "the group's object is not shared"
    );
    // The leader sweeps every ORCA_LOGIN_XACT_SECONDS / 2, both logins live.
    let mut s = db.scheduler(&dir, &[("ORCA_LOGIN_XACT_SECONDS", "2")]);
    s.wait_for("the group's large object is removed", 20.0, || {
        db.one::<i64>("SELECT count(*) FROM pg_largeobject_metadata") == 0
    });
    assert!(taker_c.query_one("SELECT lo_get($1)", &[&oid]).is_err());
    let why: String = db.one(
        "SELECT coalesce(string_agg(why, ' | '), '') FROM orca.events WHERE kind = 'intruder'",
    );
    assert!(
        why.contains("group orca_instance") && why.contains("removed"),
        "{why}"
    );
    s.stop();
}

#[test]
fn large_objects_a_login_keeps_locked_hold_up_no_tick() {
    // Its objects written to (their rows locked) in transactions short of
    // the limit that take turns in two sessions: each sweep meets them
    // locked, the other session first in line for them.
    const XACT: f64 = 2.0;
    let (db, dir) = setup_in(
        TestDb::unhardened(),
        "[pipelines.slow]\ncommand = \"sleep 4\"\n",
    );
    let role = machine_role("lock");
    db.login_role(&role, "pw", "orca_worker");
    let oids: Vec<u32> = db
        .client_as(&role, "pw")
        .query(
            "SELECT lo_from_bytea(0, 'kept locked') FROM generate_series(1, 20)",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let list = oids
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let batch = format!(
        "BEGIN; DO $$ DECLARE o oid; BEGIN \
           FOREACH o IN ARRAY ARRAY[{list}]::oid[] LOOP \
             BEGIN PERFORM lo_put(o, 0, 'x'); EXCEPTION WHEN OTHERS THEN NULL; END; \
           END LOOP; END $$; \
         SELECT pg_sleep({}); COMMIT",
        XACT / 2.0 - 0.4
    );
    let stop = Arc::new(AtomicBool::new(false));
    let turns: Vec<_> = (0..2)
        .map(|_| {
            let mut c = db.client_as(&role, "pw");
            c.batch_execute("SET statement_timeout = 0; SET lock_timeout = 0")
                .unwrap();
            let (batch, stop) = (batch.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) && c.batch_execute(&batch).is_ok() {}
            })
        })
        .collect();
    let stats = dir.path("stats");
    let mut s = db.scheduler(
        &dir,
        &[
            ("ORCA_TICK_STATS", stats.to_str().unwrap()),
            ("ORCA_LOGIN_XACT_SECONDS", &XACT.to_string()),
        ],
    );
    // A run of 4 s: the leader sweeps every second meanwhile.
    let run = db.queue("slow");
    s.wait_for("the run succeeds", 30.0, || db.state(run) == "succeeded");
    // Once the login lets go, they go.
    stop.store(true, Ordering::SeqCst);
    for t in turns {
        t.join().unwrap();
    }
    s.wait_for("its large objects are removed", 20.0, || {
        db.one::<i64>("SELECT count(*) FROM pg_largeobject_metadata") == 0
    });
    s.stop();
    let max = crate::hardening::tick_max_ms(&stats);
    assert!(max < 1000.0, "a tick took {max} ms");
    eprintln!("the longest tick: {max} ms");
}

#[test]
fn a_row_held_briefly_on_two_occasions_far_apart_is_no_login_holding_it() {
    // A pass that finds a due machine's row held (a worker's round, slow
    // on a loaded box) and, much later, finds it held again must not take
    // it from its login: it was not held at every pass in between (it was
    // busy, not due, meanwhile). Each hold here lasts 1.2 s, under
    // HELD_FOR_GOOD (2 s).
    let (db, dir) = pool_test("idle_seconds = 1\n");
    let role = hand_machine(&db, "p", "brief", "pw");
    // Its worker's session, open from the start (a removal as idle may
    // come before its second round on a loaded box: then that round fails,
    // and only the events tell whether the login was taken for an intruder).
    let mut login = db.client_as(&role, "pw");
    login.batch_execute(ROUND).unwrap();
    let mut s = pool_scheduler(&db, &dir, &[]);
    // Held for 1.2 s as it becomes due (a round that then reports a run:
    // busy for `busy` s more), so that passes find it held.
    let hold = |busy: f64| {
        let mut c = db.client();
        let mut t = c.transaction().unwrap();
        t.batch_execute(
            "SELECT 1 FROM orca.pool_machines WHERE pool = 'p' FOR NO KEY UPDATE; \
             SELECT pg_sleep(1.2)",
        )
        .unwrap();
        t.batch_execute(&format!(
            "UPDATE orca.pool_machines SET busy_at = now() + interval '{busy} s' WHERE pool = 'p'"
        ))
        .unwrap();
        t.commit().unwrap();
    };
    wait_until("the machine is due", 30.0, || {
        db.one::<bool>(
            "SELECT now() - busy_at > interval '0.8 s' FROM orca.pool_machines WHERE pool = 'p'",
        )
    });
    hold(4.0);
    // Busy meanwhile; held again for 1.2 s just before it is due again.
    wait_until("the machine is nearly due again", 30.0, || {
        db.one::<bool>(
            "SELECT now() - busy_at > interval '0.8 s' FROM orca.pool_machines WHERE pool = 'p'",
        )
    });
    let _ = login.batch_execute(ROUND);
    hold(-0.5);
    s.wait_for("the machine is removed as idle", 30.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.pool_machines WHERE ended_at IS NULL") == 0
    });
    let said: String = db.one(
        "SELECT coalesce(string_agg(why, ' | '), '') FROM orca.events WHERE kind = 'intruder'",
    );
    assert!(said.is_empty(), "{said}");
    s.stop();
}
