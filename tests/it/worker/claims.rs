//! A worker's claims: an idle claim takes no lock and writes nothing, a
//! round takes a pipeline's claim lock only for a run due and locks no idle
//! pipeline, pipelines take turns, concurrent claims keep a machine's
//! slots, a claim's statements don't grow with the pool's idle pipelines.

use super::*;

/// An idle machine's every round asks for runs: with nothing queued that
/// takes no lock (its removal never waits on it) and writes nothing.
#[test]
fn an_idle_claim_takes_no_lock_and_writes_nothing() {
    let (db, _dir) = setup(&with_pool(
        "p",
        "[pipelines.job]\ncommand = \"true\"\nplacement = \"worker:p\"\n",
    ));
    let role = hand_machine(&db, "p", "idle", "pw");
    let id: i64 = db.one("SELECT id FROM orca.pool_machines");
    let mut m = db.client_as(&role, "pw");
    m.execute("SELECT * FROM orca.worker_hello()", &[]).unwrap();
    let mut tx = m.transaction().unwrap();
    assert!(
        tx.query("SELECT id FROM orca.worker_claim(4)", &[])
            .unwrap()
            .is_empty()
    );
    let wrote: bool = tx
        .query_one("SELECT pg_current_xact_id_if_assigned() IS NOT NULL", &[])
        .unwrap()
        .get(0);
    assert!(
        !wrote,
        "an idle claim wrote (it was given a transaction id)"
    );
    // Its transaction still open, the machine can be marked for removal.
    let mut c = db.client();
    c.batch_execute("SET lock_timeout = '1s'").unwrap();
    let ending = include_str!("../../../sql/machine_ending.sql");
    let marked = c
        .query_one(
            ending,
            &[
                &id,
                &None::<chrono::DateTime<chrono::Utc>>,
                &"idle for 30 s",
                &None::<i32>,
                &0i64,
            ],
        )
        .unwrap();
    assert!(marked.get::<_, bool>(0));
    tx.rollback().unwrap();
}

/// A round takes a pipeline's claim lock only for a run queued and due
/// (migration 0014: the lock's one-time condition; since 0015 its loop
/// leaves out a pipeline with none): with none (nothing queued, or only a
/// retry not yet due) the pipeline's claim lock is not taken, so another
/// worker's claim of it never waits on an idle one; with one, it is.
#[test]
fn a_round_takes_a_pipeline_s_claim_lock_only_for_a_run_due() {
    let (db, _dir) = setup(&with_pool(
        "p",
        "[pipelines.job]\ncommand = \"true\"\nplacement = \"worker:p\"\n",
    ));
    let role = hand_machine(&db, "p", "round_lock", "pw");
    let mut m = db.client_as(&role, "pw");
    m.execute("SELECT * FROM orca.worker_hello()", &[]).unwrap();
    let round =
        "SELECT kind, id FROM orca.worker_round('{}', '{}', '{}', '{}', '{}', '{}', '{}', 4,
                 '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}')";
    let mut other = db.client();
    let mut lock_is_free = || {
        other
            .query(
                "SELECT pipeline FROM orca.claim_locks WHERE pipeline = 'job' FOR UPDATE NOWAIT",
                &[],
            )
            .is_ok()
    };
    // Nothing queued.
    let mut tx = m.transaction().unwrap();
    assert!(tx.query(round, &[]).unwrap().is_empty());
    assert!(
        lock_is_free(),
        "a round with nothing queued took the claim lock"
    );
    tx.rollback().unwrap();
    // A run queued but not due yet (a retry waiting out its delay).
    let later = db.queue("job");
    db.client()
        .execute(
            "UPDATE orca.runs SET not_before = now() + interval '1 hour' WHERE id = $1",
            &[&later],
        )
        .unwrap();
    let mut tx = m.transaction().unwrap();
    assert!(tx.query(round, &[]).unwrap().is_empty());
    assert!(
        lock_is_free(),
        "a round with no run due took the claim lock"
    );
    tx.rollback().unwrap();
    // A run due: claimed, under the lock.
    let due = db.queue("job");
    let mut tx = m.transaction().unwrap();
    let rows = tx.query(round, &[]).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, i64>("id"), due);
    assert!(
        !lock_is_free(),
        "a round that claimed a run held no claim lock"
    );
    tx.commit().unwrap();
}

/// A round with room for several takes turns across its pool's pipelines
/// until its room is taken or every pipeline with a run due had its turn,
/// each within its `max_runs`: a pipeline at `max_runs` first in turn
/// takes its turn and nothing else, and one whose claim lock another
/// worker holds is left to it.
#[test]
fn a_round_with_room_for_several_takes_turns_across_pipelines() {
    let (db, _dir) = setup(&with_pool(
        "p",
        "[pipelines.a]\ncommand = \"true\"\nplacement = \"worker:p\"\n\n\
         [pipelines.b]\ncommand = \"true\"\nplacement = \"worker:p\"\n\n\
         [pipelines.c]\ncommand = \"true\"\nplacement = \"worker:p\"\n\n\
         [pipelines.d]\ncommand = \"true\"\nplacement = \"worker:p\"\n",
    ));
    let role = hand_machine(&db, "p", "turns_round", "pw");
    let mut c = db.client();
    c.execute("UPDATE orca.pool_machines SET slots = 8", &[])
        .unwrap();
    for p in ["a", "b", "c", "d"] {
        db.queue(p);
        db.queue(p);
    }
    // a is at its max_runs (1) and first in turn; d's claim lock is held
    // by another worker's claim under way.
    c.execute(
        "UPDATE orca.runs SET state = 'running', start = 1 WHERE id = (SELECT min(id) FROM orca.runs WHERE pipeline = 'a')",
        &[],
    )
    .unwrap();
    c.execute(
        "UPDATE orca.claim_locks SET claimed_at = CASE pipeline WHEN 'a' THEN now() - interval '3 minutes'
             WHEN 'b' THEN now() - interval '2 minutes' ELSE now() - interval '1 minute' END",
        &[],
    )
    .unwrap();
    let mut holder = db.client();
    let mut held = holder.transaction().unwrap();
    held.execute(
        "SELECT 1 FROM orca.claim_locks WHERE pipeline = 'd' FOR UPDATE",
        &[],
    )
    .unwrap();
    let mut m = db.client_as(&role, "pw");
    let round = |m: &mut postgres::Client, room: i32| -> Vec<String> {
        m.query(CLAIM_ROUND, &[&room])
            .unwrap()
            .iter()
            .map(|r| r.get("pipeline"))
            .collect()
    };
    let mut took = round(&mut m, 4);
    took.sort();
    assert_eq!(took, ["b", "c"], "a round with room for 4");
    let turned: Vec<String> = c
        .query(
            "SELECT pipeline FROM orca.claim_locks ORDER BY claimed_at NULLS FIRST, pipeline",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    // a took the round's first turn (for nothing), then b and c theirs; a,
    // looked at again last with room left, took another (for nothing).
    assert_eq!(turned, ["d", "b", "c", "a"], "the turns taken");
    held.rollback().unwrap();
    // d's lock free: d's turn is longest ago; the others are each at their
    // max_runs now, and each takes its turn for nothing.
    assert_eq!(round(&mut m, 2), ["d"]);
    let left: i64 = db.one("SELECT count(*) FROM orca.runs WHERE state = 'queued'");
    assert_eq!(left, 4, "one run of each pipeline left queued");
}

/// A round's turn takes the claim lock of the pipeline it claims from
/// alone, whatever the statistics make of the probe's cost against the
/// lock's: with forty idle pipelines ahead in turn and a history of
/// finished runs analyzed (the planner then checks a filter's cheaper
/// condition first, and locking a row of `orca.claim_locks` looked
/// cheaper than the probe), a round held forty-one claim locks.
#[test]
fn a_round_locks_no_idle_pipeline_whatever_the_statistics() {
    let mut config = String::new();
    for i in 0..40 {
        config +=
            &format!("[pipelines.idle{i:02}]\ncommand = \"true\"\nplacement = \"worker:p\"\n\n");
    }
    config += "[pipelines.work]\ncommand = \"true\"\nplacement = \"worker:p\"\n";
    let (db, _dir) = setup(&with_pool("p", &config));
    let role = hand_machine(&db, "p", "idle_locks", "pw");
    let mut c = db.client();
    c.batch_execute(
        "INSERT INTO orca.runs (pipeline, state, start, ended_at)
         SELECT 'idle' || lpad((g % 40)::text, 2, '0'), 'succeeded', 1, now()
         FROM generate_series(1, 20000) g;
         ANALYZE orca.runs; ANALYZE orca.claim_locks; ANALYZE orca.pipelines",
    )
    .unwrap();
    let work = db.queue("work");
    let mut m = db.client_as(&role, "pw");
    let mut tx = m.transaction().unwrap();
    let claimed: Vec<i64> = tx
        .query(CLAIM_ROUND, &[&1i32])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(claimed, vec![work]);
    let free: i64 = c
        .query_one(
            "SELECT count(*) FROM (SELECT 1 FROM orca.claim_locks FOR UPDATE SKIP LOCKED) l",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(free, 40, "the round holds {} claim locks", 41 - free);
    tx.commit().unwrap();
}

/// A pool's pipelines take turns at claims: a run queued behind another
/// pipeline's backlog is taken at its pipeline's turn, not after the
/// backlog (each claim looked at every pipeline's oldest run before, which
/// cost most of a claim's work).
#[test]
fn a_pools_pipelines_take_turns_at_claims() {
    let (db, _dir) = setup(&with_pool(
        "p",
        "[pipelines.backlog]\ncommand = \"true\"\nplacement = \"worker:p\"\nmax_runs = 10\n\n[pipelines.late]\ncommand = \"true\"\nplacement = \"worker:p\"\nmax_runs = 10\n",
    ));
    let role = hand_machine(&db, "p", "turns", "pw"); // slots 2
    for _ in 0..5 {
        db.queue("backlog");
    }
    let late = db.queue("late");
    let mut m = db.client_as(&role, "pw");
    m.execute("SELECT * FROM orca.worker_hello()", &[]).unwrap();
    let mut took = Vec::new();
    for _ in 0..2 {
        let rows = m
            .query("SELECT id, pipeline FROM orca.worker_claim(1)", &[])
            .unwrap();
        assert_eq!(rows.len(), 1, "a claim of one took {}", rows.len());
        took.push((rows[0].get::<_, i64>(0), rows[0].get::<_, String>(1)));
    }
    assert!(
        took.iter().any(|(id, _)| *id == late),
        "two claims took {took:?}: the late pipeline's run waited behind the backlog"
    );
    assert!(
        took.iter().any(|(_, p)| p == "backlog"),
        "two claims took {took:?}"
    );
}

/// Two claims of one machine at once never take more than its slots.
#[test]
fn concurrent_claims_of_one_machine_keep_its_slots() {
    let (db, _dir) = setup(&with_pool(
        "p",
        "[pipelines.job]\ncommand = \"true\"\nplacement = \"worker:p\"\nmax_runs = 10\n\n[pipelines.job2]\ncommand = \"true\"\nplacement = \"worker:p\"\nmax_runs = 10\n",
    ));
    let role = hand_machine(&db, "p", "conc", "pw"); // slots 2
    for _ in 0..2 {
        db.queue("job");
        db.queue("job2");
    }
    let mut a = db.client_as(&role, "pw");
    let mut b = db.client_as(&role, "pw");
    a.execute("SELECT * FROM orca.worker_hello()", &[]).unwrap();
    let mut ta = a.transaction().unwrap();
    let got_a = ta
        .query(
            "SELECT id FROM orca.worker_claim(2) WHERE pipeline = 'job'",
            &[],
        )
        .unwrap()
        .len();
    let h = std::thread::spawn(move || {
        let mut tb = b.transaction().unwrap();
        let n = tb
            .query("SELECT id FROM orca.worker_claim(2)", &[])
            .unwrap()
            .len();
        tb.commit().unwrap();
        n
    });
    // B's claim waits on the machine's row, which A's holds.
    let mut admin = connect(&db.admin_url());
    wait_until("B's claim waits on A's lock", 30.0, || {
        admin
            .query_one(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                 WHERE NOT l.granted AND a.usename = $1",
                &[&role],
            )
            .unwrap()
            .get::<_, i64>(0)
            > 0
    });
    ta.commit().unwrap();
    let got_b = h.join().unwrap();
    let running: i64 = db.one("SELECT count(*) FROM orca.runs WHERE state = 'running'");
    assert!(
        running <= 2,
        "slots 2, running {running} (a {got_a}, b {got_b})"
    );
}

/// The statements a claim makes don't grow with the pool's idle pipelines
/// (migration 0015): forty pipelines with nothing queued, which take no
/// turn and so stay ahead of the one with work, cost a probe each in the
/// claim's one query, not statements of their own (each claim made about
/// forty more before). Counted by pg_stat_statements, nested statements
/// included, on a server of the test's own.
#[test]
fn a_claim_s_statements_do_not_grow_with_the_pool_s_idle_pipelines() {
    let cluster = Cluster::new(
        "shared_preload_libraries = 'pg_stat_statements'\npg_stat_statements.track = all",
    );
    cluster.start();
    let db = TestDb::on(&cluster.url());
    let dir = TempDir::new();
    let mut toml = String::new();
    for i in 0..40 {
        toml.push_str(&format!(
            "[pipelines.idle{i:02}]\ncommand = \"true\"\nplacement = \"worker:p\"\n"
        ));
    }
    for last in ["zy", "zz"] {
        toml.push_str(&format!(
            "[pipelines.{last}]\ncommand = \"true\"\nplacement = \"worker:p\"\nmax_runs = 4\n"
        ));
    }
    db.register(&dir, &with_pool("p", &toml));
    let role = hand_machine(&db, "p", "idle", "pw");
    db.client()
        .execute("UPDATE orca.pool_machines SET slots = 4", &[])
        .unwrap();
    // In turn: zy (never claimed, by name), then zz.
    let queued = [db.queue("zy"), db.queue("zz")];
    let mut m = db.client_as(&role, "pw");
    m.execute("SELECT * FROM orca.worker_hello()", &[]).unwrap();
    let mut su = connect(&with_db(&cluster.url(), db.name()));
    su.batch_execute("CREATE EXTENSION pg_stat_statements")
        .unwrap();
    let nested = |su: &mut postgres::Client| -> (i64, i64) {
        let r = su
            .query_one(
                "SELECT coalesce(sum(calls), 0)::bigint,
                        coalesce(sum(rows) FILTER (WHERE query LIKE '%CROSS JOIN LATERAL%'), 0)::bigint
                 FROM pg_stat_statements
                 WHERE NOT toplevel
                   AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    for (i, run) in queued.iter().enumerate() {
        su.execute("SELECT pg_stat_statements_reset()", &[])
            .unwrap();
        let claimed: Vec<i64> = m
            .query("SELECT id FROM orca.worker_claim(1)", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(claimed, vec![*run], "claim {i}");
        let (n, turns) = nested(&mut su);
        assert!(
            n <= 12,
            "claim {i} made {n} statements inside its functions, with 40 idle pipelines ahead"
        );
        // Its loop's query's last fetch (what pg_stat_statements counts of
        // a cursor) gave the pipeline it claimed from: the loop fetched no
        // further once its room was taken (on the second claim, a fetch
        // past zz, the last with work, would give none).
        assert_eq!(turns, 1, "claim {i}: rows of its loop's last fetch");
    }
}
