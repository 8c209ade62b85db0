//! EC2 runs, the scheduler's side (seed 000, `orca.pool`): a run placed on
//! `ec2` gets a head and `workers` instances of its own, each a row in
//! `orca.instances`. Idle instances of the same kind (the pipeline's
//! `[ec2]` table) whose poll is fresh are handed over first: their idle row
//! ended and a `pooled` row for the run inserted, in one statement. Else new
//! ones are made through the provider (local or EC2), booting
//! `scripts/instance.sh` with credentials of their own.
//!
//! One tick makes at most `ORCA_EC2_MAKE_PER_TICK` new instances (8), across
//! runs: a run with more workers is claimed with what the tick can give it
//! and gets the rest on the next ticks, before any new run is claimed
//! (warm hand-overs don't count: they make nothing).
//!
//! Every tick the leader also ends what is over: a run whose head went
//! silent for `ORCA_POOL_LOST_SECONDS` is queued again, one whose head never
//! served within `ORCA_POOL_BOOT_SECONDS` fails (retries and alerts apply),
//! and their instances are ended; rows of
//! runs that ended (at once with no warm pool, `ORCA_EC2_POOL_SECONDS` 0);
//! idle rows whose polls stopped, whose kind no pipeline uses any more, or
//! whose warm time is over. Ended instances are deleted and their logins
//! revoked.
//!
//! What to do, where Rust decides it, is in [`crate::warm_pool::decide`], pure over
//! what this module read (the roles a run still needs and their head's
//! address, where each comes from: the warm one handed over, a new one
//! within the make budget, or the next ticks; a lost head, what is trimmed,
//! when strays are looked for).
//!
//! Invariants:
//! * Every write is fenced on the leading session.
//! * An instance is handed to one run at a time: the hand-over picks an idle
//!   row `FOR UPDATE SKIP LOCKED` and ends it in the statement that inserts
//!   the new one.

use crate::config::Pipeline;
use crate::config::spec::Ec2Spec;
use crate::db::sql;
use crate::db::{Db, Fault};
use crate::machines::fleet::{self, AtProvider, Deadline, Fleet};
use crate::machines::logins;
use crate::machines::walk::try_locations;
use crate::providers::{Make, MakeError};
use crate::settings::PoolTiming;
use crate::warm_pool::decide::{self, Ended, Fill, LostHead, MakeBudget, Role, Source};
use serde::Serialize;

/// The instance script, embedded after the machine prelude
/// (`scripts/machine-prelude.sh`), as [`crate::machines::boot::BOOT_SCRIPT`].
pub const INSTANCE_SCRIPT: &str = concat!(
    include_str!("../../scripts/machine-prelude.sh"),
    include_str!("../../scripts/instance.sh")
);

/// An idle instance is handed over only if it polled this recently (s).
const POLL_FRESH: f64 = 5.0;

/// An idle instance that hasn't polled for this long (s) is gone.
const POLL_GONE: f64 = 15.0;

/// The provider label of EC2 runs' instances.
/// (A colon: no pool can have that name, so no pool takes them for its own.)
const GROUP: &str = "orca:ec2-runs";

/// The scheduler's EC2 runs: providers, and this stack's id.
pub struct Ec2Runs {
    timing: PoolTiming,
    /// `ORCA_EC2_POOL_SECONDS`: how long an instance stays warm (0: none).
    pool_seconds: f64,
    /// Providers by kind and region, and this stack's id.
    fleet: Fleet,
    /// When strays were last looked for (every `ORCA_POOL_SCALE_SECONDS`).
    strays_at: Option<std::time::Instant>,
    /// New instances this tick may still make.
    budget: MakeBudget,
    /// The lead session the upkeep last ran under, and whether anything
    /// was live then (see [`decide::upkeep`]).
    upkeep: (Option<u64>, bool),
}

/// A run started before with instances still to make (see
/// `sql/ec2_runs_short.sql`).
pub struct Short {
    /// The run.
    pub id: i64,
    /// Its attempt.
    pub start: i32,
    /// Its pipeline.
    pub pipeline: String,
    /// Instance rows it has.
    pub made: usize,
    /// Its head's own address, if it has one.
    pub head_host: String,
    /// Its pipeline's stored spec (read when the pipeline was retired
    /// since the run started).
    pub spec: serde_json::Value,
}

/// An instance a run needs made.
struct Want<'a> {
    /// The run's pipeline.
    pipeline: &'a Pipeline,
    /// Its `[ec2]` table.
    ec2: &'a Ec2Spec,
    /// The run.
    run: i64,
    /// Its attempt.
    start: i32,
    /// The instance's part in it.
    role: Role,
    /// The head's address (`-` for the head itself, not known yet).
    head: &'a str,
    /// Whether it may take new code (`orca.instances.fresh_code`).
    fresh: bool,
}

/// A new instance's row, as `sql/instance_add.sql` reads it: one JSON
/// object, each field by its column's name.
#[derive(Serialize)]
struct NewInstance<'a> {
    instance: &'a str,
    pipeline: &'a str,
    run: i64,
    start: i32,
    role: &'a str,
    login: &'a str,
    address: &'a str,
    host: &'a str,
    provider: &'a str,
    provider_id: &'a str,
    region: Option<&'a str>,
    fresh_code: bool,
}

impl Ec2Runs {
    /// Reads `ORCA_EC2_POOL_SECONDS` and `ORCA_EC2_MAKE_PER_TICK`.
    pub fn new(timing: PoolTiming) -> Result<Ec2Runs, String> {
        Ok(Ec2Runs {
            budget: MakeBudget::new(decide::make_per_tick(
                std::env::var("ORCA_EC2_MAKE_PER_TICK").ok().as_deref(),
            )?),
            fleet: Fleet::new(timing.try_every),
            timing,
            pool_seconds: crate::settings::EC2_POOL.read()?,
            strays_at: None,
            upkeep: (None, true),
        })
    }

    /// Whether the upkeep ([`Ec2Runs::watch`], and instances for runs
    /// started before) runs this tick of lead `session`: while an EC2
    /// pipeline is `registered`, and after the last one is retired while
    /// an EC2 run is running or an instance row is live, whatever their
    /// pipeline (asked of the database only then: see [`decide::upkeep`]).
    pub fn upkeep_due(
        &mut self,
        db: &mut Db,
        session: u64,
        registered: bool,
    ) -> Result<bool, Fault> {
        let new_lead = self.upkeep.0 != Some(session);
        let live = match decide::upkeep(registered, new_lead, self.upkeep.1) {
            decide::Upkeep::Run => true,
            decide::Upkeep::Skip => false,
            decide::Upkeep::Ask => db
                .run_fenced(session, |c| c.query_one(sql::EC2_UPKEEP_LIVE, &[]))?
                .get("live"),
        };
        self.upkeep = (Some(session), live);
        Ok(live)
    }

    /// A new tick: its budget of new instances is whole again, and its
    /// provider work has until `deadline` (the tick's, shared with the pool
    /// scaler: a hung provider costs the tick that much at most).
    pub fn begin_tick(&mut self, deadline: Deadline) {
        self.budget.refill();
        self.fleet.until(Some(deadline));
    }

    /// Whether this tick may still make a new instance: some of its budget
    /// is left and so is its time for provider calls (else no new run is
    /// claimed: it would wait for its instances anyway).
    pub fn can_make(&self) -> bool {
        self.budget.any_left() && !self.fleet.late()
    }

    /// Runs started before with instances still to make, oldest first.
    pub fn short(&mut self, db: &mut Db, session: u64) -> Result<Vec<Short>, Fault> {
        Ok(db
            .run_fenced(session, |c| c.query(sql::EC2_RUNS_SHORT, &[]))?
            .iter()
            .map(|r| Short {
                id: r.get("id"),
                start: r.get("start"),
                pipeline: r.get("pipeline"),
                made: usize::try_from(r.get::<_, i64>("made")).unwrap_or(0),
                head_host: r.get("head_host"),
                spec: r.get("spec"),
            })
            .collect())
    }

    /// Gives claimed run `(id, start)` of `p` its head and workers (see
    /// [`Ec2Runs::fill`]).
    pub fn start(
        &mut self,
        db: &mut Db,
        session: u64,
        id: i64,
        start: i32,
        p: &Pipeline,
    ) -> Result<(), Fault> {
        self.fill(db, session, id, start, p, 0, "")
    }

    /// Gives run `(id, start)` of `p`, which has `made` instance rows (its
    /// head's address `head_host`), the instances it still needs: warm ones
    /// first, else new ones while this tick's budget lasts (the rest on
    /// the next ticks). A role that can't be filled queues the run again
    /// and ends what it had.
    #[allow(clippy::too_many_arguments)]
    pub fn fill(
        &mut self,
        db: &mut Db,
        session: u64,
        id: i64,
        start: i32,
        p: &Pipeline,
        made: usize,
        head_host: &str,
    ) -> Result<(), Fault> {
        let Some(ec2) = p.ec2.clone() else {
            return Ok(());
        };
        let fresh = decide::takes_new_code(start);
        let mut fill = Fill::new(made, ec2.workers, head_host);
        while let Some(need) = fill.next_need() {
            let (role, address) = (need.role.as_str(), &need.address);
            let warm = db.run_fenced(session, |c| {
                c.query_opt(
                    sql::INSTANCE_HAND_OVER,
                    &[&p.name, &id, &start, &role, address, &fresh, &POLL_FRESH],
                )
            })?;
            if self.fleet.late() {
                // The tick's time for provider calls is spent: the rest
                // are made on the next ticks.
                self.budget.spend();
            }
            let host = match decide::source(warm, &mut self.budget) {
                Source::Warm(row) => {
                    let instance: String = row.get("instance");
                    log::info!("run {id}: warm instance {instance} handed over as its {role}");
                    row.get::<_, String>("host")
                }
                Source::NextTick => {
                    log::info!(
                        "run {id}: its other instances are made on the next ticks \
                         (this tick's ORCA_EC2_MAKE_PER_TICK {} or its time is spent)",
                        self.budget.per_tick()
                    );
                    return Ok(());
                }
                Source::Make => match self.make(
                    db,
                    session,
                    &Want {
                        pipeline: p,
                        ec2: &ec2,
                        run: id,
                        start,
                        role: need.role,
                        head: address,
                        fresh,
                    },
                )? {
                    Ok(host) => host,
                    Err(why) => {
                        log::error!("run {id}: no {role} instance: {why}; queued again");
                        let why = format!("no {role} instance: {why}");
                        db.run_fenced(session, |c| {
                            c.query_one(sql::RUN_REQUEUE, &[&id, &start, &why, &Vec::<u8>::new()])
                        })?;
                        let ended = db.run_fenced(session, |c| {
                            c.query(sql::INSTANCES_OF_RUN_END, &[&id, &start, &why])
                        })?;
                        self.delete(db, session, ended.iter().map(ended_of).collect())?;
                        return Ok(());
                    }
                },
            };
            fill.got(&need, &host);
        }
        Ok(())
    }

    /// Makes the instance `w` wants: its login, then the provider's
    /// instance, trying the locations in turn, then its row. Its own
    /// address, or why none could be made.
    fn make(
        &mut self,
        db: &mut Db,
        session: u64,
        w: &Want,
    ) -> Result<Result<String, String>, Fault> {
        let (id, start, settings) = (w.run, w.start, &w.ec2.machines);
        let stack = self.fleet.stack(db, session)?.id;
        let n: i64 = db
            .run_fenced(session, |c| c.query_one(sql::INSTANCE_NEXT_ID, &[]))?
            .get("id");
        let name = format!("orca-i-{n}");
        let login = format!("orca_i_{stack}_{n}");
        let token = db
            .run_fenced(session, |c| {
                Ok(logins::make_login(c, &login, sql::INSTANCE_ROLE_MAKE))
            })?
            .map_err(Fault::Other)?;
        let env = vec![
            ("ORCA_INSTANCE".to_string(), name.clone()),
            ("ORCA_RUN".to_string(), id.to_string()),
            ("ORCA_START".to_string(), start.to_string()),
            ("ORCA_TOKEN".to_string(), token.reveal()),
            (
                "ORCA_DATABASE_URL".to_string(),
                crate::machines::boot::machine_database_url().map_err(Fault::Other)?,
            ),
            (
                "ORCA_EC2_POOL_SECONDS".to_string(),
                self.pool_seconds.to_string(),
            ),
        ];
        let region = settings.region.clone();
        let tried = try_locations::<_, Fault>(&settings.locations, |location, _| {
            let provider = match self.fleet.provider(&settings.provider, region.as_deref()) {
                Ok(pr) => pr,
                Err(e) => return Ok(Err(MakeError::Failed(e))),
            };
            let req = Make {
                group: GROUP,
                settings,
                name: &name,
                type_: &w.ec2.type_,
                location,
                stack: &stack,
                script: INSTANCE_SCRIPT,
                env: &env,
            };
            Ok(provider.make(&req).map(|m| (m, provider.region())))
        })?;
        let Some((_, (m, made_in))) = tried.made else {
            db.run_fenced(session, |c| fleet::revoke_and_drop(c, &login))?;
            return Ok(Err(tried.why()));
        };
        let row = NewInstance {
            instance: &name,
            pipeline: &w.pipeline.name,
            run: id,
            start,
            role: w.role.as_str(),
            login: &login,
            address: w.head,
            host: &m.address,
            provider: fleet::stored_kind(&settings.provider),
            provider_id: &m.id,
            region: made_in.as_deref(),
            fresh_code: w.fresh,
        };
        let written = serde_json::to_value(&row)
            .map_err(|e| Fault::Other(e.to_string()))
            .and_then(|row| db.run_fenced(session, |c| c.execute(sql::INSTANCE_ADD, &[&row])));
        if let Err(e) = written {
            // A stray now: a later pass deletes it and drops its login.
            log::error!("run {id}: instance {name} was made but its row was not written: {e}");
            return Err(e);
        }
        log::info!("run {id}: made instance {name} as its {}", w.role);
        Ok(Ok(m.address))
    }

    /// Ends what is over (see the module's doc); `judge_silence` false just
    /// after taking the lead or after a stalled tick.
    pub fn watch(&mut self, db: &mut Db, session: u64, judge_silence: bool) -> Result<(), Fault> {
        if judge_silence {
            let lost = db.run_fenced(session, |c| {
                c.query(sql::EC2_LOST_HEADS, &[&self.timing.boot, &self.timing.lost])
            })?;
            for row in lost {
                let (id, start, pipeline, served): (i64, i32, String, bool) = (
                    row.get("id"),
                    row.get("start"),
                    row.get("pipeline"),
                    row.get("served"),
                );
                let lost = decide::lost_head(served, self.timing.boot);
                let why = if let LostHead::Requeue(why) = &lost {
                    // Lost under a run it served: the run is queued again
                    // (failed, for on_lost = "fail": migration 22).
                    let state: Option<String> = db.run_fenced(session, |c| {
                        c.query_one(sql::RUN_REQUEUE, &[&id, &start, why, &Vec::<u8>::new()])?;
                        Ok(c.query_opt(sql::RUN_STATE, &[&id])?.map(|r| r.get("state")))
                    })?;
                    log::warn!(
                        "run {id}: {why}: {}",
                        crate::runs::lost_outcome(state.as_deref().unwrap_or(""))
                    );
                    why.clone()
                } else {
                    // Never booted (a bad AMI, say): a failed attempt, so
                    // retries and the alert apply and it ends for good.
                    let why = lost.why().to_string();
                    log::error!("run {id}: {why}: failed");
                    let outcome = crate::runs::Outcome {
                        id,
                        start,
                        state: crate::runs::RunState::Failed,
                        exit: None,
                        why: why.clone(),
                        output: Vec::new(),
                        pipeline,
                        timed_out: false,
                        // No process ended: the end is when it is written.
                        ended: None,
                    };
                    db.run_fenced(session, |c| outcome.write(c, sql::RUN_FINISH))?;
                    why
                };
                let ended = db.run_fenced(session, |c| {
                    c.query(sql::INSTANCES_OF_RUN_END, &[&id, &start, &why])
                })?;
                self.delete(db, session, ended.iter().map(ended_of).collect())?;
            }
        }
        // What is over is ended and deleted only with time left for the
        // deletes (a row ended whose delete is not sent leaves a stray till
        // the strays' scan): else on the next tick.
        if self.fleet.late() {
            return Ok(());
        }
        let rows = db.run_fenced(session, |c| {
            c.query(
                sql::INSTANCES_TO_END,
                &[&self.pool_seconds, &POLL_GONE, &self.timing.lost],
            )
        })?;
        let trim = decide::trim(rows.iter().map(|r| (ended_of(r), r.get("ended"))).collect());
        for (name, login) in trim.revoke_first {
            log::warn!("instance {name}: its login holds its row: revoking the login first");
            db.run_fenced(session, |c| logins::revoke(c, &login))?;
        }
        self.delete(db, session, trim.delete)?;
        // Strays: instances with this stack's label that no live row holds
        // (made, but the row wasn't written), at every provider in use here
        // (sql/ec2_providers.sql), from the lead's first pass.
        let due = decide::strays_due(
            self.strays_at.map(|t| t.elapsed().as_secs_f64()),
            self.timing.scale,
        );
        if due {
            self.strays_at = Some(std::time::Instant::now());
            let stack = self.fleet.stack(db, session)?.id;
            // Every provider in use here, whether or not this process made
            // anything: a leader that only hands over warm instances still
            // finds what its crashed predecessor made and never recorded.
            let providers = db.run_fenced(session, |c| c.query(sql::EC2_PROVIDERS, &[]))?;
            let live: std::collections::HashSet<String> = db
                .run_fenced(session, |c| c.query(sql::INSTANCES_LIVE_NAMES, &[]))?
                .iter()
                .map(|r| r.get("instance"))
                .collect();
            self.fleet.begin_pass();
            let mut strays = Vec::new();
            for row in providers {
                let kind = fleet::kind_of_stored(row.get("provider"));
                let region: Option<String> = row.get("region");
                let pr = match self.fleet.provider(&kind, region.as_deref()) {
                    Ok(pr) => pr,
                    Err(e) => {
                        log::warn!("can't list EC2 runs' instances: {e}");
                        continue;
                    }
                };
                match pr.list(GROUP, &stack) {
                    Ok(found) => {
                        let held = |name: &str| live.contains(name);
                        for f in crate::machines::walk::strays(found, |f| &f.name, held) {
                            match pr.delete(&f.id, &f.name) {
                                Ok(()) => strays.push(f.name),
                                Err(e) => {
                                    log::error!("stray instance {}: can't delete it: {e}", f.name)
                                }
                            }
                        }
                    }
                    Err(e) => log::warn!("can't list EC2 runs' instances: {e}"),
                }
            }
            // Logins no live row holds (made for an instance never made, or not
            // dropped yet): revoked and dropped.
            let prefix = format!("orca_i_{stack}_");
            for row in db.run_fenced(session, |c| {
                c.query(sql::INSTANCE_LOGINS_ORPHANED, &[&prefix])
            })? {
                let login: String = row.get("rolname");
                let _ = db.run_fenced(session, |c| fleet::revoke_and_drop(c, &login));
            }
            for name in strays {
                log::warn!("deleted stray instance {name}: no live row held it");
                let why = format!("{name}: no live row held it");
                db.run_fenced(session, |c| {
                    c.execute(
                        sql::EVENT_ADD,
                        &[&None::<i64>, &None::<String>, &"stray deleted", &why],
                    )
                })?;
            }
        }
        Ok(())
    }

    /// Deletes ended instances and revokes their logins.
    fn delete(&mut self, db: &mut Db, session: u64, ended: Vec<Ended>) -> Result<(), Fault> {
        for Ended {
            name,
            provider,
            provider_id,
            region,
            login,
        } in ended
        {
            let at = AtProvider {
                kind: &fleet::kind_of_stored(&provider),
                region: region.as_deref(),
                id: provider_id.as_deref(),
                name: &name,
            };
            if let Err(e) = self.fleet.revoke_and_delete(db, session, &login, &at)? {
                log::error!("instance {name}: can't delete it: {e}");
            }
            fleet::drop_login(db, session, &login);
            log::info!("instance {name} ended");
        }
        Ok(())
    }
}

/// An ended instance, as `sql/instances_to_end.sql` and
/// `sql/instances_of_run_end.sql` return it.
fn ended_of(r: &postgres::Row) -> Ended {
    Ended {
        name: r.get("instance"),
        provider: r.get("provider"),
        provider_id: r.get("provider_id"),
        region: r.get("region"),
        login: r.get("login"),
    }
}
