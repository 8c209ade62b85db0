//! Supervising runs' processes, for the scheduler and the pool worker alike:
//! spawn through the keeper, reap, enforce timeouts and cancels, beat the
//! attempts, append their output, and write each attempt's end, keeping it
//! in memory until it lands (an outage loses none).
//!
//! A supervisor writes on one connection its process shares ([`Link`]): a
//! machine's or an instance's process holds no other. Every beat is one
//! statement, one round trip and one transaction, carrying the output each
//! attempt printed since the last ([`mod@beat`]); a worker's beat claims its
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
//!
//! The files, each importing only those below it: this one (the
//! [`Supervisor`]: launch, reap, enforce, stop), [`mod@beat`] (a beat's
//! statement and the heartbeat thread), [`watchdog`] (timeouts), [`state`]
//! (what the threads share), [`child`] (a command as the supervisor sees
//! it), [`link`] (the supervisor's end of its keeper), [`keeper`] (the
//! keeper process, `orca __keeper`), [`uids`] (its side of
//! `ORCA_RUN_UIDS`), [`ends`] (ends kept until written), [`output`] (the
//! thread reading every command's output), [`trees`] (process trees
//! killed whole), [`wire`] (what the supervisor and its keeper say),
//! [`mod@env`] (what a run's environment gets of orca's), [`recorder`] (who
//! supervises: its statements), [`tail`] (a command's output kept).

mod beat;
pub mod child;
mod ends;
mod env;
pub mod keeper;
mod link;
mod output;
mod recorder;
mod state;
mod tail;
mod trees;
mod uids;
mod watchdog;
mod wire;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use postgres::Row;

use crate::attempts::seconds;
use crate::config::Pipeline;
use crate::db::sql;
use crate::db::{Fault, Link};
use crate::runs::{Exit, Outcome, RunState};
use crate::supervise::beat::{beat, heartbeat_loop};
use crate::supervise::child::Child;
use crate::supervise::ends::{Ends, Pending};
use crate::supervise::state::{Beat, Shared, Watch};
use crate::supervise::tail::Tail;
use crate::supervise::watchdog::watchdog_loop;

pub use crate::supervise::recorder::{HEAD, Recorder, SCHEDULER, WORKER};
pub use crate::supervise::state::BEAT_SECONDS;

/// Why a process is being stopped.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Kill {
    Timeout,
    Cancel,
    Stop,
    /// Its machine is interrupted (a spot notice): stopped within the
    /// interruption's grace and queued again, no attempt spent.
    Interrupt,
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

/// The processes of one scheduler or worker, and its heartbeat thread.
pub struct Supervisor {
    running: Vec<Supervised>,
    /// Ends not written yet.
    ends: Ends,
    shared: Arc<Mutex<Shared>>,
    /// The connection it writes on, which its heartbeat thread shares.
    link: Link,
    beat_thread: Option<JoinHandle<()>>,
    watchdog: Option<JoinHandle<()>>,
    kill_grace: f64,
    /// Who supervises, for the why of a requeue: "the scheduler on h1".
    who: String,
    rec: Recorder,
    /// Its machine's interruption, once heard ([`Supervisor::interrupt`]):
    /// the grace of its runs and the why of their requeue.
    interrupted: Option<(f64, String)>,
}

impl Supervisor {
    /// A supervisor writing with `rec` on `link`, which its heartbeat thread
    /// shares (and so may the rest of its process).
    pub fn new(link: Link, who: String, kill_grace: f64, rec: &Recorder) -> Self {
        let rec = *rec;
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
            ends: Ends::default(),
            shared,
            link,
            beat_thread: Some(beat_thread),
            watchdog: Some(watchdog),
            kill_grace,
            who,
            rec,
            interrupted: None,
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
            self.ends
                .finishes()
                .take(crate::runs::ENDS_AT_ONCE)
                .collect()
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
                self.rec.say_written(o, *state);
                written.insert((*id, *start));
            }
        }
        drop(ends);
        self.ends
            .pending
            .retain(|p| !matches!(p, Pending::Finish(o) if written.contains(&(o.id, o.start))));
        match result {
            Ok(round) => Ok(round.claimed),
            Err(e) => {
                if carried > 0 && !matches!(e, Fault::Down | Fault::Refused(_)) {
                    log::warn!(
                        "a round with {carried} ends failed: {e}; writing ends on their own for a minute"
                    );
                    self.ends.one_by_one_for_a_minute();
                }
                Err(e)
            }
        }
    }

    /// Whether ends ride a worker's next round ([`Supervisor::round`])
    /// rather than being written on their own ([`Supervisor::flush`]): a
    /// worker's, but for a minute after a round that carried ends failed.
    pub fn ends_ride(&self) -> bool {
        self.rec.claims() && self.ends.batch()
    }

    /// How many ends wait for the next round ([`Supervisor::ends_ride`]).
    pub fn ends_waiting(&self) -> usize {
        if !self.ends_ride() {
            return 0;
        }
        self.ends.finishes().count()
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

    /// Whether a process has ended that [`Supervisor::reap`] has not
    /// reaped yet (asks the keeper, without waiting): its end can be
    /// written, and its slot taken, at once.
    pub fn any_ended(&mut self) -> bool {
        self.running
            .iter_mut()
            .any(|s| s.child.try_exit().is_some())
    }

    /// How many processes run now.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Whether nothing runs and no end waits to be written.
    pub fn idle(&self) -> bool {
        self.running.is_empty() && self.ends.pending.is_empty()
    }

    /// How many ends wait to be written.
    pub fn pending(&self) -> usize {
        self.ends.pending.len()
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
        if self.rec.counts() {
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
                self.ends.pending.push(Pending::Finish(Outcome::new(
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
        self.ends.pending.push(Pending::Finish(Outcome {
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
                Some((Kill::Interrupt, _, _)) => {
                    let why = self
                        .interrupted
                        .as_ref()
                        .map_or_else(|| format!("{} interrupted", self.who), |i| i.1.clone());
                    self.ends.pending.push(Pending::Requeue {
                        id: s.id,
                        start: s.start,
                        why,
                        output,
                    });
                    continue;
                }
                Some((Kill::Stop, _, _)) => {
                    self.ends.pending.push(Pending::Requeue {
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
            self.ends.pending.push(Pending::Finish(o));
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
            let grace = match (s.kill, &self.interrupted) {
                (Some((Kill::Interrupt, _, _)), Some((g, _))) => Duration::from_secs_f64(*g),
                _ => grace,
            };
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
        if !self.rec.events() {
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
        self.ends.write(&self.link, self.rec, true);
    }

    /// Writes what won't ride the next round: every pending end, or while
    /// [`Supervisor::ends_ride`] only the attempts to queue again.
    pub fn flush_but_riding(&mut self) {
        let finishes = !self.ends_ride();
        self.ends.write(&self.link, self.rec, finishes);
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
        for p in &self.ends.pending {
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
            .chain(self.ends.pending.iter().map(|p| p.key().0))
            .collect()
    }

    /// Its machine is interrupted (a spot notice): SIGTERM to every process
    /// not already being stopped, SIGKILL to everything it started after
    /// `grace` seconds ([`Supervisor::enforce`]), and each attempt queued
    /// again with `why`, its output so far kept, no attempt spent (a
    /// pipeline with `on_lost = "fail"` fails instead: migration 22's
    /// trigger). Called again, it stops what began since. Never waits.
    pub fn interrupt(&mut self, grace: f64, why: &str) {
        self.interrupted = Some((grace, why.to_string()));
        for s in &mut self.running {
            if s.kill.is_none() {
                log::info!(
                    "run {} attempt {}: its machine is interrupted: SIGTERM, {grace:.0}s before SIGKILL",
                    s.id,
                    s.start
                );
                s.child.signal(libc::SIGTERM);
                s.kill = Some((Kill::Interrupt, Instant::now(), false));
            }
        }
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
            if matches!(s.kill, Some((Kill::Interrupt, _, _))) {
                // Handed back already: its why says so.
                continue;
            }
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
            if self.ends.pending.is_empty() || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        self.ends.pending.len()
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
        self.ends.pending.clear();
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
