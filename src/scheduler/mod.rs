//! `orca scheduler`: the tick loop on the main thread, on a connection of
//! its own (the one that holds the lead), and a heartbeat thread, an alert
//! thread, the removals thread and the flood guard ([`crate::db::flood`])
//! sharing a second (with the ends of its runs).
//!
//! Every tick the scheduler reaps its children and writes their outcomes
//! (kept in memory until they land, so an outage loses none), enforces
//! timeouts and cancels, and then, only while it holds `LEAD_LOCK` on the
//! session it writes with, decides: fires schedules, runs sensors, starts
//! queued runs and sweeps runs whose heartbeat went stale. Whether it leads,
//! on which session, and when it drains are [`crate::lead`]'s to say
//! ([`crate::lead::hold::Leadership::step`], each tick).
//!
//! The parts, by duty: this file (`main`, the loop, the tick, stopping);
//! [`views`] (the pipelines a leading tick reads, lent to each duty);
//! [`stops`] (SIGTERM and SIGINT counted);
//! [`duties`] (a leading tick's duties in their order, pure); [`fire`]
//! (schedules: what to fire, pure, then the writes); [`sense`]
//! (sensors); [`start`] (queued local and EC2 runs); [`sweep`] (stale runs,
//! and when silence may be judged at all); [`prune`] (history past
//! `ORCA_KEEP_DAYS`, deleted in small batches); [`stats`] (`ORCA_TICK_STATS`);
//! [`alerts`] (the alert thread). This file imports its parts; none of
//! them imports it back. The scheduler calls into `lead`, `pools`,
//! `warm_pool`, `supervise`, `config` and `db`; none of them imports it.
//!
//! Invariants:
//! * Decisions are written through the lead's [`crate::lead::Term`], the
//!   only way a duty reaches the database: on the session that took the
//!   lock, so if Postgres ends that session, nothing decided after it lands.
//! * A run is claimed (`queued` → `running`, `start` + 1) before its process
//!   is spawned; an attempt's end is written only if the run is still
//!   `running` at that `start`, so it is recorded once.
//! * Children are started from the main thread, by its keeper
//!   ([`crate::supervise::keeper`]): they can't outlive the scheduler.

pub mod alerts;
pub mod duties;
pub mod fire;
pub mod gauges;
pub mod prune;
pub mod sense;
pub mod start;
pub mod stats;
pub mod stops;
pub mod sweep;
pub mod views;
pub mod wake;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::config;
use crate::db::{self, Db, Fault, Link, Target};
use crate::exit::{self, Failure, Outcome, bad, no};
use crate::lead::hold::{Joined, Leadership, Supervised};
use crate::lead::lock;
use crate::lead::{DutyError, Term};
use crate::machines::fleet::{Deadline, Fleet};
use crate::pools::{PoolScaler, mark};
use crate::runs;
use crate::settings::{PoolTiming, Timing};
use crate::supervise::{self, Supervisor};
use crate::warm_pool::leader::Ec2Runs;
use duties::{Duty, Facts};
use fire::Schedules;
use sense::Sensors;
use stats::TickStats;
use stops::{install_stop_handlers, stops};
use views::{Views, pipelines};
use wake::Wake;

/// The scheduler's state between ticks.
pub struct Scheduler {
    db: Db,
    timing: Timing,
    host: String,
    /// Whether this process leads, on which session, since when; its
    /// row in `orca.schedulers` with overlap on.
    lead: Leadership,
    /// A config to register once this process leads (`-c`, overlap on).
    register: Option<config::Config>,
    /// Pipelines whose stored spec this binary can't read (logged once).
    unreadable: HashSet<String>,
    /// The processes of the runs this scheduler started.
    sup: Supervisor,
    /// The pool autoscaler (its passes are steps of the leader's tick).
    scaler: PoolScaler,
    /// EC2 runs' instances.
    ec2_runs: Ec2Runs,
    /// The providers machines and instances are made with, this stack's
    /// id: one for the scaler and EC2 runs, lent to each.
    fleet: Fleet,
    /// Schedules, parsed once each.
    schedules: Schedules,
    /// Sensors, by pipeline.
    sensors: Sensors,
    /// When machine logins stuck in a transaction were last looked for.
    stuck_checked: Instant,
    /// When what logins made was last swept (`machines::objects`).
    objects_swept: Instant,
    /// Per tick (and per scaler pass): how long it took and how many
    /// statements it made, when `ORCA_TICK_STATS` names a file to write
    /// their summary to at exit.
    stats: Option<TickStats>,
    /// The metrics read from the database (`ORCA_METRICS_ADDR`).
    gauges: gauges::Gauges,
    /// Pruning history past the keep (the leader's).
    prune: prune::Prune,
    /// Start passes between ticks: listening for queued runs, the gate.
    wake: Wake,
    /// The session the last tick led on (`None`: it didn't lead), and the
    /// pipelines it read, for the passes until the next tick.
    led: Option<u64>,
    views: Views,
}

/// `orca scheduler`: runs until SIGTERM or SIGINT.
pub fn main(config_path: Option<&str>) -> Outcome {
    let timing = Timing::from_env().map_err(bad)?;
    let listen = crate::settings::listen_on().map_err(bad)?;
    let pool_timing = PoolTiming::from_env().map_err(bad)?;
    let keep = crate::settings::keep_seconds().map_err(bad)?;
    let config = config_path
        .map(config::load)
        .transpose()
        .map_err(Failure::config)?;
    let host = runs::hostname();
    let app = lock::application_name(&host);
    let target = Target::from_env().map_err(bad)?.with_application_name(&app);
    let overlap = crate::lead::overlap_on().map_err(bad)?;
    // Every setting is read (bad input refused) before anything is said.
    let ec2_runs = Ec2Runs::new(pool_timing.clone()).map_err(bad)?;
    // Stops are heard before anything answers: a stop sent as soon as
    // /metrics answers (a readiness check) drains, it doesn't kill.
    install_stop_handlers();
    crate::metrics::serve::start_from_env().map_err(bad)?;
    // SAFETY: geteuid(2) can't fail.
    let euid = unsafe { libc::geteuid() };
    let elsewhere = crate::secrets::run_as().is_some() || crate::secrets::run_uids().is_some();
    if let Some(w) = crate::secrets::run_as::root_warning(euid, elsewhere) {
        log::warn!("{w}");
    }
    let scaler = PoolScaler::new(pool_timing);
    let mut db = Db::new(target.clone(), "scheduler");
    // Wait for the database, however long: a scheduler started before its
    // database (a reboot) should come up with it.
    while !db.ensure() {
        if let Some(why) = db.bad_input() {
            return Err(bad(why.to_string()));
        }
        if stops() > 0 {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let known = db::migrations_known();
    match db.run(db::migrations_applied) {
        Ok(n) if n >= known => {}
        Ok(0) => return Err(no(db::NO_SCHEMA)),
        Ok(n) => {
            return Err(no(format!(
                "the database at {} has {n} of this binary's {known} migrations: run `orca migrate` first",
                target.shown()
            )));
        }
        Err(e) => return Err(no(e.to_string())),
    }
    if let Ok(warnings) = db.run(crate::db::locks::database_warnings) {
        for w in warnings {
            log::warn!("{w}");
        }
    }
    if overlap {
        let id = loop {
            match db.run(|c| crate::lead::join(c, &host, known)) {
                Ok(id) => break id,
                Err(Fault::Down | Fault::Refused(_)) if stops() == 0 => {
                    std::thread::sleep(Duration::from_secs(1))
                }
                Err(e) => return Err(no(e.to_string())),
            }
        };
        log::info!(
            "scheduler {id} on {host} (pid {}, image {}) joined; database {}",
            std::process::id(),
            crate::lead::image(),
            target.shown()
        );
        let lead = Leadership::new(app, None, Some(Joined::new(id)));
        return exit::status(run(
            db, target, timing, scaler, ec2_runs, host, lead, config, keep, listen,
        ));
    }
    let session = db.sessions;
    match db.run(|c| lock::take(c, &app)) {
        Ok(true) => {}
        Ok(false) => {
            let who = lock::who_leads(&mut db);
            return Err(no(format!(
                "another scheduler is running ({who}); it holds the lead"
            )));
        }
        Err(e) => return Err(no(e.to_string())),
    }
    let mut lead = Leadership::new(app, Some(session), None);
    if let Some(config) = &config {
        let registered = match lead.term(&mut db) {
            Some(mut term) => term.run(|c| config::register::register(c, config)),
            None => Err(DutyError::LostLead),
        };
        if let Err(e) = registered {
            return Err(no(format!("register: {e}")));
        }
    }
    log::info!(
        "scheduler on {host} (pid {}) leads; database {}",
        std::process::id(),
        target.shown()
    );
    exit::status(run(
        db, target, timing, scaler, ec2_runs, host, lead, None, keep, listen,
    ))
}

/// Starts the heartbeat and alert threads, runs the tick loop, and stops them.
#[allow(clippy::too_many_arguments)]
fn run(
    db: Db,
    target: Target,
    timing: Timing,
    scaler: PoolScaler,
    ec2_runs: Ec2Runs,
    host: String,
    lead: Leadership,
    register: Option<config::Config>,
    keep: f64,
    listen: bool,
) -> i32 {
    // The second connection: its runs' beats and ends, and alerts. (The
    // first is the tick's, which may stall; beats must not.)
    let side = Link::new(Db::new(target.clone(), "heartbeat"));
    let sup = Supervisor::new(
        side.clone(),
        format!("the scheduler on {host}"),
        timing.kill_grace,
        &supervise::SCHEDULER,
    );
    let side_for_mark = side.clone();
    let alert_done = Arc::new(AtomicBool::new(false));
    // Who leads, as the lead's step tells it each tick: the alert thread
    // sends only while this process leads; the removals thread fences its
    // marks on the leading session's backend pid.
    let known = lead.known();
    let wake = Wake::new(
        listen,
        target.clone().with_application_name(&format!(
            "{} wake pid {}",
            crate::lead::lock::SCHEDULER_APP,
            std::process::id()
        )),
        known.clone(),
    );
    let alert_thread = {
        let done = alert_done.clone();
        let leads = known.clone();
        let db = side.clone();
        std::thread::Builder::new()
            .name("alerts".into())
            .spawn(move || crate::scheduler::alerts::run(db, leads, done))
            .expect("spawn alert thread")
    };
    // Removals begin off the tick, on the side connection too.
    let mark_thread = {
        let (link, timing, leader, unbegun, done) = (
            side_for_mark,
            scaler.timing().clone(),
            known,
            scaler.unbegun(),
            alert_done.clone(),
        );
        std::thread::Builder::new()
            .name("removals".into())
            .spawn(move || mark::run(link, timing, leader, unbegun, done))
            .expect("spawn removals thread")
    };
    // The flood guard, on the side connection too: a session already open
    // is the one thing that still runs when a login fills the server's lock
    // table (`db::flood`).
    let guard_thread = {
        let (link, done) = (side.clone(), alert_done.clone());
        std::thread::Builder::new()
            .name("flood guard".into())
            .spawn(move || crate::db::flood::run(link, done))
            .expect("spawn flood guard thread")
    };
    let mut s = Scheduler {
        db,
        prune: prune::Prune::new(keep, timing.tick),
        timing,
        host,
        lead,
        register,
        unreadable: HashSet::new(),
        sup,
        fleet: Fleet::new(scaler.timing().try_every),
        scaler,
        ec2_runs,
        schedules: Schedules::default(),
        sensors: Sensors::default(),
        stuck_checked: Instant::now(),
        objects_swept: Instant::now(),
        stats: TickStats::from_env(),
        gauges: gauges::Gauges::default(),
        wake,
        led: None,
        views: Views::new(),
    };
    let code = s.run_loop();
    alert_done.store(true, Ordering::SeqCst);
    drop(s);
    // An alert being sent may take its HTTP timeout; don't wait that long
    // (an unrecorded send is sent again later, after its lease).
    let deadline = Instant::now() + Duration::from_secs(2);
    while !(alert_thread.is_finished() && mark_thread.is_finished() && guard_thread.is_finished())
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    code
}

impl Scheduler {
    fn run_loop(&mut self) -> i32 {
        let tick = Duration::from_secs_f64(self.timing.tick);
        let mut next = Instant::now();
        loop {
            let signals = stops();
            if signals > 0 && (self.lead.joined.is_none() || signals > 1) {
                return self.stop();
            }
            let (began, calls) = (Instant::now(), self.db.calls);
            self.tick();
            self.wake.after_tick(self.led);
            crate::metrics::observe(&crate::metrics::TICK, began.elapsed().as_secs_f64());
            if let Some(stats) = &mut self.stats {
                stats.tick((
                    began.elapsed().as_secs_f64() * 1000.0,
                    self.db.calls - calls,
                ));
            }
            if self.lead.ended {
                log::info!("drained: exiting");
                return 0;
            }
            if self.lead.lost_to.is_some() && self.sup.idle() {
                log::error!(
                    "exiting: the lead was taken by {}",
                    self.lead.lost_to.as_deref().unwrap_or("?")
                );
                return 1;
            }
            next += tick;
            let now = Instant::now();
            if next < now {
                next = now;
            }
            // A scheduler waiting for the lead waits on the lock instead, a
            // slice at a time (a signal is heard between slices): it leads
            // the moment the holder drains.
            let mut may_wait = self.lead.waits();
            while Instant::now() < next && stops() == signals {
                if may_wait {
                    let slice = next.min(Instant::now() + Duration::from_millis(250));
                    match self.lead.wait_for_lead(&mut self.db, slice) {
                        Some(true) => {
                            next = Instant::now();
                            break;
                        }
                        Some(false) => continue,
                        None => may_wait = false,
                    }
                }
                // A leader waits on its session instead: a run queued, or
                // one of its own ended, makes a start pass at once.
                if let Some(session) = self.led {
                    self.between_ticks(session, next);
                    continue;
                }
                std::thread::sleep((next - Instant::now()).min(Duration::from_millis(50)));
            }
        }
    }

    /// One slice of the wait between ticks of a leader (led on `session`),
    /// until `until` at most: reaps what ended, waits for notifications
    /// (`wake`), and makes a start pass if one is due (see [`wake`]).
    fn between_ticks(&mut self, session: u64, until: Instant) {
        let running = self.sup.running();
        self.sup.reap();
        let ended = self.sup.running() < running;
        if ended {
            // Written first: the pass counts running runs against max_runs.
            self.sup.flush();
            self.sup.publish();
        }
        let notified = self.wake.wait(until, ended);
        if !self.wake.gate.due(notified, ended) || stops() > 0 {
            return;
        }
        let Some(mut term) = self.lead.term(&mut self.db) else {
            return;
        };
        if term.session() != session {
            return;
        }
        let started = start::start_local(&mut term, &mut self.sup, &self.host, &self.views);
        let bound = start::STARTS_PER_TICK as usize;
        self.wake.passed(started, bound, notified, ended);
    }

    /// One tick: supervise, write what is pending, and decide if leading.
    fn tick(&mut self) {
        self.led = None;
        let began = Instant::now();
        self.sup.reap();
        self.sup.enforce();
        self.sup.flush();
        let ours = self.sup.ours();
        let sup = Supervised {
            ours: &ours,
            running: self.sup.running(),
            idle: self.sup.idle(),
        };
        let mut lead = self
            .lead
            .step(&mut self.db, self.timing.stale, || stops() > 0, sup);
        crate::metrics::set(
            &crate::metrics::LEADER,
            &[],
            f64::from(u8::from(lead.is_some())),
        );
        self.gauges.step(lead.as_mut());
        let Some(mut term) = lead else {
            // Sensors are decisions: only the leader runs them.
            self.sensors.stop();
            self.sup.publish();
            return;
        };
        let term = &mut term;
        // Registered first: the pipelines read next are the file's.
        if let Some(config) = self.register.take() {
            match term.run(|c| config::register::register(c, &config)) {
                Ok(retired) => log::info!(
                    "registered {}; retired {retired:?}",
                    crate::plural::count(config.pipelines.len() as i64, "pipeline")
                ),
                Err(e) => {
                    log::error!("register: {e}");
                    self.register = Some(config);
                }
            }
        }
        let (now, pipelines) = match pipelines(term, &mut self.unreadable) {
            Ok(read) => read,
            Err(e) => {
                e.complain();
                self.sup.publish();
                return;
            }
        };
        let every = self.timing.login_xact / 2.0;
        let plan = duties::plan(Facts {
            stuck_logins: self.stuck_checked.elapsed().as_secs_f64() >= every,
            objects: self.objects_swept.elapsed().as_secs_f64() >= every,
            clock: now.is_some(),
            scale: self.scaler.due(),
        });
        let stale = self.timing.stale;
        // Provider work (the pool scaler's pass, EC2 runs' instances) shares
        // one deadline a tick, from the first of them.
        let mut deadline = None;
        for duty in plan {
            match duty {
                Duty::StuckLogins => {
                    self.stuck_checked = Instant::now();
                    let secs = self.timing.login_xact;
                    if let Err(e) = term.run(|c| crate::db::locks::end_stuck_logins(c, secs)) {
                        e.complain();
                    }
                }
                // What logins made (large objects, default privileges) lasts
                // at most about as long as a stuck login's transaction.
                Duty::Objects => {
                    self.objects_swept = Instant::now();
                    if let Err(e) = term.run(crate::machines::objects::sweep) {
                        e.complain();
                    }
                }
                Duty::Fire => {
                    if let Some(now) = now {
                        self.schedules.fire(term, now, &pipelines);
                    }
                }
                Duty::Sense => self.sensors.sense(term, &pipelines),
                Duty::StartLocal => {
                    let started = start::start_local(term, &mut self.sup, &self.host, &pipelines);
                    self.wake
                        .gate
                        .tick_started(started, start::STARTS_PER_TICK as usize);
                }
                Duty::Scale => {
                    let deadline = *deadline.get_or_insert_with(|| Deadline::from(Instant::now()));
                    let judge = judge_silence(term, began, stale);
                    match self.scaler.scale(&mut self.fleet, term, judge, deadline) {
                        Ok(figures) => {
                            if let Some(stats) = &mut self.stats {
                                stats.pass(figures);
                            }
                        }
                        Err(e) => e.complain(),
                    }
                }
                // EC2 runs' upkeep: while an EC2 pipeline is registered, and
                // while a retired one's run or instances live on (else a lost
                // head would leave its run running and its instances billed
                // for ever).
                Duty::Ec2 => {
                    let deadline = *deadline.get_or_insert_with(|| Deadline::from(Instant::now()));
                    let registered = duties::ec2_registered(&pipelines);
                    let due = match self.ec2_runs.upkeep_due(term, registered) {
                        Ok(due) => due,
                        Err(e) => {
                            e.complain();
                            false
                        }
                    };
                    if due {
                        self.ec2_runs.begin_tick(&mut self.fleet, deadline);
                        start::start_ec2(term, &mut self.ec2_runs, &mut self.fleet, &pipelines);
                        let judge = judge_silence(term, began, stale);
                        if let Err(e) = self.ec2_runs.watch(&mut self.fleet, term, judge) {
                            e.complain();
                        }
                    }
                }
                // A tick the database stalled under sweeps nothing: beats of
                // others may have waited as long, so what looks stale now may
                // not be.
                Duty::Sweep => {
                    sweep::sweep(term, &self.sup, stale, began.elapsed().as_secs_f64());
                    self.sup.publish();
                }
                // Last: what is left of the tick's time, within its budget.
                Duty::Prune => self.prune.step(term),
            }
        }
        // Passes until the next tick start with what this tick read.
        self.led = Some(term.session());
        self.views = pipelines;
    }

    /// SIGTERM or SIGINT: start nothing more, SIGTERM the children, wait up
    /// to the stop grace, SIGKILL what is left, queue their runs again.
    fn stop(&mut self) -> i32 {
        self.sensors.stop();
        // What can't be written within a stale limit is left to the sweep
        // (its heartbeat goes stale once this process is gone).
        let left = self.sup.stop_all(self.timing.stop_grace, self.timing.stale);
        if left > 0 {
            log::warn!(
                "{left} run ends could not be written; the next scheduler queues them again"
            );
        }
        if let Some(joined) = &self.lead.joined {
            let id = joined.id;
            if let Err(e) = self.db.run(|c| crate::lead::end(c, id)) {
                log::warn!("can't end scheduler {id}'s row ({e}); it goes stale by itself");
            }
        }
        if let Some(stats) = &self.stats {
            stats.write();
        }
        0
    }
}

/// Whether machines' and instances' silence may be judged now, in a tick
/// begun at `began`, on the lead (`term`; see [`sweep::judge_silence`]).
fn judge_silence(term: &Term, began: Instant, stale: f64) -> bool {
    sweep::judge_silence(began.elapsed().as_secs_f64(), Some(term.led_for()), stale)
}
