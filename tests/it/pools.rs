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
    let (db, dir) = setup(
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
    let (db, dir) = setup(
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
    let (db, dir) = setup(
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
    // After a make the walk starts again from the first type, and the
    // status names the machine: "made orca-p-…" at the end of the pass that
    // made it, and the next pass's "waiting for orca-p-… to boot" (which a
    // loaded box may show first: the pass after comes 0.3 s later).
    wait_until("the pass that made the machine is written", 30.0, || {
        let now = status(&db, "p");
        now.contains("made orca-p-") || now.contains("waiting for orca-p-")
    });
    let walk: i32 = db.one("SELECT walk_type FROM orca.pools WHERE name = 'p'");
    assert_eq!(walk, 0);
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
    let (db, dir) = setup(&format!(
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
    ));
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
    let (db, dir) =
        setup("[pools.p]\ntypes = [{ type = \"small\", wait = 0 }]\nlocations = [\"here\"]\n");
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
    let (db, dir) = setup(&with_pool("p", rest));
    (db, dir)
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
    // (The outage's length is the fault itself: no fact of the system's
    // to wait on while the server is down.)
    std::thread::sleep(std::time::Duration::from_secs(4));
    cluster.start();
    s.wait_for("the scheduler leads again", 40.0, || db.lead_held());
    let silent: f64 = db.one(
        "SELECT extract(epoch FROM now() - seen_at)::float8 FROM orca.pool_machines
         WHERE ended_at IS NULL",
    );
    assert!(silent > 3.0, "the machine looks lost: silent {silent} s");
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
    let (db, dir) = setup(
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

/// A machine whose worker's login `pg_hba.conf` refuses: the worker gives
/// up (exit 3, after `ORCA_WORKER_REFUSED_SECONDS`), its boot script says
/// the login was refused, not revoked, and shuts the machine down; the
/// scaler removes it as soon as its machine is gone, saying so, not after
/// `ORCA_POOL_BOOT_SECONDS` (900 here).
#[test]
fn a_machine_whose_login_is_refused_is_removed_once_it_ends() {
    let cluster = Cluster::new("");
    let data = cluster.dir.join("data");
    std::fs::write(
        data.join("pg_hba.conf"),
        // orca's role is a member of orca_worker through the logins it
        // makes: its line comes first.
        format!(
            "local all all trust\nhost all postgres,{OWNER} 127.0.0.1/32 trust\nhost all +orca_worker 127.0.0.1/32 reject\nhost all all 127.0.0.1/32 trust\n"
        ),
    )
    .unwrap();
    cluster.start();
    let db = TestDb::on(&cluster.url());
    let dir = TempDir::new();
    db.register(
        &dir,
        r#"
[pools.p]
provider = "local"
types = [{ type = "small", wait = 0 }]
locations = ["here"]
max_machines = 1

[pipelines.job]
command = "true"
placement = "worker:p"
"#,
    );
    db.queue("job");
    let mut s = pool_scheduler(
        &db,
        &dir,
        &[
            ("ORCA_POOL_BOOT_SECONDS", "900"),
            ("ORCA_WORKER_REFUSED_SECONDS", "1"),
        ],
    );
    let removed = || {
        db.one::<i64>(
            "SELECT count(*) FROM orca.events WHERE kind = 'machine removed'
             AND why LIKE 'orca-p-%ended before its worker was seen%'",
        )
    };
    s.wait_for("the machine removed, saying why", 90.0, || removed() >= 1);
    let log = s.output();
    assert!(
        log.contains("orca boot: this machine's login was refused")
            && !log.contains("credentials were revoked"),
        "{log}"
    );
    assert!(log.contains("pg_hba.conf rejects connection"), "{log}");
    s.stop();
}
