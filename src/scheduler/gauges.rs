//! The metrics the leader reads from the database: runs by pipeline and
//! state, the oldest due run's age and pools' machines by state
//! (`sql/metrics_read.sql`), and the starts, ends and retries of every run
//! whatever its placement, counted from the events past a cursor
//! (`sql/metrics_ends.sql`: settled events only, so 10 to 15 s behind).
//! Read only while `ORCA_METRICS_ADDR` is served and at most every
//! [`READ_EVERY`] seconds, so a scrape (which only renders what was stored)
//! costs the database nothing. A scheduler that doesn't lead reports no
//! gauges and counts nothing more (summed over schedulers, each end counts
//! once), and the counters of pipelines and pools no longer registered are
//! dropped.

use std::collections::HashSet;
use std::time::Instant;

use crate::db::sql;
use crate::lead::Term;
use crate::metrics::{self, Def, ENDED, MACHINES, QUEUE_OLDEST, RETRIED, RUNS, STARTED};

/// How often the leader reads them (s).
pub const READ_EVERY: f64 = 5.0;

/// When they were last read, whether a follower's are cleared, and the
/// last event counted (`None`: not counting, as a follower).
#[derive(Default)]
pub struct Gauges {
    read_at: Option<Instant>,
    cleared: bool,
    counted: Option<i64>,
}

/// One row of `sql/metrics_read.sql`: kind, name, state, value.
type Row = (String, String, String, f64);

/// Series of a gauge: label values and value.
type Values = Vec<(Vec<String>, f64)>;

/// What the rows say: the `orca_runs` series, the oldest due run's age and
/// the `orca_pool_machines` series.
pub fn split(rows: Vec<Row>) -> (Values, f64, Values) {
    let (mut runs, mut oldest, mut machines) = (Vec::new(), 0.0, Vec::new());
    for (kind, name, state, value) in rows {
        match kind.as_str() {
            "runs" => runs.push((vec![name, state], value)),
            "oldest" => oldest = value.max(0.0),
            "machines" => machines.push((vec![name, state], value)),
            _ => {}
        }
    }
    (runs, oldest, machines)
}

/// One row of `sql/metrics_ends.sql`: pipeline, kind and count (`None`s
/// when there was nothing to count).
type EndRow = (Option<String>, Option<String>, Option<f64>);

/// What the counted events add: each kind's counter, its label values and
/// how much (`started` to [`STARTED`]; `retried` to [`RETRIED`]; an end's
/// outcome to [`ENDED`]; any other kind to none).
pub fn tally(rows: Vec<EndRow>) -> Vec<(&'static Def, Vec<String>, f64)> {
    let mut adds = Vec::new();
    for row in rows {
        let (Some(pipeline), Some(kind), Some(n)) = row else {
            continue;
        };
        let def = match kind.as_str() {
            "started" => &STARTED,
            "retried" => &RETRIED,
            "succeeded" | "failed" | "timed_out" | "cancelled" | "requeued" => &ENDED,
            _ => continue,
        };
        let labels = if def.name == ENDED.name {
            vec![pipeline, kind]
        } else {
            vec![pipeline]
        };
        adds.push((def, labels, n));
    }
    adds
}

impl Gauges {
    /// Reads them when due, on the lead (`lead`); a follower's (`None`)
    /// are cleared once.
    pub fn step(&mut self, lead: Option<&mut Term>) {
        if !metrics::on() {
            return;
        }
        let Some(term) = lead else {
            if !self.cleared {
                for def in [&RUNS, &MACHINES] {
                    metrics::replace(def, Vec::new());
                }
                metrics::set(&QUEUE_OLDEST, &[], 0.0);
                self.cleared = true;
                self.read_at = None;
                self.counted = None;
            }
            return;
        };
        if self
            .read_at
            .is_some_and(|at| at.elapsed().as_secs_f64() < READ_EVERY)
        {
            return;
        }
        self.read_at = Some(Instant::now());
        let rows = match term.prepared(sql::METRICS_READ, |c, s| {
            c.query(s, &[]).map(|rows| {
                rows.iter()
                    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
                    .collect::<Vec<Row>>()
            })
        }) {
            Ok(rows) => rows,
            Err(e) => return e.complain(),
        };
        self.cleared = false;
        let (runs, oldest, machines) = split(rows);
        let pipelines: HashSet<String> = runs.iter().map(|(l, _)| l[0].clone()).collect();
        let pools: HashSet<String> = machines.iter().map(|(l, _)| l[0].clone()).collect();
        for def in [&metrics::STARTED, &metrics::ENDED, &metrics::RETRIED] {
            metrics::retain(def, |p| pipelines.contains(p));
        }
        for def in [&metrics::MAKE_ATTEMPTS, &metrics::MAKE_FAILURES] {
            metrics::retain(def, |p| pools.contains(p));
        }
        metrics::replace(&RUNS, runs);
        metrics::replace(&MACHINES, machines);
        metrics::set(&QUEUE_OLDEST, &[], oldest);
        self.count_ends(term);
    }

    /// Counts the settled events past the last one counted (the first time:
    /// only finds where to start).
    fn count_ends(&mut self, term: &mut Term) {
        let counted = self.counted;
        let (settled, rows) = match term.prepared(sql::METRICS_ENDS, |c, s| {
            c.query(s, &[&counted]).map(|rows| {
                let settled = rows.first().map(|r| r.get::<_, i64>("settled"));
                let ends: Vec<EndRow> = rows
                    .iter()
                    .map(|r| (r.get("pipeline"), r.get("kind"), r.get("n")))
                    .collect();
                (settled, ends)
            })
        }) {
            Ok(read) => read,
            Err(e) => return e.complain(),
        };
        for (def, labels, n) in tally(rows) {
            let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
            metrics::add(def, &labels, n);
        }
        self.counted = settled.or(counted);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_counted_go_to_their_counters() {
        let row = |p: &str, k: &str, n: f64| (Some(p.to_string()), Some(k.to_string()), Some(n));
        let adds = tally(vec![
            row("a", "started", 3.0),
            row("a", "succeeded", 1.0),
            row("a", "timed_out", 1.0),
            row("a", "retried", 1.0),
            row("b", "requeued", 2.0),
            row("b", "fired", 9.0),
            (None, None, None),
        ]);
        let got: Vec<(&str, Vec<String>, f64)> =
            adds.into_iter().map(|(d, l, n)| (d.name, l, n)).collect();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            got,
            vec![
                (STARTED.name, s(&["a"]), 3.0),
                (ENDED.name, s(&["a", "succeeded"]), 1.0),
                (ENDED.name, s(&["a", "timed_out"]), 1.0),
                (RETRIED.name, s(&["a"]), 1.0),
                (ENDED.name, s(&["b", "requeued"]), 2.0),
            ],
            "each kind to its counter; other kinds and an empty row to none"
        );
    }

    #[test]
    fn rows_are_split_by_kind() {
        let row = |k: &str, n: &str, s: &str, v: f64| (k.into(), n.into(), s.into(), v);
        let (runs, oldest, machines) = split(vec![
            row("runs", "a", "queued", 2.0),
            row("runs", "a", "running", 1.0),
            row("oldest", "", "", 12.5),
            row("machines", "p", "up", 3.0),
            row("what", "", "", 1.0),
        ]);
        assert_eq!(
            runs,
            vec![
                (vec!["a".to_string(), "queued".to_string()], 2.0),
                (vec!["a".to_string(), "running".to_string()], 1.0)
            ]
        );
        assert_eq!(oldest, 12.5);
        assert_eq!(
            machines,
            vec![(vec!["p".to_string(), "up".to_string()], 3.0)]
        );
        assert_eq!(
            split(vec![row("oldest", "", "", -0.5)]).1,
            0.0,
            "clock skew"
        );
    }
}
