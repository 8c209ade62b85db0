//! Supervising runs' processes, for the scheduler and the pool worker alike:
//! spawn under the shim, reap, enforce timeouts and cancels, beat the
//! attempts from a heartbeat thread, and write each attempt's end, keeping
//! it in memory until it lands (an outage loses none).
//!
//! Invariants:
//! * An attempt's end is written only if the run is still `running` at that
//!   `start`, so it is recorded once. A process whose attempt was queued
//!   again elsewhere (its beat no longer lands) is killed and nothing is
//!   recorded for it.
//! * Timeouts are held by a watchdog thread that does nothing but send
//!   signals, so a tick held up by a hung call or a stalled connection
//!   can't hold them up: SIGTERM to the group at the timeout, the shim
//!   asked to kill everything after the kill grace. It signals only shims
//!   not reaped yet (the main thread reaps under the same lock).
//! * What the scheduler and a worker write differs only in the statements
//!   ([`Recorder`]): a worker's go through the `orca.worker_*` functions its
//!   credentials may execute.

pub mod child;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::config::Pipeline;
use crate::db::sql;
use crate::db::{Db, Fault, Target};
use crate::runs::{Exit, Outcome, RunState};
use crate::supervise::child::{Child, Tail};

/// The statements a supervisor writes with, by who it is.
pub struct Recorder {
    /// Beats attempts (`$1` ids, `$2` starts, `$3` pids); returns `(id, cancel)`
    /// for those still running at their start.
    pub heartbeat: &'static str,
    /// Sets an attempt's output tail (`$1`, `$2`, `$3`).
    pub output: &'static str,
    /// Writes an attempt's end (see [`Outcome::write`]).
    pub finish: &'static str,
    /// Queues a stopped attempt again (`$1`, `$2`, `$3` why, `$4` output).
    pub requeue: &'static str,
    /// Whether it may write a "timed out" event of its own.
    pub events: bool,
    /// Whether it beats with nothing running (a worker's beat also says its
    /// machine is alive).
    pub beat_idle: bool,
}

/// The scheduler's statements.
pub const SCHEDULER: Recorder = Recorder {
    heartbeat: sql::HEARTBEAT,
    output: sql::OUTPUT_SET,
    finish: sql::RUN_FINISH,
    requeue: sql::RUN_REQUEUE,
    events: true,
    beat_idle: false,
};

/// A pool worker's statements: the functions its credentials may execute.
pub const WORKER: Recorder = Recorder {
    heartbeat: sql::WORKER_BEAT,
    output: sql::WORKER_OUTPUT,
    finish: sql::WORKER_FINISH,
    requeue: sql::WORKER_REQUEUE,
    events: false,
    beat_idle: true,
};

/// An EC2 run's head's statements: the functions its instance's
/// credentials may execute for the run it heads.
pub const HEAD: Recorder = Recorder {
    heartbeat: sql::INSTANCE_HEAD_BEAT,
    output: sql::INSTANCE_HEAD_OUTPUT,
    finish: sql::INSTANCE_HEAD_FINISH,
    requeue: sql::INSTANCE_HEAD_REQUEUE,
    events: false,
    beat_idle: false,
};

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
    /// Why it is being stopped, when SIGTERM went, whether the shim was
    /// asked to kill everything since ([`Child::kill_all`]).
    kill: Option<(Kill, Instant, bool)>,
}

/// One attempt the heartbeat thread beats.
#[derive(Clone)]
struct Beat {
    id: i64,
    start: i32,
    pid: i32,
    tail: Arc<Tail>,
}

/// An attempt with a timeout, as the watchdog thread holds it.
struct Watch {
    id: i64,
    start: i32,
    /// Its shim's pid (and process group).
    pid: i32,
    /// When its timeout passes.
    deadline: Instant,
    /// When the watchdog sent SIGTERM, and whether it has asked the shim
    /// to kill everything since.
    termed: Option<(Instant, bool)>,
}

/// What the main thread, the heartbeat thread and the watchdog share.
#[derive(Default)]
struct Shared {
    beats: Vec<Beat>,
    /// Attempts with a timeout whose shims are not reaped yet.
    watches: Vec<Watch>,
    cancels: HashSet<(i64, i32)>,
    /// Attempts the heartbeat found no longer running at their start.
    lost: HashSet<(i64, i32)>,
    done: bool,
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
    shared: Arc<Mutex<Shared>>,
    beat_thread: Option<JoinHandle<()>>,
    watchdog: Option<JoinHandle<()>>,
    kill_grace: f64,
    /// Who supervises, for the why of a requeue: "the scheduler on h1".
    who: String,
    rec: &'static Recorder,
}

impl Supervisor {
    /// A supervisor writing with `rec`, whose heartbeat thread reaches the
    /// database at `target` on a connection of its own.
    pub fn new(target: Target, who: String, kill_grace: f64, rec: &'static Recorder) -> Self {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let beat_thread = {
            let shared = shared.clone();
            let db = Db::new(target, "heartbeat");
            std::thread::Builder::new()
                .name("heartbeat".into())
                .spawn(move || heartbeat_loop(db, shared, rec))
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
            shared,
            beat_thread: Some(beat_thread),
            watchdog: Some(watchdog),
            kill_grace,
            who,
            rec,
        }
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
        let mut env: Vec<(String, String)> =
            p.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        env.push(("ORCA_RUN_ID".into(), id.to_string()));
        env.push(("ORCA_RUN_START".into(), start.to_string()));
        env.push(("ORCA_PIPELINE".into(), p.name.clone()));
        env.extend(extra.iter().cloned());
        match Child::spawn(&p.command.argv(args), &env) {
            Ok(child) => {
                log::info!(
                    "started run {id} of {} (attempt {start}, pid {})",
                    p.name,
                    child.pid()
                );
                let started = Instant::now();
                if let Some(t) = p.timeout {
                    self.shared.lock().expect("shared").watches.push(Watch {
                        id,
                        start,
                        pid: child.pid(),
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
            let s = self.running.swap_remove(i);
            // The last of its output may still be in the pipe: the shim has
            // ended, so the reader reaches its end at once (bounded, should
            // something outside the attempt hold the pipe open).
            s.child.tail.drained(Duration::from_millis(200));
            let output = s.child.tail.snapshot();
            let took = s.started.elapsed().as_secs_f64();
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
                None if exit.success() => {
                    (RunState::Succeeded, format!("exit code 0 after {took:.1}s"))
                }
                None => (RunState::Failed, format!("{exit} after {took:.1}s")),
            };
            self.pending.push(Pending::Finish(Outcome::new(
                &s.pipeline,
                s.id,
                s.start,
                state,
                Some(exit),
                why,
                output,
            )));
        }
    }

    /// Timeouts, cancels and lost attempts: SIGTERM to the group, and after
    /// the grace SIGKILL to the command and everything it started, through
    /// its shim (a lost one: at once). Never waits: the shims' ends are
    /// reaped by [`Supervisor::reap`], and a shim that doesn't end in time
    /// gets its group SIGKILLed by a later call.
    pub fn enforce(&mut self, db: &mut Db) {
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
                // The watchdog has asked the shim: from here on as any kill.
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
                // The shim is at it; its group gets SIGKILL if it takes too long.
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
            let _ = db.run(|c| c.execute(sql::EVENT_ADD, &[&id, &pipeline, &"timed out", &why]));
        }
    }

    /// Writes pending ends; what can't be written now stays pending.
    pub fn flush(&mut self, db: &mut Db) {
        let mut left = Vec::new();
        let mut down = false;
        for p in std::mem::take(&mut self.pending) {
            if down {
                left.push(p);
                continue;
            }
            let result = match &p {
                Pending::Finish(o) => db.run(|c| o.write(c, self.rec.finish)).map(|state| {
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
                    };
                }),
                Pending::Requeue {
                    id,
                    start,
                    why,
                    output,
                } => db
                    .run(|c| c.query_one(self.rec.requeue, &[id, start, why, output]))
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
                pid: s.child.pid(),
                tail: s.child.tail.clone(),
            })
            .collect();
        for p in &self.pending {
            let (id, start) = p.key();
            beats.push(Beat {
                id,
                start,
                pid: 0,
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
    /// left (everything each command started, through its shim), and queue
    /// their runs again; then write what is pending, giving an outage up to
    /// `outage` seconds. Returns how many ends were not written.
    pub fn stop_all(&mut self, db: &mut Db, grace: f64, outage: f64) -> usize {
        // Runs that ended before the signal keep their real outcome.
        self.reap();
        self.flush(db);
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
        // Bounded: a shim that doesn't end in time gets its group SIGKILLed.
        while !self.running.is_empty() {
            for s in &mut self.running {
                s.child.kill_all();
            }
            std::thread::sleep(Duration::from_millis(20));
            self.reap();
        }
        let deadline = Instant::now() + Duration::from_secs_f64(outage);
        loop {
            self.flush(db);
            self.publish();
            if self.pending.is_empty() || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        self.pending.len()
    }

    /// Kills every process at once (SIGKILL to everything each command
    /// started, through its shim), recording nothing: its credentials are
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
/// shim asked to kill everything under it. Under the shared lock, so the
/// main thread can't reap a shim (and free its pid) meanwhile.
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
                        child::signal_group(w.pid, libc::SIGTERM);
                        w.termed = Some((now, false));
                    }
                    Some((at, false)) if now >= at + grace => {
                        log::info!(
                            "run {} attempt {}: still alive: SIGKILL to it and everything it started",
                            w.id,
                            w.start
                        );
                        child::ask_kill_all(w.pid);
                        w.termed = Some((at, true));
                    }
                    _ => {}
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The heartbeat thread: every second, beats the attempts the main thread
/// supervises, collects cancel requests and lost attempts, and writes output
/// tails that grew.
fn heartbeat_loop(mut db: Db, shared: Arc<Mutex<Shared>>, rec: &'static Recorder) {
    let mut written: HashMap<(i64, i32), u64> = HashMap::new();
    loop {
        let beats = {
            let s = shared.lock().expect("shared");
            if s.done {
                return;
            }
            s.beats.clone()
        };
        // Reconnect even with nothing to beat, so an outage's end is seen
        // (and logged) when it ends, not when the next run starts.
        if db.ensure() && (rec.beat_idle || !beats.is_empty()) {
            let ids: Vec<i64> = beats.iter().map(|b| b.id).collect();
            let starts: Vec<i32> = beats.iter().map(|b| b.start).collect();
            let pids: Vec<i32> = beats.iter().map(|b| b.pid).collect();
            if let Ok(rows) = db.run(|c| c.query(rec.heartbeat, &[&ids, &starts, &pids])) {
                let mut cancels = Vec::new();
                let mut beaten = HashSet::new();
                for r in rows {
                    let id: i64 = r.get("id");
                    beaten.insert(id);
                    if r.get::<_, bool>("cancel")
                        && let Some(b) = beats.iter().find(|b| b.id == id)
                    {
                        cancels.push((id, b.start));
                    }
                }
                // A process whose attempt is no longer running at its start
                // (queued again and started elsewhere): the main thread kills it.
                let lost = beats
                    .iter()
                    .filter(|b| b.pid != 0 && !beaten.contains(&b.id))
                    .map(|b| (b.id, b.start));
                let mut shared = shared.lock().expect("shared");
                shared.cancels.extend(cancels);
                shared.lost.extend(lost);
            }
            for b in &beats {
                let generation = b.tail.generation();
                if generation == 0 || written.get(&(b.id, b.start)) == Some(&generation) {
                    continue;
                }
                let out = b.tail.snapshot();
                if db
                    .run(|c| c.execute(rec.output, &[&b.id, &b.start, &out]))
                    .is_ok()
                {
                    written.insert((b.id, b.start), generation);
                }
            }
            written.retain(|k, _| beats.iter().any(|b| (b.id, b.start) == *k));
        }
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until {
            if shared.lock().expect("shared").done {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
