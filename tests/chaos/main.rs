//! `make chaos`: random faults against a mixed workload of real orca
//! processes on a real Postgres, judged by a ledger the commands write
//! outside orca (issue 13, part 1).
//!
//! For a seed (printed first; the same seed replays the same schedule of
//! faults and of queued runs, though not the same interleaving of real
//! processes), it runs schedulers (`ORCA_OVERLAP=on`), local pipelines, a
//! worker pool and `ec2` pipelines with a warm pool (local provider), and
//! queues runs throughout while faults strike (`faults.rs`): kill -9 of the
//! leader, SIGSTOP of it past the stale limit, rolling deploys, Postgres
//! restarted, down or unreachable, one process's connections stalled or cut
//! by a proxy of the test's (`proxy.rs`), kill -9 of a worker, a machine or
//! an instance, machines that never boot. Then the faults stop, the
//! system settles, and `check.rs` judges what ran (the ledger, `/proc`)
//! against what orca says (its tables) and what was done (the fault
//! records). Each violation is a line naming the run and the evidence; the
//! last line is `chaos: seed S, N runs, F faults, V violations`.
//!
//! A test target of its own rather than tests in `tests/it`: it runs alone,
//! after the suite, so a minute of faults on a loaded machine neither slows
//! the other tests nor is slowed by them; and `make chaos SEED=… MINUTES=…`
//! runs just it. `make test` runs it with a fixed seed for about a minute
//! (`ORCA_CHAOS_SEED`, `ORCA_CHAOS_SECONDS` override).

#[allow(dead_code, unused_imports)]
#[path = "../it/harness/mod.rs"]
mod harness;

mod check;
mod churn;
mod ec2fleet;
#[allow(dead_code, unused_imports)]
#[path = "../it/fake_aws.rs"]
mod fake_aws;
mod faults;
mod observe;
mod proxy;
mod rng;
mod workload;
mod world;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use harness::*;
use observe::uptime;
use workload::Workload;
use world::World;

/// The seed `make test` runs with: its first 40 s have a fault of most
/// groups (every ec2 pipeline retired; a machine killed; a deploy; Postgres
/// restarted; a machine that never boots; the fleet's connections stalled;
/// the leader stopped while another joins, then killed between an
/// instance's make and its row; an instance killed). A new kind of fault
/// changes every seed's schedule: pick one again.
const FIXED_SEED: u64 = 8543;

/// Seconds of faults `make test` runs.
const SHORT_SECONDS: f64 = 40.0;

fn settings() -> (u64, f64) {
    let seed = match std::env::var("ORCA_CHAOS_SEED")
        .ok()
        .filter(|s| !s.is_empty())
    {
        Some(s) if s == "random" => {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            (t.as_nanos() as u64 ^ std::process::id() as u64) % 1_000_000_007
        }
        Some(s) => s.parse().expect("ORCA_CHAOS_SEED: a number or `random`"),
        None => FIXED_SEED,
    };
    let seconds = match std::env::var("ORCA_CHAOS_SECONDS")
        .ok()
        .filter(|s| !s.is_empty())
    {
        Some(s) => s.parse().expect("ORCA_CHAOS_SECONDS: a number"),
        None => SHORT_SECONDS,
    };
    (seed, seconds)
}

/// The chaos and the churn run one at a time (each is the machine's load).
static ALONE: Mutex<()> = Mutex::new(());

#[test]
fn chaos() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let (seed, seconds) = settings();
    println!("chaos: seed {seed}, {seconds} s of faults");
    let (lines, summary, failed) = run(seed, seconds);
    for l in &lines {
        println!("{l}");
    }
    println!("{summary}");
    assert!(!failed, "{summary}\n{}", lines.join("\n"));
}

/// A run: its violation lines, the summary line, and whether it failed.
fn run(seed: u64, seconds: f64) -> (Vec<String>, String, bool) {
    let token = format!("chaos-{seed}-{}", std::process::id());
    let mut w = World::new(&token);
    let (cmd, env) = w.ledger_command(&token, seed);
    let ledger = w.path("ledger");
    let work: Vec<Box<dyn Workload>> = vec![Box::new(workload::Mixed), Box::new(workload::Ec2Pool)];
    let file = |settled: bool| -> String {
        work.iter()
            .map(|w| {
                if settled {
                    w.settled_toml(&cmd, &env)
                } else {
                    w.toml(&cmd, &env)
                }
            })
            .collect()
    };
    w.db.register(&w.dir, &file(false));
    w.files = (
        file(false),
        work.iter()
            .map(|w| w.without_ec2_toml(&cmd, &env))
            .collect(),
    );
    let root = rng::Rng::new(seed);
    let plan = faults::plan(&mut root.fork(1), seconds);
    w.spawn("the first");
    wait_until("the stack's id", 60.0, || w.stack().is_some());

    let stop = Arc::new(AtomicBool::new(false));
    let queue = Arc::new(Mutex::new(workload::Queue::default()));
    let queuer = workload::queuer(
        w.db.url.clone(),
        root.fork(2),
        work.iter().flat_map(|w| w.queued()).collect(),
        stop.clone(),
        queue.clone(),
    );
    let t0 = uptime();
    w.t0 = t0;
    let mut next = plan.iter().peekable();
    loop {
        let now = uptime();
        w.due(now);
        w.watchdog();
        if let Some(p) = next.peek()
            && now >= t0 + p.at
        {
            w.inflict(p.fault);
            next.next();
            continue;
        }
        if now >= t0 + seconds && next.peek().is_none() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::SeqCst);
    queuer.join().unwrap();
    w.heal_all();
    w.say("faults stop; the system settles".into());
    let mut violations: Vec<String> = Vec::new();
    w.db.register(&w.dir, &file(true));
    settle_runs(&mut w, &mut violations);
    wind_down(&mut w, &mut violations);
    w.observer.settle();
    for s in w.scheds.iter_mut().filter(|s| s.exited.is_none()) {
        s.proc.signal(libc::SIGTERM);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    while !w.alive().is_empty() && std::time::Instant::now() < deadline {
        w.reap();
        std::thread::sleep(Duration::from_millis(100));
    }
    w.reap();
    for s in w.alive() {
        violations.push(format!(
            "stuck: scheduler {} (pid {}) did not exit within 40 s of SIGTERM",
            s.n,
            s.proc.pid()
        ));
    }
    violations.extend(w.problems.clone());

    let cancels = queue.lock().unwrap().cancels.clone();
    let facts = facts(&w, &ledger, &cancels, &mut violations);
    let found = check::check_noting(&facts);
    violations.extend(found.violations);
    let notes = found.excused;
    let q = queue.lock().unwrap();
    for id in &q.ids {
        if !facts.runs.contains_key(id) {
            violations.push(format!(
                "lost: run {id} was queued (`orca run` printed its id) but orca has no such run"
            ));
        }
    }
    let records = w.all_records();
    let summary = format!(
        "chaos: seed {seed}, {} runs, {} faults, {} violations",
        facts.runs.len(),
        records.len(),
        violations.len()
    );
    let mut lines: Vec<String> = notes.iter().map(|n| format!("excused: {n}")).collect();
    lines.extend(found.known.iter().map(|k| format!("known: {k}")));
    if !found.known.is_empty() {
        lines.push(format!(
            "chaos: {} lines of known defects {:?} (tests/chaos/check.rs), not counted",
            found.known.len(),
            check::KNOWN
        ));
    }
    lines.extend(violations.iter().map(|v| format!("violation: {v}")));
    lines.push(format!(
        "chaos: {} queued by the test ({} fills, {} cancels asked, {} refused while the database was away), {} attempts in the ledger",
        q.ids.len(),
        q.fills,
        q.cancels.len(),
        q.refused,
        facts.begins.len()
    ));
    let failed = !violations.is_empty();
    if failed || std::env::var_os("ORCA_CHAOS_KEEP").is_some() {
        let keep = format!(
            "{}/target/chaos/seed-{seed}-{}",
            env!("CARGO_MANIFEST_DIR"),
            std::process::id()
        );
        let _ = std::fs::create_dir_all(&keep);
        let _ = std::process::Command::new("cp")
            .args(["-a", &format!("{}/.", w.dir.0.display()), &keep])
            .status();
        let mut report = w.log.join("\n");
        report.push('\n');
        for r in &records {
            report.push_str(&format!(
                "record: {:.2}..{:.2} {}\n",
                r.start - t0,
                r.end - t0,
                r.what
            ));
        }
        report.push_str(&lines.join("\n"));
        report.push_str(&format!("\n{summary}\n"));
        let _ = std::fs::write(format!("{keep}/report.txt"), report);
        // The tables as the checker read them (times on the ledger's clock).
        let mut tables = String::new();
        for (id, r) in &facts.runs {
            tables.push_str(&format!("run {id} {r:?}\n"));
            for e in facts.events.get(id).into_iter().flatten() {
                tables.push_str(&format!("  {:.2} {} {}\n", e.at, e.kind, e.why));
            }
        }
        let _ = std::fs::write(format!("{keep}/tables.txt"), tables);
        lines.push(format!("chaos: the run's files are kept in {keep}"));
    }
    (lines, summary, failed)
}

/// Waits for every run to end (the queue drains, nothing runs), starting a
/// scheduler if none runs. Runs that don't are the checker's to report.
fn settle_runs(w: &mut World, violations: &mut Vec<String>) {
    let open = |w: &World| -> Option<i64> {
        w.db.client()
            .query_one(
                "SELECT count(*) FROM orca.runs WHERE state IN ('queued', 'running')",
                &[],
            )
            .ok()
            .map(|r| r.get(0))
    };
    let began = std::time::Instant::now();
    let mut last = (i64::MAX, std::time::Instant::now());
    loop {
        w.due(uptime());
        w.watchdog();
        let n = open(w).unwrap_or(i64::MAX);
        if n == 0 {
            break;
        }
        if n < last.0 {
            last = (n, std::time::Instant::now());
        }
        // Up to 10 minutes while runs keep ending; 90 s without progress.
        if last.1.elapsed() > Duration::from_secs(90) || began.elapsed() > Duration::from_secs(600)
        {
            violations.push(format!(
                "settle: {n} runs still queued or running {:.0}s after the faults stopped",
                began.elapsed().as_secs_f64()
            ));
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let took = began.elapsed().as_secs_f64();
    w.say(format!(
        "every run ended {took:.1}s after the faults stopped"
    ));
}

/// Waits for the fleet to wind down: no live machine or instance row, no
/// machine or instance process, no login role of the stack, one scheduler.
/// What is left then is reported: a process group no live row holds, a
/// login whose machine ended.
fn wind_down(w: &mut World, violations: &mut Vec<String>) {
    let stack = w.stack().unwrap_or_default();
    let began = std::time::Instant::now();
    let mut left: Vec<String>;
    loop {
        w.reap();
        w.watchdog();
        left = Vec::new();
        let mut c = w.db.client();
        for r in c
            .query(
                "SELECT name, pool, coalesce(extract(epoch FROM now() - seen_at)::float8, -1), ending IS NOT NULL
                 FROM orca.pool_machines WHERE ended_at IS NULL",
                &[],
            )
            .unwrap()
        {
            left.push(format!(
                "machine {} of pool {} has a live row (seen {:.1}s ago, ending: {})",
                r.get::<_, String>(0),
                r.get::<_, String>(1),
                r.get::<_, f64>(2),
                r.get::<_, bool>(3)
            ));
        }
        for r in c
            .query(
                "SELECT instance, run, state FROM orca.instances WHERE ended_at IS NULL",
                &[],
            )
            .unwrap()
        {
            left.push(format!(
                "instance {} has a live row ({}, run {})",
                r.get::<_, String>(0),
                r.get::<_, String>(2),
                r.get::<_, i64>(1)
            ));
        }
        let live_names: Vec<String> = c
            .query(
                "SELECT name FROM orca.pool_machines WHERE ended_at IS NULL
                 UNION SELECT instance FROM orca.instances WHERE ended_at IS NULL",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        for pid in local_machines(&stack) {
            let name = std::fs::read(format!("/proc/{pid}/environ"))
                .ok()
                .and_then(|env| {
                    env.split(|&b| b == 0).find_map(|kv| {
                        kv.strip_prefix(b"ORCA_LOCAL_MACHINE=")
                            .map(|v| String::from_utf8_lossy(v).into_owned())
                    })
                })
                .unwrap_or_default();
            let held = if live_names.contains(&name) {
                "its row is live"
            } else {
                "no live row holds it"
            };
            left.push(format!(
                "leaked: machine process group {pid} ({name}) is alive: {held}"
            ));
        }
        for r in c
            .query(
                "SELECT rolname FROM pg_roles WHERE starts_with(rolname, $1) OR starts_with(rolname, $2)",
                &[&format!("orca_m_{stack}_"), &format!("orca_i_{stack}_")],
            )
            .unwrap()
        {
            let role: String = r.get(0);
            let live: i64 = c
                .query_one(
                    "SELECT (SELECT count(*) FROM orca.pool_machines WHERE role = $1 AND ended_at IS NULL)
                          + (SELECT count(*) FROM orca.instances WHERE login = $1 AND ended_at IS NULL)",
                    &[&role],
                )
                .unwrap()
                .get(0);
            let why = if live > 0 { "its machine's row is live" } else { "its machine ended" };
            left.push(format!("leaked: login role {role} is left: {why}"));
        }
        for (id, name) in w.ec2.live() {
            let held = if live_names.contains(&name) {
                "its row is live"
            } else {
                "no live row holds it"
            };
            left.push(format!("EC2 instance {id} ({name}) is running: {held}"));
        }
        let alive = w.alive().len();
        if alive != 1 {
            left.push(format!("{alive} schedulers running, not one"));
        }
        if left.is_empty() {
            break;
        }
        if began.elapsed() > Duration::from_secs(90) {
            for l in &left {
                violations.push(format!("wind-down: after 90 s: {l}"));
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let took = began.elapsed().as_secs_f64();
    w.say(format!("the fleet wound down in {took:.1}s"));
}

/// What the checker reads: the ledger, orca's tables (times moved to the
/// ledger's clock), the observer's sightings and the fault records.
fn facts(
    w: &World,
    ledger: &std::path::Path,
    cancels: &[i64],
    violations: &mut Vec<String>,
) -> check::Facts {
    let (begins, ends, bad) = check::parse_ledger(&std::fs::read_to_string(ledger).unwrap());
    violations.extend(bad);
    let epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let offset = epoch - uptime();
    let mut c = w.db.client();
    let mut runs = BTreeMap::new();
    for r in c
        .query(
            "SELECT id, pipeline, state, start, fill, exit_code, exit_signal, why,
                    extract(epoch FROM scheduled_for)::float8
             FROM orca.runs",
            &[],
        )
        .unwrap()
    {
        runs.insert(
            r.get::<_, i64>(0),
            check::Run {
                pipeline: r.get(1),
                state: r.get(2),
                start: r.get(3),
                fill: r.get(4),
                exit_code: r.get(5),
                exit_signal: r.get(6),
                why: r.get(7),
                scheduled_for: r.get(8),
            },
        );
    }
    let mut events: BTreeMap<i64, Vec<check::Event>> = BTreeMap::new();
    for r in c
        .query(
            "SELECT run, kind, extract(epoch FROM at)::float8, coalesce(why, '') FROM orca.events
             WHERE run IS NOT NULL ORDER BY id",
            &[],
        )
        .unwrap()
    {
        events.entry(r.get(0)).or_default().push(check::Event {
            kind: r.get(1),
            at: r.get::<_, f64>(2) - offset,
            why: r.get(3),
        });
    }
    let max_runs = c
        .query("SELECT name, max_runs FROM orca.pipelines", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let timeouts = c
        .query(
            "SELECT name, (spec ->> 'timeout')::float8 FROM orca.pipelines WHERE spec ? 'timeout'
               AND spec ->> 'timeout' IS NOT NULL",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let retries = c
        .query(
            "SELECT name, coalesce((spec ->> 'retries')::int8, 0) FROM orca.pipelines",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    check::Facts {
        timeouts,
        retries,
        cancels: cancels.iter().copied().collect(),
        kill_grace: 2.0,
        begins,
        ends,
        runs,
        events,
        max_runs,
        seen: w.observer.seen(),
        faults: w.all_records(),
        now: uptime(),
        // SAFETY: getpgrp(2) can't fail.
        own_group: unsafe { libc::getpgrp() },
    }
}
