//! Start passes between ticks (issues 30 and 33): a local run starts when
//! it is queued, and when a slot frees, not at the next tick.
//!
//! While the scheduler leads, its `wake` thread holds a session of its own
//! that `LISTEN`s to the channel runs' triggers notify (migration 26: a
//! secret name in `orca.wake`, which no machine or instance login can
//! read), and tells the main thread of each notification; between ticks
//! the main thread waits for that, a [`SLICE`] at a time, instead of
//! sleeping. A notification (a run queued, or queued again), a run of its
//! own that ended (reaped between ticks), or a pass that started as many as
//! a pass may ([`crate::scheduler::start::STARTS_PER_TICK`]) makes one
//! start pass: the tick's start step on the lead, with the pipelines the
//! last tick read. Firing, sensors, sweeps, the lead's renewal and the
//! scaler keep the tick's cadence.
//!
//! Invariants:
//! * The tick stays the floor: a lost notification (a session cut, a
//!   notification sent before the `LISTEN`) delays a run to the next tick,
//!   never longer; `ORCA_LISTEN=off` is the tick alone (and a run's end
//!   still makes a pass: no notification is needed for it).
//! * A pass is fenced as a tick's start is: through the lead's
//!   [`crate::lead::Term`], on the session that holds `LEAD_LOCK`. The
//!   listener's session decides nothing; nothing here connects the lead's
//!   session again (the tick's lead step does).
//! * Any number of notifications is one pass. Notifications that keep
//!   coming with nothing to start ([`Gate`]: more than [`STRIKES_PER_TICK`]
//!   strikes a tick), or a read that doesn't return within [`STALLED`] (a
//!   flood read faster than the client library parses it: its session is
//!   ended), turn the listening off for [`quiet_ticks`] ticks, its session
//!   closed: a flood costs no more than the tick's poll, the tick's session
//!   never reads one, and what was read is freed. A slice that takes
//!   [`DRAIN_MAX`] closes it at once. A listening session is ended by the
//!   server (from a short session) before it is closed: the client
//!   library's close reads all the server still holds for it, a flood's
//!   backlog.
//! * It listens only while the scheduler leads.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::db::{Db, Fault, Target, sql};
use crate::lead::Known;

/// The longest the scheduler waits on its session at a time between ticks
/// (a stop or an ended run is noticed within it).
pub const SLICE: Duration = Duration::from_millis(50);

/// The most notifications taken in one slice. A slice that takes this many
/// is a flood: the client library has read (and holds) all that arrived
/// meanwhile, so the listener closes its session at once, freeing it, and
/// the listening stays off for [`quiet_ticks`] (it also counts as a strike:
/// [`Gate::drained`]).
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

/// What the main thread and the listener share.
#[derive(Default)]
struct State {
    /// Listen now (the scheduler leads, not flooded, `ORCA_LISTEN` on).
    listen: bool,
    /// A notification came from another session than the lead's since the
    /// main thread last looked.
    woken: bool,
    /// How many notifications were taken since then.
    taken: usize,
    /// The listener is reading since then (for [`STALLED`]).
    reading: Option<Instant>,
    /// The listener's backend pid, while it has a session.
    pid: Option<i32>,
    /// The scheduler is ending.
    done: bool,
    /// The listener took [`DRAIN_MAX`] in one read and closed its session
    /// (a flood), since the main thread last looked.
    overrun: bool,
}

struct Shared {
    state: Mutex<State>,
    cv: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A listener whose read has not returned for this long is reading a
/// flood faster than it can (the client library reads every notification
/// that has arrived before it returns): its session is ended, which ends
/// the read and frees what it read and what the server held for it. Its
/// reads return within [`SLICE`] otherwise.
pub const STALLED: Duration = Duration::from_millis(150);

/// How many ticks the listening stays off after the `floods`-th flood in a
/// row (a tick that listened without one ends the row): 2, 4, ... 64.
pub fn quiet_ticks(floods: u32) -> u32 {
    1 << floods.clamp(1, 6)
}

/// The scheduler's wake-ups: the listener thread, on a session of its own
/// (a flood it reads can hold up no tick), and the gate of passes, on the
/// main thread.
pub struct Wake {
    shared: Arc<Shared>,
    /// The gate of passes between ticks.
    pub gate: Gate,
    /// `ORCA_LISTEN`.
    on: bool,
    listener: Option<JoinHandle<()>>,
    /// Floods in a row, and the ticks left to stay off ([`quiet_ticks`]).
    floods: u32,
    quiet: u32,
    /// This tick listened and was flooded.
    flooded: bool,
}

impl Wake {
    /// Wake-ups as `ORCA_LISTEN` says (`on`): the listener thread, off
    /// `target` (named `app`), the lead as `known` tells (its own
    /// notifications wake nothing: runs its tick queued, the tick started).
    pub fn new(on: bool, target: Target, known: Known) -> Wake {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
        });
        let listener = on.then(|| {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("wake".into())
                .spawn(move || listen_loop(Db::new(target.clone(), "wake"), target, shared, known))
                .expect("spawn wake thread")
        });
        Wake {
            shared,
            gate: Gate::default(),
            on,
            listener,
            floods: 0,
            quiet: 0,
            flooded: false,
        }
    }

    /// After each tick: listen while this tick led (`leads`) but for the
    /// quiet ticks after a flood, and the gate begins a new tick.
    pub fn after_tick(&mut self, leads: Option<u64>) {
        self.gate.tick();
        let listened = {
            let mut st = self.shared.lock();
            if std::mem::take(&mut st.overrun) {
                self.flooded = true;
            }
            st.listen || self.flooded
        };
        if std::mem::take(&mut self.flooded) {
            self.floods += 1;
            self.quiet = quiet_ticks(self.floods);
        } else if listened {
            self.floods = 0;
        }
        let quiet = self.quiet > 0;
        self.quiet = self.quiet.saturating_sub(1);
        self.shared.lock().listen = self.on && leads.is_some() && !quiet;
    }

    /// Ends the listener's session, through `db`'s session `session` (the
    /// lead's), if its read has not returned for [`STALLED`]: a flood.
    /// Asked every slice between ticks.
    pub fn unstall(&mut self, db: &mut Db, session: u64) {
        let stalled = {
            let st = self.shared.lock();
            st.reading
                .filter(|since| since.elapsed() >= STALLED)
                .and(st.pid)
        };
        let Some(pid) = stalled else { return };
        if !self.flooded {
            log::warn!("the wake-up listener is flooded: ending its session");
        }
        self.mute();
        if let Err(e) = db.run_fenced(session, |c| c.execute(sql::WAKE_END, &[&pid])) {
            e.complain();
        }
        // Not asked again for this read.
        self.shared.lock().reading = None;
    }

    /// One slice between ticks, until `until` at most (and [`SLICE`]):
    /// waits for a notification (not at all when `ended` makes a pass due
    /// now). Whether one came (from another session than the lead's).
    pub fn wait(&mut self, until: Instant, ended: bool) -> bool {
        let wait = if self.gate.now(ended) {
            Duration::ZERO
        } else {
            until.saturating_duration_since(Instant::now()).min(SLICE)
        };
        let mut st = self.shared.lock();
        if !st.woken && !wait.is_zero() {
            st = self
                .shared
                .cv
                .wait_timeout_while(st, wait, |st| !st.woken && !st.done)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let (woken, taken) = (std::mem::take(&mut st.woken), std::mem::take(&mut st.taken));
        if std::mem::take(&mut st.overrun) && !self.flooded {
            log::warn!("the wake-up listener is flooded: not listening for a while");
            self.flooded = true;
        }
        drop(st);
        self.gate.drained(taken);
        self.mute_if_flooded();
        woken
    }

    /// A pass between ticks started `started` of at most `bound` (woken by
    /// `notified`, `ended`); a flood stops the listening until the next tick.
    pub fn passed(&mut self, started: usize, bound: usize, notified: bool, ended: bool) {
        self.gate.passed(started, bound, notified, ended);
        self.mute_if_flooded();
    }

    fn mute_if_flooded(&mut self) {
        if self.gate.flooded() {
            self.mute();
        }
    }

    fn mute(&mut self) {
        let mut st = self.shared.lock();
        if st.listen {
            log::debug!("wake-ups start nothing: not listening for a while");
            st.listen = false;
            self.flooded = true;
        }
    }
}

impl Drop for Wake {
    fn drop(&mut self) {
        self.shared.lock().done = true;
        self.shared.cv.notify_all();
        if let Some(t) = self.listener.take() {
            let _ = t.join();
        }
    }
}

/// The listener thread: while told to listen, holds a session that
/// `LISTEN`s and tells the main thread of each notification another
/// session than the lead's sent; told not to (not leading, a flood), it
/// closes its session, so the server keeps nothing for it.
fn listen_loop(mut db: Db, target: Target, shared: Arc<Shared>, known: Known) {
    let mut listening: Option<u64> = None;
    let mut said = false;
    loop {
        let listen = {
            let st = shared.lock();
            if st.done {
                return;
            }
            st.listen
        };
        if !listen {
            if listening.take().is_some() {
                let pid = shared.lock().pid;
                // Whatever stopped it (a flood, the lead lost), the
                // server may hold a backlog for this session.
                if let Some(pid) = pid {
                    end_abruptly(&target, pid);
                }
                db.close();
                shared.lock().pid = None;
            }
            std::thread::sleep(SLICE);
            continue;
        }
        if listening.is_none_or(|s| s != db.sessions) || !db.ensure() {
            listening = None;
            shared.lock().pid = None;
            if !db.ensure() {
                std::thread::sleep(SLICE);
                continue;
            }
            let session = db.sessions;
            let listened = db.run_fenced(session, |c| {
                c.batch_execute(sql::WAKE_LISTEN)?;
                c.query_one(sql::BACKEND_PID, &[])
                    .map(|r| r.get::<_, i32>("pid"))
            });
            match listened {
                Ok(pid) => {
                    if std::mem::take(&mut said) {
                        log::info!("listening for queued runs again");
                    }
                    shared.lock().pid = Some(pid);
                    listening = Some(session);
                }
                Err(e) => {
                    if !said && !matches!(e, Fault::Down) {
                        log::warn!("can't listen for queued runs ({e}): they start at the tick");
                        said = true;
                    }
                    db.close();
                    std::thread::sleep(Duration::from_secs(1));
                    continue;
                }
            }
        }
        let Some(session) = listening else { continue };
        shared.lock().reading = Some(Instant::now());
        let got = db.notifications_fenced(session, SLICE, DRAIN_MAX);
        let mut st = shared.lock();
        st.reading = None;
        match got {
            Ok(got) if !got.is_empty() => {
                let lead = known.pid();
                st.taken += got.len();
                if got.iter().any(|n| Some(n.process_id()) != lead) {
                    st.woken = true;
                    shared.cv.notify_all();
                }
                // A flood: what the client library read beyond these is
                // freed with the session, closed at the loop's top (a read
                // buffers all that arrived while it ran; read after read,
                // under a flood faster than the library parses, that grew
                // the scheduler by 80-130 MB on a loaded host).
                if got.len() >= DRAIN_MAX {
                    st.overrun = true;
                    st.listen = false;
                }
            }
            Ok(_) => {}
            // Its session ended: a new one listens (at most one a second).
            Err(_) => listening = None,
        }
    }
}

/// Ends the listener's session `pid` from a short session of its own
/// (`target`'s): the client library's own close reads every notification
/// the server still holds for a session before it ends (a flood's backlog,
/// 100 MB and more), so a flooded session is ended by the server first and
/// the close reads only what was already in flight.
fn end_abruptly(target: &Target, pid: i32) {
    let mut db = Db::new(target.clone(), "wake-end");
    if db.ensure()
        && let Err(e) = db.run_fenced(db.sessions, |c| c.execute(sql::WAKE_END, &[&pid]))
    {
        log::debug!("the flooded listener's session: {e}");
    }
    db.close();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floods_in_a_row_keep_the_listening_off_longer_up_to_64_ticks() {
        let quiet: Vec<u32> = (1..=8).map(quiet_ticks).collect();
        assert_eq!(quiet, [2, 4, 8, 16, 32, 64, 64, 64]);
    }

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
