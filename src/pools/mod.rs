//! The pool autoscaler (seed 003, `orca.pool_scale`): the leading
//! scheduler's per-pool steps, every `ORCA_POOL_SCALE_SECONDS`.
//!
//! First, for every pool, the removals a pass begins are begun (marked
//! ending: the machine claims nothing more); then, per pool in turn within
//! the pass's budget (2 s: no provider call is sent after it, so a hung
//! provider holds up no other pool for longer; the pools left go first on
//! the next pass):
//! 1. **Shrink**: a machine whose worker never showed up within
//!    `ORCA_POOL_BOOT_SECONDS`, or went silent for `ORCA_POOL_LOST_SECONDS`,
//!    is removed and its runs are queued again; with no demand, a machine
//!    that has run nothing for the pool's `idle_seconds` is removed, and a
//!    retired pool's machines once idle: those the removals thread
//!    ([`mark`]) marks ending, the one place that decides them, and the pass
//!    finishes every machine marked ending (`remove`). Never a busy
//!    machine for idleness.
//! 2. **Strays**: a provider machine with the pool's and this stack's labels
//!    that no live row holds is deleted.
//! 3. **Grow**: with demand, no machine booting and fewer than
//!    `max_machines`, at most once every `ORCA_POOL_TRY_SECONDS`: the type
//!    the walk is on, in each location in turn; a type the worker image has
//!    no variant for is skipped, saying so; a type no location has is kept
//!    for its `wait`, then the next (the last is kept); after a make, or when
//!    the demand goes, the walk starts again from the first type.
//!
//! What to do is decided in [`crate::pools::decide`], pure over what this
//! module read; this module reads, asks it, and does what it says: the
//! pass here, removals in `remove`, a make in `grow` (through the
//! scheduler's one [`Fleet`], which makes, ends and finds strays for EC2
//! runs too; a pool's machine as it makes it: [`order`]), its log lines in
//! [`say`], its events in `event`; a pool's row is read into a
//! [`PoolView`] in `view` (for the removals thread, [`mark`], too). This
//! file imports its parts; none of them imports it back.
//!
//! Invariants:
//! * Every write is fenced on the leading session ([`Term`]).
//! * Removal is: credentials revoked, machine deleted, row ended (with its
//!   runs queued again), in that order; a step that fails is redone on the
//!   next pass, since the row stays live until the last step.
//! * A machine's row is written only after the provider made it; one made
//!   whose row was not written is a stray, deleted on a later pass, and its
//!   role is dropped as an orphan.

pub mod decide;
pub mod demand;
mod event;
mod grow;
pub mod interrupt;
pub mod mark;
pub mod notice;
pub mod order;
pub mod registry;
mod remove;
pub mod say;
mod view;
pub mod worker;

use std::time::Instant;

use crate::db::Fault;
use crate::db::sql;
use crate::lead::{DutyError, Term};
use crate::machines::fleet::{self, Deadline, Failed, Fleet};
use crate::machines::logins::{self, Machine};
use crate::pools::decide::{Decided, Grow, PoolView, TypeWalk};
use crate::pools::grow::Attempts;
use crate::pools::remove::Shrunk;
use crate::pools::view::view_of;
use crate::settings::PoolTiming;

/// The pools (indices into `names`) whose provider work a pass does, in
/// order: those a pass cut short `left`, if it did (and still exist), else
/// every pool.
fn pass_order(names: &[&str], left: Option<&[String]>) -> Vec<usize> {
    match left {
        Some(left) => {
            let order: Vec<usize> = left
                .iter()
                .filter_map(|l| names.iter().position(|n| n == l))
                .collect();
            if order.is_empty() {
                (0..names.len()).collect()
            } else {
                order
            }
        }
        None => (0..names.len()).collect(),
    }
}

/// The log target of each pass's breakdown (debug): `RUST_LOG` with
/// `orca::pools::pass=debug` asks for it (the bench's pools section does).
pub const PASS_LOG: &str = "orca::pools::pass";

/// Milliseconds since `at`.
fn ms(at: Instant) -> f64 {
    at.elapsed().as_secs_f64() * 1000.0
}

/// Where a pass's time went, in milliseconds: its reads (the pools, the
/// live machines), the orphan roles' look, sorting machines to pools,
/// beginning removals, and the pools' steps (provider work and status
/// writes, `writes` of them).
#[derive(Default)]
struct PassTimes {
    pools: f64,
    machines: f64,
    roles: f64,
    sort: f64,
    begin: f64,
    steps: f64,
    writes: u64,
}

impl PassTimes {
    /// The breakdown as one line of `key=value`, with the pass's `all`
    /// milliseconds and its statements.
    fn say(&self, all: f64, statements: u64) -> String {
        format!(
            "scaler pass: ms={all:.3} pools_view_ms={:.3} machines_live_ms={:.3} roles_ms={:.3} \
             sort_ms={:.3} begin_ms={:.3} steps_ms={:.3} status_writes={} statements={statements}",
            self.pools, self.machines, self.roles, self.sort, self.begin, self.steps, self.writes
        )
    }
}

/// The autoscaler's state between passes: when it last ran, what its
/// attempts to make machines keep (the worker images' architectures, read
/// again after `ORCA_POOL_IMAGE_SECONDS`; each pool's last refusal).
/// The providers are the scheduler's [`Fleet`], lent to each pass.
pub struct PoolScaler {
    timing: PoolTiming,
    last: Option<Instant>,
    /// Orphan roles that could not be dropped (said once each).
    undroppable: std::collections::HashSet<String>,
    /// What attempts to make a machine keep between passes.
    attempts: Attempts,
    /// The pools a pass that ran out of time (slow provider calls) left:
    /// the next pass, due at once, does their provider work alone.
    resume: Option<Vec<String>>,
    /// The removals the removals thread could not begin, and why.
    unbegun: mark::Unbegun,
}

impl PoolScaler {
    /// A scaler with `timing`; its first pass is due at once.
    pub fn new(timing: PoolTiming) -> PoolScaler {
        PoolScaler {
            timing,
            last: None,
            undroppable: Default::default(),
            attempts: Attempts::default(),
            resume: None,
            unbegun: mark::Unbegun::default(),
        }
    }

    /// The removals the removals thread could not begin, for it to tell
    /// ([`mark::run`]) and the pass to say in each pool's status.
    pub fn unbegun(&self) -> mark::Unbegun {
        self.unbegun.clone()
    }

    /// Its timing.
    pub fn timing(&self) -> &PoolTiming {
        &self.timing
    }

    /// Whether a pass is due now.
    pub fn due(&self) -> bool {
        // A pass cut short goes on at the next tick.
        self.resume.is_some()
            || self
                .last
                .is_none_or(|t| t.elapsed().as_secs_f64() >= self.timing.scale)
    }

    /// One pass over every pool, writing on the lead (`term`) only, its
    /// provider work through `fleet` within this tick's `deadline`. With
    /// `judge_silence` false (just after taking the lead, or after a tick
    /// that stalled: workers' beats may not have landed yet), no machine is
    /// removed as lost or never booted. Returns what it cost: milliseconds
    /// and statements.
    pub fn scale(
        &mut self,
        fleet: &mut Fleet,
        term: &mut Term,
        judge_silence: bool,
        deadline: Deadline,
    ) -> Result<(f64, u64), DutyError> {
        let (began, calls) = (Instant::now(), term.calls());
        self.last = Some(Instant::now());
        let stack = fleet.stack(term)?;
        fleet.begin_pass();
        let grow_after = self.timing.grow_after;
        let mut took = PassTimes::default();
        let at = Instant::now();
        // Prepared once a session: planned once, not each pass.
        let rows = term.prepared(sql::POOLS_VIEW, |c, s| c.query(s, &[&grow_after]))?;
        took.pools = ms(at);
        let at = Instant::now();
        let machines =
            logins::of_rows(&term.prepared(sql::POOL_MACHINES_LIVE, |c, s| c.query(s, &[]))?);
        took.machines = ms(at);
        let at = Instant::now();
        for role in term.run(|c| logins::orphaned_roles(c, &stack))? {
            // Best effort: a role that can't be dropped yet is shut out and
            // tried again on the next pass.
            let dropped = term.run(|c| fleet::revoke_and_drop(c, &role));
            match dropped {
                Ok(true) => log::debug!("dropped role {role}: no live machine holds it"),
                Ok(false) => {
                    if self.undroppable.insert(role.clone()) {
                        log::warn!(
                            "role {role} (no live machine holds it) can't be dropped yet; it can't log in"
                        );
                    }
                }
                Err(DutyError::Db(e @ (Fault::Sql(_) | Fault::Data(_) | Fault::Other(_)))) => {
                    log::error!("role {role}: {e}")
                }
                Err(down) => return Err(down),
            }
        }
        took.roles = ms(at);
        let at = Instant::now();
        // Each pool as read, with its machines.
        let mut pools: Vec<(PoolView, Vec<&Machine>)> = Vec::new();
        for row in &rows {
            let Some(view) = view_of(row) else { continue };
            let mine = machines
                .iter()
                .filter(|m| m.pool == view.pool.name)
                .collect();
            pools.push((view, mine));
        }
        took.sort = ms(at);
        let at = Instant::now();
        // 1. Every pool's removals begin: a machine marked ending claims
        // nothing more. The database's work alone, so no provider's call
        // holds up any pool's.
        let mut shrinks = Vec::with_capacity(pools.len());
        for (view, mine) in &pools {
            let shrink = decide::shrink(view, mine, &self.timing, judge_silence);
            shrinks.push(remove::begin(term, &view.pool, shrink, &self.unbegun)?);
        }
        took.begin = ms(at);
        let at = Instant::now();
        // 2. Each pool's provider work (deletes, a make, strays), in turn
        // and within the tick's deadline: no pool's step begins after its
        // soft limit, no call is sent after its hard one, so a hung
        // provider costs the tick that much at most; the pools left go
        // first on the next pass.
        fleet.until(Some(deadline));
        let names: Vec<&str> = pools.iter().map(|(v, _)| v.pool.name.as_str()).collect();
        let order = pass_order(&names, self.resume.take().as_deref());
        for (n, &i) in order.iter().enumerate() {
            if n > 0 && fleet.late() {
                let left: Vec<String> = order[n..].iter().map(|&j| names[j].to_string()).collect();
                log::info!(
                    "scaler pass out of time: {} left to the next pass",
                    crate::plural::count(left.len() as i64, "pool")
                );
                self.resume = Some(left);
                break;
            }
            let (view, mine) = &pools[i];
            let shrunk = std::mem::take(&mut shrinks[i]);
            let decided = self.step(fleet, term, view, mine, shrunk)?;
            if decided.changes(view) {
                took.writes += 1;
                let name = &view.pool.name;
                term.run(|c| {
                    c.execute(
                        sql::POOL_STATUS,
                        &[
                            name,
                            &(decided.demand as i32),
                            &decided.status,
                            &(decided.walk_type as i32),
                            &decided.walk_since.as_sql(),
                            &decided.tried,
                        ],
                    )
                })?;
            }
        }
        fleet.until(None);
        took.steps = ms(at);
        let (all, statements) = (ms(began), term.calls() - calls);
        log::debug!(target: PASS_LOG, "{}", took.say(all, statements));
        Ok((all, statements))
    }

    /// One pool's step, its removals begun (`shrunk`): they are finished,
    /// then grow, then strays.
    fn step(
        &mut self,
        fleet: &mut Fleet,
        term: &mut Term,
        v: &PoolView,
        machines: &[&Machine],
        shrunk: Shrunk,
    ) -> Result<Decided, DutyError> {
        let p = &v.pool;
        let (live, demand) = (shrunk.live, shrunk.demand);
        let mut problem = shrunk.problem;
        // Machines still there: kept, busy after all, or not removed yet;
        // not one that heard a spot notice (it claims nothing more and EC2
        // takes it soon: its replacement may be made within max_machines).
        let mut standing = live.iter().filter(|m| m.notice.is_none()).count() + shrunk.kept;
        for (m, why) in shrunk.ending {
            match remove::finish_removal(fleet, term, p, m, &why) {
                Ok(()) => {}
                Err(DutyError::Db(e @ (Fault::Sql(_) | Fault::Data(_) | Fault::Other(_)))) => {
                    problem = Some(e.to_string());
                    standing += 1;
                }
                Err(down) => return Err(down),
            }
        }
        let status = problem.map(|e| format!("can't remove a machine: {e}"));
        let mut d = match decide::grow(v, demand, status, &live, standing, &self.timing) {
            Grow::Done(d) => d,
            // The tick's time for providers is spent: the next pass tries.
            Grow::Attempt(d) if fleet.late() => Decided {
                tried: false,
                status: v.status.clone(),
                ..d
            },
            Grow::Attempt(mut d) => {
                let mut walk = TypeWalk::begin(v);
                d.status = self
                    .attempts
                    .attempt(fleet, term, v, &mut walk, &self.timing)?;
                (d.walk_type, d.walk_since) = (walk.ty, walk.since);
                d
            }
        };
        // Strays, last (a make comes first): the provider's machines with this
        // pool's and stack's labels that no live row holds. Not in a step
        // that tried a make: its machine's row is newer than what was read.
        if !d.tried && !fleet.late() {
            match remove::strays(fleet, term, p, machines) {
                Ok(()) => {}
                Err(Failed::Provider(e)) => d.status = format!("can't list its machines: {e}"),
                Err(Failed::Db(e)) => return Err(e),
            }
        }
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_cut_short_leaves_only_its_remaining_pools_to_the_next() {
        let names = ["a", "b", "c", "d"];
        assert_eq!(pass_order(&names, None), vec![0, 1, 2, 3]);
        let left = vec!["c".to_string(), "d".to_string()];
        assert_eq!(pass_order(&names, Some(&left)), vec![2, 3]);
        // A pool gone since is passed over; none left: every pool.
        let left = vec!["x".to_string(), "b".to_string()];
        assert_eq!(pass_order(&names, Some(&left)), vec![1]);
        assert_eq!(
            pass_order(&names, Some(&["x".to_string()])),
            vec![0, 1, 2, 3]
        );
    }
}
