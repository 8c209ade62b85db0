//! Throughput at the defaults (issue 33): a pipeline with `max_runs` 64
//! and a short command (`/bin/sh -c 'date +%s.%N >> FILE'`), 2,000 runs
//! queued up front, then `orca scheduler` at the default tick (1 s): runs
//! a second from the scheduler's start to the last run's line, beside the
//! floor (`xargs -P 64` of the same command, 2,000 times, measured just
//! before: the host is shared, its load moves) and the share; then a
//! steady stream (the runs queued one `INSERT` at a time while the others
//! run, from the first queued). Each beside a scheduler at a 0.05 s tick
//! with `ORCA_LISTEN=off` (the poll wake-ups replace), with the
//! scheduler's CPU and the database's transactions per run. Then what a
//! scheduler costs idle (nothing queued, nothing running) with wake-ups
//! and without, and its tick with 100,000 runs queued (`orca run --each`)
//! and worked through.

use std::process::{Command, Stdio};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::ctx::{Bench, pause, wait_for};
use crate::harness::{Cost, TestDb};
use crate::out::{f2, fig, heading};

const RUNS: usize = 2000;

/// Seconds since the epoch, this host's clock (what `date +%s.%N` prints).
fn epoch() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The lines of `path` as numbers.
fn stamps(path: &std::path::Path) -> Vec<f64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// How the runs of a burst are queued.
#[derive(Clone, Copy, PartialEq)]
enum Queued {
    /// All in one statement before the scheduler starts.
    UpFront,
    /// One `INSERT` at a time, as fast as they go, while the others run.
    Stream,
}

/// One burst's figures.
struct Burst {
    /// Runs a second, or None if not all ran within the deadline.
    rate: Option<f64>,
    /// Lines written (of [`RUNS`]).
    done: usize,
    /// The scheduler's CPU (user and system), ms a run.
    cpu_ms: f64,
    /// The database's transactions a run (the bench's own inserts left out).
    xacts: f64,
    /// The scheduler's stats file.
    stats: crate::out::Stats,
}

/// [`RUNS`] runs through a scheduler at `tick` s with `env`, queued as
/// `how`; `out` is the pipeline's file.
#[allow(clippy::too_many_arguments)]
fn burst(
    b: &Bench,
    db: &TestDb,
    cost: &mut Cost,
    out: &std::path::Path,
    how: Queued,
    tick: &str,
    env: &[(&str, &str)],
    name: &str,
) -> Burst {
    let _ = std::fs::remove_file(out);
    let mut c = b.client(db);
    let mut ours = 0i64;
    if how == Queued::UpFront {
        c.execute(
            "INSERT INTO orca.runs (pipeline) SELECT 't' FROM generate_series(1, $1::int)",
            &[&(RUNS as i32)],
        )
        .unwrap();
        c.batch_execute("ANALYZE orca.runs").unwrap();
        ours += 2;
    }
    let stats = format!("stats-{name}");
    // The bench's statements so far reported before the window opens.
    pause(1.5);
    let (x0, _, _) = cost.now();
    let mut began = epoch();
    let mut s = b.scheduler(db, tick, &stats, env, &format!("sched-{name}.log"));
    let mut want = RUNS;
    if how == Queued::Stream {
        // Once it leads (a first run has run), the stream.
        c.execute("INSERT INTO orca.runs (pipeline) VALUES ('t')", &[])
            .unwrap();
        ours += 1;
        want += 1;
        assert!(
            wait_for(60.0, 0.01, || !stamps(out).is_empty()),
            "the scheduler started nothing; its log:\n{}",
            s.tail(20)
        );
        let stmt = c
            .prepare("INSERT INTO orca.runs (pipeline) VALUES ('t')")
            .unwrap();
        began = epoch();
        for _ in 0..RUNS {
            c.execute(&stmt, &[]).unwrap();
        }
        ours += RUNS as i64;
    }
    let all = wait_for(180.0, 0.02, || stamps(out).len() >= want);
    let cpu = crate::cpu::of(s.pid()).map(|t| t.own).unwrap_or(0);
    let last = stamps(out).into_iter().reduce(f64::max);
    s.terminate(30.0);
    drop(c);
    // The scheduler's and the bench's sessions report as they end.
    pause(2.0);
    let (x1, _, _) = cost.now();
    let done = stamps(out).len().min(want) - (want - RUNS);
    Burst {
        rate: last.filter(|_| all).map(|l| RUNS as f64 / (l - began)),
        done,
        cpu_ms: cpu as f64 / crate::cpu::hz() * 1000.0 / want as f64,
        xacts: (x1 - x0 - ours) as f64 / want as f64,
        stats: b.stats(&stats),
    }
}

/// Prints a burst's figures beside the floor.
fn report(label: &str, r: &Burst, floor: f64, goal: bool) {
    match r.rate {
        Some(rate) => fig(
            &format!(
                "{label}: runs a second / share of the floor measured just before{}",
                if goal { " (goal >= 0.8)" } else { "" }
            ),
            format!("{rate:.0} / {:.2} (floor {floor:.0})", rate / floor),
        ),
        None => fig(
            &format!("{label}: runs a second"),
            format!("n/a ({} of {RUNS} within 180 s)", r.done),
        ),
    }
    fig(
        &format!("{label}: scheduler CPU ms a run / transactions a run / ticks / tick p99 ms"),
        format!(
            "{:.3} / {:.2} / {} / {}",
            r.cpu_ms,
            r.xacts,
            r.stats.get("ticks"),
            r.stats.get("p99_ms")
        ),
    );
}

/// The floor: runs a second of `xargs -P 64` of the same command,
/// [`RUNS`] times (a file of its own).
fn floor(b: &Bench) -> f64 {
    let floor_file = b.dir.path("throughput-floor");
    let _ = std::fs::remove_file(&floor_file);
    let script = format!("date +%s.%N >> {}", floor_file.display());
    let t0 = Instant::now();
    let mut xargs = Command::new("xargs")
        .args(["-P", "64", "-n", "1", "/bin/sh", "-c", &script, "sh"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("xargs");
    {
        use std::io::Write;
        let mut stdin = xargs.stdin.take().unwrap();
        let lines: String = (0..RUNS).map(|i| format!("{i}\n")).collect();
        stdin.write_all(lines.as_bytes()).unwrap();
    }
    assert!(xargs.wait().unwrap().success());
    let floor = RUNS as f64 / t0.elapsed().as_secs_f64();
    assert_eq!(stamps(&floor_file).len(), RUNS);
    floor
}

/// Prints the figures.
pub fn run(b: &mut Bench) {
    heading("throughput at the defaults: 2,000 short runs, max_runs 64, tick 1 s");
    let out = b.dir.path("throughput-runs");
    let config = format!(
        "[pipelines.t]\ncommand = [\"/bin/sh\", \"-c\", \"date +%s.%N >> {}\"]\nmax_runs = 64\n",
        out.display()
    );
    let db = b.db("orca_bench_throughput", &config);
    let mut cost = Cost::of(&db);
    let poll = [("ORCA_LISTEN", "off")];
    for (how, what) in [
        (Queued::UpFront, "queued up front"),
        (Queued::Stream, "a stream"),
    ] {
        for (tick, env, label) in [
            ("1", &[][..], "tick 1 s, wake-ups"),
            ("0.05", &poll[..], "tick 0.05 s, ORCA_LISTEN=off"),
        ] {
            progress!("throughput: the floor, xargs -P 64, then {RUNS} runs {what}, {label}");
            let floor = floor(b);
            let name = format!(
                "{}-{tick}",
                if how == Queued::UpFront {
                    "upfront"
                } else {
                    "stream"
                }
            );
            let r = burst(b, &db, &mut cost, &out, how, tick, env, &name);
            report(&format!("{what}, {label}"), &r, floor, tick == "1");
        }
    }

    // Idle: nothing queued, nothing running; the stale limit at its
    // default (the bench's 2 s sweeps every tick). On and off twice each,
    // the lower window of each kept (autovacuum's and other databases'
    // work on a shared host lands in one window now and then).
    let mut idle = [f64::INFINITY; 2];
    let mut per_tick = [String::new(), String::new()];
    for round in 0..4 {
        let (i, listen) = [(0, "on"), (1, "off")][round % 2];
        progress!("throughput: idle transactions, ORCA_LISTEN={listen}");
        let mut s = b.scheduler(
            &db,
            "1",
            &format!("stats-idle-{listen}"),
            &[("ORCA_LISTEN", listen), ("ORCA_STALE_SECONDS", "10")],
            &format!("sched-idle-{listen}.log"),
        );
        // What its start did is reported late (an idle session reports at
        // most every 10 s): the listener's connection and LISTEN would
        // otherwise land in the window.
        pause(11.0);
        let f = cost.measure(10.0, None);
        s.terminate(30.0);
        idle[i] = idle[i].min(f.per_second);
        per_tick[i] = b
            .stats(&format!("stats-idle-{listen}"))
            .get("statements_per_tick");
    }
    fig(
        "idle transactions a second, ORCA_LISTEN=on / off (goal: on no more than off)",
        format!(
            "{:.2} / {:.2} (statements a tick {} / {})",
            idle[0], idle[1], per_tick[0], per_tick[1]
        ),
    );

    // A backlog of 100,000 queued runs, worked through while measured: at
    // the default tick (60 ticks: p99 the second slowest, the first tick
    // taking the lead and starting 64 is the slowest), and at 0.1 s for a
    // p99 over ~150 ticks.
    let lines: String = (1..=100_000).map(|i| format!("{i}\n")).collect();
    let file = b.dir.write("throughput-backlog.tsv", &lines);
    let queued = db
        .orca(&["run", "t", "--each", &file])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(queued.status.success(), "orca run --each failed");
    for (tick, secs) in [("1", 60.0), ("0.1", 15.0)] {
        progress!("throughput: 100,000 queued, {secs} s of the scheduler at a {tick} s tick");
        let stats = format!("stats-backlog-{tick}");
        let mut s = b.scheduler(&db, tick, &stats, &[], &format!("sched-backlog-{tick}.log"));
        let before = stamps(&out).len();
        pause(secs);
        let ran = stamps(&out).len() - before;
        s.terminate(30.0);
        let stats = b.stats(&stats);
        fig(
            &format!(
                "100,000 queued, tick {tick} s: runs in {secs} s / ticks / tick p50 / p99 / max ms (goal: p99 <= 50)"
            ),
            format!(
                "{ran} / {} / {} / {} / {}",
                stats.get("ticks"),
                f2(stats.num("p50_ms")),
                f2(stats.num("p99_ms")),
                f2(stats.num("max_ms"))
            ),
        );
    }
}
