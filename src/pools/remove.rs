//! A pass's removals: those it begins (a machine lost or never booted,
//! found at the pass, where silence may be judged; an idle or a retired
//! pool's machine is the removals thread's alone, [`crate::pools::mark`],
//! so one removal is decided in one place), those it finishes (every
//! machine marked ending, whoever marked it: revoked, deleted, its row
//! ended), and a pool's strays.
//!
//! Invariant: removal is credentials revoked, machine deleted, row ended
//! (with its runs queued again), in that order; a step that fails is redone
//! on the next pass, since the row stays live (ending) until the last step.

use crate::config::Pool;
use crate::db::{Fault, sql};
use crate::lead::{DutyError, Term};
use crate::machines::fleet::{self, AtProvider, Failed, Fleet};
use crate::machines::logins::{self, Machine};
use crate::pools::decide::{self, Removal};
use crate::pools::event::event;
use crate::pools::mark;
use crate::pools::say::{say_removed, say_removing};

/// How long after making an EC2 machine its absence from DescribeInstances
/// may be only the listing lagging (s): a machine not listed sooner is not
/// taken for ended.
const EC2_LISTS_WITHIN: f64 = 60.0;

/// A pool's removals as begun in a pass's first part, for its step.
#[derive(Default)]
pub(super) struct Shrunk<'a> {
    /// Its machines that stay (for now).
    pub live: Vec<&'a Machine>,
    /// Runs waiting beyond their room.
    pub demand: i64,
    /// Machines marked ending, with why: to be deleted.
    pub ending: Vec<(&'a Machine, String)>,
    /// Machines to remove that took a run meanwhile, couldn't be marked,
    /// or are the removals thread's to mark: they stay (for now).
    pub kept: usize,
    /// Why a machine's removal couldn't begin, if one couldn't.
    pub problem: Option<String>,
}

/// Whether a pass begins removal `r` itself: a machine lost or never
/// booted (silence judged), or one already ending (taken up again); not an
/// idle or a retired pool's machine, which the removals thread begins
/// ([`mark::begins`]).
pub fn pass_begins(r: &Removal) -> bool {
    !mark::begins(r)
}

/// Begins the removals `shrink` decided for pool `p`'s machines that a
/// pass begins ([`pass_begins`]), on the lead (`term`): each marked ending
/// for its why; one the removals thread could not begin (`unbegun`) said
/// in the pool's status. What the pool's step finishes.
pub(super) fn begin<'a>(
    term: &mut Term,
    p: &Pool,
    shrink: decide::Shrink<'a>,
    unbegun: &mark::Unbegun,
) -> Result<Shrunk<'a>, DutyError> {
    let mut shrunk = Shrunk {
        live: shrink.live,
        demand: shrink.demand,
        ..Default::default()
    };
    for (m, removal) in shrink.remove {
        if !pass_begins(&removal) {
            // The removals thread's: it marks it (it may have by now),
            // and a later pass finishes it. One it could not mark is
            // said in the pool's status, as the pass said its own.
            if let Some(why) = unbegun.why(m.id) {
                shrunk.problem = Some(why);
            }
            shrunk.kept += 1;
            continue;
        }
        let why = removal.why();
        // One marked on an earlier pass, or by the removals thread, is
        // not marked again: its login holding its row can't keep its
        // removal from being finished.
        let marked = if m.ending {
            Ok(logins::Mark::Marked)
        } else {
            term.run(|c| logins::mark_ending(c, sql::MACHINE_ENDING, m.id, None, &why, None))
        };
        // Held: lost or never booted, it goes whatever it does (marking
        // it would have revoked it all the same): taken from its login.
        let marked = match marked {
            Ok(logins::Mark::Held) => take(term, m, &why),
            other => other,
        };
        match marked {
            Ok(logins::Mark::Marked) => {}
            Ok(logins::Mark::Held | logins::Mark::Not) => {
                // Its row is held (a claim under way, or its login), or
                // it is gone: kept for now.
                log::info!("pool {}: machine {} is busy: kept", p.name, m.name);
                shrunk.kept += 1;
                continue;
            }
            Err(DutyError::Db(e @ (Fault::Sql(_) | Fault::Data(_) | Fault::Other(_)))) => {
                log::error!("pool {}: machine {}: {e}", p.name, m.name);
                shrunk.problem = Some(e.to_string());
                shrunk.kept += 1;
                continue;
            }
            Err(down) => return Err(down),
        }
        if removal == Removal::Resumed {
            log::debug!("{}", say_removing(&p.name, &m.name, &why));
        } else {
            log::info!("{}", say_removing(&p.name, &m.name, &why));
        }
        shrunk.ending.push((m, why));
    }
    Ok(shrunk)
}

/// Deletes pool `p`'s strays: the provider's machines with its and this
/// stack's labels that no row of `machines` holds; and removes at once
/// the rows whose machine its provider no longer lists before their
/// worker was seen ([`decide::ended_unseen`]). Err
/// ([`Failed::Provider`]): the provider couldn't list them.
pub(super) fn strays(
    fleet: &mut Fleet,
    term: &mut Term,
    p: &Pool,
    machines: &[&Machine],
) -> Result<(), Failed> {
    let stack = fleet.stack(term)?;
    let (kind, region) = (&p.machines.provider, p.machines.region.as_deref());
    let found = fleet
        .listed(kind, region, &p.name, &stack)
        .map_err(Failed::Provider)?;
    // Rows whose machine is gone before their worker was seen: ended
    // while booting (its login refused, its boot failed).
    let grace = match p.machines.provider {
        crate::config::Provider::Local => 0.0,
        // DescribeInstances may not list an instance for a while after
        // RunInstances made it.
        crate::config::Provider::Ec2 => EC2_LISTS_WITHIN,
    };
    let gone = decide::ended_unseen(machines, |name| found.iter().any(|f| f.name == name), grace);
    for m in gone {
        let why = Removal::EndedUnseen.why();
        let marked =
            term.run(|c| logins::mark_ending(c, sql::MACHINE_ENDING, m.id, None, &why, None))?;
        if marked != logins::Mark::Marked {
            continue;
        }
        log::warn!("{}", say_removing(&p.name, &m.name, &why));
        match finish_removal(fleet, term, p, m, &why) {
            Ok(()) => {}
            // Marked ending: the next pass takes it up again.
            Err(DutyError::Db(e @ (Fault::Sql(_) | Fault::Data(_) | Fault::Other(_)))) => {
                log::error!("pool {}: machine {}: {e}", p.name, m.name);
            }
            Err(down) => return Err(down.into()),
        }
    }
    let held = |name: &str| machines.iter().any(|m| m.name == name);
    for (s, deleted) in fleet.delete_strays(kind, region, found, held) {
        log::warn!(
            "deleting stray machine {} ({}) of pool {}: no live row holds it",
            s.name,
            s.id,
            p.name
        );
        if let Err(e) = deleted {
            log::error!("stray {}: can't delete it: {e}", s.name);
            continue;
        }
        let why = format!(
            "{} ({}) of pool {}: no live row held it",
            s.name, s.id, p.name
        );
        event(term, "stray deleted", &why)?;
    }
    Ok(())
}

/// Machine `m`'s removal (for `why`: lost, never booted) skipped for its
/// held row: taken from its login ([`logins::take_from_login`]).
fn take(term: &mut Term, m: &Machine, why: &str) -> Result<logins::Mark, DutyError> {
    let taken = term.run(|c| logins::take_from_login(c, m.id, &m.name, why, None))?;
    Ok(taken.unwrap_or(logins::Mark::Not))
}

/// Finishes removing machine `m` of pool `p` (marked ending for `why`):
/// credentials revoked, machine deleted, row ended and its runs queued
/// again, role dropped. A step that fails is taken up again on the next
/// pass (the row stays ending).
pub(super) fn finish_removal(
    fleet: &mut Fleet,
    term: &mut Term,
    p: &Pool,
    m: &Machine,
    why: &str,
) -> Result<(), DutyError> {
    // Where it was made: the pool's region may have changed since.
    let at = AtProvider {
        kind: &p.machines.provider,
        region: m.region.as_deref().or(p.machines.region.as_deref()),
        id: m.provider_id.as_deref(),
        name: &m.name,
    };
    match fleet.end(term, &m.role, &at) {
        Ok(()) => {}
        Err(Failed::Db(e)) => return Err(e),
        Err(Failed::Provider(e)) => {
            return Err(Fault::Other(format!("{}: can't delete it: {e}", m.name)).into());
        }
    }
    let requeued = term.run(|c| c.query(sql::MACHINE_END, &[&m.id, &why]))?;
    log::info!("{}", say_removed(&p.name, &m.name, requeued.len()));
    // A role that can't be dropped now is an orphan: dropped on a later pass.
    fleet::drop_login(term, &m.role);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_begins_only_removals_the_removals_thread_does_not() {
        assert!(pass_begins(&Removal::Resumed));
        assert!(pass_begins(&Removal::NeverBooted { boot: 900.0 }));
        assert!(pass_begins(&Removal::Silent { silent: 400.0 }));
        assert!(pass_begins(&Removal::EndedUnseen));
        assert!(!pass_begins(&Removal::Idle {
            idle: 30.0,
            idle_seconds: 20.0
        }));
        assert!(!pass_begins(&Removal::Retired { pool: "p".into() }));
    }
}
