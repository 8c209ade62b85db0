//! Tick cost: the scheduler ticking every 0.1 s for `ORCA_BENCH_TICK_SECONDS`
//! against 10,000 queued runs (4 running) beside 10,000 and beside
//! `ORCA_BENCH_FINISHED` finished ones; its own figures from
//! `ORCA_TICK_STATS`.

use crate::ctx::{Bench, QUEUED, SMALL_FINISHED, TickRun, pause};
use crate::harness::{TestDb, peak_rss_kib};
use crate::out::{count_label, f2, fig, heading, or_na};
use std::time::{Duration, Instant};

/// Runs the scheduler against `db` for the measure: 4 runs of `busy`
/// running, the rest queued.
fn measure(b: &Bench, db: &TestDb, tag: &str) -> TickRun {
    let measure = b.knobs.tick_s;
    progress!("tick measurement on {tag} finished runs: {measure}s");
    let stats = format!("stats-{tag}");
    let mut s = b.scheduler(db, "0.1", &stats, &[], &format!("sched-{tag}.log"));
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(measure);
    while Instant::now() < end {
        if s.child.try_wait().unwrap().is_some() {
            progress!("the scheduler exited early; its log:\n{}", s.tail(20));
            break;
        }
        pause(
            end.saturating_duration_since(Instant::now())
                .as_secs_f64()
                .min(0.5),
        );
    }
    let rss_mib = peak_rss_kib(s.pid()).map(|k| k as f64 / 1024.0);
    let mut c = b.client(db);
    let mut count = |state: &str| -> Option<i64> {
        c.query_one("SELECT count(*) FROM orca.runs WHERE state = $1", &[&state])
            .ok()
            .map(|r| r.get(0))
    };
    let running = count("running");
    let queued = count("queued");
    let exit = s.terminate(30.0);
    let stats = b.stats(&stats);
    if stats.is_empty() {
        progress!(
            "no ORCA_TICK_STATS line from the scheduler on {tag} (exit {exit}); its log:\n{}",
            s.tail(20)
        );
    }
    TickRun {
        stats,
        rss_mib,
        running,
        queued,
        exit,
    }
}

/// Measures on both databases and prints the figures side by side.
pub fn run(b: &mut Bench) {
    b.small();
    b.big();
    let small = measure(b, b.small.as_ref().unwrap(), "small");
    let big = measure(b, b.big.as_ref().unwrap(), "big");
    let (sl, bl) = (
        count_label(SMALL_FINISHED.into()),
        count_label(b.knobs.finished.into()),
    );
    heading(&format!(
        "tick cost: {QUEUED} queued, 4 running, tick 0.1 s for {} s",
        b.knobs.tick_s
    ));
    let show = |label: &str, goal: &str, f: &dyn Fn(&TickRun) -> String| {
        let goal = if goal.is_empty() {
            String::new()
        } else {
            format!(" ({goal})")
        };
        fig(&format!("{label}, {sl} finished{goal}"), f(&small));
        fig(&format!("{label}, {bl} finished{goal}"), f(&big));
    };
    show("ticks", "", &|t| t.stats.get("ticks"));
    show("tick p50 ms", "", &|t| t.stats.get("p50_ms"));
    show("tick p99 ms", "goal <= 50", &|t| t.stats.get("p99_ms"));
    show("tick max ms", "", &|t| t.stats.get("max_ms"));
    show("statements per tick", "", &|t| {
        t.stats.get("statements_per_tick")
    });
    show("runs running at stop", "", &|t| or_na(t.running));
    show("runs queued at stop", "", &|t| or_na(t.queued));
    show("scheduler exit code", "", &|t| t.exit.to_string());
    if let (Some(s), Some(l)) = (small.stats.num("p50_ms"), big.stats.num("p50_ms")) {
        fig(
            &format!("tick p50 ratio {bl}/{sl} finished"),
            if s > 0.0 {
                f2(Some(l / s))
            } else {
                "n/a".into()
            },
        );
    }
    b.tick_small = Some(small);
    b.tick_big = Some(big);
}
