//! `orca worker` on a pool machine: it claims its pool's runs with the
//! machine's own credentials and supervises them as the scheduler does;
//! those credentials do a worker's work and nothing else; it rides out a
//! database restart; a removed machine takes no run. The machines here are
//! made by hand (a row and a login), the worker a real process.

use std::process::Command;

use crate::harness::*;
use crate::pools::with_pool;

#[test]
fn a_worker_supervises_its_runs_as_the_scheduler_does() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let pids = dir.path("pids");
    db.register(
        &dir,
        &with_pool(
            "p",
            &format!(
                r#"
[pipelines.out]
command = "echo line one; echo line two >&2; exit 4"
placement = "worker:p"

[pipelines.slow]
command = "sleep 300"
placement = "worker:p"
timeout = 1

[pipelines.hangs]
command = "{}"
placement = "worker:p"
max_runs = 2
"#,
                hang(&pids)
            ),
        ),
    );
    let role = hand_machine(&db, "p", "sup", "pw-sup");
    db.client()
        .execute("UPDATE orca.pool_machines SET slots = 4", &[])
        .unwrap();
    let out = db.queue("out");
    let slow = db.queue("slow");
    let cancelled = db.queue("hangs");
    let taken = db.queue("hangs");
    let mut w = hand_worker(&db, &dir, "p", &role, "pw-sup");
    wait_until("out fails with its exit code", 30.0, || {
        db.state(out) == "failed"
    });
    let (code, output): (Option<i32>, Vec<u8>) = {
        let r = db
            .client()
            .query_one(
                "SELECT exit_code, output FROM orca.runs WHERE id = $1",
                &[&out],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(code, Some(4));
    assert!(text(&output).contains("line one") && text(&output).contains("line two"));
    wait_until("slow times out", 30.0, || db.state(slow) == "failed");
    let why: String = db.one(&format!("SELECT why FROM orca.runs WHERE id = {slow}"));
    assert!(why.contains("timed out"), "{why}");
    wait_until("both hanging runs run", 30.0, || pids_in(&pids).len() == 2);
    db.ok(&["cancel", &cancelled.to_string()]);
    wait_until("the cancelled run is cancelled", 30.0, || {
        db.state(cancelled) == "cancelled"
    });
    // Another takes the other run over (its start is no longer the
    // worker's): the worker kills its process and records nothing.
    db.client()
        .execute(
            "UPDATE orca.runs SET start = start + 1, machine = NULL, host = 'elsewhere' WHERE id = $1",
            &[&taken],
        )
        .unwrap();
    wait_until("both hanging processes are gone", 30.0, || {
        pids_in(&pids).iter().all(|p| !alive(*p))
    });
    let (state, host): (String, String) = {
        let r = db
            .client()
            .query_one("SELECT state, host FROM orca.runs WHERE id = $1", &[&taken])
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!((state.as_str(), host.as_str()), ("running", "elsewhere"));
    w.stop();
}

#[test]
fn max_runs_holds_across_workers() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let log = dir.path("log");
    db.register(
        &dir,
        &with_pool(
            "p",
            &format!(
            r#"
[pipelines.job]
command = "echo start $ORCA_RUN_ID $(date +%s.%N) >> {0}; sleep 0.5; echo end $ORCA_RUN_ID $(date +%s.%N) >> {0}"
placement = "worker:p"
max_runs = 2
"#,
            log.display()
        ),
        ),
    );
    let ids: Vec<i64> = (0..12).map(|_| db.queue("job")).collect();
    let workers: Vec<Proc> = (0..3)
        .map(|i| {
            let role = hand_machine(&db, "p", &format!("mr{i}"), "pw");
            db.client()
                .execute(
                    "UPDATE orca.pool_machines SET slots = 1, name = $1 WHERE role = $2",
                    &[&format!("m{i}"), &role],
                )
                .unwrap();
            hand_worker(&db, &dir, "p", &role, "pw")
        })
        .collect();
    wait_until("all twelve succeed", 60.0, || {
        ids.iter().all(|id| db.state(*id) == "succeeded")
    });
    // One slot each: two at once needs two workers; a third never starts.
    let lines = std::fs::read_to_string(&log).unwrap();
    assert_eq!(crate::scheduler::max_overlap(&lines), 2, "{lines}");
    for mut w in workers {
        w.stop();
    }
}

#[test]
fn a_worker_rides_out_a_database_restart() {
    let cluster = Cluster::new("");
    cluster.start();
    let db = TestDb::on(&cluster.url());
    let dir = TempDir::new();
    let ended = dir.path("ended");
    db.register(
        &dir,
        &with_pool(
            "p",
            &format!(
                r#"
[pipelines.job]
command = "sleep 2; echo $ORCA_RUN_ID >> {}"
placement = "worker:p"
"#,
                ended.display()
            ),
        ),
    );
    let role = hand_machine(&db, "p", "out", "pw");
    let run = db.queue("job");
    let mut w = hand_worker(&db, &dir, "p", &role, "pw");
    wait_until("the run runs", 30.0, || db.state(run) == "running");
    cluster.stop();
    wait_until("its command ends while the database is down", 30.0, || {
        !pids_in(&ended).is_empty()
    });
    cluster.start();
    wait_until("its end is recorded", 60.0, || db.state(run) == "succeeded");
    assert_eq!(
        db.one::<i32>(&format!("SELECT start FROM orca.runs WHERE id = {run}")),
        1
    );
    // And it goes on taking runs.
    let next = db.queue("job");
    wait_until("the next run succeeds", 30.0, || {
        db.state(next) == "succeeded"
    });
    assert!(w.child.try_wait().unwrap().is_none(), "the worker exited");
    w.stop();
}

#[test]
fn a_worker_s_credentials_do_a_worker_s_work_and_nothing_else() {
    // Unhardened (as on RDS), so the login can make a large object below.
    let db = TestDb::unhardened();
    let dir = TempDir::new();
    let pids = dir.path("pids");
    db.register(
        &dir,
        &with_pool(
            "p",
            &format!(
                r#"
[pools.q]
types = [{{ type = "small", wait = 0 }}]
locations = ["here"]

[pipelines.theirs]
command = "true"
placement = "worker:q"

[pipelines.ours]
command = "echo ours"
placement = "worker:p"

[pipelines.hangs]
command = "{}"
placement = "worker:p"
"#,
                hang(&pids)
            ),
        ),
    );
    let secret = "s3cret-for-the-test";
    let role = hand_machine(&db, "p", "test", secret);
    let theirs = db.queue("theirs");
    let ours = db.queue("ours");
    let hangs = db.queue("hangs");
    let plain = db.url_without_user();
    let mut worker = hand_worker(&db, &dir, "p", &role, secret);
    wait_until("its own pool's run succeeds", 30.0, || {
        db.state(ours) == "succeeded"
    });
    wait_until("the hanging run runs", 30.0, || !pids_in(&pids).is_empty());
    assert_eq!(db.state(theirs), "queued", "it took another pool's run");
    // With its credentials: no table, no other function.
    let as_machine = format!(
        "{}?user={role}&password={secret}",
        plain.split('?').next().unwrap()
    );
    let mut c = postgres::Client::connect(&as_machine, postgres::NoTls).unwrap();
    for statement in [
        "SELECT count(*) FROM orca.runs",
        "UPDATE orca.pool_machines SET slots = 99",
        "SELECT orca.finish_attempt(1, 1, 'succeeded', 0, NULL, 'x', ''::bytea, '{}')",
        "SELECT orca.machine_role_make('x', 'y')",
    ] {
        refused(&mut c, statement);
    }
    // Its functions act on its own machine's runs only.
    let other: Option<String> = c
        .query_one(
            "SELECT orca.worker_finish($1, 1, 'succeeded', 0, NULL, 'forged', ''::bytea, '{}')",
            &[&theirs],
        )
        .unwrap()
        .get(0);
    assert_eq!(other, None);
    assert_eq!(db.state(theirs), "queued");
    // Nor an attempt running on another machine (its end passes its own
    // machine to orca.finish_attempt, which ends only attempts on it).
    let elsewhere: i64 = db.one(
        "WITH m AS (INSERT INTO orca.pool_machines (pool, name, type, location, role, slots)
                    VALUES ('p', 'orca-p-other', 'small', 'here', 'orca_m_other_nobody', 1) RETURNING id)
         INSERT INTO orca.runs (pipeline, state, start, started_at, heartbeat, machine)
         SELECT 'ours', 'running', 1, now(), now(), m.id FROM m RETURNING id",
    );
    let forged: Option<String> = c
        .query_one(
            "SELECT orca.worker_finish($1, 1, 'succeeded', 0, NULL, 'forged', ''::bytea, '{}')",
            &[&elsewhere],
        )
        .unwrap()
        .get(0);
    assert_eq!(forged, None);
    assert_eq!(db.state(elsewhere), "running");
    // A wrong secret is refused by Postgres; a worker with it gives up
    // after ORCA_WORKER_REFUSED_SECONDS (it may be a misconfiguration).
    let wrong = as_machine.replace(secret, "guess");
    assert!(postgres::Client::connect(&wrong, postgres::NoTls).is_err());
    let mut guesser = {
        let mut c = Command::new(bin());
        c.args(["worker", "--pool", "p"])
            .env("ORCA_DATABASE_URL", &plain)
            .env("ORCA_TOKEN", format!("{role}:guess"))
            .env("ORCA_WORKER_REFUSED_SECONDS", "2");
        Proc::spawn(c, &dir.path("guesser.log"))
    };
    assert_eq!(guesser.wait(30.0).code(), Some(3), "{}", guesser.output());
    assert!(
        guesser.output().contains("giving up after 2s"),
        "{}",
        guesser.output()
    );
    // Something the machine owns (a large object) doesn't keep its role alive.
    c.batch_execute("SELECT lo_create(0)").unwrap();
    // Revoked: its sessions end, it can't log in again, the worker kills
    // its run and exits non-zero (3: the boot script shuts the machine down).
    db.client()
        .execute("SELECT orca.machine_role_revoke($1)", &[&role])
        .unwrap();
    assert_eq!(worker.wait(30.0).code(), Some(3), "{}", worker.output());
    assert!(postgres::Client::connect(&as_machine, postgres::NoTls).is_err());
    wait_until("its run's process is killed", 20.0, || {
        pids_in(&pids).iter().all(|p| !alive(*p))
    });
    let _ = hangs;
    let log = worker.output();
    assert!(log.contains("revoked"), "{log}");
    assert!(!log.contains(secret), "the secret is in the worker's log");
    let dropped: bool = db
        .client()
        .query_one("SELECT orca.machine_role_drop($1)", &[&role])
        .unwrap()
        .get(0);
    assert!(dropped);
    let left: i64 = db
        .client()
        .query_one("SELECT count(*) FROM pg_roles WHERE rolname = $1", &[&role])
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
}

#[test]
fn a_worker_whose_machine_row_is_not_live_waits_for_it_then_gives_up() {
    let (db, dir) = setup(&with_pool(
        "p",
        r#"
[pipelines.job]
command = "echo job"
placement = "worker:p"
"#,
    ));
    // Logins with no machine row (orca.worker_machine() raises OR001): a
    // machine just made, whose row is on its way; or one being removed.
    let early = machine_role("early");
    let gone = machine_role("gone");
    db.login_role(&early, "pw", "orca_worker");
    db.login_role(&gone, "pw", "orca_worker");
    let mut waits = hand_worker(&db, &dir, "p", &early, "pw");
    let mut gives_up = hand_worker_with(
        &db,
        &dir,
        "p",
        &gone,
        "pw",
        &[("ORCA_WORKER_REFUSED_SECONDS", "2")],
    );
    // No row for ORCA_WORKER_REFUSED_SECONDS: it gives up as for refused
    // credentials (exit 3), not as for a failed statement (exit 1).
    assert_eq!(gives_up.wait(30.0).code(), Some(3), "{}", gives_up.output());
    let log = gives_up.output();
    assert!(log.contains("giving up after 2s"), "{log}");
    assert!(log.contains("no live machine"), "{log}");
    // The other, within its minute, takes runs once its row is there.
    assert!(
        waits.child.try_wait().unwrap().is_none(),
        "{}",
        waits.output()
    );
    db.client()
        .execute(
            "INSERT INTO orca.pool_machines (pool, name, type, location, role, slots)
             VALUES ('p', 'orca-p-early', 'small', 'here', $1, 2)",
            &[&early],
        )
        .unwrap();
    let run = db.queue("job");
    wait_until("its run succeeds", 30.0, || db.state(run) == "succeeded");
    waits.stop();
}

/// A removal begun off the tick (on a session that doesn't hold the lead)
/// is fenced on the leading session: marked only while that session holds
/// the lead lock.
#[test]
fn a_removal_begun_on_another_session_is_fenced_on_the_lead() {
    let (db, _dir) = setup(&with_pool("p", ""));
    hand_machine(&db, "p", "fence", "pw");
    let id: i64 = db.one("SELECT id FROM orca.pool_machines");
    let ending = include_str!("../../sql/machine_ending.sql");
    let lead_lock: i64 = 1869767525;
    let mut leader = db.client();
    let pid: i32 = leader
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    let mark = |db: &TestDb| {
        db.client()
            .query_one(
                ending,
                &[
                    &id,
                    &None::<chrono::DateTime<chrono::Utc>>,
                    &"idle for 30 s",
                    &Some(pid),
                    &lead_lock,
                ],
            )
            .unwrap()
            .get::<_, bool>(0)
    };
    assert!(!mark(&db), "marked though that session holds no lead");
    leader
        .execute("SELECT pg_advisory_lock($1)", &[&lead_lock])
        .unwrap();
    assert!(mark(&db), "not marked though that session leads");
}

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
    let ending = include_str!("../../sql/machine_ending.sql");
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

/// A round with no ends and no beats that claims up to `$1` runs (an
/// integer, or NULL): the id, start and pipeline of each it claimed.
const CLAIM_ROUND: &str = "SELECT id, start, pipeline FROM orca.worker_round(
    '{}', '{}', '{}', '{}', '{}', '{}', '{}', $1::integer,
    '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}') WHERE kind = 'claimed'";

/// A round counts its machine's room once (migration 0014): its running
/// attempts less those it queues again for silence in the same round. A
/// machine of 2 slots running a silent attempt and a beaten one claims one
/// run: not none (the silent one counted), not two (the beaten one not).
#[test]
fn a_round_that_queues_a_silent_attempt_again_claims_into_its_slot() {
    let (db, _dir) = setup(&with_pool(
        "p",
        "[pipelines.job]\ncommand = \"true\"\nplacement = \"worker:p\"\nmax_runs = 8\n",
    ));
    let role = hand_machine(&db, "p", "room", "pw");
    let machine: i64 = db.one("SELECT id FROM orca.pool_machines");
    // Its worker said hello (which queues again what the machine ran
    // before) before these attempts began.
    let mut m = db.client_as(&role, "pw");
    m.execute("SELECT * FROM orca.worker_hello()", &[]).unwrap();
    let mut c = db.client();
    let mut running = |beat: &str| -> i64 {
        c.query_one(
            &format!(
                "INSERT INTO orca.runs (pipeline, state, start, started_at, heartbeat, machine)
                 VALUES ('job', 'running', 1, now(), {beat}, $1) RETURNING id"
            ),
            &[&machine],
        )
        .unwrap()
        .get(0)
    };
    let silent = running("now() - interval '20 seconds'");
    let beaten = running("now()");
    let queued = [db.queue("job"), db.queue("job")];
    let rows = m
        .query(
            "SELECT kind, id FROM orca.worker_round($1, '{1}', '{4242}', '{}', '{}', '{}', '{}', 2,
                 '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}')",
            &[&vec![beaten]],
        )
        .unwrap();
    let kinds: Vec<(String, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let claimed: Vec<i64> = kinds
        .iter()
        .filter(|(k, _)| k == "claimed")
        .map(|(_, id)| *id)
        .collect();
    assert_eq!(claimed.len(), 1, "claimed {claimed:?} (rows {kinds:?})");
    assert!(
        claimed[0] == silent || queued.contains(&claimed[0]),
        "claimed {claimed:?}"
    );
    let requeued: i64 = db.one(&format!(
        "SELECT count(*) FROM orca.events WHERE run = {silent} AND kind = 'requeued'"
    ));
    assert_eq!(requeued, 1, "the silent attempt was queued again");
    let on_machine: i64 = db.one(&format!(
        "SELECT count(*) FROM orca.runs WHERE machine = {machine} AND state = 'running'"
    ));
    let states: Vec<(i64, String, Option<i64>)> = db
        .client()
        .query("SELECT id, state, machine FROM orca.runs ORDER BY id", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        on_machine, 2,
        "the machine runs as many as its slots: {states:?}, rows {kinds:?}"
    );
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

/// A round's end reads its attempt by its id, not among all its machine's
/// running attempts: a machine running 400 reads them once (its room's
/// count), not again for each end (the condition on the machine alone
/// would let the planner take the machine's index for the end too).
#[test]
fn a_round_s_end_reads_its_attempt_not_its_machine_s_others() {
    let (db, _dir) = setup(&with_pool(
        "p",
        "[pipelines.job]\ncommand = \"true\"\nplacement = \"worker:p\"\nmax_runs = 1000\n",
    ));
    let role = hand_machine(&db, "p", "end_reads", "pw");
    let mut c = db.client();
    c.batch_execute(
        "UPDATE orca.pool_machines SET slots = 1000;
         INSERT INTO orca.runs (pipeline, state, start, started_at, heartbeat, machine)
         SELECT 'job', 'running', 1, now(), now(), m.id
         FROM orca.pool_machines m, generate_series(1, 400);
         INSERT INTO orca.runs (pipeline, state, start, ended_at)
         SELECT 'job', 'succeeded', 1, now() FROM generate_series(1, 20000);
         ANALYZE orca.runs",
    )
    .unwrap();
    let ends: Vec<i64> = c
        .query("SELECT id FROM orca.runs ORDER BY id LIMIT 3", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut m = db.client_as(&role, "pw");
    let mut tx = m.transaction().unwrap();
    let ended = tx
        .query(
            "SELECT state FROM orca.worker_round('{}', '{}', '{}', '{}', '{}', '{}', '{}', 0,
             $1, '{1,1,1}', '{succeeded,succeeded,failed}', '{0,0,1}', '{NULL,NULL,NULL}', '{a,b,c}',
             ARRAY[''::bytea, ''::bytea, ''::bytea], ARRAY['{}'::jsonb, '{}'::jsonb, '{}'::jsonb])",
            &[&ends],
        )
        .unwrap();
    assert_eq!(ended.len(), 3);
    // (Counted by this session's own statistics, not yet reported: a
    // machine role may read them.)
    let entries: i64 = tx
        .query_one(
            "SELECT pg_stat_get_xact_tuples_returned('orca.runs_machine_running'::regclass)",
            &[],
        )
        .unwrap()
        .get(0);
    tx.commit().unwrap();
    assert!(
        entries <= 450,
        "a round ending three of its machine's 400 running attempts read {entries} of its index's entries"
    );
}

#[test]
fn a_machine_being_removed_takes_no_run_and_one_that_took_a_run_is_kept() {
    let (db, _dir) = setup(&with_pool(
        "p",
        r#"
[pipelines.job]
command = "true"
placement = "worker:p"
"#,
    ));
    let role = hand_machine(&db, "p", "race", "pw");
    let (id, idle_since): (i64, chrono::DateTime<chrono::Utc>) = {
        let r = db
            .client()
            .query_one("SELECT id, busy_at FROM orca.pool_machines", &[])
            .unwrap();
        (r.get(0), r.get(1))
    };
    let first = db.queue("job");
    let as_machine = format!(
        "{}?user={role}&password=pw",
        db.url_without_user().split('?').next().unwrap()
    );
    let mut m = postgres::Client::connect(&as_machine, postgres::NoTls).unwrap();
    // The machine claims a run after the scaler saw it idle: the scaler's
    // conditional mark finds it busy and keeps it.
    let claimed = m.query("SELECT id FROM orca.worker_claim(1)", &[]).unwrap();
    assert_eq!(claimed.len(), 1);
    let ending = include_str!("../../sql/machine_ending.sql");
    let marked = db
        .client()
        .query_one(
            ending,
            &[
                &id,
                &Some(idle_since),
                &"idle for 30 s",
                &None::<i32>,
                &0i64,
            ],
        )
        .unwrap();
    assert!(
        !marked.get::<_, bool>(0),
        "a machine that took a run was marked for idleness"
    );
    assert_eq!(db.state(first), "running");
    // Marked for removal (unconditionally: lost, say), it claims nothing more.
    let marked = db
        .client()
        .query_one(
            ending,
            &[
                &id,
                &None::<chrono::DateTime<chrono::Utc>>,
                &"its worker went silent",
                &None::<i32>,
                &0i64,
            ],
        )
        .unwrap();
    assert!(marked.get::<_, bool>(0));
    // Its removal keeps the why it began with, taken up again or not.
    db.client()
        .query_one(
            ending,
            &[
                &id,
                &None::<chrono::DateTime<chrono::Utc>>,
                &"its removal is taken up again",
                &None::<i32>,
                &0i64,
            ],
        )
        .unwrap();
    let why: String = db.one(&format!(
        "SELECT why FROM orca.pool_machines WHERE id = {id}"
    ));
    assert_eq!(why, "its worker went silent");
    let second = db.queue("job");
    let claimed = m.query("SELECT id FROM orca.worker_claim(4)", &[]).unwrap();
    assert!(claimed.is_empty());
    assert_eq!(db.state(second), "queued");
}

#[test]
fn a_restarted_worker_s_runs_are_queued_again_and_run_anew() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let pids = dir.path("pids");
    db.register(
        &dir,
        &with_pool(
            "p",
            &format!(
                r#"
[pipelines.job]
command = "{}"
placement = "worker:p"
"#,
                hang_first_attempt(&pids)
            ),
        ),
    );
    let role = hand_machine(&db, "p", "again", "pw");
    let run = db.queue("job");
    let mut w = hand_worker(&db, &dir, "p", &role, "pw");
    wait_until("the first attempt runs", 30.0, || {
        !pids_in(&pids).is_empty()
    });
    // The worker dies (kill -9); its run's process dies with it. Its
    // machine lives on and starts the worker again.
    w.signal(libc::SIGKILL);
    w.wait(20.0);
    wait_until("the first attempt's process is gone", 20.0, || {
        pids_in(&pids).iter().all(|p| !alive(*p))
    });
    let mut again = hand_worker(&db, &dir, "p", &role, "pw");
    wait_until("the run succeeds on its second attempt", 30.0, || {
        db.state(run) == "succeeded"
    });
    assert_eq!(
        db.one::<i32>(&format!("SELECT start FROM orca.runs WHERE id = {run}")),
        2
    );
    let why: String = db.one(&format!(
        "SELECT why FROM orca.events WHERE run = {run} AND kind = 'requeued'"
    ));
    assert!(why.contains("started again"), "{why}");
    again.stop();
}

#[test]
fn a_worker_s_command_that_escapes_its_session_and_ignores_sigterm_dies_with_its_attempt() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let _leftovers = KillLeftovers(dir.0.clone());
    let command = toml_str(&escapes_and_ignores_term(&format!(
        "{}/$ORCA_RUN_ID.pid",
        dir.0.display()
    )));
    db.register(
        &dir,
        &with_pool(
            "p",
            &format!(
                "[pipelines.slow]\ncommand = {command}\nplacement = \"worker:p\"\ntimeout = 2\n\n\
                 [pipelines.held]\ncommand = {command}\nplacement = \"worker:p\"\nmax_runs = 3\n"
            ),
        ),
    );
    let role = hand_machine(&db, "p", "esc", "pw-esc");
    db.client()
        .execute("UPDATE orca.pool_machines SET slots = 4", &[])
        .unwrap();
    let slow = db.queue("slow");
    let cancelled = db.queue("held");
    let taken = db.queue("held");
    let stays = db.queue("held");
    let escaped = |run: i64| pids_in(&dir.path(&format!("{run}.pid")));
    let gone = |run: i64| escaped(run).iter().all(|p| !alive(*p));
    let mut w = hand_worker_with(
        &db,
        &dir,
        "p",
        &role,
        "pw-esc",
        &[("ORCA_STOP_GRACE_SECONDS", "2")],
    );
    wait_until("the escaped sleeps run", 30.0, || {
        [slow, cancelled, taken, stays]
            .iter()
            .all(|r| !escaped(*r).is_empty())
    });
    // A timeout.
    wait_until("the run times out", 30.0, || db.state(slow) == "failed");
    let why: String = db.one(&format!("SELECT why FROM orca.runs WHERE id = {slow}"));
    assert!(why.contains("timed out"), "{why}");
    wait_until("nothing the timed-out run started is alive", 15.0, || {
        gone(slow)
    });
    // A cancel.
    db.ok(&["cancel", &cancelled.to_string()]);
    wait_until("the run is cancelled", 30.0, || {
        db.state(cancelled) == "cancelled"
    });
    wait_until("nothing the cancelled run started is alive", 15.0, || {
        gone(cancelled)
    });
    // The attempt taken over elsewhere: killed, nothing recorded.
    db.client()
        .execute(
            "UPDATE orca.runs SET start = start + 1, machine = NULL, host = 'elsewhere' WHERE id = $1",
            &[&taken],
        )
        .unwrap();
    wait_until(
        "nothing the taken-over attempt started is alive",
        15.0,
        || gone(taken),
    );
    assert_eq!(db.state(taken), "running");
    // The worker stopping.
    assert_eq!(db.state(stays), "running");
    w.stop();
    assert_eq!(db.state(stays), "queued");
    wait_until(
        "nothing the stopped worker's run started is alive",
        15.0,
        || gone(stays),
    );
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

/// A worker with one slot writes a run's end and claims the next in one
/// round trip, one transaction: the end's event and the next run's start
/// carry one transaction's time (two statements, two transactions, before).
#[test]
fn a_workers_end_and_its_next_claim_are_one_round() {
    let (db, dir) = setup(&with_pool(
        "p",
        "[pipelines.quick]\ncommand = \"true\"\nplacement = \"worker:p\"\n",
    ));
    let role = hand_machine(&db, "p", "round", "pw");
    db.client()
        .execute("UPDATE orca.pool_machines SET slots = 1", &[])
        .unwrap();
    let first = db.queue("quick");
    let second = db.queue("quick");
    let mut w = hand_worker(&db, &dir, "p", &role, "pw");
    wait_until("both runs succeed", 60.0, || {
        db.state(first) == "succeeded" && db.state(second) == "succeeded"
    });
    w.stop();
    let (ended, started): (i64, i64) = {
        let r = db
            .client()
            .query_one(
                "SELECT (SELECT run FROM orca.events WHERE kind = 'succeeded' ORDER BY id LIMIT 1),
                        (SELECT run FROM orca.events WHERE kind = 'started' ORDER BY id OFFSET 1 LIMIT 1)",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    let same: bool = db
        .client()
        .query_one(
            "SELECT (SELECT at FROM orca.events WHERE run = $1 AND kind = 'succeeded')
                  = (SELECT at FROM orca.events WHERE run = $2 AND kind = 'started')",
            &[&ended, &started],
        )
        .unwrap()
        .get(0);
    assert!(
        same,
        "run {ended}'s end and run {started}'s start were written in two transactions"
    );
}

/// A round carrying an end it can't write now (the run's row locked, past
/// the login's 2 s lock wait) fails as a whole: the end stays, is written
/// on its own once it can be (the worker says so), and the next run is
/// claimed after it.
#[test]
fn an_end_a_round_could_not_write_is_written_on_its_own() {
    let (db, dir) = setup(&with_pool(
        "p",
        "[pipelines.quick]\ncommand = [\"sleep\", \"1\"]\nplacement = \"worker:p\"\n",
    ));
    let role = hand_machine(&db, "p", "fallback", "pw");
    db.client()
        .execute("UPDATE orca.pool_machines SET slots = 1", &[])
        .unwrap();
    let first = db.queue("quick");
    let second = db.queue("quick");
    let mut w = hand_worker(&db, &dir, "p", &role, "pw");
    wait_until("the first run runs", 30.0, || db.state(first) == "running");
    let mut holder = db.client();
    let mut tx = holder.transaction().unwrap();
    tx.execute(
        "SELECT 1 FROM orca.runs WHERE id = $1 FOR UPDATE",
        &[&first],
    )
    .unwrap();
    wait_until("the round carrying its end fails", 30.0, || {
        w.output().contains("ends failed")
    });
    assert_eq!(db.state(first), "running");
    tx.commit().unwrap();
    wait_until("both runs succeed", 60.0, || {
        db.state(first) == "succeeded" && db.state(second) == "succeeded"
    });
    w.stop();
}

/// A round's ends are its machine's own attempts and are bounded: an end of
/// another machine's attempt writes nothing, ends' arrays of unequal
/// lengths or more than 1,024 ends are refused, and nothing is written then.
#[test]
fn a_rounds_ends_are_its_machines_own_and_bounded() {
    let (db, _dir) = setup(&with_pool(
        "p",
        "[pipelines.job]\ncommand = \"true\"\nplacement = \"worker:p\"\nmax_runs = 10\n",
    ));
    let mine = hand_machine(&db, "p", "ends_a", "pw");
    let theirs = machine_role("ends_b");
    db.login_role(&theirs, "pw", "orca_worker");
    db.client()
        .execute(
            "INSERT INTO orca.pool_machines (pool, name, type, location, role, slots)
             VALUES ('p', 'orca-p-other', 'small', 'here', $1, 2)",
            &[&theirs],
        )
        .unwrap();
    db.queue("job");
    let mut b = db.client_as(&theirs, "pw");
    let claimed = b
        .query_one("SELECT id, start FROM orca.worker_claim(1)", &[])
        .unwrap();
    let (id, start): (i64, i32) = (claimed.get(0), claimed.get(1));
    let mut a = db.client_as(&mine, "pw");
    let round =
        "SELECT kind, id, state FROM orca.worker_round('{}', '{}', '{}', '{}', '{}', '{}', '{}', 0,
                 $1, $2, $3, '{1}', '{NULL}', '{stolen}', ARRAY[''::bytea], ARRAY['{}'::jsonb])";
    let rows = a
        .query(round, &[&vec![id], &vec![start], &vec!["failed"]])
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, &str>("kind"), "ended");
    assert_eq!(rows[0].get::<_, Option<&str>>("state"), None);
    assert_eq!(db.state(id), "running", "another machine's end landed");
    let unequal = a
        .query(round, &[&vec![id, id], &vec![start], &vec!["failed"]])
        .unwrap_err();
    assert_eq!(unequal.code().map(|c| c.code()), Some("22023"), "{unequal}");
    let many: Vec<i64> = vec![id; 1025];
    let too_many = a
        .query(
            "SELECT kind FROM orca.worker_round('{}', '{}', '{}', '{}', '{}', '{}', '{}', 0,
             $1, '{}', '{}', '{}', '{}', '{}', '{}', '{}')",
            &[&many],
        )
        .unwrap_err();
    assert_eq!(
        too_many.code().map(|c| c.code()),
        Some("54000"),
        "{too_many}"
    );
    assert_eq!(db.state(id), "running");
    // A round that names its states from subscript 0 is refused whole, as
    // each end's state is read from 1 (the first attempt is not ended).
    let mine_too: i64 = {
        let q = db.queue("job");
        let r = a.query_one(CLAIM_ROUND, &[&1i32]).unwrap();
        assert_eq!(r.get::<_, i64>(0), q);
        q
    };
    let shifted = a
        .query(
            "SELECT kind FROM orca.worker_round('{}', '{}', '{}', '{}', '{}', '{}', '{}', 0,
             ARRAY[$1::bigint, 0], '{1,1}', '[0:1]={failed,cancelled}'::text[], '{0,0}', '{NULL,NULL}',
             '{a,b}', ARRAY[''::bytea, ''::bytea], ARRAY['{}'::jsonb, '{}'::jsonb])",
            &[&mine_too],
        )
        .unwrap_err();
    assert_eq!(shifted.code().map(|c| c.code()), Some("22023"), "{shifted}");
    assert_eq!(db.state(mine_too), "running");
    // A round whose room is NULL claims nothing.
    let waiting = db.queue("job");
    let none = a.query(CLAIM_ROUND, &[&None::<i32>]).unwrap();
    assert!(none.is_empty(), "a NULL room claimed {}", none.len());
    db.client()
        .execute(
            "UPDATE orca.runs SET state = 'cancelled' WHERE id = ANY($1)",
            &[&vec![waiting, mine_too]],
        )
        .unwrap();
    // A round that names no beats at all (NULL) and claims a run marks its
    // machine busy, as every claim does: a removal judges idleness by it.
    let queued = db.queue("job");
    let busy = "SELECT busy_at FROM orca.pool_machines WHERE role = $1";
    let before: chrono::DateTime<chrono::Utc> =
        db.client().query_one(busy, &[&mine]).unwrap().get(0);
    let claimed: Vec<i64> = a
        .query(
            "SELECT id FROM orca.worker_round(NULL, NULL, NULL, '{}', '{}', '{}', '{}', 1,
             '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}') WHERE kind = 'claimed'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(claimed, vec![queued]);
    let after: chrono::DateTime<chrono::Utc> =
        db.client().query_one(busy, &[&mine]).unwrap().get(0);
    assert!(after > before, "a claim left busy_at at {before}");
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

/// An attempt's end written alone (`orca.finish_attempt`, a scheduler's
/// one by one, an older worker's), in a batch (`orca.finish_attempts`, a scheduler's tick) and
/// by a worker's round (`orca.worker_round`, which writes its ends itself
/// since migration 16: one a round and several in one) come to the same
/// thing, case by case: the run's state, failures, retry time, exit, why
/// and output (both bounded), its events in order, the alert of a final
/// failure; an attempt no longer running is left alone, and one named
/// twice in a batch or a round ends once. (Their forms of migration 0020,
/// with no ago: what this binary calls.)
#[test]
fn ends_written_alone_and_in_a_batch_agree() {
    let (db, _dir) = setup(&with_pool(
        "p",
        r#"
[pipelines.ok]
command = "true"

[pipelines.retry]
command = "true"
retries = 2
retry_delay = 30

[pipelines.alerting]
command = "true"
alert = "http://127.0.0.1:9/hook"
"#,
    ));
    let role = hand_machine(&db, "p", "agree", "pw");
    let machine: i64 = db.one("SELECT id FROM orca.pool_machines");
    let long_why = "w".repeat(5000);
    let big_output = vec![b'o'; 70 * 1024];
    let body = serde_json::json!({ "output": "x".repeat(5000) });
    // (pipeline, state asked, exit code, cancel asked, queued rather than running)
    let cases: &[(&str, &str, i32, bool, bool)] = &[
        ("ok", "succeeded", 0, false, false),
        ("retry", "failed", 1, false, false),
        ("retry", "failed", 1, true, false),
        ("alerting", "failed", 3, false, false),
        ("ok", "cancelled", 143, false, false),
        ("ok", "succeeded", 0, false, true),
    ];
    let mut c = db.client();
    let mut make = |on: Option<i64>| -> Vec<i64> {
        cases
            .iter()
            .map(|(p, _, _, cancel, queued)| {
                c.query_one(
                    "INSERT INTO orca.runs (pipeline, state, start, cancel, started_at, heartbeat, machine)
                     VALUES ($1, CASE WHEN $3 THEN 'queued' ELSE 'running' END, 1, $2, now(), now(), $4)
                     RETURNING id",
                    &[p, cancel, queued, &on],
                )
                .unwrap()
                .get(0)
            })
            .collect()
    };
    let alone = make(None);
    let batch = make(None);
    let round = make(Some(machine));
    let mut c = db.client();
    let mut alone_states: Vec<Option<String>> = Vec::new();
    for (id, (_, state, code, _, _)) in alone.iter().zip(cases) {
        alone_states.push(
            c.query_one(
                "SELECT orca.finish_attempt($1, 1, $2, $3, NULL, $4, $5, $6, NULL, $7)",
                &[id, state, code, &long_why, &big_output, &body, &None::<f64>],
            )
            .unwrap()
            .get(0),
        );
    }
    // The batch names its first attempt again at the end.
    let mut ids = batch.clone();
    ids.push(batch[0]);
    let n = ids.len();
    let states: Vec<&str> = cases.iter().map(|c| c.1).chain(["succeeded"]).collect();
    let codes: Vec<i32> = cases.iter().map(|c| c.2).chain([0]).collect();
    let batch_states: Vec<Option<String>> = c
        .query(
            "SELECT state FROM orca.finish_attempts($1, $2, $3, $4, $5, $6, $7, $8, NULL, $9)",
            &[
                &ids,
                &vec![1i32; n],
                &states,
                &codes,
                &vec![None::<i32>; n],
                &vec![long_why.as_str(); n],
                &vec![big_output.as_slice(); n],
                &vec![body.clone(); n],
                &vec![None::<f64>; n],
            ],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(&batch_states[..cases.len()], &alone_states[..]);
    assert_eq!(batch_states[cases.len()], None, "ended twice");
    // The round: its first three ends a round each, the other three in one
    // round that names its first again at the end.
    let mut m = db.client_as(&role, "pw");
    let mut round_states: Vec<Option<String>> = Vec::new();
    for ends in [vec![0], vec![1], vec![2], vec![3, 4, 5, 3]] {
        let n = ends.len();
        let rows = m
            .query(
                "SELECT kind, id, start, state FROM orca.worker_round('{}', '{}', '{}', '{}', '{}', '{}', '{}', 0,
                 $1, $2, $3, $4, $5, $6, $7, $8, $9)",
                &[
                    &ends.iter().map(|&i| round[i]).collect::<Vec<i64>>(),
                    &vec![1i32; n],
                    &ends.iter().map(|&i| cases[i].1).collect::<Vec<&str>>(),
                    &ends.iter().map(|&i| cases[i].2).collect::<Vec<i32>>(),
                    &vec![None::<i32>; n],
                    &vec![long_why.as_str(); n],
                    &vec![big_output.as_slice(); n],
                    &vec![body.clone(); n],
                    &vec![None::<f64>; n],
                ],
            )
            .unwrap();
        assert_eq!(rows.len(), n, "a row per end");
        for (row, &i) in rows.iter().zip(&ends) {
            assert_eq!(row.get::<_, &str>("kind"), "ended");
            assert_eq!(row.get::<_, i64>("id"), round[i]);
            assert_eq!(row.get::<_, i32>("start"), 1);
            round_states.push(row.get("state"));
        }
    }
    assert_eq!(&round_states[..cases.len()], &alone_states[..]);
    assert_eq!(round_states[cases.len()], None, "ended twice in a round");
    assert_eq!(
        alone_states,
        [
            Some("succeeded"),
            Some("queued"),
            Some("failed"),
            Some("failed"),
            Some("cancelled"),
            None
        ]
        .map(|s| s.map(String::from))
    );
    let row = |c: &mut postgres::Client, id: i64| -> String {
        c.query_one(
            "SELECT format('%s %s %s %s %s %s %s', r.state, r.failures, r.exit_code,
                           r.not_before > now() + interval '20 seconds', length(r.why),
                           octet_length(r.output), r.ended_at IS NOT NULL)
                    || ' events: ' || coalesce((SELECT string_agg(e.kind || '/' || left(e.why, 30), ', ' ORDER BY e.id)
                                                FROM orca.events e WHERE e.run = r.id), '')
                    || ' alerts: ' || coalesce((SELECT string_agg((a.body - 'run')::text, ', ' ORDER BY a.id)
                                                FROM orca.alerts a WHERE a.run = r.id), '')
             FROM orca.runs r WHERE r.id = $1",
            &[&id],
        )
        .unwrap()
        .get(0)
    };
    for (i, ((a, b), r)) in alone.iter().zip(&batch).zip(&round).enumerate() {
        let (ra, rb, rr) = (row(&mut c, *a), row(&mut c, *b), row(&mut c, *r));
        assert_eq!(ra, rb, "case {i}: {:?}", cases[i]);
        assert_eq!(ra, rr, "case {i} (a round's): {:?}", cases[i]);
    }
    // What each case came to, once (the rest is the two agreeing).
    let retried = row(&mut c, alone[1]);
    assert!(
        retried.starts_with("queued 1 1 t 4088 65536 t events: failed/"),
        "{retried}"
    );
    assert!(
        retried.contains(", retried/retry 1 of 2 in 30s"),
        "{retried}"
    );
    assert!(row(&mut c, alone[3]).contains("\"exit_code\": 3"));
    assert!(row(&mut c, alone[5]).starts_with("queued 0"));
    // A state that is none of an end's: refused both ways.
    for sql in [
        "SELECT orca.finish_attempt($1, 1, 'running', 0, NULL, '', ''::bytea, '{}')",
        "SELECT * FROM orca.finish_attempts(ARRAY[$1::bigint], '{1}'::int[], '{running}'::text[], '{0}'::int[],
             '{NULL}'::int[], '{\"\"}'::text[], ARRAY[''::bytea], '{\"{}\"}'::jsonb[], NULL::bigint)",
    ] {
        let e = c.query(sql, &[&alone[5]]).unwrap_err();
        assert_eq!(e.code(), Some(&postgres::error::SqlState::INVALID_PARAMETER_VALUE), "{sql}");
    }
    for states in ["{running}", "{NULL}"] {
        let e = m
            .query(
                "SELECT * FROM orca.worker_round('{}', '{}', '{}', '{}', '{}', '{}', '{}', 0,
                 ARRAY[$1::bigint], '{1}', $2::text::text[], '{0}', '{NULL}', '{\"\"}', ARRAY[''::bytea], '{\"{}\"}')",
                &[&round[5], &states],
            )
            .unwrap_err();
        assert_eq!(
            e.code(),
            Some(&postgres::error::SqlState::INVALID_PARAMETER_VALUE),
            "a round's end {states}"
        );
    }
    // And by the table, whoever writes it (migration 16's CHECK, a cast to
    // the enum orca.run_state).
    let e = c
        .execute(
            "UPDATE orca.runs SET state = 'runing' WHERE id = $1",
            &[&alone[0]],
        )
        .unwrap_err();
    assert_eq!(e.code().map(|c| c.code()), Some("22P02"), "{e}");
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

/// Issue 26 §4.6: a worker's claims hold a pipeline's `max_fills` as the
/// scheduler's starts do (migration 17): fill runs beyond it wait, even
/// with room on the machine.
#[test]
fn a_worker_holds_max_fills() {
    let db = TestDb::new();
    let dir = TempDir::new();
    db.register(
        &dir,
        &with_pool(
            "p",
            "[pipelines.f]\ncommand = \"sleep 300\"\nplacement = \"worker:p\"\nmax_runs = 1\nmax_fills = 2\n",
        ),
    );
    let role = hand_machine(&db, "p", "fills", "pw-fills");
    db.client()
        .execute("UPDATE orca.pool_machines SET slots = 8", &[])
        .unwrap();
    for _ in 0..5 {
        db.ok(&["run", "f", "--fill"]);
    }
    let running_fills =
        || db.one::<i64>("SELECT count(*) FROM orca.runs WHERE fill AND state = 'running'");
    let mut w = hand_worker(&db, &dir, "p", &role, "pw-fills");
    w.wait_for("two fill runs run", 30.0, || running_fills() >= 2);
    // A plain run is claimed beside them (a claim that also saw the fills).
    let plain = db.queue("f");
    w.wait_for("the plain run runs", 30.0, || db.state(plain) == "running");
    assert_eq!(running_fills(), 2, "no more than max_fills at once");
    w.terminate(30.0);
}
