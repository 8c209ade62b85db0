//! The fleet churn (issue 13, part 2): `tests/chaos/churn.rs` run with
//! `ORCA_BENCH_CHURN` machines (1000), made and removed on the local
//! provider and the fake EC2 under faults, on a Postgres cluster of its
//! own; its figures printed as it prints them (`churn figure: …`), each
//! beside its goal.

use std::process::Command;
use std::time::Instant;

use crate::ctx::Bench;
use crate::out::{fig, heading, since};

/// Runs the churn test and prints its figures.
pub fn run(b: &mut Bench) {
    let n = b.knobs.churn;
    progress!("churn: {n} machines (cargo test --test chaos churn::churn)");
    let t0 = Instant::now();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "test",
            "-q",
            "--test",
            "chaos",
            "churn::churn",
            "--",
            "--exact",
            "--nocapture",
        ])
        .env("ORCA_CHAOS_CHURN", n.to_string())
        .output()
        .expect("cargo test --test chaos");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    heading(&format!(
        "fleet churn: {n} machines, local and fake EC2, faults (goals 0)"
    ));
    for line in text.lines() {
        if let Some(figure) = line.strip_prefix("churn figure: ") {
            println!("{figure}");
        }
    }
    // A late removal's evidence, as the churn prints it.
    for line in text.lines().filter(|l| l.starts_with("churn late")) {
        println!("{line}");
    }
    let violations = text
        .lines()
        .filter(|l| l.starts_with("violation: "))
        .count();
    fig("violation lines", violations);
    fig(
        "churn test exit code",
        out.status.code().map_or("killed".into(), |c| c.to_string()),
    );
    fig("section wall time s", since(t0));
    if !out.status.success() {
        for l in text
            .lines()
            .filter(|l| l.starts_with("violation: "))
            .take(20)
        {
            progress!("{l}");
        }
        panic!("the churn test failed");
    }
}
