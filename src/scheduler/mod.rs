//! `orca scheduler`: the tick loop on the main thread, a heartbeat thread and
//! an alert thread, each with a connection of its own.
//!
//! Every tick the scheduler reaps its children and writes their outcomes
//! (kept in memory until they land, so an outage loses none), enforces
//! timeouts and cancels, and then, only while it holds `LEAD_LOCK` on the
//! session it writes with, decides: fires schedules, runs sensors, starts
//! queued runs and sweeps runs whose heartbeat went stale. Whether it leads,
//! on which session, and when it drains are [`crate::lead`]'s to say
//! ([`crate::lead::hold::Leadership::step`], each tick).
//!
//! Invariants:
//! * Decisions are written with [`Db::run_fenced`] on the session that took
//!   the lock: if Postgres ends that session, nothing decided after it lands.
//! * A run is claimed (`queued` → `running`, `start` + 1) before its process
//!   is spawned; an attempt's end is written only if the run is still
//!   `running` at that `start`, so it is recorded once.
//! * Children are started from the main thread under the shim
//!   ([`crate::supervise::child`]): they can't outlive the scheduler.

pub mod alerts;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use crate::config::{self, Pipeline};
use crate::db::sql;
use crate::db::{self, Db, Fault, Target};
use crate::exit::{self, Failure, Outcome, bad, no};
use crate::lead::hold::{Instance, Leadership, Supervised};
use crate::lead::lock;
use crate::pools::PoolScaler;
use crate::runs;
use crate::settings::{PoolTiming, Timing};
use crate::supervise::child::Child;
use crate::supervise::{self, Supervisor};
use crate::warm_pool::leader::Ec2Runs;

/// The placements whose runs the scheduler starts itself (a `worker:`
/// run is claimed by a worker of its pool).
#[derive(Clone, Copy, PartialEq, Debug)]
enum Starts {
    /// Processes on this host.
    Local,
    /// Instances of the run's own.
    Ec2,
}

impl Starts {
    /// The placement, as `orca.pipelines.placement` has it.
    fn placement(self) -> config::Placement {
        match self {
            Starts::Local => config::Placement::Local,
            Starts::Ec2 => config::Placement::Ec2,
        }
    }
}
/// How many runs one tick starts at most (the rest wait a tick).
const STARTS_PER_TICK: i64 = 64;

/// How many SIGTERM/SIGINT arrived. With overlap on, the first means drain
/// and a second means stop now.
static STOPS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_stop(_: libc::c_int) {
    STOPS.fetch_add(1, Ordering::SeqCst);
}

fn stops() -> usize {
    STOPS.load(Ordering::SeqCst)
}

fn install_stop_handlers() {
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(
            libc::SIGTERM,
            on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
        libc::signal(
            libc::SIGINT,
            on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
}

struct Sensor {
    next: Instant,
    child: Option<(Child, Instant)>,
    /// It said yes and the run is not queued yet (the database was away).
    yes: bool,
}

/// A pipeline as this tick sees it: its spec, next slot, and whether paused.
struct View {
    p: Arc<Pipeline>,
    next_fire: Option<DateTime<Utc>>,
    paused: bool,
}

/// Schedules by their expression, parsed once; one that can't be read or
/// never fires is remembered as such (and said once), so no tick searches
/// for its next time again.
#[derive(Default)]
struct Schedules {
    crons: HashMap<String, Option<croner::Cron>>,
    /// Searches for a next time made so far (the tests count them).
    searches: u64,
}

impl Schedules {
    /// The first time of `expr` after `t`, or `None` if it has none
    /// (pipeline `name`'s; said once per expression).
    fn next_after(&mut self, name: &str, expr: &str, t: &DateTime<Utc>) -> Option<DateTime<Utc>> {
        let entry = self.crons.entry(expr.to_string()).or_insert_with(|| {
            match config::parse_stored_schedule(expr) {
                Ok(c) if config::fires_ever(&c) => Some(c),
                Ok(_) => {
                    log::error!(
                        "schedule '{expr}' (pipeline {name}, and any other with it) never fires: ignored"
                    );
                    None
                }
                Err(e) => {
                    log::error!("pipeline {name}: {e}: ignored");
                    None
                }
            }
        });
        let cron = entry.as_ref()?;
        self.searches += 1;
        match cron.find_next_occurrence(t, false) {
            Ok(n) => Some(n),
            Err(e) => {
                log::error!(
                    "pipeline {name}: schedule '{expr}' has no time after {t}: ignored ({e})"
                );
                *entry = None;
                None
            }
        }
    }
}

/// What a tick does about a pipeline's schedule.
#[derive(Debug, PartialEq)]
enum FireStep {
    /// It has no next slot yet (new, changed or resumed): compute it.
    First,
    /// Its slot is due: fire it.
    Fire(DateTime<Utc>),
    /// Nothing (its slot is ahead, or it is paused): no time is computed.
    Wait,
}

/// The step for a pipeline whose next slot is `next_fire`, at `now`.
fn fire_step(next_fire: Option<DateTime<Utc>>, now: DateTime<Utc>, paused: bool) -> FireStep {
    match next_fire {
        None => FireStep::First,
        Some(slot) if slot <= now && !paused => FireStep::Fire(slot),
        Some(_) => FireStep::Wait,
    }
}

/// What a tick or a scaler pass cost: milliseconds and statements.
type Figure = (f64, u64);

/// This tick's pipelines, by name.
type Views = HashMap<String, View>;

/// The scheduler's state between ticks.
pub struct Scheduler {
    db: Db,
    timing: Timing,
    host: String,
    /// Whether this process leads now (the alert thread sends only then).
    leads_now: Arc<AtomicBool>,
    /// Whether this process leads, on which session, since when; its
    /// instance row with overlap on.
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
    /// Schedules, parsed once each.
    schedules: Schedules,
    sensors: HashMap<String, Sensor>,
    /// When machine logins stuck in a transaction were last looked for.
    stuck_checked: Instant,
    /// Per tick: how long it took and how many statements it made, when
    /// `ORCA_TICK_STATS` names a file to write their summary to at exit.
    /// Scaler passes likewise.
    stats: Option<(String, Vec<Figure>, Vec<Figure>)>,
}

/// `orca scheduler`: runs until SIGTERM or SIGINT.
pub fn main(config_path: Option<&str>) -> Outcome {
    let timing = Timing::from_env().map_err(bad)?;
    let pool_timing = PoolTiming::from_env().map_err(bad)?;
    let config = config_path
        .map(config::load)
        .transpose()
        .map_err(Failure::config)?;
    let host = runs::hostname();
    let app = lock::application_name(&host);
    let target = Target::from_env().map_err(bad)?.with_application_name(&app);
    let overlap = crate::lead::overlap_on().map_err(bad)?;
    install_stop_handlers();
    let ec2_runs = Ec2Runs::new(pool_timing.clone()).map_err(bad)?;
    let scaler = PoolScaler::new(pool_timing);
    let mut db = Db::new(target.clone(), "scheduler");
    // Wait for the database, however long: a scheduler started before its
    // database (a reboot) should come up with it.
    while !db.ensure() {
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
            "scheduler instance {id} on {host} (pid {}, image {}) joined; database {}",
            std::process::id(),
            crate::lead::image(),
            target.shown()
        );
        let instance = Instance::new(id);
        return exit::status(run(
            db,
            target,
            timing,
            scaler,
            ec2_runs,
            host,
            app,
            None,
            Some(instance),
            config,
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
    if let Some(config) = &config
        && let Err(e) = db.run_fenced(session, |c| config::register::register(c, config))
    {
        return Err(no(format!("register: {e}")));
    }
    log::info!(
        "scheduler on {host} (pid {}) leads; database {}",
        std::process::id(),
        target.shown()
    );
    exit::status(run(
        db,
        target,
        timing,
        scaler,
        ec2_runs,
        host,
        app,
        Some(session),
        None,
        None,
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
    app: String,
    lead_session: Option<u64>,
    instance: Option<Instance>,
    register: Option<config::Config>,
) -> i32 {
    let sup = Supervisor::new(
        target.clone(),
        format!("the scheduler on {host}"),
        timing.kill_grace,
        &supervise::SCHEDULER,
    );
    let alert_done = Arc::new(AtomicBool::new(false));
    let leads_now = Arc::new(AtomicBool::new(false));
    let alert_thread = {
        let done = alert_done.clone();
        let leads = leads_now.clone();
        let db = Db::new(target, "alerts");
        std::thread::Builder::new()
            .name("alerts".into())
            .spawn(move || crate::scheduler::alerts::run(db, leads, done))
            .expect("spawn alert thread")
    };
    let mut s = Scheduler {
        db,
        timing,
        host,
        leads_now,
        lead: Leadership::new(app, lead_session, instance),
        register,
        unreadable: HashSet::new(),
        sup,
        scaler,
        ec2_runs,
        schedules: Schedules::default(),
        sensors: HashMap::new(),
        stuck_checked: Instant::now(),
        stats: std::env::var("ORCA_TICK_STATS")
            .ok()
            .map(|path| (path, Vec::new(), Vec::new())),
    };
    let code = s.run_loop();
    alert_done.store(true, Ordering::SeqCst);
    drop(s);
    // An alert being sent may take its HTTP timeout; don't wait that long
    // (an unrecorded send is sent again later, after its lease).
    let deadline = Instant::now() + Duration::from_secs(2);
    while !alert_thread.is_finished() && Instant::now() < deadline {
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
            if signals > 0 && (self.lead.instance.is_none() || signals > 1) {
                return self.stop();
            }
            let (began, calls) = (Instant::now(), self.db.calls);
            self.tick();
            if let Some((_, ticks, _)) = &mut self.stats {
                ticks.push((
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
            while Instant::now() < next && stops() == signals {
                std::thread::sleep((next - Instant::now()).min(Duration::from_millis(50)));
            }
        }
    }

    /// One tick: supervise, write what is pending, and decide if leading.
    fn tick(&mut self) {
        let began = Instant::now();
        self.sup.reap();
        self.sup.enforce(&mut self.db);
        self.sup.flush(&mut self.db);
        let ours = self.sup.ours();
        let sup = Supervised {
            ours: &ours,
            running: self.sup.running(),
            idle: self.sup.idle(),
        };
        let lead = self
            .lead
            .step(&mut self.db, self.timing.stale, || stops() > 0, sup);
        self.leads_now.store(lead.is_some(), Ordering::SeqCst);
        let Some(session) = lead else {
            // Sensors are decisions: only the leader runs them.
            for (_, s) in self.sensors.drain() {
                if let Some((child, _)) = s.child {
                    child.kill();
                }
            }
            self.sup.publish();
            return;
        };
        if let Some(config) = self.register.take() {
            match self
                .db
                .run_fenced(session, |c| config::register::register(c, &config))
            {
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
        let view = match self
            .db
            .run_fenced(session, |c| c.query(sql::TICK_PIPELINES, &[]))
        {
            Ok(rows) => rows,
            Err(e) => {
                e.complain();
                self.sup.publish();
                return;
            }
        };
        let mut now: Option<DateTime<Utc>> = None;
        let mut pipelines = HashMap::new();
        for row in &view {
            now = Some(row.get(0));
            let name: String = row.get(1);
            let spec: serde_json::Value = row.get(2);
            let next_fire: Option<DateTime<Utc>> = row.get(6);
            let paused: bool = row.get(7);
            match serde_json::from_value::<Pipeline>(spec) {
                Ok(p) => {
                    pipelines.insert(
                        name,
                        View {
                            p: Arc::new(p),
                            next_fire,
                            paused,
                        },
                    );
                }
                Err(e) => {
                    if self.unreadable.insert(name.clone()) {
                        log::error!(
                            "pipeline {name}: its stored spec is not one this binary reads \
                             (registered by another version?); skipping it: {:?} error",
                            e.classify()
                        );
                    }
                }
            }
        }
        if self.stuck_checked.elapsed().as_secs_f64() >= self.timing.login_xact / 2.0 {
            self.stuck_checked = Instant::now();
            let secs = self.timing.login_xact;
            if let Err(e) = self
                .db
                .run_fenced(session, |c| crate::db::locks::end_stuck_logins(c, secs))
            {
                e.complain();
            }
        }
        if let Some(now) = now {
            self.fire(session, now, &pipelines);
        }
        self.sense(session, &pipelines);
        self.start(session, &pipelines, Starts::Local);
        if pipelines
            .values()
            .any(|v| v.p.placement == config::Placement::Ec2)
        {
            self.start(session, &pipelines, Starts::Ec2);
            let judge = self.judge_silence(began);
            if let Err(e) = self.ec2_runs.watch(&mut self.db, session, judge) {
                e.complain();
            }
        }
        if self.scaler.due() {
            let judge = self.judge_silence(began);
            match self.scaler.scale(&mut self.db, session, judge) {
                Ok(figures) => {
                    if let Some((_, _, passes)) = &mut self.stats {
                        passes.push(figures);
                    }
                }
                Err(e) => e.complain(),
            }
        }
        if began.elapsed().as_secs_f64() > self.timing.stale / 2.0 {
            // The database stalled under this tick: beats of others may have
            // waited as long, so what looks stale now may not be. Wait one
            // more stale limit before sweeping anything.
            log::warn!(
                "a tick took {:.1}s: no sweep for one stale limit",
                began.elapsed().as_secs_f64()
            );
            self.lead.restart_clock();
        } else {
            self.sweep(session);
        }
        self.sup.publish();
    }

    /// Whether machines' and instances' silence may be judged now: only once
    /// the lead is a stale limit old and this tick (begun at `began`) did not
    /// stall; after an outage, their beats need a moment to land again.
    fn judge_silence(&self, began: Instant) -> bool {
        self.lead
            .since()
            .is_some_and(|since| since.elapsed().as_secs_f64() >= self.timing.stale)
            && began.elapsed().as_secs_f64() <= self.timing.stale / 2.0
    }

    /// Fires due schedules: one run per slot; one catch-up after downtime.
    /// A slot is computed only when one is missing or fired, never for a
    /// pipeline that waits for its slot.
    fn fire(&mut self, session: u64, now: DateTime<Utc>, pipelines: &Views) {
        for (
            name,
            View {
                p,
                next_fire,
                paused,
            },
        ) in pipelines
        {
            let Some(expr) = &p.schedule else { continue };
            let slot = match fire_step(*next_fire, now, *paused) {
                FireStep::Wait => continue,
                FireStep::First => {
                    let Some(after_now) = self.schedules.next_after(name, expr, &now) else {
                        continue;
                    };
                    if let Err(e) = self.db.run_fenced(session, |c| {
                        c.execute(sql::NEXT_FIRE_SET, &[name, &after_now])
                    }) {
                        e.complain();
                    }
                    continue;
                }
                FireStep::Fire(slot) => slot,
            };
            let Some(after_now) = self.schedules.next_after(name, expr, &now) else {
                continue;
            };
            let mut missed = 0u32;
            let mut t = slot;
            while let Some(n) = self.schedules.next_after(name, expr, &t) {
                if n > now || missed >= 10_000 {
                    break;
                }
                missed += 1;
                t = n;
            }
            let why = if missed == 0 {
                format!(
                    "schedule '{expr}', slot {}",
                    slot.format("%Y-%m-%dT%H:%M:%SZ")
                )
            } else {
                format!(
                    "schedule '{expr}', slot {}: one catch-up run for {} missed",
                    slot.format("%Y-%m-%dT%H:%M:%SZ"),
                    crate::plural::count(i64::from(missed) + 1, "slot")
                )
            };
            match self.db.run_fenced(session, |c| {
                c.query_opt(sql::FIRE, &[name, &slot, &after_now, &why])
            }) {
                Ok(Some(row)) => {
                    log::info!("fired {name}: run {} ({why})", row.get::<_, i64>(0))
                }
                Ok(None) => {}
                Err(e) => e.complain(),
            }
        }
    }

    /// Runs due sensors (never waiting on one) and queues a run for each
    /// that said yes.
    fn sense(&mut self, session: u64, pipelines: &Views) {
        let gone: Vec<String> = self
            .sensors
            .keys()
            .filter(|name| pipelines.get(*name).is_none_or(|v| v.p.sensor.is_none()))
            .cloned()
            .collect();
        for name in gone {
            if let Some(Sensor {
                child: Some((child, _)),
                ..
            }) = self.sensors.remove(&name)
            {
                child.kill();
            }
        }
        for (name, View { p, paused, .. }) in pipelines {
            let Some(sensor) = &p.sensor else { continue };
            let every = Duration::from_secs_f64(p.sensor_every);
            let s = self.sensors.entry(name.clone()).or_insert(Sensor {
                next: Instant::now(),
                child: None,
                yes: false,
            });
            if let Some((child, deadline)) = &mut s.child {
                match child.try_exit() {
                    Some(exit) => {
                        s.child = None;
                        s.yes = exit.success();
                    }
                    None if Instant::now() >= *deadline => {
                        if !child.killing() {
                            log::warn!("sensor of {name} took over {every:?}: killed");
                        }
                        // Again each tick: the shim's group gets SIGKILL if it is slow.
                        child.kill_all();
                    }
                    None => {}
                }
            }
            if s.yes {
                let why = "sensor said yes (exit 0)".to_string();
                match self
                    .db
                    .run_fenced(session, |c| c.query_opt(sql::SENSOR_QUEUE, &[name, &why]))
                {
                    Ok(row) => {
                        s.yes = false;
                        if let Some(row) = row {
                            log::info!("sensor of {name} queued run {}", row.get::<_, i64>(0));
                        }
                    }
                    Err(e) => e.complain(),
                }
            }
            if s.child.is_some() {
                continue;
            }
            if *paused || Instant::now() < s.next {
                continue;
            }
            s.next = Instant::now() + every;
            let env = vec![("ORCA_PIPELINE".to_string(), name.clone())];
            match Child::spawn(&sensor.argv(&[]), &env) {
                Ok(child) => s.child = Some((child, Instant::now() + every)),
                Err(e) => log::error!("sensor of {name}: can't start: {e}"),
            }
        }
    }

    /// Starts queued runs placed on `placement` (`Local`: processes here;
    /// `Ec2`: instances of their own), oldest first, within `max_runs`.
    /// EC2 runs started before that still lack instances get them first,
    /// and no new one is claimed once the tick may make no more instances.
    fn start(&mut self, session: u64, pipelines: &Views, placement: Starts) {
        let host = if placement == Starts::Ec2 {
            self.ec2_runs.begin_tick();
            let short = match self.ec2_runs.short(&mut self.db, session) {
                Ok(short) => short,
                Err(e) => return e.complain(),
            };
            for s in short {
                if stops() > 0 || !self.ec2_runs.can_make() {
                    return;
                }
                let Some(View { p, .. }) = pipelines.get(&s.pipeline) else {
                    continue;
                };
                if let Err(e) = self.ec2_runs.fill(
                    &mut self.db,
                    session,
                    s.id,
                    s.start,
                    p,
                    s.made,
                    &s.head_host,
                ) {
                    return e.complain();
                }
            }
            if !self.ec2_runs.can_make() {
                return;
            }
            "ec2 instances".to_string()
        } else {
            self.host.clone()
        };
        let rows = match self.db.run_fenced(session, |c| {
            c.query(
                sql::STARTABLE,
                &[&placement.placement().as_text(), &STARTS_PER_TICK],
            )
        }) {
            Ok(rows) => rows,
            Err(e) => return e.complain(),
        };
        for row in rows {
            if stops() > 0 || (placement == Starts::Ec2 && !self.ec2_runs.can_make()) {
                return;
            }
            let id: i64 = row.get(0);
            let name: String = row.get(1);
            let args: Vec<String> = row.get(2);
            let Some(View { p, .. }) = pipelines.get(&name) else {
                continue;
            };
            let start: i32 = match self.db.run_fenced(session, |c| {
                c.query_opt(
                    sql::RUN_START,
                    &[&id, &host, &self.lead.instance.as_ref().map(|i| i.id)],
                )
            }) {
                Ok(Some(row)) => row.get(0),
                Ok(None) => continue,
                Err(e) => return e.complain(),
            };
            if placement == Starts::Ec2 {
                if let Err(e) = self.ec2_runs.start(&mut self.db, session, id, start, p) {
                    return e.complain();
                }
            } else {
                self.sup.launch(id, start, p, &args, &[]);
            }
        }
    }

    /// Queues again running local runs whose heartbeat went stale and that no
    /// live process supervises. Not in the first stale limit after taking the
    /// lead: a gone process can't be told from one that shared an outage.
    fn sweep(&mut self, session: u64) {
        let Some(since) = self.lead.since() else {
            return;
        };
        if since.elapsed().as_secs_f64() < self.timing.stale {
            return;
        }
        let ours = self.sup.ours();
        match self.db.run_fenced(session, |c| {
            c.query(sql::SWEEP, &[&self.timing.stale, &ours])
        }) {
            Ok(rows) => {
                for r in rows {
                    log::warn!(
                        "run {}: heartbeat stale and no process supervises it: queued again",
                        r.get::<_, i64>(0)
                    );
                }
            }
            Err(e) => e.complain(),
        }
    }

    /// SIGTERM or SIGINT: start nothing more, SIGTERM the children, wait up
    /// to the stop grace, SIGKILL what is left, queue their runs again.
    fn stop(&mut self) -> i32 {
        for (_, s) in self.sensors.drain() {
            if let Some((child, _)) = s.child {
                child.kill();
            }
        }
        // What can't be written within a stale limit is left to the sweep
        // (its heartbeat goes stale once this process is gone).
        let left = self
            .sup
            .stop_all(&mut self.db, self.timing.stop_grace, self.timing.stale);
        if left > 0 {
            log::warn!(
                "{left} run ends could not be written; the next scheduler queues them again"
            );
        }
        if let Some(instance) = &self.lead.instance {
            let id = instance.id;
            if let Err(e) = self.db.run(|c| crate::lead::end(c, id)) {
                log::warn!("can't end instance {id}'s row ({e}); it goes stale by itself");
            }
        }
        self.write_stats();
        0
    }

    /// Writes the tick figures `make bench` reads: one `key=value` line.
    fn write_stats(&self) {
        let Some((path, ticks, passes)) = &self.stats else {
            return;
        };
        /// count, p50, p99, max of the first figure; mean of the second.
        fn summary(figures: &[Figure]) -> (usize, f64, f64, f64, f64) {
            let mut ms: Vec<f64> = figures.iter().map(|t| t.0).collect();
            ms.sort_by(|a, b| a.total_cmp(b));
            let pick = |q: f64| {
                ms.get(((ms.len() as f64 - 1.0) * q).round() as usize)
                    .copied()
                    .unwrap_or(0.0)
            };
            let calls: u64 = figures.iter().map(|t| t.1).sum();
            (
                ms.len(),
                pick(0.5),
                pick(0.99),
                ms.last().copied().unwrap_or(0.0),
                calls as f64 / ms.len().max(1) as f64,
            )
        }
        let (n, p50, p99, max, per) = summary(ticks);
        let (sn, s50, _, smax, sper) = summary(passes);
        let line = format!(
            "ticks={n} p50_ms={p50:.2} p99_ms={p99:.2} max_ms={max:.2} statements_per_tick={per:.2} \
             scaler_passes={sn} scaler_p50_ms={s50:.2} scaler_max_ms={smax:.2} scaler_statements_per_pass={sper:.2}\n"
        );
        if let Err(e) = std::fs::write(path, line) {
            log::error!("ORCA_TICK_STATS {path}: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn a_slot_is_computed_only_when_missing_or_due() {
        let now = at("2026-03-01T12:00:00Z");
        assert_eq!(fire_step(None, now, false), FireStep::First);
        assert_eq!(fire_step(None, now, true), FireStep::First);
        let due = at("2026-03-01T11:00:00Z");
        assert_eq!(fire_step(Some(due), now, false), FireStep::Fire(due));
        assert_eq!(fire_step(Some(due), now, true), FireStep::Wait);
        let ahead = at("2026-03-02T00:00:00Z");
        assert_eq!(fire_step(Some(ahead), now, false), FireStep::Wait);
    }

    #[test]
    fn a_schedule_that_never_fires_is_never_searched() {
        let mut s = Schedules::default();
        let now = at("2026-03-01T12:00:00Z");
        for _ in 0..100 {
            assert_eq!(s.next_after("p", "0 0 31 2 *", &now), None);
            assert_eq!(s.next_after("q", "not a cron", &now), None);
        }
        assert_eq!(s.searches, 0, "no search for a next time of either");
        assert_eq!(
            s.next_after("p", "0 0 29 2 *", &now),
            Some(at("2028-02-29T00:00:00Z"))
        );
        assert_eq!(s.searches, 1);
    }

    #[test]
    fn a_stored_schedule_croner_takes_keeps_firing() {
        // Registered before `orca check` checked each field: croner takes
        // these, so they fire on (the field check is for `check` and
        // `register` only). (`0 0 * * +`, which croner also takes, has no
        // day and never fired.)
        let mut s = Schedules::default();
        let now = at("2026-03-01T12:00:00Z");
        for (expr, next) in [
            ("1,,2 * * * *", "2026-03-01T12:01:00Z"),
            ("0 0 1, * *", "2026-04-01T00:00:00Z"),
        ] {
            assert!(config::parse_schedule(expr).is_err(), "{expr}");
            assert_eq!(s.next_after("p", expr, &now), Some(at(next)), "{expr}");
        }
    }
}
