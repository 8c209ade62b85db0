//! Throughput at the defaults (issue 33): a pipeline with `max_runs` 64
//! and a short command (`/bin/sh -c 'date +%s.%N >> FILE'`), 2,000 runs
//! queued up front, then `orca scheduler` at the default tick (1 s); runs
//! a second from the scheduler's start to the last run's line, beside the
//! floor (`xargs -P 64` of the same command, measured just before) and the
//! share. Then what a scheduler costs idle (nothing queued, nothing
//! running) with wake-ups and without, and its tick with 100,000 runs
//! queued (`orca run --each`) and worked through.

use std::process::{Command, Stdio};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::ctx::{Bench, pause, wait_for};
use crate::harness::Cost;
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

/// Prints the figures.
pub fn run(b: &mut Bench) {
    heading("throughput at the defaults: 2,000 short runs, max_runs 64, tick 1 s");
    let floor_file = b.dir.path("throughput-floor");
    let script = format!("date +%s.%N >> {}", floor_file.display());
    progress!("throughput: the floor, xargs -P 64");
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

    let out = b.dir.path("throughput-runs");
    let config = format!(
        "[pipelines.t]\ncommand = [\"/bin/sh\", \"-c\", \"date +%s.%N >> {}\"]\nmax_runs = 64\n",
        out.display()
    );
    let db = b.db("orca_bench_throughput", &config);
    let mut c = b.client(&db);
    c.execute(
        "INSERT INTO orca.runs (pipeline) SELECT 't' FROM generate_series(1, $1::int)",
        &[&(RUNS as i32)],
    )
    .unwrap();
    c.batch_execute("ANALYZE orca.runs").unwrap();
    progress!("throughput: {RUNS} runs queued, the scheduler at the default tick");
    let began = epoch();
    let mut s = b.scheduler(&db, "1", "stats-throughput", &[], "sched-throughput.log");
    let all = wait_for(180.0, 0.05, || stamps(&out).len() >= RUNS);
    let last = stamps(&out).into_iter().reduce(f64::max);
    s.terminate(30.0);
    let stats = b.stats("stats-throughput");
    match last.filter(|_| all) {
        Some(last) => {
            let rate = RUNS as f64 / (last - began);
            fig(
                "runs per second, the scheduler's start to the last run's line",
                format!("{rate:.0}"),
            );
            fig(
                "floor per second (xargs -P 64 of the same command, just before)",
                format!("{floor:.0}"),
            );
            fig(
                "share of the floor (goal >= 0.8)",
                format!("{:.2}", rate / floor),
            );
        }
        None => fig(
            "runs per second, the scheduler's start to the last run's line",
            format!("n/a ({} of {RUNS} within 180 s)", stamps(&out).len()),
        ),
    }
    fig("ticks", stats.get("ticks"));
    fig("tick p99 ms", stats.get("p99_ms"));

    // Idle: nothing queued, nothing running.
    for listen in ["on", "off"] {
        progress!("throughput: idle transactions, ORCA_LISTEN={listen}");
        let mut s = b.scheduler(
            &db,
            "1",
            &format!("stats-idle-{listen}"),
            &[("ORCA_LISTEN", listen)],
            &format!("sched-idle-{listen}.log"),
        );
        pause(2.0);
        let f = Cost::of(&db).measure(10.0, None);
        s.terminate(30.0);
        fig(
            &format!(
                "idle transactions a second, ORCA_LISTEN={listen} (goal: no more with wake-ups)"
            ),
            format!("{:.2}", f.per_second),
        );
    }

    // A backlog of 100,000 queued runs, worked through while measured.
    let lines: String = (1..=100_000).map(|i| format!("{i}\n")).collect();
    let file = b.dir.write("throughput-backlog.tsv", &lines);
    let queued = db
        .orca(&["run", "t", "--each", &file])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(queued.status.success(), "orca run --each failed");
    progress!("throughput: 100,000 queued, 15 s of the scheduler");
    let mut s = b.scheduler(&db, "1", "stats-backlog", &[], "sched-backlog.log");
    let before = stamps(&out).len();
    pause(15.0);
    let ran = stamps(&out).len() - before;
    s.terminate(30.0);
    let stats = b.stats("stats-backlog");
    fig(
        "with 100,000 queued: runs in 15 s / tick p50 ms / tick p99 ms (goal: p99 <= 50)",
        format!(
            "{ran} / {} / {}",
            f2(stats.num("p50_ms")),
            f2(stats.num("p99_ms"))
        ),
    );
}
