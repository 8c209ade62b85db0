//! Runs started per second: 2,000 queued runs of `["true"]`, `max_runs`
//! 2,000 (no cap of the pipeline's own: what caps the rate is the
//! scheduler's, at most `STARTS_PER_TICK` starts a pass), the
//! scheduler ticking every 0.05 s, until all have succeeded; beside
//! it the floor: the same processes (`true`, each in a session of its own
//! with a run's environment, its output read through a pipe by a thread of
//! its own) spawned and reaped by a plain loop, 64 at once, with no
//! database and no keeper; and the CPU a run costs, by who spends it (the
//! scheduler, its keeper and runs' processes, Postgres), beside what the
//! floor's processes cost.

use crate::cpu;
use crate::ctx::{Bench, wait_for};
use crate::harness::peak_rss_kib;
use crate::out::{fig, heading, since};
use std::time::Instant;

const RUNS: i32 = 2000;

/// The pipeline's `max_runs`: as many as there are runs, so that the
/// pipeline caps nothing (at 64 a tick of 0.05 s it capped the rate at
/// 1,280 a second, below the spawn floor of a quiet box).
const MAX_RUNS: i32 = RUNS;

/// Times the 2,000 runs and prints the rate and the scheduler's figures.
pub fn run(b: &mut Bench) {
    progress!("runs per second: {RUNS} runs of ['true'], max_runs {MAX_RUNS}");
    let db = b.db(
        "orca_bench_rate",
        &format!("[pipelines.t]\ncommand = [\"true\"]\nmax_runs = {MAX_RUNS}\n"),
    );
    let mut c = b.client(&db);
    c.execute(
        "INSERT INTO orca.runs (pipeline) SELECT 't' FROM generate_series(1, $1::int)",
        &[&RUNS],
    )
    .unwrap();
    c.batch_execute("ANALYZE orca.runs").unwrap();
    let mut s = b.scheduler(&db, "0.05", "stats-rate", &[], "sched-rate.log");
    // CPU from here until the runs are done: the scheduler's own, its
    // keeper's and its runs' processes' (counted as the keeper reaps them;
    // the keeper is the scheduler's child, started with the first run),
    // Postgres's.
    let postmaster = cpu::postmaster(&mut crate::harness::connect(&b.admin));
    let pg = |pid: i32, ppid: i32, _| pid == postmaster || ppid == postmaster;
    let (s0, pg0) = (cpu::of(s.pid()), cpu::ticks(&cpu::reading(), pg));
    let t0 = Instant::now();
    let mut done = 0i64;
    let mut exited = false;
    let finished = wait_for(120.0, 0.02, || {
        done = c
            .query_one(
                "SELECT count(*) FROM orca.runs WHERE state = 'succeeded'",
                &[],
            )
            .map_or(0, |r| r.get(0));
        exited = s.child.try_wait().unwrap().is_some();
        done >= i64::from(RUNS) || exited
    });
    let took = (done >= i64::from(RUNS)).then(|| since(t0));
    if exited && took.is_none() {
        progress!("the scheduler exited early; its log:\n{}", s.tail(20));
    } else if !finished {
        progress!("deadline: {done} of {RUNS} succeeded after 120 s");
    }
    let now = cpu::reading();
    let (s1, pg1) = (cpu::of(s.pid()), cpu::ticks(&now, pg));
    let kept: u64 = now
        .values()
        .filter(|t| t.ppid == s.pid())
        .map(|t| t.own + t.children)
        .sum();
    b.rate_rss_mib = peak_rss_kib(s.pid()).map(|k| k as f64 / 1024.0);
    let not_succeeded: i64 = c
        .query_one(
            "SELECT count(*) FROM orca.runs WHERE state <> 'succeeded'",
            &[],
        )
        .unwrap()
        .get(0);
    let exit = s.terminate(30.0);
    let stats = b.stats("stats-rate");
    heading(&format!(
        "runs started per second: {RUNS} runs of [\"true\"], max_runs {MAX_RUNS}, tick 0.05 s"
    ));
    // The same span by the database's clock: the first run's start to the
    // last one's end (the scheduler's own start left out).
    let span: Option<f64> = c
        .query_one(
            "SELECT extract(epoch FROM max(ended_at) - min(started_at))::float8 FROM orca.runs",
            &[],
        )
        .ok()
        .and_then(|r| r.get(0));
    match &took {
        Some(took) => {
            fig(&format!("time to {RUNS} succeeded s"), took);
            let t: f64 = took.parse().unwrap();
            fig("runs per second", format!("{:.0}", f64::from(RUNS) / t));
            if let Some(span) = span {
                fig(
                    "runs per second, the first start to the last end (the database's clock)",
                    format!("{:.0}", f64::from(RUNS) / span),
                );
            }
        }
        None => {
            fig(
                &format!("time to {RUNS} succeeded s"),
                format!("n/a ({done} succeeded before the deadline)"),
            );
            fig("runs per second", "n/a");
        }
    }
    let true_path = ["/usr/bin/true", "/bin/true"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or("/bin/true");
    let (floor, floor_ms) = spawn_floor(true_path, &["true"]);
    fig(
        "spawn floor per second (the same processes, no orca: a plain loop, 64 at once)",
        format!("{floor:.0} ({floor_ms:.2} CPU ms each)"),
    );
    if let Some(t) = took.as_deref().and_then(|t| t.parse::<f64>().ok()) {
        fig(
            "runs per second as a share of the floor",
            format!(
                "{:.2} (goal: runs per second >= 1000)",
                f64::from(RUNS) / t / floor
            ),
        );
    }
    // Milliseconds of CPU a run, by who spent them (a box whose cores are
    // all busy starts runs at the rate their sum allows).
    let per_run = |ticks: u64| {
        format!(
            "{:.2}",
            ticks as f64 / cpu::hz() * 1000.0 / f64::from(done.max(1) as i32)
        )
    };
    if let (Some(s0), Some(s1)) = (s0, s1)
        && took.is_some()
    {
        fig(
            "CPU ms a run: the scheduler / its keeper and runs' processes / Postgres",
            format!(
                "{} / {} / {} (the floor's processes: {floor_ms:.2})",
                per_run(s1.own - s0.own),
                per_run(s1.children - s0.children + kept),
                per_run(pg1.saturating_sub(pg0))
            ),
        );
    }
    fig("runs not succeeded", not_succeeded);
    fig("ticks", stats.get("ticks"));
    fig("tick p50 ms", stats.get("p50_ms"));
    fig("tick p99 ms", stats.get("p99_ms"));
    fig("statements per tick", stats.get("statements_per_tick"));
    fig("scheduler exit code", exit);
}

/// The spawn floor (see the module's doc): `program` with `args` (its
/// `argv`) started a second, and their CPU (milliseconds each, what they
/// start counted in). Spawned as the keeper spawns a command (a vfork in a
/// new session, stdout and stderr a pipe), with nothing else done.
fn spawn_floor(program: &str, args: &[&str]) -> (f64, f64) {
    let children = || {
        // SAFETY: getrusage(2) fills the struct it is given.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
        let t = |v: libc::timeval| v.tv_sec as f64 * 1000.0 + v.tv_usec as f64 / 1000.0;
        t(u.ru_utime) + t(u.ru_stime)
    };
    let before = children();
    use std::ffi::CString;
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let t0 = Instant::now();
    let bin = CString::new(program).unwrap();
    let args: Vec<CString> = args.iter().map(|a| CString::new(*a).unwrap()).collect();
    let mut argv: Vec<*mut libc::c_char> = args.iter().map(|a| a.as_ptr() as *mut _).collect();
    argv.push(std::ptr::null_mut());
    // The environment a run gets: this process's (as the scheduler's) but
    // for what a run never gets (`ORCA_*`, `PG*`, `AWS_*` but the region:
    // `supervise::env::passed_on`), and a run's own.
    let passed_on = |k: &str| {
        let k = k.to_ascii_uppercase();
        !(k.starts_with("ORCA_")
            || k.starts_with("PG")
            || (k.starts_with("AWS_") && k != "AWS_REGION" && k != "AWS_DEFAULT_REGION"))
    };
    let mut vars: Vec<String> = std::env::vars()
        .filter(|(k, _)| passed_on(k))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    vars.extend([
        "ORCA_RUN_ID=1".into(),
        "ORCA_RUN_START=1".into(),
        "ORCA_PIPELINE=t".into(),
    ]);
    let vars: Vec<CString> = vars.into_iter().map(|v| CString::new(v).unwrap()).collect();
    let mut envp: Vec<*mut libc::c_char> = vars.iter().map(|v| v.as_ptr() as *mut _).collect();
    envp.push(std::ptr::null_mut());
    let mut live = std::collections::VecDeque::new();
    let reap = |(pid, reader): (libc::pid_t, std::thread::JoinHandle<()>)| {
        let mut status = 0;
        // SAFETY: waitpid(2) on our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        reader.join().unwrap();
    };
    for _ in 0..RUNS {
        if live.len() == 64 {
            reap(live.pop_front().unwrap());
        }
        let (mut out, writer) = std::io::pipe().unwrap();
        let mut pid = 0;
        // SAFETY: as in orca's own spawn: attributes and file actions made,
        // used while every pointer lives, and destroyed.
        unsafe {
            let mut attr: libc::posix_spawnattr_t = std::mem::zeroed();
            libc::posix_spawnattr_init(&mut attr);
            libc::posix_spawnattr_setflags(&mut attr, libc::POSIX_SPAWN_SETSID as libc::c_short);
            let mut fa: libc::posix_spawn_file_actions_t = std::mem::zeroed();
            libc::posix_spawn_file_actions_init(&mut fa);
            libc::posix_spawn_file_actions_adddup2(&mut fa, writer.as_raw_fd(), 1);
            libc::posix_spawn_file_actions_adddup2(&mut fa, writer.as_raw_fd(), 2);
            let r = libc::posix_spawn(
                &mut pid,
                bin.as_ptr(),
                &fa,
                &attr,
                argv.as_ptr(),
                envp.as_ptr(),
            );
            assert_eq!(r, 0, "posix_spawn");
            libc::posix_spawn_file_actions_destroy(&mut fa);
            libc::posix_spawnattr_destroy(&mut attr);
        }
        drop(writer);
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while matches!(out.read(&mut buf), Ok(n) if n > 0) {}
        });
        live.push_back((pid, reader));
    }
    live.into_iter().for_each(reap);
    (
        f64::from(RUNS) / t0.elapsed().as_secs_f64(),
        (children() - before) / f64::from(RUNS),
    )
}
