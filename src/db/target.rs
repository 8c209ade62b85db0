//! Where the database is and how to reach it: `ORCA_DATABASE_URL` parsed
//! once into a [`Target`] (`sslmode`, `sslrootcert`, percent-encoded
//! parameters), its logins, and a one-shot command's connection
//! ([`connect_waiting`]). No error built here quotes the URL.

use std::str::FromStr;
use std::time::{Duration, Instant};

use postgres::Client;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::fault::{Refusal, plain, revokes};
use super::{sql, tls};

/// Where the database is and how to reach it, parsed once from the URL.
#[derive(Clone)]
pub struct Target {
    config: postgres::Config,
    tls: MakeRustlsConnect,
    pub(super) shown: String,
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
    pub(super) fn open(&self) -> Result<Client, postgres::Error> {
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
    pub(super) fn failed(&self, e: &postgres::Error) -> Failed {
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
    pub(super) fn no_password(&self) -> String {
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
pub(super) enum Failed {
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
}
