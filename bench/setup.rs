//! The setup: the machine, the server, the binary, and the two tick
//! databases (10,000 and `ORCA_BENCH_FINISHED` finished runs).

use crate::ctx::Bench;
use crate::harness::{bin, connect};
use crate::out::{count_label, fig, heading, mib, secs};

/// CPUs this process may run on, as `nproc` counts them.
fn cpus() -> usize {
    // SAFETY: sched_getaffinity(2) fills the set it is given.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            return libc::CPU_COUNT(&set) as usize;
        }
    }
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Prints the setup and makes the tick databases.
pub fn run(b: &mut Bench) {
    heading("setup");
    fig("cpus", cpus());
    let version: String = connect(&b.admin)
        .query_one("SHOW server_version", &[])
        .unwrap()
        .get(0);
    fig(
        "postgres",
        version.split_whitespace().next().unwrap_or_default(),
    );
    fig("orca binary", bin());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    fig("load average at start", load.join(" "));

    b.small();
    let n = b.knobs.finished;
    progress!("making orca_bench ({n} finished runs)");
    let (db, took) = b.tick_db("orca_bench", n);
    fig(&format!("load + vacuum {n} finished runs s"), secs(took));
    let size: i64 = b
        .client(&db)
        .query_one("SELECT pg_total_relation_size('orca.runs')", &[])
        .unwrap()
        .get(0);
    fig(
        &format!(
            "orca.runs size MiB ({} finished, with indexes)",
            count_label(n.into())
        ),
        mib(size as u64),
    );
    b.big = Some(db);
}
