//! The fleet churn (issue 13, part 2): pools on the local provider and on
//! the fake EC2 (`ec2fleet.rs`, with random faults of its own:
//! `fake_aws::RandomFaults`) whose demand rises and falls, pool by pool, so
//! that machines are made and removed by the hundred, while schedulers are
//! killed and deployed and machines are killed or never boot. Then the
//! figures, from outside views where they exist (the fake EC2's instances,
//! `/proc`, `pg_roles`) against orca's rows:
//!
//! - `unheld`: machines alive that no live row holds, after a stray pass;
//! - `doubles`: machines made twice for one attempt (one client token, two
//!   instances; two rows on one provider id);
//! - `idle_excess_machine_seconds`: idle past `idle_seconds` and one pass,
//!   summed over machines removed for idleness (reported; goal 0);
//! - `roles_left`: login roles of ended machines left once the fleet wound
//!   down;
//! - `runs_lost`: runs on a removed machine neither ended nor queued again.
//!
//! Each figure but the idle one is a violation when not 0; the chaos
//! checker judges the runs as it does for `make chaos`. `ORCA_CHAOS_CHURN`
//! is how many machines to make (a short form by default); `make bench`
//! prints the figures (`churn figure: name: value` lines).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::faults::{Fault, Target};
use crate::harness::*;
use crate::observe::uptime;
use crate::rng::Rng;
use crate::workload::{self, Workload};
use crate::world::World;

mod figures;
mod waves;

use figures::*;
use waves::*;

/// Machines the short form (`make test`) makes.
const SHORT_MACHINES: u64 = 60;
/// Pools on the local provider, and on the fake EC2.
const LOCAL_POOLS: usize = 4;
const EC2_POOLS: usize = 4;
/// Each pool's `max_machines` (so at most 8 × 5 machines at once).
const MAX_MACHINES: u64 = 5;
/// Each pool's `idle_seconds`.
const IDLE_SECONDS: f64 = 2.0;
/// The schedulers' `ORCA_POOL_SCALE_SECONDS` (world.rs).
const PASS_SECONDS: f64 = 0.5;

/// The churn's pools and their pipelines (`cl0`, ... on the local
/// provider; `ce0`, ... on the fake EC2, two locations, the first short of
/// capacity at random).
pub struct Churn;

impl Churn {
    fn pools() -> Vec<(String, bool)> {
        (0..LOCAL_POOLS)
            .map(|i| (format!("cl{i}"), false))
            .chain((0..EC2_POOLS).map(|i| (format!("ce{i}"), true)))
            .collect()
    }
}

impl Workload for Churn {
    fn toml(&self, cmd: &str, env: &str) -> String {
        let mut out = String::new();
        for (p, ec2) in Churn::pools() {
            let provider = if ec2 {
                "provider = \"ec2\"\nami = \"ami-0123456789abcdef0\"\nregion = \"eu-west-1\"\ntypes = [{ type = \"m7i.large\", wait = 0 }, { type = \"m6i.large\", wait = 0 }]\nlocations = [\"subnet-a\", \"subnet-b\"]"
            } else {
                "provider = \"local\"\ntypes = [{ type = \"small\", wait = 0 }]\nlocations = [\"here\"]"
            };
            out.push_str(&format!(
                r#"
[pools.{p}]
{provider}
max_machines = {MAX_MACHINES}
idle_seconds = {IDLE_SECONDS}
slots = 1

[pipelines.{p}_run]
command = "{cmd} 3"
placement = "worker:{p}"
max_runs = 20
retries = 1
retry_delay = 0.5
timeout = 3
env = {env}
"#
            ));
        }
        out
    }

    fn queued(&self) -> Vec<workload::Queued> {
        Vec::new()
    }
}

/// The figures of a churn, each with its goal.
pub struct Figures {
    /// `name: value` lines, in order.
    pub lines: Vec<(String, String)>,
    /// Violations (non-zero figures but the idle one, and what the checker
    /// found).
    pub violations: Vec<String>,
}

/// How many machines a churn makes (`ORCA_CHAOS_CHURN`).
pub fn target() -> u64 {
    std::env::var("ORCA_CHAOS_CHURN")
        .ok()
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("ORCA_CHAOS_CHURN: a number of machines"))
        .unwrap_or(SHORT_MACHINES)
}

#[test]
fn churn() {
    let _alone = crate::ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let (seed, _) = crate::settings();
    let target = target();
    println!("churn: seed {seed}, {target} machines");
    let f = run(seed, target);
    for (k, v) in &f.lines {
        println!("churn figure: {k}: {v}");
    }
    for v in &f.violations {
        println!("violation: {v}");
    }
    assert!(
        f.violations.is_empty(),
        "churn: seed {seed}: {} violations:\n{}",
        f.violations.len(),
        f.violations.join("\n")
    );
}

fn connect_quick(url: &str) -> Option<postgres::Client> {
    let mut cfg: postgres::Config = url.parse().ok()?;
    cfg.connect_timeout(Duration::from_secs(2));
    cfg.connect(postgres::NoTls).ok()
}

/// The fake EC2's random faults while the churn runs (none once it stops).
fn ec2_faults(w: &World, seed: u64, on: bool) {
    let mut st = w.ec2.fake.state.lock().unwrap();
    let r = &mut st.random;
    // What was done is kept (counts, when calls hung).
    *r = crate::fake_aws::RandomFaults {
        lost: r.lost,
        failed: r.failed,
        hung: r.hung,
        slowed: r.slowed,
        throttled: r.throttled,
        refused: r.refused,
        hung_at: std::mem::take(&mut r.hung_at),
        ..Default::default()
    };
    r.seed = seed;
    if on {
        r.lose_run_answer = 0.15;
        r.terminate_fail = 0.15;
        r.terminate_hang = 0.05;
        r.hang_ms = 12_000;
        r.slow = 0.05;
        r.slow_ms = 1_500;
        r.throttle = 0.03;
        r.no_capacity = vec![("subnet-a".into(), 0.3)];
    }
}

/// One churn of `target` machines for `seed`: its figures.
pub fn run(seed: u64, target: u64) -> Figures {
    let token = format!("churn-{seed}-{}", std::process::id());
    let mut w = World::new(&token);
    let (cmd, env) = w.ledger_command(&token, seed);
    let ledger = w.path("ledger");
    w.db.register(&w.dir, &Churn.toml(&cmd, &env));
    let root = Rng::new(seed);
    let mut frng = root.fork(11);
    ec2_faults(&w, root.fork(12).next(), true);
    w.spawn("the first");
    wait_until("the stack's id", 60.0, || w.stack().is_some());
    let stack = w.stack().unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let dem = Arc::new(Mutex::new(Demand::default()));
    let queuer = demand(w.db.url.clone(), root.fork(13), stop.clone(), dem.clone());
    let began = Instant::now();
    w.t0 = uptime();
    let mut next_fault = uptime() + frng.range(10.0, 25.0);
    let mut next_count = Instant::now();
    let mut made: i64 = 0;
    let mut peak = 0usize;
    loop {
        let now = uptime();
        w.due(now);
        w.watchdog();
        if now >= next_fault {
            let f = match frng.below(6) {
                0 | 1 => Fault::KillLeader {
                    restart_after: frng.range(0.3, 3.0),
                },
                2 => Fault::Deploy,
                3 => Fault::NeverBoot {
                    whose: if frng.chance(0.5) { 0 } else { 2 },
                },
                _ => Fault::KillMachine { pick: frng.next() },
            };
            w.inflict(f);
            next_fault = now + frng.range(10.0, 25.0);
        }
        if next_count.elapsed() > Duration::from_secs(2) {
            next_count = Instant::now();
            if let Some(mut c) = connect_quick(&w.db.url)
                && let Ok(r) = c.query_one("SELECT count(*) FROM orca.pool_machines", &[])
            {
                made = r.get(0);
            }
            peak = peak.max(local_machines(&stack).len() + w.ec2.live().len());
            if made as u64 >= target {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let churn_secs = began.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    queuer.join().unwrap();
    w.heal_all();
    ec2_faults(&w, 0, false);
    w.say(format!(
        "{made} machines made in {churn_secs:.0}s; faults stop; the system settles"
    ));
    let mut violations: Vec<String> = Vec::new();
    crate::settle_runs(&mut w, &mut violations);
    let settle_secs = began.elapsed().as_secs_f64() - churn_secs;

    // Alive with no live row, now and again after a stray pass.
    let unheld_now = unheld(&w, &stack);
    let waited = Instant::now();
    while waited.elapsed() < Duration::from_secs_f64(PASS_SECONDS * 4.0 + 3.0) {
        w.due(uptime());
        w.watchdog();
        std::thread::sleep(Duration::from_millis(100));
    }
    let unheld_after: BTreeSet<String> = unheld(&w, &stack)
        .intersection(&unheld_now)
        .cloned()
        .collect();
    for u in &unheld_after {
        violations.push(format!(
            "unheld: machine {u} is alive, and no live row held it before or after a stray pass"
        ));
    }
    let mut c = w.db.client();
    let lost: Vec<(i64, String)> = c
        .query(
            "SELECT r.id, r.state FROM orca.runs r JOIN orca.pool_machines m ON m.id = r.machine
             WHERE m.ended_at IS NOT NULL AND r.state IN ('queued', 'running')",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    for (id, state) in &lost {
        violations.push(format!(
            "lost: run {id} is {state} on a removed machine after the system settled"
        ));
    }
    let requeued: i64 = c
        .query_one(
            "SELECT count(*) FROM orca.events WHERE kind = 'requeued' AND why LIKE 'its machine % was removed%'",
            &[],
        )
        .unwrap()
        .get(0);
    // Idle past idle_seconds and a pass, by machine, by the database's
    // clock. Idle from its busy_at (its last claim, or beat while it ran
    // something) or the end of the last run it ran, whichever is later: a
    // worker beats once a second while it runs, so busy_at is up to a beat
    // (more on a loaded box) before the run's end, and a machine is not
    // idle while it runs (orca removes none that runs).
    let late: Vec<Late> = c
        .query(
            "SELECT CASE WHEN m.pool LIKE 'ce%' THEN 'ec2' ELSE 'local' END,
                    extract(epoch FROM greatest(m.busy_at, e.ended))::float8 + $1 + $2,
                    extract(epoch FROM coalesce(m.ending, m.ended_at))::float8, m.name
             FROM orca.pool_machines m
             LEFT JOIN LATERAL (SELECT max(r.ended_at) AS ended FROM orca.runs r
                                WHERE r.machine = m.id) e ON true
             WHERE m.why LIKE 'idle for %'
               AND extract(epoch FROM coalesce(m.ending, m.ended_at)
                                      - greatest(m.busy_at, e.ended))::float8 > $1 + $2",
            &[&IDLE_SECONDS, &PASS_SECONDS],
        )
        .unwrap()
        .iter()
        .map(|r| Late {
            provider: r.get(0),
            from: r.get(1),
            to: r.get(2),
            name: r.get(3),
        })
        .collect();
    // No leader, no removal begins: the windows with no scheduler leading
    // are the fault's (bounded by the takeover: `make bench`'s overlap
    // gaps), not lateness. One opens when the leader is killed (the
    // harness's record) or drains (its event), and closes when the next one
    // takes the lead (its event), with a pass more for its first round. A
    // scheduler whose lead was taken over before it drained or was killed
    // opens none. Schedulers are told apart by pid, which the events name;
    // the database and the harness share this host's clock.
    let offset = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        - uptime();
    let mut events = |kind: &str| -> Vec<(f64, i32)> {
        c.query(
            "SELECT extract(epoch FROM at)::float8, why FROM orca.events WHERE kind = $1",
            &[&kind],
        )
        .unwrap()
        .iter()
        .filter_map(|r| Some((r.get::<_, f64>(0), pid_named(r.get(1))?)))
        .collect()
    };
    // A machine stopped at birth ("never boots") that the kernel continued
    // when the scheduler that made it died (its group orphaned) booted
    // then: it was not up, so not idle, before. Its idle window opens at
    // the last scan that found it stopped.
    let stopped = w.observer.stopped();
    let late: Vec<Late> = late
        .into_iter()
        .map(|mut l| {
            if let Some(r) = stopped
                .iter()
                .filter(|s| s.name == l.name)
                .find_map(|s| s.resumed)
            {
                l.from = l.from.max(r + offset + IDLE_SECONDS + PASS_SECONDS);
            }
            l
        })
        .filter(|l| l.to > l.from)
        .collect();
    let leads = events("lead taken");
    let mut ends = events("draining");
    ends.extend(w.records.iter().filter_map(|r| match r.target {
        Target::Scheduler(pid) if r.what.starts_with("kill -9 leader") => {
            Some((r.start + offset, pid))
        }
        _ => None,
    }));
    let leaderless = leaderless_windows(&ends, &leads, PASS_SECONDS);
    let (hung_at, hang_s) = {
        let st = w.ec2.fake.state.lock().unwrap();
        (st.random.hung_at.clone(), 10.0)
    };
    // While its pool has demand (runs waiting beyond the room its workers
    // have), an idle machine is kept (the seed's rule): its lateness then
    // is the claims', not the removal's. The demand by the database's
    // record, a sample each DEMAND_STEP of each late window.
    let samples: Vec<(String, f64)> = late
        .iter()
        .flat_map(|l| steps(l.from, l.to).map(|t| (pool_of(&l.name), t)))
        .collect();
    let demand = demand_at(&mut c, &samples);
    // Each late removal's seconds with a leader: without demand (its
    // lateness) and with.
    let led: Vec<(&Late, f64, f64)> = late
        .iter()
        .map(|l| {
            let (mut without, mut with) = (0.0, 0.0);
            for t in steps(l.from, l.to).filter(|&t| !in_windows(t, &leaderless)) {
                if demand.contains(&(pool_of(&l.name), t.to_bits())) {
                    with += DEMAND_STEP;
                } else {
                    without += DEMAND_STEP;
                }
            }
            (l, without, with)
        })
        .collect();
    let unexcused: Vec<(&Late, f64)> = led
        .iter()
        .map(|&(l, u, _)| (l, u))
        .filter(|(_, u)| *u > 1e-6)
        .collect();
    let idle_demand: f64 = led.iter().map(|(_, _, d)| d).sum::<f64>() + 0.0;
    let sum = |f: &dyn Fn(&Late) -> bool| -> f64 {
        // (+ 0.0: an empty sum is -0.0.)
        unexcused
            .iter()
            .filter(|(l, _)| f(l))
            .map(|(_, u)| u)
            .sum::<f64>()
            + 0.0
    };
    let idle = (
        sum(&|_| true),
        unexcused.len(),
        unexcused.iter().map(|(_, u)| *u).fold(0.0, f64::max),
    );
    let idle_local = sum(&|l| l.provider == "local");
    let idle_leaderless: f64 = late
        .iter()
        .map(|l| overlap((l.from, l.to), &leaderless))
        .sum::<f64>()
        + 0.0;
    // A late removal with a hung call (up to the client's 10 s timeout)
    // within its late window.
    let idle_hung = sum(&|l| hung_at.iter().any(|h| *h < l.to && h + hang_s > l.from));
    let idle_examples: Vec<String> = unexcused
        .iter()
        .take(5)
        .map(|(l, u)| format!("{} {u:.1}s", l.name))
        .collect();
    // The evidence of each late removal with a leader: what the database
    // and the schedulers' logs say of its machine and of the leads about
    // then (seconds since the churn began).
    let rel = |t: f64| t - offset - w.t0;
    let logs: Vec<(u32, String)> = if unexcused.is_empty() {
        Vec::new()
    } else {
        w.scheds.iter().map(|s| (s.n, s.proc.output())).collect()
    };
    for (l, u) in &unexcused {
        println!(
            "churn late: {} ({}): due at {:.2}s, begun at {:.2}s: {u:.1}s late with a leader",
            l.name,
            l.provider,
            rel(l.from - PASS_SECONDS),
            rel(l.to)
        );
        for st in stopped.iter().filter(|st| st.name == l.name) {
            println!(
                "churn late:   stopped at birth at {:.2}s, continued {}",
                st.at - w.t0,
                st.resumed
                    .map_or("never".into(), |r| format!("after {:.2}s", r - w.t0))
            );
        }
        for r in c
            .query(
                "SELECT extract(epoch FROM at)::float8, kind, why FROM orca.events
                 WHERE (why LIKE '%' || $1 || '%' OR kind IN ('lead taken', 'draining'))
                   AND at BETWEEN to_timestamp($2) - interval '10 seconds' AND to_timestamp($3) + interval '2 seconds'
                 ORDER BY id",
                &[&l.name, &l.from, &l.to],
            )
            .unwrap()
        {
            let (at, kind, why): (f64, String, String) = (r.get(0), r.get(1), r.get(2));
            if kind == "lead taken" || kind == "draining" || names(&why, &l.name) {
                println!("churn late:   event at {:.2}s: {kind}: {why}", rel(at));
            }
        }
        // The lines that name it, and the removals thread's looks (logged
        // at debug: world.rs asks for them) from a second before it came
        // due to its removal.
        let second = |t: f64| {
            chrono::DateTime::from_timestamp(t.floor() as i64, 0)
                .map(|d| d.format("%Y-%m-%dT%H:%M:%S").to_string())
                .unwrap_or_default()
        };
        let (first, last) = (second(l.from - PASS_SECONDS - 1.0), second(l.to + 1.0));
        for (n, log) in &logs {
            for line in log.lines().filter(|x| {
                names(x, &l.name)
                    || (x.contains("removals:")
                        && x.get(1..20)
                            .is_some_and(|t| t >= first.as_str() && t <= last.as_str()))
            }) {
                println!("churn late:   scheduler {n}: {line}");
            }
        }
    }
    let idle_removed: i64 = c
        .query_one(
            "SELECT count(*) FROM orca.pool_machines WHERE why LIKE 'idle for %'",
            &[],
        )
        .unwrap()
        .get(0);
    let row_doubles: i64 = c
        .query_one(
            // Lifetimes that overlap: a local machine's id is its pid, which
            // a later machine may reuse.
            "SELECT count(*) FROM orca.pool_machines a JOIN orca.pool_machines b
               ON a.provider_id = b.provider_id AND a.id < b.id
              AND b.made_at < coalesce(a.ended_at, 'infinity')",
            &[],
        )
        .unwrap()
        .get(0);
    drop(c);
    let (token_doubles, instances, named_twice, ec2_counts) = {
        let st = w.ec2.fake.state.lock().unwrap();
        let mut by_token: HashMap<&str, u64> = HashMap::new();
        let mut by_name: HashMap<&str, u64> = HashMap::new();
        for i in &st.instances {
            if !i.client_token.is_empty() {
                *by_token.entry(&i.client_token).or_default() += 1;
            }
            *by_name.entry(i.tag("Name").unwrap_or("")).or_default() += 1;
        }
        let r = &st.random;
        (
            by_token.values().map(|n| n - 1).sum::<u64>(),
            st.instances.len(),
            by_name.values().filter(|n| **n > 1).count(),
            format!(
                "{} answers lost, {} terminates failed, {} hung, {} slow, {} throttled, {} capacity refusals",
                r.lost, r.failed, r.hung, r.slowed, r.throttled, r.refused
            ),
        )
    };
    let doubles = token_doubles + row_doubles as u64;
    if doubles > 0 {
        violations.push(format!(
            "doubles: {token_doubles} instances made again under a client token already used, {row_doubles} rows on a provider id a live row has"
        ));
    }

    // The wind-down (every machine removed, every role dropped), then the
    // roles of ended machines left.
    crate::wind_down(&mut w, &mut violations);
    let mut c = w.db.client();
    let roles_left: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_roles r WHERE starts_with(r.rolname, $1)
               AND NOT EXISTS (SELECT 1 FROM orca.pool_machines m WHERE m.role = r.rolname AND m.ended_at IS NULL)",
            &[&format!("orca_m_{stack}_")],
        )
        .unwrap()
        .get(0);
    if roles_left > 0 {
        violations.push(format!(
            "roles: {roles_left} login roles of ended machines are left after the wind-down"
        ));
    }
    let by_pool: BTreeMap<String, i64> = c
        .query(
            "SELECT provider, count(*) FROM (SELECT CASE WHEN pool LIKE 'ce%' THEN 'ec2' ELSE 'local' END AS provider
             FROM orca.pool_machines) p GROUP BY provider",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    drop(c);
    w.observer.settle();
    for s in w.scheds.iter_mut().filter(|s| s.exited.is_none()) {
        s.proc.signal(libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(40);
    while !w.alive().is_empty() && Instant::now() < deadline {
        w.reap();
        std::thread::sleep(Duration::from_millis(100));
    }
    w.reap();
    violations.extend(w.problems.clone());
    // The chaos checker on the churn's runs.
    let facts = crate::facts(&w, &ledger, &[], &mut violations);
    let found = crate::check::check_noting(&facts);
    violations.extend(found.violations);
    let d = dem.lock().unwrap();
    for id in &d.ids {
        if !facts.runs.contains_key(id) {
            violations.push(format!(
                "lost: run {id} was queued but orca has no such run"
            ));
        }
    }
    let faults = w.all_records().len();
    let lines: Vec<(String, String)> = vec![
        (
            "machines_made".into(),
            by_pool.values().sum::<i64>().to_string(),
        ),
        ("machines_made_when_demand_stopped".into(), made.to_string()),
        (
            "machines_made_local_ec2".into(),
            format!(
                "{} {}",
                by_pool.get("local").unwrap_or(&0),
                by_pool.get("ec2").unwrap_or(&0)
            ),
        ),
        ("ec2_instances_made".into(), instances.to_string()),
        ("churn_seconds".into(), format!("{churn_secs:.0}")),
        (
            "machines_per_minute".into(),
            format!("{:.0}", made as f64 * 60.0 / churn_secs.max(1.0)),
        ),
        ("settle_seconds".into(), format!("{settle_secs:.0}")),
        ("peak_machines_alive".into(), peak.to_string()),
        (
            "runs_queued".into(),
            format!("{} ({} waves)", d.ids.len(), d.waves),
        ),
        ("faults".into(), faults.to_string()),
        ("ec2_faults".into(), ec2_counts),
        (
            "unheld_after_stray_pass".into(),
            format!("{} (goal 0)", unheld_after.len()),
        ),
        (
            "made_twice_for_one_attempt".into(),
            format!("{doubles} (goal 0)"),
        ),
        (
            "ec2_names_with_two_instances".into(),
            format!("{named_twice} (strays of another attempt, deleted)"),
        ),
        (
            "idle_past_idle_seconds_plus_pass_machine_seconds".into(),
            format!(
                "{:.1} (goal 0; with a leader: {} of {idle_removed} idle removals late, the latest by {:.1}s{})",
                idle.0,
                idle.1,
                idle.2,
                if idle_examples.is_empty() {
                    String::new()
                } else {
                    format!(": {}", idle_examples.join(", "))
                }
            ),
        ),
        (
            "idle_excess_local_machine_seconds".into(),
            format!("{idle_local:.1}"),
        ),
        (
            "idle_excess_with_a_hung_ec2_call_machine_seconds".into(),
            format!("{:.1} ({} hung calls)", idle_hung.abs(), hung_at.len()),
        ),
        (
            "idle_in_leaderless_windows_machine_seconds".into(),
            format!(
                "{idle_leaderless:.1} (not counted above: {} windows with no leader{})",
                leaderless.len(),
                windows_said(&leads, &leaderless)
            ),
        ),
        (
            "idle_while_the_pool_had_demand_machine_seconds".into(),
            format!(
                "{idle_demand:.1} (not counted above: runs of the pool waited beyond its workers' room, so orca kept its idle machines)"
            ),
        ),
        (
            "roles_left_for_ended_machines".into(),
            format!("{roles_left} (goal 0)"),
        ),
        (
            "runs_lost_on_removed_machines".into(),
            format!("{} (goal 0; {requeued} queued again)", lost.len()),
        ),
        ("violations".into(), violations.len().to_string()),
    ];
    if !violations.is_empty() || std::env::var_os("ORCA_CHAOS_KEEP").is_some() {
        let keep = format!(
            "{}/target/chaos/churn-{seed}-{}",
            env!("CARGO_MANIFEST_DIR"),
            std::process::id()
        );
        let _ = std::fs::create_dir_all(&keep);
        let _ = std::process::Command::new("cp")
            .args(["-a", &format!("{}/.", w.dir.0.display()), &keep])
            .status();
        let mut report = w.log.join("\n");
        report.push('\n');
        for v in &violations {
            report.push_str(&format!("violation: {v}\n"));
        }
        let _ = std::fs::write(format!("{keep}/report.txt"), report);
        println!("churn: the run's files are kept in {keep}");
    }
    Figures { lines, violations }
}

#[cfg(test)]
mod tests;
