//! A worker and its machine's row: it waits for a live row and gives up
//! on one that never comes, a removal fenced on the lead, a machine being
//! removed takes no run, a restarted worker's runs queued again, a database
//! restart ridden out.

use super::*;

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
    let ending = include_str!("../../../sql/machine_ending.sql");
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
    let ending = include_str!("../../../sql/machine_ending.sql");
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
