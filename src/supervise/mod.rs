//! Supervising runs' processes, for the scheduler and the pool worker alike:
//! spawn through the keeper, reap, enforce timeouts and cancels, beat the
//! attempts, append their output, and write each attempt's end, keeping it
//! in memory until it lands (an outage loses none).
//!
//! A supervisor writes on one connection its process shares ([`Link`]): a
//! machine's or an instance's process holds no other. Every beat is one
//! statement, one round trip and one transaction, carrying the output each
//! attempt printed since the last ([`appends`]); a worker's beat claims its
//! next runs too ([`Supervisor::round`], on its main loop). The heartbeat
//! thread beats whenever a beat is due: every second when the main loop
//! doesn't beat, and when it does (a worker's), in its stead once none has
//! landed for a beat and a half, so that a main loop stalled (in a slow
//! spawn, say) or whose rounds fail doesn't leave live attempts unbeaten.
//!
//! Invariants:
//! * An attempt's end is written only if the run is still `running` at that
//!   `start`, so it is recorded once. A process whose attempt was queued
//!   again elsewhere (its beat no longer lands) is killed and nothing is
//!   recorded for it.
//! * Timeouts are held by a watchdog thread that does nothing but send
//!   signals, so a tick held up by a hung call or a stalled connection
//!   can't hold them up: SIGTERM to the group at the timeout, the keeper
//!   asked to kill everything after the kill grace. It signals through the
//!   keeper, by token, so never a pid used again.
//! * What the scheduler and a worker write differs only in the statements
//!   ([`Recorder`]): a worker's go through the `orca.worker_*` functions its
//!   credentials may execute.
//! * An attempt's output is appended from where the last append that
//!   landed ended, so a lost answer sends the same bytes again (the
//!   database keeps them once); its end carries its whole tail.

pub mod child;
pub mod keeper;
mod output;
mod uids;
mod wire;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use postgres::Row;

use crate::attempts::seconds;
use crate::config::Pipeline;
use crate::db::sql;
use crate::db::{Db, Fault, Link};
use crate::runs::{Exit, Outcome, RunState};
use crate::supervise::child::{Child, Handle, TAIL_BYTES, Tail};

/// How often attempts are beaten: a beat a second.
pub const BEAT_SECONDS: f64 = 1.0;

/// What an attempt printed since its last append is appended at its next
/// beat when it is at most this much (a run printing less a second has its
/// output in the database within a second of printing it)...
const APPEND_AT_ONCE: u64 = 16 * 1024;

/// ... and otherwise once this long has passed since its last append (its
/// last 64 KiB at most): a chatty run costs the database at most about
/// 16 KiB a second, however much it prints.
const APPEND_EVERY_SECONDS: f64 = 4.0;

/// The statements a supervisor writes with, by who it is.
pub struct Recorder {
    /// Beats attempts and appends their output, in one statement: `$1` ids,
    /// `$2` starts, `$3` pids; `$4` to `$7` the appends (ids, starts, where
    /// each begins in its attempt's output, the bytes); with `claims`, `$8`
    /// how many runs to claim. Returns `(id, cancel)` for the attempts still
    /// running at their start; with `claims`, `claimed` too, true on a run
    /// claimed (`id`, `start`, `pipeline`, `args`, `spec`).
    pub beat: &'static str,
    /// Writes an attempt's end (see [`Outcome::write`]).
    pub finish: &'static str,
    /// Writes several attempts' ends in one statement, if it can (see
    /// [`crate::runs::write_all`]).
    pub finish_all: Option<&'static str>,
    /// Queues a stopped attempt again (`$1`, `$2`, `$3` why, `$4` output).
    pub requeue: &'static str,
    /// Whether it may write a "timed out" event of its own.
    pub events: bool,
    /// Whether it beats with nothing running (a worker's beat also says its
    /// machine is alive).
    pub beat_idle: bool,
    /// Whether its beat claims runs too: the main loop beats
    /// ([`Supervisor::round`]), the heartbeat thread only when it is late.
    pub claims: bool,
    /// Whether its process counts the attempts it starts and ends in its
    /// own metrics (a worker's `/metrics`). A scheduler's don't: its leader
    /// counts every run's, whatever the placement, from the database
    /// (the scheduler's gauges step), so each end counts once.
    pub counts: bool,
}

/// The scheduler's statements.
pub const SCHEDULER: Recorder = Recorder {
    beat: sql::RUNS_BEAT,
    finish: sql::RUN_FINISH,
    finish_all: Some(sql::RUNS_FINISH),
    requeue: sql::RUN_REQUEUE,
    events: true,
    beat_idle: false,
    claims: false,
    counts: false,
};

/// A pool worker's statements: the functions its credentials may execute.
pub const WORKER: Recorder = Recorder {
    beat: sql::WORKER_ROUND,
    finish: sql::WORKER_FINISH,
    finish_all: None,
    requeue: sql::WORKER_REQUEUE,
    events: false,
    beat_idle: true,
    claims: true,
    counts: true,
};

/// An EC2 run's head's statements: the functions its instance's
/// credentials may execute for the run it heads.
pub const HEAD: Recorder = Recorder {
    beat: sql::INSTANCE_HEAD_ROUND,
    finish: sql::INSTANCE_HEAD_FINISH,
    finish_all: None,
    requeue: sql::INSTANCE_HEAD_REQUEUE,
    events: false,
    beat_idle: false,
    claims: false,
    counts: false,
};

/// Logs that `o`'s end was written, the run now in `state` (`None`: the
/// attempt was no longer running, so nothing was), and counts it if `rec`
/// counts.
fn say_written(rec: &Recorder, o: &Outcome, state: Option<RunState>) {
    if rec.counts {
        crate::metrics::ended(
            &o.pipeline,
            o.state.as_str(),
            o.timed_out,
            state.map(RunState::as_str),
        );
    }
    match state {
        Some(state) => log::info!(
            "run {} attempt {}: {} ({}) -> {state}",
            o.id,
            o.start,
            o.state,
            o.why
        ),
        None => log::warn!(
            "run {} attempt {}: was no longer running; outcome dropped",
            o.id,
            o.start
        ),
    }
}

/// Why a process is being stopped.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Kill {
    Timeout,
    Cancel,
    Stop,
    /// Its run was queued again elsewhere (its start is no longer ours):
    /// killed at once, and nothing is recorded for it.
    Lost,
}

/// One attempt whose process runs now.
struct Supervised {
    id: i64,
    start: i32,
    pipeline: Arc<Pipeline>,
    child: Child,
    started: Instant,
    /// Why it is being stopped, when SIGTERM went, whether the keeper was
    /// asked to kill everything since ([`Child::kill_all`]).
    kill: Option<(Kill, Instant, bool)>,
}

/// One attempt the heartbeat thread beats.
#[derive(Clone)]
struct Beat {
    id: i64,
    start: i32,
    /// Its process's pid (0 until the keeper has told it); `None` once
    /// its process has ended (its end is not written yet).
    pid: Option<i32>,
    tail: Arc<Tail>,
}

/// An attempt with a timeout, as the watchdog thread holds it.
struct Watch {
    id: i64,
    start: i32,
    /// Its command, as the keeper names it.
    handle: Handle,
    /// When its timeout passes.
    deadline: Instant,
    /// When the watchdog sent SIGTERM, and whether it has asked the
    /// keeper to kill everything since.
    termed: Option<(Instant, bool)>,
}

/// How far an attempt's output has been appended.
#[derive(Clone, Copy)]
struct Written {
    /// Where the last append that landed ended in its output stream.
    upto: u64,
    /// When it landed.
    at: Instant,
}

/// What a beat appends to one attempt's output.
struct Append {
    id: i64,
    start: i32,
    /// Where `bytes` begin in its output stream.
    at: u64,
    bytes: Vec<u8>,
}

/// What the main thread, the heartbeat thread and the watchdog share.
struct Shared {
    beats: Vec<Beat>,
    /// Attempts with a timeout whose processes have not ended yet.
    watches: Vec<Watch>,
    cancels: HashSet<(i64, i32)>,
    /// Attempts the heartbeat found no longer running at their start.
    lost: HashSet<(i64, i32)>,
    done: bool,
    /// How far each attempt's output has been appended.
    written: HashMap<(i64, i32), Written>,
    /// When a beat last landed, made by either thread.
    beaten: Option<Instant>,
    /// How often beats are due now.
    every: Duration,
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            beats: Vec::new(),
            watches: Vec::new(),
            cancels: HashSet::new(),
            lost: HashSet::new(),
            done: false,
            written: HashMap::new(),
            beaten: None,
            every: Duration::from_secs_f64(BEAT_SECONDS),
        }
    }
}

/// An end that could not be written yet: kept until it lands.
enum Pending {
    Finish(Outcome),
    Requeue {
        id: i64,
        start: i32,
        why: String,
        output: Vec<u8>,
    },
}

impl Pending {
    /// The attempt, for a log line: `run 5 attempt 1`.
    fn named(&self) -> String {
        let (id, start) = self.key();
        format!("run {id} attempt {start}")
    }

    fn key(&self) -> (i64, i32) {
        match self {
            Pending::Finish(o) => (o.id, o.start),
            Pending::Requeue { id, start, .. } => (*id, *start),
        }
    }

    /// The same end without what could not be stored (`error` says why):
    /// no output, and a reason that says what was dropped.
    fn stripped(self, error: &str) -> Pending {
        match self {
            Pending::Finish(o) => Pending::Finish(o.stripped(error)),
            Pending::Requeue { id, start, .. } => Pending::Requeue {
                id,
                start,
                why: crate::runs::dropped_why("queued again", error),
                output: Vec::new(),
            },
        }
    }
}

/// The processes of one scheduler or worker, and its heartbeat thread.
pub struct Supervisor {
    running: Vec<Supervised>,
    pending: Vec<Pending>,
    /// Until when ends are written one by one (a batch failed but for an
    /// outage: a bad one would fail every batch).
    one_by_one_until: Option<Instant>,
    shared: Arc<Mutex<Shared>>,
    /// The connection it writes on, which its heartbeat thread shares.
    link: Link,
    beat_thread: Option<JoinHandle<()>>,
    watchdog: Option<JoinHandle<()>>,
    kill_grace: f64,
    /// Who supervises, for the why of a requeue: "the scheduler on h1".
    who: String,
    rec: &'static Recorder,
}

impl Supervisor {
    /// A supervisor writing with `rec` on `link`, which its heartbeat thread
    /// shares (and so may the rest of its process).
    pub fn new(link: Link, who: String, kill_grace: f64, rec: &'static Recorder) -> Self {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let beat_thread = {
            let shared = shared.clone();
            let link = link.clone();
            std::thread::Builder::new()
                .name("heartbeat".into())
                .spawn(move || heartbeat_loop(link, shared, rec))
                .expect("spawn heartbeat thread")
        };
        let watchdog = {
            let shared = shared.clone();
            let grace = Duration::from_secs_f64(kill_grace);
            std::thread::Builder::new()
                .name("watchdog".into())
                .stack_size(64 * 1024)
                .spawn(move || watchdog_loop(shared, grace))
                .expect("spawn watchdog thread")
        };
        Supervisor {
            running: Vec::new(),
            pending: Vec::new(),
            one_by_one_until: None,
            shared,
            link,
            beat_thread: Some(beat_thread),
            watchdog: Some(watchdog),
            kill_grace,
            who,
            rec,
        }
    }

    /// A worker's round trip ([`Recorder::claims`]): writes the ends that
    /// wait (while [`Supervisor::ends_ride`]), beats its attempts, appends
    /// their output and claims up to `room` runs, in one statement. Returns
    /// the rows of the runs claimed (`id`, `start`, `pipeline`, `args`,
    /// `spec`). A round that fails but for an outage leaves its ends to
    /// [`Supervisor::flush`] for a minute, one by one, so that an end that
    /// can't be stored holds up no claim.
    pub fn round(&mut self, room: i32) -> Result<Vec<Row>, Fault> {
        self.publish();
        let ends: Vec<&Outcome> = if self.ends_ride() {
            self.finishes().take(crate::runs::ENDS_AT_ONCE).collect()
        } else {
            Vec::new()
        };
        let result = beat(
            &mut self.link.lock(),
            &self.shared,
            self.rec,
            room.max(0),
            &ends,
        );
        let carried = ends.len();
        let mut written: HashSet<(i64, i32)> = HashSet::new();
        for (id, start, state) in result.iter().flat_map(|r| &r.ended) {
            if let Some(o) = ends.iter().find(|o| (o.id, o.start) == (*id, *start)) {
                say_written(self.rec, o, *state);
                written.insert((*id, *start));
            }
        }
        drop(ends);
        self.pending
            .retain(|p| !matches!(p, Pending::Finish(o) if written.contains(&(o.id, o.start))));
        match result {
            Ok(round) => Ok(round.claimed),
            Err(e) => {
                if carried > 0 && !matches!(e, Fault::Down | Fault::Refused(_)) {
                    log::warn!(
                        "a round with {carried} ends failed: {e}; writing ends on their own for a minute"
                    );
                    self.one_by_one_until = Some(Instant::now() + Duration::from_secs(60));
                }
                Err(e)
            }
        }
    }

    /// Whether ends ride a worker's next round ([`Supervisor::round`])
    /// rather than being written on their own ([`Supervisor::flush`]): a
    /// worker's, but for a minute after a round that carried ends failed.
    pub fn ends_ride(&self) -> bool {
        self.rec.claims && self.one_by_one_until.is_none_or(|t| Instant::now() >= t)
    }

    /// How many ends wait for the next round ([`Supervisor::ends_ride`]).
    pub fn ends_waiting(&self) -> usize {
        if !self.ends_ride() {
            return 0;
        }
        self.finishes().count()
    }

    /// The pending attempts' ends (not the attempts to queue again).
    fn finishes(&self) -> impl Iterator<Item = &Outcome> {
        self.pending.iter().filter_map(|p| match p {
            Pending::Finish(o) => Some(o),
            Pending::Requeue { .. } => None,
        })
    }

    /// How often beats are due from now on (a worker's main loop beats
    /// less often while idle); the heartbeat thread beats in its stead once
    /// one is late.
    pub fn pace(&self, every: Duration) {
        self.shared.lock().expect("shared").every = every;
    }

    /// How long ago a beat last landed (`None`: none yet).
    pub fn since_beat(&self) -> Option<Duration> {
        self.shared
            .lock()
            .expect("shared")
            .beaten
            .map(|t| t.elapsed())
    }

    /// How many processes run now.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Whether nothing runs and no end waits to be written.
    pub fn idle(&self) -> bool {
        self.running.is_empty() && self.pending.is_empty()
    }

    /// How many ends wait to be written.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Starts attempt `(id, start)` of `p` with `args`; a process that can't
    /// be started is a failed attempt. Its environment: the pipeline's
    /// `env`, then `ORCA_RUN_ID`, `ORCA_RUN_START`, `ORCA_PIPELINE` and
    /// `extra` (an EC2 run's driver: its cluster's addresses).
    pub fn launch(
        &mut self,
        id: i64,
        start: i32,
        p: &Arc<Pipeline>,
        args: &[String],
        extra: &[(String, String)],
    ) {
        if self.rec.counts {
            crate::metrics::add(&crate::metrics::STARTED, &[&p.name], 1.0);
        }
        let mut env: Vec<(String, String)> =
            p.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        env.push(("ORCA_RUN_ID".into(), id.to_string()));
        env.push(("ORCA_RUN_START".into(), start.to_string()));
        env.push(("ORCA_PIPELINE".into(), p.name.clone()));
        env.extend(extra.iter().cloned());
        match Child::spawn(&p.command.argv(args), &env) {
            Ok(child) => {
                log::info!("started run {id} of {} (attempt {start})", p.name);
                let started = Instant::now();
                if let Some(t) = p.timeout {
                    self.shared.lock().expect("shared").watches.push(Watch {
                        id,
                        start,
                        handle: child.handle(),
                        deadline: started + Duration::from_secs_f64(t),
                        termed: None,
                    });
                }
                self.running.push(Supervised {
                    id,
                    start,
                    pipeline: p.clone(),
                    child,
                    started,
                    kill: None,
                });
            }
            Err(e) => {
                log::error!("run {id} of {}: can't start: {e}", p.name);
                self.pending.push(Pending::Finish(Outcome::new(
                    p,
                    id,
                    start,
                    RunState::Failed,
                    None,
                    format!("can't start: {e}"),
                    Vec::new(),
                )));
            }
        }
        self.publish();
    }

    /// Fails attempt `(id, start)` of pipeline `pipeline` without running
    /// it (its end is written like any other).
    pub fn fail(&mut self, id: i64, start: i32, pipeline: &str, why: String) {
        self.pending.push(Pending::Finish(Outcome {
            id,
            start,
            state: RunState::Failed,
            exit: None,
            why,
            output: Vec::new(),
            pipeline: pipeline.to_string(),
            timed_out: false,
            ended: None,
        }));
    }

    /// Whether process `i` has ended, reaping it if so, under the lock the
    /// watchdog signals under (so it never signals a reaped pid); a timeout
    /// the watchdog held becomes its kill.
    fn try_exit(&mut self, i: usize) -> Option<Exit> {
        let mut shared = self.shared.lock().expect("shared");
        let s = &mut self.running[i];
        let exit = s.child.try_exit()?;
        let key = (s.id, s.start);
        if let Some(w) = shared.watches.iter().position(|w| (w.id, w.start) == key) {
            let w = shared.watches.swap_remove(w);
            if let (None, Some((at, asked))) = (s.kill, w.termed) {
                s.kill = Some((Kill::Timeout, at, asked));
            }
        }
        Some(exit)
    }

    /// Reaps processes that ended and turns them into pending ends.
    pub fn reap(&mut self) {
        let mut i = 0;
        while i < self.running.len() {
            let Some(exit) = self.try_exit(i) else {
                i += 1;
                continue;
            };
            // When it was seen to end: its duration and its end's time
            // (written as this long before the write) are measured to here.
            let ended = Instant::now();
            let s = self.running.swap_remove(i);
            // The last of its output may still be in the pipe: the command
            // has ended and what it left behind has had SIGKILL, so the
            // reader reaches its end at once (bounded, should something
            // outside the attempt hold the pipe open).
            s.child.tail.drained(Duration::from_millis(200));
            let output = s.child.tail.snapshot();
            let took = ended.duration_since(s.started).as_secs_f64();
            let (state, why) = match s.kill {
                Some((Kill::Lost, _, _)) => {
                    log::warn!(
                        "run {} attempt {}: was queued again elsewhere; its process was killed, nothing recorded",
                        s.id,
                        s.start
                    );
                    continue;
                }
                Some((Kill::Stop, _, _)) => {
                    self.pending.push(Pending::Requeue {
                        id: s.id,
                        start: s.start,
                        why: format!("{} stopped", self.who),
                        output,
                    });
                    continue;
                }
                Some((Kill::Timeout, _, _)) => (
                    RunState::Failed,
                    format!(
                        "timed out after {}s ({exit})",
                        s.pipeline.timeout.unwrap_or(0.0)
                    ),
                ),
                Some((Kill::Cancel, _, _)) => (RunState::Cancelled, format!("cancelled ({exit})")),
                None if exit.success() => (
                    RunState::Succeeded,
                    format!("exit code 0 after {}", seconds(took)),
                ),
                None => (RunState::Failed, format!("{exit} after {}", seconds(took))),
            };
            let mut o = Outcome::new(&s.pipeline, s.id, s.start, state, Some(exit), why, output);
            o.timed_out = matches!(s.kill, Some((Kill::Timeout, _, _)));
            o.ended = Some(ended);
            self.pending.push(Pending::Finish(o));
        }
    }

    /// Timeouts, cancels and lost attempts: SIGTERM to the group, and after
    /// the grace SIGKILL to the command and everything it started, through
    /// the keeper (a lost one: at once). Never waits: the ends are reaped
    /// by [`Supervisor::reap`], and a command that doesn't end within
    /// [`child::KILL_SECONDS`] of it is taken for killed.
    pub fn enforce(&mut self) {
        let (cancels, lost) = {
            let mut shared = self.shared.lock().expect("shared");
            (
                std::mem::take(&mut shared.cancels),
                std::mem::take(&mut shared.lost),
            )
        };
        for s in &mut self.running {
            if lost.contains(&(s.id, s.start)) && !matches!(s.kill, Some((Kill::Lost, _, _))) {
                s.child.kill_all();
                s.kill = Some((Kill::Lost, Instant::now(), true));
            }
        }
        let grace = Duration::from_secs_f64(self.kill_grace);
        let mut timed_out = Vec::new();
        // What the watchdog did about timeouts, as each attempt's kill.
        let termed: HashMap<(i64, i32), (Instant, bool)> = {
            let shared = self.shared.lock().expect("shared");
            shared
                .watches
                .iter()
                .filter_map(|w| Some(((w.id, w.start), w.termed?)))
                .collect()
        };
        for s in &mut self.running {
            if s.kill.is_none() {
                if let Some(&(at, asked)) = termed.get(&(s.id, s.start)) {
                    s.kill = Some((Kill::Timeout, at, asked));
                    timed_out.push((s.id, s.pipeline.name.clone(), s.pipeline.timeout));
                } else if cancels.contains(&(s.id, s.start)) {
                    log::info!("run {} attempt {}: Cancel: SIGTERM", s.id, s.start);
                    s.child.signal(libc::SIGTERM);
                    s.kill = Some((Kill::Cancel, Instant::now(), false));
                }
            }
            if let Some((Kill::Timeout, at, false)) = s.kill
                && termed.get(&(s.id, s.start)).is_some_and(|t| t.1)
            {
                // The watchdog has asked the keeper: from here on as any kill.
                s.kill = Some((Kill::Timeout, at, true));
                s.child.kill_all();
            }
            match s.kill {
                Some((why, at, false)) if at.elapsed() >= grace => {
                    log::info!(
                        "run {} attempt {}: still alive: SIGKILL to it and everything it started",
                        s.id,
                        s.start
                    );
                    s.child.kill_all();
                    s.kill = Some((why, at, true));
                }
                // The keeper is at it (asked again once a second).
                Some((_, _, true)) => s.child.kill_all(),
                _ => {}
            }
        }
        if !self.rec.events {
            return;
        }
        for (id, pipeline, limit) in timed_out {
            let why = format!(
                "ran past its timeout of {}s: SIGTERM to its process group, SIGKILL to everything it started {}s later",
                limit.unwrap_or(0.0),
                self.kill_grace
            );
            // Informational: the run's end says "timed out" in any case.
            let _ = self
                .link
                .lock()
                .run(|c| c.execute(sql::EVENT_ADD, &[&id, &pipeline, &"timed out", &why]));
        }
    }

    /// Writes pending ends; what can't be written now stays pending.
    pub fn flush(&mut self) {
        self.write_pending(true);
    }

    /// Writes what won't ride the next round: every pending end, or while
    /// [`Supervisor::ends_ride`] only the attempts to queue again.
    pub fn flush_but_riding(&mut self) {
        self.write_pending(!self.ends_ride());
    }

    /// Writes pending ends (attempts' ends only with `finishes`; attempts
    /// to queue again always); what can't be written now stays pending.
    fn write_pending(&mut self, finishes: bool) {
        if !self
            .pending
            .iter()
            .any(|p| finishes || matches!(p, Pending::Requeue { .. }))
        {
            return;
        }
        let link = self.link.clone();
        let mut db = link.lock();
        // Ends first all in one statement where the statements allow it;
        // if that fails but for an outage, one by one (below), so one that
        // can't be stored holds up no other.
        let ends: Vec<&Outcome> = self.finishes().collect();
        let batch = self.one_by_one_until.is_none_or(|t| Instant::now() >= t);
        if let Some(all) = self
            .rec
            .finish_all
            .filter(|_| finishes && batch && ends.len() > 1)
        {
            // At most ENDS_AT_ONCE a statement (what it takes): an outage
            // may leave more pending.
            let mut written: HashSet<(i64, i32)> = HashSet::new();
            let mut down = false;
            for chunk in ends.chunks(crate::runs::ENDS_AT_ONCE) {
                match db.prepared(all, |c, s| crate::runs::write_all(c, s, chunk)) {
                    Ok(states) => {
                        for (o, (_, state)) in chunk.iter().zip(&states) {
                            say_written(self.rec, o, *state);
                        }
                        written.extend(chunk.iter().map(|o| (o.id, o.start)));
                    }
                    Err(Fault::Down | Fault::Refused(_)) => {
                        down = true;
                        break;
                    }
                    Err(e) => {
                        log::warn!(
                            "{} ends in one statement: {e}; writing ends one by one for a minute",
                            chunk.len()
                        );
                        self.one_by_one_until = Some(Instant::now() + Duration::from_secs(60));
                        break;
                    }
                }
            }
            self.pending.retain(|p| match p {
                Pending::Finish(o) => !written.contains(&(o.id, o.start)),
                Pending::Requeue { .. } => true,
            });
            if down {
                return;
            }
        }
        let mut left = Vec::new();
        let mut down = false;
        for p in std::mem::take(&mut self.pending) {
            if down || (!finishes && matches!(p, Pending::Finish(_))) {
                left.push(p);
                continue;
            }
            let result = match &p {
                Pending::Finish(o) => db
                    .prepared(self.rec.finish, |c, s| o.write(c, s))
                    .map(|state| say_written(self.rec, o, state)),
                Pending::Requeue {
                    id,
                    start,
                    why,
                    output,
                } => db
                    .prepared(self.rec.requeue, |c, s| {
                        c.query_one(s, &[id, start, why, output])
                    })
                    .map(|_| ()),
            };
            match result {
                Ok(()) => {}
                Err(Fault::Down | Fault::Refused(_)) => {
                    // The rest waits for the next round, not for a timeout each.
                    left.push(p);
                    down = true;
                }
                Err(e @ (Fault::Sql(_) | Fault::Other(_))) => {
                    log::error!("{}: can't record its end: {e}", p.named());
                    left.push(p);
                }
                Err(Fault::Data(e)) => {
                    // What it carried can never be stored: its end is
                    // recorded without it, or the run would stay running
                    // (and beaten) for ever.
                    log::error!(
                        "{}: its end can't be stored as it is ({e}): recording it without its output",
                        p.named()
                    );
                    left.push(p.stripped(&e.message));
                }
            }
        }
        self.pending = left;
    }

    /// Hands the heartbeat thread the attempts to beat: the running ones and
    /// those whose end is not written yet.
    pub fn publish(&self) {
        let mut beats: Vec<Beat> = self
            .running
            .iter()
            .map(|s| Beat {
                id: s.id,
                start: s.start,
                pid: Some(s.child.pid()),
                tail: s.child.tail.clone(),
            })
            .collect();
        for p in &self.pending {
            let (id, start) = p.key();
            beats.push(Beat {
                id,
                start,
                pid: None,
                tail: Arc::new(Tail::default()),
            });
        }
        self.shared.lock().expect("shared").beats = beats;
    }

    /// The ids supervised here (or with an unwritten end).
    pub fn ours(&self) -> Vec<i64> {
        self.running
            .iter()
            .map(|s| s.id)
            .chain(self.pending.iter().map(|p| p.key().0))
            .collect()
    }

    /// Stopping: SIGTERM every process, wait up to `grace`, SIGKILL what is
    /// left (everything each command started, through the keeper), and queue
    /// their runs again; then write what is pending, giving an outage up to
    /// `outage` seconds. Returns how many ends were not written.
    pub fn stop_all(&mut self, grace: f64, outage: f64) -> usize {
        // Runs that ended before the signal keep their real outcome.
        self.reap();
        self.flush();
        log::info!(
            "stopping: SIGTERM to {}, waiting up to {grace}s",
            crate::plural::count(self.running.len() as i64, "run"),
        );
        for s in &mut self.running {
            s.child.signal(libc::SIGTERM);
            s.kill = Some((Kill::Stop, Instant::now(), false));
        }
        let deadline = Instant::now() + Duration::from_secs_f64(grace);
        while !self.running.is_empty() && Instant::now() < deadline {
            self.reap();
            self.publish();
            std::thread::sleep(Duration::from_millis(50));
        }
        // Bounded: a command that doesn't end within KILL_SECONDS of it is
        // taken for killed.
        while !self.running.is_empty() {
            for s in &mut self.running {
                s.child.kill_all();
            }
            std::thread::sleep(Duration::from_millis(20));
            self.reap();
        }
        let deadline = Instant::now() + Duration::from_secs_f64(outage);
        loop {
            self.flush();
            self.publish();
            if self.pending.is_empty() || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        self.pending.len()
    }

    /// Kills every process at once (SIGKILL to everything each command
    /// started, through the keeper), recording nothing: its credentials are
    /// gone, so nothing could be recorded anyway.
    pub fn abandon(&mut self) {
        while !self.running.is_empty() {
            for s in &mut self.running {
                s.child.kill_all();
            }
            std::thread::sleep(Duration::from_millis(20));
            let mut i = 0;
            while i < self.running.len() {
                if self.try_exit(i).is_some() {
                    self.running.swap_remove(i);
                } else {
                    i += 1;
                }
            }
        }
        self.pending.clear();
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.shared.lock().expect("shared").done = true;
        for t in [self.beat_thread.take(), self.watchdog.take()]
            .into_iter()
            .flatten()
        {
            let _ = t.join();
        }
    }
}

/// The watchdog thread: every 50 ms, holds the timeouts of the attempts
/// that have one, with nothing but signals (no I/O that could hang): at
/// the timeout SIGTERM to the attempt's process group, `grace` later the
/// keeper asked to kill everything the command started (by token: the
/// keeper signals only commands it has not reaped).
fn watchdog_loop(shared: Arc<Mutex<Shared>>, grace: Duration) {
    loop {
        {
            let mut shared = shared.lock().expect("shared");
            if shared.done {
                return;
            }
            let now = Instant::now();
            for w in &mut shared.watches {
                match w.termed {
                    None if now >= w.deadline => {
                        log::info!("run {} attempt {}: Timeout: SIGTERM", w.id, w.start);
                        w.handle.signal(libc::SIGTERM);
                        w.termed = Some((now, false));
                    }
                    Some((at, false)) if now >= at + grace => {
                        log::info!(
                            "run {} attempt {}: still alive: SIGKILL to it and everything it started",
                            w.id,
                            w.start
                        );
                        w.handle.kill_all();
                        w.termed = Some((at, true));
                    }
                    _ => {}
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The appends due in a beat at `now`, given how far each attempt's output
/// was appended: for each attempt whose process runs, what it printed
/// since; at once if that is at most [`APPEND_AT_ONCE`] or nothing was
/// appended yet, else once [`APPEND_EVERY_SECONDS`] have passed since the
/// last append (only the last 64 KiB of it is kept anyway).
fn appends(beats: &[Beat], written: &HashMap<(i64, i32), Written>, now: Instant) -> Vec<Append> {
    let wait = Duration::from_secs_f64(APPEND_EVERY_SECONDS);
    let mut out = Vec::new();
    for b in beats.iter().filter(|b| b.pid.is_some()) {
        let last = written.get(&(b.id, b.start));
        let upto = last.map_or(0, |w| w.upto);
        let new = b.tail.total().saturating_sub(upto);
        if new == 0 {
            continue;
        }
        if new > APPEND_AT_ONCE && last.is_some_and(|w| now.duration_since(w.at) < wait) {
            continue;
        }
        let (at, bytes) = b.tail.since(upto);
        debug_assert!(bytes.len() <= TAIL_BYTES);
        out.push(Append {
            id: b.id,
            start: b.start,
            at,
            bytes,
        });
    }
    out
}

/// One beat, on `db`, of the attempts `shared` holds, with what they
/// printed since (and `room` runs claimed, a worker's round): cancels and
/// lost attempts go back to the main thread, appends that landed are
/// remembered. Returns the rows of the runs claimed.
fn beat(
    db: &mut Db,
    shared: &Mutex<Shared>,
    rec: &Recorder,
    room: i32,
    ends: &[&Outcome],
) -> Result<Round, Fault> {
    let now = Instant::now();
    let (beats, appends) = {
        let s = shared.lock().expect("shared");
        // An attempt whose end this round carries is ended, not beaten.
        let beats: Vec<Beat> = s
            .beats
            .iter()
            .filter(|b| !ends.iter().any(|o| (o.id, o.start) == (b.id, b.start)))
            .cloned()
            .collect();
        let appends = appends(&beats, &s.written, now);
        (beats, appends)
    };
    if !rec.beat_idle && beats.is_empty() && room == 0 && ends.is_empty() {
        shared.lock().expect("shared").beaten = Some(now);
        return Ok(Round::default());
    }
    let ids: Vec<i64> = beats.iter().map(|b| b.id).collect();
    let starts: Vec<i32> = beats.iter().map(|b| b.start).collect();
    let pids: Vec<i32> = beats.iter().map(|b| b.pid.unwrap_or(0)).collect();
    let out_ids: Vec<i64> = appends.iter().map(|a| a.id).collect();
    let out_starts: Vec<i32> = appends.iter().map(|a| a.start).collect();
    let out_at: Vec<i64> = appends
        .iter()
        .map(|a| i64::try_from(a.at).unwrap_or(i64::MAX))
        .collect();
    let out_bytes: Vec<&[u8]> = appends.iter().map(|a| a.bytes.as_slice()).collect();
    let mut params: Vec<&(dyn postgres::types::ToSql + Sync)> = vec![
        &ids,
        &starts,
        &pids,
        &out_ids,
        &out_starts,
        &out_at,
        &out_bytes,
    ];
    // A worker's round claims too (`room` runs at most), and writes the
    // ends it carries.
    let columns = crate::runs::EndColumns::of(ends);
    if rec.claims {
        params.push(&room);
        params.extend(columns.params());
    }
    let rows = db.prepared(rec.beat, |c, statement| c.query(statement, &params))?;
    let mut round = Round::default();
    let mut cancels = Vec::new();
    let mut beaten = HashSet::new();
    for r in rows {
        if rec.claims {
            match r.get::<_, &str>("kind") {
                "claimed" => {
                    round.claimed.push(r);
                    continue;
                }
                "ended" => {
                    let state = r
                        .try_get("state")
                        .map_err(|e| Fault::Other(format!("a round's end: {e}")))?;
                    round.ended.push((r.get("id"), r.get("start"), state));
                    continue;
                }
                _ => {}
            }
        }
        let id: i64 = r.get("id");
        beaten.insert(id);
        if r.get::<_, bool>("cancel")
            && let Some(b) = beats.iter().find(|b| b.id == id)
        {
            cancels.push((id, b.start));
        }
    }
    // A process whose attempt is no longer running at its start (queued
    // again and started elsewhere): the main thread kills it.
    let lost = beats
        .iter()
        .filter(|b| b.pid.is_some() && !beaten.contains(&b.id))
        .map(|b| (b.id, b.start));
    let mut s = shared.lock().expect("shared");
    s.beaten = Some(now);
    s.cancels.extend(cancels);
    s.lost.extend(lost);
    for a in appends.iter().filter(|a| beaten.contains(&a.id)) {
        let upto = a.at + a.bytes.len() as u64;
        s.written.insert((a.id, a.start), Written { upto, at: now });
    }
    let live: HashSet<(i64, i32)> = s.beats.iter().map(|b| (b.id, b.start)).collect();
    s.written.retain(|k, _| live.contains(k));
    Ok(round)
}

/// What a worker's round came to: the rows of the runs it claimed, and
/// each end it carried with the state its run is in now (`None`: the
/// attempt was no longer running there).
#[derive(Default)]
struct Round {
    claimed: Vec<Row>,
    ended: Vec<(i64, i32, Option<RunState>)>,
}

/// The heartbeat thread: beats the attempts the main thread supervises
/// whenever a beat is due (every second; when the main loop beats itself,
/// a worker's, only once none has landed for a beat and a half: its main
/// loop stalled, or its rounds fail), which collects cancel requests and
/// lost attempts and appends their output. It tries at most once a beat.
fn heartbeat_loop(link: Link, shared: Arc<Mutex<Shared>>, rec: &'static Recorder) {
    let late = |s: &Shared| {
        let after = if rec.claims {
            s.every + s.every / 2
        } else {
            s.every
        };
        s.beaten.is_none_or(|t| t.elapsed() >= after)
    };
    let mut tried: Option<Instant> = None;
    let mut looked = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let (due, every) = {
            let s = shared.lock().expect("shared");
            if s.done {
                return;
            }
            let any = rec.beat_idle || !s.beats.is_empty();
            (any && late(&s), s.every)
        };
        if due && tried.is_none_or(|t| t.elapsed() >= every) {
            let mut db = link.lock();
            // The main loop may have beaten meanwhile, holding the connection.
            if late(&shared.lock().expect("shared")) {
                tried = Some(Instant::now());
                if rec.claims {
                    log::debug!("no beat landed for a beat and a half: beating");
                }
                if db.ensure() {
                    let _ = beat(&mut db, &shared, rec, 0, &[]);
                }
            }
            looked = Instant::now();
        } else if looked.elapsed() >= Duration::from_secs_f64(BEAT_SECONDS) {
            // Reconnect even with nothing to beat, so an outage's end is
            // seen (and logged) when it ends, not when the next run starts.
            link.lock().ensure();
            looked = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beating(id: i64, pid: Option<i32>, printed: &[u8]) -> Beat {
        let tail = Arc::new(Tail::default());
        tail.push(printed);
        Beat {
            id,
            start: 1,
            pid,
            tail,
        }
    }

    #[test]
    fn output_is_appended_from_where_the_last_append_ended() {
        let now = Instant::now();
        let mut written = HashMap::new();
        let beats = [
            beating(1, Some(7), b"hello world"),
            beating(2, Some(0), b"quiet"),
            beating(3, None, b"ended: its end carries it"),
        ];
        // Nothing appended yet: everything; an ended process: nothing.
        let first = appends(&beats, &written, now);
        let got: Vec<(i64, u64, &[u8])> = first
            .iter()
            .map(|a| (a.id, a.at, a.bytes.as_slice()))
            .collect();
        assert_eq!(got, [(1, 0, &b"hello world"[..]), (2, 0, &b"quiet"[..])]);
        // Appended up to byte 6 of 1 and all of 2: the rest of 1 only.
        written.insert((1, 1), Written { upto: 6, at: now });
        written.insert((2, 1), Written { upto: 5, at: now });
        let next = appends(&beats, &written, now);
        assert_eq!(next.len(), 1);
        assert_eq!((next[0].id, next[0].at), (1, 6));
        assert_eq!(next[0].bytes, b"world");
    }

    #[test]
    fn a_chatty_attempt_s_output_is_appended_every_few_seconds_its_last_64_kib() {
        let now = Instant::now();
        let chatty = [beating(1, Some(7), &vec![b'x'; 200 * 1024])];
        let mut written = HashMap::new();
        written.insert((1, 1), Written { upto: 10, at: now });
        // Much more than a beat's worth since an append a moment ago: later.
        assert!(appends(&chatty, &written, now).is_empty());
        let later = now + Duration::from_secs_f64(APPEND_EVERY_SECONDS);
        let due = appends(&chatty, &written, later);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].at, (200 - 64) * 1024);
        assert_eq!(due[0].bytes.len(), TAIL_BYTES);
        // A beat's worth is appended at once, however recent the last.
        written.insert(
            (1, 1),
            Written {
                upto: 200 * 1024 - 100,
                at: now,
            },
        );
        assert_eq!(appends(&chatty, &written, now)[0].bytes.len(), 100);
    }

    #[test]
    fn an_attempt_is_named_in_words_in_log_lines() {
        let p = Pending::Requeue {
            id: 5,
            start: 1,
            why: String::new(),
            output: Vec::new(),
        };
        assert_eq!(p.named(), "run 5 attempt 1");
    }
}
