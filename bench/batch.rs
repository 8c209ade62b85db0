//! `orca run P --each FILE` (issue 33, "queueing many at once"): 100,000
//! runs queued by one command, three times in a row into one database (so
//! the second and third land beside 100,000 and 200,000 queued), and what
//! one look of `--wait` (`sql/runs_each_going.sql`) costs with a batch of
//! 100,000 queued.

use crate::ctx::Bench;
use crate::out::{fig, heading, since};
use std::process::Stdio;
use std::time::Instant;

/// Runs in one batch: the most `--each` takes.
const N: i64 = 100_000;

/// Queues the batches and times them.
pub fn run(b: &mut Bench) {
    let db = b.db("orca_bench_batch", "[pipelines.p]\ncommand = \"true\"\n");
    let lines: String = (1..=N).map(|i| format!("{i}\tsome-argument\n")).collect();
    let file = b.dir.write("batch.tsv", &lines);
    heading("queueing many at once: orca run P --each FILE");
    let mut took = Vec::new();
    let mut last = (0i64, 0i64);
    for _ in 0..3 {
        let t0 = Instant::now();
        let out = db
            .orca(&["run", "p", "--each", &file])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        took.push(since(t0));
        assert!(
            out.status.success(),
            "orca run --each: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let (a, z) = text.trim().split_once(' ').expect("first and last");
        last = (a.parse().unwrap(), z.parse().unwrap());
    }
    let queued: i64 = db.one("SELECT count(*) FROM orca.runs WHERE state = 'queued'");
    assert_eq!(queued, 3 * N, "every batch queued whole");
    fig(
        "100k runs queued by one orca run --each, 3 in a row (goal <= 2 s each)",
        format!("{} s", took.join(" s, ")),
    );
    // One look of `--wait` at the last batch, all of it still queued.
    let mut c = b.client(&db);
    let look = include_str!("../sql/runs_each_going.sql");
    let none: Vec<i64> = Vec::new();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t0 = Instant::now();
        let going: i64 = c
            .query_one(look, &[&"p", &last.0, &last.1, &none])
            .unwrap()
            .get(0);
        best = best.min(t0.elapsed().as_secs_f64());
        assert_eq!(going, N);
    }
    fig(
        "one look of --wait at 100k queued runs (best of 5; every 3 s at that size)",
        format!("{:.1} ms", best * 1000.0),
    );
}
