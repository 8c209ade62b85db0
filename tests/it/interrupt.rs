//! Spot notices (issue #35, stage 2a): a pool machine's worker polls its
//! instance metadata (here a fake, `crate::fake_imds`); an interruption
//! hands its running runs back within the grace, queued again without
//! spending an attempt (their output kept as the attempt's), or failed
//! with the reason under `on_lost = "fail"`; a rebalance recommendation
//! drains the machine; a bad answer is nothing. The machines are made by
//! hand, the workers real processes.

use crate::fake_imds::FakeSpotImds;
use crate::harness::*;
use crate::pools::{pool_scheduler, with_pool};

/// A notice of `action` two minutes from now, as EC2 writes it.
fn action_in_2_min(action: &str) -> String {
    let at = chrono::Utc::now() + chrono::Duration::seconds(120);
    format!(
        r#"{{"action":"{action}","time":"{}"}}"#,
        at.format("%Y-%m-%dT%H:%M:%SZ")
    )
}

/// A worker of hand-made machine `tag` of pool `p` with `slots`, polling
/// `imds`, with a kill grace of `grace` seconds.
fn spot_worker(
    db: &TestDb,
    dir: &TempDir,
    (tag, slots): (&str, i32),
    imds: &FakeSpotImds,
    grace: &str,
) -> Proc {
    let role = hand_machine(db, "p", tag, "pw");
    db.client()
        .execute("UPDATE orca.pool_machines SET slots = $1", &[&slots])
        .unwrap();
    hand_worker_with(
        db,
        dir,
        "p",
        &role,
        "pw",
        &[
            ("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url.as_str()),
            ("ORCA_KILL_GRACE_SECONDS", grace),
        ],
    )
}

/// Its machine's notice (migration 31).
fn notice(db: &TestDb) -> Option<String> {
    db.one("SELECT max(notice) FROM orca.pool_machines")
}

#[test]
fn an_interruption_hands_the_running_run_back_without_spending_an_attempt() {
    let (db, dir) = setup(&with_pool(
        "p",
        // It ignores SIGTERM: SIGKILL ends it, after the grace.
        r#"
[pipelines.job]
command = "trap '' TERM; echo started; sleep 300 & wait"
placement = "worker:p"
retries = 0
"#,
    ));
    let imds = FakeSpotImds::start("spot");
    let run = db.queue("job");
    let mut w = spot_worker(&db, &dir, ("spot1", 1), &imds, "3");
    wait_until("the run runs and its output is written", 40.0, || {
        db.state(run) == "running" && text(&db.output(run)).contains("started")
    });
    // Polled, nothing heard yet.
    wait_until("the worker polls the metadata", 30.0, || {
        imds.action_gets() >= 1
    });
    assert_eq!(notice(&db), None);
    imds.action(&action_in_2_min("terminate"));
    wait_until("the run is queued again", 40.0, || {
        db.state(run) == "queued"
    });
    // Recorded: the machine's row and its event.
    assert_eq!(notice(&db).as_deref(), Some("interrupted"));
    let why: String = db.one("SELECT why FROM orca.events WHERE kind = 'machine interrupted'");
    assert!(
        why.contains("spot interruption notice (terminate at "),
        "{why}"
    );
    // No attempt spent; the attempt kept as interrupted, with its output.
    let failures: i32 = db.one(&format!("SELECT failures FROM orca.runs WHERE id = {run}"));
    assert_eq!(failures, 0);
    let (outcome, awhy, output): (String, String, Vec<u8>) = {
        let r = db
            .client()
            .query_one(
                "SELECT outcome, why, output FROM orca.attempts WHERE run = $1 AND attempt = 1",
                &[&run],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2))
    };
    assert_eq!(outcome, "requeued");
    assert!(awhy.starts_with("interrupted: machine "), "{awhy}");
    assert!(text(&output).contains("started"), "{}", text(&output));
    // Within the grace (3 s: the kill grace, well inside the two minutes)
    // and 5 s, by the database's clock.
    let took: f64 = db.one(&format!(
        "SELECT extract(epoch FROM a.ended_at - m.noticed_at)::float8
         FROM orca.attempts a, orca.pool_machines m WHERE a.run = {run} AND a.attempt = 1"
    ));
    assert!(took <= 3.0 + 5.0, "handed back {took:.1}s after the notice");
    // `orca logs` shows the attempt, its why and its output.
    let logs = db.ok(&["logs", &run.to_string()]);
    assert!(logs.contains("started"), "{logs}");
    assert!(logs.contains("interrupted: machine"), "{logs}");
    // The interrupted machine takes nothing more: the run stays queued.
    let other = db.queue("job");
    let seen: chrono::DateTime<chrono::Utc> = db.one("SELECT seen_at FROM orca.pool_machines");
    wait_until("the worker beats twice more", 30.0, || {
        let now: chrono::DateTime<chrono::Utc> = db.one("SELECT seen_at FROM orca.pool_machines");
        (now - seen).num_milliseconds() >= 2500
    });
    assert_eq!(db.state(run), "queued");
    assert_eq!(db.state(other), "queued");
    w.stop();
}

#[test]
fn an_interruption_fails_an_on_lost_fail_pipeline_s_run_with_the_reason() {
    let (db, dir) = setup(&with_pool(
        "p",
        r#"
[pipelines.once]
command = "echo started; sleep 300"
placement = "worker:p"
retries = 2
on_lost = "fail"
"#,
    ));
    let imds = FakeSpotImds::start("spot");
    let run = db.queue("once");
    let mut w = spot_worker(&db, &dir, ("spot2", 1), &imds, "10");
    wait_until("the run runs", 40.0, || db.state(run) == "running");
    imds.action(&action_in_2_min("stop"));
    wait_until("the run fails", 40.0, || db.state(run) == "failed");
    let why: String = db.one(&format!("SELECT why FROM orca.runs WHERE id = {run}"));
    assert!(
        why.starts_with("lost (on_lost = \"fail\", not run again): interrupted: machine "),
        "{why}"
    );
    assert!(why.contains("(stop at "), "{why}");
    w.stop();
}

#[test]
fn a_rebalance_recommendation_drains_the_machine() {
    let (db, dir) = setup(&with_pool(
        "p",
        r#"
[pipelines.job]
command = "echo started; sleep 4; echo finished"
placement = "worker:p"
"#,
    ));
    let imds = FakeSpotImds::start("spot");
    let first = db.queue("job");
    let mut w = spot_worker(&db, &dir, ("spot3", 2), &imds, "3");
    wait_until("the first run runs", 40.0, || db.state(first) == "running");
    let at = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ");
    imds.rebalance(&format!(r#"{{"noticeTime":"{at}"}}"#));
    wait_until("the machine drains", 30.0, || {
        notice(&db).as_deref() == Some("draining")
    });
    assert_eq!(db.events_of_kind("machine draining"), 1);
    // Nothing new is taken, though it has a free slot; the running run
    // finishes as it would have.
    let second = db.queue("job");
    wait_until("the first run finishes", 40.0, || {
        db.state(first) == "succeeded"
    });
    assert!(text(&db.output(first)).contains("finished"));
    let seen: chrono::DateTime<chrono::Utc> = db.one("SELECT seen_at FROM orca.pool_machines");
    wait_until("the worker beats on for 2.5 s", 30.0, || {
        let now: chrono::DateTime<chrono::Utc> = db.one("SELECT seen_at FROM orca.pool_machines");
        (now - seen).num_milliseconds() >= 2500
    });
    assert_eq!(db.state(second), "queued");
    w.stop();
}

#[test]
fn a_bad_metadata_answer_is_nothing() {
    let (db, dir) = setup(&with_pool(
        "p",
        r#"
[pipelines.job]
command = "echo ran"
placement = "worker:p"
"#,
    ));
    let imds = FakeSpotImds::start("spot");
    imds.action("{\"action\": \"terminate\", \"time\": \"in a moment\"}");
    imds.rebalance("not json at all");
    let mut w = spot_worker(&db, &dir, ("spot4", 1), &imds, "3");
    wait_until("the worker has polled twice", 30.0, || {
        imds.action_gets() >= 2
    });
    let run = db.queue("job");
    wait_until("a run queued after runs", 40.0, || {
        db.state(run) == "succeeded"
    });
    assert_eq!(notice(&db), None);
    assert_eq!(db.events_of_kind("machine interrupted"), 0);
    // Said once, not at each poll.
    wait_until("the worker has polled twice more", 30.0, || {
        imds.action_gets() >= 4
    });
    let log = w.output();
    let said = "spot/instance-action: its time is not RFC 3339";
    assert_eq!(log.matches(said).count(), 1, "{log}");
    w.stop();
}

#[test]
fn an_interrupted_machine_is_replaced_even_at_max_machines() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let pids = dir.path("pids");
    db.register(
        &dir,
        &format!(
            r#"
[pools.p]
types = [{{ type = "small", wait = 0 }}]
locations = ["here"]
max_machines = 1

[pipelines.job]
command = "{}"
placement = "worker:p"
max_runs = 5
"#,
            hang(&pids)
        ),
    );
    let first = db.queue("job");
    let mut s = pool_scheduler(&db, &dir, &[]);
    wait_until("the first run runs", 60.0, || db.state(first) == "running");
    let second = db.queue("job");
    wait_until("the scaler is at max_machines", 30.0, || {
        db.one::<String>("SELECT status FROM orca.pools WHERE name = 'p'")
            .starts_with("at max_machines (1)")
    });
    // The machine's row says it was interrupted, as its worker's hook
    // writes it (a local machine polls no metadata; the other tests here
    // have the hook write it).
    db.client()
        .execute(
            "UPDATE orca.pool_machines SET notice = 'interrupted', noticed_at = now(),
                notice_at = now() + interval '2 minutes'",
            &[],
        )
        .unwrap();
    // Its room no longer counts, nor does it stand against max_machines:
    // a replacement is made, and the waiting run runs there.
    wait_until("a replacement runs the waiting run", 60.0, || {
        db.state(second) == "running"
    });
    let (made, on_first): (i64, bool) = {
        let r = db
            .client()
            .query_one(
                "SELECT (SELECT count(*) FROM orca.pool_machines),
                        (SELECT machine FROM orca.runs WHERE id = $1)
                          = (SELECT machine FROM orca.runs WHERE id = $2)",
                &[&first, &second],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(made, 2);
    assert!(!on_first, "the interrupted machine took no run");
    let pools = db.ok(&["pools"]);
    assert!(pools.contains("interrupted"), "{pools}");
    s.stop();
}

/// The notice's time comes from the machine (a login may send anything):
/// what it sends is held to within a day before and ten minutes after the
/// database's now, so no row or event says a time no notice has.
#[test]
fn a_notice_time_a_login_sends_is_bounded() {
    let (db, _dir) = setup(&with_pool(
        "p",
        "[pipelines.job]\ncommand = \"true\"\nplacement = \"worker:p\"\n",
    ));
    let role = hand_machine(&db, "p", "notice", "pw");
    let mut c = db.client_as(&role, "pw");
    let left: f64 = c
        .query_one(
            "SELECT orca.worker_notice('interrupted', 'terminate', 'infinity')",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(left.is_finite() && left <= 600.0, "{left}");
    let ahead: f64 =
        db.one("SELECT extract(epoch FROM max(notice_at) - now())::float8 FROM orca.pool_machines");
    assert!(ahead <= 600.0, "{ahead}");
}
