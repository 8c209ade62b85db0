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

pub mod flood;
pub mod locks;
pub mod sql;
#[cfg(test)]
mod strip;
pub mod tls;

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use postgres::error::SqlState;
use postgres::{Client, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;

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

/// The advisory lock `orca migrate` holds while it applies migrations.
pub const MIGRATE_LOCK: i64 = 1869767524;

/// An embedded migration: `sql/migrations/NNNN_name.sql`.
pub struct Migration {
    /// Its number, `NNNN`.
    pub version: i32,
    /// Its name, after the number.
    pub name: &'static str,
    /// Its statements.
    pub sql: &'static str,
}

/// Every migration this binary knows, oldest first.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "core",
        sql: sql_file!("migrations/0001_core.sql"),
    },
    Migration {
        version: 2,
        name: "overlap",
        sql: sql_file!("migrations/0002_overlap.sql"),
    },
    Migration {
        version: 3,
        name: "pools",
        sql: sql_file!("migrations/0003_pools.sql"),
    },
    Migration {
        version: 4,
        name: "warm_pool",
        sql: sql_file!("migrations/0004_warm_pool.sql"),
    },
    Migration {
        version: 5,
        name: "hardening",
        sql: sql_file!("migrations/0005_hardening.sql"),
    },
    Migration {
        version: 6,
        name: "cluster",
        sql: sql_file!("migrations/0006_cluster.sql"),
    },
    Migration {
        version: 7,
        name: "codes",
        sql: sql_file!("migrations/0007_codes.sql"),
    },
    Migration {
        version: 8,
        name: "rounds",
        sql: sql_file!("migrations/0008_rounds.sql"),
    },
    Migration {
        version: 9,
        name: "claims",
        sql: sql_file!("migrations/0009_claims.sql"),
    },
    Migration {
        version: 10,
        name: "plans",
        sql: sql_file!("migrations/0010_plans.sql"),
    },
    Migration {
        version: 11,
        name: "lookups",
        sql: sql_file!("migrations/0011_lookups.sql"),
    },
    Migration {
        version: 12,
        name: "picks",
        sql: sql_file!("migrations/0012_picks.sql"),
    },
    Migration {
        version: 13,
        name: "turns",
        sql: sql_file!("migrations/0013_turns.sql"),
    },
    Migration {
        version: 14,
        name: "fewer statements",
        sql: sql_file!("migrations/0014_fewer_statements.sql"),
    },
    Migration {
        version: 15,
        name: "fold when streamed",
        sql: sql_file!("migrations/0015_fold_when_streamed.sql"),
    },
    Migration {
        version: 16,
        name: "one round",
        sql: sql_file!("migrations/0016_one_round.sql"),
    },
    Migration {
        version: 17,
        name: "max fills",
        sql: sql_file!("migrations/0017_max_fills.sql"),
    },
    Migration {
        version: 18,
        name: "history",
        sql: sql_file!("migrations/0018_history.sql"),
    },
    Migration {
        version: 19,
        name: "attempts",
        sql: sql_file!("migrations/0019_attempts.sql"),
    },
    Migration {
        version: 20,
        name: "ended",
        sql: sql_file!("migrations/0020_ended.sql"),
    },
    Migration {
        version: 21,
        name: "login_objects",
        sql: sql_file!("migrations/0021_login_objects.sql"),
    },
    Migration {
        version: 22,
        name: "on lost",
        sql: sql_file!("migrations/0022_on_lost.sql"),
    },
    Migration {
        version: 23,
        name: "login members",
        sql: sql_file!("migrations/0023_login_members.sql"),
    },
    Migration {
        version: 24,
        name: "on lost attempt",
        sql: sql_file!("migrations/0024_on_lost_attempt.sql"),
    },
];

/// The marker line by which a migration declares that it raises the floor:
/// a binary that knows fewer migrations can't run beside one that knows it.
pub const FLOOR_MARKER: &str = "-- orca:raises-floor";

/// How many migrations this binary knows.
pub fn migrations_known() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// The fewest migrations an older binary running beside this one must know:
/// the newest migration that declares [`FLOOR_MARKER`].
pub fn migration_floor() -> i32 {
    MIGRATIONS
        .iter()
        .filter(|m| m.sql.lines().any(|l| l.trim() == FLOOR_MARKER))
        .map(|m| m.version)
        .max()
        .unwrap_or(0)
}

/// Where the database is and how to reach it, parsed once from the URL.
#[derive(Clone)]
pub struct Target {
    config: postgres::Config,
    tls: MakeRustlsConnect,
    shown: String,
    /// A machine's or instance's own login, whose secret may change (its
    /// boot token is replaced at the first login).
    login: Option<std::sync::Arc<crate::secrets::Login>>,
}

impl Target {
    /// Parses a libpq URL (or `key=value` string). `sslmode` may be `disable`,
    /// `prefer` (the default), `require` (encrypted, certificate not checked)
    /// or `verify-full` (checked against `sslrootcert`, else
    /// `~/.postgresql/root.crt`). The error never quotes the URL.
    pub fn parse(url: &str) -> Result<Target, String> {
        let mut verify = false;
        let mut rootcert: Option<String> = None;
        let cleaned = rewrite_params(url, |key, value| match key {
            "sslmode" => match value {
                "disable" | "prefer" | "require" => Ok(Some(value.to_string())),
                "verify-full" => {
                    verify = true;
                    Ok(Some("require".into()))
                }
                other => Err(format!(
                    "sslmode={other} is not supported (disable, prefer, require, verify-full)"
                )),
            },
            "sslrootcert" => {
                rootcert = Some(value.to_string());
                Ok(None)
            }
            _ => Ok(Some(value.to_string())),
        })?;
        let mut config = postgres::Config::from_str(&cleaned)
            .map_err(|e| format!("ORCA_DATABASE_URL is not a valid libpq URL: {e}"))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        // A peer that vanished (a cut cable, a host gone) is noticed within
        // about 15 s rather than the kernel's two hours (the server's side:
        // see `SERVER_KEEPALIVES`).
        config
            .keepalives_idle(Duration::from_secs(5))
            .keepalives_interval(Duration::from_secs(2))
            .keepalives_retries(3)
            .tcp_user_timeout(Duration::from_secs(15));

        let shown = describe(&config);
        let tls = if verify {
            let path = rootcert.unwrap_or_else(|| {
                let home = std::env::var("HOME").unwrap_or_default();
                format!("{home}/.postgresql/root.crt")
            });
            tls::verified(&path)?
        } else {
            tls::unverified()
        };
        Ok(Target {
            config,
            tls,
            shown,
            login: None,
        })
    }

    /// Reads `ORCA_DATABASE_URL`.
    pub fn from_env() -> Result<Target, String> {
        let url = std::env::var("ORCA_DATABASE_URL")
            .map_err(|_| "ORCA_DATABASE_URL is not set".to_string())?;
        Target::parse(&url)
    }

    /// `host:port/db`, for messages: never the user's password.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Sets the `application_name` other sessions see in `pg_stat_activity`.
    pub fn with_application_name(mut self, name: &str) -> Target {
        self.config.application_name(name);
        self
    }

    /// Logs in as a machine's or instance's own login (see
    /// [`crate::secrets::Login`]) instead of what the URL says.
    pub fn with_login(mut self, login: std::sync::Arc<crate::secrets::Login>) -> Target {
        self.config.user(&login.role);
        self.login = Some(login);
        self
    }

    /// One attempt to connect, keeping Postgres's error (and its SQLSTATE).
    /// A login's boot token is replaced right after its first login.
    fn open(&self) -> Result<Client, postgres::Error> {
        let Some(login) = &self.login else {
            return self.config.connect(self.tls.clone());
        };
        let mut config = self.config.clone();
        config.password(login.secret());
        let mut client = match config.connect(self.tls.clone()) {
            Ok(c) => c,
            // A boot token refused: a replacement whose rotation's answer
            // was lost may be the one the database has.
            Err(e) if e.code() == Some(&postgres::error::SqlState::INVALID_PASSWORD) => {
                let Some(next) = login.fallback() else {
                    return Err(e);
                };
                config.password(&next);
                let c = config.connect(self.tls.clone())?;
                login.adopt(next);
                c
            }
            Err(e) => return Err(e),
        };
        login.rotate_if_pending(|verifier| {
            client
                .execute(sql::LOGIN_ROTATE, &[&verifier])
                .map(drop)
                .map_err(|e| plain(&e))
        });
        Ok(client)
    }

    /// One attempt to connect, giving up after `limit` if that is sooner
    /// than the connect timeout.
    fn connect_within(&self, limit: Option<Duration>) -> Result<Client, ConnectError> {
        let mut config = self.config.clone();
        if let Some(limit) = limit {
            let timeout = config.get_connect_timeout().copied().unwrap_or(limit);
            config.connect_timeout(timeout.min(limit).max(Duration::from_millis(100)));
        }
        config
            .connect(self.tls.clone())
            .map_err(|e| match self.failed(&e) {
                Failed::Refused(r) => ConnectError::Refused(r.to_string()),
                Failed::NoPassword => ConnectError::Bad(self.no_password()),
                Failed::Certificate(words) => {
                    ConnectError::Refused(format!("the database at {}: {words}", self.shown))
                }
                Failed::Unreachable => ConnectError::Unreachable(format!(
                    "can't reach the database at {}: {}",
                    self.shown,
                    plain(&e)
                )),
            })
    }

    /// What an attempt to connect that failed with `e` came to.
    fn failed(&self, e: &postgres::Error) -> Failed {
        if let Some(d) = e.as_db_error().filter(|d| refuses_for_good(d.code())) {
            return Failed::Refused(Refusal {
                code: d.code().clone(),
                reason: plain(e),
                at: self.shown.clone(),
                revoked: revokes(d.code(), d.routine()),
            });
        }
        if self.login.is_none() && self.config.get_password().is_none() && asked_for_password(e) {
            return Failed::NoPassword;
        }
        if let Some(ce) = tls::certificate_error(e) {
            return Failed::Certificate(tls::refused_certificate(ce, &self.host()));
        }
        Failed::Unreachable
    }

    /// The line for a URL with no password, for a server that asks for one.
    fn no_password(&self) -> String {
        format!(
            "the database at {} asked for a password and ORCA_DATABASE_URL has none",
            self.shown
        )
    }

    /// The host connected to, as the URL names it.
    fn host(&self) -> String {
        use postgres::config::Host;
        match self.config.get_hosts().first() {
            Some(Host::Tcp(h)) => h.clone(),
            Some(Host::Unix(p)) => p.display().to_string(),
            None => "localhost".into(),
        }
    }
}

/// What an attempt to connect failed with, as orca acts on it.
enum Failed {
    /// The server refused the login for good ([`refuses_for_good`]).
    Refused(Refusal),
    /// The server asked for a password and the URL has none: bad input.
    NoPassword,
    /// `sslmode=verify-full` refused the server's certificate: what it
    /// needs, in words. Trying again can't help until someone changes it.
    Certificate(String),
    /// Anything else: no server, a timeout, a server starting up or out of
    /// connections; worth trying again.
    Unreachable,
}

/// Whether `e` is the client's refusal to log in because the server asked
/// for a password and none was given. postgres-rust raises it as
/// `Error::config("password missing")`, with no type or kind of its own a
/// caller can ask for, so its cause's text is the only sign of it (and
/// only an error with no SQLSTATE is looked at).
fn asked_for_password(e: &postgres::Error) -> bool {
    e.code().is_none()
        && std::error::Error::source(e).is_some_and(|c| c.to_string() == "password missing")
}

/// Why a one-shot command got no session.
#[derive(Debug)]
pub enum ConnectError {
    /// The server answered and refused the login for good (see
    /// [`refuses_for_good`]): trying again can't help.
    Refused(String),
    /// Nothing usable answered (no server, a timeout, a server starting up
    /// or out of connections): worth trying again within `--wait`.
    Unreachable(String),
    /// What the URL says can't work (the server asked for a password and
    /// it has none): bad input.
    Bad(String),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Refused(s) | ConnectError::Unreachable(s) | ConnectError::Bad(s) => {
                f.write_str(s)
            }
        }
    }
}

/// Whether a login refused with this SQLSTATE is refused for good, so that
/// waiting for the database can't help: a wrong password (28P01), a role
/// that doesn't exist or may not log in, or no `pg_hba.conf` entry (28000),
/// no such database (3D000), no CONNECT privilege on it (42501). A server
/// starting up or shutting down (57P03), out of connections (53300) and
/// the like are worth waiting out.
pub fn refuses_for_good(code: &postgres::error::SqlState) -> bool {
    matches!(code.code(), "28P01" | "28000" | "3D000" | "42501")
}

/// Rewrites the parameters of a URL's query string (or a `key=value` string)
/// through `f`, which may keep, change or drop each.
fn rewrite_params(
    url: &str,
    mut f: impl FnMut(&str, &str) -> Result<Option<String>, String>,
) -> Result<String, String> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let Some((base, query)) = url.split_once('?') else {
            return Ok(url.to_string());
        };
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if let Some(v) = f(k, &percent_decode(v))? {
                kept.push(format!("{k}={}", percent_encode(&v)));
            }
        }
        if kept.is_empty() {
            Ok(base.to_string())
        } else {
            Ok(format!("{base}?{}", kept.join("&")))
        }
    } else {
        let mut kept = Vec::new();
        for pair in url.split_whitespace() {
            match pair.split_once('=') {
                Some((k, v)) => {
                    if let Some(v) = f(k, v)? {
                        kept.push(format!("{k}={v}"));
                    }
                }
                None => kept.push(pair.to_string()),
            }
        }
        Ok(kept.join(" "))
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        if bytes[i] == b'%'
            && let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn describe(config: &postgres::Config) -> String {
    use postgres::config::Host;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config
        .get_dbname()
        .or(config.get_user())
        .unwrap_or("postgres");
    format!("{host}:{port}/{db}")
}

/// A postgres error as one line, with the server's message where there is one.
pub fn plain(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return db.message().to_string();
    }
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        let text = inner.to_string();
        if !s.contains(&text) {
            s = format!("{s}: {text}");
        }
        src = inner.source();
    }
    s.replace('\n', " ")
}

/// Connects for a one-shot command: tries every second for up to `wait`
/// seconds, then gives up with one line naming host and port. A login the
/// server refuses for good ([`refuses_for_good`]) is given up at once.
/// `wait` must be a number of seconds from 0 to a day.
pub fn connect_waiting(target: &Target, wait: f64) -> Result<Client, ConnectError> {
    let deadline = Instant::now() + Duration::from_secs_f64(wait.clamp(0.0, 86_400.0));
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match target.connect_within(Some(left)) {
            Ok(c) => return Ok(c),
            Err(e @ (ConnectError::Refused(_) | ConnectError::Bad(_))) => return Err(e),
            Err(ConnectError::Unreachable(e)) if Instant::now() >= deadline => {
                return Err(ConnectError::Unreachable(format!(
                    "{e} (gave up after {wait}s)"
                )));
            }
            Err(ConnectError::Unreachable(_)) => std::thread::sleep(
                Duration::from_secs(1).min(deadline.saturating_duration_since(Instant::now())),
            ),
        }
    }
}

/// Whether the database has orca's schema: false before the first `orca
/// migrate`. Needs no privilege on orca's tables (a machine's login may ask).
pub fn schema_present(client: &mut Client) -> Result<bool, postgres::Error> {
    client.query_one(sql::SCHEMA_PRESENT, &[]).map(|r| r.get(0))
}

/// What a command that needs orca's schema says before `orca migrate`.
pub const NO_SCHEMA: &str = "the database has no orca schema yet: run `orca migrate`";

/// orca's own SQLSTATEs, raised by its plpgsql functions (class `OR`, which
/// no standard class uses). A caller decides by these codes, never by a
/// message's text.
pub mod codes {
    /// `orca.worker_machine()` (migration 0007): the login's role has no live
    /// machine row. The machine was just made and its row is on its way, or
    /// it is being removed (its role is revoked next).
    pub const NO_LIVE_MACHINE: &str = "OR001";

    /// Every one of them (the tests check each is raised by a migration).
    #[cfg(test)]
    pub const ALL: &[&str] = &[NO_LIVE_MACHINE];
}

/// An error the server answered with: its SQLSTATE and its message.
#[derive(Debug, Clone)]
pub struct SqlError {
    /// The SQLSTATE (`e.code()`), standard or one of orca's [`codes`].
    pub code: SqlState,
    /// The server's message, one line.
    pub message: String,
}

impl SqlError {
    /// Whether its SQLSTATE is `code` (five characters, e.g.
    /// [`codes::NO_LIVE_MACHINE`]).
    pub fn is(&self, code: &str) -> bool {
        self.code.code() == code
    }
}

impl std::fmt::Display for SqlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// A login the server refused for good ([`refuses_for_good`]).
#[derive(Debug, Clone)]
pub struct Refusal {
    /// The SQLSTATE: 28P01, 28000, 3D000 or 42501.
    pub code: SqlState,
    /// The server's message, one line.
    pub reason: String,
    /// `host:port/db` ([`Target::shown`]).
    pub at: String,
    /// The role is gone or may not log in any more ([`revokes`]): its
    /// credentials were revoked, not mistyped or shut out by `pg_hba.conf`.
    pub revoked: bool,
}

impl Refusal {
    /// A refusal of the credentials themselves (SQLSTATE class 28: a wrong
    /// password, a role gone or that may not log in, no `pg_hba.conf`
    /// entry), not of the database (3D000, 42501).
    pub fn of_credentials(&self) -> bool {
        self.code.code().starts_with("28")
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the database at {} refused the login: {}",
            self.at, self.reason
        )
    }
}

/// Whether a login refused with `code` by the server routine `routine`
/// (the error's `R` field) was refused because its role is gone or may not
/// log in (`NOLOGIN`): SQLSTATE 28000 raised once the login got past
/// authentication, by `InitializeSessionUserId`. The same code raised
/// earlier (`ClientAuthentication`: no `pg_hba.conf` entry, a `reject`
/// line) may be a misconfiguration; a wrong password (28P01) is not said to
/// be a revocation either (SCRAM answers so for a dropped role too).
pub fn revokes(code: &SqlState, routine: Option<&str>) -> bool {
    *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
        && routine == Some("InitializeSessionUserId")
}

/// Why a statement of a long-lived loop did not land.
#[derive(Debug)]
pub enum Fault {
    /// The database can't be reached now (no session, or it was lost:
    /// SQLSTATE class 08 or 57P, or no answer); try again next time round.
    Down,
    /// The login was refused for good ([`refuses_for_good`]): trying again
    /// can't help until someone changes the credentials, `pg_hba.conf` or
    /// the database. Only [`Db::run`] says it (it is the one that connects).
    Refused(Refusal),
    /// The statement itself failed, with its SQLSTATE.
    Sql(SqlError),
    /// The statement refused what it was given (SQLSTATE class 22, a data
    /// exception such as a NUL byte in text; class 54, a limit exceeded):
    /// sending the same again can never land.
    Data(SqlError),
    /// A step beside the statements failed, not the database: a provider's
    /// call, a setting, what a machine is given.
    Other(String),
}

impl Fault {
    /// Logs this fault, unless it is an outage ([`Fault::Down`],
    /// [`Fault::Refused`]: [`Db`] says those once when they start and once
    /// when they end). For loops that try again next time round.
    pub fn complain(self) {
        match self {
            Fault::Down | Fault::Refused(_) => {}
            Fault::Sql(_) | Fault::Data(_) | Fault::Other(_) => log::error!("{self}"),
        }
    }

    /// The fault of a statement that failed on a healthy session with
    /// SQLSTATE `code`: [`Fault::Data`] for class 22 or 54, else
    /// [`Fault::Sql`].
    pub fn of_statement(code: SqlState, message: String) -> Fault {
        let e = SqlError { code, message };
        if is_data(&e.code) {
            Fault::Data(e)
        } else {
            Fault::Sql(e)
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Down => f.write_str("the database can't be reached"),
            Fault::Refused(r) => r.fmt(f),
            Fault::Sql(e) | Fault::Data(e) => e.fmt(f),
            Fault::Other(s) => f.write_str(s),
        }
    }
}

/// Whether a statement's SQLSTATE says the data it was given can never be
/// stored (class 22, a data exception; class 54, a limit exceeded).
pub fn is_data(code: &SqlState) -> bool {
    let c = code.code();
    c.starts_with("22") || c.starts_with("54")
}

/// Whether a SQLSTATE says the session is gone (class 08, a connection
/// exception; 57P, the server shutting down or ending the session).
pub fn ends_session(code: &SqlState) -> bool {
    let c = code.code();
    c.starts_with("08") || c.starts_with("57P")
}

/// What kind of failed round trip `e` is, for `orca_db_errors_total`:
/// `connection` (the session is gone), `statement` (it failed with a
/// SQLSTATE), `client` (the client refused to send or read it).
pub fn error_kind(e: &postgres::Error) -> &'static str {
    if is_connection_error(e) {
        "connection"
    } else if e.code().is_some() {
        "statement"
    } else {
        "client"
    }
}

/// Whether an error means the session is gone (as opposed to a statement
/// that failed on a healthy session).
pub fn is_connection_error(e: &postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(code) => ends_session(code),
        // No answer from the server. A statement the client couldn't send or
        // read (a parameter or column of the wrong type, a row count) is the
        // statement's fault and carries no I/O error; a session gone (the
        // socket's I/O, a message that couldn't be read or written) does.
        None => {
            let mut cause = std::error::Error::source(e);
            while let Some(c) = cause {
                if c.is::<std::io::Error>() {
                    return true;
                }
                cause = c.source();
            }
            false
        }
    }
}

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

/// What `orca migrate` did.
pub struct Migrated {
    /// The migrations it applied now, by version and name.
    pub applied: Vec<(i32, &'static str)>,
    /// How many the database knew before.
    pub before: i32,
    /// What it could not harden (see `sql/database_harden.sql`).
    pub warnings: Vec<String>,
}

/// The `application_name` of `orca migrate`'s session.
pub const MIGRATE_APP: &str = "orca migrate";

/// Applies the missing migrations in one transaction under [`MIGRATE_LOCK`],
/// so two at once are safe and a second run is a no-op.
pub fn migrate(client: &mut Client) -> Result<Migrated, String> {
    let mut intruders = Vec::new();
    // A prepared transaction holding the lock has no session to end.
    let prepared =
        crate::db::locks::free_from_prepared(client, MIGRATE_LOCK).map_err(|e| plain(&e))?;
    // At READ COMMITTED whatever the database's default: a migration's
    // statement that follows a lock wait (an ALTER TABLE waiting out the
    // transactions under way) must see what they committed meanwhile
    // (migration 0015 marks the attempts that have output chunks).
    let mut tx = client
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::ReadCommitted)
        .start()
        .map_err(|e| plain(&e))?;
    // Another `orca migrate` (orca's role, `orca migrate` sessions) is
    // waited for; any other session holding the lock is ended.
    loop {
        let got: bool = tx
            .query_one(sql::MIGRATE_LOCK, &[&MIGRATE_LOCK])
            .map_err(|e| plain(&e))?
            .get(0);
        if got {
            break;
        }
        let found = crate::db::locks::end_intruders(
            &mut tx,
            MIGRATE_LOCK,
            "the migration lock",
            MIGRATE_APP,
            false,
        )
        .map_err(|e| plain(&e))?;
        intruders.extend(found);
        std::thread::sleep(Duration::from_millis(100));
    }
    tx.batch_execute(sql::MIGRATIONS_TABLE)
        .map_err(|e| plain(&e))?;
    let done: Vec<i32> = tx
        .query(sql::MIGRATIONS_APPLIED, &[])
        .map_err(|e| plain(&e))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let before = done.iter().copied().max().unwrap_or(0);
    let mut applied = Vec::new();
    for m in MIGRATIONS.iter().filter(|m| !done.contains(&m.version)) {
        tx.batch_execute(m.sql)
            .map_err(|e| format!("migration {:04}_{}: {}", m.version, m.name, plain(&e)))?;
        tx.execute(sql::MIGRATION_RECORD, &[&m.version, &m.name])
            .map_err(|e| plain(&e))?;
        applied.push((m.version, m.name));
    }
    tx.commit().map_err(|e| plain(&e))?;
    let mut warnings = Vec::new();
    if let Err(e) = client.batch_execute(sql::DATABASE_HARDEN) {
        warnings.push(format!(
            "can't revoke TEMPORARY on this database from PUBLIC ({}): machine logins can make temporary objects until the database's owner or a superuser does (docs/security.md)",
            plain(&e)
        ));
    }
    match crate::db::locks::database_warnings(client) {
        Ok(w) => warnings.extend(w),
        Err(e) => warnings.push(format!("can't read the server's settings: {}", plain(&e))),
    }
    let whys = intruders
        .iter()
        .map(|i| i.describe("the migration lock"))
        .chain(prepared.iter().map(|p| format!("the migration lock: {p}")));
    for why in whys {
        let _ = crate::db::locks::record(client, &why);
    }
    Ok(Migrated {
        applied,
        before,
        warnings,
    })
}

/// How many migrations the database has had applied (0 before the first).
pub fn migrations_applied(client: &mut Client) -> Result<i32, postgres::Error> {
    if !schema_present(client)? {
        return Ok(0);
    }
    client
        .query_one(sql::MIGRATIONS_COUNT, &[])
        .map(|r| r.get(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslmode_verify_full_needs_a_root_certificate() {
        let err = Target::parse(
            "postgres://u:secretpw@db.example:6543/x?sslmode=verify-full&sslrootcert=/nonexistent",
        )
        .err()
        .unwrap();
        assert!(err.contains("sslrootcert"), "{err}");
        assert!(!err.contains("secretpw"));
    }

    #[test]
    fn shown_target_has_no_password() {
        let t = Target::parse("postgres://u:secretpw@db.example:6543/x?sslmode=require").unwrap();
        assert_eq!(t.shown(), "db.example:6543/x");
        let t = Target::parse("host=h port=7 user=u password=secretpw dbname=d").unwrap();
        assert_eq!(t.shown(), "h:7/d");
    }

    #[test]
    fn unknown_sslmode_is_refused() {
        let err = Target::parse("postgres://h/x?sslmode=verify-ca")
            .err()
            .unwrap();
        assert!(err.contains("verify-ca"));
    }

    #[test]
    fn percent_round_trip() {
        assert_eq!(percent_decode("%2Ftmp%2Fx"), "/tmp/x");
        assert_eq!(percent_encode("/tmp/a b"), "/tmp/a%20b");
    }

    #[test]
    fn only_definite_refusals_are_given_up_at_once() {
        use postgres::error::SqlState;
        for definite in [
            SqlState::INVALID_PASSWORD,
            SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
            SqlState::INVALID_CATALOG_NAME,
            SqlState::INSUFFICIENT_PRIVILEGE,
        ] {
            assert!(refuses_for_good(&definite), "{definite:?}");
        }
        for passing in [
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::TOO_MANY_CONNECTIONS,
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CONNECTION_FAILURE,
        ] {
            assert!(!refuses_for_good(&passing), "{passing:?}");
        }
    }

    fn code(c: &str) -> SqlState {
        SqlState::from_code(c)
    }

    #[test]
    fn a_statement_s_sqlstate_says_its_fault() {
        for data in ["22P05", "22021", "22001", "54000", "54001"] {
            assert!(
                matches!(Fault::of_statement(code(data), "m".into()), Fault::Data(_)),
                "{data}"
            );
        }
        for sql in [
            "42P01", "3F000", "42501", "23505", "40001", "55P03", "OR001",
        ] {
            assert!(
                matches!(Fault::of_statement(code(sql), "m".into()), Fault::Sql(_)),
                "{sql}"
            );
        }
        let Fault::Sql(e) = Fault::of_statement(code("OR001"), "no live machine".into()) else {
            panic!("OR001 is a statement's fault");
        };
        assert!(e.is(codes::NO_LIVE_MACHINE));
        assert!(!e.is("42501"));
        assert_eq!(e.to_string(), "no live machine");
    }

    #[test]
    fn only_connection_sqlstates_end_the_session() {
        for gone in ["08000", "08006", "08003", "57P01", "57P02", "57P03"] {
            assert!(ends_session(&code(gone)), "{gone}");
        }
        for kept in ["57014", "40001", "42501", "22P05", "OR001", "55P03"] {
            assert!(!ends_session(&code(kept)), "{kept}");
        }
    }

    #[test]
    fn a_revocation_is_28000_past_authentication() {
        let session_user = Some("InitializeSessionUserId");
        assert!(revokes(&code("28000"), session_user));
        // No pg_hba.conf entry, a reject line: before authentication.
        assert!(!revokes(&code("28000"), Some("ClientAuthentication")));
        assert!(!revokes(&code("28000"), None));
        // A wrong password, or SCRAM's answer for a dropped role.
        assert!(!revokes(&code("28P01"), Some("auth_failed")));
        assert!(!revokes(&code("3D000"), Some("InitPostgres")));
    }

    #[test]
    fn a_refusal_of_credentials_is_class_28() {
        let refusal = |c: &str| Refusal {
            code: code(c),
            reason: "r".into(),
            at: "h:5432/d".into(),
            revoked: false,
        };
        assert!(refusal("28P01").of_credentials());
        assert!(refusal("28000").of_credentials());
        assert!(!refusal("3D000").of_credentials());
        assert!(!refusal("42501").of_credentials());
        assert_eq!(
            refusal("28P01").to_string(),
            "the database at h:5432/d refused the login: r"
        );
    }

    #[test]
    fn orca_s_own_sqlstates_are_five_characters_of_class_or() {
        for c in codes::ALL {
            assert_eq!(c.len(), 5, "{c}");
            assert!(c.starts_with("OR"), "{c}");
            assert!(
                MIGRATIONS
                    .iter()
                    .any(|m| m.sql.contains(&format!("ERRCODE = '{c}'"))),
                "no migration raises {c}"
            );
        }
    }

    #[test]
    fn floor_is_a_known_migration() {
        assert!(migration_floor() >= 1);
        assert!(migration_floor() <= migrations_known());
    }
}
