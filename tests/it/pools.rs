//! Worker pools on the local provider: the autoscaler grows, walks types and
//! locations, shrinks and deletes strays; machines are real process groups
//! running the boot script and a real `orca worker` with credentials of its
//! own.

use std::process::Command;

use crate::harness::*;

/// A scheduler with the pool timing shortened; `extra` overrides.
pub fn pool_scheduler(db: &TestDb, dir: &TempDir, extra: &[(&str, &str)]) -> Proc {
    let mut env = vec![
        ("ORCA_POOL_SCALE_SECONDS", "0.3"),
        ("ORCA_POOL_GROW_AFTER", "0"),
        ("ORCA_POOL_TRY_SECONDS", "0.3"),
        ("ORCA_POOL_BOOT_SECONDS", "60"),
        ("ORCA_POOL_LOST_SECONDS", "30"),
    ];
    env.extend_from_slice(extra);
    db.scheduler(dir, &env)
}

/// Live machines of `pool`: (name, type, location).
pub fn live(db: &TestDb, pool: &str) -> Vec<(String, String, String)> {
    db.client()
        .query(
            "SELECT name, type, location FROM orca.pool_machines
             WHERE pool = $1 AND ended_at IS NULL ORDER BY id",
            &[&pool],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// How many machines `pool` ever had.
fn made(db: &TestDb, pool: &str) -> i64 {
    db.client()
        .query_one(
            "SELECT count(*) FROM orca.pool_machines WHERE pool = $1",
            &[&pool],
        )
        .unwrap()
        .get(0)
}

fn status(db: &TestDb, pool: &str) -> String {
    db.client()
        .query_one("SELECT status FROM orca.pools WHERE name = $1", &[&pool])
        .unwrap()
        .get(0)
}

/// The `ORCA_TOKEN` a live local machine booted with, read from its
/// environment (the test plays an attacker with the host's access).
fn token_of(stack: &str) -> Option<String> {
    let pid = *local_machines(stack).first()?;
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|&b| b == 0)
        .find_map(|kv| kv.strip_prefix(b"ORCA_TOKEN="))
        .map(|t| String::from_utf8_lossy(t).into_owned())
}

pub fn stack(db: &TestDb) -> String {
    let mut id = String::new();
    wait_until("the stack id is made", 20.0, || {
        match db
            .client()
            .query_opt("SELECT id FROM orca.stack", &[])
            .unwrap()
        {
            Some(r) => {
                id = r.get(0);
                true
            }
            None => false,
        }
    });
    id
}

#[test]
fn a_queued_run_grows_a_machine_that_runs_it_and_goes_when_idle() {
    let db = TestDb::new();
    let dir = TempDir::new();
    db.register(
        &dir,
        r#"
[pools.p]
provider = "local"
types = [{ type = "small", wait = 0 }]
locations = ["here"]
max_machines = 2
idle_seconds = 1

[pipelines.job]
command = "sleep 3; echo ran on $ORCA_PIPELINE"
placement = "worker:p"
"#,
    );
    let run = db.queue("job");
    let mut s = pool_scheduler(&db, &dir, &[("ORCA_POOL_GROW_AFTER", "2")]);
    let stack = stack(&db);
    wait_until("a machine is made", 30.0, || made(&db, "p") == 1);
    // Demand counts runs queued at least ORCA_POOL_GROW_AFTER (database clock).
    let waited: f64 = db.one(
        "SELECT extract(epoch FROM m.made_at - r.queued_at)::float8
         FROM orca.pool_machines m, orca.runs r WHERE r.id = (SELECT min(id) FROM orca.runs)",
    );
    assert!(waited >= 2.0, "made {waited}s after the run was queued");
    let mut token = None;
    wait_until("the machine's boot process is found", 20.0, || {
        token = token_of(&stack);
        token.is_some()
    });
    wait_until("orca pools shows it busy", 30.0, || {
        let shown = db.ok(&["pools"]);
        let row = shown.lines().find(|l| l.starts_with("p ")).unwrap_or("");
        row.split_whitespace().nth(1) == Some("1") && shown.contains("busy")
    });
    let token = token.unwrap();
    let secret = token.split_once(':').unwrap().1.to_string();
    wait_until("the run succeeds on the machine", 40.0, || {
        db.state(run) == "succeeded"
    });
    let (host, start, out): (String, i32, Vec<u8>) = {
        let r = db
            .client()
            .query_one(
                "SELECT host, start, output FROM orca.runs WHERE id = $1",
                &[&run],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2))
    };
    let machine: String = db.one("SELECT name FROM orca.pool_machines");
    assert_eq!((host.as_str(), start), (machine.as_str(), 1));
    assert!(text(&out).contains("ran on job"), "{}", text(&out));
    // Removed once idle (never while it ran: the run kept its one attempt),
    // its process group gone.
    wait_until("the idle machine is removed", 30.0, || {
        live(&db, "p").is_empty()
    });
    let (why, after_run): (String, bool) = {
        let r = db
            .client()
            .query_one(
                "SELECT m.why, m.ended_at > r.ended_at FROM orca.pool_machines m, orca.runs r
                 WHERE r.id = $1",
                &[&run],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert!(why.contains("idle"), "{why}");
    assert!(after_run);
    wait_until("its processes are gone", 20.0, || {
        local_machines(&stack).is_empty()
    });
    // Its credentials are gone with it.
    let role = token.split_once(':').unwrap().0.to_string();
    let roles: i64 = db
        .client()
        .query_one("SELECT count(*) FROM pg_roles WHERE rolname = $1", &[&role])
        .unwrap()
        .get(0);
    assert_eq!(roles, 0);
    assert_eq!(db.events_of_kind("machine made"), 1);
    assert_eq!(db.events_of_kind("machine removed"), 1);
    let demand: i32 = db.one("SELECT demand FROM orca.pools WHERE name = 'p'");
    assert_eq!(demand, 0);
    let pools = db.ok(&["pools", "--json"]) + &db.ok(&["pools"]);
    s.stop();
    for (what, text) in [("the log", s.output()), ("orca pools", pools)] {
        assert!(!text.contains(&secret), "the token's secret is in {what}");
    }
}

#[test]
fn one_machine_boots_at_a_time_and_a_silent_boot_is_given_up() {
    let db = TestDb::new();
    let dir = TempDir::new();
    db.register(
        &dir,
        r#"
[pools.p]
types = [{ type = "small", wait = 0 }]
locations = ["here"]
max_machines = 3

[pipelines.job]
command = "true"
placement = "worker:p"
max_runs = 3
"#,
    );
    for _ in 0..3 {
        db.queue("job");
    }
    // Machines get a database address no worker can reach: they never boot.
    let mut s = pool_scheduler(
        &db,
        &dir,
        &[
            ("ORCA_POOL_DATABASE_URL", "postgres://127.0.0.1:9/nowhere"),
            ("ORCA_POOL_BOOT_SECONDS", "3"),
        ],
    );
    wait_until("a machine is made", 30.0, || made(&db, "p") == 1);
    wait_until("the scaler waits for it", 20.0, || {
        status(&db, "p").starts_with("waiting for orca-p-")
    });
    assert_eq!(made(&db, "p"), 1, "a second machine while one boots");
    wait_until("the boot is given up and another made", 30.0, || {
        made(&db, "p") == 2
    });
    let why: String = db.one("SELECT why FROM orca.pool_machines ORDER BY id LIMIT 1");
    assert!(why.contains("never showed up within 3s"), "{why}");
    assert_eq!(live(&db, "p").len(), 1);
    s.stop();
}

#[test]
fn max_machines_holds_and_workers_take_their_slots_first() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let pids = dir.path("pids");
    db.register(
        &dir,
        &format!(
            r#"
[pools.p]
types = [{{ type = "small", wait = 0 }}]
locations = ["here"]
max_machines = 2
slots = 2

[pipelines.job]
command = "{}"
placement = "worker:p"
max_runs = 5
"#,
            hang(&pids)
        ),
    );
    for _ in 0..5 {
        db.queue("job");
    }
    let mut s = pool_scheduler(&db, &dir, &[]);
    wait_until("four runs run on two machines", 40.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.runs WHERE state = 'running'") == 4
    });
    wait_until("the scaler says it is at max", 20.0, || {
        status(&db, "p").starts_with("at max_machines (2)")
    });
    assert_eq!(made(&db, "p"), 2);
    // Two slots each: no machine runs more than two.
    let most: i64 = db.one(
        "SELECT max(n) FROM (SELECT count(*) AS n FROM orca.runs WHERE state = 'running'
         GROUP BY machine) x",
    );
    assert_eq!(most, 2);
    let demand: i32 = db.one("SELECT demand FROM orca.pools WHERE name = 'p'");
    assert_eq!(demand, 1, "five startable, four slots: one waits");
    s.stop();
}

#[test]
fn a_full_location_then_the_next_and_a_type_kept_for_its_wait() {
    let db = TestDb::new();
    let dir = TempDir::new();
    db.register(
        &dir,
        r#"
[pools.p]
types = [{ type = "big", wait = 2 }, { type = "small", wait = 0 }]
locations = ["x", "y"]
capacity = { x = 0, "big@y" = 0 }
max_machines = 2

[pipelines.job]
command = "true"
placement = "worker:p"
"#,
    );
    db.queue("job");
    let mut s = pool_scheduler(&db, &dir, &[("ORCA_POOL_TRY_SECONDS", "1")]);
    wait_until("a machine is made", 30.0, || made(&db, "p") == 1);
    // x is full for every type, y for big: big is tried for its wait, then small in y.
    assert_eq!(
        live(&db, "p").first().map(|m| (m.1.clone(), m.2.clone())),
        Some(("small".into(), "y".into()))
    );
    let kept: f64 = db.one(
        "SELECT extract(epoch FROM (SELECT made_at FROM orca.pool_machines)
           - (SELECT min(at) FROM orca.events WHERE kind = 'no capacity'))::float8",
    );
    assert!(
        kept >= 2.0,
        "big was given up after {kept}s, before its wait"
    );
    let said: String =
        db.one("SELECT string_agg(why, ' | ') FROM orca.events WHERE kind = 'no capacity'");
    assert!(
        said.contains("x is full") && said.contains("big@y is full"),
        "{said}"
    );
    // At most one attempt every ORCA_POOL_TRY_SECONDS (database clock).
    let gap: f64 = db.one(
        "SELECT min(d) FROM (SELECT extract(epoch FROM at - lag(at) OVER (ORDER BY at))::float8 AS d
         FROM orca.events WHERE kind = 'no capacity') x",
    );
    assert!(gap >= 1.0, "attempts {gap}s apart");
    // After a make the walk starts again from the first type.
    let walk: i32 = db.one("SELECT walk_type FROM orca.pools WHERE name = 'p'");
    assert_eq!(walk, 0);
    assert!(
        status(&db, "p").contains("made orca-p-"),
        "{}",
        status(&db, "p")
    );
    s.stop();
}

#[test]
fn a_type_the_image_has_no_variant_for_is_skipped() {
    let host = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let reg = tiny_registry(&[
        ("team/foreign", &["s390x"]),
        ("team/multi", &["ppc64le", host]),
    ]);
    let db = TestDb::new();
    let dir = TempDir::new();
    db.register(
        &dir,
        &format!(
            r#"
[pools.foreign]
types = [{{ type = "small", wait = 0 }}]
locations = ["here"]
image = "{reg}/team/foreign:v1"

[pools.multi]
types = [{{ type = "small", wait = 0 }}]
locations = ["here"]
image = "{reg}/team/multi:v1"

[pipelines.a]
command = "true"
placement = "worker:foreign"

[pipelines.b]
command = "true"
placement = "worker:multi"
"#
        ),
    );
    let (a, b) = (db.queue("a"), db.queue("b"));
    let mut s = pool_scheduler(&db, &dir, &[]);
    wait_until("the multi-arch pool's run succeeds", 40.0, || {
        db.state(b) == "succeeded"
    });
    wait_until("the foreign pool says why it makes nothing", 20.0, || {
        let st = status(&db, "foreign");
        st.contains(&format!(
            "type small skipped: image {reg}/team/foreign:v1 has no {host} variant (it has s390x)"
        ))
    });
    assert_eq!(made(&db, "foreign"), 0);
    assert_eq!(db.state(a), "queued");
    assert!(db.events_of_kind("type skipped") >= 1);
    s.stop();
}

#[test]
fn a_lost_worker_s_runs_are_queued_again_and_finish_elsewhere() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let pids = dir.path("pids");
    db.register(
        &dir,
        &format!(
            r#"
[pools.p]
types = [{{ type = "small", wait = 0 }}]
locations = ["here"]
max_machines = 2

[pipelines.job]
command = "{}"
placement = "worker:p"
"#,
            hang_first_attempt(&pids)
        ),
    );
    let run = db.queue("job");
    let mut s = pool_scheduler(&db, &dir, &[("ORCA_POOL_LOST_SECONDS", "8")]);
    let stack = stack(&db);
    wait_until("the first attempt runs", 40.0, || {
        !pids_in(&pids).is_empty()
    });
    // The machine goes silent: its boot process and worker are stopped
    // (the run's own process group runs on).
    let machine = local_machines(&stack)[0];
    // SAFETY: kill(2) on the machine's process group.
    unsafe { libc::kill(-machine, libc::SIGSTOP) };
    // Silent past the stale limit (3 s) but not lost (8 s): the core's
    // sweep leaves its run alone, at attempt 1.
    wait_until("the machine is silent for 5 s", 30.0, || {
        db.one::<bool>(
            "SELECT bool_and(now() - seen_at > interval '5 seconds') FROM orca.pool_machines",
        )
    });
    let held: (String, i32) = {
        let r = db
            .client()
            .query_one("SELECT state, start FROM orca.runs WHERE id = $1", &[&run])
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(held, ("running".to_string(), 1));
    assert!(db.ok(&["pools"]).contains("silent"));
    // Lost: removed, its run queued again and finished on a new machine.
    wait_until("the run succeeds elsewhere", 60.0, || {
        db.state(run) == "succeeded"
    });
    let (start, out): (i32, Vec<u8>) = {
        let r = db
            .client()
            .query_one("SELECT start, output FROM orca.runs WHERE id = $1", &[&run])
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(start, 2);
    assert!(text(&out).contains("done 2"));
    let why: String = db.one("SELECT why FROM orca.pool_machines ORDER BY id LIMIT 1");
    assert!(why.contains("went silent"), "{why}");
    let requeued: String =
        db.one("SELECT string_agg(why, ' | ') FROM orca.events WHERE kind = 'requeued'");
    assert!(requeued.contains("its machine orca-p-"), "{requeued}");
    // The first attempt's process died with its worker.
    wait_until("the first attempt's process is gone", 20.0, || {
        pids_in(&pids).iter().all(|p| !alive(*p))
    });
    s.stop();
}

#[test]
fn a_stray_with_this_stack_s_labels_is_deleted_and_another_stack_s_kept() {
    let db = TestDb::new();
    let dir = TempDir::new();
    db.register(
        &dir,
        "[pools.p]\ntypes = [{ type = \"small\", wait = 0 }]\nlocations = [\"here\"]\n",
    );
    let mut s = pool_scheduler(&db, &dir, &[]);
    let stack = stack(&db);
    let spawn = |stack: &str| {
        use std::os::unix::process::CommandExt;
        Command::new("sleep")
            .arg("300")
            .env("ORCA_LOCAL_MACHINE", "orca-p-999")
            .env(
                "ORCA_LOCAL_LABELS",
                format!("orca-pool=p orca-stack={stack}"),
            )
            .process_group(0)
            .spawn()
            .unwrap()
    };
    let mut ours = spawn(&stack);
    let mut theirs = spawn("someoneelse");
    wait_until("the stray is deleted", 30.0, || {
        ours.try_wait().unwrap().is_some()
    });
    assert!(db.events_of_kind("stray deleted") >= 1);
    assert!(
        theirs.try_wait().unwrap().is_none(),
        "another stack's machine was deleted"
    );
    let _ = theirs.kill();
    let _ = theirs.wait();
    s.stop();
}

#[test]
fn a_pool_removed_from_the_file_loses_its_idle_machines() {
    let (db, dir) = pool_test(
        r#"
[pipelines.job]
command = "true"
placement = "worker:p"
"#,
    );
    let run = db.queue("job");
    let mut s = pool_scheduler(&db, &dir, &[]);
    wait_until("the run succeeds", 40.0, || db.state(run) == "succeeded");
    assert_eq!(live(&db, "p").len(), 1, "idle_seconds is 300: it stays");
    db.register(&dir, "[pipelines.other]\ncommand = \"true\"\n");
    wait_until("the retired pool's machine is removed", 30.0, || {
        live(&db, "p").is_empty()
    });
    let why: String = db.one("SELECT why FROM orca.pool_machines");
    assert!(why.contains("no longer in orca.toml"), "{why}");
    s.stop();
}

#[test]
fn a_pool_put_back_in_the_file_no_longer_says_retired() {
    let jobs = "[pipelines.job]\ncommand = \"true\"\nplacement = \"worker:p\"\n";
    let (db, dir) = pool_test(jobs);
    let run = db.queue("job");
    let mut s = pool_scheduler(&db, &dir, &[]);
    wait_until("the run succeeds", 40.0, || db.state(run) == "succeeded");
    db.register(&dir, "[pipelines.other]\ncommand = \"true\"\n");
    wait_until("the retired pool's machine is removed", 30.0, || {
        live(&db, "p").is_empty()
    });
    assert!(status(&db, "p").contains("retired"), "{}", status(&db, "p"));
    // Back in the file: its status is no longer the retired one, at once
    // and after the scaler's passes.
    db.register(&dir, &with_pool("p", jobs));
    let shown = db.ok(&["pools"]);
    assert!(!shown.contains("retired"), "{shown}");
    wait_until("a scaler pass says the pool's own status", 20.0, || {
        let now = status(&db, "p");
        assert!(!now.contains("retired"), "{now}");
        now == "no demand"
    });
    let shown = db.ok(&["pools"]);
    assert!(!shown.contains("retired"), "{shown}");
    s.stop();
}

/// `[pools.NAME]` with one type and one location (what most tests need),
/// then `rest`.
pub fn with_pool(name: &str, rest: &str) -> String {
    format!(
        "[pools.{name}]\ntypes = [{{ type = \"small\", wait = 0 }}]\nlocations = [\"here\"]\n{rest}"
    )
}

/// A fresh database with pool `p` (one type, one location) and `rest`
/// registered, and a scratch directory.
pub fn pool_test(rest: &str) -> (TestDb, TempDir) {
    let db = TestDb::new();
    let dir = TempDir::new();
    db.register(&dir, &with_pool("p", rest));
    (db, dir)
}

/// A machine row and login role made by hand, for a worker run by the test.
pub fn hand_made_machine(db: &TestDb, pool: &str, role: &str, secret: &str) {
    db.login_role(role, secret, "orca_worker");
    let mut c = db.client();
    c.execute(
        "INSERT INTO orca.pool_machines (pool, name, type, location, role, slots)
         VALUES ($1, 'orca-' || $1 || '-hand', 'small', 'here', $2, 2)",
        &[&pool, &role],
    )
    .unwrap();
}

/// `orca worker --pool POOL` with the credentials of a hand-made machine.
pub fn hand_worker(db: &TestDb, dir: &TempDir, pool: &str, role: &str, secret: &str) -> Proc {
    hand_worker_with(db, dir, pool, role, secret, &[])
}

/// [`hand_worker`] with `extra` added to its environment.
pub fn hand_worker_with(
    db: &TestDb,
    dir: &TempDir,
    pool: &str,
    role: &str,
    secret: &str,
    extra: &[(&str, &str)],
) -> Proc {
    let mut c = Command::new(bin());
    c.args(["worker", "--pool", pool])
        .env("ORCA_DATABASE_URL", without_password(&db.url))
        .env("ORCA_TOKEN", format!("{role}:{secret}"))
        .env("ORCA_TICK_SECONDS", "0.2")
        .env("ORCA_KILL_GRACE_SECONDS", "1");
    for (k, v) in extra {
        c.env(k, v);
    }
    Proc::spawn(c, &dir.path(&format!("worker-{role}.log")))
}

/// The test database's URL without orca's user and password.
fn without_password(url: &str) -> String {
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    match url[scheme_end..].find('@') {
        Some(at) => format!("{}{}", &url[..scheme_end], &url[scheme_end + at + 1..]),
        None => url.to_string(),
    }
}

#[test]
fn a_worker_supervises_its_runs_as_the_scheduler_does() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let pids = dir.path("pids");
    db.register(
        &dir,
        &with_pool(
            "p",
            &format!(
                r#"
[pipelines.out]
command = "echo line one; echo line two >&2; exit 4"
placement = "worker:p"

[pipelines.slow]
command = "sleep 300"
placement = "worker:p"
timeout = 1

[pipelines.hangs]
command = "{}"
placement = "worker:p"
max_runs = 2
"#,
                hang(&pids)
            ),
        ),
    );
    let role = format!("orca_m_sup_{}", std::process::id());
    hand_made_machine(&db, "p", &role, "pw-sup");
    db.client()
        .execute("UPDATE orca.pool_machines SET slots = 4", &[])
        .unwrap();
    let out = db.queue("out");
    let slow = db.queue("slow");
    let cancelled = db.queue("hangs");
    let taken = db.queue("hangs");
    let mut w = hand_worker(&db, &dir, "p", &role, "pw-sup");
    wait_until("out fails with its exit code", 30.0, || {
        db.state(out) == "failed"
    });
    let (code, output): (Option<i32>, Vec<u8>) = {
        let r = db
            .client()
            .query_one(
                "SELECT exit_code, output FROM orca.runs WHERE id = $1",
                &[&out],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(code, Some(4));
    assert!(text(&output).contains("line one") && text(&output).contains("line two"));
    wait_until("slow times out", 30.0, || db.state(slow) == "failed");
    let why: String = db.one(&format!("SELECT why FROM orca.runs WHERE id = {slow}"));
    assert!(why.contains("timed out"), "{why}");
    wait_until("both hanging runs run", 30.0, || pids_in(&pids).len() == 2);
    db.ok(&["cancel", &cancelled.to_string()]);
    wait_until("the cancelled run is cancelled", 30.0, || {
        db.state(cancelled) == "cancelled"
    });
    // Another takes the other run over (its start is no longer the
    // worker's): the worker kills its process and records nothing.
    db.client()
        .execute(
            "UPDATE orca.runs SET start = start + 1, machine = NULL, host = 'elsewhere' WHERE id = $1",
            &[&taken],
        )
        .unwrap();
    wait_until("both hanging processes are gone", 30.0, || {
        pids_in(&pids).iter().all(|p| !alive(*p))
    });
    let (state, host): (String, String) = {
        let r = db
            .client()
            .query_one("SELECT state, host FROM orca.runs WHERE id = $1", &[&taken])
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!((state.as_str(), host.as_str()), ("running", "elsewhere"));
    w.stop();
}

#[test]
fn max_runs_holds_across_workers() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let log = dir.path("log");
    db.register(
        &dir,
        &with_pool(
            "p",
            &format!(
            r#"
[pipelines.job]
command = "echo start $ORCA_RUN_ID $(date +%s.%N) >> {0}; sleep 0.5; echo end $ORCA_RUN_ID $(date +%s.%N) >> {0}"
placement = "worker:p"
max_runs = 2
"#,
            log.display()
        ),
        ),
    );
    let ids: Vec<i64> = (0..12).map(|_| db.queue("job")).collect();
    let workers: Vec<Proc> = (0..3)
        .map(|i| {
            let role = format!("orca_m_mr{i}_{}", std::process::id());
            hand_made_machine(&db, "p", &role, "pw");
            db.client()
                .execute(
                    "UPDATE orca.pool_machines SET slots = 1, name = $1 WHERE role = $2",
                    &[&format!("m{i}"), &role],
                )
                .unwrap();
            hand_worker(&db, &dir, "p", &role, "pw")
        })
        .collect();
    wait_until("all twelve succeed", 60.0, || {
        ids.iter().all(|id| db.state(*id) == "succeeded")
    });
    // One slot each: two at once needs two workers; a third never starts.
    let lines = std::fs::read_to_string(&log).unwrap();
    assert_eq!(crate::scheduler::max_overlap(&lines), 2, "{lines}");
    for mut w in workers {
        w.stop();
    }
}

#[test]
fn a_worker_rides_out_a_database_restart() {
    let cluster = Cluster::new("");
    cluster.start();
    let db = TestDb::on(&cluster.url());
    let dir = TempDir::new();
    let ended = dir.path("ended");
    db.register(
        &dir,
        &with_pool(
            "p",
            &format!(
                r#"
[pipelines.job]
command = "sleep 2; echo $ORCA_RUN_ID >> {}"
placement = "worker:p"
"#,
                ended.display()
            ),
        ),
    );
    let role = format!("orca_m_out_{}", std::process::id());
    hand_made_machine(&db, "p", &role, "pw");
    let run = db.queue("job");
    let mut w = hand_worker(&db, &dir, "p", &role, "pw");
    wait_until("the run runs", 30.0, || db.state(run) == "running");
    cluster.stop();
    wait_until("its command ends while the database is down", 30.0, || {
        !pids_in(&ended).is_empty()
    });
    cluster.start();
    wait_until("its end is recorded", 60.0, || db.state(run) == "succeeded");
    assert_eq!(
        db.one::<i32>(&format!("SELECT start FROM orca.runs WHERE id = {run}")),
        1
    );
    // And it goes on taking runs.
    let next = db.queue("job");
    wait_until("the next run succeeds", 30.0, || {
        db.state(next) == "succeeded"
    });
    assert!(w.child.try_wait().unwrap().is_none(), "the worker exited");
    w.stop();
}

#[test]
fn a_worker_s_credentials_do_a_worker_s_work_and_nothing_else() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let pids = dir.path("pids");
    db.register(
        &dir,
        &with_pool(
            "p",
            &format!(
                r#"
[pools.q]
types = [{{ type = "small", wait = 0 }}]
locations = ["here"]

[pipelines.theirs]
command = "true"
placement = "worker:q"

[pipelines.ours]
command = "echo ours"
placement = "worker:p"

[pipelines.hangs]
command = "{}"
placement = "worker:p"
"#,
                hang(&pids)
            ),
        ),
    );
    let role = format!("orca_m_test_{}", std::process::id());
    let secret = "s3cret-for-the-test";
    hand_made_machine(&db, "p", &role, secret);
    let theirs = db.queue("theirs");
    let ours = db.queue("ours");
    let hangs = db.queue("hangs");
    let plain = without_password(&db.url);
    let mut worker = hand_worker(&db, &dir, "p", &role, secret);
    wait_until("its own pool's run succeeds", 30.0, || {
        db.state(ours) == "succeeded"
    });
    wait_until("the hanging run runs", 30.0, || !pids_in(&pids).is_empty());
    assert_eq!(db.state(theirs), "queued", "it took another pool's run");
    // With its credentials: no table, no other function.
    let as_machine = format!(
        "{}?user={role}&password={secret}",
        plain.split('?').next().unwrap()
    );
    let mut c = postgres::Client::connect(&as_machine, postgres::NoTls).unwrap();
    for statement in [
        "SELECT count(*) FROM orca.runs",
        "UPDATE orca.pool_machines SET slots = 99",
        "SELECT orca.finish_attempt(1, 1, 'succeeded', 0, NULL, 'x', ''::bytea, '{}')",
        "SELECT orca.machine_role_make('x', 'y')",
    ] {
        refused(&mut c, statement);
    }
    // Its functions act on its own machine's runs only.
    let other: Option<String> = c
        .query_one(
            "SELECT orca.worker_finish($1, 1, 'succeeded', 0, NULL, 'forged', ''::bytea, '{}')",
            &[&theirs],
        )
        .unwrap()
        .get(0);
    assert_eq!(other, None);
    assert_eq!(db.state(theirs), "queued");
    // A wrong secret is refused by Postgres; a worker with it gives up
    // after ORCA_WORKER_REFUSED_SECONDS (it may be a misconfiguration).
    let wrong = as_machine.replace(secret, "guess");
    assert!(postgres::Client::connect(&wrong, postgres::NoTls).is_err());
    let mut guesser = {
        let mut c = Command::new(bin());
        c.args(["worker", "--pool", "p"])
            .env("ORCA_DATABASE_URL", &plain)
            .env("ORCA_TOKEN", format!("{role}:guess"))
            .env("ORCA_WORKER_REFUSED_SECONDS", "2");
        Proc::spawn(c, &dir.path("guesser.log"))
    };
    assert_eq!(guesser.wait(30.0).code(), Some(3), "{}", guesser.output());
    assert!(
        guesser.output().contains("giving up after 2s"),
        "{}",
        guesser.output()
    );
    // Something the machine owns (a large object) doesn't keep its role alive.
    c.batch_execute("SELECT lo_create(0)").unwrap();
    // Revoked: its sessions end, it can't log in again, the worker kills
    // its run and exits non-zero (3: the boot script shuts the machine down).
    db.client()
        .execute("SELECT orca.machine_role_revoke($1)", &[&role])
        .unwrap();
    assert_eq!(worker.wait(30.0).code(), Some(3), "{}", worker.output());
    assert!(postgres::Client::connect(&as_machine, postgres::NoTls).is_err());
    wait_until("its run's process is killed", 20.0, || {
        pids_in(&pids).iter().all(|p| !alive(*p))
    });
    let _ = hangs;
    let log = worker.output();
    assert!(log.contains("revoked"), "{log}");
    assert!(!log.contains(secret), "the secret is in the worker's log");
    let dropped: bool = db
        .client()
        .query_one("SELECT orca.machine_role_drop($1)", &[&role])
        .unwrap()
        .get(0);
    assert!(dropped);
    let left: i64 = db
        .client()
        .query_one("SELECT count(*) FROM pg_roles WHERE rolname = $1", &[&role])
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
}

#[test]
fn a_worker_whose_machine_row_is_not_live_waits_for_it_then_gives_up() {
    let db = TestDb::new();
    let dir = TempDir::new();
    db.register(
        &dir,
        &with_pool(
            "p",
            r#"
[pipelines.job]
command = "echo job"
placement = "worker:p"
"#,
        ),
    );
    // Logins with no machine row (orca.worker_machine() raises OR001): a
    // machine just made, whose row is on its way; or one being removed.
    let early = format!("orca_m_early_{}", std::process::id());
    let gone = format!("orca_m_gone_{}", std::process::id());
    db.login_role(&early, "pw", "orca_worker");
    db.login_role(&gone, "pw", "orca_worker");
    let mut waits = hand_worker(&db, &dir, "p", &early, "pw");
    let mut gives_up = hand_worker_with(
        &db,
        &dir,
        "p",
        &gone,
        "pw",
        &[("ORCA_WORKER_REFUSED_SECONDS", "2")],
    );
    // No row for ORCA_WORKER_REFUSED_SECONDS: it gives up as for refused
    // credentials (exit 3), not as for a failed statement (exit 1).
    assert_eq!(gives_up.wait(30.0).code(), Some(3), "{}", gives_up.output());
    let log = gives_up.output();
    assert!(log.contains("giving up after 2s"), "{log}");
    assert!(log.contains("no live machine"), "{log}");
    // The other, within its minute, takes runs once its row is there.
    assert!(
        waits.child.try_wait().unwrap().is_none(),
        "{}",
        waits.output()
    );
    db.client()
        .execute(
            "INSERT INTO orca.pool_machines (pool, name, type, location, role, slots)
             VALUES ('p', 'orca-p-early', 'small', 'here', $1, 2)",
            &[&early],
        )
        .unwrap();
    let run = db.queue("job");
    wait_until("its run succeeds", 30.0, || db.state(run) == "succeeded");
    waits.stop();
}

#[test]
fn a_machine_being_removed_takes_no_run_and_one_that_took_a_run_is_kept() {
    let db = TestDb::new();
    let dir = TempDir::new();
    db.register(
        &dir,
        &with_pool(
            "p",
            r#"
[pipelines.job]
command = "true"
placement = "worker:p"
"#,
        ),
    );
    let role = format!("orca_m_race_{}", std::process::id());
    hand_made_machine(&db, "p", &role, "pw");
    let (id, idle_since): (i64, chrono::DateTime<chrono::Utc>) = {
        let r = db
            .client()
            .query_one("SELECT id, busy_at FROM orca.pool_machines", &[])
            .unwrap();
        (r.get(0), r.get(1))
    };
    let first = db.queue("job");
    let as_machine = format!(
        "{}?user={role}&password=pw",
        without_password(&db.url).split('?').next().unwrap()
    );
    let mut m = postgres::Client::connect(&as_machine, postgres::NoTls).unwrap();
    // The machine claims a run after the scaler saw it idle: the scaler's
    // conditional mark finds it busy and keeps it.
    let claimed = m.query("SELECT id FROM orca.worker_claim(1)", &[]).unwrap();
    assert_eq!(claimed.len(), 1);
    let ending = include_str!("../../sql/machine_ending.sql");
    let marked = db
        .client()
        .query_opt(ending, &[&id, &Some(idle_since)])
        .unwrap();
    assert!(
        marked.is_none(),
        "a machine that took a run was marked for idleness"
    );
    assert_eq!(db.state(first), "running");
    // Marked for removal (unconditionally: lost, say), it claims nothing more.
    let marked = db
        .client()
        .query_opt(ending, &[&id, &None::<chrono::DateTime<chrono::Utc>>])
        .unwrap();
    assert!(marked.is_some());
    let second = db.queue("job");
    let claimed = m.query("SELECT id FROM orca.worker_claim(4)", &[]).unwrap();
    assert!(claimed.is_empty());
    assert_eq!(db.state(second), "queued");
}

#[test]
fn a_restarted_worker_s_runs_are_queued_again_and_run_anew() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let pids = dir.path("pids");
    db.register(
        &dir,
        &with_pool(
            "p",
            &format!(
                r#"
[pipelines.job]
command = "{}"
placement = "worker:p"
"#,
                hang_first_attempt(&pids)
            ),
        ),
    );
    let role = format!("orca_m_again_{}", std::process::id());
    hand_made_machine(&db, "p", &role, "pw");
    let run = db.queue("job");
    let mut w = hand_worker(&db, &dir, "p", &role, "pw");
    wait_until("the first attempt runs", 30.0, || {
        !pids_in(&pids).is_empty()
    });
    // The worker dies (kill -9); its run's process dies with it. Its
    // machine lives on and starts the worker again.
    w.signal(libc::SIGKILL);
    w.wait(20.0);
    wait_until("the first attempt's process is gone", 20.0, || {
        pids_in(&pids).iter().all(|p| !alive(*p))
    });
    let mut again = hand_worker(&db, &dir, "p", &role, "pw");
    wait_until("the run succeeds on its second attempt", 30.0, || {
        db.state(run) == "succeeded"
    });
    assert_eq!(
        db.one::<i32>(&format!("SELECT start FROM orca.runs WHERE id = {run}")),
        2
    );
    let why: String = db.one(&format!(
        "SELECT why FROM orca.events WHERE run = {run} AND kind = 'requeued'"
    ));
    assert!(why.contains("started again"), "{why}");
    again.stop();
}

#[test]
fn a_database_outage_longer_than_the_lost_limit_removes_no_machine() {
    let cluster = Cluster::new("");
    cluster.start();
    let db = TestDb::on(&cluster.url());
    let dir = TempDir::new();
    db.register(
        &dir,
        &with_pool(
            "p",
            "\n[pipelines.job]\ncommand = \"true\"\nplacement = \"worker:p\"\n",
        ),
    );
    let run = db.queue("job");
    let mut s = pool_scheduler(
        &db,
        &dir,
        &[("ORCA_POOL_LOST_SECONDS", "3"), ("ORCA_STALE_SECONDS", "6")],
    );
    let stack = stack(&db);
    wait_until("the run succeeds on a machine", 40.0, || {
        db.state(run) == "succeeded"
    });
    // Down for longer than the lost limit; the machine comes back slower
    // than the scheduler (it is stopped until after the scheduler leads
    // again), so the scheduler's first passes see it silent past the limit.
    cluster.stop();
    let machine = local_machines(&stack)[0];
    // SAFETY: kill(2) on the machine's process group.
    unsafe { libc::kill(-machine, libc::SIGSTOP) };
    let down = std::time::Instant::now();
    wait_until("4 s of outage", 20.0, || {
        down.elapsed().as_secs_f64() >= 4.0
    });
    cluster.start();
    wait_until("the scheduler leads again", 40.0, || {
        s.output().contains("lead taken again")
    });
    let back: f64 = db.one("SELECT extract(epoch FROM now())::float8");
    wait_until("2 s of passes after leading again", 20.0, || {
        db.one::<f64>("SELECT extract(epoch FROM now())::float8") - back >= 2.0
    });
    assert_eq!(
        live(&db, "p").len(),
        1,
        "removed as lost just after the outage, before it could beat"
    );
    // SAFETY: as above.
    unsafe { libc::kill(-machine, libc::SIGCONT) };
    wait_until("the machine's worker beats again", 40.0, || {
        db.one::<bool>(
            "SELECT coalesce(bool_and(now() - seen_at < interval '2 seconds'), false)
             FROM orca.pool_machines WHERE ended_at IS NULL",
        )
    });
    let beating: f64 = db.one("SELECT extract(epoch FROM now())::float8");
    wait_until("passes past the grace", 30.0, || {
        db.one::<f64>("SELECT extract(epoch FROM now())::float8") - beating >= 6.0
    });
    assert_eq!(made(&db, "p"), 1);
    assert_eq!(
        live(&db, "p").len(),
        1,
        "the machine was removed after the outage"
    );
    s.stop();
}

#[test]
fn the_type_walk_starts_again_when_the_demand_goes() {
    let db = TestDb::new();
    let dir = TempDir::new();
    db.register(
        &dir,
        r#"
[pools.p]
types = [{ type = "big", wait = 1 }, { type = "small", wait = 0 }]
locations = ["x"]
capacity = { x = 0 }

[pipelines.job]
command = "true"
placement = "worker:p"
"#,
    );
    let run = db.queue("job");
    let mut s = pool_scheduler(&db, &dir, &[]);
    // No capacity anywhere: after big's wait the walk is on small.
    wait_until("the walk moves on to the second type", 30.0, || {
        db.one::<i32>("SELECT walk_type FROM orca.pools WHERE name = 'p'") == 1
    });
    // The demand goes: the walk starts again from the first type.
    db.ok(&["cancel", &run.to_string()]);
    wait_until("the walk is back on the first type", 30.0, || {
        db.one::<i32>("SELECT walk_type FROM orca.pools WHERE name = 'p'") == 0
            && db.one::<bool>("SELECT walk_since IS NULL FROM orca.pools WHERE name = 'p'")
    });
    assert_eq!(made(&db, "p"), 0);
    s.stop();
}

#[test]
fn a_worker_s_command_that_escapes_its_session_and_ignores_sigterm_dies_with_its_attempt() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let _leftovers = KillLeftovers(dir.0.clone());
    let command = toml_str(&escapes_and_ignores_term(&format!(
        "{}/$ORCA_RUN_ID.pid",
        dir.0.display()
    )));
    db.register(
        &dir,
        &with_pool(
            "p",
            &format!(
                "[pipelines.slow]\ncommand = {command}\nplacement = \"worker:p\"\ntimeout = 2\n\n\
                 [pipelines.held]\ncommand = {command}\nplacement = \"worker:p\"\nmax_runs = 3\n"
            ),
        ),
    );
    let role = format!("orca_m_esc_{}", std::process::id());
    hand_made_machine(&db, "p", &role, "pw-esc");
    db.client()
        .execute("UPDATE orca.pool_machines SET slots = 4", &[])
        .unwrap();
    let slow = db.queue("slow");
    let cancelled = db.queue("held");
    let taken = db.queue("held");
    let stays = db.queue("held");
    let escaped = |run: i64| pids_in(&dir.path(&format!("{run}.pid")));
    let gone = |run: i64| escaped(run).iter().all(|p| !alive(*p));
    let mut w = hand_worker_with(
        &db,
        &dir,
        "p",
        &role,
        "pw-esc",
        &[("ORCA_STOP_GRACE_SECONDS", "2")],
    );
    wait_until("the escaped sleeps run", 30.0, || {
        [slow, cancelled, taken, stays]
            .iter()
            .all(|r| !escaped(*r).is_empty())
    });
    // A timeout.
    wait_until("the run times out", 30.0, || db.state(slow) == "failed");
    let why: String = db.one(&format!("SELECT why FROM orca.runs WHERE id = {slow}"));
    assert!(why.contains("timed out"), "{why}");
    wait_until("nothing the timed-out run started is alive", 15.0, || {
        gone(slow)
    });
    // A cancel.
    db.ok(&["cancel", &cancelled.to_string()]);
    wait_until("the run is cancelled", 30.0, || {
        db.state(cancelled) == "cancelled"
    });
    wait_until("nothing the cancelled run started is alive", 15.0, || {
        gone(cancelled)
    });
    // The attempt taken over elsewhere: killed, nothing recorded.
    db.client()
        .execute(
            "UPDATE orca.runs SET start = start + 1, machine = NULL, host = 'elsewhere' WHERE id = $1",
            &[&taken],
        )
        .unwrap();
    wait_until(
        "nothing the taken-over attempt started is alive",
        15.0,
        || gone(taken),
    );
    assert_eq!(db.state(taken), "running");
    // The worker stopping.
    assert_eq!(db.state(stays), "running");
    w.stop();
    assert_eq!(db.state(stays), "queued");
    wait_until(
        "nothing the stopped worker's run started is alive",
        15.0,
        || gone(stays),
    );
}
