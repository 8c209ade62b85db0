//! The aarch64 (Graviton) static binary under qemu-user: the commands that
//! don't re-execute themselves, against the test Postgres as orca's own
//! non-superuser role, say what the x86_64 binary says for the same
//! commands on a database of its own (ids and times masked). Where
//! binfmt_misc runs aarch64 binaries, a scheduler of the aarch64 binary
//! also takes a run to its end.
//!
//! Skipped (said on stderr) when there is no aarch64 binary or no
//! `qemu-aarch64`, unless `ORCA_REQUIRE_ARM64=1` (as `make test` sets it,
//! after building the binary): then that is a failure.

use crate::harness::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The aarch64 binary: cargo's release build (what `make test` builds
/// first, so never a stale copy), else `make static`'s copy of it.
fn arm_binary() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    [
        "target/aarch64-unknown-linux-musl/release/orca",
        "target/static/orca-aarch64",
    ]
    .iter()
    .map(|p| root.join(p))
    .find(|p| p.is_file())
}

/// Whether `qemu-aarch64` runs.
fn have_qemu() -> bool {
    Command::new("qemu-aarch64")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether the kernel runs aarch64 binaries itself (binfmt_misc's qemu).
fn binfmt_serves_aarch64() -> bool {
    std::fs::read_to_string("/proc/sys/fs/binfmt_misc/qemu-aarch64")
        .is_ok_and(|s| s.lines().next() == Some("enabled"))
}

/// The aarch64 binary and qemu, or why the test can't run: a failure under
/// `ORCA_REQUIRE_ARM64=1`, else `None` (skipped).
fn arm_or_skip() -> Option<PathBuf> {
    let bin = arm_binary();
    let qemu = have_qemu();
    let missing = match (&bin, qemu) {
        (Some(b), true) => return Some(b.clone()),
        (None, true) => {
            "no aarch64 binary (make static, or cargo build --release --target aarch64-unknown-linux-musl)"
        }
        (Some(_), false) => "no qemu-aarch64 (scripts/deps.sh test installs qemu-user)",
        (None, false) => "no aarch64 binary and no qemu-aarch64",
    };
    assert!(
        std::env::var("ORCA_REQUIRE_ARM64").as_deref() != Ok("1"),
        "ORCA_REQUIRE_ARM64=1 and {missing}"
    );
    eprintln!("arm64: skipped: {missing}");
    None
}

/// `orca ARGS` against `db` as its harness runs it, by `program` (and the
/// aarch64 binary after it, under qemu).
fn orca(program: &[&Path], db: &TestDb, args: &[&str]) -> Output {
    let mut c = Command::new(program[0]);
    c.args(&program[1..])
        .args(args)
        .env("ORCA_DATABASE_URL", &db.url)
        .env("RUST_LOG", "info")
        .env_remove("ORCA_CONFIG")
        .stdin(Stdio::null());
    c.output().unwrap()
}

/// `text` with what differs between two databases made for the same
/// commands masked: the database's name, and every word with a digit in it
/// (ids, times, ports, the stack's hash) as `#`.
fn masked(text: &str, db: &TestDb) -> String {
    // The server's other databases (other tests', made and dropped as
    // they run) are no output of the binary's.
    let text: String = text
        .replace(db.name(), "DB")
        .lines()
        .filter(|l| !l.contains("may connect to other databases of this server"))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if word.chars().any(|c| c.is_ascii_digit()) {
            out.push('#');
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// The commands both binaries run, in order, on a database each: the run's
/// id comes from `run`'s own output.
fn session(program: &[&Path], db: &TestDb, dir: &TempDir) -> Vec<(String, String, String)> {
    let config = dir.write(
        "orca.toml",
        &crate::pools::with_pool(
            "p",
            "[pipelines.a]\ncommand = \"echo hello\"\n[pipelines.b]\ncommand = \"true\"\nmax_runs = 3\n",
        ),
    );
    let mut said = Vec::new();
    let mut step = |args: &[&str]| -> String {
        let out = orca(program, db, args);
        let stdout = text(&out.stdout);
        said.push((
            format!("orca {} -> {}", args.join(" "), exit_code(out.status)),
            masked(&stdout, db),
            masked(&text(&out.stderr), db),
        ));
        stdout
    };
    step(&["migrate"]);
    step(&["check", "-c", &config]);
    step(&["register", "-c", &config]);
    let id = step(&["run", "a"]).trim().to_string();
    step(&["run", "b", "--", "x y", "z"]);
    step(&["runs"]);
    step(&["runs", "--json"]);
    step(&["logs", &id]);
    step(&["events"]);
    step(&["pools"]);
    step(&["run", "nope"]);
    said
}

/// An exit status as a number (128 + the signal when killed).
fn exit_code(s: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
}

#[test]
fn the_aarch64_binary_says_what_the_x86_64_one_says() {
    let Some(arm) = arm_or_skip() else { return };
    let dir = TempDir::new();
    let x86 = TestDb::empty_on(&admin_url());
    let aarch64 = TestDb::empty_on(&admin_url());
    let native = session(&[Path::new(bin())], &x86, &dir);
    let qemu = Path::new("qemu-aarch64");
    let emulated = session(&[qemu, &arm], &aarch64, &dir);
    assert_eq!(native.len(), emulated.len());
    for (n, e) in native.iter().zip(&emulated) {
        assert_eq!(n, e, "x86_64 (left) and aarch64 (right) differ");
    }
    // Not vacuous: the run was queued, and both said so.
    assert!(native[3].0.ends_with("-> 0"), "{native:?}");
    let runs: i64 = aarch64.one("SELECT count(*) FROM orca.runs");
    assert_eq!(runs, 2);
    // One database serves both (a mixed fleet): on the x86_64 binary's,
    // the aarch64 one finds nothing to migrate, the same stack, and the
    // same runs, word for word.
    for args in [&["migrate"][..], &["runs", "--json"], &["events", "--json"]] {
        let n = orca(&[Path::new(bin())], &x86, args);
        let e = orca(&[qemu, &arm], &x86, args);
        assert!(n.status.success(), "{args:?}: {}", text(&n.stderr));
        assert_eq!(
            (text(&n.stdout), exit_code(n.status)),
            (text(&e.stdout), exit_code(e.status)),
            "{args:?} on one database: x86_64 (left), aarch64 (right)"
        );
    }
    // The binary says what it was built for.
    let v = Command::new(qemu)
        .arg(&arm)
        .arg("--version")
        .output()
        .unwrap();
    assert!(
        text(&v.stdout).ends_with(", aarch64)\n"),
        "{}",
        text(&v.stdout)
    );
}

/// Where binfmt_misc runs aarch64 binaries (a scheduler re-executes itself,
/// which qemu-user alone can't follow), a scheduler of the aarch64 binary
/// takes a run to its end.
#[test]
fn an_aarch64_scheduler_runs_a_run_to_its_end_where_binfmt_serves_it() {
    let Some(arm) = arm_or_skip() else { return };
    if !binfmt_serves_aarch64() {
        eprintln!("arm64: scheduler skipped: binfmt_misc does not serve aarch64 here");
        return;
    }
    let (db, dir) = setup("[pipelines.a]\ncommand = \"echo from-arm\"\n");
    let id = db.queue("a");
    let mut c = Command::new(&arm);
    c.arg("scheduler")
        .env("ORCA_DATABASE_URL", &db.url)
        .env("ORCA_BIN", &arm)
        .env("RUST_LOG", "info")
        .env("ORCA_TICK_SECONDS", "0.2")
        .env("ORCA_STALE_SECONDS", "3")
        .env_remove("ORCA_CONFIG")
        .stdin(Stdio::null());
    let mut s = Proc::spawn(c, &dir.path("scheduler.log"));
    s.wait_for(
        "the run to succeed under the aarch64 scheduler",
        90.0,
        || db.state(id) == "succeeded",
    );
    assert_eq!(text(&db.output(id)), "from-arm\n");
    s.stop();
}
