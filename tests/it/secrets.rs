//! A run can't get at orca's secrets (issue 10, section B): pipelines that
//! scan every `/proc/*/environ` and `/proc/*/cmdline` they can read, the
//! token files named there and, on the local provider, their machine's boot
//! environment (its user-data), and the test then tries every credential
//! they found against Postgres. Locally, on a worker machine, and as the
//! driver of an EC2 run (local provider).

use crate::harness::*;
use crate::pools::{pool_scheduler, pool_test, with_pool};

/// A shell script printing every credential-looking string its user can
/// read in `/proc`, and the token files named there.
const SCAN: &str = r#"echo "scanning as $(id -un)"
found=$(for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do
  { tr '\000' '\n' < "$f"; } 2>/dev/null
done | grep -aoE '(ORCA_TOKEN=[^ ]+|ORCA_TOKEN_FILE=[^ ]+|postgres(ql)?://[^ ]+|PGPASSWORD=[^ ]+)' | sort -u)
echo "$found"
for f in $(echo "$found" | sed -n 's/^ORCA_TOKEN_FILE=//p'); do
  echo "FILE $(cat "$f" 2>/dev/null)"
done
echo "scan done"
"#;

/// Pipelines running [`SCAN`] locally, on pool `p`'s machine and as an EC2
/// run's driver.
fn scanning_pipelines(script: &str) -> String {
    with_pool(
        "p",
        &format!(
            r#"
[pipelines.scan_local]
command = "sh {script}"

[pipelines.scan_worker]
command = "sh {script}"
placement = "worker:p"

[pipelines.scan_ec2]
command = "sh {script}"
placement = "ec2"

[pipelines.scan_ec2.ec2]
provider = "local"
type = "small"
locations = ["here"]
workers = 1
worker_service = "exec sleep 300"
"#
        ),
    )
}

/// Runs the three scans at once (so every machine is up while each scans)
/// and returns their outputs.
fn scans(db: &TestDb, dir: &TempDir, env: &[(&str, &str)]) -> Vec<String> {
    let script = dir.write("scan.sh", SCAN);
    db.register(dir, &scanning_pipelines(&script));
    let mut env = env.to_vec();
    env.push(("ORCA_EC2_POOL_SECONDS", "30"));
    let mut s = pool_scheduler(db, dir, &env);
    let runs: Vec<i64> = ["scan_local", "scan_worker", "scan_ec2"]
        .iter()
        .map(|p| db.queue(p))
        .collect();
    wait_until("the three scans succeed", 90.0, || {
        runs.iter().all(|r| db.state(*r) == "succeeded")
    });
    let outputs: Vec<String> = runs
        .iter()
        .map(|r| {
            let out = db.output(*r);
            text(&out)
        })
        .collect();
    for o in &outputs {
        assert!(o.contains("scan done"), "{o}");
    }
    s.stop();
    outputs
}

/// Every credential in the scans' outputs: (user, password).
fn credentials(outputs: &[String]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for line in outputs.iter().flat_map(|o| o.lines()) {
        let token = line
            .strip_prefix("ORCA_TOKEN=")
            .or_else(|| line.strip_prefix("FILE "));
        if let Some((role, secret)) = token.and_then(|t| t.trim().split_once(':')) {
            found.push((role.to_string(), secret.to_string()));
        }
        if let Some(rest) = line.split("://").nth(1)
            && let Some((userinfo, _)) = rest.split_once('@')
            && let Some((user, pw)) = userinfo.split_once(':')
        {
            found.push((user.to_string(), pw.to_string()));
        }
        if let Some(pw) = line.strip_prefix("PGPASSWORD=") {
            found.push((OWNER.to_string(), pw.to_string()));
            found.push(("postgres".to_string(), pw.to_string()));
        }
    }
    found.sort();
    found.dedup();
    found
}

/// Whether `user` logs in with `password` to the test database.
fn logs_in(db: &TestDb, user: &str, password: &str) -> bool {
    let mut config: postgres::Config = db.url_as(user, password).parse().unwrap();
    config.connect_timeout(std::time::Duration::from_secs(5));
    config.connect(postgres::NoTls).is_ok()
}

fn am_root() -> bool {
    // SAFETY: geteuid(2) can't fail.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn runs_as_another_user_find_no_credential_that_logs_in() {
    if !am_root() {
        eprintln!("skipped: ORCA_RUN_AS needs the tests to run as root");
        return;
    }
    let db = TestDb::new();
    let dir = TempDir::new();
    let outputs = scans(&db, &dir, &[("ORCA_RUN_AS", "nobody")]);
    for o in &outputs {
        assert!(o.contains("scanning as nobody"), "{o}");
    }
    for (user, pw) in credentials(&outputs) {
        assert!(
            !logs_in(&db, &user, &pw),
            "a run found credentials of {user} that log in; what it saw:\n{}",
            outputs.join("\n---\n")
        );
    }
}

#[test]
fn without_run_as_a_machine_s_boot_token_found_by_a_run_logs_nobody_in() {
    // As one Unix user (here root, which reads every process), a run sees
    // what its user sees (docs/security.md). What still holds: the tokens
    // machines booted with, in their boot environment (user-data), are
    // single-use, and the run's own environment holds nothing of orca's.
    let db = TestDb::new();
    let dir = TempDir::new();
    let outputs = scans(&db, &dir, &[("PGPASSWORD", "pg-secret-of-orca")]);
    let tokens: Vec<(String, String)> = outputs
        .iter()
        .flat_map(|o| o.lines())
        .filter_map(|l| l.strip_prefix("ORCA_TOKEN="))
        .filter_map(|t| t.split_once(':'))
        .map(|(r, s)| (r.to_string(), s.to_string()))
        .collect();
    if am_root() {
        assert!(
            !tokens.is_empty(),
            "root's scan found no boot token: the test shows nothing"
        );
    }
    for (role, secret) in &tokens {
        assert!(
            !logs_in(&db, role, secret),
            "boot token of {role} still logs in"
        );
    }
    // The machines themselves went on working with the secrets that
    // replaced their boot tokens: each scan above ran and was recorded.
    assert_eq!(db.events_of_kind("succeeded"), 3);
}

#[test]
fn a_run_s_environment_holds_nothing_of_orca_s() {
    let (db, dir) = pool_test(
        r#"
[pipelines.env_local]
command = "env"
env = { MINE = "kept" }

[pipelines.env_worker]
command = "env"
placement = "worker:p"
env = { MINE = "kept" }
"#,
    );
    let mut s = pool_scheduler(
        &db,
        &dir,
        &[
            ("PGPASSWORD", "pg-secret"),
            ("PGPASSFILE", "/root/.pgpass"),
            ("PGSSLKEY", "/k"),
            ("PGSERVICEFILE", "/s"),
            ("ORCA_POOL_DATABASE_URL", &db.url),
            ("AWS_SECRET_ACCESS_KEY", "aws-secret"),
            ("AWS_SESSION_TOKEN", "aws-token"),
            ("ORCA_SOMETHING", "orca-setting"),
        ],
    );
    let runs = [db.queue("env_local"), db.queue("env_worker")];
    wait_until("both runs succeed", 60.0, || {
        runs.iter().all(|r| db.state(*r) == "succeeded")
    });
    for r in runs {
        let out = db.output(r);
        let env = text(&out);
        assert!(env.contains("MINE=kept"), "{env}");
        assert!(env.contains(&format!("ORCA_RUN_ID={r}")), "{env}");
        for line in env.lines() {
            let key = line.split('=').next().unwrap_or("");
            let allowed = ["ORCA_RUN_ID", "ORCA_RUN_START", "ORCA_PIPELINE"];
            assert!(
                !key.starts_with("ORCA_") || allowed.contains(&key),
                "run {r} got {line}"
            );
            assert!(!key.starts_with("PG"), "run {r} got {line}");
            assert!(!key.starts_with("AWS_"), "run {r} got {line}");
        }
        for secret in ["pg-secret", "aws-secret", "aws-token", OWNER_PASSWORD] {
            assert!(!env.contains(secret), "run {r} got {secret}:\n{env}");
        }
    }
    s.stop();
}

#[test]
fn no_log_level_prints_a_secret() {
    let (db, dir) = pool_test(
        r#"
[pipelines.job]
command = "echo ran"
placement = "worker:p"
env = { API_KEY = "pipeline-env-secret-value" }
"#,
    );
    let mut s = pool_scheduler(&db, &dir, &[("RUST_LOG", "trace")]);
    let run = db.queue("job");
    wait_until("the run succeeds", 60.0, || db.state(run) == "succeeded");
    s.stop();
    let log = s.output();
    assert!(
        log.contains("TRACE") || log.contains("DEBUG") || log.contains("INFO"),
        "{log}"
    );
    for secret in [
        "pipeline-env-secret-value",
        OWNER_PASSWORD,
        "SCRAM-SHA-256$",
    ] {
        assert!(!log.contains(secret), "the log has {secret}:\n{log}");
    }
}

#[test]
fn long_lived_processes_are_undumpable_and_their_environ_shows_no_secret() {
    use std::os::unix::fs::MetadataExt;
    let dir = TempDir::new();
    let root = am_root();
    for args in [
        vec!["scheduler"],
        vec!["worker", "--pool", "p"],
        vec!["ec2-serve", "i-1", "1", "1"],
        vec!["pool-wait", "i-1", "1", "1"],
        vec!["pool-next", "i-1", "1", "1", "5"],
    ] {
        // As root, the process runs as nobody: a dumpable process's /proc
        // files are its own user's, a non-dumpable one's root's.
        let mut c = if root {
            let mut c = std::process::Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", bin()]);
            c
        } else {
            std::process::Command::new(bin())
        };
        c.args(&args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env(
                "ORCA_DATABASE_URL",
                "postgres://u:url-secret-pw@127.0.0.1:1/x",
            )
            .env("ORCA_TOKEN", "orca_m_x_1:token-secret")
            .env("PGPASSWORD", "pg-secret")
            .stdin(std::process::Stdio::null());
        let p = Proc::spawn(c, &dir.path(&format!("{}.log", args[0])));
        let pid = p.pid();
        wait_until(&format!("orca {} guards itself", args[0]), 15.0, || {
            let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
                return !root; // not root: unreadable to us is the point
            };
            let env = text(&env);
            let owner = std::fs::metadata(format!("/proc/{pid}/environ"))
                .map(|m| m.uid())
                .unwrap_or(u32::MAX);
            env.contains("ORCA_TOKEN=")
                && !env.contains("url-secret-pw")
                && !env.contains("token-secret")
                && !env.contains("pg-secret")
                && (!root || owner == 0)
        });
        assert!(alive(pid), "orca {:?} exited: {}", args, p.output());
    }
}

#[test]
fn a_boot_token_is_replaced_at_the_first_login_and_a_lost_rename_is_recovered() {
    let (db, dir) =
        pool_test("[pipelines.job]\ncommand = \"echo ran\"\nplacement = \"worker:p\"\n");
    let role = hand_machine(&db, "p", "rot", "boot-secret");
    let file = dir.path("token");
    let env = [("ORCA_TOKEN_FILE", file.to_str().unwrap())];
    let mut w = hand_worker_with(&db, &dir, "p", &role, "boot-secret", &env);
    wait_until("the token file holds the new secret", 20.0, || {
        std::fs::read_to_string(&file).is_ok_and(|t| t.starts_with(&format!("{role}:")))
    });
    assert!(
        !logs_in(&db, &role, "boot-secret"),
        "the boot token still logs in"
    );
    let token = std::fs::read_to_string(&file).unwrap();
    let (_, secret) = token.split_once(':').unwrap();
    assert!(logs_in(&db, &role, secret));
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    let run = db.queue("job");
    wait_until("the worker runs on the new secret", 30.0, || {
        db.state(run) == "succeeded"
    });
    w.signal(libc::SIGTERM);
    assert_eq!(w.wait(30.0).code(), Some(0), "{}", w.output());
    // A worker that ended after the database took a new secret but before
    // the rename: the next one starts from the boot token and `token.new`.
    std::fs::rename(&file, dir.path("token.new")).unwrap();
    let mut w = hand_worker_with(&db, &dir, "p", &role, "boot-secret", &env);
    let run = db.queue("job");
    wait_until("the next worker logs in with the replacement", 30.0, || {
        db.state(run) == "succeeded"
    });
    assert_eq!(std::fs::read_to_string(&file).unwrap(), token);
    assert!(!dir.path("token.new").exists());
    w.signal(libc::SIGTERM);
    w.wait(30.0);
}

/// Runs `script` (a machine script of scripts/) as EC2 user-data would, with
/// a stand-in `orca` that exits 0 at once and an `iptables` that records
/// its arguments; what iptables was asked, and the script's stderr.
pub fn machine_script_with_fake_iptables(script: &str, env: &[(&str, &str)]) -> (String, String) {
    let dir = TempDir::new();
    let log = dir.path("iptables.log");
    let iptables = dir.write(
        "iptables",
        &format!(
            "#!/bin/sh\necho \"$*\" >> {}\n[ \"$1\" = -C ] && exit 1\nexit 0\n",
            log.display()
        ),
    );
    let orca = dir.write("orca", "#!/bin/sh\nexit 0\n");
    for f in [&iptables, &orca] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", dir.0.display());
    let out = std::process::Command::new("sh")
        .arg(machine_script(&dir, script))
        .env_clear()
        .env("PATH", path)
        .env("ORCA_BIN", &orca)
        .env("ORCA_TOKEN_FILE", dir.path("token/token"))
        .env("ORCA_SHUTDOWN", "true")
        .env("ORCA_INSTANCE", "i")
        .env("ORCA_RUN", "1")
        .env("ORCA_START", "1")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(out.status.success(), "{script}: {}", text(&out.stderr));
    (
        std::fs::read_to_string(&log).unwrap_or_default(),
        text(&out.stderr),
    )
}

/// On EC2 (the provider's user-data sets ORCA_BLOCK_METADATA) a pool
/// machine's and a run instance's runs can't reach the metadata service,
/// which serves the instance profile's credentials: both scripts reject
/// ORCA_RUN_AS's packets to it. Elsewhere (the local provider) they leave
/// the host's firewall alone; runs as the script's own user are said to
/// reach it.
#[test]
fn ec2_machines_keep_their_runs_from_the_metadata_service() {
    let rule = "-A OUTPUT -m owner --uid-owner nobody -d 169.254.169.254 -j REJECT";
    for script in ["boot.sh", "instance.sh"] {
        let (asked, _) = machine_script_with_fake_iptables(
            script,
            &[("ORCA_BLOCK_METADATA", "1"), ("ORCA_RUN_AS", "nobody")],
        );
        assert!(asked.lines().any(|l| l == rule), "{script}: {asked}");
        let (asked, _) = machine_script_with_fake_iptables(script, &[("ORCA_RUN_AS", "nobody")]);
        assert_eq!(asked, "", "{script} without ORCA_BLOCK_METADATA");
        let (asked, said) = machine_script_with_fake_iptables(
            script,
            &[("ORCA_BLOCK_METADATA", "1"), ("ORCA_RUN_AS", "")],
        );
        assert_eq!(asked, "", "{script}");
        assert!(
            said.contains("can reach the metadata service"),
            "{script}: {said}"
        );
    }
}

/// A scheduler running as root with no `ORCA_RUN_AS` runs pipelines as
/// root: it says so once, at start, naming the setting and the page; with
/// `ORCA_RUN_AS` it says nothing of it.
#[test]
fn a_root_scheduler_without_run_as_warns_once() {
    if !am_root() {
        eprintln!("skipped: the warning is for a scheduler running as root");
        return;
    }
    let (db, dir) = setup("[pipelines.a]\ncommand = \"true\"\n");
    for (run_as, warned) in [("", 1), ("nobody", 0)] {
        let run = db.queue("a");
        let mut s = db.scheduler(&dir, &[("ORCA_RUN_AS", run_as)]);
        // Past its start and a few ticks on: the run ran.
        s.wait_for("the run to succeed", 60.0, || db.state(run) == "succeeded");
        let log = s.output();
        let said: Vec<&str> = log.lines().filter(|l| l.contains("ORCA_RUN_AS")).collect();
        assert_eq!(said.len(), warned, "ORCA_RUN_AS={run_as:?}: {log}");
        for line in said {
            assert!(
                line.contains("WARN") && line.contains("root") && line.contains("docs/security.md"),
                "{line}"
            );
        }
        s.stop();
    }
}
