//! What orca's processes cost the database (issue 14): a machine's and an
//! instance's processes hold one connection each and make about one
//! transaction a second while busy, fewer while idle; the scheduler holds
//! two; a running attempt's stored output is the last 64 KiB of what it
//! printed, NUL bytes and all, while it runs and at its end. Figures are
//! the server's own (`harness::Cost`), measured over windows of many
//! seconds on a server of the test's own with nothing else running on it
//! (autovacuum off: its transactions count as the database's).

use std::process::Stdio;

use crate::harness::*;
use crate::pools::with_pool;
use crate::warm_pool::{as_instance, serving, setup as instance_setup};

mod output;

/// How long a busy or idle process is watched.
const WINDOW: f64 = 30.0;

/// A server of the test's own, autovacuum off, and a database on it.
fn own_server() -> (Cluster, TestDb, TempDir) {
    let cluster = Cluster::new("autovacuum = off");
    cluster.start();
    let db = TestDb::on(&cluster.url());
    (cluster, db, TempDir::new())
}

/// Record `k` of the stream [`stream_command`] prints: 16 bytes, NUL and
/// a byte that is no UTF-8 among them.
fn record(k: u64) -> Vec<u8> {
    let mut r = format!("{k:010}").into_bytes();
    r.extend_from_slice(&[0, 1, 0xff, b'a', b'b', b'\n']);
    r
}

/// Bytes `from..from + len` of the stream.
fn stream(from: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 32);
    let mut k = from / 16;
    let skip = (from % 16) as usize;
    while out.len() < len + skip {
        out.extend_from_slice(&record(k));
        k += 1;
    }
    out[skip..skip + len].to_vec()
}

/// A shell command printing the first `records` records of the stream,
/// `burst` of them every tenth of a second, and writing how many it has
/// printed to `progress` after each burst.
fn stream_command(records: u64, burst: u64, progress: &std::path::Path) -> String {
    toml_str(&format!(
        "k=0; while [ $k -lt {records} ]; do j=0; \
         while [ $j -lt {burst} ] && [ $k -lt {records} ]; do \
         printf '%010d\\000\\001\\377ab\\n' $k; k=$((k+1)); j=$((j+1)); done; \
         echo $k > {p}; sleep 0.1; done",
        p = progress.display()
    ))
}

/// How many records a stream command has printed so far.
fn printed(progress: &std::path::Path) -> u64 {
    std::fs::read_to_string(progress)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// What `orca logs RUN` prints under its attempt's line: the run's stored
/// output.
fn logs(db: &TestDb, run: i64) -> Vec<u8> {
    let out = db.run(&["logs", &run.to_string()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    crate::harness::logs_body(&out.stdout).to_vec()
}

#[test]
fn a_worker_holds_one_connection_and_makes_about_a_transaction_a_second() {
    let (_cluster, db, dir) = own_server();
    db.register(
        &dir,
        &with_pool(
            "p",
            r#"
[pipelines.busy]
command = "while :; do echo busy; sleep 0.5; done"
placement = "worker:p"
max_runs = 2
"#,
        ),
    );
    let role = hand_machine(&db, "p", "cost", "pw");
    // Room for one more: its rounds look for runs too.
    db.client()
        .execute("UPDATE orca.pool_machines SET slots = 3", &[])
        .unwrap();
    let runs = [db.queue("busy"), db.queue("busy")];
    let mut w = hand_worker_with(&db, &dir, "p", &role, "pw", &[("ORCA_TICK_SECONDS", "1")]);
    wait_until("both runs run and print", 60.0, || {
        runs.iter()
            .all(|r| db.state(*r) == "running" && text(&logs(&db, *r)).contains("busy"))
    });
    let mut cost = Cost::of(&db);
    let busy = cost.least(WINDOW, Some(&role), 1.2);
    eprintln!("worker, 2 runs running: {busy}");
    for r in runs {
        db.ok(&["cancel", &r.to_string()]);
    }
    wait_until("both runs are cancelled", 60.0, || {
        runs.iter().all(|r| db.state(*r) == "cancelled")
    });
    let idle = cost.least(WINDOW, Some(&role), 0.75);
    eprintln!("worker, idle: {idle}");
    assert_eq!(busy.sessions, (1, 1), "busy: {busy}");
    assert!(busy.per_second <= 1.2, "busy: {busy}");
    assert_eq!(idle.sessions, (1, 1), "idle: {idle}");
    assert!(idle.per_second <= 0.75, "idle: {idle}");
    w.stop();
}

#[test]
fn pool_wait_and_pool_next_hold_one_connection_and_poll_once_a_second() {
    let (_cluster, db, dir) = own_server();
    let login = format!("orca_i_cost_{}", std::process::id());
    let run = instance_setup(&db, &dir, &login, "i-1");
    let run_s = run.to_string();
    let mut cost = Cost::of(&db);
    let mut wait = as_instance(&db, &dir, &login, &["pool-wait", "i-1", &run_s, "1"], &[]);
    wait_until("pool-wait has connected", 20.0, || {
        cost.sessions_of(&login) > 0
    });
    let waiting = cost.least(WINDOW, Some(&login), 1.2);
    eprintln!("pool-wait: {waiting}");
    db.client()
        .execute(
            "UPDATE orca.runs SET state = 'succeeded' WHERE id = $1",
            &[&run],
        )
        .unwrap();
    assert_eq!(wait.wait(20.0).code(), Some(0), "{}", wait.output());
    let mut next = as_instance(
        &db,
        &dir,
        &login,
        &["pool-next", "i-1", &run_s, "1", "600"],
        &[],
    );
    wait_until("pool-next has marked its row idle", 20.0, || {
        db.one::<String>("SELECT state FROM orca.instances") == "idle"
    });
    let polling = cost.least(WINDOW, Some(&login), 1.2);
    eprintln!("pool-next: {polling}");
    db.client()
        .execute(
            "UPDATE orca.instances SET state = 'ended', ended_at = now()",
            &[],
        )
        .unwrap();
    assert_eq!(next.wait(20.0).code(), Some(1), "{}", next.output());
    for (who, f) in [("pool-wait", waiting), ("pool-next", polling)] {
        assert_eq!(f.sessions, (1, 1), "{who}: {f}");
        assert!(f.per_second <= 1.2, "{who}: {f}");
    }
}

#[test]
fn an_ec2_head_holds_one_connection_while_its_driver_runs() {
    let (_cluster, db, dir) = own_server();
    let login = format!("orca_i_head_cost_{}", std::process::id());
    let run = serving(
        &db,
        &dir,
        &login,
        "i-1",
        "head",
        "while :; do echo driving; sleep 0.5; done",
        "",
        false,
    );
    let run_s = run.to_string();
    let mut p = as_instance(&db, &dir, &login, &["ec2-serve", "i-1", &run_s, "1"], &[]);
    wait_until("the driver prints", 30.0, || {
        text(&logs(&db, run)).contains("driving")
    });
    let mut cost = Cost::of(&db);
    let head = cost.least(WINDOW, Some(&login), 1.2);
    eprintln!("ec2-serve, a head: {head}");
    db.ok(&["cancel", &run_s]);
    assert_eq!(p.wait(30.0).code(), Some(0), "{}", p.output());
    assert_eq!(db.state(run), "cancelled");
    assert!(text(&db.output(run)).contains("driving"));
    assert_eq!(head.sessions, (1, 1), "{head}");
    assert!(head.per_second <= 1.2, "{head}");
}

#[test]
fn an_ec2_worker_holds_one_connection_while_its_service_runs() {
    let (_cluster, db, dir) = own_server();
    let login = format!("orca_i_wcost_{}", std::process::id());
    let up = dir.path("up");
    let run = serving(
        &db,
        &dir,
        &login,
        "i-2",
        "worker",
        "true",
        &format!(
            "worker_service = \"touch {}; exec sleep 300\"\n",
            up.display()
        ),
        false,
    );
    let run_s = run.to_string();
    let mut p = as_instance(&db, &dir, &login, &["ec2-serve", "i-2", &run_s, "1"], &[]);
    wait_until("the worker service runs", 30.0, || up.exists());
    let mut cost = Cost::of(&db);
    let worker = cost.least(WINDOW, Some(&login), 1.2);
    eprintln!("ec2-serve, a worker: {worker}");
    db.client()
        .execute(
            "UPDATE orca.runs SET state = 'succeeded' WHERE id = $1",
            &[&run],
        )
        .unwrap();
    assert_eq!(p.wait(30.0).code(), Some(0), "{}", p.output());
    assert_eq!(worker.sessions, (1, 1), "{worker}");
    assert!(worker.per_second <= 1.2, "{worker}");
}

#[test]
fn the_scheduler_holds_three_connections() {
    let (db, dir) = setup(
        r#"
[pipelines.busy]
command = "while :; do echo busy; sleep 0.5; done"
max_runs = 2
"#,
    );
    let runs = [db.queue("busy"), db.queue("busy")];
    let mut s = db.scheduler(&dir, &[("ORCA_TICK_SECONDS", "1")]);
    wait_until("both runs run and print", 60.0, || {
        runs.iter()
            .all(|r| db.state(*r) == "running" && text(&logs(&db, *r)).contains("busy"))
    });
    let mut cost = Cost::of(&db);
    let (mut fewest, mut most) = (i64::MAX, 0);
    let (x0, _, t0) = cost.now();
    wait_until("10 s of the scheduler leading", 60.0, || {
        let n = cost.sessions_named("orca scheduler");
        (fewest, most) = (fewest.min(n), most.max(n));
        cost.now().2 - t0 >= 10.0
    });
    let (x1, _, t1) = cost.now();
    eprintln!(
        "scheduler, 2 runs running: {most} connections, {:.2} transactions/s",
        (x1 - x0) as f64 / (t1 - t0)
    );
    // The tick's, the heartbeat's, and the wake-up listener's (leading).
    assert_eq!((fewest, most), (3, 3));
    s.stop();
}

/// WAL a run costs the server per second, beyond a quiet run's: one
/// printing 1 MB a second (the records of [`stream`], which compress well;
/// and random bytes, which don't), one printing a line every tenth of a
/// second after a first 64 KiB. A figure, not a test (`cargo test --test
/// it wal_figures -- --ignored --nocapture`), on a server of its own.
#[test]
#[ignore]
fn wal_figures() {
    let (_cluster, db, dir) = own_server();
    db.register(
        &dir,
        &format!(
            "[pipelines.quiet]\ncommand = \"sleep 60\"\n\n\
             [pipelines.megabyte]\ncommand = {}\n\n\
             [pipelines.random]\ncommand = {}\n\n\
             [pipelines.lines]\ncommand = {}\n",
            stream_command(65_536 * 60, 6_554, &dir.path("mb")),
            toml_str("while :; do head -c 104858 /dev/urandom; sleep 0.1; done"),
            toml_str(
                "head -c 70000 /dev/urandom | od -An -tx1; i=0; \
                 while :; do i=$((i+1)); echo \"line $i of a run that talks\"; sleep 0.1; done"
            ),
        ),
    );
    let mut s = db.scheduler(&dir, &[("ORCA_TICK_SECONDS", "1")]);
    let mut cost = Cost::of(&db);
    let mut figure = |pipeline: &str| {
        let run = db.queue(pipeline);
        wait_until("the run runs", 60.0, || db.state(run) == "running");
        let warm = std::time::Instant::now();
        wait_until("5 s of it", 20.0, || warm.elapsed().as_secs() >= 5);
        let f = cost.measure(20.0, None);
        db.ok(&["cancel", &run.to_string()]);
        wait_until("the run is cancelled", 60.0, || {
            db.state(run) == "cancelled"
        });
        f
    };
    let quiet = figure("quiet");
    let mb = figure("megabyte");
    let random = figure("random");
    let lines = figure("lines");
    eprintln!("a quiet run: {quiet}");
    eprintln!(
        "a run printing 1 MB/s: {:.0} WAL bytes/s more ({mb})",
        mb.wal_per_second - quiet.wal_per_second
    );
    eprintln!(
        "a run printing 1 MB/s of random bytes: {:.0} WAL bytes/s more ({random})",
        random.wal_per_second - quiet.wal_per_second
    );
    eprintln!(
        "a run printing a line every 0.1 s, 64 KiB tail: {:.0} WAL bytes/s more ({lines})",
        lines.wal_per_second - quiet.wal_per_second
    );
    s.stop();
}
