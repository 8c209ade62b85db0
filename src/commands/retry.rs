//! Acting on failures: `orca retry RUN` (a new run of an ended run, with its
//! arguments) and `orca cancel --pipeline P --queued` (every queued run of
//! a pipeline at once). Each is one statement: its runs and their events
//! land together or not at all.

use super::{connect, pg};
use crate::cli::DbOpts;
use crate::db::sql;
use crate::exit::{Outcome, bad, no};
use crate::plural::count;
use crate::runs::{self, RunState};

/// What `orca retry` did, from the statement's answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Retried {
    /// Queued as this run; whether its pipeline is paused (it waits).
    Queued(i64, bool),
    /// No such run.
    Unknown,
    /// The run is still queued or running (in this state).
    NotEnded(RunState),
    /// The run was retried already (it has a `rerun` event).
    Again,
    /// Its pipeline is retired (gone from orca.toml).
    Retired(String),
}

/// What `orca retry`'s statement answered for a run (none: no such run),
/// as a decision (refused for none of the other reasons: its pipeline is
/// retired).
pub fn retried(row: Option<Answer>, pipeline: &str) -> Retried {
    match row {
        None => Retried::Unknown,
        Some(Answer {
            id: Some(id),
            paused,
            ..
        }) => Retried::Queued(id, paused),
        Some(a) if a.state.ended().is_none() => Retried::NotEnded(a.state),
        Some(a) if a.rerun => Retried::Again,
        Some(_) => Retried::Retired(pipeline.to_string()),
    }
}

/// `orca retry`'s statement's answer for a run that exists.
#[derive(Debug, Clone, Copy)]
pub struct Answer {
    /// The new run's id (None: refused).
    pub id: Option<i64>,
    /// The old run's state.
    pub state: RunState,
    /// Whether the old run was retried already.
    pub rerun: bool,
    /// Whether its pipeline is paused.
    pub paused: bool,
}

/// `orca retry RUN`: queues a new run of RUN's pipeline with its arguments
/// and fill flag; prints the new id. Refused: a run not ended or retried
/// already (exit 1), an unknown run or a retired pipeline (exit 2). The
/// run's row is locked first, so retries of one run at once queue one.
pub fn retry(run: i64, opts: &DbOpts) -> Outcome {
    let mut client = connect(opts)?;
    let who = runs::whoami();
    let mut tx = client.transaction().map_err(pg)?;
    tx.query_opt(sql::RUN_RETRY_LOCK, &[&run]).map_err(pg)?;
    let row = tx.query_opt(sql::RUN_RETRY, &[&run, &who]).map_err(pg)?;
    tx.commit().map_err(pg)?;
    let pipeline: String = row.as_ref().map_or(String::new(), |r| r.get("pipeline"));
    let answer = row.map(|r| Answer {
        id: r.get("id"),
        state: r.get("state"),
        rerun: r.get("rerun"),
        paused: r.get("paused"),
    });
    match retried(answer, &pipeline) {
        Retried::Queued(id, paused) => {
            println!("{id}");
            if paused {
                eprintln!(
                    "orca: {}",
                    crate::waits::Waiting::Paused(pipeline.clone()).said(id)
                );
            }
            Ok(())
        }
        Retried::Unknown => Err(bad(format!("unknown run: {run}"))),
        Retried::NotEnded(state) => Err(no(format!(
            "run {run} is {state}: only an ended run is retried (orca cancel {run} first, \
             or wait for it)"
        ))),
        Retried::Again => Err(no(format!(
            "run {run} was already retried (orca events --run {run} names its retry; \
             retry that one)"
        ))),
        Retried::Retired(p) => Err(bad(format!(
            "run {run}'s pipeline {p} is retired (no longer in orca.toml)"
        ))),
    }
}

/// `orca cancel --pipeline P --queued`: every queued run of P cancelled,
/// one event each, in one statement; prints how many. Unknown pipeline:
/// exit 2.
pub fn cancel_queued(pipeline: &str, opts: &DbOpts) -> Outcome {
    let mut client = connect(opts)?;
    let why = format!("orca cancel --queued by {}", runs::whoami());
    let row = client
        .query_one(sql::RUNS_CANCEL_QUEUED, &[&pipeline, &why])
        .map_err(pg)?;
    if !row.get::<_, bool>("known") {
        return Err(bad(format!(
            "unknown pipeline: {}",
            crate::printable::line(pipeline)
        )));
    }
    let n: i64 = row.get("cancelled");
    println!("cancelled {} of {pipeline}", count(n, "queued run"));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_ended_run_of_a_live_pipeline_not_retried_before_is_retried() {
        let a = |id, state, rerun, _retired: bool, paused| {
            Some(Answer {
                id,
                state,
                rerun,
                paused,
            })
        };
        assert_eq!(retried(None, ""), Retried::Unknown);
        assert_eq!(
            retried(a(Some(13), RunState::Failed, false, false, true), "p"),
            Retried::Queued(13, true)
        );
        for state in [RunState::Queued, RunState::Running] {
            assert_eq!(
                retried(a(None, state, false, false, false), "p"),
                Retried::NotEnded(state)
            );
            // Not ended says so first, even of a retired pipeline.
            assert_eq!(
                retried(a(None, state, false, true, false), "p"),
                Retried::NotEnded(state)
            );
        }
        assert_eq!(
            retried(a(None, RunState::Failed, true, false, false), "p"),
            Retried::Again
        );
        assert_eq!(
            retried(a(None, RunState::Failed, false, true, false), "p"),
            Retried::Retired("p".into())
        );
    }
}
