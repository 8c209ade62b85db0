//! EC2 runs end to end on the local provider: instances are local process
//! groups running the real instance script; the scheduler gives a run its
//! head and workers, and hands warm instances to the next run.

use crate::harness::*;

/// A pipeline on EC2 (local provider) with a head and two workers.
fn ec2_pipeline(dir: &TempDir, extra: &str) -> String {
    format!(
        r#"
[pipelines.job]
command = "[ \"$ORCA_RUN_START\" = 1 ] && [ -n \"$FAIL_FIRST\" ] && exit 1; echo $ORCA_RUN_ID >> {served}"
placement = "ec2"
{extra}

[pipelines.job.ec2]
provider = "local"
type = "small"
locations = ["here"]
workers = 2
worker_service = "exec sleep 300"
update = "echo $ORCA_INSTANCE $ORCA_RUN_ID $ORCA_RUN_START >> {updates}"
"#,
        served = dir.path("served").display(),
        updates = dir.path("updates").display(),
    )
}

fn scheduler(db: &TestDb, dir: &TempDir) -> Proc {
    db.scheduler(
        dir,
        &[
            ("ORCA_EC2_POOL_SECONDS", "60"),
            ("ORCA_POOL_LOST_SECONDS", "30"),
        ],
    )
}

/// The instances of run `run` at `start`, by name.
fn instances_of(db: &TestDb, run: i64, start: i32) -> Vec<String> {
    db.client()
        .query(
            "SELECT instance FROM orca.instances WHERE run = $1 AND start = $2 ORDER BY instance",
            &[&run, &start],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

fn idle(db: &TestDb) -> i64 {
    db.one("SELECT count(*) FROM orca.instances WHERE state = 'idle' AND ended_at IS NULL")
}

#[test]
fn a_finished_run_s_instances_are_handed_to_the_next_run() {
    let db = TestDb::new();
    let dir = TempDir::new();
    db.register(&dir, &ec2_pipeline(&dir, ""));
    let first = db.queue("job");
    let mut s = scheduler(&db, &dir);
    wait_until("run 1 succeeds on its instances", 60.0, || {
        db.state(first) == "succeeded"
    });
    let warm = instances_of(&db, first, 1);
    assert_eq!(warm.len(), 3, "a head and two workers");
    wait_until("its three instances are idle and poll", 30.0, || {
        idle(&db) == 3
    });
    let next = db.queue("job");
    wait_until("run 2 succeeds", 30.0, || db.state(next) == "succeeded");
    assert_eq!(instances_of(&db, next, 1), warm, "the same three instances");
    let made: i64 = db.one("SELECT count(DISTINCT instance) FROM orca.instances");
    assert_eq!(made, 3, "no new instance was made");
    // Handed over within 2 s of being queued (run queued → instance joined).
    let took: f64 = db.one(&format!(
        "SELECT extract(epoch FROM max(i.joined_at) - min(r.queued_at))::float8
         FROM orca.instances i JOIN orca.runs r ON r.id = i.run WHERE r.id = {next}"
    ));
    assert!(took <= 2.0, "hand-over took {took}s");
    // A run's first start takes new code: each instance ran the update (a
    // worker's may come after the driver's end: it runs its own update).
    let updated = || {
        std::fs::read_to_string(dir.path("updates"))
            .unwrap()
            .lines()
            .filter(|l| l.ends_with(&format!(" {next} 1")))
            .count()
    };
    s.wait_for("each instance ran the update", 30.0, || updated() >= 3);
    assert_eq!(updated(), 3);
    s.stop();
}

#[test]
fn a_retried_run_keeps_its_code_and_a_silent_instance_is_not_handed_out() {
    let db = TestDb::new();
    let dir = TempDir::new();
    db.register(
        &dir,
        &ec2_pipeline(
            &dir,
            "retries = 1\nretry_delay = 10\nenv = { FAIL_FIRST = \"1\" }",
        ),
    );
    let run = db.queue("job");
    let mut s = scheduler(&db, &dir);
    // The retry starts only once the first start's instances are idle again
    // (paused meanwhile): else, on a loaded machine, an instance still
    // winding down is replaced by a new one, which is right but not this test.
    wait_until("the first start has its instances", 60.0, || {
        instances_of(&db, run, 1).len() == 3
    });
    db.ok(&["pause", "job"]);
    wait_until(
        "the first start failed and its instances are idle",
        60.0,
        || db.state(run) == "queued" && idle(&db) == 3,
    );
    db.ok(&["resume", "job"]);
    wait_until("the run succeeds on its retry", 90.0, || {
        db.state(run) == "succeeded"
    });
    // The retry got the first start's instances back, not allowed new code.
    let (first, second) = (instances_of(&db, run, 1), instances_of(&db, run, 2));
    assert_eq!(first, second);
    let fresh: Vec<bool> = db
        .client()
        .query(
            "SELECT fresh_code FROM orca.instances WHERE run = $1 AND start = 2",
            &[&run],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(fresh, vec![false, false, false]);
    let updates = std::fs::read_to_string(dir.path("updates")).unwrap();
    assert!(!updates.contains(&format!(" {run} 2")), "{updates}");
    // One idle instance goes silent (stopped): it is not handed out.
    wait_until("the instances are idle", 30.0, || idle(&db) == 3);
    let stack: String = db.one("SELECT id FROM orca.stack");
    let silent = local_machines(&stack)[0];
    // SAFETY: kill(2) on that instance's process group.
    unsafe { libc::kill(-silent, libc::SIGSTOP) };
    wait_until("its poll is stale", 30.0, || {
        db.one::<i64>(
            "SELECT count(*) FROM orca.instances
             WHERE state = 'idle' AND ended_at IS NULL AND polled < now() - interval '6 seconds'",
        ) == 1
    });
    let next = db.queue("job");
    wait_until("the next run runs", 60.0, || {
        instances_of(&db, next, 1).len() == 3
    });
    let made: i64 = db.one("SELECT count(DISTINCT instance) FROM orca.instances");
    assert_eq!(made, 4, "a new instance in the silent one's place");
    // SAFETY: as above.
    unsafe { libc::kill(-silent, libc::SIGCONT) };
    s.stop();
}

/// The process group of local instance `name` (the stack's machines).
fn group_of(stack: &str, name: &str) -> Option<i32> {
    local_machines(stack).into_iter().find(|pid| {
        std::fs::read(format!("/proc/{pid}/environ"))
            .map(|env| {
                env.split(|&b| b == 0)
                    .any(|kv| kv == format!("ORCA_LOCAL_MACHINE={name}").as_bytes())
            })
            .unwrap_or(false)
    })
}

#[test]
fn without_a_warm_pool_instances_end_with_their_run() {
    let db = TestDb::new();
    let dir = TempDir::new();
    db.register(&dir, &ec2_pipeline(&dir, ""));
    let run = db.queue("job");
    let mut s = db.scheduler(&dir, &[("ORCA_EC2_POOL_SECONDS", "0")]);
    wait_until("the run succeeds", 60.0, || db.state(run) == "succeeded");
    wait_until("its instances' rows end", 30.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.instances WHERE ended_at IS NULL") == 0
    });
    let why: String = db.one("SELECT string_agg(DISTINCT why, ', ') FROM orca.instances");
    assert!(why.contains("its run is over"), "{why}");
    let stack: String = db.one("SELECT id FROM orca.stack");
    wait_until("the instances are gone", 30.0, || {
        local_machines(&stack).is_empty()
    });
    wait_until("their logins are dropped", 30.0, || {
        db.client()
            .query_one(
                "SELECT count(*) FROM pg_roles WHERE starts_with(rolname, $1)",
                &[&format!("orca_i_{stack}_")],
            )
            .unwrap()
            .get::<_, i64>(0)
            == 0
    });
    s.stop();
}

#[test]
fn a_lost_head_s_run_is_queued_again_and_its_instances_ended() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let file = ec2_pipeline(&dir, "").replace(
        "command = \"[ \\\"$ORCA_RUN_START\\\" = 1 ] && [ -n \\\"$FAIL_FIRST\\\" ] && exit 1;",
        "command = \"[ \\\"$ORCA_RUN_START\\\" = 1 ] && exec sleep 300;",
    );
    assert!(file.contains("exec sleep 300"), "{file}");
    db.register(&dir, &file);
    let run = db.queue("job");
    let mut s = db.scheduler(
        &dir,
        &[
            ("ORCA_EC2_POOL_SECONDS", "60"),
            ("ORCA_POOL_LOST_SECONDS", "3"),
        ],
    );
    let mut group = None;
    wait_until(
        "the head serves the run, its process group found",
        60.0,
        || {
            // One read: the head serving now (a loaded machine may have
            // ended or replaced it between two reads).
            let heads = db
                .client()
                .query(
                    "SELECT instance, (SELECT id FROM orca.stack) FROM orca.instances
                     WHERE role = 'head' AND joined_at IS NOT NULL AND ended_at IS NULL",
                    &[],
                )
                .unwrap();
            if let [row] = &heads[..] {
                let (head, stack): (String, String) = (row.get(0), row.get(1));
                group = group_of(&stack, &head);
            }
            group.is_some()
        },
    );
    let group = group.unwrap();
    // SAFETY: kill(2) on the head instance's process group.
    unsafe { libc::kill(-group, libc::SIGSTOP) };
    wait_until("the run is started again and succeeds", 90.0, || {
        db.state(run) == "succeeded"
    });
    assert_eq!(
        db.one::<i32>(&format!("SELECT start FROM orca.runs WHERE id = {run}")),
        2
    );
    let requeued: String = db.one(&format!(
        "SELECT why FROM orca.events WHERE run = {run} AND kind = 'requeued'"
    ));
    assert!(requeued.contains("head instance was lost"), "{requeued}");
    let ended: i64 = db
        .one("SELECT count(*) FROM orca.instances WHERE start = 1 AND why LIKE '%head instance was lost%'");
    assert_eq!(ended, 3, "the first start's instances ended");
    s.stop();
}

#[test]
fn a_stray_instance_of_this_stack_is_deleted() {
    let db = TestDb::new();
    let dir = TempDir::new();
    db.register(&dir, &ec2_pipeline(&dir, ""));
    let run = db.queue("job");
    let mut s = db.scheduler(
        &dir,
        &[
            ("ORCA_EC2_POOL_SECONDS", "60"),
            ("ORCA_POOL_SCALE_SECONDS", "0.5"),
        ],
    );
    wait_until("the run succeeds", 60.0, || db.state(run) == "succeeded");
    let stack: String = db.one("SELECT id FROM orca.stack");
    // Made, but its row never written: a process with the labels.
    let mut stray = {
        use std::os::unix::process::CommandExt;
        std::process::Command::new("sleep")
            .arg("300")
            .env("ORCA_LOCAL_MACHINE", "orca-i-999")
            .env(
                "ORCA_LOCAL_LABELS",
                format!("orca-pool=orca:ec2-runs orca-stack={stack}"),
            )
            .process_group(0)
            .spawn()
            .unwrap()
    };
    wait_until("the stray is deleted", 30.0, || {
        stray.try_wait().unwrap().is_some()
    });
    // The run's own instances are kept (warm).
    assert_eq!(
        db.one::<i64>("SELECT count(*) FROM orca.instances WHERE ended_at IS NULL"),
        3
    );
    assert!(db.events_of_kind("stray deleted") >= 1);
    s.stop();
}

#[test]
fn idle_instances_beyond_recent_demand_are_ended() {
    let db = TestDb::new();
    let dir = TempDir::new();
    db.register(&dir, &ec2_pipeline(&dir, ""));
    let run = db.queue("job");
    // Warm for 4 s: the run's instances are recent demand that long.
    let mut s = db.scheduler(&dir, &[("ORCA_EC2_POOL_SECONDS", "4")]);
    wait_until("the run succeeds", 60.0, || db.state(run) == "succeeded");
    wait_until("its instances are idle", 30.0, || idle(&db) == 3);
    // No run of their kind since: beyond the demand, they end (well before
    // their warm time of 4 s and a minute is over), and their scripts stop.
    wait_until("the idle instances end", 30.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.instances WHERE ended_at IS NULL") == 0
    });
    let why: String =
        db.one("SELECT string_agg(DISTINCT why, ', ') FROM orca.instances WHERE state = 'ended'");
    assert!(why.contains("than its recent demand"), "{why}");
    let stack: String = db.one("SELECT id FROM orca.stack");
    wait_until("the instances are gone", 30.0, || {
        local_machines(&stack).is_empty()
    });
    s.stop();
}

#[test]
fn idle_instances_of_a_kind_no_pipeline_uses_are_ended() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let file = ec2_pipeline(&dir, "");
    db.register(&dir, &file);
    let run = db.queue("job");
    let mut s = scheduler(&db, &dir);
    wait_until("the run succeeds", 60.0, || db.state(run) == "succeeded");
    wait_until("its instances are idle", 30.0, || idle(&db) == 3);
    // The pipeline's [ec2] table changes: its instances are another kind now.
    db.register(&dir, &file.replace("type = \"small\"", "type = \"large\""));
    wait_until("the idle instances of the old kind end", 30.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.instances WHERE ended_at IS NULL") == 0
    });
    let why: String =
        db.one("SELECT string_agg(DISTINCT why, ', ') FROM orca.instances WHERE state = 'ended'");
    assert!(why.contains("no pipeline uses its kind any more"), "{why}");
    s.stop();
}

#[test]
fn a_run_with_more_workers_than_one_tick_makes_gets_them_all_over_ticks() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let joined = dir.path("joined");
    // The driver waits for its three workers' services to start.
    let file = format!(
        r#"
[pipelines.job]
command = "for i in $(seq 300); do [ $(wc -l < {joined} 2>/dev/null || echo 0) -ge 3 ] && exit 0; sleep 0.1; done; exit 1"
placement = "ec2"

[pipelines.job.ec2]
provider = "local"
type = "small"
locations = ["here"]
workers = 3
worker_service = "echo $ORCA_INSTANCE >> {joined}; exec sleep 300"
"#,
        joined = joined.display()
    );
    db.register(&dir, &file);
    let run = db.queue("job");
    let mut s = db.scheduler(
        &dir,
        &[
            ("ORCA_TICK_SECONDS", "1"),
            ("ORCA_EC2_MAKE_PER_TICK", "1"),
            ("ORCA_EC2_POOL_SECONDS", "0"),
        ],
    );
    wait_until("the run succeeds with its three workers", 90.0, || {
        db.state(run) == "succeeded"
    });
    assert_eq!(
        instances_of(&db, run, 1).len(),
        4,
        "a head and three workers"
    );
    // One a tick: the four were made over at least three ticks of a second.
    let spread: f64 = db.one(&format!(
        "SELECT extract(epoch FROM max(made_at) - min(made_at))::float8
         FROM orca.instances WHERE run = {run}"
    ));
    assert!(spread >= 2.5, "made within {spread}s: not one a tick");
    s.stop();
}

/// The `ORCA_*` variables a command wrote with `env | grep ^ORCA_ | sort`.
fn orca_vars(path: &std::path::Path) -> Vec<(String, String)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn the_driver_and_the_services_get_the_cluster_s_addresses() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let out = dir.path("env");
    std::fs::create_dir(&out).unwrap();
    // Each command writes its ORCA_* variables (a service's appear whole in
    // `out`); the driver first waits for the services' (so they can't be
    // stopped before they wrote them).
    let file = format!(
        r#"
[pipelines.job]
command = "for i in $(seq 600); do [ $(ls {out} | wc -l) -ge 3 ] && break; sleep 0.1; done; env | grep ^ORCA_ | sort > {out}/../driver"
placement = "ec2"

[pipelines.job.ec2]
provider = "local"
type = "small"
locations = ["here"]
workers = 2
head_service = "env | grep ^ORCA_ | sort > {out}.head && mv {out}.head {out}/head; exec sleep 300"
worker_service = "env | grep ^ORCA_ | sort > {out}.$ORCA_INSTANCE && mv {out}.$ORCA_INSTANCE {out}/$ORCA_INSTANCE; exec sleep 300"
"#,
        out = out.display()
    );
    db.register(&dir, &file);
    let run = db.queue("job");
    // One instance a tick: the head serves before its workers are all made,
    // and its commands still get every worker's address.
    let mut s = db.scheduler(
        &dir,
        &[
            ("ORCA_TICK_SECONDS", "1"),
            ("ORCA_EC2_MAKE_PER_TICK", "1"),
            ("ORCA_EC2_POOL_SECONDS", "0"),
        ],
    );
    s.wait_for("the run succeeds", 90.0, || db.state(run) == "succeeded");
    let name = |role: &str| -> Vec<String> {
        db.client()
            .query(
                "SELECT instance FROM orca.instances WHERE run = $1 AND role = $2 ORDER BY id",
                &[&run, &role],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    let (head, workers) = (name("head"), name("worker"));
    assert_eq!((head.len(), workers.len()), (1, 2));
    let vars = |instance: &str| -> Vec<(String, String)> {
        let mut v = vec![
            ("ORCA_HEAD_ADDRESS", "127.0.0.1"),
            ("ORCA_INSTANCE", instance),
            ("ORCA_PIPELINE", "job"),
            ("ORCA_RUN_ID", &run.to_string()),
            ("ORCA_RUN_START", "1"),
            ("ORCA_WORKER_ADDRESSES", "127.0.0.1,127.0.0.1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect::<Vec<_>>();
        v.sort();
        v
    };
    // The driver gets what the head's service gets: the cluster's
    // addresses, its instance, the run; nothing else of orca's.
    assert_eq!(orca_vars(&dir.path("driver")), vars(&head[0]));
    assert_eq!(orca_vars(&out.join("head")), vars(&head[0]));
    for w in &workers {
        assert_eq!(orca_vars(&out.join(w)), vars(w), "worker {w}");
    }
    s.stop();
}
