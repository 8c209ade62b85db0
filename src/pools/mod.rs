//! The pool autoscaler (seed 003, `orca.pool_scale`): the leading
//! scheduler's per-pool steps, every `ORCA_POOL_SCALE_SECONDS`.
//!
//! First, for every pool, its removals begin (marked ending: the machine
//! claims nothing more); then, per pool in turn within the pass's budget
//! (2 s: no provider call is sent after it, so a hung provider holds up
//! no other pool for longer; the pools left go first on the next pass):
//! 1. **Shrink**: a machine whose worker never showed up within
//!    `ORCA_POOL_BOOT_SECONDS`, or went silent for `ORCA_POOL_LOST_SECONDS`,
//!    is removed and its runs are queued again; with no demand, a machine
//!    that has run nothing for the pool's `idle_seconds` is removed; a
//!    retired pool's machines are removed once idle. Never a busy machine
//!    for idleness.
//! 2. **Strays**: a provider machine with the pool's and this stack's labels
//!    that no live row holds is deleted.
//! 3. **Grow**: with demand, no machine booting and fewer than
//!    `max_machines`, at most once every `ORCA_POOL_TRY_SECONDS`: the type
//!    the walk is on, in each location in turn; a type the worker image has
//!    no variant for is skipped, saying so; a type no location has is kept
//!    for its `wait`, then the next (the last is kept); after a make, or when
//!    the demand goes, the walk starts again from the first type.
//!
//! What to do is decided in [`crate::pools::decide`], pure over what this
//! module read; this module reads, asks it, and does what it says.
//!
//! Invariants:
//! * Every write is fenced on the leading session ([`Db::run_fenced`]).
//! * Removal is: credentials revoked, machine deleted, row ended (with its
//!   runs queued again), in that order; a step that fails is redone on the
//!   next pass, since the row stays live until the last step.
//! * A machine's row is written only after the provider made it; one made
//!   whose row was not written is a stray, deleted on a later pass, and its
//!   role is dropped as an orphan.

pub mod decide;
pub mod demand;
pub mod mark;
pub mod registry;
pub mod worker;

use std::collections::HashMap;
use std::time::Instant;

use crate::config::{Pool, PoolType};
use crate::db::sql;
use crate::db::{Db, Fault};
use crate::machines::boot::{self, Boot};
use crate::machines::fleet::{self, AtProvider, Deadline, Fleet};
use crate::machines::logins::{self, Machine};
use crate::machines::walk::{strays, try_locations};
use crate::pools::decide::{Decided, Grow, PoolView, Removal, TypeWalk, Walk, say_no_capacity};
use crate::providers::{Make, MakeError, Provider};
use crate::settings::PoolTiming;

/// A machine's row, as `sql/machine_add.sql` reads it: one JSON object,
/// each field by its column's name.
#[derive(serde::Serialize)]
struct NewMachine<'a> {
    id: i64,
    pool: &'a str,
    name: &'a str,
    r#type: &'a str,
    location: &'a str,
    arch: &'a str,
    role: &'a str,
    provider_id: &'a str,
    slots: i32,
    region: Option<&'a str>,
}

/// The pools (indices into `names`) whose provider work a pass does, in
/// order: those a pass cut short `left`, if it did (and still exist), else
/// every pool.
fn pass_order(names: &[&str], left: Option<&[String]>) -> Vec<usize> {
    match left {
        Some(left) => {
            let order: Vec<usize> = left
                .iter()
                .filter_map(|l| names.iter().position(|n| n == l))
                .collect();
            if order.is_empty() {
                (0..names.len()).collect()
            } else {
                order
            }
        }
        None => (0..names.len()).collect(),
    }
}

/// A pool as `sql/pools_view.sql` reads it; `None` (said) if its stored
/// spec is not one this binary reads.
fn view_of(row: &postgres::Row) -> Option<PoolView> {
    let name: String = row.get("name");
    let pool: Pool = match serde_json::from_value(row.get("spec")) {
        Ok(p) => p,
        Err(e) => {
            log::error!(
                "pool {name}: its stored spec is not one this binary reads: {:?} error",
                e.classify()
            );
            return None;
        }
    };
    Some(PoolView {
        pool,
        retired: row.get("retired"),
        walk_type: row.get::<_, i32>("walk_type").max(0) as usize,
        walk_for: row.get("walk_for"),
        tried_ago: row.get("tried_ago"),
        status: row.get("status"),
        waiting: row.get("waiting"),
        demand: row.get("demand"),
    })
}

/// Records a scaler decision of `kind` that has no other write, with `why`.
fn event(db: &mut Db, session: u64, kind: &str, why: &str) -> Result<(), Fault> {
    db.run_fenced(session, |c| {
        c.execute(
            sql::EVENT_ADD,
            &[&None::<i64>, &None::<String>, &kind, &why],
        )
    })
    .map(|_| ())
}

/// How long after making an EC2 machine its absence from DescribeInstances
/// may be only the listing lagging (s): a machine not listed sooner is not
/// taken for ended.
const EC2_LISTS_WITHIN: f64 = 60.0;

/// The autoscaler's state between passes: when it last ran, this stack's
/// id and the providers (the fleet), the worker images' architectures (read
/// again after `ORCA_POOL_IMAGE_SECONDS`).
pub struct PoolScaler {
    timing: PoolTiming,
    last: Option<Instant>,
    images: HashMap<String, (Result<Vec<String>, String>, Instant)>,
    fleet: Fleet,
    /// Orphan roles that could not be dropped (said once each).
    undroppable: std::collections::HashSet<String>,
    /// The provider's refusal each pool's last attempt to make a machine
    /// came to, as its `machine not made` event said it
    /// ([`decide::refusal_is_news`]); gone once an attempt comes to
    /// anything else.
    refused: HashMap<String, String>,
    /// The pools a pass that ran out of time (slow provider calls) left:
    /// the next pass, due at once, does their provider work alone.
    resume: Option<Vec<String>>,
    /// Machines whose removal a pass skipped for their held row: since
    /// when, and the last pass that found it held ([`logins::held_since`]);
    /// taken from their login once [`logins::held_for_good`].
    held: HashMap<i64, (Instant, u64)>,
    /// Passes begun, numbering them for `held`.
    passes: u64,
}

// The scaler's log lines about the walk, its machines made and removed:
// what an operator reads in the scheduler's log. They name pools, types,
// locations and machines, and say what a provider answered; never a token
// (nothing here is given one).

/// Seconds as a log line says them: whole (those begun are not counted,
/// so 9.9 s waited is not said as a wait of 10 s done), with a unit.
fn secs(s: f64) -> String {
    format!("{:.0} s", s.max(0.0).floor())
}

/// The log line for location `location` without room for type `ty` (the
/// provider said `why`); `next` is the location tried next, if any.
fn say_no_room(pool: &str, ty: &str, location: &str, why: &str, next: Option<&str>) -> String {
    let then = match next {
        Some(n) => format!("trying {n}"),
        None => "no location left".into(),
    };
    format!("pool {pool}: no room for {ty} in {location}: {why}; {then}")
}

/// The log line for an attempt that found type `ty` in no location, having
/// tried it for `waited` seconds, and what the walk does next.
fn say_unavailable(pool: &str, ty: &PoolType, waited: f64, walk: &Walk) -> String {
    let name = &ty.name;
    let head = format!("pool {pool}: {name} unavailable in every location");
    match walk {
        Walk::Again => format!("{head}; it is the last type: trying it again on the next attempt"),
        Walk::Keep => format!(
            "{head}; waited {} of its {} wait; trying it again",
            secs(waited),
            secs(ty.wait)
        ),
        Walk::Next(to) => format!(
            "{head}; waited {} of its {} wait; moving to {to}",
            secs(waited),
            secs(ty.wait)
        ),
    }
}

/// The log line for machine `name` made as type `ty` in `location`.
fn say_made(pool: &str, name: &str, ty: &str, location: &str) -> String {
    format!("pool {pool}: made machine {name} ({ty} in {location})")
}

/// The log line for machine `name` whose removal begins, for `why`.
fn say_removing(pool: &str, name: &str, why: &str) -> String {
    format!("pool {pool}: removing machine {name}: {why}")
}

/// The log line for machine `name` removed, `requeued` of its runs queued
/// again.
fn say_removed(pool: &str, name: &str, requeued: usize) -> String {
    match requeued {
        0 => format!("pool {pool}: machine {name} removed"),
        n => format!("pool {pool}: machine {name} removed; {n} of its runs queued again"),
    }
}

impl PoolScaler {
    /// A scaler with `timing`; its first pass is due at once.
    pub fn new(timing: PoolTiming) -> PoolScaler {
        PoolScaler {
            fleet: Fleet::new(timing.try_every),
            timing,
            last: None,
            images: HashMap::new(),
            undroppable: Default::default(),
            refused: HashMap::new(),
            resume: None,
            held: HashMap::new(),
            passes: 0,
        }
    }

    /// Its timing.
    pub fn timing(&self) -> &PoolTiming {
        &self.timing
    }

    /// Whether a pass is due now.
    pub fn due(&self) -> bool {
        // A pass cut short goes on at the next tick.
        self.resume.is_some()
            || self
                .last
                .is_none_or(|t| t.elapsed().as_secs_f64() >= self.timing.scale)
    }

    /// One pass over every pool, writing on session `session` only, its
    /// provider work within this tick's `deadline`. With
    /// `judge_silence` false (just after taking the lead, or after a tick
    /// that stalled: workers' beats may not have landed yet), no machine is
    /// removed as lost or never booted. Returns what it cost: milliseconds
    /// and statements.
    pub fn scale(
        &mut self,
        db: &mut Db,
        session: u64,
        judge_silence: bool,
        deadline: Deadline,
    ) -> Result<(f64, u64), Fault> {
        let (began, calls) = (Instant::now(), db.calls);
        self.last = Some(Instant::now());
        self.passes += 1;
        let read = self.fleet.stack(db, session)?;
        let stack = read.id;
        if read.fresh {
            log::info!("this stack's id is {stack} (it labels this stack's machines)");
        }
        self.fleet.begin_pass();
        let grow_after = self.timing.grow_after;
        let rows = db.run_fenced(session, |c| c.query(sql::POOLS_VIEW, &[&grow_after]))?;
        let machines = db.run_fenced(session, logins::live)?;
        self.held
            .retain(|id, _| machines.iter().any(|m| m.id == *id));
        for role in db.run_fenced(session, |c| logins::orphaned_roles(c, &stack))? {
            // Best effort: a role that can't be dropped yet is shut out and
            // tried again on the next pass.
            let dropped = db.run_fenced(session, |c| fleet::revoke_and_drop(c, &role));
            match dropped {
                Ok(true) => log::debug!("dropped role {role}: no live machine holds it"),
                Ok(false) => {
                    if self.undroppable.insert(role.clone()) {
                        log::warn!(
                            "role {role} (no live machine holds it) can't be dropped yet; it can't log in"
                        );
                    }
                }
                Err(e @ (Fault::Sql(_) | Fault::Data(_) | Fault::Other(_))) => {
                    log::error!("role {role}: {e}")
                }
                Err(down) => return Err(down),
            }
        }
        // Each pool as read, with its machines.
        let mut pools: Vec<(PoolView, Vec<&Machine>)> = Vec::new();
        for row in &rows {
            let Some(view) = view_of(row) else { continue };
            let mine = machines
                .iter()
                .filter(|m| m.pool == view.pool.name)
                .collect();
            pools.push((view, mine));
        }
        // 1. Every pool's removals begin: a machine marked ending claims
        // nothing more. The database's work alone, so no provider's call
        // holds up any pool's.
        let mut shrinks = Vec::with_capacity(pools.len());
        for (view, mine) in &pools {
            let shrink = decide::shrink(view, mine, &self.timing, judge_silence);
            shrinks.push(self.begin_removals(db, session, &view.pool, shrink)?);
        }
        // 2. Each pool's provider work (deletes, a make, strays), in turn
        // and within the tick's deadline: no pool's step begins after its
        // soft limit, no call is sent after its hard one, so a hung
        // provider costs the tick that much at most; the pools left go
        // first on the next pass.
        self.fleet.until(Some(deadline));
        let names: Vec<&str> = pools.iter().map(|(v, _)| v.pool.name.as_str()).collect();
        let order = pass_order(&names, self.resume.take().as_deref());
        for (n, &i) in order.iter().enumerate() {
            if n > 0 && self.fleet.late() {
                let left: Vec<String> = order[n..].iter().map(|&j| names[j].to_string()).collect();
                log::info!(
                    "scaler pass out of time: {} left to the next pass",
                    crate::plural::count(left.len() as i64, "pool")
                );
                self.resume = Some(left);
                break;
            }
            let (view, mine) = &pools[i];
            let shrunk = std::mem::take(&mut shrinks[i]);
            let decided = self.step(db, session, &stack, view, mine, shrunk)?;
            if decided.changes(view) {
                let name = &view.pool.name;
                db.run_fenced(session, |c| {
                    c.execute(
                        sql::POOL_STATUS,
                        &[
                            name,
                            &(decided.demand as i32),
                            &decided.status,
                            &(decided.walk_type as i32),
                            &decided.walk_since.as_sql(),
                            &decided.tried,
                        ],
                    )
                })?;
            }
        }
        self.fleet.until(None);
        Ok((began.elapsed().as_secs_f64() * 1000.0, db.calls - calls))
    }

    /// The provider of pool `p`'s machines (see [`Fleet::provider`]).
    fn provider(&mut self, p: &Pool) -> Result<&mut dyn Provider, String> {
        self.fleet
            .provider(&p.machines.provider, p.machines.region.as_deref())
    }

    /// The architectures of `image`, read again once they are older than
    /// `ORCA_POOL_IMAGE_SECONDS` (a tag can be pushed again).
    fn arches(&mut self, image: &str) -> Result<Vec<String>, String> {
        // Read again after ORCA_POOL_IMAGE_SECONDS; a read that failed, after
        // the try interval.
        let fresh = self.images.get(image).is_some_and(|(read, at)| {
            let limit = if read.is_ok() {
                self.timing.image
            } else {
                self.timing.try_every
            };
            at.elapsed().as_secs_f64() < limit
        });
        if !fresh {
            let read = crate::pools::registry::architectures(image);
            if let Err(e) = &read {
                log::warn!("image {image}: can't read its architectures: {e}");
            }
            self.images
                .insert(image.to_string(), (read, Instant::now()));
        }
        self.images[image].0.clone()
    }

    /// One pool's step, its removals begun (`shrunk`): they are finished,
    /// then grow, then strays.
    fn step(
        &mut self,
        db: &mut Db,
        session: u64,
        stack: &str,
        v: &PoolView,
        machines: &[&Machine],
        shrunk: Shrunk,
    ) -> Result<Decided, Fault> {
        let p = &v.pool;
        let (live, demand) = (shrunk.live, shrunk.demand);
        let mut problem = shrunk.problem;
        // Machines still there: kept, busy after all, or not removed yet.
        let mut standing = live.len() + shrunk.kept;
        for (m, why) in shrunk.ending {
            match self.finish_removal(db, session, p, m, &why) {
                Ok(()) => {}
                Err(e @ (Fault::Sql(_) | Fault::Data(_) | Fault::Other(_))) => {
                    problem = Some(e.to_string());
                    standing += 1;
                }
                Err(down) => return Err(down),
            }
        }
        let status = problem.map(|e| format!("can't remove a machine: {e}"));
        let mut d = match decide::grow(v, demand, status, &live, standing, &self.timing) {
            Grow::Done(d) => d,
            // The tick's time for providers is spent: the next pass tries.
            Grow::Attempt(d) if self.fleet.late() => Decided {
                tried: false,
                status: v.status.clone(),
                ..d
            },
            Grow::Attempt(mut d) => {
                let mut walk = TypeWalk::begin(v);
                d.status = self.attempt(db, session, stack, v, &mut walk)?;
                (d.walk_type, d.walk_since) = (walk.ty, walk.since);
                d
            }
        };
        // Strays, last (a make comes first): the provider's machines with this
        // pool's and stack's labels that no live row holds. Not in a step
        // that tried a make: its machine's row is newer than what was read.
        if !d.tried
            && !self.fleet.late()
            && let Err(e) = self.strays(db, session, stack, p, machines)?
        {
            d.status = format!("can't list its machines: {e}");
        }
        Ok(d)
    }

    /// Deletes pool `p`'s strays: the provider's machines with its and
    /// `stack`'s labels that no row of `machines` holds. Err (inside): the
    /// provider couldn't list them.
    fn strays(
        &mut self,
        db: &mut Db,
        session: u64,
        stack: &str,
        p: &Pool,
        machines: &[&Machine],
    ) -> Result<Result<(), String>, Fault> {
        let provider = match self.provider(p) {
            Ok(provider) => provider,
            Err(e) => return Ok(Err(e)),
        };
        let found = match provider.list(&p.name, stack) {
            Ok(found) => found,
            Err(e) => return Ok(Err(e)),
        };
        // Rows whose machine is gone before their worker was seen: ended
        // while booting (its login refused, its boot failed).
        let grace = match p.machines.provider {
            crate::config::Provider::Local => 0.0,
            // DescribeInstances may not list an instance for a while after
            // RunInstances made it.
            crate::config::Provider::Ec2 => EC2_LISTS_WITHIN,
        };
        let gone =
            decide::ended_unseen(machines, |name| found.iter().any(|f| f.name == name), grace);
        let held = |name: &str| machines.iter().any(|m| m.name == name);
        let strays_found = strays(found, |s| &s.name, held);
        for m in gone {
            let why = Removal::EndedUnseen.why();
            let marked = db.run_fenced(session, |c| {
                logins::mark_ending(c, sql::MACHINE_ENDING, m.id, None, &why, None)
            })?;
            if marked != logins::Mark::Marked {
                continue;
            }
            log::warn!("{}", say_removing(&p.name, &m.name, &why));
            match self.finish_removal(db, session, p, m, &why) {
                Ok(()) => {}
                // Marked ending: the next pass takes it up again.
                Err(e @ (Fault::Sql(_) | Fault::Data(_) | Fault::Other(_))) => {
                    log::error!("pool {}: machine {}: {e}", p.name, m.name);
                }
                Err(down) => return Err(down),
            }
        }
        for s in strays_found {
            log::warn!(
                "deleting stray machine {} ({}) of pool {}: no live row holds it",
                s.name,
                s.id,
                p.name
            );
            let provider = self.provider(p).map_err(Fault::Other)?;
            if let Err(e) = provider.delete(&s.id, &s.name) {
                log::error!("stray {}: can't delete it: {e}", s.name);
                continue;
            }
            let why = format!(
                "{} ({}) of pool {}: no live row held it",
                s.name, s.id, p.name
            );
            event(db, session, "stray deleted", &why)?;
        }
        Ok(Ok(()))
    }

    /// One attempt to make a machine for pool `v`, the type walk `walk`
    /// deciding which type; returns what it came to.
    fn attempt(
        &mut self,
        db: &mut Db,
        session: u64,
        stack: &str,
        v: &PoolView,
        walk: &mut TypeWalk,
    ) -> Result<String, Fault> {
        let p = &v.pool;
        let arches = p.image.as_deref().map(|i| (i, self.arches(i)));
        let mut notes = Vec::new();
        // Types skipped for their architecture are passed over in this
        // attempt. Architectures matter only with an image to match.
        let (ty, arch) = loop {
            let ty = p.types[walk.ty].clone();
            let have = match &arches {
                Some((image, Ok(have))) => (image, have),
                Some((image, Err(e))) => {
                    notes.push(format!(
                        "image {image}'s architectures can't be read ({e}): no type skipped"
                    ));
                    break (ty, String::new());
                }
                None => break (ty, String::new()),
            };
            let why = match self.provider(p).and_then(|pr| pr.arch(&ty.name)) {
                Ok(arch) if have.1.contains(&arch) => break (ty, arch),
                Ok(arch) => format!(
                    "type {} skipped: image {} has no {arch} variant (it has {})",
                    ty.name,
                    have.0,
                    have.1.join(", ")
                ),
                Err(e) => format!(
                    "type {} skipped: its architecture can't be told ({e})",
                    ty.name
                ),
            };
            event(
                db,
                session,
                "type skipped",
                &format!("pool {}: {why}", p.name),
            )?;
            log::warn!("pool {}: {why}", p.name);
            notes.push(why);
            if !walk.skip(p.types.len()) {
                return Ok(format!("no type fits: {}", notes.join("; ")));
            }
        };
        walk.tried();
        let id: i64 = db
            .run_fenced(session, |c| c.query_one(sql::MACHINE_NEXT_ID, &[]))?
            .get("id");
        let name = format!("orca-{}-{id}", p.name);
        let token = db
            .run_fenced(session, |c| Ok(logins::make_role(c, stack, id)))?
            .map_err(Fault::Other)?;
        let boot = Boot {
            pool: p.name.clone(),
            machine: name.clone(),
            token: token.reveal(),
            database_url: boot::machine_database_url().map_err(Fault::Other)?,
        };
        let tried = try_locations(&p.machines.locations, |location, next| {
            // A make sent late would get too little time for its answer.
            if self.fleet.late() {
                return Ok(Err(MakeError::Failed(
                    "this tick's time for provider calls is spent: the next pass goes on".into(),
                )));
            }
            // A provider that can't be made (no region, no credentials
            // chain) refuses the make as EC2 would: said on the status and
            // as an event, the other pools' steps going on.
            let provider = match self.provider(p) {
                Ok(provider) => provider,
                Err(why) => {
                    crate::metrics::make_attempt(&p.name, false);
                    return Ok(Err(MakeError::Failed(why)));
                }
            };
            let env = boot.env();
            let req = Make {
                group: &p.name,
                settings: &p.machines,
                name: &name,
                type_: &ty.name,
                location,
                stack,
                script: boot::BOOT_SCRIPT,
                env: &env,
            };
            let made = provider.make(&req);
            crate::metrics::make_attempt(&p.name, made.is_ok());
            if let Err(MakeError::NoCapacity(why)) = &made {
                log::info!("{}", say_no_room(&p.name, &ty.name, location, why, next));
            }
            Ok(made.map(|m| m.id))
        })?;
        drop(boot);
        let Some((location, provider_id)) = tried.made else {
            // Its login goes at once (one that can't be dropped now is an
            // orphan, dropped on a later pass).
            db.run_fenced(session, |c| fleet::revoke_and_drop(c, &token.role))?;
            if let Some(why) = tried.failed {
                log::warn!("pool {}: machine {name} not made: {why}", p.name);
                // A refusal (auth, a bad AMI, a quota) is an event once per
                // change of it, not per attempt. Not this tick's time being
                // spent (no call sent): that is no answer of the provider's
                // (a refusal answered just before is said next pass).
                let said = self.refused.get(&p.name).map(String::as_str);
                if !self.fleet.late() && decide::refusal_is_news(said, &why) {
                    event(
                        db,
                        session,
                        "machine not made",
                        &format!("pool {}: {why}", p.name),
                    )?;
                    self.refused.insert(p.name.clone(), why.clone());
                }
                notes.push(format!("{name} not made: {why}"));
                return Ok(notes.join("; "));
            }
            self.refused.remove(&p.name);
            let waited = walk.waited.unwrap_or(0.0);
            let next_walk = walk.no_capacity(&p.types);
            let next = say_no_capacity(&ty, waited, &next_walk, &tried.full);
            log::info!("{}", say_unavailable(&p.name, &ty, waited, &next_walk));
            // The event says what the walk does next, as the status does.
            event(
                db,
                session,
                "no capacity",
                &format!("pool {}: {next}", p.name),
            )?;
            notes.push(next);
            return Ok(notes.join("; "));
        };
        let made_in = self.provider(p).ok().and_then(|pr| pr.region());
        let row = NewMachine {
            id,
            pool: &p.name,
            name: &name,
            r#type: &ty.name,
            location: &location,
            arch: &arch,
            role: &token.role,
            provider_id: &provider_id,
            slots: p.slots,
            region: made_in.as_deref(),
        };
        let written = serde_json::to_value(&row)
            .map_err(|e| Fault::Other(e.to_string()))
            .and_then(|row| db.run_fenced(session, |c| c.execute(sql::MACHINE_ADD, &[&row])));
        if let Err(e) = written {
            // The machine is a stray now: a later pass deletes it and drops its role.
            log::error!("machine {name} was made but its row was not written: {e}");
            return Err(e);
        }
        self.refused.remove(&p.name);
        log::info!("{}", say_made(&p.name, &name, &ty.name, &location));
        walk.made();
        notes.push(format!(
            "made {name} (type {}, location {location})",
            ty.name
        ));
        Ok(notes.join("; "))
    }

    /// Begins the removals `shrink` decided for pool `p`'s machines: each
    /// marked ending for its why (one taken for idleness, only if it took no
    /// run since it was seen idle). What the pool's step finishes.
    fn begin_removals<'a>(
        &mut self,
        db: &mut Db,
        session: u64,
        p: &Pool,
        shrink: decide::Shrink<'a>,
    ) -> Result<Shrunk<'a>, Fault> {
        let mut shrunk = Shrunk {
            live: shrink.live,
            demand: shrink.demand,
            ..Default::default()
        };
        for (m, removal) in shrink.remove {
            let why = removal.why();
            let seen_busy = removal.if_idle().then_some(m.busy_at);
            // One marked on an earlier pass is not marked again: its login
            // holding its row can't keep its removal from being finished.
            let marked = if m.ending {
                Ok(logins::Mark::Marked)
            } else {
                db.run_fenced(session, |c| {
                    logins::mark_ending(c, sql::MACHINE_ENDING, m.id, seen_busy, &why, None)
                })
            };
            let marked = match marked {
                Ok(logins::Mark::Held) => self.held(db, session, m, &why, seen_busy.is_none()),
                other => {
                    self.held.remove(&m.id);
                    other
                }
            };
            match marked {
                Ok(logins::Mark::Marked) => {}
                Ok(logins::Mark::Held | logins::Mark::Not) => {
                    // It took a run, or its row is held (a claim under
                    // way, or its login): kept for now.
                    log::info!("pool {}: machine {} is busy: kept", p.name, m.name);
                    shrunk.kept += 1;
                    continue;
                }
                Err(e @ (Fault::Sql(_) | Fault::Data(_) | Fault::Other(_))) => {
                    log::error!("pool {}: machine {}: {e}", p.name, m.name);
                    shrunk.problem = Some(e.to_string());
                    shrunk.kept += 1;
                    continue;
                }
                Err(down) => return Err(down),
            }
            if removal == Removal::Resumed {
                log::debug!("{}", say_removing(&p.name, &m.name, &why));
            } else {
                log::info!("{}", say_removing(&p.name, &m.name, &why));
            }
            shrunk.ending.push((m, why));
        }
        Ok(shrunk)
    }

    /// Machine `m`'s removal (for `why`) skipped for its held row: taken
    /// from its login ([`logins::take_from_login`]) at once if it goes
    /// whatever it does (`unconditional`: lost, never booted; marking it
    /// would have revoked it all the same), else once it was held at every
    /// pass for [`logins::HELD_FOR_GOOD`] (a pass that found it free, or not
    /// due, starts the count again); till then still held.
    fn held(
        &mut self,
        db: &mut Db,
        session: u64,
        m: &Machine,
        why: &str,
        unconditional: bool,
    ) -> Result<logins::Mark, Fault> {
        let now = Instant::now();
        let (first, _) = logins::held_since(self.held.get(&m.id).copied(), self.passes, now);
        self.held.insert(m.id, (first, self.passes));
        if !unconditional && !logins::held_for_good(first, now) {
            return Ok(logins::Mark::Held);
        }
        self.held.remove(&m.id);
        let taken = db.run_fenced(session, |c| {
            logins::take_from_login(c, m.id, &m.name, why, None)
        })?;
        Ok(taken.unwrap_or(logins::Mark::Not))
    }

    /// Finishes removing machine `m` of pool `p` (marked ending for `why`):
    /// credentials revoked, machine deleted, row ended and its runs queued
    /// again, role dropped. A step that fails is taken up again on the next
    /// pass (the row stays ending).
    fn finish_removal(
        &mut self,
        db: &mut Db,
        session: u64,
        p: &Pool,
        m: &Machine,
        why: &str,
    ) -> Result<(), Fault> {
        // Where it was made: the pool's region may have changed since.
        let at = AtProvider {
            kind: &p.machines.provider,
            region: m.region.as_deref().or(p.machines.region.as_deref()),
            id: m.provider_id.as_deref(),
            name: &m.name,
        };
        self.fleet
            .revoke_and_delete(db, session, &m.role, &at)?
            .map_err(|e| Fault::Other(format!("{}: can't delete it: {e}", m.name)))?;
        let requeued = db.run_fenced(session, |c| c.query(sql::MACHINE_END, &[&m.id, &why]))?;
        log::info!("{}", say_removed(&p.name, &m.name, requeued.len()));
        // A role that can't be dropped now is an orphan: dropped on a later pass.
        fleet::drop_login(db, session, &m.role);
        Ok(())
    }
}

/// A pool's removals as begun in a pass's first part, for its step.
#[derive(Default)]
struct Shrunk<'a> {
    /// Its machines that stay (for now).
    live: Vec<&'a Machine>,
    /// Runs waiting beyond their room.
    demand: i64,
    /// Machines marked ending, with why: to be deleted.
    ending: Vec<(&'a Machine, String)>,
    /// Machines to remove that took a run meanwhile (or couldn't be
    /// marked): they stay.
    kept: usize,
    /// Why a machine's removal couldn't begin, if one couldn't.
    problem: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ty(name: &str, wait: f64) -> PoolType {
        PoolType {
            name: name.into(),
            wait,
        }
    }

    #[test]
    fn a_pass_cut_short_leaves_only_its_remaining_pools_to_the_next() {
        let names = ["a", "b", "c", "d"];
        assert_eq!(pass_order(&names, None), vec![0, 1, 2, 3]);
        let left = vec!["c".to_string(), "d".to_string()];
        assert_eq!(pass_order(&names, Some(&left)), vec![2, 3]);
        // A pool gone since is passed over; none left: every pool.
        let left = vec!["x".to_string(), "b".to_string()];
        assert_eq!(pass_order(&names, Some(&left)), vec![1]);
        assert_eq!(
            pass_order(&names, Some(&["x".to_string()])),
            vec![0, 1, 2, 3]
        );
    }

    #[test]
    fn the_walk_is_said_as_an_operator_reads_it() {
        assert_eq!(
            say_no_room(
                "builders",
                "big",
                "rack-a",
                "rack-a is full (0 of 0)",
                Some("rack-b")
            ),
            "pool builders: no room for big in rack-a: rack-a is full (0 of 0); trying rack-b"
        );
        assert_eq!(
            say_no_room(
                "builders",
                "big",
                "rack-b",
                "big@rack-b is full (0 of 0)",
                None
            ),
            "pool builders: no room for big in rack-b: big@rack-b is full (0 of 0); no location left"
        );
        let big = ty("big", 10.0);
        assert_eq!(
            say_unavailable("builders", &big, 9.97, &Walk::Keep),
            "pool builders: big unavailable in every location; waited 9 s of its 10 s wait; trying it again"
        );
        assert_eq!(
            say_unavailable("builders", &big, 12.0, &Walk::Next("small")),
            "pool builders: big unavailable in every location; waited 12 s of its 10 s wait; moving to small"
        );
        assert_eq!(
            say_unavailable("builders", &ty("small", 0.0), 0.0, &Walk::Again),
            "pool builders: small unavailable in every location; it is the last type: trying it again on the next attempt"
        );
    }

    #[test]
    fn machines_made_and_removed_are_said_with_their_why() {
        assert_eq!(
            say_made("builders", "orca-builders-5", "small", "rack-b"),
            "pool builders: made machine orca-builders-5 (small in rack-b)"
        );
        assert_eq!(
            say_removing(
                "builders",
                "orca-builders-5",
                "idle for 21 s with no demand (idle_seconds 20)"
            ),
            "pool builders: removing machine orca-builders-5: idle for 21 s with no demand (idle_seconds 20)"
        );
        assert_eq!(
            say_removed("builders", "orca-builders-5", 0),
            "pool builders: machine orca-builders-5 removed"
        );
        assert_eq!(
            say_removed("builders", "orca-builders-5", 2),
            "pool builders: machine orca-builders-5 removed; 2 of its runs queued again"
        );
    }
}
