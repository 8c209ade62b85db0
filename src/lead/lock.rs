//! The lead lock: `LEAD_LOCK`, a session advisory lock only the leading
//! scheduler holds, on the session it decides on. Its key, taking it, who
//! holds it, and freeing one held by a session that can't lead any more (an
//! older session of this very process, or a session that is no scheduler).
//!
//! Invariants:
//! * Only a session whose `application_name` starts with [`SCHEDULER_APP`]
//!   may hold the lock; any other holder is ended, with an event.
//! * A session of this process is told apart from any other by its whole
//!   `application_name` ([`application_name`]: host, pid and a random tag).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use postgres::Client;

use crate::db::Db;
use crate::db::sql;

/// The session advisory lock the leading scheduler holds.
pub const LEAD_LOCK: i64 = 1869767525;

/// The application_name every scheduler's sessions start with (see
/// [`application_name`]).
pub const SCHEDULER_APP: &str = "orca scheduler";

/// The `application_name` of this process's sessions: host and pid for
/// people, and a random tag that tells this very process apart from any
/// other (pids repeat across containers, hosts share names).
pub fn application_name(host: &str) -> String {
    use std::hash::BuildHasher;
    let tag = std::collections::hash_map::RandomState::new().hash_one(std::process::id());
    format!(
        "{SCHEDULER_APP} host {host} pid {} tag {:08x}",
        std::process::id(),
        tag as u32
    )
}

/// Who holds `LEAD_LOCK`, as `host H pid P`, if anyone.
pub fn holder(client: &mut Client) -> Option<String> {
    let row = client.query_opt(sql::LEAD_HOLDER, &[&LEAD_LOCK]).ok()??;
    let app: Option<String> = row.get("application_name");
    let addr: Option<String> = row.get("client_addr");
    let backend: i32 = row.get("backend");
    Some(holder_named(app.as_deref(), addr.as_deref(), backend))
}

/// A holder as people read it: a scheduler by its host and pid (its tag
/// left off), any other session by where it connects from.
pub fn holder_named(app: Option<&str>, addr: Option<&str>, backend: i32) -> String {
    match app {
        Some(a) if a.starts_with(SCHEDULER_APP) => a
            .trim_start_matches(SCHEDULER_APP)
            .split(" tag ")
            .next()
            .unwrap_or_default()
            .trim()
            .to_string(),
        _ => format!(
            "a session from {} (backend pid {backend})",
            addr.unwrap_or("a local socket")
        ),
    }
}

/// Who holds `LEAD_LOCK`, for a message ("another process" if that can't
/// be told).
pub fn who_leads(db: &mut Db) -> String {
    db.run(|c| Ok(holder(c)))
        .ok()
        .flatten()
        .unwrap_or_else(|| "another process".into())
}

/// If `LEAD_LOCK` is held by an older session of this very process (left
/// behind by a network cut the server has not noticed yet), ends that
/// session so the lock is free. Returns whether it did.
pub fn free_own_stale(client: &mut Client, app: &str) -> bool {
    let Ok(Some(row)) = client.query_opt(sql::LEAD_HOLDER, &[&LEAD_LOCK]) else {
        return false;
    };
    let holder: Option<String> = row.get("application_name");
    let backend: i32 = row.get("backend");
    if holder.as_deref() != Some(app) {
        return false;
    }
    log::warn!("the lead is held by an older session of this process: ending it");
    client
        .query_one(sql::LEAD_TERMINATE, &[&backend])
        .is_ok_and(|r| r.get::<_, bool>("ended"))
}

/// Ends the sessions holding `LEAD_LOCK` that are not orca schedulers, with
/// an event each; true if there were any.
pub fn end_intruders(client: &mut Client) -> Result<bool, postgres::Error> {
    let sessions =
        crate::db::locks::end_intruders(client, LEAD_LOCK, "the lead lock", SCHEDULER_APP, true)?;
    let prepared = crate::db::locks::free_from_prepared(client, LEAD_LOCK)?;
    for why in &prepared {
        crate::db::locks::record(client, &format!("the lead lock: {why}"))?;
    }
    Ok(!sessions.is_empty() || !prepared.is_empty())
}

/// Tries `LEAD_LOCK` once on this session: whether it holds it now.
pub fn try_take(client: &mut Client) -> Result<bool, postgres::Error> {
    Ok(client.query_one(sql::LEAD_TRY, &[&LEAD_LOCK])?.get("held"))
}

/// Whether this process polls for the lead instead of waiting on the lock:
/// set once orca's role was refused `pg_advisory_lock` (an administrator's
/// hardening that revoked it, `docs/security.md`).
static POLLS_FOR_LEAD: AtomicBool = AtomicBool::new(false);

/// How often a standby that may not wait on the lock tries it instead.
const LEAD_POLL: Duration = Duration::from_millis(100);

/// Waits up to `wait` for `LEAD_LOCK` on this session: taken the moment
/// its holder gives it up (a deploy's hand-over); false if the time passed
/// first. Where orca's role may not execute `pg_advisory_lock`, it tries
/// the lock every [`LEAD_POLL`] instead (said once; the scheduler's start
/// warned why).
pub fn wait_take(client: &mut Client, wait: Duration) -> Result<bool, postgres::Error> {
    let taken = if POLLS_FOR_LEAD.load(Ordering::Relaxed) {
        poll_lead(client, wait)?
    } else {
        match block_on_lead(client, wait) {
            Err(e) if e.code() == Some(&postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) => {
                POLLS_FOR_LEAD.store(true, Ordering::Relaxed);
                // The start's hardening warnings said why, at warn.
                log::info!(
                    "this standby tries the lead every {:.1} s (it may not wait on the lock)",
                    LEAD_POLL.as_secs_f64()
                );
                poll_lead(client, wait)?
            }
            other => other?,
        }
    };
    Ok(taken)
}

/// Waits on the lead lock for up to `wait` (`lock_timeout`).
fn block_on_lead(client: &mut Client, wait: Duration) -> Result<bool, postgres::Error> {
    let mut tx = client.transaction()?;
    let ms = format!("{}ms", wait.as_millis().max(1));
    tx.query_one(sql::LOCK_TIMEOUT_LOCAL, &[&ms])?;
    match tx.query_one(sql::LEAD_WAIT, &[&LEAD_LOCK]) {
        Ok(_) => {}
        Err(e) if e.code() == Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE) => {
            return Ok(false);
        }
        Err(e) => return Err(e),
    }
    tx.commit()?;
    Ok(true)
}

/// Tries the lead lock every [`LEAD_POLL`] for up to `wait`.
fn poll_lead(client: &mut Client, wait: Duration) -> Result<bool, postgres::Error> {
    let until = Instant::now() + wait;
    loop {
        if try_take(client)? {
            return Ok(true);
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        std::thread::sleep(left.min(LEAD_POLL));
    }
}

/// Takes `LEAD_LOCK` on this session if it is free, or held by an older
/// session of this process's (see [`free_own_stale`]).
/// A session holding it that is not an orca scheduler (another role, or
/// another `application_name`: a machine login, say) is ended first.
pub fn take(client: &mut Client, app: &str) -> Result<bool, postgres::Error> {
    if try_take(client)? {
        return Ok(true);
    }
    if !end_intruders(client)? && !free_own_stale(client, app) {
        return Ok(false);
    }
    try_take(client)
}

/// Gives up `LEAD_LOCK` (every advisory lock of this session).
pub fn release(client: &mut Client) -> Result<(), postgres::Error> {
    client.query_one(sql::LEAD_RELEASE, &[]).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_as_people_read_them() {
        let app = "orca scheduler host h pid 7 tag 0badf00d";
        assert_eq!(holder_named(Some(app), None, 1), "host h pid 7");
        assert_eq!(
            holder_named(Some("psql"), Some("10.0.0.9/32"), 42),
            "a session from 10.0.0.9/32 (backend pid 42)"
        );
        assert_eq!(
            holder_named(None, None, 42),
            "a session from a local socket (backend pid 42)"
        );
    }

    #[test]
    fn application_names_start_with_the_scheduler_prefix() {
        let app = application_name("h");
        assert!(app.starts_with(SCHEDULER_APP), "{app}");
        assert_eq!(
            holder_named(Some(&app), None, 1),
            format!("host h pid {}", std::process::id())
        );
    }
}
