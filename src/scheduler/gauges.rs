//! The metrics the leader reads from the database (`sql/metrics_read.sql`,
//! one statement): runs by pipeline and state, the oldest due run's age and
//! pools' machines by state. Read only while `ORCA_METRICS_ADDR` is served
//! and at most every [`READ_EVERY`] seconds, so a scrape (which only renders
//! what was stored) costs the database nothing. A scheduler that doesn't
//! lead reports none of them (summed over schedulers, they count once), and
//! the counters of pipelines and pools no longer registered are dropped.

use std::collections::HashSet;
use std::time::Instant;

use crate::db::{Db, sql};
use crate::metrics::{self, MACHINES, QUEUE_OLDEST, RUNS};

/// How often the leader reads them (s).
pub const READ_EVERY: f64 = 5.0;

/// When they were last read, and whether a follower's are cleared.
#[derive(Default)]
pub struct Gauges {
    read_at: Option<Instant>,
    cleared: bool,
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

impl Gauges {
    /// Reads them when due, on the leading session `lead`; a follower's
    /// (`None`) are cleared once.
    pub fn step(&mut self, db: &mut Db, lead: Option<u64>) {
        if !metrics::on() {
            return;
        }
        let Some(session) = lead else {
            if !self.cleared {
                for def in [&RUNS, &MACHINES] {
                    metrics::replace(def, Vec::new());
                }
                metrics::set(&QUEUE_OLDEST, &[], 0.0);
                self.cleared = true;
                self.read_at = None;
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
        let rows = match db.prepared_fenced(session, sql::METRICS_READ, |c, s| {
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
