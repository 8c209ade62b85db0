//! Holding the lead, tick by tick: whether this scheduler leads now, on which
//! session and since when; taking the lock again after a reconnect; with
//! overlap on, the beat of its row in `orca.schedulers` and the decision to
//! drain.
//!
//! Invariants:
//! * The lead is held on one session: after a reconnect it is taken again
//!   before anything is decided, and a lead held on an older session is
//!   forgotten (its lock went with it).
//! * With overlap off, a scheduler that finds the lead taken by another
//!   process while it was cut off starts nothing more and exits once its runs
//!   end.
//! * With overlap on, a scheduler drains (gives the lock up as it begins) on
//!   SIGTERM or SIGINT, when asked, or when a newer live scheduler exists; once
//!   draining it never leads again. A leader whose beats fail for the stale
//!   limit stops deciding by itself.

use std::time::Instant;

use crate::db::{Db, sql};
use crate::lead::{Known, Term, lock};
use crate::plural::count;

/// This process as it joined `orca.schedulers` (overlap on): its row and
/// what its hold on the lead remembers of it.
pub struct Joined {
    /// Its row's id in `orca.schedulers`.
    pub id: i64,
    draining: bool,
    /// The last beat that landed, by this process's monotonic clock.
    last_beat: Instant,
    /// Whether "waiting for the lead" was logged since the last change.
    said_waiting: bool,
}

impl Joined {
    /// Scheduler row `id`, just joined.
    pub fn new(id: i64) -> Joined {
        Joined {
            id,
            draining: false,
            last_beat: Instant::now(),
            said_waiting: false,
        }
    }
}

/// What this process supervises, as a lead step needs it.
pub struct Supervised<'a> {
    /// The runs its processes are (beaten with its scheduler row).
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
    /// This process's row in `orca.schedulers`, with overlap on.
    pub joined: Option<Joined>,
    /// This scheduler drained and ended its row: time to exit 0.
    pub ended: bool,
    /// Who leads, as this process's other threads see it.
    known: Known,
    /// The session whose backend pid `known` has (`None`: not leading).
    told: Option<u64>,
}

/// Why a scheduler drains, if it should: `stopping` (it got SIGTERM or
/// SIGINT), `drain_asked` (`orca scheduler drain`), `newer` (a newer live
/// scheduler that isn't draining), in that order.
pub fn drain_why(stopping: bool, drain_asked: bool, newer: Option<i64>) -> Option<String> {
    if stopping {
        Some("got SIGTERM or SIGINT".to_string())
    } else if drain_asked {
        Some("asked to drain (orca scheduler drain)".to_string())
    } else {
        newer.map(|n| format!("a newer scheduler ({n}) is live"))
    }
}

/// Whether a leader stops deciding by itself: it leads (`leads`) and no
/// beat of its landed for over the stale limit (`since_beat` s, by its
/// monotonic clock): another scheduler may have taken over meanwhile.
pub fn beat_late(leads: bool, since_beat: f64, stale: f64) -> bool {
    leads && since_beat > stale
}

/// What a scheduler's step (overlap on) does once it has beaten (and stepped down, if
/// a drain was due).
#[derive(Debug, PartialEq)]
pub enum Then {
    /// Draining with nothing left to supervise: its row ends (it exits 0).
    End,
    /// Draining: it supervises its runs to their end, deciding nothing.
    Drain,
    /// It holds the lead on this session: it leads on.
    Lead,
    /// It tries to take the lead (free, or its holder gone).
    Try,
}

/// What a scheduler's step (overlap on) does next ([`Then`]): `draining`, supervising
/// nothing (`idle`), holding the lead on this session (`holds`, asked only
/// when not draining).
pub fn overlap_then(draining: bool, idle: bool, holds: impl FnOnce() -> bool) -> Then {
    match (draining, idle) {
        (true, true) => Then::End,
        (true, false) => Then::Drain,
        (false, _) if holds() => Then::Lead,
        (false, _) => Then::Try,
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
    /// `joined` its row (overlap on: it leads once a step takes the lead).
    pub fn new(app: String, session: Option<u64>, joined: Option<Joined>) -> Leadership {
        Leadership {
            app,
            held: session.map(|s| (s, Instant::now())),
            lost_to: None,
            joined,
            ended: false,
            known: Known::default(),
            told: None,
        }
    }

    /// Who leads, for this process's other threads (told each step).
    pub fn known(&self) -> Known {
        self.known.clone()
    }

    /// The lead as held on `db`'s session now, if it is (a process that
    /// took it before its first tick: `orca scheduler -c` registers its
    /// file on it).
    pub fn term<'a>(&'a mut self, db: &'a mut Db) -> Option<Term<'a>> {
        let session = db.sessions;
        let scheduler = self.joined.as_ref().map(|j| j.id);
        holds(&mut self.held, session).then(|| Term::new(db, session, &mut self.held, scheduler))
    }

    /// Whether this scheduler waits for a lead another scheduler holds (its
    /// last step found it held): between ticks it may wait on the lock
    /// ([`Leadership::wait_for_lead`]) rather than sleep.
    pub fn waits(&self) -> bool {
        self.held.is_none()
            && self.lost_to.is_none()
            && self
                .joined
                .as_ref()
                .is_some_and(|j| !j.draining && j.said_waiting)
    }

    /// Waits until `until` at most for the lead lock, instead of sleeping
    /// (see [`Leadership::waits`]): taken the moment its holder gives it up,
    /// so a deploy's hand-over leaves no tick without a leader. Whether this
    /// scheduler leads now (`Some(false)`: the time passed first), or `None`
    /// if the wait failed (said).
    pub fn wait_for_lead(&mut self, db: &mut Db, until: Instant) -> Option<bool> {
        let joined = self.joined.as_mut().filter(|_| self.held.is_none())?;
        let wait = until.saturating_duration_since(Instant::now());
        if wait.as_millis() < 10 {
            return Some(false);
        }
        let (id, session) = (joined.id, db.sessions);
        let waited = db.run_fenced(session, |c| {
            let taken = lock::wait_take(c, wait)?;
            if taken {
                c.execute(sql::SCHEDULER_LEAD, &[&id])?;
            }
            Ok(taken)
        });
        match waited {
            Ok(true) => {
                log::info!("scheduler {id} leads (the lead was handed over)");
                joined.said_waiting = false;
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

    /// This tick's step: the lead as this tick holds it, for the leader's
    /// duties ([`Term`]), or `None`. `stopping`: whether a SIGTERM or
    /// SIGINT came (asked when the step needs to know).
    pub fn step<'a>(
        &'a mut self,
        db: &'a mut Db,
        stale: f64,
        stopping: fn() -> bool,
        sup: Supervised,
    ) -> Option<Term<'a>> {
        let session = self.lead_session(db, stale, stopping, sup);
        self.tell(db, session);
        let scheduler = self.joined.as_ref().map(|j| j.id);
        Some(Term::new(db, session?, &mut self.held, scheduler))
    }

    /// Tells this process's other threads who leads ([`Known`]): whether
    /// it leads, each step; the leading session's backend pid, read once a
    /// session (one that can't be read is not known meanwhile: no removal
    /// begun off the tick; read again next step).
    fn tell(&mut self, db: &mut Db, session: Option<u64>) {
        self.known.set_leads(session.is_some());
        if session == self.told {
            return;
        }
        let pid = match session {
            Some(s) => match db.run_fenced(s, |c| {
                c.query_one(sql::BACKEND_PID, &[])
                    .map(|r| r.get::<_, i32>("pid"))
            }) {
                Ok(pid) => Some(pid),
                Err(e) => {
                    self.known.set_pid(None);
                    return e.complain();
                }
            },
            None => None,
        };
        self.known.set_pid(pid);
        self.told = session;
    }

    /// This tick's step: the session that leads, or `None`.
    fn lead_session(
        &mut self,
        db: &mut Db,
        stale: f64,
        stopping: fn() -> bool,
        sup: Supervised,
    ) -> Option<u64> {
        if self.joined.is_some() {
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

    /// With overlap on: beats this scheduler's row, drains when a newer one
    /// is live or it is asked to (or got SIGTERM), and otherwise takes the
    /// lead when it is free, or held by a gone scheduler. Returns the leading session.
    fn overlap_step(
        &mut self,
        db: &mut Db,
        stale: f64,
        stopping: fn() -> bool,
        sup: Supervised,
    ) -> Option<u64> {
        let joined = self.joined.as_mut()?;
        let id = joined.id;
        // A leader that could not beat for the stale limit stops deciding by
        // itself: another scheduler may have taken over meanwhile.
        if beat_late(
            self.held.is_some(),
            joined.last_beat.elapsed().as_secs_f64(),
            stale,
        ) {
            log::warn!("no beat landed for over {stale}s: giving up the lead");
            self.held = None;
            let _ = db.run(lock::release);
        }
        let beat = match db.run(|c| super::beat(c, id, sup.ours, stale)) {
            Ok(Some(b)) => b,
            Ok(None) => {
                log::error!("scheduler {id}'s row has ended: draining");
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
        joined.last_beat = Instant::now();
        if let Some(why) = drain_why(stopping(), beat.drain_asked, beat.newer)
            && !joined.draining
        {
            // Decide nothing more from here on, whatever the step down comes to.
            self.held = None;
            match db.run(|c| super::step_down(c, id, &why)) {
                Ok(()) => {
                    log::info!(
                        "draining: {why}; supervising {} to their end",
                        count(sup.running as i64, "run")
                    );
                    joined.draining = true;
                }
                Err(e) => {
                    e.complain();
                    return None;
                }
            }
        }
        let session = db.sessions;
        match overlap_then(joined.draining, sup.idle, || holds(&mut self.held, session)) {
            Then::End => {
                match db.run(|c| super::end(c, id)) {
                    Ok(()) => self.ended = true,
                    Err(e) => e.complain(),
                }
                return None;
            }
            Then::Drain => return None,
            Then::Lead => return Some(session),
            Then::Try => {}
        }
        let app = self.app.clone();
        match db.run_fenced(session, |c| {
            lock::free_own_stale(c, &app);
            super::try_lead(c, id, stale)
        }) {
            Ok(super::Lead::Taken) => {
                log::info!("scheduler {id} leads");
                joined.said_waiting = false;
                self.held = Some((session, Instant::now()));
                Some(session)
            }
            Ok(super::Lead::Held) => {
                if !joined.said_waiting {
                    let who = lock::who_leads(db);
                    log::info!("scheduler {id} waits for the lead, held by {who}");
                    joined.said_waiting = true;
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
    fn drains_on_a_stop_then_when_asked_then_for_a_newer_scheduler() {
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
            Some("a newer scheduler (9) is live")
        );
    }

    #[test]
    fn a_leader_whose_beats_fail_for_the_stale_limit_stops_deciding() {
        assert!(!beat_late(true, 30.0, 30.0), "at the limit, not past it");
        assert!(beat_late(true, 30.1, 30.0));
        assert!(!beat_late(false, 300.0, 30.0), "no lead to give up");
        assert!(!beat_late(true, 0.5, 30.0));
    }

    #[test]
    fn a_draining_scheduler_ends_once_idle_and_never_leads_again() {
        let never = || panic!("a draining scheduler doesn't ask whether it holds the lead");
        assert_eq!(overlap_then(true, true, never), Then::End);
        assert_eq!(overlap_then(true, false, never), Then::Drain);
        assert_eq!(overlap_then(false, true, || true), Then::Lead);
        assert_eq!(overlap_then(false, false, || true), Then::Lead);
        assert_eq!(overlap_then(false, false, || false), Then::Try);
        assert_eq!(overlap_then(false, true, || false), Then::Try);
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

    fn db(sessions: u64) -> Db {
        let target = crate::db::Target::parse("postgres://orca@localhost/orca").unwrap();
        let mut db = Db::new(target, "test");
        db.sessions = sessions;
        db
    }

    #[test]
    fn the_clock_restarts_only_for_a_held_lead() {
        let mut l = Leadership::new("orca scheduler host h".into(), None, None);
        assert!(l.term(&mut db(1)).is_none(), "no lead, no term");
        let mut l = Leadership::new("orca scheduler host h".into(), Some(1), None);
        let mut db = db(1);
        let mut term = l.term(&mut db).expect("held");
        std::thread::sleep(std::time::Duration::from_millis(20));
        let before = term.led_for();
        assert!(before >= 0.02);
        term.restart_clock();
        assert!(term.led_for() < before);
    }

    #[test]
    fn a_term_is_given_only_on_the_session_that_holds_the_lead() {
        let mut l = Leadership::new("orca scheduler host h".into(), Some(1), None);
        let mut db = db(1);
        assert_eq!(l.term(&mut db).expect("held").session(), 1);
        // A reconnect: the lock went with session 1.
        db.sessions = 2;
        assert!(l.term(&mut db).is_none(), "a lead on an older session");
        db.sessions = 1;
        assert!(
            l.term(&mut db).is_none(),
            "a forgotten lead is not held again"
        );
    }

    #[test]
    fn a_term_of_a_lost_lead_sends_nothing_and_says_so() {
        let mut db = db(2);
        let mut held = Some((1, Instant::now()));
        let mut term = Term::new(&mut db, 1, &mut held, None);
        let sent = std::cell::Cell::new(false);
        let ran = term.run(|_| {
            sent.set(true);
            Ok(())
        });
        assert!(
            matches!(ran, Err(crate::lead::DutyError::LostLead)),
            "{ran:?}"
        );
        let ran = term.prepared("SELECT 1", |_, _| {
            sent.set(true);
            Ok(())
        });
        assert!(
            matches!(ran, Err(crate::lead::DutyError::LostLead)),
            "{ran:?}"
        );
        assert!(!sent.get());
    }
}
