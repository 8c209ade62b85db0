//! What went wrong with a statement or a session, as orca acts on it: the
//! typed [`Fault`] a long-lived loop gets, a login's [`Refusal`], orca's own
//! SQLSTATEs ([`codes`]) and the SQLSTATE classes decided on. A caller
//! decides by these, never by a message's text.

use postgres::error::SqlState;

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

#[cfg(test)]
mod tests {
    use super::*;
    use postgres::error::SqlState;

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
}
