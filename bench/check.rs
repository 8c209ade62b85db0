//! `orca check` of files just under the 1 MiB limit: one with some 80,000
//! problems (unknown keys), one with 13,000 pipelines whose schedules never
//! fire (each a different expression), and a refused one (`/dev/zero`).

use crate::ctx::Bench;
use crate::harness::{bin, exit_code};
use crate::out::{fig, heading, mib, since};
use std::process::{Command, Stdio};
use std::time::Instant;

/// `orca check -c PATH`: `T s, exit N, L lines` (lines on stderr).
fn check(path: &str) -> String {
    let t0 = Instant::now();
    let out = Command::new(bin())
        .args(["check", "-c", path])
        .env_remove("ORCA_CONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = since(t0);
    let lines = out.stderr.iter().filter(|&&c| c == b'\n').count();
    format!("{took} s, exit {}, {lines} lines", exit_code(out.status))
}

/// Writes the files and times the checks.
pub fn run(b: &mut Bench) {
    let mut problems = String::from("[pipelines.a]\ncommand = \"true\"\n");
    for i in 0..80_000 {
        problems += &format!("b{i} = 1\n");
    }
    let mut never = String::new();
    for i in 0..13_000 {
        never += &format!(
            "[pipelines.a{i}]\ncommand=\"t\"\nplacement=\"worker:z{i}\"\nschedule=\"{} {} 31 2 *\"\n",
            i % 60,
            (i / 60) % 24
        );
    }
    let problems_path = b.dir.write("problems.toml", &problems);
    let never_path = b.dir.write("never.toml", &never);
    heading("config check (files up to the 1 MiB limit)");
    fig(
        &format!("80000 problems, {} MiB", mib(problems.len() as u64)),
        check(&problems_path),
    );
    fig(
        &format!(
            "13000 schedules that never fire, {} MiB",
            mib(never.len() as u64)
        ),
        check(&never_path),
    );
    fig("/dev/zero", check("/dev/zero"));
}
