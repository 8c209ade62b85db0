//! Locks orca needs that other logins could hold: advisory keys (the lead,
//! the migration lock) that any session of the database may take, and row
//! locks a machine or instance login takes through orca's functions and
//! could keep by leaving its transaction open. Sessions holding them that
//! are not orca processes of the right kind are ended (orca's role is a
//! member of `pg_signal_backend`), each with an event saying who it was.

use postgres::{Client, GenericClient};

use crate::db::sql;

/// A session that held a lock orca needs without being an orca process of
/// the right kind.
#[derive(Debug, Clone, PartialEq)]
pub struct Intruder {
    /// Its backend pid.
    pub pid: i32,
    /// The role it logged in as.
    pub role: String,
    /// Its `application_name` (anything the client chose).
    pub app: String,
    /// Where it connected from.
    pub from: String,
    /// Whether its session was ended (false: a superuser's, which orca's
    /// role can't end).
    pub ended: bool,
}

impl Intruder {
    /// What happened, for an event and a log line: `what` names the lock.
    pub fn describe(&self, what: &str) -> String {
        format!(
            "{what} was held by role {} (backend pid {}, application_name {:?}, from {}), not an orca process of the right kind: {}",
            self.role,
            self.pid,
            self.app.chars().take(64).collect::<String>(),
            self.from,
            if self.ended {
                "its session was ended"
            } else {
                "a superuser's session, which orca's role can't end"
            }
        )
    }
}

/// Ends the sessions holding advisory lock `key` whose role is not this
/// session's or whose `application_name` doesn't start with `app_prefix`.
/// Logs each and, with `event` true, records it as an `intruder` event.
pub fn end_intruders(
    client: &mut impl GenericClient,
    key: i64,
    what: &str,
    app_prefix: &str,
    event: bool,
) -> Result<Vec<Intruder>, postgres::Error> {
    let found: Vec<Intruder> = client
        .query(sql::LOCK_INTRUDERS_END, &[&key, &app_prefix])?
        .iter()
        .map(|r| Intruder {
            pid: r.get("pid"),
            role: r.get("role"),
            app: r.get("app"),
            from: r.get("from_addr"),
            ended: r.get("ended"),
        })
        .collect();
    for i in &found {
        let why = i.describe(what);
        log::warn!("{}", log_line(&why));
        if event {
            client.execute(
                sql::EVENT_ADD,
                &[&None::<i64>, &None::<String>, &"intruder", &why],
            )?;
        }
    }
    Ok(found)
}

/// Ends the sessions of machine and instance logins that have been in one
/// transaction for over `secs` seconds (by the database's clock) or hold
/// any advisory lock, and rolls back transactions prepared over `secs` ago
/// (see [`rollback_prepared`]); each with an event as it happens. Returns
/// how many.
pub fn end_stuck_logins(client: &mut Client, secs: f64) -> Result<usize, postgres::Error> {
    let rows = client.query(sql::LOGINS_STUCK_END, &[&secs])?;
    let mut n = 0;
    for r in &rows {
        let pid: i32 = r.get("pid");
        let role: String = r.get("role");
        let what: String = r.get("what");
        record(
            client,
            &format!(
                "login {role} (backend pid {pid}) {what}: its session was ended, so it holds no lock orca needs"
            ),
        )?;
        n += 1;
    }
    for why in rollback_prepared(client, secs)? {
        record(client, &why)?;
        n += 1;
    }
    Ok(n)
}

/// If a prepared transaction holds advisory lock `key` (which no session
/// end can free), rolls back every transaction prepared in this database by
/// another role; returns what it did, in words. Outside a transaction.
pub fn free_from_prepared(client: &mut Client, key: i64) -> Result<Vec<String>, postgres::Error> {
    let held: bool = client.query_one(sql::LOCK_PREPARED_HOLDS, &[&key])?.get(0);
    if held {
        rollback_prepared(client, 0.0)
    } else {
        Ok(Vec::new())
    }
}

/// The log line of an `intruder` event whose reason is `why`: it starts
/// with the event's kind, so an operator can grep for it.
pub fn log_line(why: &str) -> String {
    format!("intruder: {why}")
}

/// Logs `why` and records it as an `intruder` event.
pub fn record(client: &mut Client, why: &str) -> Result<(), postgres::Error> {
    log::warn!("{}", log_line(why));
    client
        .execute(
            sql::EVENT_ADD,
            &[&None::<i64>, &None::<String>, &"intruder", &why],
        )
        .map(|_| ())
}

/// Rolls back the transactions prepared in this database over `secs` ago
/// by any role but orca's (`sql/logins_prepared.sql`); returns what it did
/// for each, in words. Run outside a transaction (ROLLBACK PREPARED can't
/// be in one).
pub fn rollback_prepared(client: &mut Client, secs: f64) -> Result<Vec<String>, postgres::Error> {
    let mut whys = Vec::new();
    for r in client.query(sql::LOGINS_PREPARED, &[&secs])? {
        let gid: String = r.get("gid");
        let owner: String = r.get("owner");
        let role: Option<String> = r.get("role");
        let literal: String = r.get("literal");
        let can: bool = r.get("can");
        let gid: String = gid.chars().take(64).collect();
        let ended = match role {
            Some(role) if can => {
                // Both quoted by the server (quote_ident, quote_literal):
                // ROLLBACK PREPARED takes no parameter, and only its owner
                // may end it. Each on its own: ROLLBACK PREPARED can't be in
                // a transaction block, which several statements in one call
                // are. A session left as another role can't be trusted:
                // closed, it is opened afresh.
                let done = client
                    .batch_execute(&format!("SET ROLE {role}"))
                    .and_then(|_| client.batch_execute(&format!("ROLLBACK PREPARED {literal}")));
                client.batch_execute("RESET ROLE")?;
                done.map_err(|e| crate::db::plain(&e))
            }
            _ => Err("orca's role is not a member of its owner: an administrator must".to_string()),
        };
        whys.push(match ended {
            Ok(()) => format!(
                "{owner} left prepared transaction {gid:?} holding its locks: it was rolled back"
            ),
            Err(e) => format!(
                "{owner} left prepared transaction {gid:?} holding its locks, which can't be rolled back: {e}"
            ),
        });
    }
    Ok(whys)
}

/// What leaves orca open to its logins that only the administrator can
/// close (`sql/database_warnings.sql`), one line each.
pub fn database_warnings(client: &mut impl GenericClient) -> Result<Vec<String>, postgres::Error> {
    let row = client.query_one(sql::DATABASE_WARNINGS, &[])?;
    let (prepared, version, advisory): (i32, i32, bool) =
        (row.get("prepared"), row.get("version"), row.get("advisory"));
    Ok(warnings(prepared, version, advisory))
}

/// [`database_warnings`]'s decision, from the server's facts.
pub fn warnings(max_prepared: i32, version_num: i32, logins_take_advisory: bool) -> Vec<String> {
    let mut out = Vec::new();
    if max_prepared > 0 {
        out.push(format!(
            "max_prepared_transactions is {max_prepared}: a machine login can prepare a transaction that keeps its locks with no session (the leader rolls such ones back); set it to 0 (docs/security.md)"
        ));
    }
    if version_num < 160000 {
        out.push(
            "Postgres before 16 lets a CREATEROLE role grant itself pg_execute_server_program: orca's role is as strong as a superuser there (docs/security.md)"
                .to_string(),
        );
    }
    if logins_take_advisory {
        out.push(
            "machine logins may take advisory locks (PUBLIC may execute pg_advisory_lock): the leader ends sessions that do, but a burst can fill the server's lock table first; revoke them (docs/security.md)"
                .to_string(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hardened_server_warns_of_nothing() {
        assert!(warnings(0, 160004, false).is_empty());
        let all = warnings(10, 150018, true);
        assert_eq!(all.len(), 3);
        assert!(all[0].contains("max_prepared_transactions is 10"));
    }
}
