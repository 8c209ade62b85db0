//! Queue → start of a local run at the default tick (1 s), with wake-ups
//! (`ORCA_LISTEN` on, the default) and without (issue 30): runs queued one
//! at a time, each once the one before has started, at a random offset in
//! the tick, by an `INSERT` over an open connection (what `orca run` sends,
//! without its process's start); the delay is the run's `started_at` less
//! its `queued_at`, both the database's clock.

use crate::ctx::{Bench, check_interrupt, pause, wait_for};
use crate::out::{f2, fig, heading, quantile};

/// Runs measured with wake-ups, and without (each waits up to a tick).
const RUNS_ON: usize = 200;
const RUNS_OFF: usize = 20;

/// Measures both and prints them beside the goals.
pub fn run(b: &mut Bench) {
    let db = b.db(
        "orca_bench_latency",
        "[pipelines.l]\ncommand = [\"true\"]\nmax_runs = 64\n",
    );
    heading("queue to start, a local run, default tick (1 s)");
    for (listen, n) in [("on", RUNS_ON), ("off", RUNS_OFF)] {
        progress!("queue to start: {n} runs, ORCA_LISTEN={listen}");
        let mut s = b.scheduler(
            &db,
            "1",
            &format!("stats-latency-{listen}"),
            &[("ORCA_LISTEN", listen)],
            &format!("sched-latency-{listen}.log"),
        );
        let mut c = b.client(&db);
        let queue = |c: &mut postgres::Client| -> i64 {
            c.query_one(
                "INSERT INTO orca.runs (pipeline) VALUES ('l') RETURNING id",
                &[],
            )
            .unwrap()
            .get(0)
        };
        let delay = |c: &mut postgres::Client, id: i64| -> Option<f64> {
            c.query_one(
                "SELECT extract(epoch FROM started_at - queued_at)::float8 FROM orca.runs WHERE id = $1",
                &[&id],
            )
            .unwrap()
            .get(0)
        };
        // Its first tick has run (and it listens) once a run has started.
        let first = queue(&mut c);
        assert!(
            wait_for(60.0, 0.01, || delay(&mut c, first).is_some()),
            "the scheduler started nothing; its log:\n{}",
            s.tail(20)
        );
        pause(0.5);
        let mut ms = Vec::with_capacity(n);
        let mut seed = std::process::id() as u64 | 1;
        for _ in 0..n {
            check_interrupt();
            // xorshift: an offset of 0-300 ms, so the runs fall anywhere in
            // the tick.
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            pause((seed % 300) as f64 / 1000.0);
            let id = queue(&mut c);
            let mut d = None;
            if !wait_for(10.0, 0.002, || {
                d = delay(&mut c, id);
                d.is_some()
            }) {
                progress!("run {id} did not start within 10 s");
                continue;
            }
            ms.push(d.unwrap() * 1000.0);
        }
        s.terminate(30.0);
        ms.sort_by(f64::total_cmp);
        let goal = if listen == "on" {
            " (goal: p50 <= 20 ms, p99 <= 100 ms)"
        } else {
            " (the tick alone)"
        };
        fig(
            &format!("queue to start ms, ORCA_LISTEN={listen}, {n} runs: p50 / p99 / max{goal}"),
            format!(
                "{} / {} / {}",
                f2(quantile(&ms, 0.5)),
                f2(quantile(&ms, 0.99)),
                f2(ms.iter().copied().reduce(f64::max))
            ),
        );
    }
}
