//! Locks orca needs that other logins could hold: advisory keys (the lead,
//! the migration lock) that any session of the database may take, and row
//! locks a machine or instance login takes through orca's functions and
//! could keep by leaving its transaction open. Sessions holding them that
//! are not orca processes of the right kind are ended (orca's role is a
//! member of `pg_signal_backend`), each with an event saying who it was.

use postgres::{Client, GenericClient};

use crate::sql;

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
            pid: r.get(0),
            role: r.get(1),
            app: r.get(2),
            from: r.get(3),
            ended: r.get(4),
        })
        .collect();
    for i in &found {
        let why = i.describe(what);
        log::warn!("{why}");
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
/// transaction for over `secs` seconds (by the database's clock), each with
/// an event. Returns how many.
pub fn end_stuck_logins(client: &mut Client, secs: f64) -> Result<usize, postgres::Error> {
    let rows = client.query(sql::LOGINS_STUCK_END, &[&secs])?;
    for r in &rows {
        let pid: i32 = r.get(0);
        let role: String = r.get(1);
        let held: f64 = r.get(2);
        let why = format!(
            "login {role} (backend pid {pid}) stayed in one transaction for {held:.0}s (over {secs:.0}s): its session was ended, so it holds no lock orca needs"
        );
        log::warn!("{why}");
        client.execute(
            sql::EVENT_ADD,
            &[&None::<i64>, &None::<String>, &"intruder", &why],
        )?;
    }
    Ok(rows.len())
}
