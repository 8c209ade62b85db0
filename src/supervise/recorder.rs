//! Who supervises, and so what it writes with: the scheduler, a pool
//! worker or an EC2 run's head. What they write differs only in the
//! statements and in a few choices, each a method of [`Recorder`]; a
//! worker's and a head's statements go through the `orca.worker_*` and
//! `orca.instance_*` functions their credentials may execute.

use crate::db::sql;
use crate::runs::{Outcome, RunState};

/// Who supervises: the statements it writes with, and what it does
/// besides, by who it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorder {
    /// The scheduler: its own statements (ends in batches), and its
    /// "timed out" events.
    Scheduler,
    /// A pool worker: the functions its credentials may execute; its beat
    /// claims runs too and says its machine is alive.
    Worker,
    /// An EC2 run's head: the functions its instance's credentials may
    /// execute for the run it heads.
    Head,
}

/// The scheduler's statements.
pub const SCHEDULER: Recorder = Recorder::Scheduler;

/// A pool worker's statements: the functions its credentials may execute.
pub const WORKER: Recorder = Recorder::Worker;

/// An EC2 run's head's statements: the functions its instance's
/// credentials may execute for the run it heads.
pub const HEAD: Recorder = Recorder::Head;

impl Recorder {
    /// Beats attempts and appends their output, in one statement: `$1` ids,
    /// `$2` starts, `$3` pids; `$4` to `$7` the appends (ids, starts, where
    /// each begins in its attempt's output, the bytes); when it
    /// [`Recorder::claims`], `$8` how many runs to claim. Returns `(id,
    /// cancel)` for the attempts still running at their start; when it
    /// claims, `claimed` too, true on a run claimed (`id`, `start`,
    /// `pipeline`, `args`, `spec`).
    pub fn beat(self) -> &'static str {
        match self {
            Recorder::Scheduler => sql::RUNS_BEAT,
            Recorder::Worker => sql::WORKER_ROUND,
            Recorder::Head => sql::INSTANCE_HEAD_ROUND,
        }
    }

    /// Writes an attempt's end (see [`Outcome::write`]).
    pub fn finish(self) -> &'static str {
        match self {
            Recorder::Scheduler => sql::RUN_FINISH,
            Recorder::Worker => sql::WORKER_FINISH,
            Recorder::Head => sql::INSTANCE_HEAD_FINISH,
        }
    }

    /// Writes several attempts' ends in one statement, if it can (see
    /// [`crate::runs::write_all`]): the scheduler's only.
    pub fn finish_all(self) -> Option<&'static str> {
        match self {
            Recorder::Scheduler => Some(sql::RUNS_FINISH),
            Recorder::Worker | Recorder::Head => None,
        }
    }

    /// Queues a stopped attempt again (`$1`, `$2`, `$3` why, `$4` output).
    pub fn requeue(self) -> &'static str {
        match self {
            Recorder::Scheduler => sql::RUN_REQUEUE,
            Recorder::Worker => sql::WORKER_REQUEUE,
            Recorder::Head => sql::INSTANCE_HEAD_REQUEUE,
        }
    }

    /// Whether it may write a "timed out" event of its own: the
    /// scheduler's only.
    pub fn events(self) -> bool {
        self == Recorder::Scheduler
    }

    /// Whether it beats with nothing running: a worker's (its beat also
    /// says its machine is alive).
    pub fn beat_idle(self) -> bool {
        self == Recorder::Worker
    }

    /// Whether its beat claims runs too: a worker's (its main loop beats,
    /// `Supervisor::round`; the heartbeat thread only when it is late).
    pub fn claims(self) -> bool {
        self == Recorder::Worker
    }

    /// Whether its process counts the attempts it starts and ends in its
    /// own metrics: a worker's (its `/metrics`). A scheduler's don't: its
    /// leader counts every run's, whatever the placement, from the
    /// database (the scheduler's gauges step), so each end counts once.
    pub fn counts(self) -> bool {
        self == Recorder::Worker
    }

    /// Logs that `o`'s end was written, the run now in `state` (`None`: the
    /// attempt was no longer running, so nothing was), and counts it if it
    /// [`Recorder::counts`].
    pub(super) fn say_written(self, o: &Outcome, state: Option<RunState>) {
        if self.counts() {
            crate::metrics::ended(
                &o.pipeline,
                o.state.as_str(),
                o.timed_out,
                state.map(RunState::as_str),
            );
        }
        match state {
            Some(state) => log::info!(
                "run {} attempt {}: {} ({}) -> {state}",
                o.id,
                o.start,
                o.state,
                o.why
            ),
            None => log::warn!(
                "run {} attempt {}: was no longer running; outcome dropped",
                o.id,
                o.start
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_supervisor_writes_with_its_own_statements_and_choices() {
        // (beat, finish, finish_all, requeue, events, beat_idle, claims, counts)
        type Row = (
            &'static str,
            &'static str,
            Option<&'static str>,
            &'static str,
            bool,
            bool,
            bool,
            bool,
        );
        let of = |r: Recorder| -> Row {
            (
                r.beat(),
                r.finish(),
                r.finish_all(),
                r.requeue(),
                r.events(),
                r.beat_idle(),
                r.claims(),
                r.counts(),
            )
        };
        assert_eq!(
            of(SCHEDULER),
            (
                sql::RUNS_BEAT,
                sql::RUN_FINISH,
                Some(sql::RUNS_FINISH),
                sql::RUN_REQUEUE,
                true,
                false,
                false,
                false
            )
        );
        assert_eq!(
            of(WORKER),
            (
                sql::WORKER_ROUND,
                sql::WORKER_FINISH,
                None,
                sql::WORKER_REQUEUE,
                false,
                true,
                true,
                true
            )
        );
        assert_eq!(
            of(HEAD),
            (
                sql::INSTANCE_HEAD_ROUND,
                sql::INSTANCE_HEAD_FINISH,
                None,
                sql::INSTANCE_HEAD_REQUEUE,
                false,
                false,
                false,
                false
            )
        );
    }
}
