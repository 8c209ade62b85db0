//! The fleet (issue 14): `ORCA_BENCH_FLEET` (300) real pool machines on the
//! local provider, each a process group running the boot script and its
//! `orca worker` with a login of its own, made by the scheduler as it makes
//! any pool's, in 10 pools, against the bench's one Postgres; busy (each
//! machine running one `sleep`), then idle (their runs cancelled, the
//! machines kept by a long `idle_seconds`).
//!
//! For each, over `ORCA_BENCH_FLEET_SECONDS` (10) with the scheduler
//! stopped (SIGSTOP: what is measured is the fleet alone), per machine:
//! sessions, transactions a second and WAL bytes a second (the database's
//! and the server's counts, `harness::Cost`, divided by the machines), and
//! the CPU share of Postgres (the postmaster and its children) and of the
//! machines' processes, from `/proc`. Then, idle, the same with the
//! scheduler running: the difference is the scheduler's.
//!
//! The machines needed: about 10 MiB of RSS each for the worker and as much
//! for its Postgres backend; `max_connections` at least the machines and
//! 30 (`scripts/test-db.sh` sets 400): a server with fewer gets fewer
//! machines, said so.

use std::time::Instant;

use crate::cpu;
use crate::ctx::{Bench, wait_for};
use crate::harness::{Cost, Figures, local_machines};
use crate::out::{fig, heading, since};

/// Pools the fleet is spread over (each grows one machine at a time).
const POOLS: usize = 10;

/// The private memory (KiB: `Private_Clean` and `Private_Dirty` of
/// `/proc/PID/smaps_rollup`) of the postmaster's children.
fn backends_private_kib(postmaster: i32) -> u64 {
    cpu::reading()
        .iter()
        .filter(|(_, t)| t.ppid == postmaster)
        .filter_map(|(pid, _)| std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok())
        .map(|t| {
            t.lines()
                .filter(|l| l.starts_with("Private_Clean:") || l.starts_with("Private_Dirty:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum()
}

/// One window's figures.
struct Window {
    cost: Figures,
    /// Sessions of the machines' logins (sampled at the end).
    sessions: i64,
    /// CPU share of Postgres and of the machines' processes: of one core.
    pg_cpu: f64,
    fleet_cpu: f64,
}

/// Measures a window of `secs` with `machines` live: the database's cost,
/// the machines' sessions, Postgres's and the machines' CPU.
fn window(
    cost: &mut Cost,
    admin: &mut postgres::Client,
    datname: &str,
    postmaster: i32,
    stack: &str,
    secs: f64,
) -> Window {
    let groups: std::collections::HashSet<i32> = local_machines(stack).into_iter().collect();
    let hz = cpu::hz();
    let pg = |pid: i32, ppid: i32, _| pid == postmaster || ppid == postmaster;
    let fleet = |_, _, pgrp: i32| groups.contains(&pgrp);
    let (c0, t0) = (cpu::reading(), Instant::now());
    let f = cost.measure(secs, None);
    let (c1, took) = (cpu::reading(), t0.elapsed().as_secs_f64());
    let share = |a: u64, b: u64| b.saturating_sub(a) as f64 / hz / took;
    let sessions: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND starts_with(usename::text, $2)",
            &[&datname, &format!("orca_m_{stack}_")],
        )
        .unwrap()
        .get(0);
    Window {
        cost: f,
        sessions,
        pg_cpu: share(cpu::ticks(&c0, pg), cpu::ticks(&c1, pg)),
        fleet_cpu: share(cpu::ticks(&c0, fleet), cpu::ticks(&c1, fleet)),
    }
}

/// Prints `w`'s figures per machine of `n`, under `label`.
fn print(label: &str, w: &Window, n: i64, cores: f64) {
    let per = |v: f64| v / n.max(1) as f64;
    fig(
        &format!("{label}: sessions per machine"),
        format!("{:.2} ({} in all)", per(w.sessions as f64), w.sessions),
    );
    fig(
        &format!("{label}: transactions/s per machine"),
        format!(
            "{:.2} ({:.0}/s in all; goal about 1 busy, fewer idle)",
            per(w.cost.per_second),
            w.cost.per_second
        ),
    );
    fig(
        &format!("{label}: WAL bytes/s per machine"),
        format!(
            "{:.0} ({:.0}/s in all)",
            per(w.cost.wal_per_second),
            w.cost.wal_per_second
        ),
    );
    fig(
        &format!("{label}: Postgres CPU"),
        format!(
            "{:.1}% of one core, {:.1}% of the box's {cores} ({:.3}% of a core per machine)",
            w.pg_cpu * 100.0,
            w.pg_cpu * 100.0 / cores,
            per(w.pg_cpu) * 100.0
        ),
    );
    fig(
        &format!("{label}: the machines' own CPU"),
        format!("{:.1}% of one core", w.fleet_cpu * 100.0),
    );
}

/// Makes the fleet, measures it busy and idle, and prints the figures.
pub fn run(b: &mut Bench) {
    let mut admin = crate::harness::connect(&b.admin);
    let max: i64 = admin
        .query_one("SELECT current_setting('max_connections')::bigint", &[])
        .unwrap()
        .get(0);
    let want = b.knobs.fleet as i64;
    let n = want.min(max - 30).max(POOLS as i64) / POOLS as i64 * POOLS as i64;
    if n < want {
        progress!("fleet: max_connections {max} leaves room for {n} machines, not {want}");
    }
    let each = n / POOLS as i64;
    progress!("fleet: {n} machines in {POOLS} pools of {each}");
    let mut config = String::new();
    for k in 1..=POOLS {
        config += &format!(
            "[pools.f{k}]\ntypes = [{{ type = \"small\", wait = 0 }}]\nlocations = [\"here\"]\n\
             max_machines = {each}\nidle_seconds = 3600\n\n\
             [pipelines.b{k}]\ncommand = [\"sleep\", \"3600\"]\nplacement = \"worker:f{k}\"\nmax_runs = {each}\n\n"
        );
    }
    let db = b.db("orca_bench_fleet", &config);
    let mut c = b.client(&db);
    for k in 1..=POOLS {
        c.execute(
            "INSERT INTO orca.runs (pipeline) SELECT $1 FROM generate_series(1, $2::bigint)",
            &[&format!("b{k}"), &each],
        )
        .unwrap();
    }
    let t0 = Instant::now();
    let mut s = b.scheduler(
        &db,
        "0.2",
        "stats-fleet",
        &[
            ("ORCA_POOL_SCALE_SECONDS", "0.2"),
            ("ORCA_POOL_TRY_SECONDS", "0.2"),
            ("ORCA_POOL_GROW_AFTER", "0"),
            ("ORCA_POOL_BOOT_SECONDS", "300"),
            ("ORCA_POOL_LOST_SECONDS", "300"),
            ("ORCA_STALE_SECONDS", "30"),
        ],
        "sched-fleet.log",
    );
    let count = |c: &mut postgres::Client, q: &str| -> i64 { c.query_one(q, &[]).unwrap().get(0) };
    let busy = wait_for(900.0, 1.0, || {
        count(
            &mut c,
            "SELECT count(*) FROM orca.runs WHERE state = 'running'",
        ) >= n
    });
    let made_in = since(t0);
    let machines = count(
        &mut c,
        "SELECT count(*) FROM orca.pool_machines WHERE ended_at IS NULL AND seen_at IS NOT NULL",
    );
    heading(&format!(
        "fleet: {machines} real pool machines (local provider, {POOLS} pools), one Postgres"
    ));
    fig("machines asked for (ORCA_BENCH_FLEET)", want);
    fig("machines live and seen", machines);
    fig(
        "made and all busy in s",
        if busy {
            made_in
        } else {
            format!("n/a (not all busy: {})", s.tail(5))
        },
    );
    let stack: String = c
        .query_one("SELECT id FROM orca.stack", &[])
        .unwrap()
        .get(0);
    let postmaster = cpu::postmaster(&mut admin);
    let cores = std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64);
    let secs = b.knobs.fleet_s;
    let mut cost = Cost::on(&db.admin_url(), db.name());
    // The fleet alone: the scheduler stopped while it is measured.
    s.signal(libc::SIGSTOP);
    let w = window(&mut cost, &mut admin, db.name(), postmaster, &stack, secs);
    s.signal(libc::SIGCONT);
    print("busy, fleet alone", &w, machines, cores);
    let private = backends_private_kib(postmaster);
    fig(
        "busy: Postgres backends' private memory per machine MiB",
        format!(
            "{:.2} ({:.0} MiB for all the server's backends)",
            private as f64 / 1024.0 / machines.max(1) as f64,
            private as f64 / 1024.0
        ),
    );
    // Idle: every run cancelled (each worker kills its own), the machines
    // kept by their pools' long idle_seconds.
    c.execute(
        "UPDATE orca.runs SET cancel = true WHERE state = 'running'",
        &[],
    )
    .unwrap();
    let idle = wait_for(120.0, 0.5, || {
        count(
            &mut c,
            "SELECT count(*) FROM orca.runs WHERE state IN ('running', 'queued')",
        ) == 0
    });
    if !idle {
        progress!("fleet: runs still not ended 120 s after their cancel");
    }
    s.signal(libc::SIGSTOP);
    let w = window(&mut cost, &mut admin, db.name(), postmaster, &stack, secs);
    s.signal(libc::SIGCONT);
    print("idle, fleet alone", &w, machines, cores);
    let with = window(&mut cost, &mut admin, db.name(), postmaster, &stack, secs);
    fig(
        "idle, with the scheduler: transactions/s in all",
        format!(
            "{:.0} (the scheduler's share: {:.1}/s, at the bench's tick and scaler pass of 0.2 s; \
             tests/it/cost.rs measures it at the defaults)",
            with.cost.per_second,
            with.cost.per_second - w.cost.per_second
        ),
    );
    fig(
        "idle, with the scheduler: Postgres CPU",
        format!("{:.1}% of one core", with.pg_cpu * 100.0),
    );
    fig("max_connections of the server", max);
    let exit = s.terminate(30.0);
    fig("scheduler exit code", exit);
    // The machines go with the database (TestDb's drop kills them).
    drop(db);
}
