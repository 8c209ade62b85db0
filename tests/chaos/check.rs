//! The checker: judges orca by what ran (the ledger the commands wrote, the
//! processes the observer saw) against what orca's tables say, and against
//! the faults done, after the faults stopped and the system settled.
//!
//! What orca promises, and so what is checked (docs/operations.md,
//! ARCHITECTURE.md's invariants):
//! - none lost: every run ended (succeeded; failed with a recorded reason,
//!   an exit code, a signal or a why; cancelled), none queued or running;
//! - an attempt `(run, start)` runs in one process at most, and only an
//!   attempt orca started;
//! - two attempts of one run never run at once, except after the earlier
//!   one's supervisor was cut off from Postgres (stopped, partitioned; a
//!   machine or instance also by a Postgres outage) past the stale limit:
//!   then another may run it again (runs "may be queued again" there), and
//!   the old process must be gone within `GRACE` of the supervisor's return;
//!   a scheduler's runs survive a Postgres outage without a second attempt;
//! - no process of an attempt (its command or anything it started, EC2
//!   services included) lives on more than `GRACE` after orca recorded the
//!   attempt's end, with the same exception;
//! - at no instant do more runs of a pipeline run than `max_runs` (fill
//!   runs on top), by the ledger's intervals;
//! - the tables agree with the ledger: each run's start count is its
//!   `started` events; an attempt the ledger saw succeed was recorded
//!   succeeded (or its end lost with its supervisor: killed or cut off), one
//!   that exited N failed, with exit code N when it is the last; a
//!   succeeded run's last attempt ended 0 in the ledger; it ended once;
//! - a schedule fired each slot once;
//! - a run of an `on_lost = "fail"` pipeline (the workload's `*_once`, no
//!   retries) begins one attempt at most; one whose command exited 0 but
//!   whose supervisor a fault lost is failed as lost (excused).
//!
//! A process the ledger saw begin but never end (SIGKILL) ran until the
//! observer first found it gone, and no later than orca recorded its
//! attempt's end unless the observer saw it alive after.

use std::collections::{BTreeMap, HashMap};

use crate::faults::{Block, Effect, Record, Target};
use crate::observe::Seen;

/// The ledger's clock step (`/proc/uptime` has two decimals): a time it
/// says is up to this much before the instant it stands for.
pub const LEDGER_TICK: f64 = 0.01;

/// How long a process may outlive its attempt's recorded end, or a cut-off
/// supervisor's return (a tick, the kill grace, the keeper's kill, a loaded
/// machine).
pub const GRACE: f64 = 10.0;

/// How much later than its timeout and kill grace an attempt may end (a
/// tick, the keeper's kill, a loaded machine).
pub const TIMEOUT_SLACK: f64 = 3.0;

/// A `begin` line.
#[derive(Clone, Debug)]
pub struct Begin {
    /// The run.
    pub run: i64,
    /// The attempt.
    pub start: i32,
    /// The command's pid.
    pub pid: i32,
    /// When (uptime).
    pub t: f64,
    /// Its supervisor (the keeper's parent: a scheduler, worker or
    /// `ec2-serve`) and that one's process group.
    pub sup: i32,
    /// The supervisor's group.
    pub supg: i32,
    /// The pipeline.
    pub pipeline: String,
}

/// An `end` line.
#[derive(Clone, Debug)]
pub struct End {
    /// The run.
    pub run: i64,
    /// The attempt.
    pub start: i32,
    /// The command's pid.
    pub pid: i32,
    /// When.
    pub t: f64,
    /// Its exit code, or None for `term` (stopped by SIGTERM, exit 143).
    pub code: Option<i32>,
}

/// Parses the ledger; lines that don't parse are returned as problems.
pub fn parse_ledger(text: &str) -> (Vec<Begin>, Vec<End>, Vec<String>) {
    let (mut b, mut e, mut bad) = (Vec::new(), Vec::new(), Vec::new());
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let parsed = match w.first() {
            Some(&"begin") if w.len() == 8 => (|| {
                b.push(Begin {
                    run: w[1].parse().ok()?,
                    start: w[2].parse().ok()?,
                    pid: w[3].parse().ok()?,
                    t: w[4].parse().ok()?,
                    sup: w[5].parse().ok()?,
                    supg: w[6].parse().ok()?,
                    pipeline: w[7].to_string(),
                });
                Some(())
            })(),
            Some(&"end") if w.len() == 6 => (|| {
                e.push(End {
                    run: w[1].parse().ok()?,
                    start: w[2].parse().ok()?,
                    pid: w[3].parse().ok()?,
                    t: w[4].parse().ok()?,
                    code: if w[5] == "term" {
                        None
                    } else {
                        Some(w[5].parse().ok()?)
                    },
                });
                Some(())
            })(),
            _ => None,
        };
        if parsed.is_none() {
            bad.push(format!("ledger: a line that doesn't parse: {line:?}"));
        }
    }
    (b, e, bad)
}

/// A run as orca's table has it.
#[derive(Clone, Debug)]
pub struct Run {
    /// Its pipeline.
    pub pipeline: String,
    /// Its state.
    pub state: String,
    /// Its start count.
    pub start: i32,
    /// A fill run.
    pub fill: bool,
    /// The last attempt's exit code.
    pub exit_code: Option<i32>,
    /// The last attempt's signal.
    pub exit_signal: Option<i32>,
    /// Why it ended as it did.
    pub why: Option<String>,
    /// The slot a scheduled run was fired for (epoch seconds).
    pub scheduled_for: Option<f64>,
}

/// An event of a run.
#[derive(Clone, Debug)]
pub struct Event {
    /// Its kind.
    pub kind: String,
    /// When (uptime).
    pub at: f64,
    /// Why.
    pub why: String,
}

/// Everything the checker reads.
pub struct Facts {
    /// The ledger.
    pub begins: Vec<Begin>,
    /// The ledger's ends.
    pub ends: Vec<End>,
    /// orca.runs by id.
    pub runs: BTreeMap<i64, Run>,
    /// orca.events by run, in order.
    pub events: BTreeMap<i64, Vec<Event>>,
    /// max_runs by pipeline.
    pub max_runs: BTreeMap<String, i32>,
    /// timeout by pipeline (those that have one).
    pub timeouts: BTreeMap<String, f64>,
    /// `ORCA_KILL_GRACE_SECONDS` of every supervisor.
    pub kill_grace: f64,
    /// retries by pipeline.
    pub retries: BTreeMap<String, i64>,
    /// Runs a cancel was asked for.
    pub cancels: std::collections::BTreeSet<i64>,
    /// The runs' processes the observer saw.
    pub seen: Vec<Seen>,
    /// The faults.
    pub faults: Vec<Record>,
    /// When the checker looked (uptime).
    pub now: f64,
    /// The test's process group (the schedulers').
    pub own_group: i32,
}

/// An attempt's recorded end: the first of succeeded, failed, cancelled or
/// requeued after its `started` event.
#[derive(Clone, Debug)]
struct Ended {
    kind: String,
    at: f64,
    why: String,
}

impl Facts {
    /// The recorded ends of each attempt of `run` (index 0 is attempt 1),
    /// and how many `started` events it has.
    fn attempts(&self, run: i64) -> (Vec<Option<Ended>>, usize) {
        let mut out: Vec<Option<Ended>> = Vec::new();
        for e in self.events.get(&run).into_iter().flatten() {
            match e.kind.as_str() {
                "started" => out.push(None),
                "succeeded" | "failed" | "cancelled" | "requeued" => {
                    if let Some(last @ None) = out.last_mut() {
                        *last = Some(Ended {
                            kind: e.kind.clone(),
                            at: e.at,
                            why: e.why.clone(),
                        });
                    }
                }
                _ => {}
            }
        }
        let n = out.len();
        (out, n)
    }

    /// A fault that cut off supervisor (`sup`, `supg`) and explains what it
    /// supervised going on from `from` to `to`: it began by `from` and ended
    /// no more than GRACE before `to`.
    fn cut_off(&self, sup: i32, supg: i32, from: f64, to: f64) -> Option<&Record> {
        self.faults.iter().find(|f| {
            f.effect == Effect::CutOff
                && f.reaches(sup, supg, self.own_group)
                && f.start <= from
                && to <= f.end + GRACE
        })
    }

    /// A fault that cut off supervisor (`sup`, `supg`) before it had to
    /// stop a process of an attempt that ended at `ended` (within GRACE),
    /// and ended no more than GRACE before the process was last seen at
    /// `last`: the supervisor couldn't learn the attempt was over.
    fn blinded(&self, sup: i32, supg: i32, ended: f64, last: f64) -> Option<&Record> {
        self.faults.iter().find(|f| {
            f.effect == Effect::CutOff
                && f.reaches(sup, supg, self.own_group)
                && f.start <= ended + GRACE
                && f.end >= ended - GRACE
                && last <= f.end + GRACE
        })
    }

    /// A fault that killed or cut off supervisor (`sup`, `supg`) between
    /// `from` and `to`: what it knew of an attempt may be lost. One aimed
    /// at it (a kill, a stop) is named before an outage of everyone's.
    fn lost_by(&self, sup: i32, supg: i32, from: f64, to: f64) -> Option<&Record> {
        let hit = |f: &&Record| {
            matches!(f.effect, Effect::Killed | Effect::CutOff)
                && f.reaches(sup, supg, self.own_group)
                && f.start <= to + 1.0
                && f.end >= from - 1.0
        };
        let aimed = |f: &&Record| !matches!(f.target, Target::All | Target::Fleet);
        self.faults
            .iter()
            .filter(hit)
            .find(aimed)
            .or_else(|| self.faults.iter().find(hit))
    }
}

/// An attempt's process as the ledger and the observer saw it.
struct Interval {
    run: i64,
    start: i32,
    pid: i32,
    sup: i32,
    supg: i32,
    from: f64,
    to: f64,
    /// How `to` is known.
    how: &'static str,
}

/// Every violation, one line each naming the run and the evidence.
pub fn check(f: &Facts) -> Vec<String> {
    check_noting(f).violations
}

/// What the checker found.
pub struct Found {
    /// Promises broken: one line each, naming the run and the evidence.
    pub violations: Vec<String>,
    /// What a fault excused: what the chaos made happen that orca allows.
    pub excused: Vec<String>,
    /// Known defects, reported and not yet fixed (see [`KNOWN`]): not
    /// counted as violations.
    pub known: Vec<String>,
}

/// Defects found, reported and not fixed here: what the checker sees of
/// them is printed as `known: D…` and not counted.
///
/// None now. D1 was one (timeouts held up by a tick that waited on a hung
/// call: fixed, the supervisor's watchdog thread holds them;
/// `tests/it/chaos_found.rs`).
pub const KNOWN: &[&str] = &[];

/// Every violation, what a fault excused, and known defects seen.
pub fn check_noting(f: &Facts) -> Found {
    let mut v = Vec::new();
    let mut notes = Vec::new();
    let known = Vec::new(); // what a KNOWN defect explains: none now
    let t = |x: f64| format!("{x:.2}");
    let ends: HashMap<(i64, i32, i32), &End> = f
        .ends
        .iter()
        .map(|e| ((e.run, e.start, e.pid), e))
        .collect();
    let attempts: HashMap<i64, (Vec<Option<Ended>>, usize)> =
        f.runs.keys().map(|id| (*id, f.attempts(*id))).collect();
    let recorded_end = |run: i64, start: i32| -> Option<&Ended> {
        attempts
            .get(&run)?
            .0
            .get((start - 1).max(0) as usize)?
            .as_ref()
    };
    // on_lost = "fail": no run of such a pipeline begins a second attempt
    // (they have no retries), whatever the faults.
    let mut begun: BTreeMap<i64, Vec<i32>> = BTreeMap::new();
    for b in f
        .begins
        .iter()
        .filter(|b| crate::workload::runs_once(&b.pipeline))
    {
        begun.entry(b.run).or_default().push(b.start);
    }
    for (id, starts) in begun.iter().filter(|(_, s)| s.len() > 1) {
        let why = f
            .runs
            .get(id)
            .and_then(|r| r.why.clone())
            .unwrap_or_default();
        v.push(format!(
            "twice: run {id} has on_lost = \"fail\" but began {} attempts {starts:?} (why now: {why})",
            starts.len()
        ));
    }
    // Lost.
    for (id, r) in &f.runs {
        if r.state == "queued" || r.state == "running" {
            v.push(format!(
                "lost: run {id} ({}) is still {} at attempt {} (why: {})",
                r.pipeline,
                r.state,
                r.start,
                r.why.as_deref().unwrap_or("-")
            ));
        }
        if r.state == "failed"
            && r.exit_code.is_none()
            && r.exit_signal.is_none()
            && r.why.as_deref().unwrap_or("").trim().is_empty()
        {
            v.push(format!(
                "lost: run {id} ({}) failed with no reason recorded",
                r.pipeline
            ));
        }
        let started = attempts[id].1;
        if started != r.start as usize {
            v.push(format!(
                "tables: run {id} ({}) has start {} but {started} `started` events",
                r.pipeline, r.start
            ));
        }
        let evs = f.events.get(id).map(Vec::as_slice).unwrap_or(&[]);
        // Retries: a failed attempt is retried `retries` times, no more;
        // a run fails for good after the last (or a cancel meanwhile).
        let failed = evs.iter().filter(|e| e.kind == "failed").count() as i64;
        let tries = f.retries.get(&r.pipeline).copied().unwrap_or(0) + 1;
        if failed > tries || (r.state == "failed" && failed < tries && !f.cancels.contains(id)) {
            v.push(format!(
                "retries: run {id} ({}) is {} after {failed} failed attempts (retries {})",
                r.pipeline,
                r.state,
                tries - 1
            ));
        }
        let finals = evs.iter().filter(|e| e.kind == "succeeded").count();
        if finals > 1 || (r.state == "succeeded" && finals != 1) {
            v.push(format!(
                "tables: run {id} ({}) is {} with {finals} `succeeded` events",
                r.pipeline, r.state
            ));
        }
    }
    // Each ledger attempt: one orca started, in one process.
    let mut by_attempt: BTreeMap<(i64, i32), Vec<&crate::check::Begin>> = BTreeMap::new();
    for b in &f.begins {
        by_attempt.entry((b.run, b.start)).or_default().push(b);
        match f.runs.get(&b.run) {
            None => v.push(format!(
                "doubled: run {} attempt {} ran (pid {} at {}) but orca has no such run",
                b.run, b.start, b.pid, t(b.t)
            )),
            Some(r) if r.pipeline != b.pipeline => v.push(format!(
                "tables: run {} attempt {} ran pipeline {}'s command, but orca says the run is {}'s",
                b.run, b.start, b.pipeline, r.pipeline
            )),
            Some(r) if b.start < 1 || b.start > r.start => v.push(format!(
                "doubled: run {} ({}) attempt {} ran (pid {} at {}) but orca started it {} times",
                b.run, r.pipeline, b.start, b.pid, t(b.t), r.start
            )),
            _ => {}
        }
    }
    for ((run, start), bs) in &by_attempt {
        if bs.len() > 1 {
            let who: Vec<String> = bs
                .iter()
                .map(|b| format!("pid {} under {} at {}", b.pid, b.sup, t(b.t)))
                .collect();
            v.push(format!(
                "doubled: run {run} attempt {start} ran in {} processes: {}",
                bs.len(),
                who.join("; ")
            ));
        }
    }
    // Intervals.
    let seen: HashMap<(i32, i64, i32), &Seen> = f
        .seen
        .iter()
        .map(|s| ((s.pid, s.run, s.start), s))
        .collect();
    let mut intervals: Vec<Interval> = Vec::new();
    for b in &f.begins {
        let recorded = recorded_end(b.run, b.start).map(|e| e.at);
        let (to, how) = if let Some(e) = ends.get(&(b.run, b.start, b.pid)) {
            (e.t, "its end line")
        } else if let Some(s) = seen.get(&(b.pid, b.run, b.start)) {
            let gone = s.gone.unwrap_or(f.now);
            let to = recorded.map_or(gone, |r| gone.min(r.max(b.t)));
            (to.max(s.last), "seen last by the observer")
        } else {
            (
                recorded.unwrap_or(f.now).min(b.t + 1.0).max(b.t),
                "never seen: killed at once",
            )
        };
        intervals.push(Interval {
            run: b.run,
            start: b.start,
            pid: b.pid,
            sup: b.sup,
            supg: b.supg,
            from: b.t,
            to,
            how,
        });
    }
    // Two attempts of one run at once.
    let mut by_run: BTreeMap<i64, Vec<&Interval>> = BTreeMap::new();
    for i in &intervals {
        by_run.entry(i.run).or_default().push(i);
    }
    for (run, is) in &by_run {
        for a in is {
            for b in is {
                if a.start >= b.start || b.from >= a.to - 0.05 || a.from >= b.to - 0.05 {
                    continue;
                }
                if let Some(fault) = f.cut_off(a.sup, a.supg, b.from, a.to) {
                    notes.push(format!(
                        "run {run}: attempt {} (pid {}) ran until {} beside attempt {} (from {}): its supervisor {} was cut off ({})",
                        a.start, a.pid, t(a.to), b.start, t(b.from), a.sup, fault.what
                    ));
                    continue;
                }
                v.push(format!(
                    "doubled: run {run} ran attempts {} and {} at once: attempt {} pid {} (under {}) from {} to {} ({}), attempt {} pid {} (under {}) from {}; orca ended attempt {} at {}",
                    a.start, b.start, a.start, a.pid, a.sup, t(a.from), t(a.to), a.how,
                    b.start, b.pid, b.sup, t(b.from), a.start,
                    recorded_end(*run, a.start).map_or("-".into(), |e| format!("{} ({})", t(e.at), e.kind))
                ));
            }
        }
    }
    // Leaks: a process alive after its attempt's recorded end.
    let sup_of: HashMap<(i64, i32), (i32, i32)> = f
        .begins
        .iter()
        .map(|b| ((b.run, b.start), (b.sup, b.supg)))
        .collect();
    for s in &f.seen {
        if s.gone.is_none() {
            v.push(format!(
                "leaked: run {} attempt {}: pid {} ({}) is still alive after everything ended",
                s.run, s.start, s.pid, s.cmdline
            ));
            continue;
        }
        let Some(end) = recorded_end(s.run, s.start) else {
            continue;
        };
        if s.last <= end.at + GRACE {
            continue;
        }
        // Its own supervisor as the observer found it, else its attempt's.
        let (sup, supg) = if s.sup > 0 {
            (s.sup, s.supg)
        } else {
            sup_of.get(&(s.run, s.start)).copied().unwrap_or((-1, -1))
        };
        if let Some(fault) = f.blinded(sup, supg, end.at, s.last) {
            notes.push(format!(
                "run {} attempt {}: pid {} ({}) lived {:.1}s past the attempt's end: its supervisor was cut off ({})",
                s.run, s.start, s.pid, s.cmdline, s.last - end.at, fault.what
            ));
            continue;
        }
        v.push(format!(
            "leaked: run {} attempt {}: pid {} ({}, seen from {}) was alive at {}, {:.1}s after orca recorded the attempt {} at {}",
            s.run, s.start, s.pid, s.cmdline, t(s.first), t(s.last), s.last - end.at, end.kind, t(end.at)
        ));
    }
    // max_runs.
    for (pipeline, max) in &f.max_runs {
        let mut points: Vec<(f64, i32, i64)> = Vec::new();
        for i in &intervals {
            let Some(r) = f.runs.get(&i.run) else {
                continue;
            };
            if &r.pipeline != pipeline || r.fill {
                continue;
            }
            // An excused tail (its supervisor cut off) counts as orca saw it.
            let mut to = i.to;
            if let Some(e) = recorded_end(i.run, i.start)
                && to > e.at
                && f.cut_off(i.sup, i.supg, e.at, to).is_some()
            {
                to = e.at.max(i.from);
            }
            // A ledger time is /proc/uptime's, cut to 10 ms: the begin
            // was within LEDGER_TICK after it, and a run claimed as another
            // ended begins just after that end was recorded.
            points.push((i.from + LEDGER_TICK, 1, i.run));
            points.push((to, -1, i.run));
        }
        points.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut live: HashMap<i64, i32> = HashMap::new();
        let mut said = false;
        for (at, d, run) in points {
            *live.entry(run).or_default() += d;
            let running: Vec<i64> = live
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(r, _)| *r)
                .collect();
            if running.len() as i32 > *max && !said {
                let mut running = running;
                running.sort();
                v.push(format!(
                    "max_runs: pipeline {pipeline} (max_runs {max}) ran {} runs at once at {}: runs {running:?}",
                    running.len(),
                    t(at)
                ));
                said = true;
            }
        }
    }
    // Timeouts: no attempt runs past its timeout and the kill grace (and
    // TIMEOUT_SLACK), unless its supervisor was stopped meanwhile (excused).
    // A call that held up the supervisor's loop excuses nothing: timeouts
    // are the watchdog thread's (defect D1, fixed).
    for i in &intervals {
        let Some(r) = f.runs.get(&i.run) else {
            continue;
        };
        let Some(limit) = f.timeouts.get(&r.pipeline) else {
            continue;
        };
        let most = limit + f.kill_grace + TIMEOUT_SLACK;
        let ran = i.to - i.from;
        if ran <= most {
            continue;
        }
        let held = |x: &&Record| {
            x.blocks != Block::No
                && (x.target == Target::All || x.reaches(i.sup, i.supg, f.own_group))
                && x.start <= i.from + most
                && x.end >= i.from + limit
        };
        let stopped = f
            .faults
            .iter()
            .filter(held)
            .find(|x| x.blocks == Block::Stopped);
        if let Some(fault) = stopped {
            notes.push(format!(
                "run {} attempt {} ran {ran:.1}s past its timeout of {limit}s: its supervisor {} was stopped ({})",
                i.run, i.start, i.sup, fault.what
            ));
            continue;
        }
        let during: Vec<&str> = f
            .faults
            .iter()
            .filter(|x| x.start <= i.to && x.end >= i.from)
            .map(|x| x.what.as_str())
            .collect();
        v.push(format!(
            "timeout: run {} ({}) attempt {} ran {ran:.1}s (pid {} under {}, from {} to {}, {}), past its timeout of {limit}s and the kill grace of {}s; faults meanwhile: {during:?}",
            i.run, r.pipeline, i.start, i.pid, i.sup, t(i.from), t(i.to), i.how, f.kill_grace
        ));
    }
    // The tables against the ledger's outcomes.
    for e in &f.ends {
        let Some(r) = f.runs.get(&e.run) else {
            continue;
        };
        let Some(code) = e.code else { continue };
        let Some(rec) = recorded_end(e.run, e.start) else {
            continue;
        };
        let (sup, supg) = sup_of.get(&(e.run, e.start)).copied().unwrap_or((-1, -1));
        let want = if code == 0 { "succeeded" } else { "failed" };
        let timed_out = rec.kind == "failed" && rec.why.contains("timed out");
        if rec.kind != want && rec.kind != "cancelled" && !timed_out {
            if rec.kind == "requeued"
                && let Some(fault) = f.lost_by(sup, supg, e.t, rec.at)
            {
                notes.push(format!(
                    "run {} attempt {} exited {code} but was queued again: its supervisor {sup} was lost ({})",
                    e.run, e.start, fault.what
                ));
                continue;
            }
            // on_lost = "fail": its lost supervisor fails it instead.
            if rec.kind == "failed"
                && rec.why.starts_with("lost (on_lost = \"fail\"")
                && let Some(fault) = f.lost_by(sup, supg, e.t, rec.at)
            {
                notes.push(format!(
                    "run {} attempt {} exited {code} but was failed as lost (on_lost = fail): its supervisor {sup} was lost ({})",
                    e.run, e.start, fault.what
                ));
                continue;
            }
            v.push(format!(
                "tables: run {} ({}) attempt {} exited {code} at {} (pid {}, under {}) but orca recorded it {} at {}",
                e.run, r.pipeline, e.start, t(e.t), e.pid, sup, rec.kind, t(rec.at)
            ));
        }
        if e.start == r.start
            && code != 0
            && r.state == "failed"
            && r.exit_code != Some(code)
            && !timed_out
        {
            v.push(format!(
                "tables: run {} ({}) last attempt {} exited {code} in the ledger, orca says exit {:?}",
                e.run, r.pipeline, e.start, r.exit_code
            ));
        }
    }
    for (id, r) in &f.runs {
        if r.state != "succeeded" {
            continue;
        }
        let ok = f
            .ends
            .iter()
            .any(|e| e.run == *id && e.start == r.start && e.code == Some(0));
        if !ok {
            v.push(format!(
                "tables: run {id} ({}) succeeded at attempt {}, which the ledger never saw exit 0",
                r.pipeline, r.start
            ));
        }
    }
    // Schedules: one run a slot.
    let mut slots: HashMap<(String, i64), Vec<i64>> = HashMap::new();
    for (id, r) in &f.runs {
        if let Some(s) = r.scheduled_for {
            slots
                .entry((r.pipeline.clone(), (s * 1000.0) as i64))
                .or_default()
                .push(*id);
        }
    }
    for ((p, slot), ids) in slots {
        if ids.len() > 1 {
            v.push(format!(
                "doubled: pipeline {p} fired slot {slot} ms {} times: runs {ids:?}",
                ids.len()
            ));
        }
    }
    Found {
        violations: v,
        excused: notes,
        known,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHED: i32 = 100;
    const OWN: i32 = 1;

    fn begin(run: i64, start: i32, pid: i32, t: f64) -> Begin {
        Begin {
            run,
            start,
            pid,
            t,
            sup: SCHED,
            supg: OWN,
            pipeline: "p".into(),
        }
    }

    fn end(run: i64, start: i32, pid: i32, t: f64, code: i32) -> End {
        End {
            run,
            start,
            pid,
            t,
            code: Some(code),
        }
    }

    fn ev(kind: &str, at: f64) -> Event {
        Event {
            kind: kind.into(),
            at,
            why: String::new(),
        }
    }

    fn run(state: &str, start: i32) -> Run {
        Run {
            pipeline: "p".into(),
            state: state.into(),
            start,
            fill: false,
            exit_code: Some(0),
            exit_signal: None,
            why: None,
            scheduled_for: None,
        }
    }

    fn facts() -> Facts {
        Facts {
            begins: Vec::new(),
            ends: Vec::new(),
            runs: BTreeMap::new(),
            events: BTreeMap::new(),
            max_runs: [("p".to_string(), 2)].into(),
            timeouts: [("p".to_string(), 5.0)].into(),
            retries: BTreeMap::new(),
            cancels: Default::default(),
            kill_grace: 2.0,
            seen: Vec::new(),
            faults: Vec::new(),
            now: 100.0,
            own_group: OWN,
        }
    }

    /// Run 1: attempt 1 (pid 11) requeued at 5 while it ran on to 9;
    /// attempt 2 (pid 12) from 6 to 8, succeeded.
    fn doubled() -> Facts {
        let mut f = facts();
        f.begins = vec![begin(1, 1, 11, 1.0), begin(1, 2, 12, 6.0)];
        f.ends = vec![end(1, 1, 11, 9.0, 0), end(1, 2, 12, 8.0, 0)];
        f.runs.insert(1, run("succeeded", 2));
        f.events.insert(
            1,
            vec![
                ev("started", 1.0),
                ev("requeued", 5.0),
                ev("started", 6.0),
                ev("succeeded", 8.1),
            ],
        );
        f
    }

    #[test]
    fn two_attempts_at_once_are_doubled_unless_their_supervisor_was_cut_off() {
        let v = check(&doubled());
        assert!(
            v.iter()
                .any(|l| l.starts_with("doubled: run 1 ran attempts 1 and 2")),
            "{v:?}"
        );
        let mut f = doubled();
        f.faults.push(Record {
            what: "SIGSTOP".into(),
            target: Target::Scheduler(SCHED),
            effect: Effect::CutOff,
            start: 0.5,
            end: 4.0,
            blocks: Block::Stopped,
        });
        let v = check(&f);
        assert!(!v.iter().any(|l| l.starts_with("doubled")), "{v:?}");
        // A Postgres outage excuses it only for a machine's runs.
        let mut f = doubled();
        f.faults.push(Record {
            what: "Postgres down".into(),
            target: Target::All,
            effect: Effect::CutOff,
            start: 0.5,
            end: 4.0,
            blocks: Block::Stopped,
        });
        assert!(check(&f).iter().any(|l| l.starts_with("doubled")));
        for b in f.begins.iter_mut() {
            b.supg = 77;
        }
        assert!(!check(&f).iter().any(|l| l.starts_with("doubled")));
    }

    #[test]
    fn one_attempt_in_two_processes_is_doubled() {
        let mut f = facts();
        f.begins = vec![begin(1, 1, 11, 1.0), begin(1, 1, 12, 1.5)];
        f.ends = vec![end(1, 1, 11, 2.0, 0), end(1, 1, 12, 2.5, 0)];
        f.runs.insert(1, run("succeeded", 1));
        f.events
            .insert(1, vec![ev("started", 1.0), ev("succeeded", 2.6)]);
        let v = check(&f);
        assert!(
            v.iter()
                .any(|l| l.contains("run 1 attempt 1 ran in 2 processes")),
            "{v:?}"
        );
    }

    #[test]
    fn more_than_max_runs_at_once_is_seen_and_fills_are_on_top() {
        let mut f = facts();
        for (id, t) in [(1, 1.0), (2, 1.2), (3, 1.4)] {
            f.begins.push(begin(id, 1, 10 + id as i32, t));
            f.ends.push(end(id, 1, 10 + id as i32, 3.0, 0));
            f.runs.insert(id, run("succeeded", 1));
            f.events
                .insert(id, vec![ev("started", t), ev("succeeded", 3.1)]);
        }
        let v = check(&f);
        assert!(
            v.iter()
                .any(|l| l.contains("max_runs: pipeline p (max_runs 2) ran 3 runs")),
            "{v:?}"
        );
        f.runs.get_mut(&3).unwrap().fill = true;
        assert!(check(&f).is_empty(), "{:?}", check(&f));
    }

    /// Seed 8543 met this: an attempt SIGKILLed at its timeout (no end
    /// line; the observer found it gone a scan late) is recorded ended at
    /// 10.015 by the database's clock, and the run its worker claimed in
    /// the same round began after, at 10.019, which the ledger's 10 ms
    /// clock (`/proc/uptime`) writes as 10.01: not three at once.
    #[test]
    fn a_begin_in_the_same_10_ms_as_an_end_recorded_before_it_is_no_overlap() {
        let mut f = facts();
        for (id, from, to) in [(1, 1.0, 0.0), (2, 8.0, 12.0), (3, 10.01, 12.0)] {
            f.begins.push(begin(id, 1, 10 + id as i32, from));
            if to > 0.0 {
                f.ends.push(end(id, 1, 10 + id as i32, to, 0));
            }
            f.runs.insert(id, run("succeeded", 1));
        }
        f.runs.insert(1, run("failed", 1));
        f.events
            .insert(1, vec![ev("started", 1.0), ev("failed", 10.015)]);
        f.events
            .insert(2, vec![ev("started", 8.0), ev("succeeded", 12.1)]);
        f.events
            .insert(3, vec![ev("started", 10.01), ev("succeeded", 12.1)]);
        f.seen.push(Seen {
            pid: 11,
            run: 1,
            start: 1,
            cmdline: "sh command.sh".into(),
            sup: SCHED,
            supg: OWN,
            first: 1.1,
            last: 9.9,
            gone: Some(10.2),
        });
        let v: Vec<String> = check(&f)
            .into_iter()
            .filter(|l| l.starts_with("max_runs"))
            .collect();
        assert!(v.is_empty(), "{v:?}");
        // Ten milliseconds more is an overlap.
        f.events.get_mut(&1).unwrap()[1] = ev("failed", 10.025);
        assert!(
            check(&f).iter().any(|l| l.starts_with("max_runs")),
            "{:?}",
            check(&f)
        );
    }

    #[test]
    fn a_run_left_queued_is_lost_and_outcomes_must_agree() {
        let mut f = facts();
        f.runs.insert(1, run("queued", 0));
        f.runs.insert(2, run("failed", 1));
        f.begins.push(begin(2, 1, 20, 1.0));
        f.ends.push(end(2, 1, 20, 2.0, 0));
        f.events
            .insert(2, vec![ev("started", 1.0), ev("failed", 2.1)]);
        let v = check(&f);
        assert!(v.iter().any(|l| l.starts_with("lost: run 1")), "{v:?}");
        assert!(!v.iter().any(|l| l.starts_with("retries")), "{v:?}");
        f.retries.insert("p".into(), 1);
        let v = check(&f);
        assert!(
            v.iter().any(|l| l
                .starts_with("retries: run 2 (p) is failed after 1 failed attempts (retries 1)")),
            "{v:?}"
        );
        assert!(
            v.iter().any(|l| l.contains("run 2 (p) attempt 1 exited 0")),
            "{v:?}"
        );
    }

    #[test]
    fn an_attempt_past_its_timeout_and_grace_is_seen_unless_its_supervisor_was_stopped() {
        let mut f = facts();
        f.runs.insert(1, run("failed", 1));
        f.begins.push(begin(1, 1, 11, 1.0));
        f.ends.push(End {
            run: 1,
            start: 1,
            pid: 11,
            t: 12.5,
            code: None,
        });
        f.events
            .insert(1, vec![ev("started", 1.0), ev("failed", 12.6)]);
        f.runs.get_mut(&1).unwrap().exit_code = Some(143);
        let v = check(&f);
        assert!(
            v.iter()
                .any(|l| l.starts_with("timeout: run 1 (p) attempt 1 ran 11.5s")),
            "{v:?}"
        );
        f.faults.push(Record {
            what: "SIGSTOP".into(),
            target: Target::Scheduler(SCHED),
            effect: Effect::CutOff,
            start: 4.0,
            end: 10.0,
            blocks: Block::Stopped,
        });
        assert!(check(&f).is_empty(), "{:?}", check(&f));
        // A call that held its loop up instead excuses nothing (D1, fixed:
        // timeouts are the watchdog thread's).
        f.faults[0].blocks = Block::Io;
        let found = check_noting(&f);
        assert!(
            found.violations[0].starts_with("timeout: run 1 (p) attempt 1"),
            "{:?}",
            found.violations
        );
    }

    #[test]
    fn a_process_outliving_its_attempt_is_leaked() {
        let mut f = facts();
        f.runs.insert(1, run("succeeded", 1));
        f.begins.push(begin(1, 1, 11, 1.0));
        f.ends.push(end(1, 1, 11, 2.0, 0));
        f.events
            .insert(1, vec![ev("started", 1.0), ev("succeeded", 2.1)]);
        f.seen.push(Seen {
            pid: 12,
            run: 1,
            start: 1,
            cmdline: "sleep 300".into(),
            sup: SCHED,
            supg: OWN,
            first: 1.1,
            last: 30.0,
            gone: Some(30.2),
        });
        let v = check(&f);
        assert!(
            v.iter()
                .any(|l| l.starts_with("leaked: run 1 attempt 1: pid 12")),
            "{v:?}"
        );
        // Its supervisor cut off just after the attempt ended, and for long:
        // it couldn't stop it; it did within GRACE of coming back.
        f.faults.push(Record {
            what: "partition".into(),
            target: Target::Scheduler(SCHED),
            effect: Effect::CutOff,
            start: 3.0,
            end: 25.0,
            blocks: Block::Stopped,
        });
        assert!(check(&f).is_empty(), "{:?}", check(&f));
        f.seen[0].last = 40.0;
        assert_eq!(check(&f).len(), 1, "{:?}", check(&f));
    }
}
