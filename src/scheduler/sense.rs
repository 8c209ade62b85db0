//! Sensors: a pipeline's `sensor` command, run every `sensor_every` seconds
//! by the leader; exit 0 queues a run (`sql/sensor_queue.sql`). Which
//! sensors stop ([`gone`]) and which start now ([`starts_now`]) are pure
//! decisions, unit-tested below; [`Sensors::sense`] looks at the
//! children, queues and spawns.
//!
//! Invariants:
//! * Only the leader runs sensors: a tick that does not lead kills them.
//! * The tick never waits on a sensor: a child is looked at once a tick and
//!   killed once over its time (`sensor_every`), its whole group if slow.
//! * A yes is kept until its run is queued (the database may be away), and
//!   a sensor queues at most one waiting run (the statement checks).
//! * A paused pipeline's sensor is not started (one running is let end).
//! * A sensor that can't run (exit 126: not executable; 127: not found, a
//!   typo; or it can't be started at all) is said once per change, a log
//!   line and a `sensor` event, not once every `sensor_every`; so is its
//!   running again ([`failure`], [`change`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::db::sql;
use crate::lead::Term;
use crate::runs::Exit;
use crate::scheduler::views::{View, Views};
use crate::supervise::child::Child;

/// A pipeline's sensor between ticks.
pub(super) struct Sensor {
    /// When it may start again.
    next: Instant,
    /// Its running child, and when it is over its time.
    child: Option<(Child, Instant)>,
    /// It said yes and the run is not queued yet (the database was away).
    yes: bool,
    /// Why it can't run, since its last look that said so ([`failure`]).
    failing: Option<String>,
    /// A `sensor` event not written yet (the database was away).
    unrecorded: Option<String>,
}

impl Sensor {
    /// Kills its child, if it has one running.
    pub(super) fn stop(self) {
        if let Some((child, _)) = self.child {
            child.kill();
        }
    }
}

/// Of the pipelines with a sensor state (`sensors`), those whose sensor
/// stops: the pipeline is gone, or has no sensor any more.
pub fn gone<'a>(
    sensors: impl IntoIterator<Item = &'a String>,
    has_sensor: impl Fn(&str) -> bool,
) -> Vec<String> {
    sensors
        .into_iter()
        .filter(|name| !has_sensor(name))
        .cloned()
        .collect()
}

/// Why a sensor that ended with `exit` could not run, if it could not:
/// the shell's 126 (found, not executable) and 127 (not found).
pub fn failure(exit: Exit) -> Option<String> {
    match exit {
        Exit::Code(126) => Some("exit 126: its command is not executable".into()),
        Exit::Code(127) => Some("exit 127: its command was not found (a typo?)".into()),
        _ => None,
    }
}

/// What a sensor's look says that the last did not, when it changed.
#[derive(Debug, PartialEq, Eq)]
pub enum Change {
    /// It can't run, for this reason (new, or another than before).
    Fails(String),
    /// It runs again (it ended with any other exit).
    RunsAgain,
}

/// The change from `before` (why it could not run, at the last look) to
/// `now`; `None` when nothing changed (said once per change).
pub fn change(before: Option<&str>, now: Option<&str>) -> Option<Change> {
    match (before, now) {
        (b, Some(n)) if b != Some(n) => Some(Change::Fails(n.to_string())),
        (Some(_), None) => Some(Change::RunsAgain),
        _ => None,
    }
}

/// Whether a sensor starts at `now`: none of it running, its pipeline not
/// paused, and its time (`next`) come.
pub fn starts_now(running: bool, paused: bool, now: Instant, next: Instant) -> bool {
    !running && !paused && now >= next
}

/// The leader's sensors, by pipeline.
#[derive(Default)]
pub(super) struct Sensors(HashMap<String, Sensor>);

impl Sensors {
    /// Runs due sensors (never waiting on one) and queues a run for each
    /// that said yes, on the lead (`term`).
    pub(super) fn sense(&mut self, term: &mut Term, pipelines: &Views) {
        let has_sensor = |name: &str| pipelines.get(name).is_some_and(|v| v.p.sensor.is_some());
        for name in gone(self.0.keys(), has_sensor) {
            if let Some(s) = self.0.remove(&name) {
                s.stop();
            }
        }
        for (name, View { p, paused, .. }) in pipelines {
            let Some(sensor) = &p.sensor else { continue };
            let every = Duration::from_secs_f64(p.sensor_every);
            let s = self.0.entry(name.clone()).or_insert(Sensor {
                next: Instant::now(),
                child: None,
                yes: false,
                failing: None,
                unrecorded: None,
            });
            let mut now_failing: Option<Option<String>> = None;
            if let Some((child, deadline)) = &mut s.child {
                match child.try_exit() {
                    Some(exit) => {
                        s.child = None;
                        s.yes = exit.success();
                        now_failing = Some(failure(exit));
                    }
                    None if Instant::now() >= *deadline => {
                        if !child.killing() {
                            log::warn!("sensor of {name} took over {every:?}: killed");
                        }
                        // Again each tick (the keeper is asked again once a second).
                        child.kill_all();
                    }
                    None => {}
                }
            }
            if let Some(now) = now_failing {
                note_change(name, s, now);
            }
            if let Some(why) = &s.unrecorded {
                let none: Option<i64> = None;
                match term.run(|c| c.execute(sql::EVENT_ADD, &[&none, name, &"sensor", why])) {
                    Ok(_) => s.unrecorded = None,
                    Err(e) => e.complain(),
                }
            }
            if s.yes {
                let why = "sensor said yes (exit 0)".to_string();
                match term.run(|c| c.query_opt(sql::SENSOR_QUEUE, &[name, &why])) {
                    Ok(row) => {
                        s.yes = false;
                        if let Some(row) = row {
                            log::info!("sensor of {name} queued run {}", row.get::<_, i64>("id"));
                        }
                    }
                    Err(e) => e.complain(),
                }
            }
            if !starts_now(s.child.is_some(), *paused, Instant::now(), s.next) {
                continue;
            }
            s.next = Instant::now() + every;
            let env = vec![("ORCA_PIPELINE".to_string(), name.clone())];
            match Child::spawn(&sensor.argv(&[]), &env) {
                Ok(child) => s.child = Some((child, Instant::now() + every)),
                Err(e) => note_change(name, s, Some(format!("can't start: {e}"))),
            }
        }
    }

    /// Stops every sensor (this process no longer leads, or stops).
    /// (Their failures are forgotten: a new leader says them again.)
    pub(super) fn stop(&mut self) {
        for (_, s) in self.0.drain() {
            s.stop();
        }
    }
}

/// Takes in why sensor `name` can't run now (`None`: it ran): a change is
/// logged and its `sensor` event kept for writing.
fn note_change(name: &str, s: &mut Sensor, now: Option<String>) {
    match change(s.failing.as_deref(), now.as_deref()) {
        Some(Change::Fails(why)) => {
            log::warn!("sensor of {name} can't run: {why}");
            s.unrecorded = Some(format!("sensor can't run: {why}"));
        }
        Some(Change::RunsAgain) => {
            log::info!("sensor of {name} runs again");
            s.unrecorded = Some("sensor runs again".into());
        }
        None => {}
    }
    s.failing = now;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sensor_stops_when_its_pipeline_or_its_sensor_is_gone() {
        let sensors: Vec<String> = ["kept", "retired", "no-sensor"].map(String::from).to_vec();
        let mut out = gone(&sensors, |name| name == "kept");
        out.sort();
        assert_eq!(out, ["no-sensor", "retired"]);
        assert!(gone(&sensors, |_| true).is_empty());
        assert!(gone(&Vec::new(), |_| false).is_empty());
    }

    #[test]
    fn a_sensor_starts_when_its_time_comes_and_none_of_it_runs() {
        let now = Instant::now();
        let later = now + Duration::from_secs(60);
        // New: its time is now.
        assert!(starts_now(false, false, now, now));
        assert!(starts_now(false, false, later, now));
        assert!(!starts_now(false, false, now, later), "not before its time");
        assert!(!starts_now(true, false, later, now), "never two at once");
        assert!(!starts_now(false, true, later, now), "not while paused");
    }

    #[test]
    fn a_sensor_that_cannot_run_is_said_once_per_change() {
        assert!(failure(Exit::Code(127)).is_some_and(|w| w.contains("127")));
        assert!(failure(Exit::Code(126)).is_some_and(|w| w.contains("126")));
        for ran in [Exit::Code(0), Exit::Code(1), Exit::Code(2), Exit::Signal(9)] {
            assert_eq!(failure(ran), None, "{ran:?} ran");
        }
        assert_eq!(change(None, None), None);
        assert_eq!(change(None, Some("a")), Some(Change::Fails("a".into())));
        assert_eq!(change(Some("a"), Some("a")), None, "once, not each look");
        assert_eq!(
            change(Some("a"), Some("b")),
            Some(Change::Fails("b".into()))
        );
        assert_eq!(change(Some("a"), None), Some(Change::RunsAgain));
    }
}
