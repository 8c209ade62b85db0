//! Waking on Postgres `NOTIFY` over the connection a process already holds
//! (`ORCA_LISTEN`, on by default): a pool's worker on its pool's channel
//! (a run of the pool queued, `sql/functions/runs_wake_pool.sql`),
//! `pool-next` on its instance's (a hand-over,
//! `sql/functions/instances_wake_next.sql`). No new connection: the
//! process's one session `LISTEN`s, and it waits on it between its
//! statements in slices ([`Wake::hear`]).
//!
//! Invariants:
//! * A wake-up only brings a look forward: the poll stays the floor. A
//!   session begun (the first, or after the last was cut) is taken for a
//!   wake-up, since what was sent while no session listened is lost.
//! * Channels are secret to the logins that may wake on them (migration
//!   0027), but those logins are untrusted: a machine of the pool can
//!   `NOTIFY` its channel in a loop. The notifications a wait reads are
//!   drained at most [`MAX_DRAIN`] at a time and coalesced into one
//!   wake-up, and once wake-ups find nothing more often than the poll looks
//!   ([`Gate`]), the session `UNLISTEN`s and the process polls for a while
//!   ([`deaf_for`]): a flood costs no more than the poll did.

use std::collections::VecDeque;

use postgres::fallible_iterator::FallibleIterator;
use std::time::{Duration, Instant};

use super::{Db, is_connection_error, plain};

/// At most this many notifications are read off the session per wait; the
/// rest wait for the next (each wait is one wake-up however many it read).
pub const MAX_DRAIN: usize = 4096;

/// A notification's payload is read as the milliseconds until what it
/// announces falls due, bounded to this (an hour): longer, or not a
/// number, is taken for now.
const MAX_DUE_MS: u64 = 3_600_000;

/// What a wait heard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Heard {
    /// Nothing within the wait.
    Nothing,
    /// Something is due now: look.
    Now,
    /// Something falls due after this long (a retry's delay): look then.
    After(Duration),
}

/// The payload `p` of a notification as [`Heard`]: milliseconds until due
/// (`0`, empty, not a number, or over an hour: now).
pub fn heard_of(p: &str) -> Heard {
    match p.trim().parse::<u64>() {
        Ok(ms) if ms > 0 && ms <= MAX_DUE_MS => Heard::After(Duration::from_millis(ms)),
        _ => Heard::Now,
    }
}

/// The sooner of two things heard.
fn sooner(a: Heard, b: Heard) -> Heard {
    match (a, b) {
        (Heard::Now, _) | (_, Heard::Now) => Heard::Now,
        (Heard::After(x), Heard::After(y)) => Heard::After(x.min(y)),
        (Heard::Nothing, x) | (x, Heard::Nothing) => x,
    }
}

/// Whether a channel name is one orca makes (`orca_pool_…`, `orca_inst_…`:
/// lowercase letters, digits and `_`, at most 63 bytes): anything else a
/// function returned is not `LISTEN`ed on.
pub fn channel_ok(c: &str) -> bool {
    !c.is_empty()
        && c.len() <= 63
        && c.starts_with("orca_")
        && c.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// The flood gate: a wake-up whose look found nothing is fruitless; more
/// than `allowed` fruitless ones within `period` (the poll's own look
/// period, while listening) and the process stops listening, since
/// wake-ups then cost more than the poll they save.
#[derive(Debug)]
pub struct Gate {
    /// The window fruitless wake-ups are counted in.
    pub period: Duration,
    /// How many may be fruitless within it.
    pub allowed: usize,
    fruitless: VecDeque<Instant>,
}

impl Gate {
    /// A gate allowing `allowed` fruitless wake-ups per `period`.
    pub fn new(period: Duration, allowed: usize) -> Gate {
        Gate {
            period,
            allowed,
            fruitless: VecDeque::new(),
        }
    }

    /// Records at `now` a look a wake-up caused, which `found` something or
    /// not: whether to stop listening now (too many fruitless).
    pub fn looked(&mut self, now: Instant, found: bool) -> bool {
        if found {
            return false;
        }
        self.fruitless.push_back(now);
        while self
            .fruitless
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > self.period)
        {
            self.fruitless.pop_front();
        }
        if self.fruitless.len() > self.allowed {
            self.fruitless.clear();
            return true;
        }
        false
    }
}

/// How long a process that stopped listening (its gate tripped `trips`
/// times in a row, 1 the first) polls before it listens again: 30 s,
/// doubling, at most 10 minutes.
pub fn deaf_for(trips: u32) -> Duration {
    let n = trips.clamp(1, 6) - 1;
    Duration::from_secs((30u64 << n).min(600))
}

/// What [`Wake::listen`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listening {
    /// Listening, as before.
    Yes,
    /// Listening from now on, on a session that did not before: what was
    /// sent meanwhile is lost, so look now.
    Began,
    /// Not listening (deaf after a flood, no session, or the `LISTEN`
    /// failed): poll.
    No,
}

/// A process's waiting on its channel.
pub struct Wake {
    channel: String,
    /// The session ([`Db::sessions`]) it `LISTEN`s on, if any.
    on: Option<u64>,
    gate: Gate,
    /// Deaf (not listening) until then, after the gate tripped.
    deaf_until: Option<Instant>,
    /// Trips in a row (reset by a listening spell as long as the last deaf
    /// one with no trip).
    trips: u32,
    /// When it last began listening.
    since: Option<Instant>,
}

impl Wake {
    /// Waiting on `channel` (checked: [`channel_ok`]), with `gate`.
    pub fn new(channel: String, gate: Gate) -> Option<Wake> {
        channel_ok(&channel).then_some(Wake {
            channel,
            on: None,
            gate,
            deaf_until: None,
            trips: 0,
            since: None,
        })
    }

    /// Whether it listens on the session `db` has now (without a statement).
    pub fn listening(&self, db: &Db) -> bool {
        self.on.is_some_and(|s| s == db.sessions) && db.client.is_some()
    }

    /// Listens on `db`'s session if it should and does not yet (one
    /// statement, `LISTEN`): [`Listening::Began`] then. Deaf after a flood
    /// until its time is up.
    pub fn listen(&mut self, db: &mut Db) -> Listening {
        if self.listening(db) {
            return Listening::Yes;
        }
        self.on = None;
        if self.deaf_until.is_some_and(|t| Instant::now() < t) {
            return Listening::No;
        }
        if self.deaf_until.take().is_some() {
            log::info!("listening for wake-ups again");
        }
        if !db.ensure() {
            return Listening::No;
        }
        let session = db.sessions;
        let sql = format!("LISTEN \"{}\"", self.channel);
        match db.exec(|c| c.batch_execute(&sql)) {
            Ok(()) if db.sessions == session => {
                self.on = Some(session);
                self.since = Some(Instant::now());
                Listening::Began
            }
            Ok(()) => Listening::No,
            Err(e) => {
                log::debug!("LISTEN: {e}");
                Listening::No
            }
        }
    }

    /// Drains what the session has read (at most [`MAX_DRAIN`]) or, with
    /// nothing there, waits up to `slice` for a notification: what was
    /// heard, coalesced; `None` at once when it does not listen on `db`'s
    /// session (the caller sleeps, not holding the session). A session cut
    /// meanwhile is noted (the next [`Db::ensure`] opens another, and
    /// [`Wake::listen`] listens on it).
    pub fn hear(&mut self, db: &mut Db, slice: Duration) -> Option<Heard> {
        if !self.listening(db) {
            return None;
        }
        let c = db.client.as_mut()?;
        let mut heard = Heard::Nothing;
        let mut read = 0;
        let mut failed = None;
        {
            let mut n = c.notifications();
            let mut it = n.iter();
            while read < MAX_DRAIN {
                match it.next() {
                    Ok(Some(m)) => {
                        heard = sooner(heard, heard_of(m.payload()));
                        read += 1;
                    }
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                    Ok(None) => break,
                }
            }
        }
        if read == 0 && failed.is_none() {
            match c.notifications().timeout_iter(slice).next() {
                Ok(Some(m)) => heard = heard_of(m.payload()),
                Err(e) => failed = Some(e),
                Ok(None) => {}
            }
        }
        let closed = c.is_closed();
        if let Some(e) = failed.filter(|e| is_connection_error(e) || closed) {
            db.client = None;
            db.last_try = Some(Instant::now());
            db.went_down(&plain(&e));
        } else if closed {
            db.client = None;
        }
        Some(heard)
    }

    /// Records a look a wake-up caused and whether it `found` anything: when
    /// wake-ups find nothing more often than the gate allows, stops
    /// listening (`UNLISTEN`, and what the session has read is dropped) for
    /// [`deaf_for`] and says so once.
    pub fn looked(&mut self, db: &mut Db, found: bool) {
        let now = Instant::now();
        if !self.gate.looked(now, found) {
            return;
        }
        // A calm spell as long as the last deaf one: the count starts over.
        if self
            .since
            .is_some_and(|t| now.duration_since(t) >= deaf_for(self.trips) * 2)
        {
            self.trips = 0;
        }
        self.trips += 1;
        let deaf = deaf_for(self.trips);
        log::warn!(
            "wake-ups on this process's channel keep finding nothing (more than {} in {:.1}s): polling instead for {}s",
            self.gate.allowed,
            self.gate.period.as_secs_f64(),
            deaf.as_secs()
        );
        self.deaf_until = Some(now + deaf);
        if self.listening(db) {
            let _ = db.exec(|c| c.batch_execute("UNLISTEN *"));
            if let Some(c) = db.client.as_mut() {
                // What came before the UNLISTEN, dropped.
                let mut n = c.notifications();
                let mut it = n.iter();
                for _ in 0..1_000_000 {
                    if !matches!(it.next(), Ok(Some(_))) {
                        break;
                    }
                }
            }
        }
        self.on = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_is_the_milliseconds_until_due_else_now() {
        assert_eq!(heard_of(""), Heard::Now);
        assert_eq!(heard_of("0"), Heard::Now);
        assert_eq!(heard_of("x"), Heard::Now);
        assert_eq!(heard_of("-5"), Heard::Now);
        assert_eq!(heard_of("99999999999"), Heard::Now);
        assert_eq!(heard_of("1500"), Heard::After(Duration::from_millis(1500)));
        assert_eq!(
            sooner(Heard::After(Duration::from_secs(3)), heard_of("1000")),
            Heard::After(Duration::from_secs(1))
        );
        assert_eq!(
            sooner(Heard::After(Duration::from_secs(3)), Heard::Now),
            Heard::Now
        );
        assert_eq!(sooner(Heard::Nothing, Heard::Nothing), Heard::Nothing);
    }

    #[test]
    fn only_orca_s_own_channel_names_are_listened_on() {
        assert!(channel_ok("orca_pool_0123456789abcdef0123456789abcdef"));
        assert!(!channel_ok("orca_pool_\"; DROP"));
        assert!(!channel_ok("other"));
        assert!(!channel_ok(&format!("orca_{}", "a".repeat(60))));
        assert!(!channel_ok(""));
    }

    #[test]
    fn more_fruitless_wake_ups_than_allowed_within_the_period_trip_the_gate() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut g = Gate::new(s(6), 2);
        // Fruitful looks never count.
        for i in 0..100 {
            assert!(!g.looked(t0 + Duration::from_millis(i), true));
        }
        // Two fruitless in the period: allowed; a third: tripped.
        assert!(!g.looked(t0, false));
        assert!(!g.looked(t0 + s(1), false));
        assert!(g.looked(t0 + s(2), false));
        // Counted afresh after a trip; ones older than the period drop out.
        assert!(!g.looked(t0 + s(10), false));
        assert!(!g.looked(t0 + s(15), false));
        assert!(!g.looked(t0 + s(22), false));
        assert!(!g.looked(t0 + s(29), false));
    }

    #[test]
    fn a_process_stays_deaf_longer_each_trip_in_a_row_up_to_ten_minutes() {
        assert_eq!(deaf_for(0), Duration::from_secs(30));
        assert_eq!(deaf_for(1), Duration::from_secs(30));
        assert_eq!(deaf_for(2), Duration::from_secs(60));
        assert_eq!(deaf_for(5), Duration::from_secs(480));
        assert_eq!(deaf_for(6), Duration::from_secs(600));
        assert_eq!(deaf_for(60), Duration::from_secs(600));
    }
}
