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
                done.map_err(|e| crate::db::fault::plain(&e))
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
/// close, and what orca's role lacks of the lock functions it uses
/// (`sql/database_warnings.sql`): one line each.
pub fn database_warnings(client: &mut impl GenericClient) -> Result<Vec<String>, postgres::Error> {
    let row = client.query_one(sql::DATABASE_WARNINGS, &[])?;
    Ok(warnings(&Hardening {
        max_prepared: row.get("prepared"),
        version_num: row.get("version"),
        logins_take_advisory: row.get("advisory"),
        logins_make_large_objects: row.get("large_objects"),
        logins_connect_to: row.get("databases"),
        logins_create_in_public: row.get("public_create"),
        orca_waits_for_lead: row.get("lead_wait"),
        orca_tries_locks: row.get("lead_try"),
    }))
}

/// The server's facts behind [`warnings`]: each of `docs/security.md`'s
/// hardening steps, done or not.
#[derive(Debug, Clone, PartialEq)]
pub struct Hardening {
    /// `max_prepared_transactions` (0 is hardened).
    pub max_prepared: i32,
    /// `server_version_num` (160000 and later is hardened).
    pub version_num: i32,
    /// Logins (PUBLIC) may execute an advisory lock function.
    pub logins_take_advisory: bool,
    /// Logins (PUBLIC) may make large objects.
    pub logins_make_large_objects: bool,
    /// Other databases of the server logins may connect to.
    pub logins_connect_to: Vec<String>,
    /// Logins (PUBLIC) may create in schema `public`.
    pub logins_create_in_public: bool,
    /// orca's role may execute `pg_advisory_lock(bigint)` (a standby
    /// waiting for the lead).
    pub orca_waits_for_lead: bool,
    /// orca's role may execute `pg_try_advisory_lock(bigint)` and
    /// `pg_try_advisory_xact_lock(bigint)` (the lead, `orca migrate`).
    pub orca_tries_locks: bool,
}

/// Of `docs/security.md`'s hardening, the steps still missing on a server
/// with `facts`, one line each naming what to run.
pub fn warnings(facts: &Hardening) -> Vec<String> {
    const STEPS: &str = "docs/security.md, \"The administrator's hardening\"";
    let mut out = Vec::new();
    if facts.max_prepared > 0 {
        out.push(format!(
            "max_prepared_transactions is {}: a machine login can prepare a transaction that keeps its locks with no session (the leader rolls such ones back); set it to 0 ({STEPS})",
            facts.max_prepared
        ));
    }
    if facts.version_num < 160000 {
        out.push(format!(
            "Postgres before 16 lets a CREATEROLE role grant itself pg_execute_server_program: orca's role is as strong as a superuser there ({STEPS})"
        ));
    }
    if facts.logins_take_advisory {
        out.push(format!(
            "machine logins may take advisory locks (PUBLIC may execute pg_advisory_lock and its kin): one that fills the server's lock table is ended within a second or two, but until then every session of every database on the server fails; REVOKE EXECUTE on them FROM PUBLIC ({STEPS})"
        ));
    }
    if facts.logins_make_large_objects {
        out.push(format!(
            "machine logins may make large objects (PUBLIC may execute lo_create, lo_creat, lo_from_bytea): REVOKE EXECUTE on them FROM PUBLIC ({STEPS})"
        ));
    }
    if !facts.logins_connect_to.is_empty() {
        const SHOWN: usize = 5;
        let dbs = &facts.logins_connect_to;
        let mut names = dbs[..dbs.len().min(SHOWN)].join(", ");
        if dbs.len() > SHOWN {
            names.push_str(&format!(" and {} more", dbs.len() - SHOWN));
        }
        out.push(format!(
            "machine logins may connect to other databases of this server, where orca doesn't watch them: {names}; REVOKE CONNECT ON DATABASE ... FROM PUBLIC ({STEPS})"
        ));
    }
    if facts.logins_create_in_public {
        out.push(format!(
            "machine logins may create objects in schema public: REVOKE CREATE ON SCHEMA public FROM PUBLIC ({STEPS})"
        ));
    }
    if !facts.orca_tries_locks {
        out.push(format!(
            "orca's role may not execute pg_try_advisory_lock(bigint) or pg_try_advisory_xact_lock(bigint): no scheduler can lead and orca migrate can't run; GRANT EXECUTE on them to orca's role ({STEPS})"
        ));
    }
    if !facts.orca_waits_for_lead {
        out.push(format!(
            "orca's role may not execute pg_advisory_lock(bigint): a standby scheduler polls for the lead every 0.1 s instead of waiting on it; GRANT EXECUTE on it to orca's role ({STEPS})"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hardened() -> Hardening {
        Hardening {
            max_prepared: 0,
            version_num: 160004,
            logins_take_advisory: false,
            logins_make_large_objects: false,
            logins_connect_to: Vec::new(),
            logins_create_in_public: false,
            orca_waits_for_lead: true,
            orca_tries_locks: true,
        }
    }

    #[test]
    fn a_hardened_server_warns_of_nothing() {
        assert!(warnings(&hardened()).is_empty());
    }

    #[test]
    fn each_missing_step_is_one_line_naming_it() {
        let open = Hardening {
            max_prepared: 10,
            version_num: 150018,
            logins_take_advisory: true,
            logins_make_large_objects: true,
            logins_connect_to: (1..=7).map(|i| format!("db{i}")).collect(),
            logins_create_in_public: true,
            orca_waits_for_lead: false,
            orca_tries_locks: false,
        };
        let all = warnings(&open);
        assert_eq!(all.len(), 8, "{all:#?}");
        for (line, names) in all.iter().zip([
            "max_prepared_transactions is 10",
            "before 16",
            "advisory locks",
            "large objects",
            "db1, db2, db3, db4, db5 and 2 more",
            "schema public",
            "pg_try_advisory_lock(bigint)",
            "pg_advisory_lock(bigint)",
        ]) {
            assert!(line.contains(names), "{line}");
            assert!(line.contains("docs/security.md"), "{line}");
        }
        // One step done: its line goes, the others stay.
        let only_wait = Hardening {
            orca_waits_for_lead: false,
            ..hardened()
        };
        assert_eq!(warnings(&only_wait).len(), 1);
    }
}
