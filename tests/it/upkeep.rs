//! EC2 runs' upkeep that doesn't stop (issue 28 §5): a run whose pipeline
//! was retired mid-run is still watched (its lost head ends it, its
//! instances are ended and their logins dropped), and a leader that makes
//! nothing still deletes the stray instance its killed predecessor left.
//! Instances are local process groups (the local provider).

use crate::harness::*;

/// EC2 pipeline `job` (local provider, `workers` workers), running
/// `command`.
pub fn ec2_job(command: &str, workers: i32) -> String {
    format!(
        "[pipelines.job]\ncommand = {}\nplacement = \"ec2\"\n\n\
         [pipelines.job.ec2]\nprovider = \"local\"\ntype = \"small\"\nlocations = [\"here\"]\n\
         workers = {workers}\nworker_service = \"exec sleep 300\"\n",
        toml_str(command)
    )
}

/// Logins made for this stack's instances still in `pg_roles`.
fn instance_logins(db: &TestDb, stack: &str) -> i64 {
    db.client()
        .query_one(
            "SELECT count(*) FROM pg_roles WHERE starts_with(rolname, $1)",
            &[&format!("orca_i_{stack}_")],
        )
        .unwrap()
        .get(0)
}

/// The process group of the head serving a run now, and the stack's id.
pub fn serving_head(db: &TestDb) -> Option<(i32, String)> {
    let heads = db
        .client()
        .query(
            "SELECT instance, (SELECT id FROM orca.stack) FROM orca.instances
             WHERE role = 'head' AND joined_at IS NOT NULL AND ended_at IS NULL",
            &[],
        )
        .unwrap();
    let [row] = &heads[..] else { return None };
    let (head, stack): (String, String) = (row.get(0), row.get(1));
    local_machines(&stack)
        .into_iter()
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|env| {
                    env.split(|&b| b == 0)
                        .any(|kv| kv == format!("ORCA_LOCAL_MACHINE={head}").as_bytes())
                })
                .unwrap_or(false)
        })
        .map(|g| (g, stack))
}

#[test]
fn a_retired_pipeline_s_run_whose_head_dies_ends_and_leaves_nothing() {
    let db = TestDb::new();
    let dir = TempDir::new();
    db.register(&dir, &ec2_job("exec sleep 300", 1));
    let run = db.queue("job");
    let mut s = db.scheduler(
        &dir,
        &[
            ("ORCA_EC2_POOL_SECONDS", "0"),
            ("ORCA_POOL_LOST_SECONDS", "3"),
            ("ORCA_POOL_SCALE_SECONDS", "0.5"),
        ],
    );
    let mut found = None;
    wait_until("the head serves the run", 60.0, || {
        found = serving_head(&db);
        found.is_some()
    });
    let (group, stack) = found.unwrap();
    // The last EC2 pipeline retired mid-run, then its head dies.
    db.register(&dir, "[pipelines.other]\ncommand = \"true\"\n");
    // SAFETY: kill(2) on the head instance's process group.
    unsafe { libc::kill(-group, libc::SIGKILL) };
    s.wait_for("the run is handed back as its head was lost", 60.0, || {
        db.state(run) != "running"
    });
    // Lost under a run it served: queued again (it waits, as a retired
    // pipeline's runs do), not left running for ever.
    assert_eq!(db.state(run), "queued");
    assert!(db.events(run, "requeued") == 1);
    s.wait_for("its instances' rows end", 30.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.instances WHERE ended_at IS NULL") == 0
    });
    s.wait_for("its instances are gone", 30.0, || {
        local_machines(&stack).is_empty()
    });
    s.wait_for("their logins are dropped", 30.0, || {
        instance_logins(&db, &stack) == 0
    });
    s.stop();
}

#[test]
fn a_retired_pipeline_s_finished_run_s_instances_end() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let go = dir.path("go");
    db.register(
        &dir,
        &ec2_job(
            &format!("while [ ! -e {} ]; do sleep 0.2; done", go.display()),
            1,
        ),
    );
    let run = db.queue("job");
    let mut s = db.scheduler(
        &dir,
        &[
            ("ORCA_EC2_POOL_SECONDS", "60"),
            ("ORCA_POOL_SCALE_SECONDS", "0.5"),
        ],
    );
    let mut found = None;
    wait_until("the head serves the run", 60.0, || {
        found = serving_head(&db);
        found.is_some()
    });
    let stack = found.unwrap().1;
    db.register(&dir, "[pipelines.other]\ncommand = \"true\"\n");
    std::fs::write(&go, "").unwrap();
    s.wait_for("the run succeeds", 60.0, || db.state(run) == "succeeded");
    // Warm instances of a kind no pipeline uses any more are ended, and
    // nothing is left at the provider or in pg_roles.
    s.wait_for("its instances' rows end", 60.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.instances WHERE ended_at IS NULL") == 0
    });
    s.wait_for("its instances are gone", 30.0, || {
        local_machines(&stack).is_empty()
    });
    s.wait_for("their logins are dropped", 30.0, || {
        instance_logins(&db, &stack) == 0
    });
    s.stop();
}

#[test]
fn a_leader_that_makes_nothing_deletes_its_predecessor_s_stray() {
    let db = TestDb::new();
    let dir = TempDir::new();
    db.register(&dir, &ec2_job("true", 0));
    let env = [
        ("ORCA_EC2_POOL_SECONDS", "120"),
        ("ORCA_POOL_SCALE_SECONDS", "0.5"),
    ];
    let first = db.queue("job");
    let mut a = db.scheduler(&dir, &env);
    wait_until("the first run succeeds", 60.0, || {
        db.state(first) == "succeeded"
    });
    wait_until("its instance is idle", 30.0, || {
        db.one::<i64>(
            "SELECT count(*) FROM orca.instances WHERE state = 'idle' AND ended_at IS NULL",
        ) == 1
    });
    let stack: String = db.one("SELECT id FROM orca.stack");
    // Killed between a make and its row: an instance with this stack's
    // labels that no row holds.
    a.signal(libc::SIGKILL);
    a.wait(10.0);
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
    // The next leader only hands the warm instance over: it makes nothing.
    let mut b = db.scheduler(&dir, &env);
    let second = db.queue("job");
    b.wait_for("the second run succeeds", 60.0, || {
        db.state(second) == "succeeded"
    });
    b.wait_for("the stray is deleted", 30.0, || {
        stray.try_wait().unwrap().is_some()
    });
    assert_eq!(
        db.one::<i64>("SELECT count(DISTINCT instance) FROM orca.instances"),
        1,
        "the warm instance was handed over, none made"
    );
    assert!(db.events_of_kind("stray deleted") >= 1);
    b.stop();
}
