//! orca's figures (`make bench`): tick cost against finished history, the
//! tick's query plans, runs started per second, the scheduler's peak RSS,
//! the binary's size, `orca check` of files at the size limit, pools (a
//! scaler pass, claims per second against pgbench, a worker's RSS), the
//! warm pool, the leaderless gaps of scheduler overlap (deploy
//! handover, crash, hang), the fleet (300 real pool machines on one
//! Postgres: per machine sessions, transactions and WAL, and Postgres's
//! CPU), the fleet churn (`tests/chaos/churn.rs`), and the history soak
//! (runs at full rate with the keep shrunk to minutes: sizes, rows, RSS,
//! descriptors and tick p99 over time, and their slopes); and 100,000 runs
//! queued by one `orca run --each` (`batch`); queue to start of a local
//! run with and without wake-ups (`latency`); 2,000 short runs at the
//! default tick beside `xargs -P 64`, idle transactions, and the tick with
//! 100,000 queued (`throughput`); and waking a pool's machines on NOTIFY
//! (`wake`: queue to claim and hand-over to `pool-next`'s exit, idle
//! transactions per machine, with `ORCA_LISTEN` on and off).
//!
//! ```text
//! make bench                                         # every section
//! scripts/test-db.sh cargo bench --bench bench -- overlap warm   # some
//! ```
//!
//! A Cargo bench target with its own `main` (`harness = false`): `cargo
//! test` neither builds nor runs it, `cargo build --all-targets` and clippy
//! compile it, and `cargo bench` builds it with the release binary
//! (`target/release/orca`). It measures `ORCA_BIN` if set, else that one;
//! `make bench` sets `ORCA_BIN` to the static binary (`make static`), the
//! one that ships. It drives real processes through the integration
//! tests' harness (`tests/it/harness/`).
//!
//! Needs `ORCA_TEST_DATABASE_URL` (a superuser URL; `scripts/test-db.sh`
//! sets it). Prints `name: value` lines under `== heading ==` lines on
//! stdout; figures, not pass/fail (a goal is named next to the figure it
//! applies to). Progress and problems go to stderr. Makes databases
//! `orca_bench`, `orca_bench_small`, `orca_bench_rate`, ... (owned by the
//! harness's orca role, as operators set it up) and drops them at the end
//! (`ORCA_BENCH_KEEP=1` keeps them, and the logins named after them; the
//! next run drops what a kept run left). Like the tests, it makes the
//! harness's orca role (`orca_owner`, not a superuser) on the server if
//! missing and leaves it there.
//!
//! Since `bench/bench.sh` (before December 2026): every orca process and
//! pgbench run as that role, not as the superuser; the overlap figures
//! poll over one open connection, not a new psql each time, so the crash
//! gap is about 0.03 s lower and the deploy repetitions land where they
//! are meant to in the tick (their median a little higher). Exit 1 if a section failed (the others
//! still run), 2 on bad arguments or knobs, 130/143 on SIGINT/SIGTERM.
//!
//! Knobs: `ORCA_BENCH_TICK_SECONDS` (20), how long each tick measurement
//! runs; `ORCA_BENCH_FINISHED` (1000000), finished runs in the big
//! database; `ORCA_BENCH_OVERLAP_REPS` (5), repetitions of each overlap
//! figure; `ORCA_BENCH_POOL_SECONDS` (10), the scaler and pgbench measures;
//! `ORCA_BENCH_WARM_SECONDS` (10), idle instances watched;
//! `ORCA_BENCH_HANDOVERS` (10), warm hand-overs through the scheduler;
//! `ORCA_BENCH_CHURN` (1000), machines the fleet churn makes;
//! `ORCA_BENCH_FLEET` (300), real machines in the fleet section, and
//! `ORCA_BENCH_FLEET_SECONDS` (10), each of its windows;
//! `ORCA_BENCH_HISTORY_MINUTES` (30), the history soak's length;
//! `ORCA_BENCH_WAKE_SECONDS` (20), idle workers watched in `wake`;
//! `ORCA_BIN`, the binary; `ORCA_PG_BINDIR`, where pgbench is.
//!
//! A section is a function in a file of its own, listed in [`SECTIONS`].

#[macro_use]
mod out;

// Not every harness item is used here (the registry not at all).
#[allow(dead_code, unused_imports)]
#[path = "../tests/it/harness/mod.rs"]
mod harness;

mod batch;
mod binary;
mod check;
mod churn;
mod cpu;
mod ctx;
mod fleet;
mod history;
mod latency;
mod memory;
mod overlap;
mod plans;
mod pools;
mod rate;
mod setup;
mod throughput;
mod tick;
mod wake;
mod warm;

use ctx::{Bench, Knobs};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// A section of the figures: the name that picks it on the command line,
/// and what prints it.
struct Section {
    name: &'static str,
    run: fn(&mut Bench),
}

/// Every section, in the order they print. A later one may use what an
/// earlier one left in [`Bench`] (the memory section prints the tick and
/// start-rate schedulers' peaks; it says n/a for a section not run).
const SECTIONS: &[Section] = &[
    Section {
        name: "setup",
        run: setup::run,
    },
    Section {
        name: "tick",
        run: tick::run,
    },
    Section {
        name: "plans",
        run: plans::run,
    },
    Section {
        name: "rate",
        run: rate::run,
    },
    Section {
        name: "batch",
        run: batch::run,
    },
    Section {
        name: "latency",
        run: latency::run,
    },
    Section {
        name: "throughput",
        run: throughput::run,
    },
    Section {
        name: "memory",
        run: memory::run,
    },
    Section {
        name: "binary",
        run: binary::run,
    },
    Section {
        name: "check",
        run: check::run,
    },
    Section {
        name: "pools",
        run: pools::run,
    },
    Section {
        name: "warm",
        run: warm::run,
    },
    Section {
        name: "wake",
        run: wake::run,
    },
    Section {
        name: "overlap",
        run: overlap::run,
    },
    Section {
        name: "fleet",
        run: fleet::run,
    },
    Section {
        name: "churn",
        run: churn::run,
    },
    Section {
        name: "history",
        run: history::run,
    },
];

fn main() {
    // Arguments that are not flags (cargo passes `--bench`) name sections.
    let chosen: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let names: Vec<&str> = SECTIONS.iter().map(|s| s.name).collect();
    if let Some(bad) = chosen.iter().find(|c| !names.contains(&c.as_str())) {
        eprintln!(
            "bench: no section {bad:?}; the sections: {}",
            names.join(" ")
        );
        std::process::exit(2);
    }
    let Ok(admin) = std::env::var("ORCA_TEST_DATABASE_URL") else {
        eprintln!("bench: ORCA_TEST_DATABASE_URL is not set: run `make bench`");
        std::process::exit(2);
    };
    if let Ok(path) = std::env::var("ORCA_BIN")
        && !path.is_empty()
    {
        let abs = std::path::absolute(&path).unwrap_or_else(|_| path.clone().into());
        harness::use_bin(abs.to_string_lossy().into_owned());
    }
    if !std::path::Path::new(harness::bin()).is_file() {
        eprintln!(
            "bench: no orca binary at {}: build it first (cargo build --release) or set ORCA_BIN",
            harness::bin()
        );
        std::process::exit(2);
    }
    ctx::catch_signals();
    // An interrupt unwinds by a panic of its own: no message for it.
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if ctx::interrupted().is_none() {
            report(info);
        }
    }));
    let mut bench = Bench::new(admin, Knobs::from_env());
    let mut failed = Vec::new();
    for s in SECTIONS {
        if !chosen.is_empty() && !chosen.iter().any(|c| c == s.name) {
            continue;
        }
        if catch_unwind(AssertUnwindSafe(|| (s.run)(&mut bench))).is_err() {
            if ctx::interrupted().is_some() {
                break;
            }
            progress!("section {} failed (above); going on", s.name);
            failed.push(s.name);
        }
    }
    // The databases go now (unless kept), and the scratch directory.
    drop(bench);
    if let Some(sig) = ctx::interrupted() {
        progress!("interrupted: stopped what it started and dropped its databases");
        std::process::exit(128 + sig);
    }
    if !failed.is_empty() {
        progress!("failed sections: {}", failed.join(" "));
        std::process::exit(1);
    }
}
