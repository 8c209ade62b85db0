//! Waking on NOTIFY (issue 30, migration 0027, `src/db/wake.rs`): a run of
//! a pool is claimed when it is queued, not at an idle worker's next look;
//! a warm hand-over ends `pool-next` at once; `ORCA_LISTEN=off` polls; a
//! machine of the pool flooding its channel costs no more than the poll;
//! a notification lost (the worker's session ended) or never sent (a retry
//! falling due) strands no run. Workers and `pool-next` are real
//! processes; the test plays the scheduler's part.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use postgres::fallible_iterator::FallibleIterator;

use crate::harness::*;
use crate::pools::with_pool;

/// A pool `p` with pipeline `job` (appends its id to a file) registered.
fn pool_job(extra: &str) -> (TestDb, TempDir) {
    let db = TestDb::new();
    let dir = TempDir::new();
    db.register(
        &dir,
        &with_pool(
            "p",
            &format!(
                r#"
[pipelines.job]
command = "true"
placement = "worker:p"
{extra}
"#
            ),
        ),
    );
    (db, dir)
}

/// Every round a machine makes (its `seen_at` written: a round, a beat,
/// its hello) recorded with its role, by a trigger the test adds as the
/// administrator: what a worker costs, counted exactly, whatever else
/// runs in the database.
fn count_rounds(db: &TestDb) {
    db.admin_here(
        "CREATE TABLE public.rounds (role text, at timestamptz);
         CREATE FUNCTION public.count_round() RETURNS trigger LANGUAGE plpgsql
         SECURITY DEFINER SET search_path = pg_catalog AS $$
         BEGIN INSERT INTO public.rounds VALUES (NEW.role, clock_timestamp()); RETURN NULL; END $$;
         CREATE TRIGGER count_round AFTER UPDATE OF seen_at ON orca.pool_machines
         FOR EACH ROW EXECUTE FUNCTION public.count_round();
         GRANT SELECT ON public.rounds TO PUBLIC;",
    );
}

/// Rounds of `role` a second over the last `secs` seconds (database clock).
fn rounds_per_second(db: &TestDb, role: &str, secs: f64) -> f64 {
    let n: i64 = db
        .client()
        .query_one(
            "SELECT count(*) FROM public.rounds
             WHERE role = $1 AND at > clock_timestamp() - make_interval(secs => $2)",
            &[&role, &secs],
        )
        .unwrap()
        .get(0);
    n as f64 / secs
}

/// Queues a run of `job` and waits for it to succeed: seconds from its
/// queueing to its claim, by the database's clock.
fn claimed_after(db: &TestDb, secs: f64) -> f64 {
    let run = db.queue("job");
    wait_until("the run succeeds", secs, || db.state(run) == "succeeded");
    db.client()
        .query_one(
            "SELECT extract(epoch FROM started_at - queued_at)::float8 FROM orca.runs WHERE id = $1",
            &[&run],
        )
        .unwrap()
        .get(0)
}

/// Waits until the worker has rested `secs` seconds since the last run
/// ended (it looks again only at its idle look, or when woken).
fn rested(db: &TestDb, secs: f64) {
    wait_until("the worker rests", 30.0, || {
        db.client()
            .query_one(
                "SELECT coalesce(max(ended_at) < now() - make_interval(secs => $1), true)
                 FROM orca.runs",
                &[&secs],
            )
            .unwrap()
            .get(0)
    });
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn a_pool_run_is_claimed_when_queued_not_at_the_idle_look() {
    let (db, dir) = pool_job("");
    let role = hand_machine(&db, "p", "wake", "pw");
    let mut w = hand_worker(&db, &dir, "p", &role, "pw");
    // Its first run: it has started and listens.
    claimed_after(&db, 30.0);
    let mut took = Vec::new();
    for _ in 0..5 {
        rested(&db, 1.5);
        took.push(claimed_after(&db, 30.0));
    }
    // Resting, it looks every 6 s: a poll would take 3 s on the median.
    let m = median(took.clone());
    assert!(m < 0.5, "claimed after {took:?} s");
    w.stop();
}

#[test]
fn with_listen_off_a_worker_polls_and_a_listening_one_costs_less_idle() {
    let (db, dir) = pool_job("");
    count_rounds(&db);
    let on = hand_machine(&db, "p", "on", "pw");
    let off = hand_machine(&db, "p", "off", "pw");
    let mut a = hand_worker(&db, &dir, "p", &on, "pw");
    let mut b = hand_worker_with(&db, &dir, "p", &off, "pw", &[("ORCA_LISTEN", "off")]);
    // Both claim runs (the one that polls within its 2 s look).
    for _ in 0..4 {
        claimed_after(&db, 30.0);
    }
    let hosts: i64 = db.one("SELECT count(DISTINCT host) FROM orca.runs");
    assert!(hosts >= 1);
    // Idle, over 14 s: the poller's rounds every 2 s, the listener's every 6 s.
    rested(&db, 14.0);
    let (r_on, r_off) = (
        rounds_per_second(&db, &on, 12.0),
        rounds_per_second(&db, &off, 12.0),
    );
    assert!(r_on <= 0.25, "listening: {r_on} rounds/s");
    assert!((0.34..=0.75).contains(&r_off), "polling: {r_off} rounds/s");
    a.stop();
    b.stop();
}

#[test]
fn an_idle_listening_worker_costs_at_most_0_2_transactions_a_second() {
    let (db, dir) = pool_job("");
    let role = hand_machine(&db, "p", "idle", "pw");
    let mut w = hand_worker(&db, &dir, "p", &role, "pw");
    claimed_after(&db, 30.0);
    let mut cost = Cost::of(&db);
    // Two machines' worth of margin for the server's own now and then.
    let f = cost.least(18.0, Some(&role), 0.2);
    eprintln!("an idle listening worker: {f}");
    assert!(f.per_second <= 0.2, "{f}");
    assert_eq!(f.sessions, (1, 1), "one session: {f}");
    w.stop();
}

#[test]
fn a_machine_flooding_its_pool_s_channel_costs_no_more_than_the_poll() {
    let (db, dir) = pool_job("");
    count_rounds(&db);
    let role = hand_machine(&db, "p", "fld", "pw");
    let mut w = hand_worker(&db, &dir, "p", &role, "pw");
    claimed_after(&db, 30.0);
    // Another machine of the pool: it may learn the channel, and floods it.
    let bad = machine_role("fldbad");
    db.login_role(&bad, "pw", "orca_worker");
    db.client()
        .execute(
            "INSERT INTO orca.pool_machines (pool, name, type, location, role, slots)
             VALUES ('p', 'orca-p-bad', 'small', 'here', $1, 1)",
            &[&bad],
        )
        .unwrap();
    let mut c = db.client_as(&bad, "pw");
    let channel: String = c
        .query_one("SELECT orca.worker_wake()", &[])
        .unwrap()
        .get(0);
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let flood = {
        let (stop, sent) = (stop.clone(), sent.clone());
        std::thread::spawn(move || {
            let mut i: i64 = 0;
            while !stop.load(Ordering::SeqCst) {
                // 1,000 distinct notifications a transaction (not folded),
                // about 20 transactions a second.
                c.execute(
                    "SELECT pg_notify($1, 'x' || ($2::bigint + g)) FROM generate_series(1, 1000) g",
                    &[&channel, &i],
                )
                .unwrap();
                i += 1000;
                sent.fetch_add(1000, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let began = Instant::now();
    wait_until("the worker stops listening", 30.0, || {
        w.output().contains("keep finding nothing")
    });
    // Deaf for 30 s now: it polls, every 2 s.
    wait_until("14 s of the flood", 60.0, || {
        began.elapsed() >= Duration::from_secs(14)
    });
    let r = rounds_per_second(&db, &role, 10.0);
    eprintln!(
        "flood: {} notifications; the worker's rounds {r:.2}/s",
        sent.load(Ordering::SeqCst)
    );
    assert!(r <= 0.75, "{r} rounds/s under the flood");
    // Runs are still claimed, within the poll.
    let took = claimed_after(&db, 30.0);
    assert!(took < 5.0, "claimed after {took} s under the flood");
    stop.store(true, Ordering::SeqCst);
    flood.join().unwrap();
    assert!(sent.load(Ordering::SeqCst) >= 10_000);
    w.stop();
}

#[test]
fn a_notification_lost_with_the_session_strands_no_run() {
    let (db, dir) = pool_job("");
    let role = hand_machine(&db, "p", "lost", "pw");
    let mut w = hand_worker(&db, &dir, "p", &role, "pw");
    claimed_after(&db, 30.0);
    rested(&db, 1.5);
    // Its session ended, and a run queued before it has another (no one
    // listens: the notification is lost).
    db.admin(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'"
    ));
    let took = claimed_after(&db, 30.0);
    // The new session listens and looks at once (a poll would wait up to
    // its 6 s idle look).
    assert!(took < 5.0, "claimed after {took} s");
    w.stop();
}

#[test]
fn a_retry_falls_due_without_a_notification_at_its_time() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let flag = dir.path("failed-once");
    db.register(
        &dir,
        &with_pool(
            "p",
            &format!(
                r#"
[pipelines.job]
command = "test -e {0} || {{ touch {0}; exit 1; }}"
placement = "worker:p"
retries = 1
retry_delay = 2
"#,
                flag.display()
            ),
        ),
    );
    let role = hand_machine(&db, "p", "retry", "pw");
    let mut w = hand_worker(&db, &dir, "p", &role, "pw");
    let run = db.queue("job");
    wait_until("the run succeeds on its retry", 40.0, || {
        db.state(run) == "succeeded"
    });
    // Its second attempt began when the retry fell due (2 s after the
    // first's end), not at the next idle look (6 s).
    let late: f64 = db
        .client()
        .query_one(
            "SELECT extract(epoch FROM started_at - not_before)::float8 FROM orca.runs WHERE id = $1",
            &[&run],
        )
        .unwrap()
        .get(0);
    assert!(late < 2.0, "the retry began {late} s after it fell due");
    w.stop();
}

/// The scheduler's hand-over of instance `instance` to a new run: the
/// database's time it committed at.
fn hand_over(db: &TestDb, instance: &str, login: &str) -> (i64, f64) {
    let next = crate::warm_pool::hand_over(db, instance, login, "worker", false);
    let at: f64 = db.one("SELECT extract(epoch FROM clock_timestamp())::float8");
    (next, at)
}

#[test]
fn a_hand_over_ends_pool_next_at_once_and_its_beat_stays() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let login = format!("orca_i_wake_{}", std::process::id());
    let mut run = crate::warm_pool::setup(&db, &dir, &login, "i-1");
    let mut took = Vec::new();
    for _ in 0..4 {
        let run_s = run.to_string();
        let mut p = crate::warm_pool::as_instance(
            &db,
            &dir,
            &login,
            &["pool-next", "i-1", &run_s, "1", "60"],
            &[],
        );
        // Idle and polled; then polled again (its once-a-second beat).
        wait_until("the served row is idle and polled", 20.0, || {
            db.one::<bool>(
                "SELECT coalesce(bool_or(state = 'idle' AND polled > now() - interval '2 seconds'), false)
                 FROM orca.instances WHERE ended_at IS NULL",
            )
        });
        let first: chrono::DateTime<chrono::Utc> =
            db.one("SELECT polled FROM orca.instances WHERE ended_at IS NULL");
        wait_until("polled again", 10.0, || {
            db.one::<chrono::DateTime<chrono::Utc>>(
                "SELECT polled FROM orca.instances WHERE ended_at IS NULL",
            ) > first
        });
        let (next, at) = hand_over(&db, "i-1", &login);
        assert_eq!(p.wait(10.0).code(), Some(0), "{}", p.output());
        let joined: f64 = db
            .client()
            .query_one(
                "SELECT extract(epoch FROM joined_at)::float8 FROM orca.instances WHERE run = $1",
                &[&next],
            )
            .unwrap()
            .get(0);
        took.push((joined - at).max(0.0));
        // The next round serves the run it was handed.
        db.client()
            .execute(
                "UPDATE orca.instances SET state = 'joined' WHERE run = $1",
                &[&next],
            )
            .unwrap();
        run = next;
    }
    // A poll a second would take half a second on the median.
    let m = median(took.clone());
    assert!(m < 0.25, "pool-next took {took:?} s");
}

/// The SQLSTATE of what `sql` failed with in `c` (`None`: it did not fail).
fn refused(c: &mut postgres::Client, sql: &str) -> Option<String> {
    c.batch_execute(sql)
        .err()
        .and_then(|e| e.code().map(|s| s.code().to_string()))
}

#[test]
fn a_machine_of_one_pool_cannot_learn_another_pool_s_channel() {
    let db = TestDb::new();
    let dir = TempDir::new();
    db.register(
        &dir,
        &with_pool(
            "p",
            &with_pool(
                "q",
                r#"
[pipelines.job]
command = "true"
placement = "worker:p"

[pipelines.other]
command = "true"
placement = "worker:q"
"#,
            ),
        ),
    );
    let a = hand_machine(&db, "p", "chan_a", "pw");
    let b = hand_machine(&db, "q", "chan_b", "pw");
    // Pool q's worker listens on its channel (its LISTEN statement is what
    // a curious session would look for).
    let mut w = hand_worker(&db, &dir, "q", &b, "pw");
    let run = db.queue("other");
    wait_until("q's run succeeds", 30.0, || db.state(run) == "succeeded");
    let q_channel: String = db.one("SELECT orca.wake_channel('pool', 'q')");
    let p_channel: String = db.one("SELECT orca.wake_channel('pool', 'p')");
    assert_ne!(p_channel, q_channel);
    let mut c = db.client_as(&a, "pw");
    // Its own channel, and nothing that makes another's.
    let own: String = c
        .query_one("SELECT orca.worker_wake()", &[])
        .unwrap()
        .get(0);
    assert_eq!(own, p_channel);
    for sql in [
        "SELECT secret FROM orca.wake_secret",
        "SELECT orca.wake_channel('pool', 'q')",
        "SELECT orca.instance_wake('i-1')",
    ] {
        assert_eq!(refused(&mut c, sql).as_deref(), Some("42501"), "{sql}");
    }
    // Other logins' statements (q's worker's, its LISTEN among them) are
    // not shown to it.
    let seen: Vec<String> = c
        .query(
            "SELECT coalesce(query, '') FROM pg_stat_activity WHERE pid <> pg_backend_pid()",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        seen.iter().all(|q| !q.contains(&q_channel[10..])),
        "{seen:?}"
    );
    // Listening on its own channel, it hears its pool's runs and not q's.
    c.batch_execute(&format!("LISTEN \"{own}\"")).unwrap();
    let run = db.queue("other");
    wait_until("q's run succeeds", 30.0, || db.state(run) == "succeeded");
    let heard: Vec<String> = c
        .notifications()
        .timeout_iter(Duration::from_secs(1))
        .map(|n| Ok(n.channel().to_string()))
        .collect()
        .unwrap();
    assert!(heard.is_empty(), "heard {heard:?}");
    db.queue("job");
    let heard = c
        .notifications()
        .timeout_iter(Duration::from_secs(20))
        .next()
        .unwrap()
        .map(|n| n.channel().to_string());
    assert_eq!(heard.as_deref(), Some(own.as_str()));
    w.stop();
}
