//! The pool scaler's decisions (seed 003, `orca.pool_scale`), pure: each
//! takes plain data the scaler read (a pool's row as [`PoolView`], its
//! machines, [`PoolTiming`], a provider's answers) and returns what to do;
//! [`crate::pools`] reads, calls them and acts. None of them reads a
//! clock, a database or a provider, so each is unit-tested below.
//!
//! * [`shrink`]: which machines go and why ([`Removal`]), and the demand
//!   left once the remaining machines' room is taken off.
//! * [`grow`]: whether to attempt a machine now, else the pool's status
//!   saying why not, and what becomes of the walk ([`Decided`]).
//! * [`TypeWalk`]: the type walk within an attempt: a type that doesn't fit
//!   is skipped, a type no location has is kept for its `wait` and then the
//!   next is tried (the last is kept), a machine made starts it over.
//!
//! The location walk and strays, which EC2 runs share, are
//! [`crate::machines::walk`]'s.

use crate::config::{Pool, PoolType};
use crate::machines::logins::Machine;
use crate::settings::PoolTiming;

/// The status prefix while the try interval is waited out.
pub const WAITING_OUT: &str = "waiting out the try interval";

/// The status of a retired pool (never kept once it is back in the file).
pub const RETIRED: &str = "retired: removing its machines once idle";

/// A pool as one pass sees it (a row of `sql/pools_view.sql`).
#[derive(Clone, Debug)]
pub struct PoolView {
    /// Its spec, as stored.
    pub pool: Pool,
    /// Gone from orca.toml (kept while it has live machines).
    pub retired: bool,
    /// The type the walk is on, as stored.
    pub walk_type: usize,
    /// Seconds since the walk started on its type (`None`: not started).
    pub walk_for: Option<f64>,
    /// Seconds since the last attempt to make a machine.
    pub tried_ago: Option<f64>,
    /// Its status, as the last pass left it.
    pub status: String,
    /// Startable runs queued long enough, before workers' room.
    pub waiting: i64,
    /// The demand the last pass wrote.
    pub demand: i32,
}

/// What becomes of the walk's start (`orca.pools.walk_since`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalkSince {
    /// Unchanged.
    Keep,
    /// The walk started on its type now.
    Now,
    /// The walk starts again from the first type (no start).
    Clear,
}

impl WalkSince {
    /// Its word in `sql/pool_status.sql`.
    pub fn as_sql(self) -> &'static str {
        match self {
            WalkSince::Keep => "keep",
            WalkSince::Now => "now",
            WalkSince::Clear => "clear",
        }
    }
}

/// What a pass decided for a pool's row.
#[derive(Clone, Debug, PartialEq)]
pub struct Decided {
    /// Runs waiting beyond the room of the pool's workers.
    pub demand: i64,
    /// What the pass (or the last attempt) came to.
    pub status: String,
    /// The type the walk is on.
    pub walk_type: usize,
    /// What becomes of the walk's start.
    pub walk_since: WalkSince,
    /// Whether an attempt to make a machine was made now.
    pub tried: bool,
}

impl Decided {
    /// Whether the pool's row is to be written: something differs from
    /// what the last pass left in `v`, or an attempt was made.
    pub fn changes(&self, v: &PoolView) -> bool {
        self.demand != v.demand as i64
            || self.status != v.status
            || self.walk_type != v.walk_type
            || self.walk_since != WalkSince::Keep
            || self.tried
    }
}

/// Why a machine is removed.
#[derive(Clone, Debug, PartialEq)]
pub enum Removal {
    /// Its removal began on an earlier pass and is taken up again.
    Resumed,
    /// Its worker never showed up within `ORCA_POOL_BOOT_SECONDS` (`boot`).
    NeverBooted {
        /// The boot limit (s).
        boot: f64,
    },
    /// Its machine is gone (its provider lists it no more) and its worker
    /// was never seen: it ended while booting (its worker's login refused,
    /// the boot script failed), found on the pass after.
    EndedUnseen,
    /// Its worker went silent for `silent` seconds, at least
    /// `ORCA_POOL_LOST_SECONDS`.
    Silent {
        /// Seconds since it was last heard from.
        silent: f64,
    },
    /// Its pool is gone from orca.toml, and it is idle.
    Retired {
        /// The pool.
        pool: String,
    },
    /// It has run nothing for `idle` seconds, at least its pool's
    /// `idle_seconds`, and the pool has no demand.
    Idle {
        /// Seconds it has run nothing.
        idle: f64,
        /// Its pool's `idle_seconds`.
        idle_seconds: f64,
    },
}

impl Removal {
    /// The why its row is ended with, and the log says.
    pub fn why(&self) -> String {
        match self {
            Removal::Resumed => "its removal is taken up again".into(),
            Removal::NeverBooted { boot } => {
                format!("its worker never showed up within {boot}s")
            }
            Removal::EndedUnseen => "it ended before its worker was seen (its login refused? \
                 the worker's last lines on the machine's console say why)"
                .into(),
            Removal::Silent { silent } => format!("its worker went silent for {silent:.0}s"),
            Removal::Retired { pool } => format!("pool {pool} is no longer in orca.toml"),
            Removal::Idle { idle, idle_seconds } => {
                format!("idle for {idle:.0} s with no demand (idle_seconds {idle_seconds})")
            }
        }
    }

    /// Whether it goes only if it is still idle (took no run since it was
    /// read). Otherwise it goes busy or not: ending its row queues its
    /// running runs again (`sql/machine_end.sql`).
    pub fn if_idle(&self) -> bool {
        matches!(self, Removal::Retired { .. } | Removal::Idle { .. })
    }
}

/// Of a pool's `machines`, those that ended while booting: not ending,
/// their worker never seen, made at least `grace` seconds ago (a provider
/// whose listing lags its makes, EC2's, is given time to list one), and no
/// longer among what the provider lists (`listed` says which it does).
/// They are removed at once ([`Removal::EndedUnseen`]), not after the boot
/// limit.
pub fn ended_unseen<'a>(
    machines: &[&'a Machine],
    listed: impl Fn(&str) -> bool,
    grace: f64,
) -> Vec<&'a Machine> {
    machines
        .iter()
        .copied()
        .filter(|m| !m.ending && !m.seen && m.age >= grace && !listed(&m.name))
        .collect()
}

/// Whether a provider's refusal `why` of a pool's attempt to make a machine
/// is to be recorded as an event: it differs from the one `said` for the
/// pool's last attempt (`None`: that attempt came to something else), so
/// a refusal repeated attempt after attempt is one event, and each change
/// of it another.
pub fn refusal_is_news(said: Option<&str>, why: &str) -> bool {
    said != Some(why)
}

/// What [`shrink`] decided for a pool's machines.
#[derive(Debug)]
pub struct Shrink<'a> {
    /// Machines to remove, in order, and why.
    pub remove: Vec<(&'a Machine, Removal)>,
    /// Machines kept.
    pub live: Vec<&'a Machine>,
    /// Runs waiting beyond the room of the machines not lost (0 for a
    /// retired pool).
    pub demand: i64,
}

/// Which of pool `v`'s `machines` go, and the demand. First the lost: one
/// being removed already, one whose worker never showed up within
/// `t.boot` or went silent for `t.lost` (only with `judge_silence`: just
/// after taking the lead, beats may not have landed yet). The demand is
/// what waits beyond the room of the rest. Then, as long as they are still
/// idle: a retired pool's idle machines, and with no demand a seen machine
/// that has run nothing for the pool's `idle_seconds`.
pub fn shrink<'a>(
    v: &PoolView,
    machines: &[&'a Machine],
    t: &PoolTiming,
    judge_silence: bool,
) -> Shrink<'a> {
    let p = &v.pool;
    let mut live = Vec::new();
    let mut remove = Vec::new();
    for &m in machines {
        if m.ending {
            remove.push((m, Removal::Resumed));
        } else if judge_silence && !m.seen && m.age >= t.boot {
            remove.push((m, Removal::NeverBooted { boot: t.boot }));
        } else if judge_silence && m.seen && m.silent >= t.lost {
            remove.push((m, Removal::Silent { silent: m.silent }));
        } else {
            live.push(m);
        }
    }
    let demand = if v.retired {
        0
    } else {
        crate::pools::demand::demand(v.waiting, &live)
    };
    live.retain(|&m| {
        let why = if v.retired && m.running == 0 {
            Some(Removal::Retired {
                pool: p.name.clone(),
            })
        } else if !v.retired && demand == 0 && m.seen && m.running == 0 && m.idle >= p.idle_seconds
        {
            Some(Removal::Idle {
                idle: m.idle,
                idle_seconds: p.idle_seconds,
            })
        } else {
            None
        };
        match why {
            Some(why) => {
                remove.push((m, why));
                false
            }
            None => true,
        }
    });
    Shrink {
        remove,
        live,
        demand,
    }
}

/// In how many seconds the first of pool `v`'s `machines` will have run
/// nothing for its `idle_seconds`, if it runs nothing from now on (one
/// running, booting or just made included: its `busy_at` is its last beat,
/// claim or making): when the removals thread looks again, so that an idle
/// machine's removal begins as it comes due rather than up to a pass
/// later. One past its `idle_seconds` already is left out: this look
/// removed it, or it is kept (demand, a run, no beat yet), and looking
/// again at once would change nothing. A machine made after this look comes
/// due no sooner than `idle_seconds` after it: so that too is the latest
/// answer, and a machine the look did not see is seen before it is due.
/// `None`: a retired pool (its machines go as soon as they run nothing).
pub fn idle_due(v: &PoolView, machines: &[&Machine]) -> Option<f64> {
    if v.retired {
        return None;
    }
    machines
        .iter()
        .filter(|m| !m.ending && m.idle < v.pool.idle_seconds)
        .map(|m| v.pool.idle_seconds - m.idle)
        .fold(v.pool.idle_seconds, f64::min)
        .into()
}

/// A declared pool's status when it has no demand, its last being `last`:
/// what the last attempt came to is kept; waiting out the try interval, a
/// retired pool's status (from before it was put back) or nothing become
/// "no demand".
pub fn status_without_demand(last: &str) -> String {
    if last.is_empty() || last.starts_with(WAITING_OUT) || last == RETIRED {
        "no demand".into()
    } else {
        last.to_string()
    }
}

/// What [`grow`] decided.
#[derive(Debug, PartialEq)]
pub enum Grow {
    /// No attempt now: the row as decided (its status says why).
    Done(Decided),
    /// Attempt to make a machine (the walk's [`TypeWalk`] decides which
    /// type); the status is the attempt's to say.
    Attempt(Decided),
}

/// Whether pool `v` attempts a machine now, once its removals and strays
/// are done: `demand` as [`shrink`] left it, `trouble` what went wrong
/// removing machines or listing strays, `live` the machines kept and
/// `standing` those still there (kept, or not removed after all). A retired
/// pool makes none; with no demand none is made and the walk starts over;
/// with trouble, a machine booting, `max_machines` standing or the last
/// attempt within `t.try_every`, none is made now.
pub fn grow(
    v: &PoolView,
    demand: i64,
    trouble: Option<String>,
    live: &[&Machine],
    standing: usize,
    t: &PoolTiming,
) -> Grow {
    let p = &v.pool;
    let mut d = Decided {
        demand,
        status: String::new(),
        walk_type: v.walk_type.min(p.types.len().saturating_sub(1)),
        walk_since: WalkSince::Keep,
        tried: false,
    };
    if v.retired {
        d.status = trouble.unwrap_or_else(|| RETIRED.into());
        return Grow::Done(d);
    }
    if demand == 0 {
        if v.walk_type != 0 || v.walk_for.is_some() {
            d.walk_type = 0;
            d.walk_since = WalkSince::Clear;
        }
        d.status = trouble.unwrap_or_else(|| status_without_demand(&v.status));
        return Grow::Done(d);
    }
    if let Some(s) = trouble {
        d.status = s;
        return Grow::Done(d);
    }
    if let Some(b) = live.iter().find(|m| !m.seen) {
        d.status = format!("waiting for {} to boot", b.name);
        return Grow::Done(d);
    }
    if standing >= p.max_machines as usize {
        d.status = format!("at max_machines ({})", p.max_machines);
        return Grow::Done(d);
    }
    if let Some(ago) = v.tried_ago
        && ago < t.try_every
    {
        let last = v
            .status
            .split_once("; last attempt: ")
            .map_or(v.status.as_str(), |(_, l)| l);
        // (No countdown in it: the status stays the same, and so does
        // the time `orca pools` says it has been so.)
        d.status = format!("{WAITING_OUT}; last attempt: {last}");
        return Grow::Done(d);
    }
    d.tried = true;
    Grow::Attempt(d)
}

/// What the walk does after an attempt found no location with room for
/// its type.
#[derive(Debug, PartialEq)]
pub enum Walk<'a> {
    /// The last type: it is tried again for as long as there is demand.
    Again,
    /// Kept: its `wait` has not passed yet.
    Keep,
    /// Its `wait` has passed: on to this type.
    Next(&'a str),
}

/// The type walk within one attempt: the type it is on, what becomes of
/// its start, and how long it has been on it.
#[derive(Clone, Debug, PartialEq)]
pub struct TypeWalk {
    /// The type it is on (an index into the pool's `types`).
    pub ty: usize,
    /// What becomes of its start.
    pub since: WalkSince,
    /// Seconds on its type so far (`None`: not started on it).
    pub waited: Option<f64>,
}

impl TypeWalk {
    /// The walk as pool `v`'s row left it (a type index past the pool's
    /// types, which shrank, is its last type, not started on).
    pub fn begin(v: &PoolView) -> TypeWalk {
        let ty = v.walk_type.min(v.pool.types.len().saturating_sub(1));
        TypeWalk {
            ty,
            since: WalkSince::Keep,
            waited: if ty == v.walk_type { v.walk_for } else { None },
        }
    }

    /// The type it is on doesn't fit (the image's architectures): on to
    /// the next of `types` types, started now. False when it was the last:
    /// the walk starts over from the first and this attempt makes nothing.
    pub fn skip(&mut self, types: usize) -> bool {
        if self.ty + 1 >= types {
            self.ty = 0;
            self.since = WalkSince::Clear;
            return false;
        }
        self.ty += 1;
        self.since = WalkSince::Now;
        self.waited = Some(0.0);
        true
    }

    /// Its type is tried: the walk starts on it now if it had not.
    pub fn tried(&mut self) {
        if self.waited.is_none() {
            self.since = WalkSince::Now;
            self.waited = Some(0.0);
        }
    }

    /// No location had its type (one of `types`): the last type is tried
    /// again; another is kept until its `wait` has passed, then the walk
    /// moves to the next, started now.
    pub fn no_capacity<'a>(&mut self, types: &'a [PoolType]) -> Walk<'a> {
        let waited = self.waited.unwrap_or(0.0);
        if self.ty + 1 >= types.len() {
            Walk::Again
        } else if waited >= types[self.ty].wait {
            self.ty += 1;
            self.since = WalkSince::Now;
            Walk::Next(&types[self.ty].name)
        } else {
            Walk::Keep
        }
    }

    /// A machine was made: the walk starts over from the first type.
    pub fn made(&mut self) {
        self.ty = 0;
        self.since = WalkSince::Clear;
    }
}

/// The status (and event) for type `ty` found in no location (`full`:
/// each location's answer), tried for `waited` seconds, saying what the
/// walk does next.
pub fn say_no_capacity(ty: &PoolType, waited: f64, walk: &Walk, full: &[String]) -> String {
    let say = format!(
        "no capacity for type {} in any location ({})",
        ty.name,
        full.join("; ")
    );
    match walk {
        Walk::Again => format!("{say}; it is the last type: trying it again"),
        Walk::Next(to) => format!(
            "{say}; tried it for {waited:.0}s of its wait {}s: next, type {to}",
            ty.wait
        ),
        Walk::Keep => format!(
            "{say}; keeping it for {:.0}s more of its wait",
            (ty.wait - waited).ceil()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MachineSettings;

    fn timing() -> PoolTiming {
        PoolTiming {
            scale: 15.0,
            grow_after: 20.0,
            try_every: 60.0,
            boot: 900.0,
            lost: 300.0,
            image: 600.0,
        }
    }

    fn ty(name: &str, wait: f64) -> PoolType {
        PoolType {
            name: name.into(),
            wait,
        }
    }

    fn pool(types: &[(&str, f64)]) -> PoolView {
        PoolView {
            pool: Pool {
                name: "builders".into(),
                types: types.iter().map(|(n, w)| ty(n, *w)).collect(),
                max_machines: 3,
                idle_seconds: 120.0,
                slots: 1,
                image: None,
                machines: MachineSettings::default(),
            },
            retired: false,
            walk_type: 0,
            walk_for: None,
            tried_ago: None,
            status: String::new(),
            waiting: 0,
            demand: 0,
        }
    }

    /// A seen, idle-for-nothing machine with one slot.
    fn machine(id: i64) -> Machine {
        Machine {
            id,
            pool: "builders".into(),
            name: format!("orca-builders-{id}"),
            type_: "small".into(),
            location: "rack-a".into(),
            role: format!("orca_m_s_{id}"),
            provider_id: None,
            slots: 1,
            seen: true,
            silent: 0.0,
            idle: 0.0,
            running: 0,
            age: 1000.0,
            busy_at: chrono::Utc::now(),
            ending: false,
            region: None,
        }
    }

    fn removed(s: &Shrink) -> Vec<(i64, Removal)> {
        s.remove.iter().map(|(m, r)| (m.id, r.clone())).collect()
    }

    #[test]
    fn a_machine_idle_beyond_idle_seconds_with_no_demand_is_removed_while_still_idle() {
        let v = pool(&[("small", 0.0)]);
        let (idle, fresh) = (
            Machine {
                idle: 121.0,
                ..machine(1)
            },
            Machine {
                idle: 119.0,
                ..machine(2)
            },
        );
        let s = shrink(&v, &[&idle, &fresh], &timing(), true);
        let why = Removal::Idle {
            idle: 121.0,
            idle_seconds: 120.0,
        };
        assert_eq!(removed(&s), [(1, why.clone())]);
        assert!(why.if_idle());
        assert_eq!(
            why.why(),
            "idle for 121 s with no demand (idle_seconds 120)"
        );
        assert_eq!(s.live.iter().map(|m| m.id).collect::<Vec<_>>(), [2]);
        assert_eq!(s.demand, 0);
    }

    #[test]
    fn the_next_idle_removal_is_due_when_the_first_machine_reaches_idle_seconds() {
        let v = pool(&[("small", 0.0)]);
        let at = |idle: f64| Machine { idle, ..machine(1) };
        let (a, b) = (at(100.0), at(30.0));
        assert_eq!(idle_due(&v, &[&a, &b]), Some(20.0));
        // One running now (beaten a second ago) may come due once its run
        // ends: as soon as idle_seconds after its last beat.
        let busy = Machine {
            running: 1,
            ..at(1.0)
        };
        assert_eq!(idle_due(&v, &[&busy]), Some(119.0));
        // Past idle_seconds (removed now, or kept) or being removed: as a
        // machine made after the look, idle_seconds; so with none.
        let past = at(150.0);
        let ending = Machine {
            ending: true,
            ..at(100.0)
        };
        assert_eq!(idle_due(&v, &[&past, &ending]), Some(120.0));
        assert_eq!(idle_due(&v, &[]), Some(120.0));
        // A retired pool's machines go as soon as they run nothing.
        let retired = PoolView {
            retired: true,
            ..pool(&[("small", 0.0)])
        };
        assert_eq!(idle_due(&retired, &[&a]), None);
    }

    #[test]
    fn no_machine_is_removed_for_idleness_while_there_is_demand() {
        let v = PoolView {
            waiting: 3,
            ..pool(&[("small", 0.0)])
        };
        let idle = Machine {
            idle: 1000.0,
            ..machine(1)
        };
        let s = shrink(&v, &[&idle], &timing(), true);
        assert!(s.remove.is_empty());
        // Its room is taken off the demand.
        assert_eq!(s.demand, 2);
    }

    #[test]
    fn a_busy_or_booting_machine_is_not_removed_for_idleness() {
        let v = pool(&[("small", 0.0)]);
        let busy = Machine {
            idle: 1000.0,
            running: 1,
            ..machine(1)
        };
        let booting = Machine {
            idle: 1000.0,
            seen: false,
            age: 10.0,
            ..machine(2)
        };
        let s = shrink(&v, &[&busy, &booting], &timing(), true);
        assert!(s.remove.is_empty());
    }

    #[test]
    fn a_worker_not_seen_within_the_boot_limit_is_removed_busy_or_not() {
        let v = pool(&[("small", 0.0)]);
        let late = Machine {
            seen: false,
            age: 900.0,
            ..machine(1)
        };
        let booting = Machine {
            seen: false,
            age: 899.0,
            ..machine(2)
        };
        let s = shrink(&v, &[&late, &booting], &timing(), true);
        let why = Removal::NeverBooted { boot: 900.0 };
        assert_eq!(removed(&s), [(1, why.clone())]);
        assert!(!why.if_idle());
        assert_eq!(why.why(), "its worker never showed up within 900s");
    }

    #[test]
    fn a_worker_silent_beyond_the_lost_limit_is_removed_and_its_runs_queued_again() {
        let v = PoolView {
            waiting: 1,
            ..pool(&[("small", 0.0)])
        };
        let lost = Machine {
            silent: 301.4,
            running: 1,
            ..machine(1)
        };
        let s = shrink(&v, &[&lost], &timing(), true);
        let why = Removal::Silent { silent: 301.4 };
        assert_eq!(removed(&s), [(1, why.clone())]);
        // Busy as it is: ending its row queues its runs again.
        assert!(!why.if_idle());
        assert_eq!(why.why(), "its worker went silent for 301s");
        // A lost machine's room is no room: its run is demand again.
        assert_eq!(s.demand, 1);
    }

    #[test]
    fn silence_is_not_judged_just_after_taking_the_lead() {
        let v = pool(&[("small", 0.0)]);
        let late = Machine {
            seen: false,
            age: 10_000.0,
            ..machine(1)
        };
        let lost = Machine {
            silent: 10_000.0,
            running: 1,
            ..machine(2)
        };
        let s = shrink(&v, &[&late, &lost], &timing(), false);
        assert!(s.remove.is_empty());
    }

    #[test]
    fn a_removal_begun_before_is_taken_up_again_first() {
        let v = pool(&[("small", 0.0)]);
        let (ending, idle) = (
            Machine {
                ending: true,
                running: 1,
                ..machine(1)
            },
            Machine {
                idle: 500.0,
                ..machine(2)
            },
        );
        let s = shrink(&v, &[&idle, &ending], &timing(), false);
        let got = removed(&s);
        assert_eq!(got[0], (1, Removal::Resumed));
        assert_eq!(got[1].0, 2);
        assert!(!Removal::Resumed.if_idle());
    }

    #[test]
    fn a_retired_pools_idle_machines_are_removed_and_its_busy_ones_kept() {
        let v = PoolView {
            retired: true,
            waiting: 5,
            ..pool(&[("small", 0.0)])
        };
        let (idle, busy) = (
            machine(1),
            Machine {
                running: 1,
                ..machine(2)
            },
        );
        let s = shrink(&v, &[&idle, &busy], &timing(), true);
        let why = Removal::Retired {
            pool: "builders".into(),
        };
        assert_eq!(removed(&s), [(1, why.clone())]);
        assert!(why.if_idle());
        assert_eq!(why.why(), "pool builders is no longer in orca.toml");
        assert_eq!(s.demand, 0);
        match grow(&v, s.demand, None, &s.live, 1, &timing()) {
            Grow::Done(d) => assert_eq!(d.status, RETIRED),
            g => panic!("{g:?}"),
        }
    }

    #[test]
    fn without_demand_a_retired_status_is_not_kept() {
        assert_eq!(status_without_demand(RETIRED), "no demand");
        assert_eq!(status_without_demand(""), "no demand");
        assert_eq!(
            status_without_demand(&format!("{WAITING_OUT}; last attempt: made x")),
            "no demand"
        );
        assert_eq!(status_without_demand("made orca-p-1"), "made orca-p-1");
    }

    #[test]
    fn demand_beyond_the_room_attempts_a_machine() {
        let v = pool(&[("small", 0.0)]);
        let g = grow(&v, 1, None, &[], 0, &timing());
        assert_eq!(
            g,
            Grow::Attempt(Decided {
                demand: 1,
                status: String::new(),
                walk_type: 0,
                walk_since: WalkSince::Keep,
                tried: true,
            })
        );
    }

    #[test]
    fn without_demand_nothing_is_made_and_the_walk_starts_over() {
        let v = PoolView {
            walk_type: 1,
            walk_for: Some(30.0),
            status: "made orca-builders-1 (type small, location rack-a)".into(),
            ..pool(&[("big", 60.0), ("small", 0.0)])
        };
        let Grow::Done(d) = grow(&v, 0, None, &[], 0, &timing()) else {
            panic!("attempted without demand")
        };
        assert_eq!((d.walk_type, d.walk_since), (0, WalkSince::Clear));
        assert_eq!(d.status, v.status);
        assert!(d.changes(&v));
        // A walk at its start is left alone.
        let Grow::Done(d) = grow(&pool(&[("small", 0.0)]), 0, None, &[], 0, &timing()) else {
            panic!("attempted without demand")
        };
        assert_eq!(
            (d.walk_since, d.status.as_str()),
            (WalkSince::Keep, "no demand")
        );
    }

    #[test]
    fn a_machine_gone_before_its_worker_was_seen_is_ended_unseen() {
        let booting = Machine {
            seen: false,
            age: 5.0,
            ..machine(1)
        };
        let seen = Machine {
            seen: true,
            age: 5.0,
            ..machine(2)
        };
        let young = Machine {
            seen: false,
            age: 1.0,
            ..machine(3)
        };
        let all = [&booting, &seen, &young];
        let none_listed = |_: &str| false;
        let names = |v: Vec<&Machine>| v.iter().map(|m| m.name.clone()).collect::<Vec<_>>();
        assert_eq!(
            names(ended_unseen(&all, none_listed, 0.0)),
            ["orca-builders-1", "orca-builders-3"]
        );
        assert_eq!(
            names(ended_unseen(&all, none_listed, 2.0)),
            ["orca-builders-1"]
        );
        assert!(ended_unseen(&all, |_| true, 0.0).is_empty());
        let ending = Machine {
            ending: true,
            ..booting.clone()
        };
        assert!(ended_unseen(&[&ending], none_listed, 0.0).is_empty());
    }

    #[test]
    fn a_refusal_is_news_once_per_change() {
        assert!(refusal_is_news(None, "UnauthorizedOperation: no"));
        assert!(!refusal_is_news(
            Some("UnauthorizedOperation: no"),
            "UnauthorizedOperation: no"
        ));
        assert!(refusal_is_news(
            Some("UnauthorizedOperation: no"),
            "InvalidAMIID.NotFound: gone"
        ));
    }

    #[test]
    fn one_machine_boots_at_a_time() {
        let v = pool(&[("small", 0.0)]);
        let booting = Machine {
            seen: false,
            age: 5.0,
            ..machine(4)
        };
        let Grow::Done(d) = grow(&v, 2, None, &[&booting], 1, &timing()) else {
            panic!("attempted while one boots")
        };
        assert_eq!(d.status, "waiting for orca-builders-4 to boot");
    }

    #[test]
    fn no_machine_is_made_beyond_max_machines() {
        let v = pool(&[("small", 0.0)]);
        let (a, b, c) = (machine(1), machine(2), machine(3));
        let Grow::Done(d) = grow(&v, 2, None, &[&a, &b, &c], 3, &timing()) else {
            panic!("attempted at max_machines")
        };
        assert_eq!(d.status, "at max_machines (3)");
        // A machine that turned out busy still stands.
        assert!(matches!(
            grow(&v, 2, None, &[&a, &b], 3, &timing()),
            Grow::Done(_)
        ));
        assert!(matches!(
            grow(&v, 2, None, &[&a, &b], 2, &timing()),
            Grow::Attempt(_)
        ));
    }

    #[test]
    fn attempts_are_at_most_one_a_try_interval() {
        let v = PoolView {
            tried_ago: Some(59.0),
            status: "no capacity for type small in any location (rack-a: full)".into(),
            ..pool(&[("small", 0.0)])
        };
        let Grow::Done(d) = grow(&v, 1, None, &[], 0, &timing()) else {
            panic!("attempted within the try interval")
        };
        assert_eq!(
            d.status,
            "waiting out the try interval; last attempt: no capacity for type small in any location (rack-a: full)"
        );
        // Said again, the status stays the same.
        let again = PoolView {
            status: d.status.clone(),
            ..v.clone()
        };
        let Grow::Done(d2) = grow(&again, 1, None, &[], 0, &timing()) else {
            panic!("attempted within the try interval")
        };
        assert_eq!(d2.status, d.status);
        let later = PoolView {
            tried_ago: Some(60.0),
            ..v
        };
        assert!(matches!(
            grow(&later, 1, None, &[], 0, &timing()),
            Grow::Attempt(_)
        ));
    }

    #[test]
    fn trouble_removing_or_listing_is_the_status_and_nothing_is_made() {
        let v = pool(&[("small", 0.0)]);
        let Grow::Done(d) = grow(
            &v,
            1,
            Some("can't list its machines: x".into()),
            &[],
            0,
            &timing(),
        ) else {
            panic!("attempted with trouble")
        };
        assert_eq!(d.status, "can't list its machines: x");
    }

    #[test]
    fn an_unchanged_pass_writes_nothing() {
        let v = PoolView {
            status: "no demand".into(),
            ..pool(&[("small", 0.0)])
        };
        let Grow::Done(d) = grow(&v, 0, None, &[], 0, &timing()) else {
            panic!("attempted without demand")
        };
        assert!(!d.changes(&v));
        assert!(
            Decided {
                demand: 1,
                ..d.clone()
            }
            .changes(&v)
        );
        assert!(Decided { tried: true, ..d }.changes(&v));
    }

    #[test]
    fn a_type_no_location_has_is_kept_for_its_wait_then_the_next_is_tried() {
        let v = pool(&[("big", 60.0), ("small", 0.0)]);
        let types = &v.pool.types;
        // The first attempt starts the walk on its type.
        let mut w = TypeWalk::begin(&v);
        w.tried();
        assert_eq!((w.ty, w.since, w.waited), (0, WalkSince::Now, Some(0.0)));
        assert_eq!(w.no_capacity(types), Walk::Keep);
        assert_eq!(
            say_no_capacity(&types[0], 0.0, &Walk::Keep, &["rack-a: full".into()]),
            "no capacity for type big in any location (rack-a: full); keeping it for 60s more of its wait"
        );
        // 59 s on: kept, its start unchanged.
        let mut w = TypeWalk::begin(&PoolView {
            walk_for: Some(59.0),
            ..v.clone()
        });
        w.tried();
        assert_eq!(w.no_capacity(types), Walk::Keep);
        assert_eq!((w.ty, w.since), (0, WalkSince::Keep));
        // Its wait passed: on to the next, started now.
        let mut w = TypeWalk::begin(&PoolView {
            walk_for: Some(60.0),
            ..v.clone()
        });
        w.tried();
        assert_eq!(w.no_capacity(types), Walk::Next("small"));
        assert_eq!((w.ty, w.since), (1, WalkSince::Now));
        assert_eq!(
            say_no_capacity(
                &types[0],
                60.0,
                &Walk::Next("small"),
                &["rack-a: full".into()]
            ),
            "no capacity for type big in any location (rack-a: full); tried it for 60s of its wait 60s: next, type small"
        );
    }

    #[test]
    fn the_last_type_is_tried_again_for_as_long_as_there_is_demand() {
        let v = PoolView {
            walk_type: 1,
            walk_for: Some(1e6),
            ..pool(&[("big", 60.0), ("small", 0.0)])
        };
        let mut w = TypeWalk::begin(&v);
        w.tried();
        assert_eq!(w.no_capacity(&v.pool.types), Walk::Again);
        assert_eq!((w.ty, w.since), (1, WalkSince::Keep));
        assert_eq!(
            say_no_capacity(&v.pool.types[1], 1e6, &Walk::Again, &[]),
            "no capacity for type small in any location (); it is the last type: trying it again"
        );
    }

    #[test]
    fn a_machine_made_starts_the_walk_over() {
        let v = PoolView {
            walk_type: 1,
            walk_for: Some(5.0),
            ..pool(&[("big", 60.0), ("small", 0.0)])
        };
        let mut w = TypeWalk::begin(&v);
        w.tried();
        w.made();
        assert_eq!((w.ty, w.since), (0, WalkSince::Clear));
    }

    #[test]
    fn a_type_that_does_not_fit_is_skipped_and_the_last_starts_the_walk_over() {
        let v = PoolView {
            walk_for: Some(30.0),
            ..pool(&[("arm", 60.0), ("x86", 60.0), ("other", 0.0)])
        };
        let mut w = TypeWalk::begin(&v);
        assert!(w.skip(3));
        assert_eq!((w.ty, w.since, w.waited), (1, WalkSince::Now, Some(0.0)));
        assert!(w.skip(3));
        assert!(!w.skip(3));
        assert_eq!((w.ty, w.since), (0, WalkSince::Clear));
    }

    #[test]
    fn a_walk_past_its_pools_types_is_on_the_last_not_started() {
        // The pool lost types since the walk was stored.
        let v = PoolView {
            walk_type: 4,
            walk_for: Some(100.0),
            ..pool(&[("big", 60.0), ("small", 0.0)])
        };
        let mut w = TypeWalk::begin(&v);
        assert_eq!((w.ty, w.waited), (1, None));
        w.tried();
        assert_eq!(w.since, WalkSince::Now);
        let Grow::Attempt(d) = grow(&PoolView { waiting: 1, ..v }, 1, None, &[], 0, &timing())
        else {
            panic!("no attempt")
        };
        assert_eq!(d.walk_type, 1);
    }

    #[test]
    fn the_walk_is_stored_as_sql_says_it() {
        assert_eq!(WalkSince::Keep.as_sql(), "keep");
        assert_eq!(WalkSince::Now.as_sql(), "now");
        assert_eq!(WalkSince::Clear.as_sql(), "clear");
    }
}
