//! The set-up an operator follows (`docs/setup.md`, `docs/aws.md`, `make
//! install`) does what the pages say: their SQL, `pg_hba.conf` lines and IAM
//! policy are taken from the pages themselves, so the pages can't drift.

use crate::harness::*;
use std::process::Command;

/// The text of `path` in the repository.
pub(crate) fn repo_file(path: &str) -> String {
    let full = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

/// Runs `sql` (a page's block) with psql against `url`, as an
/// administrator would: stopping at the first error, which fails the test.
pub(crate) fn psql(url: &str, sql: &str) {
    let dir = TempDir::new();
    let file = dir.write("block.sql", sql);
    let out = Command::new("psql")
        .args([url, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", &file])
        .output()
        .expect("psql");
    assert!(
        out.status.success(),
        "the page's SQL runs as written: {}",
        text(&out.stderr)
    );
}

/// The fenced blocks of `lang` (`""`: none given) in a Markdown page.
pub(crate) fn blocks(page: &str, lang: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in page.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut current, fence) {
            (None, Some(tag)) => current = Some((tag.trim().to_string(), String::new())),
            (Some(_), Some(_)) => {
                let (tag, body) = current.take().unwrap();
                if tag == lang {
                    out.push(body);
                }
            }
            (Some((_, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    out
}

/// The `pg_hba.conf` lines of docs/setup.md (the block whose lines start
/// with `hostssl`), made to fit a cluster on 127.0.0.1 without TLS.
fn hba_lines(page: &str) -> Vec<String> {
    let block = blocks(page, "")
        .into_iter()
        .find(|b| b.contains("hostssl"))
        .expect("docs/setup.md has a pg_hba.conf block");
    block
        .lines()
        .filter(|l| l.starts_with("hostssl"))
        .map(|l| {
            let l = l.split('#').next().unwrap();
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 5, "a pg_hba.conf line of five fields: {l}");
            format!("host {} {} 127.0.0.1/32 {}", f[1], f[2], f[4])
        })
        .collect()
}

fn can_log_in(url: &str) -> Result<(), String> {
    postgres::Client::connect(url, postgres::NoTls)
        .map(|_| ())
        .map_err(|e| format!("{e}: {:?}", e.as_db_error().map(|d| d.code().code())))
}

/// docs/setup.md's SQL, run by a superuser on a fresh cluster with its
/// `pg_hba.conf` lines, gives a role that can `orca migrate` and run orca,
/// whose machine and instance logins get in, while a role that is neither is
/// refused and orca's own role needs its password.
#[test]
fn the_setup_page_makes_a_database_orca_runs_on() {
    let page = repo_file("docs/setup.md");
    let cluster = Cluster::new("password_encryption = 'scram-sha-256'");
    cluster.start();
    let sql = blocks(&page, "sql");
    assert_eq!(sql.len(), 1, "docs/setup.md has one SQL block");
    psql(
        &cluster.url(),
        &sql[0].replace("change-me", "orca-setup-pw"),
    );
    let mut admin = connect(&cluster.url());

    let hba = format!(
        "local all postgres trust\nhost all postgres 127.0.0.1/32 trust\n{}\n",
        hba_lines(&page).join("\n")
    );
    let hba_path = cluster.dir.join("data/pg_hba.conf");
    std::fs::write(&hba_path, hba).unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    // Reloading is asynchronous: wait for the new rules to refuse a stranger.
    admin
        .batch_execute("CREATE ROLE stranger LOGIN PASSWORD 'stranger-pw'")
        .unwrap();
    let port = cluster.port();
    let url = |user: &str, pw: &str| format!("postgres://{user}:{pw}@127.0.0.1:{port}/orca");
    wait_until("pg_hba.conf reloaded", 30.0, || {
        can_log_in(&url("stranger", "stranger-pw")).is_err()
    });

    let orca = url("orca", "orca-setup-pw");
    let out = Command::new(bin())
        .arg("migrate")
        .env("ORCA_DATABASE_URL", &orca)
        .output()
        .unwrap();
    assert!(out.status.success(), "orca migrate: {}", text(&out.stderr));
    // It names the stack, the `orca-stack` tag docs/aws.md's policy wants.
    let stack: String = connect(&orca)
        .query_one("SELECT id FROM orca.stack", &[])
        .unwrap()
        .get(0);
    assert!(
        text(&out.stdout)
            .lines()
            .any(|l| l == format!("stack {stack}")),
        "{}",
        text(&out.stdout)
    );
    let out = Command::new(bin())
        .args(["runs"])
        .env("ORCA_DATABASE_URL", &orca)
        .output()
        .unwrap();
    assert!(out.status.success(), "orca runs: {}", text(&out.stderr));
    assert!(
        can_log_in(&url("orca", "wrong")).is_err(),
        "orca's role logs in with its password only"
    );

    // Logins as the scheduler makes them, in each group the page lets in.
    let mut c = connect(&orca);
    for (login, group) in [("m_setup", "orca_worker"), ("i_setup", "orca_instance")] {
        c.execute(
            "SELECT orca.login_role_make($1, $2, $3)",
            &[&login, &"login-pw", &group],
        )
        .unwrap();
        can_log_in(&url(login, "login-pw")).unwrap_or_else(|e| panic!("{login} ({group}): {e}"));
    }
    let refused = can_log_in(&url("stranger", "stranger-pw")).unwrap_err();
    assert!(refused.contains("28000"), "no pg_hba.conf line: {refused}");
}

/// docs/aws.md's policy is valid JSON and allows every AWS action orca's
/// code calls, and the table above it names them all.
#[test]
fn the_aws_page_policy_allows_every_call_orca_makes() {
    let page = repo_file("docs/aws.md");
    let json = blocks(&page, "json");
    assert_eq!(
        json.len(),
        2,
        "docs/aws.md has a policy and its tighter form"
    );
    for policy in &json {
        every_call_allowed(&page, policy);
    }
    assert!(
        json[1].contains("\"ec2:InstanceType\"") && json[1].contains("subnet/subnet-"),
        "the tighter form names types and subnets"
    );
}

/// `policy` is valid JSON, allows every AWS action orca's code calls, and
/// `page`'s table names them all.
fn every_call_allowed(page: &str, policy: &str) {
    let policy: serde_json::Value = serde_json::from_str(policy).expect("the policy is JSON");
    let mut allowed = Vec::new();
    for s in policy["Statement"].as_array().expect("statements") {
        assert_eq!(s["Effect"], "Allow");
        match &s["Action"] {
            serde_json::Value::String(a) => allowed.push(a.clone()),
            serde_json::Value::Array(a) => {
                allowed.extend(a.iter().map(|v| v.as_str().unwrap().to_string()))
            }
            other => panic!("an Action: {other}"),
        }
    }

    // Every file of src/aws (DescribeImages is in images.rs, not mod.rs).
    let dir = format!("{}/src/aws", env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    files.sort();
    assert!(files.len() >= 2, "src/aws's files: {files:?}");
    let code: String = files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let mut called: Vec<String> = code
        .match_indices("self.call(")
        .filter_map(|(i, m)| {
            let rest = code[i + m.len()..].trim_start().strip_prefix('"')?;
            Some(format!("ec2:{}", &rest[..rest.find('"')?]))
        })
        .collect();
    assert!(called.len() >= 5, "found orca's EC2 calls: {called:?}");
    if code.contains("GetAuthorizationToken") {
        called.push("ecr:GetAuthorizationToken".into());
    }
    if code.contains("TagSpecification") {
        called.push("ec2:CreateTags".into());
    }
    if code.contains("IamInstanceProfile") {
        called.push("iam:PassRole".into());
    }
    if code.contains("InstanceMarketOptions") {
        // Spot: EC2 makes its service-linked role on orca's behalf, for
        // spot.amazonaws.com only.
        called.push("iam:CreateServiceLinkedRole".into());
        assert!(
            policy["Statement"].as_array().unwrap().iter().any(|s| {
                s["Action"] == "iam:CreateServiceLinkedRole"
                    && s["Condition"]["StringEquals"]["iam:AWSServiceName"] == "spot.amazonaws.com"
            }),
            "docs/aws.md's policy limits iam:CreateServiceLinkedRole to spot"
        );
    }
    if repo_file("src/pools/registry.rs").contains("/blobs/") {
        called.extend([
            "ecr:BatchGetImage".into(),
            "ecr:GetDownloadUrlForLayer".into(),
        ]);
    }
    for action in &called {
        assert!(
            allowed.contains(action),
            "docs/aws.md's policy lacks {action}"
        );
        assert!(
            page.contains(&format!("`{action}`")),
            "docs/aws.md's table lacks {action}"
        );
    }
}

/// `make install` with DESTDIR and PREFIX puts the binary and the
/// scheduler's launchers where the README says, pointing at that prefix.
#[test]
fn make_install_honours_destdir_and_prefix() {
    let dir = TempDir::new();
    let dest = dir.path("root");
    let out = Command::new("make")
        .args([
            "-s",
            "install",
            &format!("BIN={}", bin()),
            &format!("DESTDIR={}", dest.display()),
            "PREFIX=/opt/orca",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("make");
    assert!(out.status.success(), "make install: {}", text(&out.stderr));
    let installed = dest.join("opt/orca/bin/orca");
    let v = Command::new(&installed).arg("--version").output().unwrap();
    assert!(text(&v.stdout).starts_with("orca "), "{}", text(&v.stdout));
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&installed), 0o755);
    let unit = dest.join("etc/systemd/system/orca-scheduler.service");
    let loop_ = dest.join("opt/orca/share/orca/user-data.sh");
    assert_eq!(mode(&unit), 0o644);
    assert_eq!(mode(&loop_), 0o755);
    for f in [&unit, &loop_] {
        let t = std::fs::read_to_string(f).unwrap();
        assert!(t.contains("/opt/orca/bin/orca"), "{}", f.display());
        assert!(!t.contains("/usr/local/bin/orca"), "{}", f.display());
    }

    // Bad input: one line, exit 2, nothing written.
    let make = |args: &[&str]| {
        Command::new("make")
            .args(["-s", "install"])
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("make")
    };
    let bad_dest = dir.path("bad");
    let dest_arg = format!("DESTDIR={}", bad_dest.display());
    let bin_arg = format!("BIN={}", bin());
    let out = make(&[&bin_arg, &dest_arg, "PREFIX=/opt/my orca"]);
    assert!(!out.status.success(), "a PREFIX with a space");
    assert!(
        text(&out.stderr).contains("PREFIX must be"),
        "{}",
        text(&out.stderr)
    );
    let out = make(&["BIN=/nonexistent/orca", &dest_arg]);
    assert!(
        text(&out.stderr).contains("run `make static` first"),
        "{}",
        text(&out.stderr)
    );
    assert!(!bad_dest.exists(), "nothing installed from bad input");
}

/// `orca migrate` names each of docs/security.md's hardening steps still
/// missing on its server, and none once the page's SQL has run: on a
/// cluster of its own, whose `postgres` and `template1` logins may reach.
#[test]
fn migrate_says_which_hardening_steps_are_missing() {
    let cluster = Cluster::new("");
    cluster.start();
    let db = TestDb::unhardened_on(&cluster.url());
    let migrate = || {
        let out = db.run(&["migrate"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stderr)
    };
    let before = migrate();
    for step in [
        "machine logins may take advisory locks",
        "machine logins may make large objects",
        "machine logins may connect to other databases of this server, where orca doesn't watch them: postgres, template1;",
    ] {
        assert!(before.contains(step), "{step}: {before}");
    }
    let version: i32 = db.one("SELECT current_setting('server_version_num')::int");
    harden(&with_db(&cluster.url(), db.name()));
    let after = migrate();
    let left: Vec<&str> = after
        .lines()
        .filter(|l| l.starts_with("orca: warning:"))
        .collect();
    if version >= 160000 {
        assert!(left.is_empty(), "{after}");
    } else {
        assert_eq!(left.len(), 1, "only the server's version: {after}");
        assert!(left[0].contains("before 16"), "{after}");
    }
    // A step undone is named again.
    db.admin_here(&format!(
        "REVOKE EXECUTE ON FUNCTION pg_advisory_lock(bigint) FROM {OWNER}"
    ));
    assert!(
        migrate().contains("orca's role may not execute pg_advisory_lock(bigint)"),
        "the missing grant"
    );
}

/// docs/setup.md's single-host `pg_hba.conf` lines (the block of `host`
/// lines on 127.0.0.1), alone on a fresh cluster with the page's SQL: the
/// scheduler gets in as orca's role, and a local pool machine, given the
/// page's `ORCA_POOL_DATABASE_URL`, logs in with its own login and runs a
/// run.
#[test]
fn the_single_host_lines_let_local_machines_in() {
    let page = repo_file("docs/setup.md");
    let block = blocks(&page, "")
        .into_iter()
        .find(|b| b.contains("+orca_worker    127.0.0.1/32"))
        .expect("docs/setup.md's single-host lines");
    let lines: Vec<String> = block
        .lines()
        .filter(|l| l.starts_with("host "))
        .map(|l| l.split('#').next().unwrap().trim().to_string())
        .collect();
    assert_eq!(lines.len(), 3, "{block}");
    let cluster = Cluster::new("password_encryption = 'scram-sha-256'");
    cluster.start();
    psql(
        &cluster.url(),
        &blocks(&page, "sql")[0].replace("change-me", "orca-setup-pw"),
    );
    let dir = TempDir::new();
    let mut admin = connect(&cluster.url());
    std::fs::write(
        cluster.dir.join("data/pg_hba.conf"),
        format!(
            "local all postgres trust\nhost all postgres 127.0.0.1/32 trust\n{}\n",
            lines.join("\n")
        ),
    )
    .unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    admin
        .batch_execute("CREATE ROLE stranger LOGIN PASSWORD 'stranger-pw'")
        .unwrap();
    let port = cluster.port();
    let url = |user: &str, pw: &str| format!("postgres://{user}:{pw}@127.0.0.1:{port}/orca");
    wait_until("pg_hba.conf reloaded", 30.0, || {
        can_log_in(&url("stranger", "stranger-pw")).is_err()
    });
    let orca = url("orca", "orca-setup-pw");
    // The page's address for machines, on this cluster's port.
    let pool_url = page
        .split("ORCA_POOL_DATABASE_URL='")
        .nth(1)
        .and_then(|rest| rest.split('\'').next())
        .expect("the page's ORCA_POOL_DATABASE_URL")
        .replace(":5432/", &format!(":{port}/"));
    let run = |args: &[&str]| {
        Command::new(bin())
            .args(args)
            .env("ORCA_DATABASE_URL", &orca)
            .output()
            .unwrap()
    };
    assert!(run(&["migrate"]).status.success());
    let stack: String = connect(&orca)
        .query_one("SELECT id FROM orca.stack", &[])
        .unwrap()
        .get(0);
    let _machines = Machines(stack);
    let toml = dir.write(
        "orca.toml",
        "[pools.p]\ntypes = [{ type = \"small\", wait = 0 }]\nlocations = [\"here\"]\n\
         [pipelines.job]\ncommand = \"echo on a machine\"\nplacement = \"worker:p\"\n",
    );
    assert!(run(&["register", "-c", &toml]).status.success());
    let mut s = Command::new(bin());
    s.arg("scheduler")
        .env("ORCA_DATABASE_URL", &orca)
        .env("ORCA_POOL_DATABASE_URL", &pool_url)
        .env("ORCA_TICK_SECONDS", "0.2")
        .env("ORCA_POOL_SCALE_SECONDS", "0.3")
        .env("ORCA_POOL_GROW_AFTER", "0")
        .env("ORCA_POOL_TRY_SECONDS", "0.3");
    let mut s = Proc::spawn(s, &dir.path("scheduler.log"));
    let id: i64 = text(&run(&["run", "job"]).stdout).trim().parse().unwrap();
    let mut c = connect(&orca);
    let state = |c: &mut postgres::Client| -> (String, Option<i64>) {
        let r = c
            .query_one("SELECT state, machine FROM orca.runs WHERE id = $1", &[&id])
            .unwrap();
        (r.get(0), r.get(1))
    };
    s.wait_for("the run succeeds on a machine", 90.0, || {
        state(&mut c).0 == "succeeded"
    });
    assert!(state(&mut c).1.is_some(), "it ran on a pool machine");
    s.stop();
}

/// Ends a stack's local machines when dropped (they outlive a scheduler,
/// by design), whatever the test's outcome.
struct Machines(String);

impl Drop for Machines {
    fn drop(&mut self) {
        end_local_machines(&self.0);
    }
}
