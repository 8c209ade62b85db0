//! Holding the lead, tick by tick: whether this scheduler leads now, on which
//! session and since when; taking the lock again after a reconnect; with
//! overlap on, the instance's beat and the decision to drain.
//!
//! Invariants:
//! * The lead is held on one session: after a reconnect it is taken again
//!   before anything is decided, and a lead held on an older session is
//!   forgotten (its lock went with it).
//! * With overlap off, a scheduler that finds the lead taken by another
//!   process while it was cut off starts nothing more and exits once its runs
//!   end.
//! * With overlap on, an instance drains (gives the lock up as it begins) on SIGTERM
//!   or SIGINT, when asked, or when a newer live instance exists; once
//!   draining it never leads again. A leader whose beats fail for the stale
//!   limit stops deciding by itself.

use std::time::Instant;

use crate::db::Db;
use crate::lead::lock;
use crate::plural::count;

/// This process as a scheduler instance (overlap on).
pub struct Instance {
    /// Its row's id in `orca.schedulers`.
    pub id: i64,
    draining: bool,
    /// The last beat that landed, by this process's monotonic clock.
    last_beat: Instant,
    /// Whether "waiting for the lead" was logged since the last change.
    said_waiting: bool,
}

impl Instance {
    /// Instance `id`, just joined.
    pub fn new(id: i64) -> Instance {
        Instance {
            id,
            draining: false,
            last_beat: Instant::now(),
            said_waiting: false,
        }
    }
}

/// What this process supervises, as a lead step needs it.
pub struct Supervised<'a> {
    /// The runs its processes are (beaten with the instance row).
    pub ours: &'a [i64],
    /// How many runs it supervises (for the log).
    pub running: usize,
    /// It supervises nothing.
    pub idle: bool,
}

/// This process's hold on the lead.
pub struct Leadership {
    /// This process's `application_name` (see [`lock::application_name`]).
    app: String,
    /// The session number that holds `LEAD_LOCK`, and since when.
    held: Option<(u64, Instant)>,
    /// Another process took the lead while this one was cut off.
    pub lost_to: Option<String>,
    /// This process's instance row, with overlap on.
    pub instance: Option<Instance>,
    /// The instance drained and ended its row: time to exit 0.
    pub ended: bool,
}

/// Why an instance drains, if it should: `stopping` (it got SIGTERM or
/// SIGINT), `drain_asked` (`orca scheduler drain`), `newer` (a newer live
/// instance that isn't draining), in that order.
pub fn drain_why(stopping: bool, drain_asked: bool, newer: Option<i64>) -> Option<String> {
    if stopping {
        Some("got SIGTERM or SIGINT".to_string())
    } else if drain_asked {
        Some("asked to drain (orca scheduler drain)".to_string())
    } else {
        newer.map(|n| format!("a newer instance ({n}) is live"))
    }
}

/// Whether `held` is on `session`; forgets a lead held on an older session
/// (its lock went with it).
fn holds(held: &mut Option<(u64, Instant)>, session: u64) -> bool {
    match held {
        Some((s, _)) if *s == session => true,
        _ => {
            *held = None;
            false
        }
    }
}

impl Leadership {
    /// A process that took the lead on `session` (overlap off), or with
    /// `instance` its row (overlap on: it leads once a step takes the lead).
    pub fn new(app: String, session: Option<u64>, instance: Option<Instance>) -> Leadership {
        Leadership {
            app,
            held: session.map(|s| (s, Instant::now())),
            lost_to: None,
            instance,
            ended: false,
        }
    }

    /// Since when the lead is held, if it is.
    pub fn since(&self) -> Option<Instant> {
        self.held.map(|(_, since)| since)
    }

    /// Whether this instance waits for a lead another instance holds (its
    /// last step found it held): between ticks it may wait on the lock
    /// ([`Leadership::wait_for_lead`]) rather than sleep.
    pub fn waits(&self) -> bool {
        self.held.is_none()
            && self.lost_to.is_none()
            && self
                .instance
                .as_ref()
                .is_some_and(|i| !i.draining && i.said_waiting)
    }

    /// Waits until `until` at most for the lead lock, instead of sleeping
    /// (see [`Leadership::waits`]): taken the moment its holder gives it up,
    /// so a deploy's hand-over leaves no tick without a leader. Whether this
    /// instance leads now (`Some(false)`: the time passed first), or `None`
    /// if the wait failed (said).
    pub fn wait_for_lead(&mut self, db: &mut Db, until: Instant) -> Option<bool> {
        let inst = self.instance.as_mut().filter(|_| self.held.is_none())?;
        let wait = until.saturating_duration_since(Instant::now());
        if wait.as_millis() < 10 {
            return Some(false);
        }
        let (id, session) = (inst.id, db.sessions);
        match db.run_fenced(session, |c| super::wait_lead(c, id, wait)) {
            Ok(true) => {
                log::info!("instance {id} leads (the lead was handed over)");
                inst.said_waiting = false;
                self.held = Some((session, Instant::now()));
                Some(true)
            }
            Ok(false) => Some(false),
            Err(e) => {
                e.complain();
                None
            }
        }
    }

    /// Counts the lead as taken now (a stalled tick: what looked stale may
    /// not be, so silence is judged only a stale limit from here).
    pub fn restart_clock(&mut self) {
        if let Some((s, _)) = self.held {
            self.held = Some((s, Instant::now()));
        }
    }

    /// This tick's step: the session that leads, or `None`. `stopping`: whether
    /// a SIGTERM or SIGINT came (asked when the step needs to know).
    pub fn step(
        &mut self,
        db: &mut Db,
        stale: f64,
        stopping: fn() -> bool,
        sup: Supervised,
    ) -> Option<u64> {
        if self.instance.is_some() {
            self.overlap_step(db, stale, stopping, sup)
        } else {
            self.leading(db, stopping, sup.running)
        }
    }

    /// The session that holds the lead, taking the lock again after a
    /// reconnect; `None` while not leading.
    fn leading(&mut self, db: &mut Db, stopping: fn() -> bool, running: usize) -> Option<u64> {
        if self.lost_to.is_some() || stopping() {
            return None;
        }
        if !db.ensure() {
            return None;
        }
        let session = db.sessions;
        if holds(&mut self.held, session) {
            return Some(session);
        }
        let app = self.app.clone();
        match db.run_fenced(session, |c| lock::take(c, &app)) {
            Ok(true) => {
                log::info!("lead taken again on a new session");
                self.held = Some((session, Instant::now()));
                Some(session)
            }
            Ok(false) => {
                let who = lock::who_leads(db);
                log::error!(
                    "the lead was taken by {who} while this scheduler was cut off; \
                     starting nothing more, finishing the {} it supervises",
                    count(running as i64, "run")
                );
                self.lost_to = Some(who);
                None
            }
            Err(e) => {
                e.complain();
                None
            }
        }
    }

    /// With overlap on: beats this instance, drains when a newer one is live
    /// or it is asked to (or got SIGTERM), and otherwise takes the lead when
    /// it is free, or held by a gone instance. Returns the leading session.
    fn overlap_step(
        &mut self,
        db: &mut Db,
        stale: f64,
        stopping: fn() -> bool,
        sup: Supervised,
    ) -> Option<u64> {
        let inst = self.instance.as_mut()?;
        let id = inst.id;
        // A leader that could not beat for the stale limit stops deciding by
        // itself: another instance may have taken over meanwhile.
        if self.held.is_some() && inst.last_beat.elapsed().as_secs_f64() > stale {
            log::warn!("no beat landed for over {stale}s: giving up the lead");
            self.held = None;
            let _ = db.run(lock::release);
        }
        let beat = match db.run(|c| super::beat(c, id, sup.ours, stale)) {
            Ok(Some(b)) => b,
            Ok(None) => {
                log::error!("instance {id}'s row has ended: draining");
                super::Beat {
                    drain_asked: true,
                    newer: None,
                }
            }
            Err(e) => {
                e.complain();
                return None;
            }
        };
        inst.last_beat = Instant::now();
        if let Some(why) = drain_why(stopping(), beat.drain_asked, beat.newer)
            && !inst.draining
        {
            // Decide nothing more from here on, whatever the step down comes to.
            self.held = None;
            match db.run(|c| super::step_down(c, id, &why)) {
                Ok(()) => {
                    log::info!(
                        "draining: {why}; supervising {} to their end",
                        count(sup.running as i64, "run")
                    );
                    inst.draining = true;
                }
                Err(e) => {
                    e.complain();
                    return None;
                }
            }
        }
        if inst.draining {
            if sup.idle {
                match db.run(|c| super::end(c, id)) {
                    Ok(()) => self.ended = true,
                    Err(e) => e.complain(),
                }
            }
            return None;
        }
        let session = db.sessions;
        if holds(&mut self.held, session) {
            return Some(session);
        }
        let app = self.app.clone();
        match db.run_fenced(session, |c| {
            lock::free_own_stale(c, &app);
            super::try_lead(c, id, stale)
        }) {
            Ok(super::Lead::Taken) => {
                log::info!("instance {id} leads");
                inst.said_waiting = false;
                self.held = Some((session, Instant::now()));
                Some(session)
            }
            Ok(super::Lead::Held) => {
                if !inst.said_waiting {
                    let who = lock::who_leads(db);
                    log::info!("instance {id} waits for the lead, held by {who}");
                    inst.said_waiting = true;
                }
                None
            }
            Err(e) => {
                e.complain();
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drains_on_a_stop_then_when_asked_then_for_a_newer_instance() {
        assert_eq!(drain_why(false, false, None), None);
        assert_eq!(
            drain_why(true, true, Some(9)).as_deref(),
            Some("got SIGTERM or SIGINT")
        );
        assert_eq!(
            drain_why(false, true, Some(9)).as_deref(),
            Some("asked to drain (orca scheduler drain)")
        );
        assert_eq!(
            drain_why(false, false, Some(9)).as_deref(),
            Some("a newer instance (9) is live")
        );
    }

    #[test]
    fn a_lead_on_an_older_session_is_forgotten() {
        let mut held = Some((3, Instant::now()));
        assert!(holds(&mut held, 3));
        assert!(held.is_some());
        assert!(!holds(&mut held, 4));
        assert!(held.is_none());
        assert!(!holds(&mut held, 3), "a forgotten lead is not held again");
    }

    #[test]
    fn the_clock_restarts_only_for_a_held_lead() {
        let mut l = Leadership::new("orca scheduler host h".into(), None, None);
        l.restart_clock();
        assert!(l.since().is_none());
        let mut l = Leadership::new("orca scheduler host h".into(), Some(1), None);
        let before = l.since().expect("held");
        std::thread::sleep(std::time::Duration::from_millis(2));
        l.restart_clock();
        assert!(l.since().expect("held") > before);
    }
}
