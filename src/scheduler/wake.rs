//! Start passes between ticks (issues 30 and 33): a local run starts when
//! it is queued, and when a slot frees, not at the next tick.
//!
//! While it leads, the scheduler `LISTEN`s on its tick's session to the
//! channel runs' triggers notify (migration 26: a secret name in
//! `orca.wake`, which no machine or instance login can read), and between
//! ticks waits on that session, a [`SLICE`] at a time, instead of sleeping.
//! A notification (a run queued, or queued again), a run of its own that
//! ended (reaped between ticks), or a pass that started as many as a pass
//! may ([`crate::scheduler::start::STARTS_PER_TICK`]) makes one start pass:
//! the tick's start step on the lead, with the pipelines the last tick
//! read. Firing, sensors, sweeps, the lead's renewal and the scaler keep
//! the tick's cadence.
//!
//! Invariants:
//! * The tick stays the floor: a lost notification (a session cut, a
//!   notification sent before the `LISTEN`) delays a run to the next tick,
//!   never longer; `ORCA_LISTEN=off` is the tick alone.
//! * A pass is fenced as a tick's start is: through the lead's
//!   [`crate::lead::Term`], on the session that holds `LEAD_LOCK`; nothing
//!   here connects again (the tick's lead step does), so nothing decided
//!   after a lost session lands.
//! * Any number of notifications is one pass; at most [`DRAIN_MAX`] are
//!   taken a slice. Notifications keep coming with nothing to start
//!   ([`Gate`]: more than [`STRIKES_PER_TICK`] strikes a tick): it stops
//!   listening until the next tick, and drops what it had read, so a flood
//!   costs no more than the tick's poll, and bounded memory.
//! * It listens only while it leads, on the leading session.

use std::time::{Duration, Instant};

use crate::db::{Db, Fault, sql};
use crate::lead::Known;

/// The longest the scheduler waits on its session at a time between ticks
/// (a stop or an ended run is noticed within it).
pub const SLICE: Duration = Duration::from_millis(50);

/// The most notifications taken in one slice; more are left buffered (and
/// count as a strike: [`Gate::drained`]).
pub const DRAIN_MAX: usize = 1000;

/// The strikes a tick may have before the scheduler stops listening until
/// the next one: passes woken by notifications that started nothing, and
/// slices that took [`DRAIN_MAX`] notifications.
pub const STRIKES_PER_TICK: u32 = 2;

/// When passes between ticks are due, pure: reset every tick.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Gate {
    /// Strikes this tick (see [`STRIKES_PER_TICK`]).
    strikes: u32,
    /// A pass woken by an ended run started nothing: ends wake no more
    /// passes until one starts something (or the next tick).
    ends_idle: bool,
    /// The last pass started as many as a pass may: another is due now.
    again: bool,
}

impl Gate {
    /// A new tick: no strike, ends wake passes again.
    pub fn tick(&mut self) {
        let again = self.again;
        *self = Gate {
            again,
            ..Gate::default()
        };
    }

    /// The tick's own start step started `started` of at most `bound`.
    pub fn tick_started(&mut self, started: usize, bound: usize) {
        self.again = started >= bound;
    }

    /// Whether a pass is due now, with notifications taken (`notified`)
    /// and runs of this scheduler that ended (`ended`) since the last.
    pub fn due(&self, notified: bool, ended: bool) -> bool {
        self.again || notified || (ended && !self.ends_idle)
    }

    /// Whether the next wait must not block (a pass is due whatever
    /// arrives): another pass after a full one, or a run ended.
    pub fn now(&self, ended: bool) -> bool {
        self.again || (ended && !self.ends_idle)
    }

    /// A pass started `started` of at most `bound`; it was woken by
    /// notifications (`notified`) and by ended runs (`ended`).
    pub fn passed(&mut self, started: usize, bound: usize, notified: bool, ended: bool) {
        let again = self.again;
        self.again = started >= bound;
        if started > 0 {
            self.ends_idle = false;
            return;
        }
        if ended {
            self.ends_idle = true;
        }
        if notified && !again {
            self.strikes += 1;
        }
    }

    /// A slice took `taken` notifications (at most [`DRAIN_MAX`]).
    pub fn drained(&mut self, taken: usize) {
        if taken >= DRAIN_MAX {
            self.strikes += 1;
        }
    }

    /// Whether listening stops until the next tick (a flood).
    pub fn flooded(&self) -> bool {
        self.strikes > STRIKES_PER_TICK
    }
}

/// The scheduler's listening: on which session, its gate, whether on at all.
pub struct Wake {
    /// `ORCA_LISTEN`.
    on: bool,
    /// The session it listens on (`None`: it doesn't).
    listening: Option<u64>,
    /// The gate of passes between ticks.
    pub gate: Gate,
    /// Who leads, for the leading session's backend pid: its own
    /// notifications (runs its tick queued, and started) wake nothing.
    known: Known,
    /// A failed `LISTEN` was said (said again once one worked).
    said: bool,
}

impl Wake {
    /// Listening as `ORCA_LISTEN` says (`on`), the lead as `known` tells.
    pub fn new(on: bool, known: Known) -> Wake {
        Wake {
            on,
            listening: None,
            gate: Gate::default(),
            known,
            said: false,
        }
    }

    /// Whether it listens on session `session` now.
    pub fn listens(&self, session: u64) -> bool {
        self.listening == Some(session)
    }

    /// After each tick: listens on the leading session `leads` (`None`:
    /// this tick didn't lead, and it stops listening), and the gate begins
    /// a new tick.
    pub fn after_tick(&mut self, db: &mut Db, leads: Option<u64>) {
        self.gate.tick();
        match leads {
            Some(session) if self.on => {
                if self.listening != Some(session) {
                    self.listen(db, session);
                }
            }
            _ => self.unlisten(db),
        }
    }

    fn listen(&mut self, db: &mut Db, session: u64) {
        match db.run_fenced(session, |c| c.batch_execute(sql::WAKE_LISTEN)) {
            Ok(()) => {
                if std::mem::take(&mut self.said) {
                    log::info!("listening for queued runs again");
                }
                self.listening = Some(session);
            }
            Err(e) => {
                self.listening = None;
                if !self.said && !matches!(e, Fault::Down) {
                    log::warn!("can't listen for queued runs ({e}): they start at the tick");
                    self.said = true;
                }
            }
        }
    }

    /// Stops listening (and drops what was read but not taken).
    pub fn unlisten(&mut self, db: &mut Db) {
        let Some(session) = self.listening.take() else {
            return;
        };
        if db
            .run_fenced(session, |c| c.batch_execute(sql::WAKE_UNLISTEN))
            .is_ok()
        {
            db.notifications_dropped(session);
        }
    }

    /// One slice between ticks, until `until` at most (and [`SLICE`]) on
    /// the leading session `session`: waits for notifications while
    /// listening (not at all when `ended` makes a pass due now), else
    /// sleeps. Whether notifications came (from another session than the
    /// leading one). A flood stops the listening here.
    pub fn wait(&mut self, db: &mut Db, session: u64, until: Instant, ended: bool) -> bool {
        let now = self.gate.now(ended);
        let wait = if now {
            Duration::ZERO
        } else {
            until.saturating_duration_since(Instant::now()).min(SLICE)
        };
        if !self.listens(session) {
            std::thread::sleep(wait);
            return false;
        }
        let got = match db.notifications_fenced(session, wait, DRAIN_MAX) {
            Ok(got) => got,
            Err(e) => {
                // The session is gone: the next tick's lead step reconnects
                // (and takes the lead again, or not) before any listening.
                self.listening = None;
                if !matches!(e, Fault::Down) {
                    e.complain();
                }
                return false;
            }
        };
        self.gate.drained(got.len());
        let own = self.known.pid();
        let notified = got.iter().any(|n| Some(n.process_id()) != own);
        if self.gate.flooded() {
            self.flood(db);
        }
        notified
    }

    /// A pass between ticks started `started` of at most `bound` (woken by
    /// `notified`, `ended`); a flood stops the listening until the next tick.
    pub fn passed(
        &mut self,
        db: &mut Db,
        started: usize,
        bound: usize,
        notified: bool,
        ended: bool,
    ) {
        self.gate.passed(started, bound, notified, ended);
        if self.gate.flooded() {
            self.flood(db);
        }
    }

    fn flood(&mut self, db: &mut Db) {
        if self.listening.is_some() {
            log::debug!("wake-ups start nothing: not listening until the next tick");
            self.unlisten(db);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifications_and_ends_make_a_pass_and_nothing_else_does() {
        let g = Gate::default();
        assert!(!g.due(false, false));
        assert!(g.due(true, false));
        assert!(g.due(false, true));
        assert!(!g.now(false), "a notification is waited for");
        assert!(g.now(true), "an ended run makes a pass at once");
    }

    #[test]
    fn a_full_pass_makes_another_at_once_and_is_no_strike() {
        let mut g = Gate::default();
        g.passed(64, 64, true, false);
        assert!(g.due(false, false) && g.now(false));
        // The pass after a full one may find nothing left: no strike.
        for _ in 0..10 {
            g.passed(64, 64, false, false);
            g.passed(0, 64, true, false);
        }
        assert!(!g.flooded());
        assert!(!g.due(false, false));
        // A tick's own full start step too.
        let mut g = Gate::default();
        g.tick_started(64, 64);
        assert!(g.due(false, false));
        g.tick();
        assert!(g.due(false, false), "kept across the tick it was set by");
        g.tick_started(3, 64);
        assert!(!g.due(false, false));
    }

    #[test]
    fn fruitless_wake_ups_stop_the_listening_until_the_next_tick() {
        let mut g = Gate::default();
        for _ in 0..STRIKES_PER_TICK {
            g.passed(0, 64, true, false);
            assert!(!g.flooded());
        }
        g.passed(0, 64, true, false);
        assert!(g.flooded(), "a flood costs no more than the tick's poll");
        g.tick();
        assert!(!g.flooded(), "listening again at the next tick");
        // A pass that starts something is no strike.
        for _ in 0..10 {
            g.passed(1, 64, true, false);
        }
        assert!(!g.flooded());
    }

    #[test]
    fn full_drains_are_strikes() {
        let mut g = Gate::default();
        g.drained(DRAIN_MAX - 1);
        g.drained(0);
        assert!(!g.flooded());
        for _ in 0..=STRIKES_PER_TICK {
            g.drained(DRAIN_MAX);
        }
        assert!(g.flooded());
    }

    #[test]
    fn ends_that_free_nothing_wake_no_more_passes_until_one_starts_something() {
        let mut g = Gate::default();
        g.passed(0, 64, false, true);
        assert!(!g.flooded(), "ends are no flood");
        assert!(!g.due(false, true), "nothing queued: the next ends wait");
        assert!(!g.now(true));
        assert!(g.due(true, true), "a notification still wakes");
        g.passed(2, 64, true, true);
        assert!(g.due(false, true), "it started something: ends wake again");
        g.passed(0, 64, false, true);
        g.tick();
        assert!(g.due(false, true), "and at every tick");
    }
}
