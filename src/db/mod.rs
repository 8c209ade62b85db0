//! The state: the connection to Postgres (`ORCA_DATABASE_URL`, TLS, riding out
//! outages) and the embedded migrations with their floor.
//!
//! Postgres is orca's only channel, so every part goes through here. Two ways
//! of connecting exist, for two kinds of caller:
//!
//! * a one-shot command ([`connect_waiting`]) waits up to `--wait` seconds for
//!   the database and then gives up with one line naming host and port;
//! * a long-lived loop keeps a [`Db`], whose [`Db::run`] reconnects on demand
//!   and reports [`Fault::Down`] while the database can't be reached, logging
//!   once when an outage starts and once when it ends. Statements a loop
//!   makes over and over go through [`Db::prepared`]: parsed once per
//!   session, each costs one round trip and one transaction, not two.
//!   Threads of one process that share its one session hold a [`Link`].
//!
//! Secrets never leave this module: [`Target::shown`] is `host:port/db`, and
//! no error built here quotes the URL.

/// A `.sql` file under `sql/` (`$path` relative to it) as the binary embeds
/// it: without its whole-line comments, written by `build.rs` (with
/// `src/db/strip.rs`, which only `build.rs` and the unit tests compile).
macro_rules! sql_file {
    ($path:literal) => {
        include_str!(concat!(env!("OUT_DIR"), "/sql/", $path))
    };
}

pub mod fault;
pub mod flood;
pub mod locks;
pub mod migrate;
pub mod migrations;
pub mod sql;
#[cfg(test)]
mod strip;
pub mod target;
pub mod tls;
pub mod wake;

// The paths the rest of the tree names (`crate::db::Fault`, ...).
pub use fault::{Fault, Refusal, codes, error_kind, is_connection_error, plain};
pub use migrate::{MIGRATE_APP, NO_SCHEMA, migrate, migrations_applied, schema_present};
pub use migrations::{migration_floor, migrations_known};
use target::Failed;
pub use target::{ConnectError, Target, connect_waiting};

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use postgres::{Client, Statement};

/// Set on every long-lived session. No statement waits on a lock for more
/// than 2 s (a machine login holding a row lock in an open transaction
/// delays a step by that much, which is retried on its next round; the
/// leader ends such sessions, see `sql/logins_stuck_end.sql`). And the
/// server too notices within about 15 s that a client vanished (power cut,
/// network gone) and ends its session, releasing the locks it held (the lead
/// lock among them), instead of keeping it for the kernel's default of two
/// hours. Sent as statements, not as startup options, which some poolers
/// refuse.
const SESSION_SETTINGS: &str = "SET lock_timeout = 2000; SET tcp_keepalives_idle = 5; \
     SET tcp_keepalives_interval = 2; SET tcp_keepalives_count = 3; SET tcp_user_timeout = 15000";

/// A connection for a long-lived loop: reconnects on demand, never blocks
/// longer than one connection attempt, and logs an outage once at its start
/// and once at its end.
pub struct Db {
    target: Target,
    client: Option<Client>,
    down_since: Option<Instant>,
    who: &'static str,
    /// Counts how many times a fresh session was opened; callers that keep
    /// session state (an advisory lock) compare it to know they must redo it.
    pub sessions: u64,
    /// Counts the statement calls made through this `Db` (for `make bench`).
    pub calls: u64,
    /// When the last failed attempt to connect was: at most one a second.
    last_try: Option<Instant>,
    /// The last attempt to connect was refused for good
    /// ([`refuses_for_good`]).
    refusal: Option<Refusal>,
    /// Statements prepared on this session ([`Db::prepared`]), by their text.
    statements: HashMap<&'static str, Statement>,
    /// The last attempt to connect was turned away (refused for good, the
    /// server's certificate refused, no password): tried again every
    /// [`TURNED_AWAY_EVERY`], not every second.
    turned_away: bool,
    /// What was last said of being turned away (said again when it changes).
    said: Option<String>,
    /// The URL can't work as it stands ([`Db::bad_input`]).
    bad: Option<String>,
    /// Its caller ends when the login is refused ([`Db::ending_when_refused`]).
    ends_when_refused: bool,
}

/// How often a long-lived loop whose login was turned away (refused for
/// good, its certificate refused) tries again: someone has to change the
/// password, `pg_hba.conf` or the certificate first, and each try is a
/// failed login in the server's log.
pub const TURNED_AWAY_EVERY: Duration = Duration::from_secs(10);

impl Db {
    /// A `Db` for the loop named `who` (in log lines). Does not connect yet.
    pub fn new(target: Target, who: &'static str) -> Db {
        Db {
            target,
            client: None,
            down_since: None,
            who,
            sessions: 0,
            calls: 0,
            last_try: None,
            refusal: None,
            statements: HashMap::new(),
            turned_away: false,
            said: None,
            bad: None,
            ends_when_refused: false,
        }
    }

    /// For a caller that ends when its login is turned away (`orca run
    /// --wait`, `orca logs -f`, which say why as they exit): no log line
    /// saying it is tried again.
    pub fn ending_when_refused(mut self) -> Db {
        self.ends_when_refused = true;
        self
    }

    /// Runs `f` on the session, connecting first if need be. A login
    /// refused for good is [`Fault::Refused`]; no session otherwise is
    /// [`Fault::Down`].
    pub fn run<T>(
        &mut self,
        f: impl FnOnce(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, Fault> {
        if !self.ensure()
            && let Some(r) = &self.refusal
        {
            return Err(Fault::Refused(r.clone()));
        }
        self.exec(f)
    }

    /// Runs `f` with `sql` prepared on the session: prepared once per
    /// session, so that a statement made over and over costs one round trip
    /// and one transaction (a statement sent as text is parsed in a round
    /// trip, and a transaction, of its own first). Otherwise as [`Db::run`].
    pub fn prepared<T>(
        &mut self,
        sql: &'static str,
        f: impl FnOnce(&mut Client, &Statement) -> Result<T, postgres::Error>,
    ) -> Result<T, Fault> {
        if !self.ensure()
            && let Some(r) = &self.refusal
        {
            return Err(Fault::Refused(r.clone()));
        }
        self.exec_prepared(sql, f)
    }

    /// [`Db::prepared`] only on session number `session` (see
    /// [`Db::run_fenced`]).
    pub fn prepared_fenced<T>(
        &mut self,
        session: u64,
        sql: &'static str,
        f: impl FnOnce(&mut Client, &Statement) -> Result<T, postgres::Error>,
    ) -> Result<T, Fault> {
        if self.sessions != session {
            return Err(Fault::Down);
        }
        self.exec_prepared(sql, f)
    }

    fn exec_prepared<T>(
        &mut self,
        sql: &'static str,
        f: impl FnOnce(&mut Client, &Statement) -> Result<T, postgres::Error>,
    ) -> Result<T, Fault> {
        let mut statements = std::mem::take(&mut self.statements);
        let result = self.exec(|c| {
            let statement = match statements.get(sql) {
                Some(s) => s.clone(),
                None => {
                    let s = c.prepare(sql)?;
                    statements.insert(sql, s.clone());
                    s
                }
            };
            f(c, &statement)
        });
        match &result {
            // A new session prepares its own.
            Err(Fault::Down) => statements.clear(),
            // Prepared again next time (a schema changed under it, say).
            Err(_) => {
                statements.remove(sql);
            }
            Ok(_) => {}
        }
        if self.client.is_some() {
            self.statements = statements;
        }
        result
    }

    /// Runs `f` only on session number `session` (see [`Db::sessions`]):
    /// never on a newer one. This is the fence for session state such as an
    /// advisory lock: a statement that needs the lock can't land on a session
    /// that doesn't hold it.
    pub fn run_fenced<T>(
        &mut self,
        session: u64,
        f: impl FnOnce(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, Fault> {
        if self.sessions != session {
            return Err(Fault::Down);
        }
        self.exec(f)
    }

    /// Waits up to `wait` for notifications on session number `session`
    /// (never a newer one, never connecting: [`Fault::Down`] then), and
    /// takes at most `max` of them: the first as it arrives, the rest only
    /// if already sent. Others stay buffered for the next call. A session
    /// that ended meanwhile is [`Fault::Down`] (it reconnects on its next
    /// [`Db::ensure`]). Not counted in [`Db::calls`]: no statement.
    pub fn notifications_fenced(
        &mut self,
        session: u64,
        wait: Duration,
        max: usize,
    ) -> Result<Vec<postgres::Notification>, Fault> {
        use postgres::fallible_iterator::FallibleIterator;
        if self.sessions != session {
            return Err(Fault::Down);
        }
        let Some(client) = self.client.as_mut() else {
            return Err(Fault::Down);
        };
        let mut got = Vec::new();
        let read = (|| {
            let mut n = client.notifications();
            if max == 0 {
                return Ok(());
            }
            if let Some(first) = n.timeout_iter(wait).next()? {
                got.push(first);
            }
            let mut more = n.iter();
            while got.len() < max {
                match more.next()? {
                    Some(x) => got.push(x),
                    None => break,
                }
            }
            Ok(())
        })();
        let closed = client.is_closed();
        match read {
            Err(e) if !closed && !is_connection_error(&e) => Err(Fault::Other(plain(&e))),
            Err(e) => {
                self.client = None;
                self.last_try = Some(Instant::now());
                self.went_down(&plain(&e));
                Err(Fault::Down)
            }
            Ok(()) if closed => {
                self.client = None;
                self.last_try = Some(Instant::now());
                self.went_down("the session ended");
                Err(Fault::Down)
            }
            Ok(()) => Ok(got),
        }
    }

    /// Closes the session, if open (the next [`Db::ensure`] opens another,
    /// at once): the server keeps nothing for it.
    pub fn close(&mut self) {
        self.client = None;
        self.statements.clear();
    }

    /// Connects if there is no open session; true if there is one now.
    /// While the database is down, this tries at most once a second, so a
    /// loop that calls it many times a tick doesn't wait on each; while the
    /// login is turned away (refused for good, the server's certificate
    /// refused, no password for a server that asks), every
    /// [`TURNED_AWAY_EVERY`], saying why once (again when it changes), not
    /// as an outage.
    pub fn ensure(&mut self) -> bool {
        if self.client.as_ref().is_none_or(|c| c.is_closed()) {
            self.client = None;
            let pace = if self.turned_away {
                TURNED_AWAY_EVERY - Duration::from_millis(100)
            } else {
                Duration::from_millis(900)
            };
            if self.last_try.is_some_and(|t| t.elapsed() < pace) {
                return false;
            }
            match self.target.open() {
                Ok(mut c) => {
                    self.refusal = None;
                    self.bad = None;
                    self.said = None;
                    let was = if std::mem::take(&mut self.turned_away) {
                        "let in"
                    } else {
                        "reachable"
                    };
                    if let Err(e) = c.batch_execute(SESSION_SETTINGS) {
                        log::debug!("session settings not all set: {}", plain(&e));
                    }
                    self.last_try = None;
                    self.client = Some(c);
                    self.statements.clear();
                    self.sessions += 1;
                    if let Some(since) = self.down_since.take() {
                        log::warn!(
                            "{}: database at {} {was} again after {:.1}s",
                            self.who,
                            self.target.shown,
                            since.elapsed().as_secs_f64()
                        );
                    }
                }
                Err(e) => {
                    crate::metrics::add(&crate::metrics::DB_ERRORS, &["connect"], 1.0);
                    self.last_try = Some(Instant::now());
                    self.refusal = None;
                    let (said, why) = match self.target.failed(&e) {
                        Failed::Unreachable => {
                            // An outage after a refusal is news: said.
                            if self.turned_away {
                                self.turned_away = false;
                                self.said = None;
                                self.down_since = None;
                            }
                            self.went_down(&plain(&e));
                            return false;
                        }
                        Failed::Refused(r) => {
                            let why = format!("{r}");
                            self.refusal = Some(r);
                            (why.clone(), why)
                        }
                        Failed::NoPassword => {
                            let why = self.target.no_password();
                            self.bad = Some(why.clone());
                            (why.clone(), why)
                        }
                        Failed::Certificate(words) => (
                            words.clone(),
                            format!("the database at {}: {words}", self.target.shown),
                        ),
                    };
                    // Not an outage: said once (again when it changes), and
                    // tried again at a slower pace.
                    self.turned_away = true;
                    self.down_since.get_or_insert_with(Instant::now);
                    if self.said.as_deref() != Some(&said) && !self.ends_when_refused {
                        log::warn!(
                            "{}: {why}; trying again every {} s",
                            self.who,
                            TURNED_AWAY_EVERY.as_secs()
                        );
                        self.said = Some(said);
                    }
                    return false;
                }
            }
        }
        true
    }

    /// Why connecting can't work as the URL stands (the server asked for a
    /// password and it has none), if the last attempt found so: bad input
    /// for a process that has not started its work yet.
    pub fn bad_input(&self) -> Option<&str> {
        self.bad.as_deref()
    }

    /// Why the last attempt to connect was refused for good (a wrong
    /// password, no such role or database, no `pg_hba.conf` entry: the
    /// refusals a one-shot command doesn't wait on), if it was.
    pub fn refusal(&self) -> Option<&Refusal> {
        self.refusal.as_ref()
    }

    fn exec<T>(
        &mut self,
        f: impl FnOnce(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, Fault> {
        let Some(client) = self.client.as_mut() else {
            return Err(Fault::Down);
        };
        self.calls += 1;
        let result = f(client);
        if let Err(e) = &result {
            crate::metrics::add(&crate::metrics::DB_ERRORS, &[error_kind(e)], 1.0);
        }
        match result {
            Ok(v) => Ok(v),
            Err(e) if is_connection_error(&e) => {
                self.client = None;
                self.last_try = Some(Instant::now());
                self.went_down(&plain(&e));
                Err(Fault::Down)
            }
            Err(e) => match e.code() {
                Some(code) => Err(Fault::of_statement(code.clone(), plain(&e))),
                // The client's own refusal of the statement (a parameter or
                // column of the wrong type, a row count): no SQLSTATE.
                None => Err(Fault::Other(plain(&e))),
            },
        }
    }

    fn went_down(&mut self, why: &str) {
        if self.down_since.is_none() {
            self.down_since = Some(Instant::now());
            log::warn!(
                "{}: database at {} can't be reached ({why}); retrying every second",
                self.who,
                self.target.shown
            );
        }
    }
}

/// One session that several threads of a process share (a machine's or an
/// instance's process holds one connection: its main loop and its
/// heartbeat thread take turns on it, a statement at a time). Never hold
/// it while waiting on anything but the database.
#[derive(Clone)]
pub struct Link(Arc<Mutex<Db>>);

impl Link {
    /// `db`, to share.
    pub fn new(db: Db) -> Link {
        Link(Arc::new(Mutex::new(db)))
    }

    /// The session, once no other thread has it. (A thread that panicked
    /// holding it left it as it was: it is used still.)
    pub fn lock(&self) -> MutexGuard<'_, Db> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orca_s_own_sqlstates_are_five_characters_of_class_or() {
        for c in codes::ALL {
            assert_eq!(c.len(), 5, "{c}");
            assert!(c.starts_with("OR"), "{c}");
            let raise = format!("ERRCODE = '{c}'");
            assert!(
                sql::FUNCTIONS.iter().any(|(_, f)| f.contains(&raise)),
                "no function raises {c}"
            );
        }
    }

    #[test]
    fn floor_is_a_known_migration() {
        assert!(migration_floor() >= 1);
        assert!(migration_floor() <= migrations_known());
    }
}
