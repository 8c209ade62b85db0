//! What every section shares: the knobs, the server, a scratch directory,
//! the databases and figures one section leaves for another, and waiting
//! that an interrupt (SIGINT, SIGTERM) cuts short.

use crate::harness::{Proc, TempDir, TestDb, connect, within};
use crate::out::Stats;
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// The environment's knobs, read once.
pub struct Knobs {
    /// `ORCA_BENCH_TICK_SECONDS` (20): how long each tick measurement runs.
    pub tick_s: f64,
    /// `ORCA_BENCH_FINISHED` (1,000,000): finished runs in the big database.
    pub finished: i32,
    /// `ORCA_BENCH_OVERLAP_REPS` (5): repetitions of each overlap figure.
    pub overlap_reps: u32,
    /// `ORCA_BENCH_POOL_SECONDS` (10): the scaler's and each pgbench's
    /// measure (whole seconds: pgbench's `-T`).
    pub pool_s: u64,
    /// `ORCA_BENCH_WARM_SECONDS` (10): how long idle instances are watched.
    pub warm_s: f64,
    /// `ORCA_BENCH_HANDOVERS` (10): warm hand-overs through the scheduler.
    pub handovers: u32,
    /// `ORCA_BENCH_WAKE_SECONDS` (20): how long idle workers are watched
    /// in the wake section.
    pub wake_s: f64,
    /// `ORCA_BENCH_KEEP=1`: the databases are left in place at the end.
    pub keep: bool,
    /// `ORCA_BENCH_CHURN` (1000): machines the fleet churn makes.
    pub churn: u32,
    /// `ORCA_BENCH_FLEET` (300): real pool machines in the fleet section.
    pub fleet: u32,
    /// `ORCA_BENCH_FLEET_SECONDS` (10): each fleet measurement's window.
    pub fleet_s: f64,
    /// `ORCA_BENCH_HISTORY_MINUTES` (30): how long the history soak runs.
    pub history_min: f64,
}

/// A knob's value, or `default` when unset; a value that doesn't parse
/// ends the bench (exit 2).
fn knob<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v.parse().unwrap_or_else(|_| {
            eprintln!("bench: {name}={v:?} is not a valid value");
            std::process::exit(2)
        }),
        _ => default,
    }
}

impl Knobs {
    /// The knobs from the environment.
    pub fn from_env() -> Knobs {
        Knobs {
            tick_s: knob("ORCA_BENCH_TICK_SECONDS", 20.0),
            finished: knob("ORCA_BENCH_FINISHED", 1_000_000),
            overlap_reps: knob("ORCA_BENCH_OVERLAP_REPS", 5),
            pool_s: knob("ORCA_BENCH_POOL_SECONDS", 10),
            warm_s: knob("ORCA_BENCH_WARM_SECONDS", 10.0),
            handovers: knob("ORCA_BENCH_HANDOVERS", 10),
            churn: knob("ORCA_BENCH_CHURN", 1000),
            fleet: knob("ORCA_BENCH_FLEET", 300),
            fleet_s: knob("ORCA_BENCH_FLEET_SECONDS", 10.0),
            history_min: knob("ORCA_BENCH_HISTORY_MINUTES", 30.0),
            wake_s: knob("ORCA_BENCH_WAKE_SECONDS", 20.0),
            keep: std::env::var("ORCA_BENCH_KEEP").is_ok_and(|v| v == "1"),
        }
    }
}

/// One tick measurement (see `tick.rs`): what the scheduler's stats file
/// said and what was seen around it.
pub struct TickRun {
    /// The `ORCA_TICK_STATS` line.
    pub stats: Stats,
    /// The scheduler's peak RSS just before SIGTERM, MiB.
    pub rss_mib: Option<f64>,
    /// Runs running at the stop.
    pub running: Option<i64>,
    /// Runs queued at the stop.
    pub queued: Option<i64>,
    /// The scheduler's exit code on SIGTERM (137: killed).
    pub exit: i32,
}

/// The state sections share.
pub struct Bench {
    /// The knobs.
    pub knobs: Knobs,
    /// The test server's superuser URL (`ORCA_TEST_DATABASE_URL`).
    pub admin: String,
    /// Config files, stats files and process logs; removed at the end.
    pub dir: TempDir,
    /// `orca_bench_small`: 10,000 finished runs (made by `setup`, or by the
    /// first section that needs it).
    pub small: Option<TestDb>,
    /// `orca_bench`: `knobs.finished` finished runs.
    pub big: Option<TestDb>,
    /// The tick measurements on `small` and `big`, for the memory section.
    pub tick_small: Option<TickRun>,
    /// See `tick_small`.
    pub tick_big: Option<TickRun>,
    /// The start-rate scheduler's peak RSS, MiB.
    pub rate_rss_mib: Option<f64>,
}

/// Finished runs in `orca_bench_small`.
pub const SMALL_FINISHED: i32 = 10_000;
/// Queued runs of `busy` in both tick databases.
pub const QUEUED: i32 = 10_000;

/// The ~20 pipelines of the tick measurement: `busy` (4 at once, each
/// sleeping) and nineteen that never run.
fn tick_config() -> String {
    let mut s = String::from("[pipelines.busy]\ncommand = \"sleep 600\"\nmax_runs = 4\n\n");
    for i in 1..=19 {
        s += &format!("[pipelines.p{i:02}]\ncommand = [\"true\"]\nmax_runs = 2\n\n");
    }
    s
}

impl Bench {
    /// The bench's state for a run against `admin`.
    pub fn new(admin: String, knobs: Knobs) -> Bench {
        Bench {
            knobs,
            admin,
            dir: TempDir::new(),
            small: None,
            big: None,
            tick_small: None,
            tick_big: None,
            rate_rss_mib: None,
        }
    }

    /// A fresh database `name` (one left by an earlier run is dropped)
    /// with orca's schema and `config` registered; dropped when it is,
    /// unless `ORCA_BENCH_KEEP=1`.
    pub fn db(&self, name: &str, config: &str) -> TestDb {
        let mut db = TestDb::named(&self.admin, name);
        if self.knobs.keep {
            db.keep();
        }
        db.register(&self.dir, config);
        db
    }

    /// A client on `db` as orca's role, every statement bounded (150 s).
    pub fn client(&self, db: &TestDb) -> postgres::Client {
        let mut c = connect(&db.url);
        c.batch_execute("SET statement_timeout = '150s'").unwrap();
        c
    }

    /// A tick database: `name` with the tick config, `finished` finished
    /// runs (one in ten failed, ended in the past, spread over the
    /// pipelines) and [`QUEUED`] queued runs of `busy`, vacuumed. Returns
    /// it and how long the load and vacuum took.
    pub fn tick_db(&self, name: &str, finished: i32) -> (TestDb, Duration) {
        let db = self.db(name, &tick_config());
        let mut c = self.client(&db);
        let t0 = Instant::now();
        c.execute(
            "INSERT INTO orca.runs (pipeline, state, start, origin, queued_at, not_before,
                                    started_at, ended_at, host, exit_code, why)
             SELECT p.names[1 + g % array_length(p.names, 1)],
                    CASE WHEN g % 10 = 0 THEN 'failed' ELSE 'succeeded' END,
                    1, 'manual',
                    now() - interval '60 days' + g * interval '3 seconds',
                    now() - interval '60 days' + g * interval '3 seconds',
                    now() - interval '60 days' + g * interval '3 seconds' + interval '1 second',
                    now() - interval '60 days' + g * interval '3 seconds' + interval '2 seconds',
                    'bench', CASE WHEN g % 10 = 0 THEN 1 ELSE 0 END,
                    CASE WHEN g % 10 = 0 THEN 'exit code 1 after 1.0s' ELSE 'exit code 0 after 1.0s' END
             FROM generate_series(1, $1::int) g,
                  (SELECT array_agg(name ORDER BY name) AS names FROM orca.pipelines) p",
            &[&finished],
        )
        .unwrap();
        c.execute(
            "INSERT INTO orca.runs (pipeline) SELECT 'busy' FROM generate_series(1, $1::int)",
            &[&QUEUED],
        )
        .unwrap();
        // VACUUM too, not just ANALYZE: autovacuum would otherwise pass over
        // the new rows during a measurement (and the visibility map is set,
        // as in a table that has lived a while). One statement a call:
        // VACUUM runs outside a transaction.
        c.batch_execute("VACUUM (ANALYZE) orca.runs").unwrap();
        c.batch_execute("VACUUM (ANALYZE) orca.pipelines").unwrap();
        (db, t0.elapsed())
    }

    /// `orca_bench_small`, made if no section made it yet.
    pub fn small(&mut self) -> &TestDb {
        if self.small.is_none() {
            progress!("making orca_bench_small ({SMALL_FINISHED} finished runs)");
            self.small = Some(self.tick_db("orca_bench_small", SMALL_FINISHED).0);
        }
        self.small.as_ref().unwrap()
    }

    /// `orca_bench`, made if no section made it yet.
    pub fn big(&mut self) -> &TestDb {
        if self.big.is_none() {
            let n = self.knobs.finished;
            progress!("making orca_bench ({n} finished runs)");
            self.big = Some(self.tick_db("orca_bench", n).0);
        }
        self.big.as_ref().unwrap()
    }

    /// `orca ARGS` on `db` as a process whose output goes to `log` in the
    /// scratch directory, with `env` on top of orca's defaults (the
    /// harness's `ORCA_*` settings for tests are not applied: the bench
    /// names each it sets).
    pub fn spawn(&self, db: &TestDb, args: &[&str], env: &[(&str, &str)], log: &str) -> Proc {
        let mut c = db.orca(args);
        c.envs(env.iter().copied());
        Proc::spawn(c, &self.dir.path(log))
    }

    /// The measuring scheduler: tick `tick` s, its figures written to the
    /// stats file `stats` at exit, a stop grace of 2 s (not 30) so stopping
    /// is quick, and a stale limit of 2 s (not 10) so the sweep, which is
    /// skipped for one stale limit after taking the lead, is part of nearly
    /// every measured tick, history kept ten years; `env` on top.
    pub fn scheduler(
        &self,
        db: &TestDb,
        tick: &str,
        stats: &str,
        env: &[(&str, &str)],
        log: &str,
    ) -> Proc {
        let stats = self.dir.path(stats);
        let mut all = vec![
            ("ORCA_TICK_SECONDS", tick),
            ("ORCA_TICK_STATS", stats.to_str().unwrap()),
            ("ORCA_STOP_GRACE_SECONDS", "2"),
            ("ORCA_STALE_SECONDS", "2"),
            // The tick databases' finished runs ended 60 days ago: kept, so
            // the tick is measured against them, not against their pruning
            // (the history section sets ORCA_KEEP_SECONDS, which wins).
            ("ORCA_KEEP_DAYS", "3650"),
        ];
        all.extend_from_slice(env);
        self.spawn(db, &["scheduler"], &all, log)
    }

    /// The stats file `name` a measuring scheduler wrote (empty if none).
    pub fn stats(&self, name: &str) -> Stats {
        Stats::read(&self.dir.path(name))
    }
}

/// The pgbench program: `ORCA_PG_BINDIR`'s (`scripts/test-db.sh` sets it),
/// else the newest installed server's.
pub fn pgbench() -> Option<std::path::PathBuf> {
    crate::harness::pg_bindir()
        .map(|d| d.join("pgbench"))
        .filter(|p| p.is_file())
}

/// pgbench against `url`, the password (if the URL has one) in
/// `PGPASSWORD` rather than on its command line.
pub fn pgbench_cmd(pgbench: &std::path::Path, url: &str) -> Command {
    let (url, password) = split_password(url);
    let mut c = Command::new(pgbench);
    if let Some(pw) = password {
        c.env("PGPASSWORD", pw);
    }
    c.arg(url);
    c
}

/// `url` without its password, and the password (percent-decoded).
fn split_password(url: &str) -> (String, Option<String>) {
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[scheme_end..];
    let Some(at) = rest.find('@').filter(|&at| !rest[..at].contains('/')) else {
        return (url.to_string(), None);
    };
    let Some(colon) = rest[..at].find(':') else {
        return (url.to_string(), None);
    };
    let password = percent_decode(&rest[colon + 1..at]);
    (
        format!("{}{}{}", &url[..scheme_end], &rest[..colon], &rest[at..]),
        Some(password),
    )
}

/// `%XX` escapes decoded (as libpq reads a URL's parts).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Some(v) = std::str::from_utf8(&b[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The signal that interrupted the bench, or 0.
static INTERRUPTED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    INTERRUPTED.store(sig, Ordering::SeqCst);
}

/// SIGINT and SIGTERM interrupt the bench: its next wait panics, so what
/// the section started is stopped and its databases dropped on the way out.
pub fn catch_signals() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

/// The signal that interrupted the bench, if one did.
pub fn interrupted() -> Option<i32> {
    match INTERRUPTED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// Panics if the bench was interrupted (the unwinding cleans up).
pub fn check_interrupt() {
    if let Some(sig) = interrupted() {
        panic!("interrupted by signal {sig}");
    }
}

/// Sleeps `secs` on purpose (a measurement that runs for a fixed time, a
/// deliberate offset), ended early only by an interrupt.
pub fn pause(secs: f64) {
    let end = Instant::now() + Duration::from_secs_f64(secs.max(0.0));
    loop {
        check_interrupt();
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// Whether `f` holds within `secs`, polled every `every`; an interrupt
/// ends the wait (see [`check_interrupt`]).
pub fn wait_for(secs: f64, every: f64, mut f: impl FnMut() -> bool) -> bool {
    within(secs, Duration::from_secs_f64(every), || {
        check_interrupt();
        f()
    })
}
