//! `orca worker --pool P`: a pool machine's process. It logs in with its
//! machine's own credentials (`ORCA_TOKEN`), takes runs of its pool it has
//! room for, and runs them as the scheduler does ([`crate::supervise`]).
//!
//! Invariants:
//! * Everything it writes goes through the `orca.worker_*` functions, which
//!   act as the machine its credentials stand for: its own pool's runs, its
//!   own rows (migration 0003).
//! * It rides out a database it can't reach: its processes go on, their ends
//!   wait in memory. Credentials Postgres refuses (revoked: the machine was
//!   removed) end it at once with [`REVOKED`]: its processes are killed and
//!   nothing is recorded, since the scheduler has queued its runs again.
//! * It holds one connection ([`Link`]), which its main loop and its
//!   heartbeat thread take in turn: its beat rides its claim, one
//!   transaction a second while it has runs, every 2 s while idle
//!   ([`idle_every`]), every 6 s while idle and listening
//!   ([`idle_listening`]).
//! * With `ORCA_LISTEN` on (the default) that connection `LISTEN`s on its
//!   pool's channel ([`crate::db::wake`]): a run of its pool queued wakes
//!   it to claim at once; the idle look stays the floor (a notification
//!   lost, a retry falling due). A run of its that ends is reaped, written
//!   and its slot claimed again at once, not at the next tick.
//! * On an EC2 instance it polls the instance metadata for spot notices
//!   ([`crate::pools::interrupt`]): a rebalance recommendation drains it
//!   (it claims nothing more; its runs finish), an interruption hands its
//!   runs back within a grace that ends before EC2's time, queued again
//!   without spending an attempt.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::config::Pipeline;
use crate::db::sql;
use crate::db::wake::{Gate, Heard, Listening, Wake};
use crate::db::{Db, Fault, Link, Refusal, codes};
use crate::exit::{Failure, Outcome, REVOKED, bad, no};
use crate::settings::Timing;
use crate::supervise::{self, Supervisor};

static STOPS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_stop(_: libc::c_int) {
    STOPS.fetch_add(1, Ordering::SeqCst);
}

fn stopping() -> bool {
    STOPS.load(Ordering::SeqCst) > 0
}

/// The machine this worker's credentials stand for.
struct Machine {
    name: String,
    slots: i32,
}

/// Why a worker's statement failed, as the worker acts on it.
enum Trouble {
    /// Try again next round.
    Away,
    /// The credentials were refused. `definite`: they were revoked (the
    /// role is gone or may not log in); otherwise it may be a
    /// misconfiguration (`pg_hba.conf`, a failover), which is waited out.
    Refused { why: String, definite: bool },
    /// Something else, logged.
    Failed(String),
}

/// What the worker makes of a refused login: its credentials refused
/// (SQLSTATE class 28) are a [`Trouble::Refused`], definite when they were
/// revoked ([`Refusal::revoked`]: the role is gone or may not log in). A
/// database refused (3D000, 42501) is waited out as an outage is.
fn refused(r: &Refusal) -> Option<Trouble> {
    r.of_credentials().then(|| Trouble::Refused {
        why: r.reason.clone(),
        definite: r.revoked,
    })
}

fn trouble(e: Fault) -> Trouble {
    match e {
        Fault::Down => Trouble::Away,
        Fault::Refused(r) => refused(&r).unwrap_or(Trouble::Away),
        // orca.worker_machine(): the role logs in but no machine row is
        // live: the machine was just made and its row is on its way, or it
        // is being removed (its role is revoked next).
        Fault::Sql(e) if e.is(codes::NO_LIVE_MACHINE) => Trouble::Refused {
            why: e.message,
            definite: false,
        },
        Fault::Sql(e) | Fault::Data(e) => Trouble::Failed(e.message),
        Fault::Other(m) => Trouble::Failed(m),
    }
}

/// How long credentials may be refused, not definitely revoked, before the
/// worker gives up: `ORCA_WORKER_REFUSED_SECONDS` (60).
struct Refusals {
    window: f64,
    since: Option<Instant>,
}

impl Refusals {
    /// Whether to give up now, after a refusal.
    fn give_up(&mut self, why: &str, definite: bool) -> bool {
        let window = self.window;
        let since = *self.since.get_or_insert_with(|| {
            if !definite {
                log::warn!(
                    "this machine's credentials were refused ({why}); giving up after {window}s of it"
                );
            }
            Instant::now()
        });
        definite || since.elapsed().as_secs_f64() >= window
    }
}

/// The machine's login is refused for good: revoked (`definite`: the
/// machine was removed, its runs are someone else's now), or refused for
/// the whole window (`why`, as the database said it). Exits [`REVOKED`],
/// its log having said which.
fn revoked(sup: &mut Supervisor, machine: &str, why: &str, definite: bool) -> Outcome {
    let runs = crate::plural::count(sup.running() as i64, "run");
    if definite {
        log::error!(
            "this machine's credentials were revoked (machine {machine} removed: {why}): killing its {runs} and exiting"
        );
    } else {
        log::error!("this machine's login was refused ({why}): killing its {runs} and exiting");
    }
    sup.abandon();
    Err(Failure::quiet(REVOKED))
}

/// How often an idle worker (nothing running, nothing claimed at its last
/// look) beats and looks for runs: every 2 s, or more often when
/// `ORCA_POOL_LOST_SECONDS` (which the scheduler judges its silence by) is
/// under 8 s, so that four beats fit in it.
fn idle_every(lost: f64) -> Duration {
    Duration::from_secs_f64((lost / 4.0).clamp(0.2, 2.0))
}

/// How often an idle worker that listens on its pool's channel beats and
/// looks: every 6 s (a run queued wakes it), or as [`idle_every`] when
/// `ORCA_POOL_LOST_SECONDS` is under 24 s, so that four beats fit in it.
/// `orca pools` calls an idle machine silent after 15 s without a beat
/// ([`crate::machines::logins::Machine::state`]).
fn idle_listening(lost: f64) -> Duration {
    Duration::from_secs_f64((lost / 4.0).clamp(0.2, 6.0))
}

/// How many wake-ups that found nothing an idle period of a listening
/// worker may have ([`crate::db::wake::Gate`]): with its own look, three
/// looks per [`idle_listening`], what the poll costs ([`idle_every`]'s 2 s).
const FRUITLESS_ALLOWED: usize = 2;

/// How often a worker beats and looks for runs.
struct Pacing {
    /// `ORCA_TICK_SECONDS`: how often its main loop turns.
    tick: Duration,
    /// How often a busy worker's attempts are beaten: a beat a second.
    beat: Duration,
    /// How often an idle worker beats and looks for runs ([`idle_every`]).
    idle: Duration,
    /// How often while it listens for wake-ups ([`idle_listening`]).
    idle_listening: Duration,
}

/// What a worker's supervisor says at the top of a tick.
struct Now {
    /// Its machine's slots.
    slots: i32,
    /// Processes running.
    running: usize,
    /// Ends not written yet (attempts to queue again among them).
    pending: usize,
    /// Of those, the ends that ride the next round (their slots are free
    /// for its claim).
    ending: usize,
    /// Nothing runs and no end waits.
    idle: bool,
    /// Its last round claimed a run.
    took: bool,
    /// How long ago a beat last landed (`None`: none yet).
    since_beat: Option<Duration>,
    /// It listens for wake-ups on its pool's channel.
    listening: bool,
    /// A wake-up (a run queued, falling due, or a session begun that
    /// listens): look now if it has room.
    woken: bool,
}

/// What a tick of the worker does.
#[derive(Debug, PartialEq)]
struct Step {
    /// How often beats are due from now on (the heartbeat thread beats in
    /// the main loop's stead once one is late).
    every: Duration,
    /// A round now, claiming up to this many runs (its room); `None`: no
    /// round this tick.
    round: Option<i32>,
}

impl Pacing {
    /// This tick's step. A worker rests (beats every [`Pacing::idle`], or
    /// [`Pacing::idle_listening`] while it listens) when nothing runs, no
    /// end waits and its last round claimed nothing; otherwise it beats
    /// each [`Pacing::beat`]. Woken, it looks at once if it has room. Its ends go at once, in
    /// the round of the tick they are known on. While it has runs and room
    /// for more it looks for runs each tick, but for the tick right after
    /// the heartbeat thread beat in its stead (a beat under half a tick
    /// ago) when its last look found nothing; otherwise a round goes on
    /// the tick a beat is due (within half a tick of it). A round claims
    /// up to its room: its slots less what runs and what waits to be
    /// written but rides the round.
    fn step(&self, n: &Now) -> Step {
        let half = self.tick / 2;
        let room = i64::from(n.slots) - (n.running + n.pending - n.ending) as i64;
        let resting = n.idle && !n.took;
        let every = match (resting, n.listening) {
            (false, _) => self.beat,
            (true, false) => self.idle,
            (true, true) => self.idle_listening,
        };
        let looks = room > 0
            && (n.woken
                || (!resting
                    && (n.took || n.ending > 0 || n.since_beat.is_none_or(|t| t >= half))));
        let due = looks || n.ending > 0 || n.since_beat.is_none_or(|t| t + half >= every);
        Step {
            every,
            round: due.then(|| room.clamp(0, i32::MAX as i64) as i32),
        }
    }
}

/// Runs the worker of pool `pool` until it is stopped (exit 0) or its
/// credentials are refused ([`REVOKED`]).
///
/// Its one connection carries a round trip each tick while it has runs and
/// room for more (its runs' ends, its beat, its runs' output and its claim:
/// [`Supervisor::round`]), each second while it is full, and every
/// [`idle_every`] while idle; an attempt's end is written as soon as it is
/// known, by the round of the tick it is known on.
pub fn main(pool: &str) -> Outcome {
    let timing = Timing::from_env().map_err(bad)?;
    let target = crate::machines::boot::own_target("worker").map_err(bad)?;
    let window = crate::settings::WORKER_REFUSED.read().map_err(bad)?;
    let lost = crate::settings::POOL_LOST.read().map_err(bad)?;
    let listen = crate::settings::listen_on().map_err(bad)?;
    let mut refusals = Refusals {
        window,
        since: None,
    };
    // Other processes of this user (its runs among them) may not read this
    // one's memory or environment, where the token is.
    // SAFETY: prctl(2) with PR_SET_DUMPABLE only changes this process's flag.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        let handler = on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::signal(libc::SIGTERM, handler);
        libc::signal(libc::SIGINT, handler);
    }
    // Served once a stop is heard (see the scheduler's).
    crate::metrics::serve::start_from_env().map_err(bad)?;
    let link = Link::new(Db::new(target.clone(), "worker"));
    let machine = loop {
        if stopping() {
            return Ok(());
        }
        let hello = link.lock().run(|c| c.query_one(sql::WORKER_HELLO, &[]));
        match hello {
            Ok(row) => {
                let of: String = row.get("pool");
                if of != pool {
                    return Err(bad(format!(
                        "this machine's credentials are for pool {of}, not {pool}"
                    )));
                }
                break Machine {
                    name: row.get("name"),
                    slots: row.get("slots"),
                };
            }
            Err(e) => match trouble(e) {
                Trouble::Refused { why, definite } => {
                    if refusals.give_up(&why, definite) {
                        log::error!("this machine's login was refused ({why}): exiting");
                        return Err(Failure::quiet(REVOKED));
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
                Trouble::Away => std::thread::sleep(Duration::from_secs(1)),
                Trouble::Failed(m) => {
                    // Before `orca migrate` there are no orca.worker_*
                    // functions to call: say so rather than what failed.
                    let schema = link.lock().run(crate::db::schema_present);
                    if matches!(schema, Ok(false)) {
                        return Err(no(crate::db::NO_SCHEMA));
                    }
                    return Err(no(m));
                }
            },
        }
    };
    log::info!(
        "worker of pool {pool} on machine {} ({}); database {}",
        machine.name,
        crate::plural::count(machine.slots.into(), "slot"),
        target.shown()
    );
    let mut sup = Supervisor::new(
        link.clone(),
        format!("the worker on machine {}", machine.name),
        timing.kill_grace,
        &supervise::WORKER,
    );
    let tick = Duration::from_secs_f64(timing.tick);
    let pacing = Pacing {
        tick,
        beat: Duration::from_secs_f64(supervise::BEAT_SECONDS),
        idle: idle_every(lost),
        idle_listening: idle_listening(lost),
    };
    // Spot notices: polled on an EC2 instance (crate::pools::interrupt).
    let mut spot = crate::pools::interrupt::Hook::start(&machine.name, timing.kill_grace);
    let mut wake = if listen {
        pool_channel(&link, pacing.idle_listening)
    } else {
        None
    };
    let mut said = String::new();
    // Whether its last round trip claimed a run.
    let mut took = false;
    // A wake-up to act on (`counted`: a notification's, whose look the
    // flood gate counts), and when a run said to fall due later does.
    let mut woken = false;
    let mut counted = false;
    let mut look_at: Option<Instant> = None;
    loop {
        let began = Instant::now();
        if stopping() {
            let left = sup.stop_all(timing.stop_grace, timing.stale);
            if left > 0 {
                log::warn!("{left} run ends could not be written; the scheduler queues them again");
            }
            return Ok(());
        }
        sup.reap();
        if let Some(h) = spot.as_mut() {
            h.tick(&link, &mut sup);
        }
        sup.enforce();
        // Ends ride this tick's round, which writes them before it claims
        // (their slots are free for it); what can't ride is written now.
        sup.flush_but_riding();
        let listening = match wake.as_mut().map(|w| w.listen(&mut link.lock())) {
            Some(Listening::Began) => {
                // What was sent before it listened is lost: look now.
                woken = true;
                true
            }
            Some(Listening::Yes) => true,
            Some(Listening::No) | None => false,
        };
        if look_at.is_some_and(|t| Instant::now() >= t) {
            look_at = None;
            woken = true;
            counted = true;
        }
        let step = pacing.step(&Now {
            slots: machine.slots,
            running: sup.running(),
            pending: sup.pending(),
            ending: sup.ends_waiting(),
            idle: sup.idle(),
            took,
            since_beat: sup.since_beat(),
            listening,
            woken,
        });
        let by_wake = counted && step.round.is_some_and(|r| r > 0);
        woken = false;
        counted = false;
        sup.pace(step.every);
        // A machine that heard a spot notice takes nothing new.
        let draining = spot.as_ref().is_some_and(|h| h.draining());
        if let Some(room) = step.round.map(|r| if draining { 0 } else { r }) {
            match sup.round(room) {
                Ok(rows) => {
                    said.clear();
                    refusals.since = None;
                    took = !rows.is_empty();
                    if by_wake && let Some(w) = wake.as_mut() {
                        w.looked(&mut link.lock(), took);
                    }
                    for row in rows {
                        let id: i64 = row.get("id");
                        let start: i32 = row.get("start");
                        let name: String = row.get("pipeline");
                        let args: Vec<String> = row.get("args");
                        let spec: serde_json::Value = row.get("spec");
                        match serde_json::from_value::<Pipeline>(spec) {
                            Ok(p) => sup.launch(id, start, &Arc::new(p), &args, &[]),
                            Err(e) => {
                                // Not one this binary can run: the attempt
                                // fails, saying why (a retry may land on a
                                // machine with a newer binary).
                                let why = format!(
                                    "the worker on machine {} can't read pipeline {name}'s stored spec ({:?} error): an older binary?",
                                    machine.name,
                                    e.classify()
                                );
                                log::error!("run {id}: {why}");
                                sup.fail(id, start, &name, why);
                            }
                        }
                    }
                }
                Err(e) => match trouble(e) {
                    Trouble::Refused { why, definite } => {
                        if refusals.give_up(&why, definite) {
                            return revoked(&mut sup, &machine.name, &why, definite);
                        }
                    }
                    Trouble::Away => {}
                    Trouble::Failed(m) => {
                        if m != said {
                            log::error!("round: {m}");
                            said = m;
                        }
                    }
                },
            }
        } else {
            let mut db = link.lock();
            if !db.ensure() {
                let refusal = db.refusal().and_then(refused);
                drop(db);
                if let Some(Trouble::Refused { why, definite }) = refusal
                    && refusals.give_up(&why, definite)
                {
                    return revoked(&mut sup, &machine.name, &why, definite);
                }
            } else {
                refusals.since = None;
            }
        }
        sup.publish();
        // Until the next tick, or sooner: a run of its ended (its end is
        // written and its slot claimed at once), a wake-up, a run falling
        // due.
        let next = began + tick;
        while !stopping() {
            let now = Instant::now();
            let until = look_at.map_or(next, |t| t.min(next));
            if now >= until || sup.any_ended() {
                break;
            }
            let slice = (until - now).min(SLICE);
            let heard = wake.as_mut().and_then(|w| w.hear(&mut link.lock(), slice));
            match heard {
                Some(Heard::Now) => {
                    woken = true;
                    counted = true;
                    break;
                }
                Some(Heard::After(d)) => {
                    let at = now + d.min(pacing.idle_listening);
                    look_at = Some(look_at.map_or(at, |t| t.min(at)));
                }
                Some(Heard::Nothing) => {}
                None => std::thread::sleep(slice),
            }
            // The heartbeat thread's turn on the connection.
            std::thread::yield_now();
        }
    }
}

/// How long the main loop waits at a time between its checks (a stop, an
/// end, a wake-up), holding the connection while it listens.
const SLICE: Duration = Duration::from_millis(50);

/// The pool's wake channel (`orca.worker_wake()`, migration 27), to listen
/// on with a flood gate of [`FRUITLESS_ALLOWED`] per `period`; `None` (the
/// worker polls) when the database can't say (a database not migrated
/// yet, or down: then it polls until its next start).
fn pool_channel(link: &Link, period: Duration) -> Option<Wake> {
    match link
        .lock()
        .run(|c| c.query_one(sql::WORKER_WAKE, &[]))
        .map(|r| r.get::<_, String>("channel"))
    {
        Ok(channel) => Wake::new(channel, Gate::new(period, FRUITLESS_ALLOWED)),
        Err(e) => {
            log::warn!("can't learn this pool's wake channel ({e}): polling only");
            None
        }
    }
}

#[cfg(test)]
mod tests;
