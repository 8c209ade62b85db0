//! A pipeline's `on_lost` (issue 28 §6): an attempt whose supervisor was
//! lost (a scheduler killed and swept as stale, a pool machine lost) is
//! queued again by default, and with `on_lost = "fail"` is failed with its
//! why and alert and never started again by orca itself.

use crate::harness::*;
use crate::pools::{pool_scheduler, stack};

/// Pipeline `name`'s table: its first attempt hangs (each attempt's pid
/// written to `pids`), a later one prints `done START`.
fn pipeline(name: &str, pids: &std::path::Path, extra: &str) -> String {
    format!(
        "[pipelines.{name}]\ncommand = \"{}\"\nalert = \"http://127.0.0.1:9/hook\"\n{extra}\n",
        hang_first_attempt(pids)
    )
}

/// Run `run`'s attempt number.
fn start_of(db: &TestDb, run: i64) -> i32 {
    db.one(&format!("SELECT start FROM orca.runs WHERE id = {run}"))
}

/// Run `run`'s why.
fn why_of(db: &TestDb, run: i64) -> String {
    db.one(&format!(
        "SELECT coalesce(why, '') FROM orca.runs WHERE id = {run}"
    ))
}

/// Alerts queued for run `run`.
fn alerts(db: &TestDb, run: i64) -> i64 {
    db.one(&format!(
        "SELECT count(*) FROM orca.alerts WHERE run = {run}"
    ))
}

#[test]
fn a_stale_scheduler_s_run_is_failed_with_on_lost_fail_and_run_again_by_default() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let (pay_pids, plain_pids) = (dir.path("pay.pids"), dir.path("plain.pids"));
    db.register(
        &dir,
        &format!(
            "{}\n{}",
            pipeline("pay", &pay_pids, "on_lost = \"fail\""),
            pipeline("plain", &plain_pids, "")
        ),
    );
    let (pay, plain) = (db.queue("pay"), db.queue("plain"));
    let mut a = db.scheduler(&dir, &[]);
    wait_until("both first attempts run", 30.0, || {
        pids_in(&pay_pids).len() == 1 && pids_in(&plain_pids).len() == 1
    });
    a.signal(libc::SIGKILL);
    a.wait(10.0);
    let mut b = db.scheduler(&dir, &[]);
    wait_until("the default pipeline's run is run again", 60.0, || {
        db.state(plain) == "succeeded"
    });
    wait_until("the on_lost = fail run is failed", 30.0, || {
        db.state(pay) == "failed"
    });
    assert_eq!(start_of(&db, plain), 2);
    assert_eq!(db.events(plain, "requeued"), 1);
    assert_eq!(start_of(&db, pay), 1, "never started again");
    let why = why_of(&db, pay);
    assert!(
        why.starts_with("lost (on_lost = \"fail\", not run again): heartbeat stale"),
        "{why}"
    );
    assert_eq!(db.events(pay, "failed"), 1);
    assert_eq!(db.events(pay, "requeued"), 0);
    assert_eq!(alerts(&db, pay), 1, "alerted as a failure is");
    assert_eq!(alerts(&db, plain), 0);
    // `orca runs` and `orca logs` say it.
    let logs = db.ok(&["logs", &pay.to_string()]);
    assert!(logs.contains("attempt 1 of 1: failed"), "{logs}");
    // Failed is final: no other run of it was made, one attempt began.
    assert_eq!(
        db.one::<i64>("SELECT count(*) FROM orca.runs WHERE pipeline = 'pay'"),
        1
    );
    assert_eq!(pids_in(&pay_pids).len(), 1, "one attempt of pay began");
    // A person retries it: a new run, which starts.
    let again: i64 = db.ok(&["retry", &pay.to_string()]).trim().parse().unwrap();
    wait_until("the retry runs", 30.0, || {
        db.state(again) == "running" && pids_in(&pay_pids).len() == 2
    });
    b.stop();
}

#[test]
fn a_lost_machine_s_run_is_failed_with_on_lost_fail() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let pids = dir.path("pids");
    db.register(
        &dir,
        &format!(
            "[pools.p]\ntypes = [{{ type = \"small\", wait = 0 }}]\nlocations = [\"here\"]\n\
             max_machines = 2\n\n{}placement = \"worker:p\"\n",
            pipeline("pay", &pids, "on_lost = \"fail\"")
        ),
    );
    let run = db.queue("pay");
    let mut s = pool_scheduler(&db, &dir, &[("ORCA_POOL_LOST_SECONDS", "6")]);
    let stack = stack(&db);
    wait_until("the first attempt runs", 40.0, || {
        !pids_in(&pids).is_empty()
    });
    let machine = local_machines(&stack)[0];
    // SAFETY: kill(2) on the machine's process group: it goes silent.
    unsafe { libc::kill(-machine, libc::SIGSTOP) };
    wait_until("the run is failed as lost", 60.0, || {
        db.state(run) == "failed"
    });
    let why = why_of(&db, run);
    assert!(
        why.starts_with("lost (on_lost = \"fail\", not run again): its machine orca-p-"),
        "{why}"
    );
    assert_eq!(start_of(&db, run), 1);
    assert_eq!(db.events(run, "requeued"), 0);
    assert_eq!(alerts(&db, run), 1);
    wait_until("the first attempt's process is gone", 30.0, || {
        pids_in(&pids).iter().all(|p| !alive(*p))
    });
    assert_eq!(pids_in(&pids).len(), 1, "one attempt began");
    s.stop();
}

#[test]
fn a_scheduler_stopped_with_sigterm_fails_the_on_lost_fail_runs_it_stops() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let (pay_pids, plain_pids) = (dir.path("pay.pids"), dir.path("plain.pids"));
    db.register(
        &dir,
        &format!(
            "{}\n{}",
            pipeline("pay", &pay_pids, "on_lost = \"fail\""),
            pipeline("plain", &plain_pids, "")
        ),
    );
    let (pay, plain) = (db.queue("pay"), db.queue("plain"));
    let mut s = db.scheduler(&dir, &[]);
    wait_until("both first attempts run", 30.0, || {
        pids_in(&pay_pids).len() == 1 && pids_in(&plain_pids).len() == 1
    });
    // Overlap off: SIGTERM stops the scheduler and the runs it supervises.
    s.stop();
    assert_eq!(db.state(plain), "queued", "{}", why_of(&db, plain));
    assert_eq!(db.state(pay), "failed");
    let why = why_of(&db, pay);
    assert!(
        why.starts_with("lost (on_lost = \"fail\", not run again): "),
        "{why}"
    );
    assert_eq!(db.events(pay, "requeued"), 0);
    assert_eq!(alerts(&db, pay), 1);
}

#[test]
fn an_ec2_run_whose_head_can_t_be_made_is_queued_again_even_with_on_lost_fail() {
    let db = TestDb::new();
    let dir = TempDir::new();
    // No room anywhere: its head is never made, its command never begins.
    db.register(
        &dir,
        "[pipelines.pay]\ncommand = \"true\"\nplacement = \"ec2\"\non_lost = \"fail\"\n\n\
         [pipelines.pay.ec2]\nprovider = \"local\"\ntype = \"small\"\nlocations = [\"here\"]\n\
         capacity = { here = 0 }\n",
    );
    let run = db.queue("pay");
    let mut s = db.scheduler(&dir, &[]);
    s.wait_for("its head can't be made: queued again, twice", 30.0, || {
        db.events(run, "requeued") >= 2
    });
    let why: String = db.one(&format!(
        "SELECT why FROM orca.events WHERE run = {run} AND kind = 'requeued' LIMIT 1"
    ));
    assert!(why.starts_with("no head instance"), "{why}");
    assert_eq!(db.events(run, "failed"), 0);
    assert_ne!(db.state(run), "failed");
    s.stop();
}

#[test]
fn a_lost_ec2_head_s_run_is_failed_with_on_lost_fail() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let file = crate::upkeep::ec2_job("exec sleep 300", 0).replace(
        "placement = \"ec2\"\n",
        "placement = \"ec2\"\non_lost = \"fail\"\n",
    );
    assert!(file.contains("on_lost"), "{file}");
    db.register(&dir, &file);
    let run = db.queue("job");
    let mut s = db.scheduler(&dir, &[("ORCA_POOL_LOST_SECONDS", "3")]);
    let mut found = None;
    wait_until("the head serves the run", 60.0, || {
        found = crate::upkeep::serving_head(&db);
        found.is_some()
    });
    let (group, stack) = found.unwrap();
    // SAFETY: kill(2) on the head instance's process group.
    unsafe { libc::kill(-group, libc::SIGKILL) };
    s.wait_for("the run is failed as lost", 60.0, || {
        db.state(run) == "failed"
    });
    let why = why_of(&db, run);
    assert!(
        why.starts_with("lost (on_lost = \"fail\", not run again): ")
            && why.contains("head instance was lost"),
        "{why}"
    );
    assert_eq!(start_of(&db, run), 1);
    assert_eq!(db.events(run, "requeued"), 0);
    s.wait_for("its instance is gone", 30.0, || {
        local_machines(&stack).is_empty()
    });
    s.stop();
}

/// A pipeline moved from local to `ec2` while a local attempt of it runs
/// (orca.toml registered again): that attempt began on its scheduler's
/// host, so it gets no instance (one would begin it a second time), and
/// when its scheduler is lost it is judged as the local attempt it is:
/// failed as lost for `on_lost = "fail"`, not queued again as an EC2 run
/// whose head never served.
#[test]
fn a_local_attempt_of_a_pipeline_moved_to_ec2_begins_nowhere_else() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let pids = dir.path("pids");
    let ec2 = "placement = \"ec2\"\n\n[pipelines.pay.ec2]\nprovider = \"local\"\ntype = \"small\"\n\
               locations = [\"here\"]\n";
    let probe = "[pipelines.probe]\ncommand = \"true\"\nplacement = \"ec2\"\n\n\
                 [pipelines.probe.ec2]\nprovider = \"local\"\ntype = \"small\"\nlocations = [\"here\"]\n";
    db.register(
        &dir,
        &format!("{}\n{probe}", pipeline("pay", &pids, "on_lost = \"fail\"")),
    );
    let run = db.queue("pay");
    let mut a = db.scheduler(&dir, &[]);
    wait_until("its local attempt runs", 30.0, || pids_in(&pids).len() == 1);
    db.register(
        &dir,
        &format!(
            "{}\n{probe}",
            pipeline("pay", &pids, &format!("on_lost = \"fail\"\n{ec2}"))
        ),
    );
    // An EC2 run queued after the move succeeds: the leader's upkeep has
    // run (runs short of instances are filled first) since.
    let p = db.queue("probe");
    a.wait_for("an EC2 run after the move succeeds", 90.0, || {
        db.state(p) == "succeeded"
    });
    let instances: i64 = db.one(&format!(
        "SELECT count(*) FROM orca.instances WHERE run = {run}"
    ));
    assert_eq!(instances, 0, "an instance was made for a local attempt");
    assert_eq!(pids_in(&pids).len(), 1, "it began twice");
    // Its scheduler lost: failed as lost, not queued again.
    a.signal(libc::SIGKILL);
    a.wait(10.0);
    let mut b = db.scheduler(&dir, &[]);
    b.wait_for("the attempt is failed as lost", 60.0, || {
        db.state(run) == "failed"
    });
    let why = why_of(&db, run);
    assert!(
        why.starts_with("lost (on_lost = \"fail\", not run again): "),
        "{why}"
    );
    assert_eq!(start_of(&db, run), 1);
    assert_eq!(db.events(run, "requeued"), 0);
    assert_eq!(pids_in(&pids).len(), 1, "it began twice");
    b.stop();
}
