//! Removals begun off the tick: every `ORCA_POOL_REMOVALS_SECONDS` (unset:
//! `ORCA_POOL_SCALE_SECONDS`, at least 0.1 s), and as the
//! next machine comes due, while this process leads, on the scheduler's
//! side connection, every pool's machines idle past its `idle_seconds` (and
//! a retired pool's idle machines) are marked ending: the one place these
//! removals are decided (the pass begins only those that need silence
//! judged, `pools::remove`). A tick held up (a
//! slow provider call in a pass, a stalled statement) then holds up no
//! removal's start: a machine marked ending claims nothing more, and the
//! next pass takes its removal up and finishes it (revoke, delete, end).
//!
//! Only what needs no silence judged: a machine lost or never booted is
//! the pass's to find (it knows when silence may be judged).
//!
//! Invariant: a mark is written only while the leading session holds the
//! lead lock, checked in the same statement (`sql/machine_ending.sql`'s
//! fence on the leader's backend pid): this thread's session is not the
//! leading one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::db::{Fault, Link, sql};
use crate::lead::Known;
use crate::machines::logins::{self, Machine, Mark};
use crate::pools::decide::{self, Removal};
use crate::pools::say::say_removing;
use crate::pools::view::view_of;
use crate::settings::PoolTiming;

/// Why the removals this thread could not begin failed (a fault other
/// than an outage), by machine id, as of its last try of each: the pass
/// says it in the pool's status ("can't remove a machine: ..."), as it
/// said its own before these removals were this thread's alone. Shared
/// with the scaler ([`crate::pools::PoolScaler::unbegun`]).
#[derive(Clone, Default)]
pub struct Unbegun(Arc<Mutex<HashMap<i64, String>>>);

impl Unbegun {
    /// Why machine `id`'s removal could not begin at its last try, if it
    /// could not.
    pub fn why(&self, id: i64) -> Option<String> {
        self.map().get(&id).cloned()
    }

    /// Machine `id`'s last try failed for `why`, or (`None`) did not.
    fn said(&self, id: i64, why: Option<String>) {
        match why {
            Some(why) => self.map().insert(id, why),
            None => self.map().remove(&id),
        };
    }

    /// Forgets every machine but those `keep` says (no longer a candidate,
    /// or this process no longer leads).
    fn keep(&self, keep: impl Fn(i64) -> bool) {
        self.map().retain(|id, _| keep(*id));
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<i64, String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Whether this thread begins removal `r`: an idle or a retired pool's
/// machine (one taken up again, lost or never booted is the pass's).
pub fn begins(r: &Removal) -> bool {
    matches!(r, Removal::Idle { .. } | Removal::Retired { .. })
}

/// Marks, every `timing.removals` seconds while `leader` says this process
/// leads, the machines whose removal may begin (see the module's doc), on
/// `link`; until `done`. It looks again sooner when a machine comes due
/// before then ([`decide::idle_due`]), so that an idle machine's removal
/// begins within a look's time of `idle_seconds`, not a pass later; and a
/// mark skipped for a held row ([`Mark::Held`]) is asked again between
/// looks ([`Held`]), not only at the next.
pub fn run(link: Link, timing: PoolTiming, leader: Known, unbegun: Unbegun, done: Arc<AtomicBool>) {
    let every = Duration::from_secs_f64(timing.removals);
    let mut next = Instant::now();
    let mut held: HashMap<i64, Held> = HashMap::new();
    while !done.load(Ordering::SeqCst) {
        let now = Instant::now();
        if now < next {
            retry_held(&link, &leader, &unbegun, &done, &mut held, now);
            let wake = held.values().map(|h| h.again).fold(next, Instant::min);
            std::thread::sleep(
                wake.saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(50)),
            );
            continue;
        }
        let began = now;
        // Not leading: asked again soon, so that a lead just taken is
        // looked after at once, not a pass later.
        let Some(pid) = leader.pid() else {
            unbegun.keep(|_| false);
            next = began + MIN_LOOK_GAP;
            continue;
        };
        next = began + every;
        // The link is shared with the runs' beats and ends: held for the
        // reads, then for one mark at a time.
        let found = candidates(&link, &timing);
        let (candidates, due) = match found {
            Ok(found) => found,
            Err(Fault::Down | Fault::Refused(_)) => {
                log::debug!("removals: no look (the database is out of reach); the next in a pass");
                continue;
            }
            Err(e) => {
                log::warn!("removals begun off the tick: {e}");
                continue;
            }
        };
        log::debug!(
            "removals: looked: {} to begin ({}), the next due in {}",
            candidates.len(),
            candidates
                .iter()
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>()
                .join(" "),
            due.map_or("none".to_string(), |d| format!("{d:.2}s"))
        );
        if let Some(due) = due {
            // Judged by the database's clock at the look: due that long
            // after it (and a little more, so that it has passed), but
            // never sooner than a moment after this look began.
            let at =
                Instant::now() + Duration::from_secs_f64(due.clamp(0.0, timing.scale)) + DUE_MARGIN;
            next = next.min(at.max(began + MIN_LOOK_GAP));
        }
        unbegun.keep(|id| candidates.iter().any(|c| c.id == id));
        // Held marks are kept across looks only while still held: one that
        // is marked, or no longer a candidate, is forgotten, and one still
        // held keeps the time it is given up at.
        let mut still: HashMap<i64, Held> = HashMap::new();
        for m in candidates.into_iter().take(MARKS_PER_ROUND) {
            if leader.pid() != Some(pid) || done.load(Ordering::SeqCst) {
                break;
            }
            match mark(&link, &unbegun, &m, pid) {
                None => break,
                Some(Mark::Held) => {
                    let at = Instant::now();
                    let h = match held.remove(&m.id) {
                        Some(h) if h.pid == pid => Held { m, ..h },
                        _ => Held {
                            m,
                            pid,
                            again: at + HELD_AGAIN,
                            gap: HELD_AGAIN,
                            first: at,
                        },
                    };
                    if logins::held_for_good(h.first, at) {
                        take(&link, &unbegun, &h.m, pid);
                    } else if still.len() < HELD_AT_MOST {
                        still.insert(h.m.id, h);
                    }
                }
                Some(_) => {}
            }
        }
        held = still;
    }
}

/// A mark skipped because its machine's row was held (a worker's round
/// holds it for a few milliseconds): asked again [`HELD_AGAIN`] later, then
/// twice as long after each time, and last at
/// [`logins::HELD_FOR_GOOD`] after it was first skipped: held then too,
/// the row is taken from its login ([`logins::take_from_login`]: shut out,
/// its sessions ended, then marked), since no worker's round holds it that
/// long. So a login that holds its row for good costs about seven marks
/// and its removal, not one mark every few milliseconds for ever; and at
/// most [`HELD_AT_MOST`] are asked again between looks.
struct Held {
    m: Candidate,
    /// The leading session's pid it was looked at under: the lead moved,
    /// it is dropped.
    pid: i32,
    again: Instant,
    gap: Duration,
    /// When its mark was first skipped.
    first: Instant,
}

/// Asks again, as of `now`, the held marks that are due (see [`Held`]);
/// forgets them all if the lead moved.
fn retry_held(
    link: &Link,
    leader: &Known,
    unbegun: &Unbegun,
    done: &AtomicBool,
    held: &mut HashMap<i64, Held>,
    now: Instant,
) {
    let Some(pid) = leader.pid() else {
        held.clear();
        return;
    };
    held.retain(|_, h| {
        if h.pid != pid {
            return false;
        }
        if now < h.again || done.load(Ordering::SeqCst) {
            return true;
        }
        match mark(link, unbegun, &h.m, pid) {
            Some(Mark::Held) if logins::held_for_good(h.first, now) => {
                take(link, unbegun, &h.m, pid);
                false
            }
            Some(Mark::Held) => {
                (h.gap, h.again) = back_off(h.first, now, h.gap);
                true
            }
            // Marked, gone or busy (or no database): the next look says.
            _ => false,
        }
    });
}

/// A held mark asked again at `now` and held still, first skipped at
/// `first`, last after `gap`: the next gap (twice as long) and when it is
/// asked again, never later than [`logins::HELD_FOR_GOOD`] after `first`
/// (when a row held still is taken from its login).
fn back_off(first: Instant, now: Instant, gap: Duration) -> (Duration, Instant) {
    let gap = gap * 2;
    (gap, (now + gap).min(first + logins::HELD_FOR_GOOD))
}

/// Marks `m` ending on `link`, fenced on the lead of session `pid`, and
/// says so (a fault other than an outage in `unbegun` too); what came of
/// it, or `None` when the database is out of reach.
fn mark(link: &Link, unbegun: &Unbegun, m: &Candidate, pid: i32) -> Option<Mark> {
    // Prepared: a held row's mark is asked again between looks.
    let marked = link.lock().prepared(sql::MACHINE_ENDING, |c, st| {
        logins::mark_ending(c, st, m.id, m.seen_busy, &m.why, Some(pid))
    });
    match &marked {
        Ok(_) => unbegun.said(m.id, None),
        Err(Fault::Down | Fault::Refused(_)) => {}
        Err(e) => unbegun.said(m.id, Some(e.to_string())),
    }
    match marked {
        Ok(Mark::Marked) => {
            log::info!("{}", say_removing(&m.pool, &m.name, &m.why));
            Some(Mark::Marked)
        }
        Ok(Mark::Held) => {
            log::debug!("removals: machine {}: its row is held; asked again", m.name);
            Some(Mark::Held)
        }
        Ok(Mark::Not) => {
            log::debug!(
                "removals: machine {} not marked (busy since, gone, or the lead moved)",
                m.name
            );
            Some(Mark::Not)
        }
        Err(Fault::Down | Fault::Refused(_)) => None,
        // This machine's alone (the pass says it in the pool's status,
        // from `unbegun`).
        Err(e) => {
            log::warn!("pool {}: machine {}: {e}", m.pool, m.name);
            Some(Mark::Not)
        }
    }
}

/// Takes `m`'s row from its login, which has held it at every try for
/// [`logins::HELD_FOR_GOOD`] (see [`logins::take_from_login`]), fenced on
/// the lead of session `pid`, with an `intruder` event naming the login.
/// The pass finishes its removal.
fn take(link: &Link, unbegun: &Unbegun, m: &Candidate, pid: i32) {
    let taken = link
        .lock()
        .run(|c| logins::take_from_login(c, m.id, &m.name, &m.why, Some(pid)));
    match &taken {
        Ok(_) => unbegun.said(m.id, None),
        Err(Fault::Down | Fault::Refused(_)) => {}
        Err(e) => unbegun.said(m.id, Some(e.to_string())),
    }
    match taken {
        Ok(Some(Mark::Marked)) => {
            log::info!("{}", say_removing(&m.pool, &m.name, &m.why));
        }
        Ok(Some(Mark::Held)) => log::warn!(
            "pool {}: machine {}: its login is shut out, but its row is still held: the pass takes it up",
            m.pool,
            m.name
        ),
        Ok(Some(Mark::Not) | None) => {
            log::debug!("removals: machine {} gone, or the lead moved", m.name)
        }
        Err(Fault::Down | Fault::Refused(_)) => {}
        Err(e) => log::warn!("pool {}: machine {}: {e}", m.pool, m.name),
    }
}

/// At most this many machines are marked a round (the rest on the next):
/// each mark holds the shared link for a statement.
const MARKS_PER_ROUND: usize = 100;

/// A mark skipped for a held row is first asked again this long after (see
/// [`Held`]).
const HELD_AGAIN: Duration = Duration::from_millis(25);

/// At most this many held marks are asked again between looks (the rest
/// at the looks).
const HELD_AT_MOST: usize = 16;

/// A look for a machine coming due is made this long after it is due.
const DUE_MARGIN: Duration = Duration::from_millis(10);

/// Looks begin at least this far apart, however soon machines come due (a
/// look reads every pool and live machine: a fleet whose machines come due
/// one after another makes no more than four a second).
const MIN_LOOK_GAP: Duration = Duration::from_millis(250);

/// A machine whose removal this thread may begin.
struct Candidate {
    id: i64,
    pool: String,
    name: String,
    why: String,
    /// Its `busy_at` as seen, when it goes for idleness.
    seen_busy: Option<chrono::DateTime<chrono::Utc>>,
}

/// Every pool read and its removals decided: the idle and retired ones, and
/// in how many seconds the next machine comes due ([`decide::idle_due`]).
/// Its two statements prepared once a session, as the pass's are (a look is
/// repeated up to four times a second); the link held for both.
fn candidates(link: &Link, timing: &PoolTiming) -> Result<(Vec<Candidate>, Option<f64>), Fault> {
    let (rows, machines) = {
        let mut db = link.lock();
        let rows = db.prepared(sql::POOLS_VIEW, |c, s| c.query(s, &[&timing.grow_after]))?;
        let machines = db.prepared(sql::POOL_MACHINES_LIVE, |c, s| c.query(s, &[]))?;
        (rows, logins::of_rows(&machines))
    };
    let mut out = Vec::new();
    let mut due: Option<f64> = None;
    for row in &rows {
        let Some(view) = view_of(row) else {
            continue;
        };
        let mine: Vec<&Machine> = machines
            .iter()
            .filter(|m| m.pool == view.pool.name)
            .collect();
        if let Some(d) = decide::idle_due(&view, &mine) {
            due = Some(due.map_or(d, |x: f64| x.min(d)));
        }
        let shrink = decide::shrink(&view, &mine, timing, false);
        // (Read only when debug lines are asked for: a look is repeated
        // up to four times a second.)
        let debug = log::log_enabled!(log::Level::Debug);
        for m in mine
            .iter()
            .filter(|_| debug)
            .filter(|m| !m.ending && m.idle >= view.pool.idle_seconds)
            .filter(|m| !shrink.remove.iter().any(|(r, _)| r.id == m.id))
        {
            log::debug!(
                "removals: kept {}: idle {:.1}s, running {}, seen {}, the pool's demand {}",
                m.name,
                m.idle,
                m.running,
                m.seen,
                shrink.demand
            );
        }
        for (m, removal) in shrink.remove.iter().filter(|(_, r)| begins(r)) {
            out.push(Candidate {
                id: m.id,
                pool: view.pool.name.clone(),
                name: m.name.clone(),
                why: removal.why(),
                seen_busy: removal.if_idle().then_some(m.busy_at),
            });
        }
    }
    Ok((out, due))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_idle_and_retired_machines_are_begun_off_the_tick() {
        assert!(begins(&Removal::Idle {
            idle: 30.0,
            idle_seconds: 20.0
        }));
        assert!(begins(&Removal::Retired { pool: "p".into() }));
        assert!(!begins(&Removal::Resumed));
        assert!(!begins(&Removal::NeverBooted { boot: 900.0 }));
        assert!(!begins(&Removal::Silent { silent: 400.0 }));
    }

    #[test]
    fn a_removal_not_begun_is_known_until_a_try_of_it_comes_to_anything_else() {
        let u = Unbegun::default();
        let pass = u.clone();
        u.said(7, Some("statement timeout".into()));
        u.said(8, Some("no removal today".into()));
        assert_eq!(pass.why(7).as_deref(), Some("statement timeout"));
        u.said(7, None);
        assert_eq!(pass.why(7), None, "marked, held or busy since");
        // No longer a candidate (busy, gone), or the lead moved.
        u.keep(|id| id != 8);
        assert_eq!(pass.why(8), None);
        u.said(9, Some("x".into()));
        u.keep(|_| false);
        assert_eq!(pass.why(9), None);
    }

    #[test]
    fn a_held_mark_is_asked_again_twice_as_late_each_time_until_held_for_good() {
        let first = Instant::now();
        let mut gap = HELD_AGAIN;
        let mut at = first + gap;
        let mut asks = vec![at];
        while at < first + logins::HELD_FOR_GOOD {
            let (g, again) = back_off(first, at, gap);
            assert_eq!(g, gap * 2);
            assert!(again > at, "each ask later than the last");
            (gap, at) = (g, again);
            asks.push(at);
        }
        // 25 ms, 75, 175, 375, 775, 1575, then the last at 2 s: about seven
        // marks a hold, the last when it is taken from its login.
        assert_eq!(asks.len(), 7, "{asks:?}");
        assert_eq!(*asks.last().unwrap(), first + logins::HELD_FOR_GOOD);
        assert!(logins::held_for_good(first, *asks.last().unwrap()));
        assert!(!logins::held_for_good(first, asks[asks.len() - 2]));
    }
}
