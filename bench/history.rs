//! History soak: runs at the highest rate this box sustains (a local
//! pipeline of `["true"]`, `max_runs` 64, the scheduler ticking every
//! 0.05 s) for `ORCA_BENCH_HISTORY_MINUTES` (30), with the keep shrunk to
//! [`KEEP_SECONDS`] (`ORCA_KEEP_SECONDS`), so the leader prunes all along.
//! The rate: a [`WARM_UP`] with [`TOPPED_UP`] runs kept queued measures
//! what the box does at full speed; the soak then queues runs at
//! [`PACE`] of that, steadily (never more than [`TOPPED_UP`] waiting), so
//! that the figures that scale with the rate (live rows are the rate times
//! the keep) don't follow the load other processes put on the box. Sampled [`SAMPLES`] times: the database's
//! size, each orca table's live and dead rows (`pg_stat_user_tables`), the
//! scheduler's RSS and open descriptors (`/proc`), its tick p99 over the
//! sample's window (`ORCA_TICK_STATS` with `ORCA_TICK_STATS_WINDOW`) and
//! the runs made a second. Printed in full at the start, the middle and
//! the end, a line every 5 minutes between; then each figure's slope per
//! hour, a least-squares fit over the samples taken once the first runs
//! could be pruned (after the keep and 30 s), and whether it is flat:
//! its fitted change over an hour within 10 % of its mean (or of 1 MiB,
//! 100 rows, 1 descriptor, 1 ms, whichever is larger, for figures near 0);
//! the verdict holds when none grows (one settling down is said as
//! shrinking), the runs' pipes (as many as runs running) printed, not judged.

use crate::ctx::{Bench, pause};
use crate::harness::Proc;
use crate::out::{fig, heading};
use std::collections::BTreeMap;
use std::time::Instant;

/// The keep: runs ended this many seconds ago are pruned.
const KEEP_SECONDS: f64 = 120.0;
/// Queued runs kept in the queue during the warm-up; the most ever queued.
const TOPPED_UP: i64 = 500;
/// The warm-up at full speed, seconds.
const WARM_UP: f64 = 60.0;
/// The soak's rate, a share of the warm-up's.
const PACE: f64 = 0.7;
/// Samples over the soak.
const SAMPLES: usize = 30;

/// One sample: when (s since the start) and each figure by name.
struct Sample {
    t: f64,
    figures: BTreeMap<String, f64>,
}

/// The least change an hour that counts for figure `name`: 1 MiB, 1
/// descriptor or 1 ms, else 100 rows.
fn floor_of(name: &str) -> f64 {
    let small = ["MiB", "descriptors", " ms"];
    if small.iter().any(|u| name.contains(u)) {
        1.0
    } else {
        100.0
    }
}

/// The least-squares slope of `ys` over `xs` (per unit of x).
pub fn slope(xs: &[f64], ys: &[f64]) -> Option<f64> {
    let n = xs.len() as f64;
    if xs.len() < 2 {
        return None;
    }
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let sxx: f64 = xs.iter().map(|x| (x - mx).powi(2)).sum();
    let sxy: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// The kernel's figure `key` (in kB) of `/proc/PID/status`, in MiB.
fn rss_mib(pid: i32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Open descriptors of `pid`: pipes (its runs' output, each open while
/// its run runs) and the others.
fn descriptors(pid: i32) -> Option<(f64, f64)> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    let (mut pipes, mut others) = (0.0, 0.0);
    for e in dir.flatten() {
        let pipe =
            std::fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy().starts_with("pipe:"));
        if pipe {
            pipes += 1.0;
        } else {
            others += 1.0;
        }
    }
    Some((pipes, others))
}

fn take(b: &Bench, c: &mut postgres::Client, s: &Proc, stats: &str, t0: Instant) -> Sample {
    let mut figures = BTreeMap::new();
    let size: i64 = c
        .query_one("SELECT pg_database_size(current_database())", &[])
        .map_or(0, |r| r.get(0));
    figures.insert("database MiB".to_string(), size as f64 / 1_048_576.0);
    if let Ok(rows) = c.query(
        "SELECT relname::text, n_live_tup, n_dead_tup FROM pg_stat_user_tables
         WHERE schemaname = 'orca' ORDER BY relname",
        &[],
    ) {
        for r in rows {
            let (name, live, dead): (String, i64, i64) = (r.get(0), r.get(1), r.get(2));
            figures.insert(format!("{name} live rows"), live as f64);
            figures.insert(format!("{name} dead rows"), dead as f64);
        }
    }
    let made: i64 = c
        .query_one("SELECT last_value FROM orca.runs_id_seq", &[])
        .map_or(0, |r| r.get(0));
    figures.insert("runs made".to_string(), made as f64);
    if let Some(v) = rss_mib(s.pid()) {
        figures.insert("scheduler RSS MiB".to_string(), v);
    }
    if let Some((pipes, others)) = descriptors(s.pid()) {
        figures.insert("scheduler descriptors, pipes".to_string(), pipes);
        figures.insert("scheduler descriptors, others".to_string(), others);
    }
    if let Some(v) = b.stats(stats).num("p99_ms") {
        figures.insert("tick p99 ms".to_string(), v);
    }
    Sample {
        t: t0.elapsed().as_secs_f64(),
        figures,
    }
}

fn print_full(what: &str, s: &Sample, rate: Option<f64>) {
    fig(&format!("{what}: at s"), format!("{:.0}", s.t));
    for (k, v) in &s.figures {
        if k != "runs made" {
            fig(&format!("{what}: {k}"), format!("{v:.2}"));
        }
    }
    if let Some(r) = rate {
        fig(&format!("{what}: runs made per second"), format!("{r:.1}"));
    }
}

fn rate(a: &Sample, b: &Sample) -> Option<f64> {
    let (x, y) = (a.figures.get("runs made")?, b.figures.get("runs made")?);
    (b.t > a.t).then(|| (y - x) / (b.t - a.t))
}

/// Runs the soak and prints its figures and slopes.
pub fn run(b: &mut Bench) {
    let minutes = b.knobs.history_min;
    let length = minutes * 60.0;
    let every = (length / SAMPLES as f64).max(5.0);
    progress!("history soak: {minutes} min, keep {KEEP_SECONDS} s, a sample every {every:.0} s");
    let db = b.db(
        "orca_bench_history",
        "[pipelines.h]\ncommand = [\"true\"]\nmax_runs = 64\n",
    );
    let mut c = b.client(&db);
    // Queues up to `n` runs, never more than TOPPED_UP waiting: how many.
    let top_up = |c: &mut postgres::Client, n: i64| {
        c.execute(
            "INSERT INTO orca.runs (pipeline)
             SELECT 'h' FROM generate_series(1, least($2::bigint, $1::bigint -
                 (SELECT count(*) FROM orca.runs WHERE pipeline = 'h' AND state = 'queued')))",
            &[&TOPPED_UP, &n],
        )
    };
    top_up(&mut c, TOPPED_UP).unwrap();
    let window = format!("{every}");
    let keep = format!("{KEEP_SECONDS}");
    let mut s = b.scheduler(
        &db,
        "0.05",
        "stats-history",
        &[
            ("ORCA_KEEP_SECONDS", &keep),
            ("ORCA_TICK_STATS_WINDOW", &window),
        ],
        "sched-history.log",
    );
    let made = |c: &mut postgres::Client| -> f64 {
        c.query_one("SELECT last_value FROM orca.runs_id_seq", &[])
            .map_or(0.0, |r| r.get::<_, i64>(0) as f64)
    };
    let (w0, m0) = (Instant::now(), made(&mut c));
    while w0.elapsed().as_secs_f64() < WARM_UP {
        if let Err(e) = top_up(&mut c, TOPPED_UP) {
            progress!("topping up the queue: {e}");
        }
        pause(0.2);
    }
    let full = (made(&mut c) - m0 - TOPPED_UP as f64) / w0.elapsed().as_secs_f64();
    let pace = (full * PACE).max(1.0);
    progress!("warm-up: {full:.0} runs a second at full speed; the soak queues {pace:.0} a second");
    let t0 = Instant::now();
    let mut fed = 0i64;
    let mut samples: Vec<Sample> = Vec::new();
    let mut next = 0.0;
    let mut printed_middle = false;
    let mut last_line = 0.0;
    while t0.elapsed().as_secs_f64() < length + 0.5 {
        if s.child.try_wait().unwrap().is_some() {
            progress!("the scheduler exited early; its log:\n{}", s.tail(20));
            break;
        }
        let due = (pace * t0.elapsed().as_secs_f64()) as i64 - fed;
        match top_up(&mut c, due.max(0)) {
            Ok(n) => fed += n as i64,
            Err(e) => progress!("queueing: {e}"),
        }
        if t0.elapsed().as_secs_f64() >= next {
            let sample = take(b, &mut c, &s, "stats-history", t0);
            let r = samples.last().and_then(|p| rate(p, &sample));
            if samples.is_empty() {
                heading(&format!(
                    "history: runs of ['true'], keep {KEEP_SECONDS} s, {minutes} min"
                ));
                fig(
                    "full speed in the warm-up, runs per second",
                    format!("{full:.1}"),
                );
                fig("runs queued per second in the soak", format!("{pace:.1}"));
                print_full("start", &sample, r);
            } else if !printed_middle && sample.t >= length / 2.0 {
                printed_middle = true;
                print_full("middle", &sample, r);
            } else if sample.t - last_line >= 300.0 {
                last_line = sample.t;
                let g = |k: &str| sample.figures.get(k).copied().unwrap_or(f64::NAN);
                fig(
                    &format!("at {:.0} s", sample.t),
                    format!(
                        "database {:.1} MiB, runs {:.0} live {:.0} dead, events {:.0} live, RSS {:.1} MiB, {:.0} descriptors not pipes, tick p99 {:.1} ms, {:.1} runs/s",
                        g("database MiB"),
                        g("runs live rows"),
                        g("runs dead rows"),
                        g("events live rows"),
                        g("scheduler RSS MiB"),
                        g("scheduler descriptors, others"),
                        g("tick p99 ms"),
                        r.unwrap_or(f64::NAN)
                    ),
                );
            }
            samples.push(sample);
            next += every;
        }
        pause(0.2);
    }
    if let Some(last) = samples.last() {
        let r = samples
            .len()
            .checked_sub(2)
            .and_then(|i| rate(&samples[i], last));
        print_full("end", last, r);
    }
    let pruned = s.output().matches("pruned history").count();
    fig("prune passes that deleted something", pruned);
    s.terminate(30.0);
    // Slopes over the samples once pruning could have begun.
    let settled = KEEP_SECONDS + 30.0;
    let after: Vec<&Sample> = samples.iter().filter(|s| s.t >= settled).collect();
    heading(&format!(
        "history: slopes per hour over the {} samples after {settled:.0} s (flat: within 10 % of the mean an hour)",
        after.len()
    ));
    let names: Vec<String> = after
        .first()
        .map(|s| s.figures.keys().cloned().collect())
        .unwrap_or_default();
    let mut flat_all = true;
    // The runs' pipes are as many as runs running at the sample's instant
    // (1 to 6 here): printed, not judged.
    let judged = |n: &str| n != "runs made" && n != "scheduler descriptors, pipes";
    for name in names.iter().filter(|n| *n != "runs made") {
        let (xs, ys): (Vec<f64>, Vec<f64>) = after
            .iter()
            .filter_map(|s| s.figures.get(name).map(|v| (s.t / 3600.0, *v)))
            .unzip();
        let Some(per_hour) = slope(&xs, &ys) else {
            fig(&format!("{name} slope per hour"), "n/a");
            continue;
        };
        let mean = ys.iter().sum::<f64>() / ys.len() as f64;
        let flat = per_hour.abs() <= (mean.abs() * 0.1).max(floor_of(name));
        // What is bounded is what doesn't grow: a figure settling down
        // (the warm-up's dead rows vacuumed) is said, and not held against it.
        if judged(name) {
            flat_all &= flat || per_hour < 0.0;
        }
        fig(
            &format!("{name} slope per hour"),
            format!(
                "{per_hour:+.2} (mean {mean:.2}): {}",
                if !judged(name) {
                    "not judged (runs running at the instant)"
                } else if flat {
                    "flat"
                } else if per_hour > 0.0 {
                    "GROWS"
                } else {
                    "shrinks"
                }
            ),
        );
    }
    fig(
        "every judged figure flat or shrinking (none grows)",
        if after.len() >= 2 {
            flat_all.to_string()
        } else {
            "n/a (too short)".into()
        },
    );
}
