//! `orca worker` on a pool machine: it claims its pool's runs with the
//! machine's own credentials and supervises them as the scheduler does;
//! those credentials do a worker's work and nothing else; it rides out a
//! database restart; a removed machine takes no run. The machines here are
//! made by hand (a row and a login), the worker a real process.

use std::process::Command;

use crate::harness::*;
use crate::pools::with_pool;

mod claims;
mod ends;
mod machines;

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
