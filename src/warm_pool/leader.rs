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
use crate::config::arch::Fit;
use crate::db::sql;
use crate::lead::{DutyError, Term};
use crate::machines::fleet::{self, AtProvider, Deadline, Failed, Fleet};
use crate::machines::logins;
use crate::machines::make::Unmade;
use crate::machines::walk::Tried;
use crate::settings::PoolTiming;
use crate::warm_pool::decide::{self, Ended, Fill, LostHead, MakeBudget, Source};
use crate::warm_pool::order::{GROUP, Want};

/// An idle instance is handed over only if it polled this recently (s).
const POLL_FRESH: f64 = 5.0;

/// An idle instance that hasn't polled for this long (s) is gone.
const POLL_GONE: f64 = 15.0;

/// The scheduler's EC2 runs (the providers are the scheduler's [`Fleet`],
/// lent to each step).
pub struct Ec2Runs {
    timing: PoolTiming,
    /// `ORCA_EC2_POOL_SECONDS`: how long an instance stays warm (0: none).
    pool_seconds: f64,
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

impl Ec2Runs {
    /// Reads `ORCA_EC2_POOL_SECONDS` and `ORCA_EC2_MAKE_PER_TICK`.
    pub fn new(timing: PoolTiming) -> Result<Ec2Runs, String> {
        Ok(Ec2Runs {
            budget: MakeBudget::new(decide::make_per_tick(
                std::env::var("ORCA_EC2_MAKE_PER_TICK").ok().as_deref(),
            )?),
            timing,
            pool_seconds: crate::settings::EC2_POOL.read()?,
            strays_at: None,
            upkeep: (None, true),
        })
    }

    /// Whether the upkeep ([`Ec2Runs::watch`], and instances for runs
    /// started before) runs this tick of lead `term`: while an EC2
    /// pipeline is `registered`, and after the last one is retired while
    /// an EC2 run is running or an instance row is live, whatever their
    /// pipeline (asked of the database only then: see [`decide::upkeep`]).
    pub fn upkeep_due(&mut self, term: &mut Term, registered: bool) -> Result<bool, DutyError> {
        let new_lead = self.upkeep.0 != Some(term.session());
        let live = match decide::upkeep(registered, new_lead, self.upkeep.1) {
            decide::Upkeep::Run => true,
            decide::Upkeep::Skip => false,
            decide::Upkeep::Ask => term
                .run(|c| c.query_one(sql::EC2_UPKEEP_LIVE, &[]))?
                .get("live"),
        };
        self.upkeep = (Some(term.session()), live);
        Ok(live)
    }

    /// A new tick: its budget of new instances is whole again, and its
    /// provider work has until `deadline` (the tick's, shared with the pool
    /// scaler: a hung provider costs the tick that much at most).
    pub fn begin_tick(&mut self, fleet: &mut Fleet, deadline: Deadline) {
        self.budget.refill();
        fleet.until(Some(deadline));
    }

    /// Whether this tick may still make a new instance: some of its budget
    /// is left and so is its time for provider calls (else no new run is
    /// claimed: it would wait for its instances anyway).
    pub fn can_make(&self, fleet: &Fleet) -> bool {
        self.budget.any_left() && !fleet.late()
    }

    /// Runs started before with instances still to make, oldest first.
    pub fn short(&mut self, term: &mut Term) -> Result<Vec<Short>, DutyError> {
        Ok(term
            .run(|c| c.query(sql::EC2_RUNS_SHORT, &[]))?
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
        fleet: &mut Fleet,
        term: &mut Term,
        id: i64,
        start: i32,
        p: &Pipeline,
    ) -> Result<(), DutyError> {
        self.fill(fleet, term, id, start, p, 0, "")
    }

    /// Gives run `(id, start)` of `p`, which has `made` instance rows (its
    /// head's address `head_host`), the instances it still needs: warm ones
    /// first, else new ones while this tick's budget lasts (the rest on
    /// the next ticks). A role that can't be filled queues the run again
    /// and ends what it had.
    #[allow(clippy::too_many_arguments)]
    pub fn fill(
        &mut self,
        fleet: &mut Fleet,
        term: &mut Term,
        id: i64,
        start: i32,
        p: &Pipeline,
        made: usize,
        head_host: &str,
    ) -> Result<(), DutyError> {
        let Some(ec2) = p.ec2.clone() else {
            return Ok(());
        };
        let fresh = decide::takes_new_code(start);
        let mut fill = Fill::new(made, ec2.workers, head_host);
        while let Some(need) = fill.next_need() {
            let (role, address) = (need.role.as_str(), &need.address);
            let warm = term.run(|c| {
                c.query_opt(
                    sql::INSTANCE_HAND_OVER,
                    &[&p.name, &id, &start, &role, address, &fresh, &POLL_FRESH],
                )
            })?;
            if fleet.late() {
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
                    fleet,
                    term,
                    &Want {
                        pipeline: p,
                        ec2: &ec2,
                        run: id,
                        start,
                        role: need.role,
                        head: address,
                        fresh,
                        pool_seconds: self.pool_seconds,
                    },
                ) {
                    Ok(host) => host,
                    Err(Unmade::Db(e)) => return Err(e),
                    Err(Unmade::NotMade { tried, .. }) => {
                        let why = tried.why();
                        log::error!("run {id}: no {role} instance: {why}; queued again");
                        let why = format!("no {role} instance: {why}");
                        term.run(|c| {
                            c.query_one(sql::RUN_REQUEUE, &[&id, &start, &why, &Vec::<u8>::new()])
                        })?;
                        let ended =
                            term.run(|c| c.query(sql::INSTANCES_OF_RUN_END, &[&id, &start, &why]))?;
                        self.delete(fleet, term, ended.iter().map(ended_of).collect())?;
                        return Ok(());
                    }
                },
            };
            fill.got(&need, &host);
        }
        Ok(())
    }

    /// Makes the instance `w` wants ([`Fleet::make`]): its own address.
    /// A type no AMI fits is not made (its run queued again, saying why),
    /// nor one whose architectures can't be told now.
    fn make(&mut self, fleet: &mut Fleet, term: &mut Term, w: &Want) -> Result<String, Unmade> {
        let m = &w.ec2.machines;
        let why = match fleet
            .provider(&m.provider, m.region.as_deref())
            .and_then(|p| p.fit(&w.ec2.type_, m))
        {
            Ok(Fit::Launch { .. }) => None,
            Ok(Fit::Skip(why)) => Some(why),
            Err(e) => Some(format!(
                "type {}: its architectures can't be told: {e}",
                w.ec2.type_
            )),
        };
        if let Some(why) = why {
            return Err(Unmade::NotMade {
                name: String::new(),
                tried: Tried {
                    made: None,
                    full: Vec::new(),
                    failed: Some(why),
                },
            });
        }
        let made = fleet.make(term, w)?;
        log::info!(
            "run {}: made instance {} as its {}",
            w.run,
            made.name,
            w.role
        );
        Ok(made.made.address)
    }

    /// Ends what is over (see the module's doc); `judge_silence` false just
    /// after taking the lead or after a stalled tick.
    pub fn watch(
        &mut self,
        fleet: &mut Fleet,
        term: &mut Term,
        judge_silence: bool,
    ) -> Result<(), DutyError> {
        if judge_silence {
            let lost = term
                .run(|c| c.query(sql::EC2_LOST_HEADS, &[&self.timing.boot, &self.timing.lost]))?;
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
                    let state: Option<String> = term.run(|c| {
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
                    term.run(|c| outcome.write(c, sql::RUN_FINISH))?;
                    why
                };
                let ended =
                    term.run(|c| c.query(sql::INSTANCES_OF_RUN_END, &[&id, &start, &why]))?;
                self.delete(fleet, term, ended.iter().map(ended_of).collect())?;
            }
        }
        // What is over is ended and deleted only with time left for the
        // deletes (a row ended whose delete is not sent leaves a stray till
        // the strays' scan): else on the next tick.
        if fleet.late() {
            return Ok(());
        }
        let rows = term.run(|c| {
            c.query(
                sql::INSTANCES_TO_END,
                &[&self.pool_seconds, &POLL_GONE, &self.timing.lost],
            )
        })?;
        let trim = decide::trim(rows.iter().map(|r| (ended_of(r), r.get("ended"))).collect());
        for (name, login) in trim.revoke_first {
            log::warn!("instance {name}: its login holds its row: revoking the login first");
            term.run(|c| logins::revoke(c, &login))?;
        }
        self.delete(fleet, term, trim.delete)?;
        // Strays: instances with this stack's label that no live row holds
        // (made, but the row wasn't written), at every provider in use here
        // (sql/ec2_providers.sql), from the lead's first pass.
        let due = decide::strays_due(
            self.strays_at.map(|t| t.elapsed().as_secs_f64()),
            self.timing.scale,
        );
        if due {
            self.strays_at = Some(std::time::Instant::now());
            let stack = fleet.stack(term)?;
            // Every provider in use here, whether or not this process made
            // anything: a leader that only hands over warm instances still
            // finds what its crashed predecessor made and never recorded.
            let providers = term.run(|c| c.query(sql::EC2_PROVIDERS, &[]))?;
            let live: std::collections::HashSet<String> = term
                .run(|c| c.query(sql::INSTANCES_LIVE_NAMES, &[]))?
                .iter()
                .map(|r| r.get("instance"))
                .collect();
            fleet.begin_pass();
            let mut strays = Vec::new();
            for row in providers {
                let kind = fleet::kind_of_stored(row.get("provider"));
                let region: Option<String> = row.get("region");
                let found = match fleet.listed(&kind, region.as_deref(), GROUP, &stack) {
                    Ok(found) => found,
                    Err(e) => {
                        log::warn!("can't list EC2 runs' instances: {e}");
                        continue;
                    }
                };
                let held = |name: &str| live.contains(name);
                for (f, deleted) in fleet.delete_strays(&kind, region.as_deref(), found, held) {
                    match deleted {
                        Ok(()) => strays.push(f.name),
                        Err(e) => log::error!("stray instance {}: can't delete it: {e}", f.name),
                    }
                }
            }
            // Logins no live row holds (made for an instance never made, or not
            // dropped yet): revoked and dropped.
            let prefix = format!("orca_i_{stack}_");
            for row in term.run(|c| c.query(sql::INSTANCE_LOGINS_ORPHANED, &[&prefix]))? {
                let login: String = row.get("rolname");
                let _ = term.run(|c| fleet::revoke_and_drop(c, &login));
            }
            for name in strays {
                log::warn!("deleted stray instance {name}: no live row held it");
                let why = format!("{name}: no live row held it");
                term.run(|c| {
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
    fn delete(
        &mut self,
        fleet: &mut Fleet,
        term: &mut Term,
        ended: Vec<Ended>,
    ) -> Result<(), DutyError> {
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
            match fleet.end(term, &login, &at) {
                Ok(()) => {}
                Err(Failed::Db(e)) => return Err(e),
                Err(Failed::Provider(e)) => log::error!("instance {name}: can't delete it: {e}"),
            }
            fleet::drop_login(term, &login);
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
