//! Starting queued runs the scheduler runs itself: `local` ones as processes
//! on this host, `ec2` ones on instances of their own (through
//! [`crate::warm_pool::leader`]). Which runs may start is the database's to
//! say (`sql/startable.sql`: oldest first, per pipeline at most `max_runs`
//! less its running ones, fill runs on top up to `max_fills` less its
//! running fill runs, none of a paused or retired
//! pipeline, at most [`STARTS_PER_TICK`] a tick); `worker:` runs are
//! claimed by their pool's workers instead.
//!
//! Invariants:
//! * A run is claimed (`queued` → `running`, `start` + 1,
//!   `sql/runs_start.sql`: a tick's local runs in one statement) before its
//!   process is spawned or its instances are given; a run another took
//!   first is skipped, and every local run claimed is spawned.
//! * EC2 runs started before that still lack instances get them first, and
//!   no new EC2 run is claimed once the tick may make no more instances.
//! * No run is claimed once a SIGTERM or SIGINT came (the local runs a
//!   tick claimed are all started: they were claimed in one statement).

use std::sync::Arc;

use crate::config::{Pipeline, Placement};
use crate::db::sql;
use crate::lead::Term;
use crate::machines::fleet::Fleet;
use crate::scheduler::stops::stops;
use crate::scheduler::views::{View, Views};
use crate::supervise::Supervisor;
use crate::warm_pool::leader::{Ec2Runs, Short};

/// How many runs one start pass (a tick's, or one between ticks:
/// [`crate::scheduler::wake`]) claims at most; a pass that claims as many
/// is followed by another at once, so the rest wait no tick.
pub const STARTS_PER_TICK: i64 = 64;

/// What marks an attempt as an EC2 one to the database, as its `host`
/// (`ec2_runs_short.sql`, `ec2_lost_heads.sql`, `sweep.sql`, migration
/// 24's on_lost trigger): keep it.
pub const EC2_HOST: &str = "ec2 instances";

/// The queued runs of `placement` that may start now (`sql/startable.sql`),
/// as (id, pipeline, args).
fn startable(
    term: &mut Term,
    placement: Placement,
) -> Result<Vec<(i64, String, Vec<String>)>, crate::lead::DutyError> {
    let rows = term.prepared(sql::STARTABLE, |c, s| {
        c.query(s, &[&placement.as_text(), &STARTS_PER_TICK])
    })?;
    Ok(rows
        .iter()
        .map(|r| (r.get("id"), r.get("pipeline"), r.get("args")))
        .collect())
}

/// Of the `startable` runs, those whose pipeline this tick read
/// (`pipelines`): a run of one it can't read (retired since, or stored by
/// another version) is left queued.
fn chosen(
    startable: Vec<(i64, String, Vec<String>)>,
    pipelines: &Views,
) -> Vec<(i64, Vec<String>, &Arc<Pipeline>)> {
    startable
        .into_iter()
        .filter_map(|(id, name, args)| {
            let View { p, .. } = pipelines.get(&name)?;
            Some((id, args, p))
        })
        .collect()
}

/// The pipeline a run started before gets its instances for: as this tick
/// read it, else (retired since) its stored spec; `None` if neither reads.
fn pipeline_of(s: &Short, pipelines: &Views) -> Option<Arc<Pipeline>> {
    match pipelines.get(&s.pipeline) {
        Some(View { p, .. }) => Some(p.clone()),
        None => serde_json::from_value::<Pipeline>(s.spec.clone())
            .ok()
            .map(Arc::new),
    }
}

/// Starts queued `local` runs, oldest first, within `max_runs`: all
/// claimed in one statement on the lead (`term`, naming `host`), then each
/// launched by `sup`. How many were claimed (at most [`STARTS_PER_TICK`]:
/// a pass that claims as many may leave more to start).
pub(super) fn start_local(
    term: &mut Term,
    sup: &mut Supervisor,
    host: &str,
    pipelines: &Views,
) -> usize {
    let chosen = match startable(term, Placement::Local) {
        Ok(rows) => chosen(rows, pipelines),
        Err(e) => {
            e.complain();
            return 0;
        }
    };
    if chosen.is_empty() || stops() > 0 {
        return 0;
    }
    let ids: Vec<i64> = chosen.iter().map(|c| c.0).collect();
    let scheduler = term.scheduler_id();
    let claimed = match term.prepared(sql::RUNS_START, |c, s| {
        c.query(s, &[&ids, &host, &scheduler])
    }) {
        Ok(claimed) => claimed,
        Err(e) => {
            e.complain();
            return 0;
        }
    };
    for row in &claimed {
        let (id, start): (i64, i32) = (row.get("id"), row.get("start"));
        if let Some((_, args, p)) = chosen.iter().find(|c| c.0 == id) {
            sup.launch(id, start, p, args, &[]);
        }
    }
    claimed.len()
}

/// Starts queued `ec2` runs on instances of their own (through
/// `ec2_runs` and `fleet`): runs started before that still lack instances
/// get them first, then new runs are claimed one at a time, oldest first,
/// each given its instances, while the tick may make more.
pub(super) fn start_ec2(
    term: &mut Term,
    ec2_runs: &mut Ec2Runs,
    fleet: &mut Fleet,
    pipelines: &Views,
) {
    let short = match ec2_runs.short(term) {
        Ok(short) => short,
        Err(e) => return e.complain(),
    };
    for s in short {
        if stops() > 0 || !ec2_runs.can_make(fleet) {
            return;
        }
        // A pipeline retired since its run started: its stored spec
        // (the run still gets the instances it was started for).
        let Some(p) = pipeline_of(&s, pipelines) else {
            continue;
        };
        if let Err(e) = ec2_runs.fill(fleet, term, s.id, s.start, &p, s.made, &s.head_host) {
            return e.complain();
        }
    }
    if !ec2_runs.can_make(fleet) {
        return;
    }
    let chosen = match startable(term, Placement::Ec2) {
        Ok(rows) => chosen(rows, pipelines),
        Err(e) => return e.complain(),
    };
    let scheduler = term.scheduler_id();
    for (id, _, p) in chosen {
        if stops() > 0 || !ec2_runs.can_make(fleet) {
            return;
        }
        let claimed = match term.prepared(sql::RUNS_START, |c, s| {
            c.query(s, &[&vec![id], &EC2_HOST, &scheduler])
        }) {
            Ok(claimed) => claimed,
            Err(e) => return e.complain(),
        };
        let Some(start) = claimed.first().map(|r| r.get::<_, i32>("start")) else {
            continue;
        };
        if let Err(e) = ec2_runs.start(fleet, term, id, start, p) {
            return e.complain();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Command;
    use crate::config::spec::OnLost;
    use std::collections::BTreeMap;

    fn pipeline(name: &str) -> Pipeline {
        Pipeline {
            name: name.into(),
            command: Command::Shell("true".into()),
            placement: Placement::Ec2,
            max_runs: 1,
            max_fills: 10,
            schedule: None,
            retries: 0,
            retry_delay: 0.0,
            timeout: None,
            env: BTreeMap::new(),
            alert: None,
            sensor: None,
            sensor_every: 5.0,
            ec2: None,
            on_lost: OnLost::Retry,
        }
    }

    fn views(names: &[&str]) -> Views {
        names
            .iter()
            .map(|n| {
                let v = View {
                    p: Arc::new(pipeline(n)),
                    next_fire: None,
                    paused: false,
                };
                (n.to_string(), v)
            })
            .collect()
    }

    fn short(pipeline: &str, spec: serde_json::Value) -> Short {
        Short {
            id: 7,
            start: 1,
            pipeline: pipeline.into(),
            made: 1,
            head_host: "10.0.0.1".into(),
            spec,
        }
    }

    #[test]
    fn only_runs_of_pipelines_this_tick_read_are_chosen_in_their_order() {
        let read = views(&["a", "b"]);
        let startable = vec![
            (3, "b".to_string(), vec!["x".to_string()]),
            (1, "gone".to_string(), vec![]),
            (2, "a".to_string(), vec![]),
        ];
        let chosen = chosen(startable, &read);
        let ids: Vec<(i64, &str, Vec<String>)> = chosen
            .iter()
            .map(|(id, args, p)| (*id, p.name.as_str(), args.clone()))
            .collect();
        assert_eq!(ids, [(3, "b", vec!["x".to_string()]), (2, "a", vec![])]);
    }

    #[test]
    fn a_run_started_before_gets_its_pipeline_as_read_else_as_stored() {
        let read = views(&["a"]);
        let stored = serde_json::to_value(pipeline("retired")).unwrap();
        let p = pipeline_of(&short("a", serde_json::Value::Null), &read).expect("read");
        assert!(
            Arc::ptr_eq(&p, &read["a"].p),
            "this tick's, not the stored one"
        );
        let p = pipeline_of(&short("retired", stored), &read).expect("stored");
        assert_eq!(p.name, "retired");
        assert!(pipeline_of(&short("retired", serde_json::json!({"x": 1})), &read).is_none());
    }
}
