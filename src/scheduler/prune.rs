//! Pruning history: the leader deletes what ended more than the keep ago
//! (`ORCA_KEEP_DAYS`, 30; `ORCA_KEEP_SECONDS` for tests), a bounded batch
//! a statement, so history stays bounded and no tick is held up by it.
//!
//! A pass, at most every [`EVERY`] (every tick while a backlog is left),
//! gives each of [`STEPS`] a statement in turn, and another to those whose
//! last came back full, until all are done or the pass's time budget
//! ([`budget`]: 5 % of a tick, 10 to 50 ms) is spent; a budget spent with
//! work left makes the next tick's pass due, beginning with the step after
//! the last one run. Each step's batch grows while its statements are
//! quick and shrinks when one is slow ([`next_batch`]). Each statement is a
//! transaction of its own; what it deletes is picked `FOR UPDATE SKIP
//! LOCKED`, so it waits on no one. The cut-off is the database's `now()`
//! less the keep.
//!
//! Invariants:
//! * Only the leader prunes, on its fenced session (deleting old history
//!   is idempotent, but one pruner is enough).
//! * A run still needed is never pruned: queued or running, an alert not
//!   yet sent, a live instance row (`sql/prune_runs.sql`).
//! * A pass that deleted something logs one line (the counts by table),
//!   and writes no event.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::db::sql;
use crate::lead::Term;

/// A table's pruning: what it is called and its statement, which takes the
/// keep in seconds (`$1`, float8) and a batch (`$2`, bigint), and returns
/// rows of (`what`, `n`): how many rows of each table it deleted. A new
/// table of history is one more line here (and a `sql/prune_*.sql`), or,
/// for rows keyed by run id, a line in `sql/prune_runs.sql`.
pub const STEPS: &[(&str, &str)] = &[
    ("runs", sql::PRUNE_RUNS),
    ("events", sql::PRUNE_EVENTS),
    ("pool machines", sql::PRUNE_MACHINES),
    ("instances", sql::PRUNE_INSTANCES),
    ("schedulers", sql::PRUNE_SCHEDULERS),
];

/// How often a pass is due when the last left no backlog.
pub const EVERY: Duration = Duration::from_secs(5);

/// The first batch of each step, and its bounds.
pub const FIRST_BATCH: i64 = 100;
/// The least batch.
pub const MIN_BATCH: i64 = 10;
/// The greatest batch (rows of the step's table a statement).
pub const MAX_BATCH: i64 = 2000;

/// The leader's pruning, between ticks.
pub struct Prune {
    /// The keep, in seconds.
    keep: f64,
    /// A pass's time budget.
    budget: Duration,
    /// When the last pass was (`None`: none yet).
    last: Option<Instant>,
    /// Whether the last pass left work (its budget spent).
    backlog: bool,
    /// The step the next pass begins with.
    next: usize,
    /// Each step's batch.
    batches: Vec<i64>,
}

/// A pass's time budget for a tick of `tick` seconds: 5 % of it, at least
/// 10 ms and at most 50 ms.
pub fn budget(tick: f64) -> Duration {
    Duration::from_secs_f64((tick * 0.05).clamp(0.010, 0.050))
}

/// Whether a pass is due: none yet, a backlog left by the last, or
/// [`EVERY`] since it.
pub fn due(since_last: Option<Duration>, backlog: bool) -> bool {
    match since_last {
        None => true,
        Some(d) => backlog || d >= EVERY,
    }
}

/// The next batch of a step whose last statement, of `batch` rows, took
/// `took` of a pass's `budget` and came back `full` (as many rows as asked:
/// more may be left): twice as many when full and under a quarter of the
/// budget, half when over half of it, else the same; within
/// [`MIN_BATCH`]..=[`MAX_BATCH`].
pub fn next_batch(batch: i64, took: Duration, budget: Duration, full: bool) -> i64 {
    let next = if took > budget / 2 {
        batch / 2
    } else if full && took < budget / 4 {
        batch * 2
    } else {
        batch
    };
    next.clamp(MIN_BATCH, MAX_BATCH)
}

impl Prune {
    /// Pruning what ended more than `keep` seconds ago, on a tick of `tick`
    /// seconds.
    pub fn new(keep: f64, tick: f64) -> Prune {
        Prune {
            keep,
            budget: budget(tick),
            last: None,
            backlog: false,
            next: 0,
            batches: vec![FIRST_BATCH; STEPS.len()],
        }
    }

    /// A pass, when due, on the lead (`term`): statements in
    /// turn within the budget, then one log line if it deleted anything.
    /// A statement that fails ends the pass (said as any tick's fault is;
    /// tried again at the next).
    pub fn step(&mut self, term: &mut Term) {
        if !due(self.last.map(|l| l.elapsed()), self.backlog) {
            return;
        }
        let began = Instant::now();
        self.last = Some(began);
        let mut counts: BTreeMap<String, i64> = BTreeMap::new();
        let mut left: Vec<bool> = vec![true; STEPS.len()];
        let mut i = self.next;
        self.backlog = false;
        while left.iter().any(|l| *l) {
            if began.elapsed() >= self.budget {
                self.backlog = true;
                self.next = i;
                break;
            }
            if !left[i] {
                i = (i + 1) % STEPS.len();
                continue;
            }
            let (name, statement) = STEPS[i];
            let batch = self.batches[i];
            let keep = self.keep;
            let t = Instant::now();
            let rows = match term.run(|c| c.query(statement, &[&keep, &batch])) {
                Ok(rows) => rows,
                Err(e) => {
                    e.complain();
                    break;
                }
            };
            let mut deleted = 0;
            for row in &rows {
                let (what, n): (String, i64) = (row.get("what"), row.get("n"));
                if what == name {
                    deleted = n;
                }
                if n > 0 {
                    *counts.entry(what).or_default() += n;
                }
            }
            let full = deleted >= batch;
            self.batches[i] = next_batch(batch, t.elapsed(), self.budget, full);
            left[i] = full;
            i = (i + 1) % STEPS.len();
        }
        if !counts.is_empty() {
            let said: Vec<String> = counts.iter().map(|(w, n)| format!("{n} {w}")).collect();
            log::info!(
                "pruned history ended over {} ago: {} ({:.0} ms{})",
                keep_shown(self.keep),
                said.join(", "),
                began.elapsed().as_secs_f64() * 1000.0,
                if self.backlog { "; more left" } else { "" }
            );
        }
    }
}

/// The keep in words: days when whole days, else seconds.
pub fn keep_shown(keep: f64) -> String {
    let days = keep / 86_400.0;
    if keep >= 86_400.0 && days.fract() == 0.0 {
        crate::plural::count(days as i64, "day")
    } else {
        format!("{keep}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_pass_is_due_at_first_on_a_backlog_and_every_five_seconds() {
        assert!(due(None, false), "the first tick leading prunes");
        assert!(!due(Some(MS * 100), false));
        assert!(due(Some(MS * 100), true), "a backlog: the next tick");
        assert!(due(Some(EVERY), false));
    }

    #[test]
    fn the_budget_is_a_share_of_the_tick_within_bounds() {
        assert_eq!(budget(1.0), MS * 50);
        assert_eq!(budget(0.5), MS * 25);
        assert_eq!(budget(0.05), MS * 10, "the tests' tick: the floor");
        assert_eq!(budget(60.0), MS * 50, "a slow tick: the ceiling");
    }

    #[test]
    fn a_batch_grows_while_quick_and_full_and_shrinks_when_slow() {
        let b = MS * 40;
        assert_eq!(next_batch(100, MS, b, true), 200, "quick and full");
        assert_eq!(next_batch(100, MS, b, false), 100, "quick, all done");
        assert_eq!(next_batch(100, MS * 15, b, true), 100, "between");
        assert_eq!(next_batch(100, MS * 30, b, true), 50, "slow");
        assert_eq!(next_batch(MAX_BATCH, MS, b, true), MAX_BATCH);
        assert_eq!(next_batch(MIN_BATCH, MS * 100, b, true), MIN_BATCH);
    }

    #[test]
    fn the_keep_is_said_in_days_when_whole() {
        assert_eq!(keep_shown(30.0 * 86_400.0), "30 days");
        assert_eq!(keep_shown(86_400.0), "1 day");
        assert_eq!(keep_shown(3.0), "3s");
        assert_eq!(keep_shown(120.0), "120s");
    }

    #[test]
    fn each_step_counts_its_own_table() {
        for (what, statement) in STEPS {
            assert!(
                statement.contains(&format!("SELECT '{what}' AS what")),
                "{what}: a row must count its own table's deletes"
            );
        }
    }
}
