//! ENDED is when an attempt's process ended by its supervisor's clock
//! (migration 0020), not when its end reached the database: an end held
//! through an outage keeps its time, STARTED..ENDED agrees with the
//! duration in the why, and a machine login can't put ended_at outside
//! [started_at, now()] whatever "ago" it sends.

use std::time::Duration;

use crate::harness::*;
use crate::pools::with_pool;

/// How long the database stays away after the command ended: the end is
/// written at least this late.
const OUTAGE: Duration = Duration::from_secs(3);

/// The duration a why states (`exit code 0 after 0.31s`), in seconds.
fn measured(why: &str) -> f64 {
    let after = why
        .rsplit_once("after ")
        .unwrap_or_else(|| panic!("no duration in {why:?}"))
        .1;
    after
        .trim_end_matches('s')
        .parse()
        .unwrap_or_else(|e| panic!("duration in {why:?}: {e}"))
}

/// Checks run `run`'s recorded end: ENDED..STARTED within half a second of
/// the duration its supervisor measured, while its end's event was written
/// at least two seconds after ENDED (the outage), and its attempt's row
/// (migration 0019) has the same ENDED.
fn ended_when_measured(db: &TestDb, run: i64) {
    let mut c = db.client();
    let row = c
        .query_one(
            "SELECT r.why,
                    extract(epoch FROM r.ended_at - r.started_at)::float8 AS took,
                    extract(epoch FROM e.at - r.ended_at)::float8 AS late,
                    a.ended_at = r.ended_at AS kept
             FROM orca.runs r
             JOIN orca.events e ON e.run = r.id AND e.kind = r.state
             JOIN orca.attempts a ON a.run = r.id AND a.attempt = r.start
             WHERE r.id = $1",
            &[&run],
        )
        .unwrap();
    let why: String = row.get("why");
    let took: f64 = row.get("took");
    let late: f64 = row.get("late");
    assert!(
        (took - measured(&why)).abs() < 0.5,
        "run {run}: STARTED..ENDED {took:.3}s, the why says {why:?}"
    );
    assert!(
        late >= 2.0,
        "run {run}: its end was written {late:.3}s after ENDED; the outage held it {OUTAGE:?}"
    );
    assert!(
        row.get::<_, bool>("kept"),
        "run {run}: the attempt's ENDED differs"
    );
}

#[test]
fn a_local_end_held_through_an_outage_is_dated_when_its_process_ended() {
    let cluster = Cluster::new("");
    cluster.start();
    let db = TestDb::on(&cluster.url());
    let dir = TempDir::new();
    let ended = dir.path("ended");
    db.register(
        &dir,
        &format!(
            "[pipelines.p]\ncommand = \"sleep 0.3; echo $ORCA_RUN_ID >> {}\"\n",
            ended.display()
        ),
    );
    let run = db.queue("p");
    let mut s = db.scheduler(&dir, &[]);
    wait_until("the run runs", 30.0, || db.state(run) == "running");
    cluster.stop();
    wait_until("its command ends while the database is down", 30.0, || {
        !pids_in(&ended).is_empty()
    });
    // The outage itself (not a wait for a condition): the end waits in
    // the scheduler's memory this long.
    std::thread::sleep(OUTAGE);
    cluster.start();
    wait_until("its end is recorded", 60.0, || db.state(run) == "succeeded");
    ended_when_measured(&db, run);
    s.stop();
}

#[test]
fn a_pool_workers_end_held_through_an_outage_is_dated_when_its_process_ended() {
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
                "[pipelines.job]\ncommand = \"sleep 0.3; echo $ORCA_RUN_ID >> {}\"\nplacement = \"worker:p\"\n",
                ended.display()
            ),
        ),
    );
    let role = hand_machine(&db, "p", "ended", "pw");
    let run = db.queue("job");
    let mut w = hand_worker(&db, &dir, "p", &role, "pw");
    wait_until("the run runs", 30.0, || db.state(run) == "running");
    cluster.stop();
    wait_until("its command ends while the database is down", 30.0, || {
        !pids_in(&ended).is_empty()
    });
    std::thread::sleep(OUTAGE);
    cluster.start();
    wait_until("its end is recorded", 60.0, || db.state(run) == "succeeded");
    ended_when_measured(&db, run);
    w.stop();
}

/// The end of attempt `(id, 1)` by machine login `c` through a round
/// (`p_end_agos` = `ago`), claiming nothing; the state it ended in.
fn end_by_round(c: &mut postgres::Client, id: i64, ago: Option<f64>) -> Option<String> {
    c.query_one(
        "SELECT state FROM orca.worker_round('{}', '{}', '{}', '{}', '{}', '{}', '{}', 0,
             ARRAY[$1::bigint], '{1}', '{succeeded}', '{0}', ARRAY[NULL::integer],
             '{done}', ARRAY[''::bytea], ARRAY['{}'::jsonb], ARRAY[$2::float8])",
        &[&id, &ago],
    )
    .unwrap()
    .get(0)
}

#[test]
fn a_machine_login_cannot_date_an_end_before_its_start_or_in_the_future() {
    let db = TestDb::new();
    let dir = TempDir::new();
    db.register(
        &dir,
        &with_pool(
            "p",
            "[pipelines.job]\ncommand = \"true\"\nplacement = \"worker:p\"\nmax_runs = 20\n",
        ),
    );
    let role = hand_machine(&db, "p", "agos", "pw");
    db.client()
        .execute("UPDATE orca.pool_machines SET slots = 20", &[])
        .unwrap();
    let mut m = db.client_as(&role, "pw");
    m.execute("SELECT * FROM orca.worker_hello()", &[]).unwrap();
    // (ago sent, ended_at at its start rather than at the write)
    let cases: [(Option<f64>, bool); 7] = [
        (Some(1e300), true),
        (Some(f64::INFINITY), true),
        (Some(f64::NAN), true),
        (Some(86400.0 * 365.0 * 1000.0), true),
        (Some(-5.0), false),
        (Some(f64::NEG_INFINITY), false),
        (None, false),
    ];
    let runs: Vec<i64> = cases.iter().map(|_| db.queue("job")).collect();
    let claimed = m
        .query(
            "SELECT id FROM orca.worker_round('{}', '{}', '{}', '{}', '{}', '{}', '{}', 20,
                 '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}')",
            &[],
        )
        .unwrap();
    assert_eq!(claimed.len(), runs.len(), "the machine claims every run");
    // Started a while ago by the database's clock, so that "at its start"
    // and "now" are told apart.
    db.client()
        .execute(
            "UPDATE orca.runs SET started_at = now() - interval '1 hour' WHERE id = ANY($1)",
            &[&runs],
        )
        .unwrap();
    for (&run, &(ago, at_start)) in runs.iter().zip(&cases) {
        let before: f64 = db.one("SELECT extract(epoch FROM now())::float8");
        assert_eq!(
            end_by_round(&mut m, run, ago).as_deref(),
            Some("succeeded"),
            "ago {ago:?}"
        );
        let mut c = db.client();
        let row = c
            .query_one(
                "SELECT extract(epoch FROM ended_at - started_at)::float8 AS since_start,
                        extract(epoch FROM ended_at)::float8 AS ended,
                        ended_at <= now() AS past
                 FROM orca.runs WHERE id = $1",
                &[&run],
            )
            .unwrap();
        let since_start: f64 = row.get("since_start");
        let ended: f64 = row.get("ended");
        assert!(
            row.get::<_, bool>("past"),
            "ago {ago:?}: ENDED in the future"
        );
        if at_start {
            assert_eq!(since_start, 0.0, "ago {ago:?}: ENDED not at its start");
        } else {
            assert!(
                ended >= before,
                "ago {ago:?}: ENDED {ended} before the write began ({before})"
            );
        }
    }
    // A measured ago within the attempt: ENDED that long before now.
    let run = db.queue("job");
    m.query(
        "SELECT id FROM orca.worker_round('{}', '{}', '{}', '{}', '{}', '{}', '{}', 1,
             '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}')",
        &[],
    )
    .unwrap();
    db.client()
        .execute(
            "UPDATE orca.runs SET started_at = now() - interval '1 hour' WHERE id = $1",
            &[&run],
        )
        .unwrap();
    let state: Option<String> = m
        .query_one(
            "SELECT orca.worker_finish($1, 1, 'succeeded', 0, NULL, 'done', ''::bytea, '{}', 600)",
            &[&run],
        )
        .unwrap()
        .get(0);
    assert_eq!(state.as_deref(), Some("succeeded"));
    let ago: f64 = db.one(&format!(
        "SELECT extract(epoch FROM now() - ended_at)::float8 FROM orca.runs WHERE id = {run}"
    ));
    assert!((600.0..605.0).contains(&ago), "ENDED {ago}s ago, 600 sent");
    // The agos' array is one an end, as each other end's array.
    let err = m
        .query(
            "SELECT state FROM orca.worker_round('{}', '{}', '{}', '{}', '{}', '{}', '{}', 0,
                 '{1}', '{1}', '{succeeded}', '{0}', '{NULL}', '{x}', '{\"\"}', '{\"{}\"}', '{}')",
            &[],
        )
        .unwrap_err();
    assert_eq!(
        err.code(),
        Some(&postgres::error::SqlState::INVALID_PARAMETER_VALUE),
        "{err}"
    );
}
