//! Pool machines: their rows (`orca.pool_machines`) and their credentials.
//!
//! A machine's credentials are a login role of its own (`orca_m_<stack>_<id>`,
//! a member of `orca_worker`) and a random secret: the token `ROLE:SECRET`
//! the machine boots with. The secret reaches Postgres only as a SCRAM
//! verifier, so neither the server nor its log ever holds it; orca never
//! logs or prints it.
//!
//! Invariants:
//! * Removing a machine marks it ending first (an idle one only if it is
//!   still idle: a claim and the mark lock the same row), then revokes its
//!   role (no more logins, its sessions ended), then deletes the machine,
//!   then ends its row: a machine being removed takes no other run.
//! * A role no live row holds is dropped by the scaler ([`orphaned_roles`]).

use postgres::Client;

use crate::db::sql;
use crate::secrets::scram;

/// A machine as the scaler sees it, by the database's clock.
#[derive(Clone, Debug)]
pub struct Machine {
    /// Its row id.
    pub id: i64,
    /// Its pool.
    pub pool: String,
    /// `orca-<pool>-<id>`.
    pub name: String,
    /// Its instance type.
    pub type_: String,
    /// Its location.
    pub location: String,
    /// The architecture it runs (EC2's names; `amd64` in a row written
    /// before orca stored EC2's; empty in one written before orca stored
    /// it for every machine).
    pub arch: String,
    /// Its login role.
    pub role: String,
    /// The provider's id for it.
    pub provider_id: Option<String>,
    /// Runs its worker takes at once.
    pub slots: i32,
    /// Whether its worker was ever seen (else it is booting).
    pub seen: bool,
    /// Seconds since its worker was last heard from (or since it was made).
    pub silent: f64,
    /// Seconds it has run nothing.
    pub idle: f64,
    /// Runs running on it now.
    pub running: i64,
    /// Seconds since it was made.
    pub age: f64,
    /// When it last ran something, as stored (a conditional removal
    /// compares it: see `sql/machine_ending.sql`).
    pub busy_at: chrono::DateTime<chrono::Utc>,
    /// Its removal has begun.
    pub ending: bool,
    /// `ec2`: the region it was made in (it is removed there, whatever the
    /// pool's region is now).
    pub region: Option<String>,
    /// How it was bought: `on-demand` or `spot`.
    pub market: String,
    /// The spot notice its worker heard (migration 31): `interrupted`,
    /// `draining` (a rebalance recommendation) or none. Either way it
    /// claims nothing more, and the scaler counts none of its room.
    pub notice: Option<String>,
}

impl Machine {
    /// Its state in words: removing, interrupted or draining (a spot
    /// notice heard), booting, silent (no beat for 5 s or
    /// more while it runs something: its worker beats every second; for
    /// 15 s or more while idle: an idle worker listening for wake-ups
    /// beats every 6 s), busy or idle.
    pub fn state(&self) -> &'static str {
        let silent_after = if self.running > 0 { 5.0 } else { 15.0 };
        if self.ending {
            "removing"
        } else if self.notice.as_deref() == Some("interrupted") {
            "interrupted"
        } else if self.notice.is_some() {
            "draining"
        } else if !self.seen {
            "booting"
        } else if self.silent >= silent_after {
            "silent"
        } else if self.running > 0 {
            "busy"
        } else {
            "idle"
        }
    }
}

/// Every live machine.
pub fn live(client: &mut Client) -> Result<Vec<Machine>, postgres::Error> {
    Ok(of_rows(&client.query(sql::POOL_MACHINES_LIVE, &[])?))
}

/// The machines in `rows`, the rows of `sql::POOL_MACHINES_LIVE` (the
/// scaler's pass runs it prepared once a session).
pub fn of_rows(rows: &[postgres::Row]) -> Vec<Machine> {
    rows.iter()
        .map(|r| Machine {
            id: r.get("id"),
            pool: r.get("pool"),
            name: r.get("name"),
            type_: r.get("type"),
            location: r.get("location"),
            arch: r.get("arch"),
            role: r.get("role"),
            provider_id: r.get("provider_id"),
            slots: r.get("slots"),
            seen: r.get("seen"),
            silent: r.get("silent"),
            idle: r.get("idle"),
            running: r.get("running"),
            age: r.get("age"),
            busy_at: r.get("busy_at"),
            ending: r.get("ending"),
            region: r.get("region"),
            market: r.get("market"),
            notice: r.get("notice"),
        })
        .collect()
}

/// A machine's credentials. `Debug` and `Display` never show the secret.
pub struct Token {
    /// The login role.
    pub role: String,
    secret: String,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token({}:***)", self.role)
    }
}

impl Token {
    /// The value of `ORCA_TOKEN` for the machine: `ROLE:SECRET`.
    pub fn reveal(&self) -> String {
        format!("{}:{}", self.role, self.secret)
    }
}

/// The name prefix of this stack's machine roles.
pub fn role_prefix(stack: &str) -> String {
    format!("orca_m_{stack}_")
}

/// Makes login role `role` with `statement` (`sql::MACHINE_ROLE_MAKE`,
/// `sql::INSTANCE_ROLE_MAKE`: it decides the role's group) and a random
/// secret, sent as a SCRAM verifier.
pub fn make_login(client: &mut Client, role: &str, statement: &str) -> Result<Token, String> {
    let role = role.to_string();
    let (secret, verifier) = scram::new_secret()?;
    client
        .execute(statement, &[&role, &verifier])
        .map_err(|e| format!("can't make role {role}: {}", crate::db::plain(&e)))?;
    Ok(Token { role, secret })
}

/// Revokes role `role`: no more logins, its open sessions ended. Twice, each
/// its own transaction: a session that logged in after the first ended the
/// others but before it committed (a login reconnecting at once) is ended
/// by the second, when no new one can log in.
pub fn revoke(client: &mut Client, role: &str) -> Result<(), postgres::Error> {
    for _ in 0..2 {
        client.execute(sql::MACHINE_ROLE_REVOKE, &[&role])?;
    }
    Ok(())
}

/// Drops revoked role `role` and what it owns; false if that can't be done
/// now (it is tried again as an orphan on a later pass). What logins and
/// their groups own is swept first ([`super::objects::sweep`]), while orca's
/// role can still act as the group through this login.
pub fn drop_role(client: &mut Client, role: &str) -> Result<bool, postgres::Error> {
    if let Err(e) = super::objects::sweep(client) {
        log::warn!(
            "what logins made is not swept before {role} is dropped: {}",
            crate::db::plain(&e)
        );
    }
    Ok(client.query_one(sql::MACHINE_ROLE_DROP, &[&role])?.get(0))
}

/// What [`mark_ending`] came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    /// Marked ending (or it was already).
    Marked,
    /// Not marked: its row is held by another session (a claim under way,
    /// or its login), which a mark does not wait for. Worth asking again
    /// soon: a worker's round holds it for milliseconds.
    Held,
    /// Not marked: it took a run since it was seen idle, it is gone, or the
    /// lead moved.
    Not,
}

/// Marks machine `id` as being removed for `why` (a removal taken up again
/// keeps its first why), so it claims nothing more. With `busy_at` (an idle
/// machine's, as seen), only if it is still idle: not when it took a run
/// since. With `leader` (a backend pid), only while that session holds the
/// lead lock: the fence of a write made on another session. A held row is
/// not waited for ([`Mark::Held`]). `statement` is `sql/machine_ending.sql`,
/// as text or prepared.
pub fn mark_ending<S: postgres::ToStatement + ?Sized>(
    client: &mut Client,
    statement: &S,
    id: i64,
    busy_at: Option<chrono::DateTime<chrono::Utc>>,
    why: &str,
    leader: Option<i32>,
) -> Result<Mark, postgres::Error> {
    let row = client.query_one(
        statement,
        &[&id, &busy_at, &why, &leader, &crate::lead::lock::LEAD_LOCK],
    )?;
    Ok(match (row.get(0), row.get(1)) {
        (true, _) => Mark::Marked,
        (false, true) => Mark::Held,
        (false, false) => Mark::Not,
    })
}

/// Takes machine `id`'s row from its login, which holds it (its removal was
/// skipped for the held row for [`HELD_FOR_GOOD`]): the login shut out
/// first (no more logins, its sessions ended: twice, as [`revoke`]), then
/// the machine marked ending for `why` whatever it did since it was seen
/// (a run it claimed is queued again when its row is ended), waiting up to
/// [`TAKE_WAIT`] for its ended sessions' locks to go; an `intruder` event
/// names the login ([`say_taken`]; `name` is the machine's). With `leader`,
/// only while that session holds the lead (`sql/machine_ending.sql`). What
/// the mark came to; `None` if the login was not shut out (the machine
/// gone, or the lead moved).
pub fn take_from_login(
    client: &mut Client,
    id: i64,
    name: &str,
    why: &str,
    leader: Option<i32>,
) -> Result<Option<Mark>, postgres::Error> {
    let lock = crate::lead::lock::LEAD_LOCK;
    let mut role = None;
    for _ in 0..2 {
        match client.query_opt(sql::MACHINE_LOGIN_SHUT, &[&id, &leader, &lock])? {
            Some(r) => role = Some(r.get::<_, String>(0)),
            None => return Ok(None),
        }
    }
    let Some(role) = role else { return Ok(None) };
    crate::db::locks::record(client, &say_taken(&role, name, why))?;
    let until = std::time::Instant::now() + TAKE_WAIT;
    loop {
        let mark = mark_ending(client, sql::MACHINE_ENDING, id, None, why, leader)?;
        if mark != Mark::Held || std::time::Instant::now() >= until {
            return Ok(Some(mark));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// How long a machine's row may be found held at every try before it is
/// taken from its login ([`take_from_login`]): a worker's round holds it
/// for milliseconds, a login that holds it longer is not doing a worker's
/// work.
pub const HELD_FOR_GOOD: std::time::Duration = std::time::Duration::from_secs(2);

/// How long [`take_from_login`] waits for the sessions it ended to let go
/// of the row (they go in milliseconds).
pub const TAKE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether a machine whose removal has been skipped for its held row since
/// `first` (held at every try since) is taken from its login `now`.
pub fn held_for_good(first: std::time::Instant, now: std::time::Instant) -> bool {
    now.saturating_duration_since(first) >= HELD_FOR_GOOD
}

/// The `intruder` event's words for login `role`, which held machine
/// `name`'s row while its removal (`why`) was due.
pub fn say_taken(role: &str, name: &str, why: &str) -> String {
    format!(
        "login {role} held its machine {name}'s row for over {}s while its removal was due ({why}): its login was revoked and its sessions ended",
        HELD_FOR_GOOD.as_secs()
    )
}

/// This stack's machine roles that no live row holds.
pub fn orphaned_roles(client: &mut Client, stack: &str) -> Result<Vec<String>, postgres::Error> {
    Ok(client
        .query(sql::ROLES_ORPHANED, &[&role_prefix(stack)])?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_is_taken_from_its_login_only_once_held_at_every_try_for_two_seconds() {
        let first = std::time::Instant::now();
        let at = |ms| first + std::time::Duration::from_millis(ms);
        assert!(!held_for_good(first, first));
        assert!(!held_for_good(first, at(1999)));
        assert!(held_for_good(first, at(2000)));
        assert!(held_for_good(first, at(60_000)));
        // A clock read before `first` (another thread's) is no hold.
        assert!(!held_for_good(at(10), first));
    }

    #[test]
    fn a_token_does_not_show_its_secret() {
        let t = Token {
            role: "orca_m_x_1".into(),
            secret: "hunter2".into(),
        };
        assert!(!format!("{t:?}").contains("hunter2"));
        assert_eq!(t.reveal(), "orca_m_x_1:hunter2");
    }
}
