//! Runs started per second: 2,000 queued runs of `["true"]`, `max_runs`
//! 64, the scheduler ticking every 0.05 s, until all have succeeded.

use crate::ctx::{Bench, wait_for};
use crate::harness::peak_rss_kib;
use crate::out::{fig, heading, since};
use std::time::Instant;

const RUNS: i32 = 2000;

/// Times the 2,000 runs and prints the rate and the scheduler's figures.
pub fn run(b: &mut Bench) {
    progress!("runs per second: {RUNS} runs of ['true'], max_runs 64");
    let db = b.db(
        "orca_bench_rate",
        "[pipelines.t]\ncommand = [\"true\"]\nmax_runs = 64\n",
    );
    let mut c = b.client(&db);
    c.execute(
        "INSERT INTO orca.runs (pipeline) SELECT 't' FROM generate_series(1, $1::int)",
        &[&RUNS],
    )
    .unwrap();
    c.batch_execute("ANALYZE orca.runs").unwrap();
    let mut s = b.scheduler(&db, "0.05", "stats-rate", &[], "sched-rate.log");
    let t0 = Instant::now();
    let mut done = 0i64;
    let mut exited = false;
    let finished = wait_for(120.0, 0.2, || {
        done = c
            .query_one(
                "SELECT count(*) FROM orca.runs WHERE state = 'succeeded'",
                &[],
            )
            .map_or(0, |r| r.get(0));
        exited = s.child.try_wait().unwrap().is_some();
        done >= i64::from(RUNS) || exited
    });
    let took = (done >= i64::from(RUNS)).then(|| since(t0));
    if exited && took.is_none() {
        progress!("the scheduler exited early; its log:\n{}", s.tail(20));
    } else if !finished {
        progress!("deadline: {done} of {RUNS} succeeded after 120 s");
    }
    b.rate_rss_mib = peak_rss_kib(s.pid()).map(|k| k as f64 / 1024.0);
    let not_succeeded: i64 = c
        .query_one(
            "SELECT count(*) FROM orca.runs WHERE state <> 'succeeded'",
            &[],
        )
        .unwrap()
        .get(0);
    let exit = s.terminate(30.0);
    let stats = b.stats("stats-rate");
    heading(&format!(
        "runs started per second: {RUNS} runs of [\"true\"], max_runs 64, tick 0.05 s"
    ));
    match took {
        Some(took) => {
            fig(&format!("time to {RUNS} succeeded s"), &took);
            let t: f64 = took.parse().unwrap();
            fig("runs per second", format!("{:.0}", f64::from(RUNS) / t));
        }
        None => {
            fig(
                &format!("time to {RUNS} succeeded s"),
                format!("n/a ({done} succeeded before the deadline)"),
            );
            fig("runs per second", "n/a");
        }
    }
    fig("runs not succeeded", not_succeeded);
    fig("ticks", stats.get("ticks"));
    fig("tick p50 ms", stats.get("p50_ms"));
    fig("tick p99 ms", stats.get("p99_ms"));
    fig("statements per tick", stats.get("statements_per_tick"));
    fig("scheduler exit code", exit);
}
