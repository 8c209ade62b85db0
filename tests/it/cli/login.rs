//! The database a command is pointed at: unreachable, not migrated, a
//! login refused, a URL with no password: each said in one line that never
//! holds the password, at once.

use super::*;

#[test]
fn an_unreachable_database_is_named_without_its_password() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // The port is closed again once the listener is dropped.
    let url = format!("postgres://orca:hunter2secret@127.0.0.1:{port}/orca");
    let started = std::time::Instant::now();
    let out = std::process::Command::new(bin())
        .args(["runs", "--wait", "1"])
        .env("ORCA_DATABASE_URL", &url)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    assert!(!err.contains("hunter2secret"), "{err}");
    assert!(
        started.elapsed().as_secs_f64() < 8.0,
        "--wait 1 took {:?}",
        started.elapsed()
    );
}

/// The one line commands that need the schema print before `orca migrate`.
const NO_SCHEMA: &str = "orca: the database has no orca schema yet: run `orca migrate`";

#[test]
fn before_migrate_every_command_says_to_migrate() {
    let db = TestDb::empty_on(&admin_url());
    let dir = TempDir::new();
    let config = dir.write("orca.toml", "[pipelines.a]\ncommand = \"true\"\n");
    for args in [
        vec!["runs"],
        vec!["runs", "--json"],
        vec!["pools"],
        vec!["events"],
        vec!["schedulers"],
        vec!["instances"],
        vec!["register", "-c", &config],
        vec!["run", "a"],
        vec!["run", "a", "--wait"],
        vec!["logs", "1"],
        vec!["logs", "-f", "1"],
        vec!["cancel", "1"],
        vec!["pause", "a"],
        vec!["deploy", "check"],
        vec!["deploy", "wait"],
        vec!["scheduler", "drain"],
    ] {
        let out = db.run(&args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "orca {args:?}: {err}");
        assert_eq!(err.trim_end(), NO_SCHEMA, "orca {args:?}");
    }
    // The long-lived ones say so too, and exit.
    let mut scheduler = db.scheduler(&dir, &[]);
    assert_eq!(scheduler.wait(60.0).code(), Some(1));
    assert!(
        scheduler.output().lines().any(|l| l == NO_SCHEMA),
        "{}",
        scheduler.output()
    );
    let role = machine_role("noschema");
    db.plain_login_role(&role, "pw-noschema");
    let mut worker = hand_worker(&db, &dir, "p", &role, "pw-noschema");
    assert_eq!(worker.wait(60.0).code(), Some(1));
    assert!(
        worker.output().lines().any(|l| l == NO_SCHEMA),
        "{}",
        worker.output()
    );
    // Migrated, the same commands work.
    db.ok(&["migrate"]);
    db.ok(&["runs"]);
}

/// `orca runs --wait 120` with `url`: its output, and how long it took.
fn runs_with(url: &str) -> (std::process::Output, f64) {
    let started = std::time::Instant::now();
    let out = orca_with_url(&["runs", "--wait", "120"], url, 60.0);
    (out, started.elapsed().as_secs_f64())
}

#[test]
fn a_refused_login_exits_at_once_naming_why_and_never_its_password() {
    let db = TestDb::new();
    let wrong_password = with_user(&db.url, OWNER, "wrong-pw-hunter2");
    let no_such_role = with_user(&db.url, "orca_no_such_role", "role-pw-hunter3");
    let no_such_db = with_db(&db.url, "orca_no_such_database");
    for (url, secret, why) in [
        (
            &wrong_password,
            "wrong-pw-hunter2",
            "password authentication failed",
        ),
        // scram-sha-256 answers an unknown role as a wrong password.
        (&no_such_role, "role-pw-hunter3", "orca_no_such_role"),
        (&no_such_db, OWNER_PASSWORD, "does not exist"),
    ] {
        let (out, took) = runs_with(url);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            took < 30.0,
            "gave up after {took:.1}s, not at once (--wait 120)"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(
            err.contains("refused the login") && err.contains(why),
            "{err}"
        );
        assert!(!err.contains("can't reach"), "{err}");
        assert!(!err.contains(secret) && out.stdout.is_empty(), "{err}");
    }
}

/// A URL with no password, for a server that asks for one, is bad input:
/// one line and exit 2 at once, for a one-shot command and the scheduler
/// alike, not ten seconds of "can't reach". (No password against a server
/// that asks for none still works: `outage::tls_require_and_verify_full`.)
#[test]
fn a_url_with_no_password_for_a_server_that_asks_is_bad_input() {
    let db = TestDb::new();
    let url = db.url.replacen(&format!(":{OWNER_PASSWORD}@"), "@", 1);
    assert_ne!(url, db.url);
    let (out, took) = runs_with(&url);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        took < 30.0,
        "gave up after {took:.1}s, not at once (--wait 120)"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.starts_with("orca: ")
            && err.contains("asked for a password and ORCA_DATABASE_URL has none"),
        "{err}"
    );
    let dir = TempDir::new();
    let mut s = Proc::spawn(
        {
            let mut c = db.orca(&["scheduler"]);
            c.env("ORCA_DATABASE_URL", &url);
            c
        },
        &dir.path("scheduler.log"),
    );
    let status = s.wait(60.0);
    let log = s.output();
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(
        log.contains("asked for a password and ORCA_DATABASE_URL has none")
            && !log.contains("can't be reached"),
        "{log}"
    );
}

#[test]
fn run_wait_and_logs_follow_exit_at_once_when_their_login_is_refused() {
    let (db, dir) = setup("[pipelines.a]\ncommand = \"true\"\n");
    let role = format!("orca_op_{}", std::process::id());
    let secret = "op-pw-hunter4";
    db.owner_member_role(&role, secret);
    let url = with_user(&db.url, &role, secret);
    let start = |args: &[&str]| {
        let name = args.join("_").replace(['/', ' '], "_");
        let (out, err) = (
            dir.path(&format!("{name}.out")),
            dir.path(&format!("{name}.err")),
        );
        let child = db
            .orca(args)
            .env("ORCA_DATABASE_URL", &url)
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        Running { child, out, err }
    };
    // Queued, and no scheduler: both wait as long as the run does.
    let mut wait = start(&["run", "a", "--wait"]);
    wait_until("run --wait printed the run's id", 60.0, || {
        wait.stdout().ends_with('\n')
    });
    let id = wait.stdout().trim().to_string();
    let mut follow = start(&["logs", "-f", &id]);
    wait_until(
        "both follow the run on a session of their own",
        60.0,
        || {
            db.one::<i64>(&format!(
                "SELECT count(DISTINCT application_name) FROM pg_stat_activity
             WHERE usename = '{role}' AND application_name IN ('orca run --wait', 'orca logs -f')"
            )) == 2
        },
    );
    // The password changes; sessions the role has are ended, again each
    // round (one that logged in just before the change may not show yet).
    db.admin(&format!("ALTER ROLE \"{role}\" PASSWORD 'rotated'"));
    let terminate =
        format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'");
    for (who, r) in [("run --wait", &mut wait), ("logs -f", &mut follow)] {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while r.running() {
            assert!(
                std::time::Instant::now() < deadline,
                "{who} still runs 30 s after its login was refused: {}",
                r.stderr()
            );
            db.admin(&terminate);
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let status = r.wait(1.0);
        let err = r.stderr();
        assert_eq!(status.code(), Some(1), "{who}: {err}");
        let last = err.trim_end().lines().last().unwrap_or("");
        assert!(
            last.starts_with("orca: ")
                && last.contains("refused the login")
                && last.contains("password authentication failed"),
            "{who}: {err}"
        );
        assert!(
            !err.contains(secret) && !err.contains("rotated"),
            "{who}: {err}"
        );
    }
}
