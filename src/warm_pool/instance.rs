//! The instance's side of EC2 runs and the warm pool (seed 000,
//! `orca.pool`): `ec2-serve`, what an instance does for a run (the head's
//! driver and service, a worker's service), and the two commands its
//! script runs between runs.
//!
//! ```text
//! orca pool-wait <instance> <run> <start>             a worker: until its run is over
//! orca pool-next <instance> <run> <start> <seconds>   until it's handed another run
//! ```
//!
//! Both log in with the instance's own credentials (`ORCA_TOKEN`) and act
//! only through the `orca.instance_*` functions (migration 0004). The
//! instance learns of its next run from its own rows in `orca.instances`:
//! no other service, port or permission.
//!
//! Invariants:
//! * Neither exits because the database can't be reached: each retries every
//!   second, for as long as it takes (`pool-next` still ends at its deadline).
//! * Each command holds one connection, and its every-second statement is
//!   prepared once: one transaction a second (`ec2-serve`'s head shares its
//!   connection with its heartbeat thread, whose beats carry its output).
//! * `pool-next` marks the served row `idle` before it polls (the script runs
//!   it only once the instance's work has stopped), and prints `next …` only
//!   after the new row is `joined`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::{Command, Pipeline};
use crate::db::sql;
use crate::db::wake::{Gate, Heard, Wake};
use crate::db::{Db, Fault, Link};
use crate::exit::{Failure, Outcome, bad, no};
use crate::settings::Timing;
use crate::supervise::child::Child;
use crate::supervise::{self, Supervisor};
use crate::warm_pool::decide::Role;

/// `pool-next`'s output when it is handed a run.
fn next_line(run: i64, start: i32, address: &str, fresh_code: bool) -> String {
    format!("next {run} {start} {address} {}", u8::from(fresh_code))
}

/// What `orca.instance_poll` said (its `outcome`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Poll {
    /// Handed another run (`next`).
    Next,
    /// No live row: shut down (`ended`).
    Ended,
    /// Nothing yet (`wait`, or an outcome this binary doesn't know).
    Wait,
}

impl Poll {
    /// The outcome as the function returns it.
    fn of(outcome: &str) -> Poll {
        match outcome {
            "next" => Poll::Next,
            "ended" => Poll::Ended,
            _ => Poll::Wait,
        }
    }
}

/// Sleeps a second, or less when `deadline` is nearer.
fn pause(deadline: Option<Instant>) {
    let mut d = Duration::from_secs(1);
    if let Some(at) = deadline {
        d = d.min(at.saturating_duration_since(Instant::now()));
    }
    std::thread::sleep(d.max(Duration::from_millis(10)));
}

/// A database the command reaches with the instance's credentials.
fn db(who: &'static str) -> Result<Db, Failure> {
    let target = crate::machines::boot::own_target(who).map_err(bad)?;
    Ok(Db::new(target, who))
}

/// Whether the instance's credentials were revoked (its login dropped or
/// shut out, [`crate::db::revokes`]): the instance was removed, and
/// waiting is pointless.
fn revoked(e: &Fault) -> bool {
    matches!(e, Fault::Refused(r) if r.revoked)
}

/// A statement's fault, said once per kind while it lasts.
fn say(said: &mut String, e: &Fault) {
    if let Fault::Sql(_) | Fault::Data(_) | Fault::Other(_) = e {
        let m = e.to_string();
        if m != *said {
            log::error!("{m}");
            *said = m;
        }
    }
}

/// `orca pool-wait <instance> <run> <start>`: exits 0 once the run is not
/// running at that start any more, or the instance's row for it has ended.
pub fn pool_wait(instance: &str, run: i64, start: i32) -> Outcome {
    let mut db = db("pool-wait")?;
    let mut said = String::new();
    loop {
        match db.prepared(sql::INSTANCE_RUN_OVER, |c, s| {
            c.query_one(s, &[&instance, &run, &start])
        }) {
            Ok(row) if row.get::<_, bool>("over") => return Ok(()),
            Ok(_) => {}
            Err(e) if revoked(&e) => {
                log::info!("instance {instance}: its credentials were revoked: its run is over");
                return Ok(());
            }
            Err(e) => say(&mut said, &e),
        }
        pause(None);
    }
}

/// `orca pool-next <instance> <run> <start> <seconds>`: marks the row the
/// instance served idle, then polls every second, and at once when its
/// hand-over wakes it (`ORCA_LISTEN`). Handed a run: prints
/// `next <run> <start> <head address> <0|1>` and exits 0. Its row ended with
/// no other (shut down), or `seconds` and a minute more passed
/// (`ORCA_POOL_NEXT_GRACE_SECONDS`, 60, shortens the minute for tests):
/// exits 1.
pub fn pool_next(instance: &str, run: i64, start: i32, seconds: f64) -> Outcome {
    let grace = crate::settings::POOL_NEXT_GRACE.read().map_err(bad)?;
    let listen = crate::settings::listen_on().map_err(bad)?;
    if !(seconds.is_finite() && seconds >= 0.0) {
        return Err(bad(format!(
            "pool-next: seconds must be a number of seconds, not {seconds}"
        )));
    }
    let deadline = Instant::now() + Duration::from_secs_f64((seconds + grace).min(1e7));
    let mut db = db("pool-next")?;
    let mut said = String::new();
    // The served row is idle first: retried until it lands.
    loop {
        match db.run(|c| c.query_one(sql::INSTANCE_IDLE, &[&instance, &run, &start])) {
            Ok(row) => {
                if !row.get::<_, bool>("found") {
                    log::warn!(
                        "instance {instance} has no live row for run {run} at start {start}; waiting for another"
                    );
                }
                break;
            }
            Err(e) if revoked(&e) => return Err(Failure::quiet(1)),
            Err(e) => say(&mut said, &e),
        }
        if Instant::now() >= deadline {
            return Err(Failure::quiet(1));
        }
        pause(Some(deadline));
    }
    // Woken by its hand-over ([`crate::db::wake`]) on the same session; the
    // poll stays its beat and the floor.
    let mut wake = if listen {
        instance_channel(&mut db, instance)
    } else {
        None
    };
    let mut by_wake = false;
    // The poll is prepared once per session: one round trip a second.
    loop {
        // Listening before the poll: a hand-over just after it is heard.
        if let Some(w) = wake.as_mut() {
            w.listen(&mut db);
        }
        let polled = db.prepared(sql::INSTANCE_POLL, |c, s| {
            c.query_one(s, &[&instance, &run, &start])
        });
        match polled {
            Ok(row) => match Poll::of(row.get("outcome")) {
                Poll::Next => {
                    println!(
                        "{}",
                        next_line(
                            row.get("run"),
                            row.get("start"),
                            row.get::<_, &str>("address"),
                            row.get("fresh_code")
                        )
                    );
                    return Ok(());
                }
                Poll::Ended => {
                    log::info!("instance {instance}: its row ended with no other: shut down");
                    return Err(Failure::quiet(1));
                }
                Poll::Wait => {
                    if by_wake && let Some(w) = wake.as_mut() {
                        w.looked(&mut db, false);
                    }
                }
            },
            Err(e) if revoked(&e) => {
                log::info!("instance {instance}: its credentials were revoked: shut down");
                return Err(Failure::quiet(1));
            }
            Err(e) => say(&mut said, &e),
        }
        if Instant::now() >= deadline {
            log::info!(
                "instance {instance}: no run handed to it within {seconds}s and {grace}s more"
            );
            return Err(Failure::quiet(1));
        }
        by_wake = match wake.as_mut() {
            Some(w) => hear_or_pause(&mut db, w, deadline),
            None => {
                pause(Some(deadline));
                false
            }
        };
    }
}

/// How many wake-ups that found nothing `pool-next` allows per
/// [`NEXT_FRUITLESS_PERIOD`] before it only polls for a while (its channel
/// is its own instance's: only its own login could flood it).
const NEXT_FRUITLESS_ALLOWED: usize = 1;

/// See [`NEXT_FRUITLESS_ALLOWED`].
const NEXT_FRUITLESS_PERIOD: Duration = Duration::from_secs(2);

/// The instance's wake channel (`orca.instance_wake`, migration 27);
/// `None` (it polls) when the database can't say.
fn instance_channel(db: &mut Db, instance: &str) -> Option<Wake> {
    match db.run(|c| c.query_one(sql::INSTANCE_WAKE, &[&instance])) {
        Ok(row) => row
            .get::<_, Option<String>>("channel")
            .and_then(|c| Wake::new(c, Gate::new(NEXT_FRUITLESS_PERIOD, NEXT_FRUITLESS_ALLOWED))),
        Err(e) => {
            log::warn!("instance {instance}: can't learn its wake channel ({e}): polling only");
            None
        }
    }
}

/// Waits a second (less when `deadline` is nearer) for a wake-up on `w`,
/// as [`pause`] does when it doesn't listen: whether one came (poll now).
fn hear_or_pause(db: &mut Db, w: &mut Wake, deadline: Instant) -> bool {
    let until = (Instant::now() + Duration::from_secs(1)).min(deadline);
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        match w.hear(db, left) {
            Some(Heard::Now | Heard::After(_)) => return true,
            Some(Heard::Nothing) => {}
            None => {
                std::thread::sleep(left.max(Duration::from_millis(10)));
                return false;
            }
        }
    }
}

/// What an EC2 run's instances know of their cluster: the head's own
/// address, and its workers' in the order they were given to the run.
#[derive(Debug, Clone, PartialEq)]
struct Cluster {
    head: String,
    workers: Vec<String>,
}

impl Cluster {
    /// The variables every command of an instance serving the run gets
    /// (update, services and the driver alike), besides the run's own:
    /// `ORCA_INSTANCE`, `ORCA_HEAD_ADDRESS`, `ORCA_WORKER_ADDRESSES`
    /// (comma-separated; empty with no workers). Addresses, not secrets.
    fn env(&self, instance: &str) -> Vec<(String, String)> {
        vec![
            ("ORCA_INSTANCE".into(), instance.to_string()),
            ("ORCA_HEAD_ADDRESS".into(), self.head.clone()),
            ("ORCA_WORKER_ADDRESSES".into(), self.workers.join(",")),
        ]
    }
}

/// Waits until run `(run, start)` has its `workers` workers (a tick makes
/// only so many instances: the rest come on the next ticks; a head is
/// always made first), or is over (what it has then: its services stop at
/// once, as they would have), and returns their addresses. `None` once
/// `instance` serves the run no longer (its row ended, its credentials
/// revoked).
fn cluster(
    db: &mut Db,
    said: &mut String,
    instance: &str,
    run: i64,
    start: i32,
    workers: i32,
) -> Option<Cluster> {
    let want = usize::try_from(workers).unwrap_or(0);
    let mut told = false;
    loop {
        match db.prepared(sql::INSTANCE_CLUSTER, |c, s| {
            c.query_opt(s, &[&instance, &run, &start])
        }) {
            Ok(None) => {
                log::info!("instance {instance}: it serves run {run} at start {start} no longer");
                return None;
            }
            Ok(Some(row)) => {
                let given: Vec<String> = row.get("workers");
                if given.len() >= want || row.get::<_, bool>("over") {
                    return Some(Cluster {
                        head: row.get("head"),
                        workers: given,
                    });
                }
                if !told {
                    log::info!(
                        "run {run}: waiting for its instances ({} of {want} workers so far)",
                        given.len()
                    );
                    told = true;
                }
            }
            Err(e) if revoked(&e) => return None,
            Err(e) => say(said, &e),
        }
        pause(None);
    }
}

/// The environment an instance's services and update get: the pipeline's
/// own, the run's, and its cluster's (see [`Cluster::env`]), as the
/// driver gets them.
fn service_env(
    p: &Pipeline,
    instance: &str,
    run: i64,
    start: i32,
    cluster: &Cluster,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> =
        p.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    env.push(("ORCA_RUN_ID".into(), run.to_string()));
    env.push(("ORCA_RUN_START".into(), start.to_string()));
    env.push(("ORCA_PIPELINE".into(), p.name.clone()));
    env.extend(cluster.env(instance));
    env
}

/// Runs `cmd` to its end (an instance's `update`); false if it failed.
fn run_to_end(cmd: &Command, env: &[(String, String)]) -> bool {
    match Child::spawn(&cmd.argv(&[]), env) {
        Ok(mut c) => loop {
            if let Some(exit) = c.try_exit() {
                if !exit.success() {
                    log::error!("update: {exit}");
                }
                return exit.success();
            }
            std::thread::sleep(Duration::from_millis(100));
        },
        Err(e) => {
            log::error!("update: can't start: {e}");
            false
        }
    }
}

/// `orca ec2-serve <instance> <run> <start>`: what an EC2 run's instance
/// does for the run. First it waits until the run has all its instances
/// (each command gets their addresses: [`Cluster::env`]); then, when the
/// run may take new code, the pipeline's `update`. The head runs `head_service` beside the pipeline's command
/// (the driver), which it supervises as the scheduler does (timeout, cancel,
/// output, heartbeat, outcome), and stops the service when the driver has
/// ended. A worker runs `worker_service` until the run is over (as
/// `pool-wait` tells it) and stops it. Exit 0 once served; 1 when the
/// instance serves no such run.
pub fn ec2_serve(instance: &str, run: i64, start: i32) -> Outcome {
    let timing = Timing::from_env().map_err(bad)?;
    let target = crate::machines::boot::own_target("ec2-serve").map_err(bad)?;
    let mut db = Db::new(target, "ec2-serve");
    let mut said = String::new();
    let row = loop {
        match db.run(|c| c.query_opt(sql::INSTANCE_SERVE, &[&instance, &run, &start])) {
            Ok(Some(row)) => break row,
            Ok(None) => {
                return Err(no(format!(
                    "instance {instance} serves no run {run} at start {start}"
                )));
            }
            Err(e) => say(&mut said, &e),
        }
        pause(None);
    };
    let role: String = row.get("role");
    let fresh: bool = row.get("fresh_code");
    let args: Vec<String> = row.get("args");
    let p: Pipeline = match serde_json::from_value(row.get("spec")) {
        Ok(p) => p,
        Err(e) => {
            return Err(no(format!(
                "run {run}'s pipeline is stored in a form this binary can't read ({:?} error)",
                e.classify()
            )));
        }
    };
    let Some(ec2) = p.ec2.clone() else {
        return Err(no(format!("pipeline {} has no [ec2] table", p.name)));
    };
    // Every command gets the whole cluster's addresses: wait until the run
    // has all its instances (rows are written as they are made, before they
    // boot: a tick or a few).
    let Some(cluster) = cluster(&mut db, &mut said, instance, run, start, ec2.workers) else {
        return Err(Failure::quiet(1));
    };
    let env = service_env(&p, instance, run, start, &cluster);
    if fresh && let Some(update) = &ec2.update {
        log::info!("run {run} may take new code: running the update");
        run_to_end(update, &env);
    }
    let service_of = |cmd: &Option<Command>| {
        cmd.as_ref()
            .and_then(|c| match Child::spawn(&c.argv(&[]), &env) {
                Ok(child) => Some(child),
                Err(e) => {
                    log::error!("service: can't start: {e}");
                    None
                }
            })
    };
    if Role::of(&role) == Some(Role::Worker) {
        let service = service_of(&ec2.worker_service);
        loop {
            match db.prepared(sql::INSTANCE_RUN_OVER, |c, s| {
                c.query_one(s, &[&instance, &run, &start])
            }) {
                Ok(row) if row.get::<_, bool>("over") => break,
                Ok(_) => {}
                Err(e) if revoked(&e) => break,
                Err(e) => say(&mut said, &e),
            }
            pause(None);
        }
        if let Some(s) = service {
            s.kill_and_wait();
        }
        return Ok(());
    }
    let service = service_of(&ec2.head_service);
    // Its one connection, which the heartbeat thread shares from here on.
    let mut sup = Supervisor::new(
        Link::new(db),
        format!("the head on instance {instance}"),
        timing.kill_grace,
        &supervise::HEAD,
    );
    sup.launch(run, start, &Arc::new(p), &args, &cluster.env(instance));
    let tick = Duration::from_secs_f64(timing.tick);
    while !sup.idle() {
        sup.reap();
        sup.enforce();
        sup.flush();
        sup.publish();
        std::thread::sleep(tick);
    }
    if let Some(s) = service {
        s.kill_and_wait();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poll_outcome_this_binary_does_not_know_is_waited_on() {
        assert_eq!(Poll::of("next"), Poll::Next);
        assert_eq!(Poll::of("ended"), Poll::Ended);
        assert_eq!(Poll::of("wait"), Poll::Wait);
        assert_eq!(Poll::of("later"), Poll::Wait);
    }

    #[test]
    fn the_next_line_says_whether_new_code_may_be_taken() {
        assert_eq!(next_line(42, 1, "10.0.0.5", true), "next 42 1 10.0.0.5 1");
        assert_eq!(next_line(42, 2, "-", false), "next 42 2 - 0");
    }

    #[test]
    fn every_command_gets_the_cluster_s_addresses() {
        let two = Cluster {
            head: "10.0.0.5".into(),
            workers: vec!["10.0.0.7".into(), "10.0.0.6".into()],
        };
        assert_eq!(
            two.env("orca-i-3"),
            [
                ("ORCA_INSTANCE".to_string(), "orca-i-3".to_string()),
                ("ORCA_HEAD_ADDRESS".to_string(), "10.0.0.5".to_string()),
                (
                    "ORCA_WORKER_ADDRESSES".to_string(),
                    "10.0.0.7,10.0.0.6".to_string()
                ),
            ]
        );
        let none = Cluster {
            head: "10.0.0.5".into(),
            workers: Vec::new(),
        };
        assert_eq!(none.env("i")[2].1, "");
    }
}
