//! Making a machine, the one way for every kind (a pool's machine, an EC2
//! run's instance): the next id, its login, the locations walked in turn
//! ([`crate::machines::walk::try_locations`]), its login dropped when none
//! made it, then its row. What differs between the kinds is an [`Order`].
//!
//! Invariants:
//! * A machine's row is written only after its provider made it; one made
//!   whose row was not written is a stray (said; a later scan deletes it
//!   by its labels, and its login is dropped as an orphan).
//! * A login made for a machine no location made is revoked and dropped at
//!   once (one that can't be dropped now is an orphan, dropped later).

use crate::config::MachineSettings;
use crate::db::Fault;
use crate::lead::{DutyError, Term};
use crate::machines::fleet::{self, Fleet};
use crate::machines::logins::{self, Token};
use crate::machines::walk::{Tried, try_locations};
use crate::providers::{Made, Make, MakeError};

/// What one kind of machine is made with: its ids, names and login, what
/// its script boots with, its row; and what its caller is told on the way.
pub trait Order {
    /// The statement that takes its next id (`sql::MACHINE_NEXT_ID`,
    /// `sql::INSTANCE_NEXT_ID`).
    fn next_id(&self) -> &'static str;
    /// Its name and its login role's name, for id `id` of stack `stack`.
    fn names(&self, stack: &str, id: i64) -> (String, String);
    /// The statement that makes its login (it decides the login's group).
    fn login_statement(&self) -> &'static str;
    /// What its script boots with, its token among them (secret).
    fn env(&self, name: &str, token: &Token) -> Result<Vec<(String, String)>, String>;
    /// How it is made: its provider's settings (kind, region, locations).
    fn settings(&self) -> &MachineSettings;
    /// The request to its provider for location `location`.
    fn request<'m>(
        &'m self,
        name: &'m str,
        location: &'m str,
        stack: &'m str,
        env: &'m [(String, String)],
    ) -> Make<'m>;
    /// Its row, as its statement ([`Order::add_statement`]) reads it.
    fn row(&self, placed: &Placed) -> Result<serde_json::Value, String>;
    /// The statement that writes its row.
    fn add_statement(&self) -> &'static str;
    /// How a log line names machine `name` ("machine M", "run R: instance I").
    fn called(&self, name: &str) -> String;
    /// Whether no location is tried once the tick's soft limit passed.
    fn stops_when_late(&self) -> bool {
        false
    }
    /// Told each location's answer (`next`: the location tried after it).
    fn answered(&self, _location: &str, _next: Option<&str>, _made: &Result<Made, MakeError>) {}
}

/// A machine made and its row written.
#[derive(Debug)]
pub struct Placed {
    /// Its id (the row's).
    pub id: i64,
    /// Its name.
    pub name: String,
    /// Its login role.
    pub login: String,
    /// The location that made it.
    pub location: String,
    /// What its provider said of it.
    pub made: Made,
    /// The region it was made in, where that means something.
    pub region: Option<String>,
}

/// Why no machine came of a make.
#[derive(Debug)]
pub enum Unmade {
    /// No location made it (its login dropped): every location's answer.
    NotMade {
        /// The name it would have had.
        name: String,
        /// The locations' answers.
        tried: Tried<()>,
    },
    /// The database (or a step beside it) failed; a machine made whose row
    /// was not written is a stray now (said). Or the lead was lost.
    Db(DutyError),
}

impl From<DutyError> for Unmade {
    fn from(e: DutyError) -> Unmade {
        Unmade::Db(e)
    }
}

impl From<Fault> for Unmade {
    fn from(f: Fault) -> Unmade {
        Unmade::Db(f.into())
    }
}

/// Why a tick's time for provider calls stops a walk that stops when late.
pub const LATE: &str = "this tick's time for provider calls is spent: the next pass goes on";

impl Fleet {
    /// Makes the machine `order` asks for, every write fenced on the lead
    /// (`term`): its id, its login, the locations in turn, then its row.
    pub fn make(&mut self, term: &mut Term, order: &impl Order) -> Result<Placed, Unmade> {
        let stack = self.stack(term)?;
        let id: i64 = term.run(|c| c.query_one(order.next_id(), &[]))?.get("id");
        let (name, login) = order.names(&stack, id);
        let token = term
            .run(|c| Ok(logins::make_login(c, &login, order.login_statement())))?
            .map_err(Fault::Other)?;
        let env = order.env(&name, &token).map_err(Fault::Other)?;
        drop(token);
        let settings = order.settings();
        let (kind, region) = (&settings.provider, settings.region.as_deref());
        let tried = try_locations(&settings.locations, |location, next| {
            // A make sent late would get too little time for its answer.
            if order.stops_when_late() && self.late() {
                return Err(MakeError::Failed(LATE.into()));
            }
            // A provider that can't be made (no region, no credentials
            // chain) refuses the make as EC2 would.
            let made = match self.provider(kind, region) {
                Ok(provider) => provider
                    .make(&order.request(&name, location, &stack, &env))
                    .map(|m| (m, provider.region())),
                Err(why) => Err(MakeError::Failed(why)),
            };
            order.answered(location, next, &made.clone().map(|(m, _)| m));
            made
        });
        drop(env);
        let Some((location, (made, region))) = tried.made else {
            // Its login goes at once (one that can't be dropped now is an
            // orphan, dropped later).
            term.run(|c| fleet::revoke_and_drop(c, &login))?;
            return Err(Unmade::NotMade {
                name,
                tried: Tried {
                    made: None,
                    full: tried.full,
                    failed: tried.failed,
                },
            });
        };
        let placed = Placed {
            id,
            name,
            login,
            location,
            made,
            region,
        };
        let statement = order.add_statement();
        let written = order
            .row(&placed)
            .map_err(|e| DutyError::Db(Fault::Other(e)))
            .and_then(|row| term.run(|c| c.execute(statement, &[&row])));
        if let Err(e) = written {
            // A stray now: a later scan deletes it and drops its login.
            log::error!(
                "{} was made but its row was not written: {e}",
                order.called(&placed.name)
            );
            return Err(Unmade::Db(e));
        }
        Ok(placed)
    }
}
