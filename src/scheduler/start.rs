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

use crate::config::Placement;
use crate::db::sql;
use crate::scheduler::{Arc, Pipeline, Scheduler, View, Views, stops};

/// How many runs one tick starts at most (the rest wait a tick).
pub const STARTS_PER_TICK: i64 = 64;

/// The placements whose runs the scheduler starts itself (a `worker:`
/// run is claimed by a worker of its pool).
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Starts {
    /// Processes on this host.
    Local,
    /// Instances of the run's own.
    Ec2,
}

impl Starts {
    /// The placement, as `orca.pipelines.placement` has it.
    pub fn placement(self) -> Placement {
        match self {
            Starts::Local => Placement::Local,
            Starts::Ec2 => Placement::Ec2,
        }
    }
}

impl Scheduler {
    /// Starts queued runs placed on `placement` (`Local`: processes here;
    /// `Ec2`: instances of their own), oldest first, within `max_runs`.
    /// EC2 runs started before that still lack instances get them first,
    /// and no new one is claimed once the tick may make no more instances.
    pub(super) fn start(&mut self, session: u64, pipelines: &Views, placement: Starts) {
        let host = if placement == Starts::Ec2 {
            let short = match self.ec2_runs.short(&mut self.db, session) {
                Ok(short) => short,
                Err(e) => return e.complain(),
            };
            for s in short {
                if stops() > 0 || !self.ec2_runs.can_make(&self.fleet) {
                    return;
                }
                // A pipeline retired since its run started: its stored spec
                // (the run still gets the instances it was started for).
                let p = match pipelines.get(&s.pipeline) {
                    Some(View { p, .. }) => p.clone(),
                    None => match serde_json::from_value::<Pipeline>(s.spec) {
                        Ok(p) => Arc::new(p),
                        Err(_) => continue,
                    },
                };
                if let Err(e) = self.ec2_runs.fill(
                    &mut self.fleet,
                    &mut self.db,
                    session,
                    s.id,
                    s.start,
                    &p,
                    s.made,
                    &s.head_host,
                ) {
                    return e.complain();
                }
            }
            if !self.ec2_runs.can_make(&self.fleet) {
                return;
            }
            // What marks an attempt as an EC2 one to the database
            // (ec2_runs_short.sql, ec2_lost_heads.sql, sweep.sql, migration
            // 24's on_lost trigger): keep it.
            "ec2 instances".to_string()
        } else {
            self.host.clone()
        };
        let rows = match self.db.prepared_fenced(session, sql::STARTABLE, |c, s| {
            c.query(s, &[&placement.placement().as_text(), &STARTS_PER_TICK])
        }) {
            Ok(rows) => rows,
            Err(e) => return e.complain(),
        };
        let instance = self.lead.instance.as_ref().map(|i| i.id);
        if placement == Starts::Local {
            // All claimed in one statement, then started.
            let chosen: Vec<(i64, Vec<String>, &Arc<Pipeline>)> = rows
                .iter()
                .filter_map(|row| {
                    let View { p, .. } = pipelines.get(&row.get::<_, String>("pipeline"))?;
                    Some((row.get("id"), row.get("args"), p))
                })
                .collect();
            if chosen.is_empty() || stops() > 0 {
                return;
            }
            let ids: Vec<i64> = chosen.iter().map(|c| c.0).collect();
            let claimed = match self.db.prepared_fenced(session, sql::RUNS_START, |c, s| {
                c.query(s, &[&ids, &host, &instance])
            }) {
                Ok(claimed) => claimed,
                Err(e) => return e.complain(),
            };
            for row in claimed {
                let (id, start): (i64, i32) = (row.get("id"), row.get("start"));
                if let Some((_, args, p)) = chosen.iter().find(|c| c.0 == id) {
                    self.sup.launch(id, start, p, args, &[]);
                }
            }
            return;
        }
        for row in rows {
            if stops() > 0 || !self.ec2_runs.can_make(&self.fleet) {
                return;
            }
            let id: i64 = row.get("id");
            let name: String = row.get("pipeline");
            let Some(View { p, .. }) = pipelines.get(&name) else {
                continue;
            };
            let claimed = match self.db.prepared_fenced(session, sql::RUNS_START, |c, s| {
                c.query(s, &[&vec![id], &host, &instance])
            }) {
                Ok(claimed) => claimed,
                Err(e) => return e.complain(),
            };
            let Some(start) = claimed.first().map(|r| r.get::<_, i32>("start")) else {
                continue;
            };
            if let Err(e) =
                self.ec2_runs
                    .start(&mut self.fleet, &mut self.db, session, id, start, p)
            {
                return e.complain();
            }
        }
    }
}
