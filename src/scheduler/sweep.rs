//! Judging silence: the sweep queues again running local runs whose
//! heartbeat went stale and that no live process supervises
//! (`sql/sweep.sql`, which decides which), and the tick says when silence
//! may be judged at all, for the sweep ([`sweep_step`]) and for machines'
//! and instances' ([`judge_silence`]): pure, unit-tested below.
//!
//! Invariants (no requeue on guesswork):
//! * Nothing is judged in the first stale limit after taking the lead: a
//!   gone process can't be told from one that shared an outage.
//! * Nothing is judged after a tick that stalled (it took over half the
//!   stale limit): others' beats may have waited as long, so the lead's
//!   clock starts again and the sweep waits one more stale limit.
//! * The runs this process supervises, and those a live scheduler lists,
//!   are never swept.

use crate::db::sql;
use crate::lead::Term;
use crate::supervise::Supervisor;

/// What the end of a leading tick does about stale runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SweepStep {
    /// The tick stalled: no sweep, and the lead counts as taken now (so
    /// none for one more stale limit).
    Stalled,
    /// The lead is younger than the stale limit (or not held): nothing yet.
    TooSoon,
    /// Sweep.
    Sweep,
}

/// The sweep's step for a tick that took `took` seconds so far, this process
/// leading for `lead_for` seconds (`None`: not leading), `stale` the stale
/// limit (s).
pub fn sweep_step(took: f64, lead_for: Option<f64>, stale: f64) -> SweepStep {
    if took > stale / 2.0 {
        SweepStep::Stalled
    } else if lead_for.is_none_or(|age| age < stale) {
        SweepStep::TooSoon
    } else {
        SweepStep::Sweep
    }
}

/// Whether machines' and instances' silence may be judged now: the lead
/// held a stale limit (`lead_for`, s) and this tick (`took` s so far) not
/// stalled; after an outage, their beats need a moment to land again.
pub fn judge_silence(took: f64, lead_for: Option<f64>, stale: f64) -> bool {
    lead_for.is_some_and(|age| age >= stale) && took <= stale / 2.0
}

/// The sweep at the end of a leading tick that took `took` seconds, on the
/// lead (`term`), leaving alone the runs `sup` supervises: see
/// [`sweep_step`].
pub(super) fn sweep(term: &mut Term, sup: &Supervisor, stale: f64, took: f64) {
    match sweep_step(took, Some(term.led_for()), stale) {
        SweepStep::Stalled => {
            log::warn!("a tick took {took:.1}s: no sweep for one stale limit");
            term.restart_clock();
        }
        SweepStep::TooSoon => {}
        SweepStep::Sweep => {
            let ours = sup.ours();
            match term.prepared(sql::SWEEP, |c, s| c.query(s, &[&stale, &ours])) {
                Ok(rows) => {
                    for r in rows {
                        let (id, state): (i64, String) = (r.get("id"), r.get("state"));
                        log::warn!(
                            "run {id}: heartbeat stale and no process supervises it: {}",
                            crate::runs::lost_outcome(&state)
                        );
                    }
                }
                Err(e) => e.complain(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_swept_in_the_first_stale_limit_of_the_lead() {
        assert_eq!(sweep_step(0.1, Some(29.9), 30.0), SweepStep::TooSoon);
        assert_eq!(sweep_step(0.1, None, 30.0), SweepStep::TooSoon);
        assert_eq!(sweep_step(0.1, Some(30.0), 30.0), SweepStep::Sweep);
        assert_eq!(sweep_step(15.0, Some(300.0), 30.0), SweepStep::Sweep);
    }

    #[test]
    fn a_stalled_tick_sweeps_nothing_and_restarts_the_clock() {
        assert_eq!(sweep_step(15.1, Some(300.0), 30.0), SweepStep::Stalled);
        // Stalled is said even in the first stale limit (the clock restarts).
        assert_eq!(sweep_step(15.1, Some(1.0), 30.0), SweepStep::Stalled);
    }

    #[test]
    fn silence_is_judged_only_by_a_lead_a_stale_limit_old_in_a_tick_not_stalled() {
        assert!(judge_silence(0.1, Some(30.0), 30.0));
        assert!(judge_silence(15.0, Some(31.0), 30.0));
        assert!(!judge_silence(0.1, Some(29.0), 30.0));
        assert!(!judge_silence(0.1, None, 30.0));
        assert!(!judge_silence(15.1, Some(300.0), 30.0));
    }
}
