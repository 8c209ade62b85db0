//! Every command block of README.md and docs/ as an operator meets it.
//! A block tagged `sh` is run here as written, with only the database's
//! address (the `export ORCA_DATABASE_URL=` line, or the environment)
//! put in; each `toml` block passes `orca check` on its own; each `sql`
//! block is claimed in [`SQL_RUN`] by the test that runs it, each `yaml`
//! block in [`YAML_RUN`] by the test that checks it, and the
//! `json` policy is `setup.rs`'s; a command block of no tag must be in
//! [`NOT_RUN_HERE`], saying where it is run or why it can't be. So a new
//! block is either run or answered for.

use crate::harness::*;
use crate::setup::{blocks, psql, repo_file};
use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};

/// The pages with command blocks.
fn pages() -> Vec<String> {
    let mut pages = vec!["README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(format!("{}/docs", env!("CARGO_MANIFEST_DIR")))
        .unwrap()
        .map(|e| format!("docs/{}", e.unwrap().file_name().to_string_lossy()))
        .filter(|p| p.ends_with(".md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// Untagged blocks this file doesn't run: (page, how the block starts,
/// where it is run or why it can't be here).
const NOT_RUN_HERE: &[(&str, &str, &str)] = &[
    (
        "README.md",
        "make demo",
        "make demo is tests/it/demo.rs; make test is what CI runs",
    ),
    (
        "README.md",
        "orca                                       the usage",
        "the usage, not commands: the_readme_s_usage_names_every_command checks it",
    ),
    (
        "docs/setup.md",
        "make static",
        "builds and installs as root: tests/it/setup.rs and launch.rs run make install with DESTDIR",
    ),
    (
        "docs/aws.md",
        "make static\nmake install BIN=target/static/orca-aarch64",
        "builds both static binaries (minutes): make test builds the aarch64 one and tests/it/arm64.rs runs it; tests/it/setup.rs and launch.rs run make install with DESTDIR",
    ),
    (
        "docs/setup.md",
        "sudo install -d -m 0755 /etc/orca",
        "root's /etc and a running systemd: tests/it/launch.rs runs the unit's commands and systemctl --root",
    ),
    (
        "docs/aws.md",
        "aws iam create-service-linked-role",
        "an IAM call on a real AWS account: tests/it/spot.rs checks that orca's refusal names this very command",
    ),
    (
        "docs/setup.md",
        "# TYPE",
        "pg_hba.conf lines, not commands: tests/it/setup.rs reloads a cluster with them",
    ),
];

/// `sh` blocks, by how they start, and the test here that runs each.
const RUN_HERE: &[(&str, &str, &str)] = &[
    (
        "README.md",
        "export ORCA_DATABASE_URL='postgres://orca:secret@db.internal",
        "the_readme_s_first_commands_run_as_written",
    ),
    (
        "README.md",
        "export ORCA_DATABASE_URL='postgres://orca:secret@localhost:5432/orca_scratch'",
        "the_readme_s_dask_block_runs_as_written",
    ),
    (
        "README.md",
        "export ORCA_DATABASE_URL='postgres://orca:secret@localhost:5432/orca_batch'",
        "the_readme_s_batch_block_runs_as_written",
    ),
    (
        "docs/setup.md",
        "orca migrate",
        "the_setup_page_s_migrate_runs_as_written",
    ),
    (
        "docs/setup.md",
        "# /etc/orca/env",
        "launch::the_unit_starts_a_scheduler_from_the_documented_env_file",
    ),
    (
        "docs/operations.md",
        "orca status --db-wait 5",
        "the_operations_page_s_check_sees_every_old_run",
    ),
];

/// `sql` blocks, by how they start, and who runs them.
const SQL_RUN: &[(&str, &str, &str)] = &[
    (
        "README.md",
        "CREATE ROLE orca LOGIN CREATEROLE",
        "the_readme_s_role_runs_orca",
    ),
    (
        "docs/setup.md",
        "-- orca's role: the scheduler's and the operators'.",
        "setup::the_setup_page_makes_a_database_orca_runs_on",
    ),
    (
        "docs/security.md",
        "-- Advisory locks: only orca takes them.",
        "harness::harden, on every test's database",
    ),
    (
        "docs/deploy.md",
        "-- orca:raises-floor",
        "a migration's marker line, not statements: db::tests read the floor",
    ),
];

/// `yaml` blocks, by how they start, and the test that checks each.
const YAML_RUN: &[(&str, &str, &str)] = &[
    (
        "docs/operations.md",
        "# prometheus.yml",
        "metrics::the_operations_page_s_prometheus_blocks_pass_promtool",
    ),
    (
        "docs/operations.md",
        "# orca-rules.yml",
        "metrics::the_operations_page_s_prometheus_blocks_pass_promtool",
    ),
];

fn find<'a>(list: &'a [(&str, &str, &str)], page: &str, block: &str) -> Option<&'a str> {
    list.iter()
        .find(|(p, start, _)| *p == page && block.starts_with(start))
        .map(|(_, _, why)| *why)
}

/// The one `sh` block of `page` that starts with `start`.
fn sh_block(page: &str, start: &str) -> String {
    let found: Vec<String> = blocks(&repo_file(page), "sh")
        .into_iter()
        .filter(|b| b.starts_with(start))
        .collect();
    assert_eq!(found.len(), 1, "{page}: one sh block starting {start:?}");
    found.into_iter().next().unwrap()
}

/// Every fenced block of the pages is run, checked, or answered for.
#[test]
fn every_command_block_is_run_or_answered_for() {
    let mut seen_run = Vec::new();
    for page in pages() {
        let text = repo_file(&page);
        for b in blocks(&text, "") {
            assert!(
                find(NOT_RUN_HERE, &page, &b).is_some(),
                "{page}: a command block of no tag that no test runs; tag it sh (and run it in tests/it/docs.rs) or say why in NOT_RUN_HERE:\n{b}"
            );
        }
        for b in blocks(&text, "sh") {
            let test = find(RUN_HERE, &page, &b)
                .unwrap_or_else(|| panic!("{page}: an sh block no test runs:\n{b}"));
            seen_run.push(test);
        }
        for b in blocks(&text, "sql") {
            assert!(
                find(SQL_RUN, &page, &b).is_some(),
                "{page}: an sql block no test runs: claim it in SQL_RUN:\n{b}"
            );
        }
        for b in blocks(&text, "yaml") {
            assert!(
                find(YAML_RUN, &page, &b).is_some(),
                "{page}: a yaml block no test checks: claim it in YAML_RUN:\n{b}"
            );
        }
        for tag in ["bash", "shell", "console", "text"] {
            assert!(
                blocks(&text, tag).is_empty(),
                "{page}: a ```{tag} block: tag command blocks sh, or leave them untagged"
            );
        }
    }
    for (page, start, test) in RUN_HERE {
        assert!(
            seen_run.contains(test),
            "{page}: no sh block starts {start:?}"
        );
    }
    for (page, start, _) in NOT_RUN_HERE {
        assert!(
            blocks(&repo_file(page), "")
                .iter()
                .any(|b| b.starts_with(start)),
            "{page}: no block starts {start:?} any more: drop it from NOT_RUN_HERE"
        );
    }
}

/// The README's usage block names every command `orca --help` has, and
/// no other.
#[test]
fn the_readme_s_usage_names_every_command() {
    let usage = blocks(&repo_file("README.md"), "")
        .into_iter()
        .find(|b| b.starts_with("orca                                       the usage"))
        .expect("the README's usage");
    // A command line starts `orca NAME` (`orca pause P  /  orca resume P`:
    // two); the first line is `orca` alone, then its meaning.
    let mut named: Vec<String> = usage
        .lines()
        .filter(|l| l.starts_with("orca "))
        .flat_map(|l| l.split(" / ").map(str::trim))
        .filter_map(|part| part.strip_prefix("orca "))
        .filter(|rest| !rest.starts_with(' '))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_string)
        .collect();
    named.sort();
    named.dedup();
    let help = Command::new(bin()).arg("--help").output().unwrap();
    let mut commands: Vec<String> = text(&help.stdout)
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect();
    commands.sort();
    assert_eq!(named, commands, "the README's usage against orca --help");
}

/// The README's role and database, made by a superuser on a fresh
/// cluster, are enough for `orca migrate` and a scheduler's start.
#[test]
fn the_readme_s_role_runs_orca() {
    let sql = blocks(&repo_file("README.md"), "sql");
    assert_eq!(sql.len(), 1, "the README's SQL");
    let cluster = Cluster::new("");
    cluster.start();
    psql(&cluster.url(), &sql[0].replace("'...'", "'readme-pw'"));
    let url = with_user(&with_db(&cluster.url(), "orca"), "orca", "readme-pw");
    let out = Command::new(bin())
        .arg("migrate")
        .env("ORCA_DATABASE_URL", &url)
        .output()
        .unwrap();
    assert!(out.status.success(), "orca migrate: {}", text(&out.stderr));
}

/// Each `toml` block of the README and docs/ passes `orca check` on its own.
#[test]
fn each_toml_block_passes_orca_check() {
    let dir = TempDir::new();
    let readme = blocks(&repo_file("README.md"), "toml");
    assert!(readme.len() >= 3, "the README's orca.toml examples");
    let mut checked = 0;
    for page in pages() {
        for (i, b) in blocks(&repo_file(&page), "toml").iter().enumerate() {
            let path = dir.write(&format!("block{checked}.toml"), b);
            let out = Command::new(bin())
                .args(["check", "-c", &path])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{page}'s toml block {i}: {}\n{b}",
                text(&out.stderr)
            );
            checked += 1;
        }
    }
    assert!(checked > readme.len(), "docs/aws.md's Graviton pool");
}

/// Runs `script` with `sh -e` in `dir`, `orca` first on PATH, with
/// `ORCA_DATABASE_URL` set to `url` and any line setting it made to
/// set `url` instead; `watch` is called with the shell's pid every 100 ms
/// while it runs.
fn run_sh(script: &str, dir: &TempDir, url: &str, watch: impl FnMut(i32)) -> Output {
    run_sh_in(script, dir, &dir.0, url, 120, watch)
}

/// As [`run_sh`], in `cwd` (the script is kept in `dir`), for up to `secs`.
fn run_sh_in(
    script: &str,
    dir: &TempDir,
    cwd: &std::path::Path,
    url: &str,
    secs: u64,
    mut watch: impl FnMut(i32),
) -> Output {
    let script: String = script
        .lines()
        .map(|l| match l.find("ORCA_DATABASE_URL='") {
            Some(i) => {
                let rest = &l[i + 19..];
                let end = rest.find('\'').expect("a quoted URL");
                format!("{}ORCA_DATABASE_URL='{url}'{}\n", &l[..i], &rest[end + 1..])
            }
            None => format!("{l}\n"),
        })
        .collect();
    let path = dir.write("block.sh", &script);
    let bin_dir = std::path::Path::new(bin()).parent().unwrap();
    let mut child = Command::new("sh")
        .args(["-e", &path])
        .current_dir(cwd)
        .env(
            "PATH",
            format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap()),
        )
        .env("ORCA_DATABASE_URL", url)
        .env_remove("ORCA_CONFIG")
        .stdin(Stdio::null())
        .process_group(0)
        // Files, not pipes: what the block leaves running (a warm local
        // instance keeps its scheduler's output) would hold a pipe open.
        .stdout(std::fs::File::create(dir.path("block.out")).unwrap())
        .stderr(std::fs::File::create(dir.path("block.err")).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            // The block and what it started in the foreground or background.
            // SAFETY: kill(2) on the process group this test made.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            panic!("the block ran past {secs} s:\n{script}");
        }
        watch(child.id() as i32);
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    if !status.success() {
        // A block that failed before its own `kill $!` leaves its
        // background scheduler in its process group: stopped here, so a
        // failed test leaks no scheduler (make test met one).
        // SAFETY: kill(2) on the process group this test made.
        unsafe { libc::kill(-(child.id() as i32), libc::SIGTERM) };
    }
    Output {
        status,
        stdout: std::fs::read(dir.path("block.out")).unwrap(),
        stderr: std::fs::read(dir.path("block.err")).unwrap(),
    }
}

/// Whether a scheduler leads `db`, as `orca schedulers` says.
fn led(db: &TestDb) -> bool {
    serde_json::from_slice::<serde_json::Value>(&db.run(&["schedulers", "--json"]).stdout)
        .ok()
        .and_then(|l| {
            l.as_array()
                .map(|a| a.iter().any(|i| i["role"] == "leader"))
        })
        .unwrap_or(false)
}

/// The README's "Running it": migrate, check and register the operator's
/// `orca.toml` (here the demo's), and the scheduler, on a fresh database;
/// the scheduler, once it leads, is stopped as an operator would (SIGTERM).
#[test]
fn the_readme_s_first_commands_run_as_written() {
    let db = TestDb::empty_on(&admin_url());
    let dir = TempDir::new();
    dir.write("orca.toml", &repo_file("examples/orca.toml"));
    let block = sh_block(
        "README.md",
        "export ORCA_DATABASE_URL='postgres://orca:secret@db.internal",
    );
    let mut stopped = false;
    let out = run_sh(&block, &dir, &db.url, |sh| {
        if !stopped && led(&db) {
            // The block's last command, in the foreground: its only child.
            for pid in children(sh) {
                // SAFETY: kill(2) on the scheduler the block started.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
            stopped = true;
        }
    });
    assert!(
        out.status.success() && stopped,
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("stack "),
        "migrate named the stack"
    );
    let pipelines: i64 = db.one("SELECT count(*) FROM orca.pipelines");
    assert!(pipelines > 0, "registered");
}

/// The README's "Queueing many runs at once": two batches queued by
/// `orca run --each` (from a pipe, then a file), the second waited for
/// with the scheduler the block starts; the ids it says it prints, and
/// every run succeeded with its line's arguments.
#[test]
fn the_readme_s_batch_block_runs_as_written() {
    let db = TestDb::empty_on(&admin_url());
    let dir = TempDir::new();
    let block = sh_block(
        "README.md",
        "export ORCA_DATABASE_URL='postgres://orca:secret@localhost:5432/orca_batch'",
    );
    let out = run_sh(&block, &dir, &db.url, |_| {});
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{all}");
    // Its other lines are migrate's (`applied ...`, `done: ...`, `stack ...`).
    let ids: Vec<String> = text(&out.stdout)
        .lines()
        .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
        .map(str::to_string)
        .collect();
    assert_eq!(ids, ["1 2", "3 202"], "{all}");
    assert_eq!(
        db.one::<i64>("SELECT count(*) FROM orca.runs WHERE state = 'succeeded' AND id >= 3"),
        200
    );
    let args: Vec<String> = db.one("SELECT args FROM orca.runs WHERE id = 202");
    assert_eq!(args, ["img200.png", "800x600"]);
}

/// The README's Dask block, from the repository's root, on a scratch
/// database: both runs succeed on a Dask cluster of their own and `orca
/// logs 1` shows that every worker took part. Only the virtualenv's path
/// is the tests' own (made once from PyPI by engine.rs, not again here);
/// its instances, left warm, go with the database.
#[test]
fn the_readme_s_dask_block_runs_as_written() {
    let venv = crate::engine::dask_venv();
    let db = TestDb::empty_on(&admin_url());
    let dir = TempDir::new();
    let block = sh_block(
        "README.md",
        "export ORCA_DATABASE_URL='postgres://orca:secret@localhost:5432/orca_scratch'",
    )
    .replace("/tmp/dask", &venv.to_string_lossy());
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = run_sh_in(&block, &dir, root, &db.url, 600, |_| {});
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{all}");
    assert!(
        text(&out.stdout).contains("every worker took part: 2 of 2"),
        "{all}"
    );
    assert_eq!(
        db.one::<i64>("SELECT count(*) FROM orca.runs WHERE state = 'succeeded'"),
        2
    );
}

/// docs/setup.md's `orca migrate`, as orca's role, on a fresh database.
#[test]
fn the_setup_page_s_migrate_runs_as_written() {
    let db = TestDb::empty_on(&admin_url());
    let dir = TempDir::new();
    let out = run_sh(
        &sh_block("docs/setup.md", "orca migrate"),
        &dir,
        &db.url,
        |_| {},
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let applied: i64 = db.one("SELECT count(*) FROM orca.migrations");
    assert!(applied > 0);
}

/// docs/operations.md's check fails (`orca status` saying why) while no
/// scheduler leads, passes while one leads and nothing has waited an hour,
/// and fails once one run has, even behind more queued
/// runs than `orca runs` lists by default (it went blind past 20).
#[test]
fn the_operations_page_s_check_sees_every_old_run() {
    let (db, dir) = setup("[pipelines.p]\ncommand = \"true\"\n");
    let check = sh_block("docs/operations.md", "orca status --db-wait 5");
    // No scheduler yet: the check fails, saying why.
    let out = run_sh(&check, &dir, &db.url, |_| {});
    assert!(!out.status.success());
    assert!(
        std::fs::read_to_string(dir.path("block.err"))
            .unwrap()
            .contains("no scheduler leads"),
        "its stderr says why"
    );
    let mut s = db.scheduler(&dir, &[]);
    wait_until("a scheduler leads", 30.0, || led(&db));
    db.ok(&["pause", "p"]);
    let old = db.queue("p");
    let out = run_sh(&check, &dir, &db.url, |_| {});
    assert!(out.status.success(), "healthy: {}", text(&out.stderr));
    db.client()
        .execute(
            "UPDATE orca.runs SET queued_at = now() - interval '2 hours', not_before = now() - interval '2 hours' WHERE id = $1",
            &[&old],
        )
        .unwrap();
    for _ in 0..25 {
        db.queue("p");
    }
    let out = run_sh(&check, &dir, &db.url, |_| {});
    assert!(
        !out.status.success(),
        "run {old} has waited two hours behind 25 newer runs: {}",
        text(&out.stdout)
    );
    s.stop();
}
