//! The instance's side of the warm pool: `orca pool-next` and
//! `orca pool-wait` as real processes with an instance's own credentials,
//! the test playing the scheduler's part in `orca.instances`.

use std::process::Command;

use crate::harness::*;

/// An instance's login role and a running run of a pipeline, with the
/// instance's row for it (head, joined). Returns the run's id.
pub(crate) fn setup(db: &TestDb, dir: &TempDir, login: &str, instance: &str) -> i64 {
    serving(db, dir, login, instance, "head", "true", "", true)
}

/// `orca ARGS` as instance `login`.
pub(crate) fn as_instance(
    db: &TestDb,
    dir: &TempDir,
    login: &str,
    args: &[&str],
    extra: &[(&str, &str)],
) -> Proc {
    let mut c = Command::new(bin());
    c.args(args)
        .env("ORCA_DATABASE_URL", db.url_without_user())
        .env("ORCA_TOKEN", format!("{login}:pw"));
    for (k, v) in extra {
        c.env(k, v);
    }
    Proc::spawn(c, &dir.path(&format!("{}-{login}.log", args[0])))
}

fn state_of(db: &TestDb, instance: &str, run: i64) -> String {
    db.client()
        .query_one(
            "SELECT state FROM orca.instances WHERE instance = $1 AND run = $2 ORDER BY id DESC LIMIT 1",
            &[&instance, &run],
        )
        .unwrap()
        .get(0)
}

/// The scheduler's hand-over: the idle row ended and a `pooled` row for the
/// next run, in one transaction. Returns the new run.
pub(crate) fn hand_over(db: &TestDb, instance: &str, login: &str, role: &str, fresh: bool) -> i64 {
    let mut c = db.client();
    let mut tx = c.transaction().unwrap();
    let next: i64 = tx
        .query_one(
            "INSERT INTO orca.runs (pipeline, state, start) VALUES ('job', 'running', 1) RETURNING id",
            &[],
        )
        .unwrap()
        .get(0);
    tx.execute(
        "UPDATE orca.instances SET state = 'ended', ended_at = now(), why = 'handed to the next run'
         WHERE instance = $1 AND ended_at IS NULL",
        &[&instance],
    )
    .unwrap();
    tx.execute(
        "INSERT INTO orca.instances (instance, run, start, role, login, state, address, fresh_code)
         VALUES ($1, $2, 1, $3, $4, 'pooled', '10.0.0.5', $5)",
        &[&instance, &next, &role, &login, &fresh],
    )
    .unwrap();
    tx.commit().unwrap();
    next
}

#[test]
fn pool_next_marks_idle_polls_and_takes_the_run_it_is_handed() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let login = format!("orca_i_next_{}", std::process::id());
    let run = setup(&db, &dir, &login, "i-1");
    let run_s = run.to_string();
    let mut p = as_instance(
        &db,
        &dir,
        &login,
        &["pool-next", "i-1", &run_s, "1", "60"],
        &[],
    );
    wait_until("the served row is idle and polled", 20.0, || {
        state_of(&db, "i-1", run) == "idle"
            && db.one::<bool>("SELECT now() - polled < interval '2 seconds' FROM orca.instances")
    });
    // Polled every second: the beat moves.
    let first: chrono::DateTime<chrono::Utc> = db.one("SELECT polled FROM orca.instances");
    wait_until("polled again", 10.0, || {
        db.one::<chrono::DateTime<chrono::Utc>>("SELECT polled FROM orca.instances") > first
    });
    let next = hand_over(&db, "i-1", &login, "worker", false);
    assert_eq!(p.wait(10.0).code(), Some(0), "{}", p.output());
    assert_eq!(p.output().trim(), format!("next {next} 1 10.0.0.5 0"));
    assert_eq!(state_of(&db, "i-1", next), "joined");
}

#[test]
fn pool_next_exits_1_when_shut_down_or_when_its_time_is_up() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let login = format!("orca_i_end_{}", std::process::id());
    let run = setup(&db, &dir, &login, "i-1");
    let run_s = run.to_string();
    let mut p = as_instance(
        &db,
        &dir,
        &login,
        &["pool-next", "i-1", &run_s, "1", "600"],
        &[],
    );
    wait_until("the served row is idle", 20.0, || {
        state_of(&db, "i-1", run) == "idle"
    });
    // The scheduler shuts the idle instance down: its row ends, no other.
    db.client()
        .execute(
            "UPDATE orca.instances SET state = 'ended', ended_at = now(), why = 'no demand'",
            &[],
        )
        .unwrap();
    assert_eq!(p.wait(10.0).code(), Some(1), "{}", p.output());
    assert!(p.output().trim().is_empty() || !p.output().contains("next "));
    // No run within `seconds` and the (shortened) minute more: exit 1.
    db.client()
        .execute(
            "INSERT INTO orca.instances (instance, run, start, role, login, state) VALUES ('i-2', $1, 1, 'head', $2, 'joined')",
            &[&run, &login],
        )
        .unwrap();
    let began = std::time::Instant::now();
    let mut q = as_instance(
        &db,
        &dir,
        &login,
        &["pool-next", "i-2", &run_s, "1", "1"],
        &[("ORCA_POOL_NEXT_GRACE_SECONDS", "1")],
    );
    assert_eq!(q.wait(20.0).code(), Some(1), "{}", q.output());
    assert!(
        began.elapsed().as_secs_f64() >= 2.0,
        "it gave up before its time"
    );
}

#[test]
fn pool_wait_ends_with_its_run_or_its_row() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let login = format!("orca_i_wait_{}", std::process::id());
    let run = setup(&db, &dir, &login, "i-1");
    let run_s = run.to_string();
    let mut p = as_instance(&db, &dir, &login, &["pool-wait", "i-1", &run_s, "1"], &[]);
    // It waits while the run runs.
    wait_until("pool-wait has connected", 20.0, || {
        db.one::<i64>(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = '{login}'"
        )) > 0
    });
    assert!(p.child.try_wait().unwrap().is_none());
    db.client()
        .execute(
            "UPDATE orca.runs SET state = 'succeeded' WHERE id = $1",
            &[&run],
        )
        .unwrap();
    assert_eq!(p.wait(10.0).code(), Some(0), "{}", p.output());
    // And when its row ends (the run is queued again elsewhere, say).
    db.client()
        .execute(
            "UPDATE orca.runs SET state = 'running' WHERE id = $1",
            &[&run],
        )
        .unwrap();
    let mut q = as_instance(&db, &dir, &login, &["pool-wait", "i-1", &run_s, "1"], &[]);
    wait_until("pool-wait has connected again", 20.0, || {
        db.one::<i64>(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = '{login}'"
        )) > 0
    });
    db.client()
        .execute(
            "UPDATE orca.instances SET ended_at = now(), state = 'ended'",
            &[],
        )
        .unwrap();
    assert_eq!(q.wait(10.0).code(), Some(0), "{}", q.output());
}

#[test]
fn an_instance_sees_only_its_own_rows() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let login = format!("orca_i_own_{}", std::process::id());
    let run = setup(&db, &dir, &login, "i-1");
    let other = format!("orca_i_other_{}", std::process::id());
    db.login_role(&other, "pw", "orca_instance");
    // Another login's pooled row for the same instance id is not taken.
    db.client()
        .execute(
            "INSERT INTO orca.instances (instance, run, start, role, login, state) VALUES ('i-1', $1, 1, 'worker', $2, 'pooled')",
            &[&run, &other],
        )
        .unwrap();
    let run_s = run.to_string();
    let mut p = as_instance(
        &db,
        &dir,
        &login,
        &["pool-next", "i-1", &run_s, "1", "0"],
        &[("ORCA_POOL_NEXT_GRACE_SECONDS", "2")],
    );
    assert_eq!(p.wait(20.0).code(), Some(1), "{}", p.output());
    assert!(!p.output().contains("next "));
    // And no table is open to it.
    let mut c = db.client_as(&login, "pw");
    refused(&mut c, "SELECT count(*) FROM orca.instances");
}

#[test]
fn a_database_restart_during_pool_next_changes_nothing() {
    let cluster = Cluster::new("");
    cluster.start();
    let db = TestDb::on(&cluster.url());
    let dir = TempDir::new();
    let login = format!("orca_i_restart_{}", std::process::id());
    let run = setup(&db, &dir, &login, "i-1");
    let run_s = run.to_string();
    let mut p = as_instance(
        &db,
        &dir,
        &login,
        &["pool-next", "i-1", &run_s, "1", "600"],
        &[],
    );
    wait_until("the served row is idle", 20.0, || {
        state_of(&db, "i-1", run) == "idle"
    });
    cluster.stop();
    // pool-next meets the outage (and says so), and rides it out.
    wait_until("pool-next finds the database gone", 20.0, || {
        p.output().contains("can't be reached")
    });
    assert!(
        p.child.try_wait().unwrap().is_none(),
        "pool-next exited during the outage"
    );
    cluster.start();
    let next = hand_over(&db, "i-1", &login, "worker", true);
    assert_eq!(p.wait(20.0).code(), Some(0), "{}", p.output());
    assert!(
        p.output().contains(&format!("next {next} 1 10.0.0.5 1")),
        "{}",
        p.output()
    );
}

#[test]
fn bad_arguments_are_one_line_and_exit_2() {
    for args in [
        vec!["pool-next", "i-1", "notanumber", "1", "60"],
        vec!["pool-next", "i-1", "5", "1"],
        vec!["pool-wait", "i-1"],
    ] {
        let out = Command::new(bin()).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
    // No token: one line, exit 2.
    let out = Command::new(bin())
        .args(["pool-wait", "i-1", "5", "1"])
        .env("ORCA_DATABASE_URL", "postgres://127.0.0.1:9/x")
        .env_remove("ORCA_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("ORCA_TOKEN"));
}

/// A pipeline with an `[ec2]` table of these services, a running run of it,
/// and instance `instance`'s row for it (`role`, head address, fresh flag).
#[allow(clippy::too_many_arguments)]
pub(crate) fn serving(
    db: &TestDb,
    dir: &TempDir,
    login: &str,
    instance: &str,
    role: &str,
    command: &str,
    ec2: &str,
    fresh: bool,
) -> i64 {
    serving_toml(
        db,
        dir,
        login,
        instance,
        role,
        &format!(
            "[pipelines.job]\ncommand = \"{command}\"\nplacement = \"ec2\"\n\n[pipelines.job.ec2]\ntype = \"small\"\nlocations = [\"here\"]\n{ec2}"
        ),
        fresh,
    )
}

/// [`serving`] with the whole config given (pipeline `job`).
fn serving_toml(
    db: &TestDb,
    dir: &TempDir,
    login: &str,
    instance: &str,
    role: &str,
    toml: &str,
    fresh: bool,
) -> i64 {
    db.register(dir, toml);
    db.login_role(login, "pw", "orca_instance");
    let mut c = db.client();
    let run: i64 = c
        .query_one(
            "INSERT INTO orca.runs (pipeline, state, start) VALUES ('job', 'running', 1) RETURNING id",
            &[],
        )
        .unwrap()
        .get(0);
    c.execute(
        "INSERT INTO orca.instances (instance, run, start, role, login, state, address, fresh_code)
         VALUES ($1, $2, 1, $3, $4, 'joined', '10.0.0.9', $5)",
        &[&instance, &run, &role, &login, &fresh],
    )
    .unwrap();
    run
}

#[test]
fn the_head_runs_the_driver_beside_its_service_and_records_the_outcome() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let (svc, updated) = (dir.path("svc"), dir.path("updated"));
    let login = format!("orca_i_head_{}", std::process::id());
    let run = serving(
        &db,
        &dir,
        &login,
        "i-1",
        "head",
        "echo driver of $ORCA_RUN_ID; exit 3",
        &format!(
            "head_service = \"sleep 300 & echo $! >> {}; wait\"\nupdate = \"touch {}\"\n",
            svc.display(),
            updated.display()
        ),
        true,
    );
    let run_s = run.to_string();
    let mut p = as_instance(&db, &dir, &login, &["ec2-serve", "i-1", &run_s, "1"], &[]);
    assert_eq!(p.wait(30.0).code(), Some(0), "{}", p.output());
    assert_eq!(db.state(run), "failed");
    let (code, out): (Option<i32>, Vec<u8>) = {
        let r = db
            .client()
            .query_one(
                "SELECT exit_code, output FROM orca.runs WHERE id = $1",
                &[&run],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(code, Some(3));
    assert!(text(&out).contains(&format!("driver of {run}")));
    assert!(updated.exists(), "a run's first start takes new code");
    wait_until("the head service is stopped", 10.0, || {
        !pids_in(&svc).is_empty() && pids_in(&svc).iter().all(|p| !alive(*p))
    });
}

#[test]
fn a_worker_runs_its_service_until_the_run_is_over() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let (addr, updated) = (dir.path("addr"), dir.path("updated"));
    let login = format!("orca_i_wsvc_{}", std::process::id());
    let run = serving(
        &db,
        &dir,
        &login,
        "i-2",
        "worker",
        "true",
        &format!(
            "worker_service = \"echo $ORCA_HEAD_ADDRESS $$ >> {}; exec sleep 300\"\nupdate = \"touch {}\"\n",
            addr.display(),
            updated.display()
        ),
        false,
    );
    let run_s = run.to_string();
    let mut p = as_instance(&db, &dir, &login, &["ec2-serve", "i-2", &run_s, "1"], &[]);
    // `>>` makes the file before echo writes its line: wait for the line.
    wait_until("the worker service runs", 20.0, || {
        std::fs::read_to_string(&addr).is_ok_and(|s| s.ends_with('\n'))
    });
    let line = std::fs::read_to_string(&addr).unwrap();
    let mut words = line.split_whitespace();
    assert_eq!(words.next(), Some("10.0.0.9"), "the head's address");
    let pid: i32 = words.next().unwrap().parse().unwrap();
    assert!(p.child.try_wait().unwrap().is_none());
    db.client()
        .execute(
            "UPDATE orca.runs SET state = 'succeeded' WHERE id = $1",
            &[&run],
        )
        .unwrap();
    assert_eq!(p.wait(20.0).code(), Some(0), "{}", p.output());
    wait_until("the worker service is stopped", 10.0, || !alive(pid));
    assert!(
        !updated.exists(),
        "a restarted run keeps its first start's code"
    );
}

#[test]
fn the_instance_script_serves_a_run_waits_warm_and_serves_the_next() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let served = dir.path("served");
    let login = format!("orca_i_script_{}", std::process::id());
    let run = serving(
        &db,
        &dir,
        &login,
        "i-1",
        "head",
        &format!("echo $ORCA_RUN_ID >> {}", served.display()),
        "",
        true,
    );
    let script = machine_script(&dir, "instance.sh");
    let mut c = Command::new("/bin/sh");
    c.arg(&script)
        .env("ORCA_DATABASE_URL", db.url_without_user())
        .env("ORCA_TOKEN", format!("{login}:pw"))
        .env("ORCA_INSTANCE", "i-1")
        .env("ORCA_TOKEN_FILE", dir.path("token"))
        .env("ORCA_RUN_AS", "")
        .env("ORCA_RUN", run.to_string())
        .env("ORCA_START", "1")
        .env("ORCA_EC2_POOL_SECONDS", "60")
        .env("ORCA_BIN", bin())
        .env("ORCA_SHUTDOWN", "true");
    let mut p = Proc::spawn(c, &dir.path("instance.log"));
    wait_until("run 1 is served and the instance is idle", 30.0, || {
        db.state(run) == "succeeded" && state_of(&db, "i-1", run) == "idle"
    });
    // Handed the next run (as its head): served, then idle again.
    let next = hand_over(&db, "i-1", &login, "head", true);
    wait_until("run 2 is served on the same instance", 30.0, || {
        db.state(next) == "succeeded" && state_of(&db, "i-1", next) == "idle"
    });
    assert_eq!(
        pids_in(&served),
        vec![run as i32, next as i32],
        "each run served once, in order"
    );
    // Shut down: its row ends with no other; the script ends.
    db.client()
        .execute(
            "UPDATE orca.instances SET state = 'ended', ended_at = now() WHERE ended_at IS NULL",
            &[],
        )
        .unwrap();
    assert_eq!(p.wait(20.0).code(), Some(0), "{}", p.output());
    assert!(p.output().contains("shutting down"));
}

#[test]
fn a_head_s_driver_that_escapes_its_session_and_ignores_sigterm_dies_at_its_timeout() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let _leftovers = KillLeftovers(dir.0.clone());
    let pids = dir.path("driver.pid");
    let login = format!("orca_i_esc_{}", std::process::id());
    let run = serving_toml(
        &db,
        &dir,
        &login,
        "i-1",
        "head",
        &format!(
            "[pipelines.job]\ncommand = {}\nplacement = \"ec2\"\ntimeout = 2\n\n\
             [pipelines.job.ec2]\ntype = \"small\"\nlocations = [\"here\"]\n",
            toml_str(&escapes_and_ignores_term(&pids.display().to_string()))
        ),
        false,
    );
    let run_s = run.to_string();
    let mut p = as_instance(
        &db,
        &dir,
        &login,
        &["ec2-serve", "i-1", &run_s, "1"],
        &[
            ("ORCA_TICK_SECONDS", "0.2"),
            ("ORCA_KILL_GRACE_SECONDS", "1"),
        ],
    );
    wait_until("the escaped sleep runs", 30.0, || {
        !pids_in(&pids).is_empty()
    });
    assert_eq!(p.wait(30.0).code(), Some(0), "{}", p.output());
    assert_eq!(db.state(run), "failed");
    let why: String = db.one(&format!("SELECT why FROM orca.runs WHERE id = {run}"));
    assert!(why.contains("timed out"), "{why}");
    wait_until("nothing the driver started is alive", 15.0, || {
        pids_in(&pids).iter().all(|p| !alive(*p))
    });
}

#[test]
fn pool_wait_ends_when_its_login_is_revoked_not_when_a_password_is_wrong() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let login = format!("orca_i_revoked_{}", std::process::id());
    let run = setup(&db, &dir, &login, "i-1");
    let run_s = run.to_string();
    // A wrong password (28P01) may be a misconfiguration: it waits on.
    let token = format!("{login}:guess");
    let mut guess = as_instance(
        &db,
        &dir,
        &format!("{login}-guess"),
        &["pool-wait", "i-1", &run_s, "1"],
        &[("ORCA_TOKEN", token.as_str())],
    );
    let mut p = as_instance(&db, &dir, &login, &["pool-wait", "i-1", &run_s, "1"], &[]);
    wait_until("pool-wait has connected", 20.0, || {
        db.one::<i64>(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = '{login}'"
        )) > 0
    });
    // Revoked (NOLOGIN, its session ended: 28000 once past the password):
    // the instance was removed, and its run is over for it.
    db.client()
        .execute("SELECT orca.machine_role_revoke($1)", &[&login])
        .unwrap();
    assert_eq!(p.wait(10.0).code(), Some(0), "{}", p.output());
    assert!(p.output().contains("revoked"), "{}", p.output());
    assert!(
        guess.child.try_wait().unwrap().is_none(),
        "a wrong password ended pool-wait: {}",
        guess.output()
    );
    guess.signal(libc::SIGKILL);
    let _ = guess.wait(10.0);
}
