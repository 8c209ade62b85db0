//! The pool scaler's decisions (seed 003, `orca.pool_scale`), pure: each
//! takes plain data the scaler read (a pool's row as [`PoolView`], its
//! machines, [`PoolTiming`], a provider's answers) and returns what to do;
//! [`crate::pools`] reads, calls them and acts. None of them reads a
//! clock, a database or a provider, so each is unit-tested (`decide/tests.rs`).
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
    /// Its worker heard a spot notice (`notice`: `interrupted` or
    /// `draining`) and it runs nothing: its runs were handed back or have
    /// finished, and it claims nothing more. (It goes whatever the
    /// demand: its replacement is made if runs wait.)
    Noticed {
        /// The machine row's `notice`.
        notice: String,
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
            Removal::Noticed { notice } if notice == "interrupted" => {
                "EC2 interrupts it (a spot interruption notice) and it runs nothing".into()
            }
            Removal::Noticed { .. } => {
                "it was drained (a spot rebalance recommendation) and runs nothing".into()
            }
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
/// being removed already, one that heard a spot notice and runs nothing, one whose worker never showed up within
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
        } else if let Some(notice) = m.notice.as_ref().filter(|_| m.running == 0) {
            remove.push((
                m,
                Removal::Noticed {
                    notice: notice.clone(),
                },
            ));
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
    /// Its `wait` has passed: on to this step (type and market).
    Next(&'a PoolType),
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
            Walk::Next(&types[self.ty])
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
        ty.called(),
        full.join("; ")
    );
    match walk {
        Walk::Again => format!("{say}; it is the last type: trying it again"),
        Walk::Next(to) => format!(
            "{say}; tried it for {waited:.0}s of its wait {}s: next, type {}",
            ty.wait,
            to.called()
        ),
        Walk::Keep => format!(
            "{say}; keeping it for {:.0}s more of its wait",
            (ty.wait - waited).ceil()
        ),
    }
}

#[cfg(test)]
mod tests;
