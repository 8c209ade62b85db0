//! Pools:
//! 1. a scaler pass with 100 pools x 20 live machines each (rows only, all
//!    seen, at `max_machines`) and 10,000 queued runs of their pipelines:
//!    the scheduler passes every tick (`ORCA_POOL_SCALE_SECONDS=0`) for
//!    `ORCA_BENCH_POOL_SECONDS`, its removals thread looking every 15 s as a
//!    deploy's does (`ORCA_POOL_REMOVALS_SECONDS=15`: unset, it would look
//!    each 0.1 s beside the passes, which a deploy never does);
//!    `ORCA_TICK_STATS` gives each pass's ms and statements, and each
//!    pass's debug line (`orca::pools::pass`) where its time went, whose
//!    medians are printed beside the p50;
//! 2. claims per second: 8 pgbench clients, each logged in as a pool
//!    machine of its own, each transaction the statement a worker sends
//!    each round (`sql/worker_round.sql`, included here as the worker
//!    embeds it) with the end of the run it claimed last and room for one,
//!    as a worker with one slot does (prepared statements; 8 pipelines,
//!    100,000 queued; `runs claimed and finished` counts what they did);
//!    beside pgbench's own simple-update, 8 clients, prepared statements
//!    too; the two taken in turn in slices, so that the box's drift in
//!    speed falls on both. What was measured is printed with the figures
//!    (the statement, the clients, the protocol, the time, the server's
//!    durability settings and the load), so that a ratio read elsewhere
//!    can be compared with this one;
//! 3. a worker's peak RSS while it runs 200 runs of `["true"]`.

use crate::ctx::{Bench, pause, pgbench, pgbench_cmd, wait_for};
use crate::harness::{Proc, TestDb, peak_rss_kib, text};
use crate::out::{f2, fig, heading, or_na, since};
use std::path::Path;
use std::time::Instant;

const POOLS: i32 = 100;
const MACHINES: i32 = 8;

/// The scaler pass's figures.
struct Scaler {
    stats: crate::out::Stats,
    /// Each part of a pass (its key in the pass's debug line) and its
    /// median over the passes, in milliseconds.
    parts: Vec<(String, f64)>,
    at_max: String,
    made: i64,
    exit: i32,
}

fn scaler(b: &Bench) -> Scaler {
    progress!("pools: {POOLS} pools x 20 machines, 10000 queued runs");
    let mut config = String::new();
    for i in 1..=POOLS {
        config += &format!(
            "[pools.p{i}]\ntypes = [{{ type = \"small\", wait = 0 }}]\nlocations = [\"here\"]\nmax_machines = 20\nidle_seconds = 3600\n\n\
             [pipelines.w{i}]\ncommand = [\"true\"]\nplacement = \"worker:p{i}\"\nmax_runs = 50\n\n"
        );
    }
    let db = b.db("orca_bench_pools", &config);
    let mut c = b.client(&db);
    c.execute(
        "INSERT INTO orca.runs (pipeline, queued_at, not_before)
         SELECT 'w' || (1 + g % $1::int), now() - interval '1 hour', now() - interval '1 hour'
         FROM generate_series(0, 9999) g",
        &[&POOLS],
    )
    .unwrap();
    c.execute(
        "INSERT INTO orca.pool_machines (pool, name, type, location, role, slots, seen_at, busy_at)
         SELECT 'p' || p, 'orca-p' || p || '-' || m, 'small', 'here', 'bench_p' || p || '_' || m, 1,
                now() + interval '1 hour', now() + interval '1 hour'
         FROM generate_series(1, $1::int) p, generate_series(1, 20) m",
        &[&POOLS],
    )
    .unwrap();
    c.batch_execute("ANALYZE").unwrap();
    let mut s = b.scheduler(
        &db,
        "0.1",
        "stats-pools",
        &[
            ("ORCA_POOL_SCALE_SECONDS", "0"),
            ("ORCA_POOL_REMOVALS_SECONDS", REMOVALS_EVERY),
            ("ORCA_POOL_GROW_AFTER", "0"),
            ("RUST_LOG", "info,orca::pools::pass=debug"),
        ],
        "sched-pools.log",
    );
    pause(b.knobs.pool_s as f64);
    // At max_machines: the scaler's own verdict, as its status says it (a
    // figure for people, as bench.sh read it; nothing decides on it).
    let row = c
        .query_one(
            "SELECT count(*) FILTER (WHERE starts_with(p.status, 'at max_machines')), count(*)
             FROM orca.pools p",
            &[],
        )
        .unwrap();
    let at_max = format!("{} of {}", row.get::<_, i64>(0), row.get::<_, i64>(1));
    let made: i64 = c
        .query_one("SELECT count(*) FROM orca.pool_machines", &[])
        .unwrap()
        .get(0);
    let exit = s.terminate(10.0);
    let log = std::fs::read_to_string(b.dir.path("sched-pools.log")).unwrap_or_default();
    Scaler {
        stats: b.stats("stats-pools"),
        parts: pass_parts(&log),
        at_max,
        made,
        exit,
    }
}

/// How often the measuring scheduler's removals thread looks, in seconds:
/// `ORCA_POOL_SCALE_SECONDS`' default, a deploy's.
const REMOVALS_EVERY: &str = "15";

/// The medians of each pass's parts, from the scheduler's `log`: its
/// `scaler pass: key=value ...` debug lines (`orca::pools::pass`), each
/// key ending `_ms` with its median, in the order the line names them.
fn pass_parts(log: &str) -> Vec<(String, f64)> {
    let mut parts: Vec<(String, Vec<f64>)> = Vec::new();
    for line in log.lines() {
        let Some((_, kv)) = line.split_once("scaler pass: ") else {
            continue;
        };
        for (k, v) in kv.split_whitespace().filter_map(|t| t.split_once('=')) {
            let (Some(v), true) = (v.parse::<f64>().ok(), k.ends_with("_ms")) else {
                continue;
            };
            match parts.iter_mut().find(|(n, _)| n == k) {
                Some((_, vs)) => vs.push(v),
                None => parts.push((k.to_string(), vec![v])),
            }
        }
    }
    parts
        .into_iter()
        .filter_map(|(k, mut vs)| {
            vs.sort_by(f64::total_cmp);
            crate::out::quantile(&vs, 0.5).map(|m| (k, m))
        })
        .collect()
}

/// The last `tps = N` figure of a pgbench's output, as it printed it.
fn tps(out: &str) -> Option<String> {
    out.lines()
        .filter_map(|l| l.strip_prefix("tps = "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .next_back()
}

/// The claims database: 8 pipelines on pool `c`, 100,000 queued runs, and
/// 8 machines (rows) with logins of their own, made as orca makes them
/// (dropped with the database). Returns it and the logins (password
/// `bench`).
fn claims_db(b: &Bench) -> (TestDb, Vec<String>) {
    let mut config = String::from(
        "[pools.c]\ntypes = [{ type = \"small\", wait = 0 }]\nlocations = [\"here\"]\n\n",
    );
    for i in 1..=MACHINES {
        config += &format!(
            "[pipelines.c{i}]\ncommand = [\"true\"]\nplacement = \"worker:c\"\nmax_runs = 10000\n\n"
        );
    }
    let db = b.db("orca_bench_claims", &config);
    let mut c = b.client(&db);
    c.execute(
        "INSERT INTO orca.runs (pipeline) SELECT 'c' || (1 + g % $1::int) FROM generate_series(0, 99999) g",
        &[&MACHINES],
    )
    .unwrap();
    c.batch_execute("ANALYZE").unwrap();
    let roles: Vec<String> = (1..=MACHINES)
        .map(|i| db.role_name(&format!("claimer_{i}")))
        .collect();
    for (i, role) in roles.iter().enumerate() {
        db.login_role(role, "bench", "orca_worker");
        c.execute(
            "INSERT INTO orca.pool_machines (pool, name, type, location, role, slots, seen_at)
             VALUES ('c', $1, 'small', 'here', $2, 64, now())",
            &[&format!("orca-c-bench-{}", i + 1), role],
        )
        .unwrap();
    }
    (db, roles)
}

/// How many slices the claims and simple-update measures are cut into,
/// taken in turn (claims, simple-update, claims, ...): this box's speed
/// drifts by a quarter within seconds, and two measures taken one after the
/// other would carry that drift into their ratio.
const SLICES: u64 = 5;

/// The claims of one slice: one pgbench per machine, each logged in as its
/// own role, all at once, for `secs`; the sum of their rates (None if one
/// failed). As a worker with one slot does, each round trip the end of the
/// run it claimed before and the claim of the next, over the extended protocol with prepared statements (`-M prepared`: a
/// worker prepares its statements once a session, `Db::prepared`).
fn claims_slice(
    b: &Bench,
    pgbench: &Path,
    db: &TestDb,
    roles: &[String],
    script: &str,
    secs: u64,
    slice: u64,
) -> Option<f64> {
    let secs = secs.to_string();
    let mut runs: Vec<Proc> = roles
        .iter()
        .enumerate()
        .map(|(i, role)| {
            let mut cmd = pgbench_cmd(pgbench, &db.url_as(role, "bench"));
            cmd.args(["-n", "-M", "prepared", "-c", "1", "-T", &secs]);
            cmd.args(["-D", "id=0", "-D", "start=0", "-f", script]);
            let log = format!("pgbench-claims-{}-{slice}.log", i + 1);
            Proc::spawn(cmd, &b.dir.path(&log))
        })
        .collect();
    let mut sum = Some(0.0);
    for p in &mut runs {
        let ok = p
            .wait_exit(b.knobs.pool_s as f64 + 60.0)
            .is_some_and(|s| s.success());
        match tps(&p.output()).and_then(|t| t.parse::<f64>().ok()) {
            Some(t) if ok => sum = sum.map(|s| s + t),
            _ => {
                sum = None;
                // pgbench's own error (the statement's), not only its
                // closing lines.
                let out = p.output();
                let why: Vec<&str> = out
                    .lines()
                    .filter(|l| l.contains("ERROR"))
                    .take(2)
                    .collect();
                progress!("a claims pgbench failed: {} {}", why.join(" / "), p.tail(2));
            }
        }
    }
    sum
}

/// pgbench's own simple-update, 8 clients, for `secs` against `url`
/// (initialised by [`simple_update_db`]): its rate. Prepared statements, as
/// the claims have them (like for like: the simple protocol would plan
/// each of its statements anew, and make the baseline slower).
fn simple_update_slice(pgbench: &Path, url: &str, secs: u64) -> Option<f64> {
    let run = pgbench_cmd(pgbench, url)
        .args([
            "-n",
            "-M",
            "prepared",
            "-b",
            "simple-update",
            "-c",
            "8",
            "-j",
            "2",
            "-T",
        ])
        .arg(secs.to_string())
        .output()
        .unwrap();
    tps(&text(&run.stdout)).and_then(|t| t.parse().ok())
}

/// A database of its own for simple-update (scale 10), initialised.
fn simple_update_db(b: &Bench, pgbench: &Path) -> Option<TestDb> {
    let mut db = TestDb::named_empty(&b.admin, "orca_bench_pgbench");
    if b.knobs.keep {
        db.keep();
    }
    let init = pgbench_cmd(pgbench, &db.url)
        .args(["-q", "-i", "-s", "10"])
        .output()
        .unwrap();
    if !init.status.success() {
        progress!("pgbench -i failed: {}", text(&init.stderr).trim());
        return None;
    }
    Some(db)
}

/// What the claims and simple-update slices came to (nothing, without
/// pgbench).
#[derive(Default)]
struct Claims {
    /// Claims per second, the mean of the slices (None if one failed).
    claims: Option<f64>,
    /// Simple-update's rate, the mean of its slices (None if one failed).
    updates: Option<f64>,
    /// Each slice's claims over the simple-update slice taken right after
    /// it: the ratio's spread within one run (the box's drift between
    /// slices, against which a change of a few percent can't be seen).
    ratios: Vec<Option<f64>>,
    /// How many runs the claims claimed and finished.
    claimed: Option<i64>,
    /// Seconds each slice of each measure ran.
    slice_s: u64,
    /// The server's settings that weigh on both rates (fsync,
    /// synchronous_commit, full_page_writes), as it said them.
    settings: Option<String>,
    /// The load average (1 min) before the first slice and after the last.
    load: (String, String),
}

/// The statement a worker sends each round (`sql/worker_round.sql`, as
/// `src/db/sql.rs`'s `WORKER_ROUND` embeds it: without its whole-line
/// comments), the very text the worker prepares.
const WORKER_ROUND: &str = include_str!("../sql/worker_round.sql");

/// What each of the round's 17 parameters is in the claims' pgbench script:
/// a worker with one slot, no attempt to beat and no output to append
/// ($1-$7), room for one ($8), the end of the run it claimed last round
/// (`:id`, `:start`: run 0 on the first round, which ends nothing),
/// succeeded with exit code 0, no signal, the why a supervisor gives it
/// (`exit code 0 after ...`: never NULL, as events.why), no output, no alert body,
/// ended a millisecond ago by its clock ($9-$17).
const ROUND_ARGS: [&str; 17] = [
    "'{}'",
    "'{}'",
    "'{}'",
    "'{}'",
    "'{}'",
    "'{}'",
    "'{}'",
    "1",
    "ARRAY[:id]::bigint[]",
    "ARRAY[:start]::integer[]",
    "'{succeeded}'",
    "'{0}'",
    "'{NULL}'",
    "ARRAY['exit code 0 after 0.001 s']",
    "ARRAY[''::bytea]",
    "ARRAY['null'::jsonb]",
    "'{0.001}'",
];

/// The claims' pgbench script: `statement` (a worker's round) without its
/// comment lines, on one line, its `$n` replaced by `args[n - 1]`, wrapped
/// so that it yields one row always (\gset): the run it claimed and that
/// run's start, or 0 and 0. None if `statement` doesn't name exactly
/// `$1`..`$N` for N = `args.len()`.
fn round_script(statement: &str, args: &[&str]) -> Option<String> {
    let mut text = statement
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join(" ");
    // The highest first: `$1` is a prefix of `$17`.
    for n in (1..=args.len()).rev() {
        let p = format!("${n}");
        if !text.contains(&p) {
            return None;
        }
        text = text.replace(&p, args[n - 1]);
    }
    if text.contains('$') {
        return None;
    }
    Some(format!(
        "SELECT coalesce(max(r.id), 0) AS id, coalesce(max(r.start), 0) AS start \
         FROM ({}) r WHERE r.kind = 'claimed' \\gset\n",
        text.trim()
    ))
}

/// Claims per second and simple-update's rate in [`SLICES`] slices of each,
/// taken in turn (`ORCA_BENCH_POOL_SECONDS` of each in all), and how many
/// runs the claims claimed and finished.
fn claims_and_simple_update(b: &Bench, pgbench: &Path, db: &TestDb, roles: &[String]) -> Claims {
    // A worker's round with one slot: the end of the run it claimed last
    // round (none on the first: run 0) and the claim of the next, in the
    // statement the worker sends (sql/worker_round.sql).
    let round = round_script(WORKER_ROUND, &ROUND_ARGS)
        .expect("sql/worker_round.sql names $1..$17: ROUND_ARGS follows it");
    let script = b.dir.write("claim.sql", &round);
    let secs = (b.knobs.pool_s / SLICES).max(1);
    let settings = b
        .client(db)
        .query_one(
            "SELECT current_setting('fsync') || ' / ' || current_setting('synchronous_commit')
                    || ' / ' || current_setting('full_page_writes')",
            &[],
        )
        .ok()
        .map(|r| r.get(0));
    let load_before = load1();
    let simple = simple_update_db(b, pgbench);
    let (mut claims, mut updates, mut ratios) = (Some(0.0), Some(0.0), Vec::new());
    for slice in 1..=SLICES {
        let c = claims_slice(b, pgbench, db, roles, &script, secs, slice);
        claims = claims.zip(c).map(|(a, c)| a + c / SLICES as f64);
        let u = simple
            .as_ref()
            .and_then(|s| simple_update_slice(pgbench, &s.url, secs));
        updates = updates.zip(u).map(|(a, u)| a + u / SLICES as f64);
        ratios.push(c.zip(u).map(|(c, u)| c / u));
    }
    let claimed = b
        .client(db)
        .query_one(
            "SELECT count(*) FROM orca.runs WHERE state = 'succeeded'",
            &[],
        )
        .ok()
        .map(|r| r.get(0));
    Claims {
        claims,
        updates,
        ratios,
        claimed,
        slice_s: secs,
        settings,
        load: (load_before, load1()),
    }
}

/// The 1-minute load average, as /proc/loadavg says it ("?" without it).
fn load1() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// A worker logged in as `role` runs 200 runs of `["true"]` (the queue
/// emptied first): how long it took (s) and its peak RSS (MiB).
fn worker(b: &Bench, db: &TestDb, role: &str) -> (String, Option<f64>) {
    progress!("worker RSS: 200 runs of [\"true\"]");
    let mut c = b.client(db);
    c.batch_execute("UPDATE orca.runs SET state = 'cancelled' WHERE state = 'queued'")
        .unwrap();
    // Its own 200: the claims' pgbench slices leave their last claims
    // running on their machines (each slice's first round ends nothing).
    let before: i64 = c
        .query_one("SELECT coalesce(max(id), 0) FROM orca.runs", &[])
        .unwrap()
        .get(0);
    c.batch_execute("INSERT INTO orca.runs (pipeline) SELECT 'c1' FROM generate_series(1, 200)")
        .unwrap();
    let mut cmd = db.orca_as(role, "bench", &["worker", "--pool", "c"]);
    cmd.env("ORCA_TICK_SECONDS", "0.05");
    let mut w = Proc::spawn(cmd, &b.dir.path("worker.log"));
    let t0 = Instant::now();
    let done = wait_for(120.0, 0.2, || {
        w.child.try_wait().unwrap().is_some()
            || c.query_one(
                "SELECT count(*) FROM orca.runs WHERE id > $1 AND state IN ('queued', 'running')",
                &[&before],
            )
            .is_ok_and(|r| r.get::<_, i64>(0) == 0)
    });
    let took = since(t0);
    if !done {
        progress!("the worker's runs were not done within 120 s");
    }
    let rss = peak_rss_kib(w.pid()).map(|k| k as f64 / 1024.0);
    w.terminate(30.0);
    (took, rss)
}

/// The three parts, then their figures.
pub fn run(b: &mut Bench) {
    let s = scaler(b);
    progress!(
        "claims: pgbench, {MACHINES} clients, {}s each",
        b.knobs.pool_s
    );
    let (db, roles) = claims_db(b);
    let claims = match pgbench() {
        Some(pgbench) => claims_and_simple_update(b, &pgbench, &db, &roles),
        None => {
            progress!("no pgbench (ORCA_PG_BINDIR, /usr/lib/postgresql): claim figures skipped");
            Claims::default()
        }
    };
    let (worker_took, worker_rss) = worker(b, &db, &roles[0]);
    drop(db);

    heading(&format!(
        "pools: a scaler pass, {POOLS} pools x 20 machines, 10000 queued; claims; worker"
    ));
    fig("scaler passes", s.stats.get("scaler_passes"));
    fig(
        "scaler: what was set",
        format!(
            "tick 0.1 s, a pass each tick (ORCA_POOL_SCALE_SECONDS=0), the removals thread every \
             {REMOVALS_EVERY} s as a deploy's (ORCA_POOL_REMOVALS_SECONDS={REMOVALS_EVERY})"
        ),
    );
    fig(
        "scaler pass p50 ms (goal <= 15)",
        s.stats.get("scaler_p50_ms"),
    );
    let parts: Vec<String> = s
        .parts
        .iter()
        .map(|(k, m)| format!("{} {m:.2}", k.trim_end_matches("_ms")))
        .collect();
    fig(
        "scaler pass, median ms of each part (ms: the whole)",
        or_na((!parts.is_empty()).then(|| parts.join(", "))),
    );
    fig("scaler pass max ms", s.stats.get("scaler_max_ms"));
    fig(
        "scaler statements per pass",
        s.stats.get("scaler_statements_per_pass"),
    );
    fig("pools at max_machines at stop", &s.at_max);
    fig("machines made (rows; 2000 preloaded)", s.made);
    fig("scheduler exit code", s.exit);
    // What the claims measured, so that a figure read elsewhere can be
    // told apart from this one: the statement, its clients, the protocol,
    // how long, the server's durability settings and the box's load.
    fig(
        "claims: the statement",
        "sql/worker_round.sql as the worker sends it (orca.worker_round, 17 arguments): \
         the end of the run claimed last round (succeeded) and room for 1",
    );
    fig(
        "claims: the clients",
        format!(
            "{MACHINES} pgbench processes of 1 client each, each logged in as a pool machine of its own (1 pool, {MACHINES} pipelines, 100000 queued)"
        ),
    );
    fig(
        "claims and simple-update: the protocol",
        "pgbench -M prepared (prepared once a session, as the worker does)",
    );
    fig(
        "claims and simple-update: the time measured",
        format!(
            "{SLICES} slices of {} s each, taken in turn (claims, simple-update, ...)",
            claims.slice_s
        ),
    );
    fig(
        "server fsync / synchronous_commit / full_page_writes",
        or_na(claims.settings.clone()),
    );
    fig(
        "load average (1 min) before the claims / after",
        format!("{} / {}", claims.load.0, claims.load.1),
    );
    fig(
        &format!("claims per second, {MACHINES} machines"),
        or_na(claims.claims.map(|t| format!("{t:.0}"))),
    );
    fig("runs claimed and finished", or_na(claims.claimed));
    fig(
        "pgbench simple-update per second, 8 clients (-c 8 -j 2)",
        or_na(claims.updates.map(|t| format!("{t:.0}"))),
    );
    fig(
        "claims and simple-update measured in turn, slices of each",
        SLICES,
    );
    if let (Some(c), Some(s)) = (claims.claims, claims.updates) {
        fig("claims / simple-update (goal >= 0.30)", f2(Some(c / s)));
    }
    let each: Vec<String> = claims.ratios.iter().map(|r| f2(*r)).collect();
    fig(
        "claims / simple-update, each slice with the next (the box's drift)",
        or_na((!each.is_empty()).then(|| each.join(" "))),
    );
    fig("worker: 200 runs of [\"true\"] s", &worker_took);
    fig("worker peak RSS MiB", f2(worker_rss));
}
