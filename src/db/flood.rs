//! The guard against a login filling the server's shared lock table.
//!
//! Where logins may run the advisory lock functions (RDS can't revoke
//! them), one `SELECT count(pg_advisory_lock(g)) FROM generate_series(1,
//! 200000) g` fills the table the whole server shares: it fails with `out
//! of shared memory`, but the session-level locks it took stay held, and
//! from then on every statement of every database that needs an entry in
//! that table fails too, for as long as the session stays connected. New
//! logins need entries (they read shared catalogs), so no new session can
//! help; nor can a statement naming `pg_roles` or `pg_stat_activity`
//! (`sql/logins_stuck_end.sql`), or any that writes (its transaction id is
//! an entry).
//!
//! What still runs, measured on Postgres 15: a session already open, with
//! its statements already prepared, running `pg_lock_status()` (it reads
//! the table, adding nothing to it) and touching no shared catalog;
//! relation locks of weak modes on a database's own tables take a
//! backend's fast-path slots, not entries. Ending a session can't be done
//! that way (`pg_terminate_backend` reads the target's role in
//! `pg_authid`, and orca's role's memberships), so the guarding session
//! keeps a reserve: [`RESERVE`] advisory locks of its own, entries it
//! releases just before the statement that ends the flooder, which then
//! finds room for its catalogs.
//!
//! Every scheduler (leading or not) runs [`run`] on its second session,
//! the one its heartbeat shares: every [`EVERY`] it looks for sessions of
//! the server holding more than [`FLOOD_LOCKS`] advisory locks, or, when
//! the table is full (its look's probe for one entry fails), holding any,
//! so that many sessions holding a few each are found too; those that are
//! machine or instance logins are ended, with every other session of
//! their logins (while the table is full, of every login: one waiting to
//! take the freed entries would leave the guard no reserve), and their
//! logins revoked, each with an `intruder` event written once the table
//! has room again.
//! Invariants: the flood is found with no entry of the lock table; its end
//! needs only the reserve's.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::db::{Db, Fault, Link, sql};

/// More advisory locks than this held by one session is a flood. Logins
/// need none (and hold none for long: `sql/logins_stuck_end.sql` ends one
/// holding any); orca's own sessions hold at most two (the lead, the
/// migration lock) beside a guard's [`RESERVE`]; the smallest lock table
/// Postgres allows (`max_locks_per_transaction` 10, a handful of backends)
/// has room for several hundred.
pub const FLOOD_LOCKS: i64 = 64;

/// The entries of the lock table a guarding session keeps for the moment
/// the table is full: what ending a session needs there (the shared
/// catalogs `sql/flood_end.sql` reads, their indexes, and the role lookups
/// of `pg_terminate_backend`), twice over.
pub const RESERVE: i32 = 32;

/// How often the guard looks. Each look is one read-only statement over
/// the server's lock table (well under a millisecond of the server's).
pub const EVERY: Duration = Duration::from_secs(1);

/// How many `intruder` events wait in memory for the table to have room;
/// past that the oldest is dropped (its log line stays).
pub const PENDING_MAX: usize = 100;

/// How long a session found flooding that is not a login of orca's (the
/// administrator's, another application's) is left alone before it is
/// looked at again.
pub const FOREIGN_FOR: Duration = Duration::from_secs(60);

/// A session holding more than [`FLOOD_LOCKS`] advisory locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flooder {
    /// Its backend pid.
    pub pid: i32,
    /// How many advisory locks it holds.
    pub locks: i64,
}

/// Of the sessions `found` flooding now, those to end: all but those
/// already found to be no login of orca's (`foreign`, by pid), which are
/// left alone. Pids no longer flooding are forgotten from `foreign`.
pub fn to_end(found: &[Flooder], foreign: &mut HashSet<i32>) -> Vec<Flooder> {
    foreign.retain(|pid| found.iter().any(|f| f.pid == *pid));
    found
        .iter()
        .filter(|f| !foreign.contains(&f.pid))
        .copied()
        .collect()
}

/// Who was ended, as `sql/flood_end.sql` says.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    /// Its backend pid.
    pub pid: i32,
    /// The login's role.
    pub role: String,
    /// The database it was connected to.
    pub db: String,
    /// Its `application_name` (anything the client chose).
    pub app: String,
    /// Where it connected from.
    pub from: String,
    /// How many advisory locks it held.
    pub locks: i64,
    /// Whether it ended within the wait.
    pub ended: bool,
}

/// What was done to `e`, for its log line as it is ended.
pub fn describe_end(e: &Ended) -> String {
    format!(
        "login {} (backend pid {}, in database {}, application_name {:?}, from {}) held {} advisory locks, filling the server's shared lock table (every session of every database fails while it is full): {}",
        e.role,
        e.pid,
        e.db,
        e.app.chars().take(64).collect::<String>(),
        e.from,
        e.locks,
        if e.ended {
            "its session was ended"
        } else {
            "it was told to end, and had not within 2 s"
        }
    )
}

/// The `intruder` event's reason for `e`: [`describe_end`], and `revoked`,
/// what came of revoking its login (`Ok`: revoked; `Err`: why not).
pub fn describe(e: &Ended, revoked: &Result<(), String>) -> String {
    format!(
        "{}; {}",
        describe_end(e),
        match revoked {
            Ok(()) => "its login was revoked, so it can't flood again (its machine goes silent and is removed as a lost one)".to_string(),
            Err(why) => format!("its login could not be revoked: {why}"),
        }
    )
}

/// A flooder ended whose login is still to be revoked and whose event is
/// still to be written, once the lock table has room.
struct Pending {
    /// What was ended.
    ended: Ended,
    /// What came of revoking its login, once tried.
    revoked: Option<Result<(), String>>,
}

/// One guarding session's state between looks.
#[derive(Default)]
pub struct Guard {
    /// The session (`Db::sessions`) its reserve is held on.
    reserved: Option<u64>,
    /// Pids found flooding that are no login of orca's.
    foreign: HashSet<i32>,
    /// When `foreign` was last cleared (looked at again).
    foreign_since: Option<Instant>,
    /// Flooders ended whose login is not yet revoked or whose event is not
    /// yet written (the table had no room), oldest first.
    pending: Vec<Pending>,
    /// A look failed (said once until one succeeds again).
    failing: bool,
    /// Ending flooders failed (said once until it succeeds again).
    end_failing: bool,
    /// The session on which the reserve was refused for want of privilege.
    refused: Option<u64>,
    /// The session on which the probe (`sql/flood_find.sql`) was refused
    /// for want of privilege: looked for without it.
    probe: Option<u64>,
}

/// The sessions holding more than `over` advisory locks: with `probe`,
/// after finding room in the lock table (`sql/flood_find.sql`: SQLSTATE
/// 53200 if there is none), else needing none (`sql/flood_holders.sql`).
fn find(db: &mut Db, over: i64, probe: bool) -> Result<Vec<Flooder>, Fault> {
    let statement = if probe {
        sql::FLOOD_FIND
    } else {
        sql::FLOOD_HOLDERS
    };
    db.prepared(statement, |c, s| c.query(s, &[&over]))
        .map(|rows| {
            rows.iter()
                .map(|r| Flooder {
                    pid: r.get("pid"),
                    locks: r.get("n"),
                })
                .collect()
        })
}

/// SQLSTATE insufficient_privilege.
const PRIVILEGE: &str = "42501";

impl Guard {
    /// One look on `db` (the guarding session): the reserve taken on a new
    /// session, flooders ended, events written.
    pub fn round(&mut self, db: &mut Db) {
        if !db.ensure() {
            return;
        }
        let session = db.sessions;
        if self.reserved != Some(session) {
            self.reserve(db, session);
        }
        if self
            .foreign_since
            .is_none_or(|t| t.elapsed() >= FOREIGN_FOR)
        {
            self.foreign.clear();
            self.foreign_since = Some(Instant::now());
        }
        // Full (the probe found no room), whoever filled it: any session
        // holding an advisory lock is looked at, not only one over the bar.
        let mut full = false;
        let found = match find(db, FLOOD_LOCKS, self.probe != Some(session)) {
            Err(Fault::Sql(e)) if e.is(OUT_OF_MEMORY) => {
                full = true;
                find(db, 0, false)
            }
            Err(Fault::Sql(e)) if e.is(PRIVILEGE) => {
                self.probe = Some(session);
                find(db, FLOOD_LOCKS, false)
            }
            found => found,
        };
        let found = match found {
            Ok(found) => {
                self.failing = false;
                found
            }
            // An outage or a refused login is said by `Db`, once.
            Err(Fault::Down | Fault::Refused(_)) => return,
            Err(e) => {
                if !std::mem::replace(&mut self.failing, true) {
                    log::warn!("flood guard: can't read the lock table: {e}");
                }
                return;
            }
        };
        let ending = to_end(&found, &mut self.foreign);
        if !ending.is_empty() {
            self.end(db, session, &ending, full);
        }
        self.write_pending(db);
    }

    /// Takes the reserve on session `session` (the statements the flood
    /// needs prepared meanwhile, while the table has room). Refused for
    /// want of privilege (an administrator's hardening that left orca's
    /// role no `pg_try_advisory_lock(bigint)`), it is said once and not
    /// tried again on that session: the guard still finds flooders, and
    /// ends them once the table has room.
    fn reserve(&mut self, db: &mut Db, session: u64) {
        if self.refused == Some(session) {
            return;
        }
        let held = db.prepared(sql::FLOOD_RESERVE, |c, s| {
            c.query_one(s, &[&RESERVE]).map(|r| r.get::<_, i32>("held"))
        });
        let warm = db
            .prepared(sql::FLOOD_END, |c, s| {
                c.query(s, &[&Vec::<i32>::new(), &false])
            })
            .and_then(|_| find(db, FLOOD_LOCKS, false))
            .and_then(|_| find(db, FLOOD_LOCKS, true).map(|_| ()));
        if db.sessions != session {
            return;
        }
        if let Err(e) = warm {
            log::debug!("flood guard: statements not prepared: {e}");
        }
        match held {
            Ok(n) if n >= RESERVE => self.reserved = Some(session),
            Ok(_) => {}
            Err(Fault::Sql(e)) if e.is(PRIVILEGE) => {
                self.refused = Some(session);
                log::warn!(
                    "flood guard: orca's role may not execute pg_try_advisory_lock(bigint) ({e}): a session filling the server's lock table can't be ended while it is full; GRANT EXECUTE on it to orca's role (docs/security.md)"
                );
            }
            Err(e) => log::debug!("flood guard: reserve not taken: {e}"),
        }
    }

    /// Frees the reserve and ends `ending` (those that are logins of
    /// orca's), with every other session of their logins, and with `full`
    /// (the table was found full) every login's session
    /// (`sql/flood_end.sql`); the others are left alone for
    /// [`FOREIGN_FOR`].
    fn end(&mut self, db: &mut Db, session: u64, ending: &[Flooder], full: bool) {
        if self.reserved == Some(session) {
            match db.prepared(sql::FLOOD_RELEASE, |c, s| c.query(s, &[])) {
                Ok(_) => self.reserved = None,
                Err(e) => log::debug!("flood guard: reserve not released: {e}"),
            }
        }
        let pids: Vec<i32> = ending.iter().map(|f| f.pid).collect();
        let rows = db.prepared(sql::FLOOD_END, |c, s| c.query(s, &[&pids, &full]));
        // Taken again at once: the ended sessions' locks are free now.
        self.reserve(db, session);
        let rows = match rows {
            Ok(rows) => {
                self.end_failing = false;
                rows
            }
            Err(Fault::Down | Fault::Refused(_)) => return,
            Err(e) => {
                if !std::mem::replace(&mut self.end_failing, true) {
                    log::warn!(
                        "flood guard: {} holding advisory locks (backend pids {pids:?}) could not be ended yet, tried again every second: {e}",
                        crate::plural::count(pids.len() as i64, "session")
                    );
                }
                return;
            }
        };
        for f in ending {
            let Some(r) = rows.iter().find(|r| r.get::<_, i32>("pid") == f.pid) else {
                self.foreign.insert(f.pid);
                // Under the bar (looked at only because the table is full):
                // another scheduler's lead, say; not news.
                if f.locks <= FLOOD_LOCKS {
                    continue;
                }
                log::warn!(
                    "backend pid {} holds {} and is no login of orca's: left alone (the server's administrator's to end)",
                    f.pid,
                    crate::plural::count(f.locks, "advisory lock")
                );
                continue;
            };
            let ended = Ended {
                pid: f.pid,
                role: r.get("role"),
                db: r.get("db"),
                app: r.get("app"),
                from: r.get("from_addr"),
                locks: f.locks,
                ended: r.get("ended"),
            };
            log::warn!("{}", crate::db::locks::log_line(&describe_end(&ended)));
            if self.pending.len() >= PENDING_MAX {
                self.pending.remove(0);
            }
            self.pending.push(Pending {
                ended,
                revoked: None,
            });
        }
    }

    /// Revokes the logins of the flooders ended and writes their events,
    /// oldest first, until one can't be done yet (the table still full).
    fn write_pending(&mut self, db: &mut Db) {
        while let Some(p) = self.pending.first_mut() {
            if p.revoked.is_none() {
                match db.prepared(sql::MACHINE_ROLE_REVOKE, |c, s| {
                    c.execute(s, &[&p.ended.role])
                }) {
                    Ok(_) => p.revoked = Some(Ok(())),
                    Err(e) if later(&e) => {
                        log::debug!("flood guard: login not revoked yet: {e}");
                        return;
                    }
                    Err(e) => {
                        log::warn!(
                            "flood guard: login {} could not be revoked: {e}",
                            p.ended.role
                        );
                        p.revoked = Some(Err(e.to_string()));
                    }
                }
            }
            let why = describe(&p.ended, p.revoked.as_ref().unwrap_or(&Ok(())));
            let written = db.prepared(sql::EVENT_ADD, |c, s| {
                c.execute(s, &[&None::<i64>, &None::<String>, &"intruder", &why])
            });
            match written {
                Ok(_) => {
                    self.pending.remove(0);
                }
                Err(e) => {
                    log::debug!("flood guard: event not written yet: {e}");
                    return;
                }
            }
        }
    }
}

/// Whether what failed may land later: the session gone, or the lock
/// table (or other shared memory) still full (SQLSTATE 53200).
fn later(e: &Fault) -> bool {
    match e {
        Fault::Down | Fault::Refused(_) => true,
        Fault::Sql(e) => e.is(OUT_OF_MEMORY),
        Fault::Data(_) | Fault::Other(_) => false,
    }
}

/// SQLSTATE out_of_memory (a full lock table says `out of shared memory`).
const OUT_OF_MEMORY: &str = "53200";

/// The guard's loop, on `link` (a scheduler's second session, taken a look
/// at a time), every [`EVERY`] until `done` is set.
pub fn run(link: Link, done: Arc<AtomicBool>) {
    let mut guard = Guard::default();
    while !done.load(Ordering::SeqCst) {
        let began = Instant::now();
        guard.round(&mut link.lock());
        while began.elapsed() < EVERY && !done.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(pid: i32, locks: i64) -> Flooder {
        Flooder { pid, locks }
    }

    #[test]
    fn flooders_are_ended_but_those_found_foreign_are_left_alone() {
        let mut foreign = HashSet::from([7, 9]);
        let found = [f(5, 700), f(7, 100)];
        assert_eq!(to_end(&found, &mut foreign), vec![f(5, 700)]);
        // 9 floods no more: forgotten (its pid may come back as a login).
        assert_eq!(foreign, HashSet::from([7]));
        assert_eq!(to_end(&[], &mut foreign), vec![]);
        assert!(foreign.is_empty());
    }

    #[test]
    fn the_event_names_the_login_its_database_and_the_locks() {
        let mut e = Ended {
            pid: 42,
            role: "orca_m_s_1".into(),
            db: "postgres".into(),
            app: "x".repeat(100),
            from: "10.0.0.7".into(),
            locks: 726,
            ended: true,
        };
        let why = describe(&e, &Ok(()));
        for want in [
            "login orca_m_s_1 (backend pid 42, in database postgres",
            "from 10.0.0.7",
            "held 726 advisory locks",
            "its session was ended",
            "its login was revoked",
        ] {
            assert!(why.contains(want), "{why}");
        }
        assert!(
            !why.contains(&"x".repeat(65)),
            "application_name cut: {why}"
        );
        e.ended = false;
        let why = describe(&e, &Err("permission denied".into()));
        assert!(why.contains("had not within 2 s"), "{why}");
        assert!(
            why.contains("its login could not be revoked: permission denied"),
            "{why}"
        );
    }
}
