//! A term of the lead: the leading session as a leader's duties get it,
//! for one tick. [`crate::lead::hold::Leadership::step`] gives it to a
//! scheduler that leads (and only then); every duty (fire, sense, start,
//! sweep, prune, the gauges' reads, the pool scaler, EC2 runs, removals)
//! takes it, not the connection, so a duty can reach no statement but a
//! fenced one on the session that holds `LEAD_LOCK`.
//!
//! Invariant: a statement through a term lands only on the session the
//! lead was taken (or kept) on; on a newer session it is not sent, and is
//! [`DutyError::LostLead`] (the lock went with the old session), not an
//! outage: the duty stops as it does for one, and the next tick's step
//! takes the lead again (or not) before anything more is decided.

use std::time::Instant;

use postgres::{Client, Statement};

use crate::db::{Db, Fault};

/// Why a leader's duty's statement did not land.
#[derive(Debug)]
pub enum DutyError {
    /// The lead was lost: the session that held it is gone, a newer one in
    /// its place; nothing was sent. Not an outage (the database may be up):
    /// the lead's step says what came of the lead, so this is not said.
    LostLead,
    /// The database's answer (or a step beside it: a provider, a setting).
    Db(Fault),
}

impl DutyError {
    /// Logs it, unless it is a lost lead or an outage (said elsewhere,
    /// once: [`Fault::complain`]). For duties tried again next tick.
    pub fn complain(self) {
        match self {
            DutyError::LostLead => {}
            DutyError::Db(f) => f.complain(),
        }
    }
}

impl From<Fault> for DutyError {
    fn from(f: Fault) -> DutyError {
        DutyError::Db(f)
    }
}

impl std::fmt::Display for DutyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DutyError::LostLead => f.write_str("the lead was lost with its session"),
            DutyError::Db(e) => e.fmt(f),
        }
    }
}

/// The lead as held this tick: the fenced session, since when this process
/// leads, its row in `orca.schedulers` (overlap on).
pub struct Term<'a> {
    db: &'a mut Db,
    /// The session number that holds `LEAD_LOCK`.
    session: u64,
    /// The lead's hold: the session and since when (a stalled tick restarts
    /// the clock through [`Term::restart_clock`]).
    held: &'a mut Option<(u64, Instant)>,
    /// This process's row's id in `orca.schedulers`, with overlap on.
    scheduler: Option<i64>,
}

impl<'a> Term<'a> {
    /// The term of a lead held on session `session` of `db` (`held` says
    /// since when).
    pub(super) fn new(
        db: &'a mut Db,
        session: u64,
        held: &'a mut Option<(u64, Instant)>,
        scheduler: Option<i64>,
    ) -> Term<'a> {
        Term {
            db,
            session,
            held,
            scheduler,
        }
    }

    /// Runs `f` on the leading session: never on a newer one
    /// ([`DutyError::LostLead`], nothing sent).
    pub fn run<T>(
        &mut self,
        f: impl FnOnce(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, DutyError> {
        if self.db.sessions != self.session {
            return Err(DutyError::LostLead);
        }
        Ok(self.db.run_fenced(self.session, f)?)
    }

    /// [`Term::run`] with `sql` prepared once per session
    /// ([`Db::prepared`]).
    pub fn prepared<T>(
        &mut self,
        sql: &'static str,
        f: impl FnOnce(&mut Client, &Statement) -> Result<T, postgres::Error>,
    ) -> Result<T, DutyError> {
        if self.db.sessions != self.session {
            return Err(DutyError::LostLead);
        }
        Ok(self.db.prepared_fenced(self.session, sql, f)?)
    }

    /// The session number that holds the lead (see [`Db::sessions`]): a
    /// new one is a new lead.
    pub fn session(&self) -> u64 {
        self.session
    }

    /// How long this process has led (s), by its monotonic clock.
    pub fn led_for(&self) -> f64 {
        self.held
            .map_or(0.0, |(_, since)| since.elapsed().as_secs_f64())
    }

    /// Counts the lead as taken now (a stalled tick: what looked stale may
    /// not be, so silence is judged only a stale limit from here).
    pub fn restart_clock(&mut self) {
        if let Some((s, _)) = *self.held {
            *self.held = Some((s, Instant::now()));
        }
    }

    /// This process's row's id in `orca.schedulers` (overlap on), which
    /// the runs it starts name (the column `runs.instance`, a stored name).
    pub fn scheduler_id(&self) -> Option<i64> {
        self.scheduler
    }

    /// How many statements the connection has made (for `make bench`).
    pub fn calls(&self) -> u64 {
        self.db.calls
    }
}
