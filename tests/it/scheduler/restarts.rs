//! The scheduler stopped or killed: kill -9 leaves no child and the next
//! one finishes the runs, SIGTERM stops children and queues their runs
//! again, a run that ended first keeps its outcome, a cancel outlives the
//! scheduler that was asked.

use super::*;

#[test]
fn kill_9_of_the_scheduler_leaves_no_child_and_the_next_one_finishes_the_runs() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let pids = dir.path("pids");
    // The first attempt hangs (with a grandchild); a later one succeeds.
    db.register(
        &dir,
        &format!(
            "[pipelines.p]\nmax_runs = 3\ncommand = \"{}\"\n",
            hang_first_attempt(&pids)
        ),
    );
    let ids: Vec<i64> = (0..3).map(|_| db.queue("p")).collect();
    let mut a = db.scheduler(&dir, &[]);
    wait_until("three runs running", 30.0, || pids_in(&pids).len() == 3);
    a.signal(libc::SIGKILL);
    a.wait(10.0);
    let grandchildren = pids_in(&pids);
    wait_until("no child of the killed scheduler is left", 10.0, || {
        grandchildren.iter().all(|p| !alive(*p))
    });
    let mut b = db.scheduler(&dir, &[]);
    wait_until("the runs are finished by the next scheduler", 60.0, || {
        ids.iter().all(|id| db.state(*id) == "succeeded")
    });
    for id in &ids {
        assert_eq!(db.events(*id, "requeued"), 1, "run {id} requeued once");
        assert_eq!(db.events(*id, "succeeded"), 1);
        assert_eq!(
            db.one::<i32>(&format!("SELECT start FROM orca.runs WHERE id = {id}")),
            2
        );
        // The attempt the dead scheduler ran is kept, queued again (it
        // printed nothing), then the one that succeeded.
        let logs = db.ok(&["logs", &id.to_string()]);
        let lines: Vec<&str> = logs.lines().collect();
        assert_eq!(lines.len(), 3, "{logs}");
        assert!(
            lines[0].starts_with("--- attempt 1 of 2: requeued at ")
                && lines[0].contains(" UTC: heartbeat stale for over "),
            "{logs}"
        );
        assert!(
            lines[1].starts_with("--- attempt 2 of 2: succeeded (exit 0) at "),
            "{logs}"
        );
        assert_eq!(lines[2], "done 2");
        assert!(logs.ends_with("done 2\n"));
    }
    b.stop();
}

#[test]
fn sigterm_stops_children_and_queues_their_runs_again() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let pids = dir.path("pids");
    db.register(
        &dir,
        &format!("[pipelines.p]\ncommand = \"{}\"\n", hang(&pids)),
    );
    let id = db.queue("p");
    let mut s = db.scheduler(&dir, &[]);
    wait_until("the run is running", 30.0, || !pids_in(&pids).is_empty());
    s.stop();
    assert_eq!(db.state(id), "queued");
    assert_eq!(db.events(id, "requeued"), 1);
    assert!(!alive(pids_in(&pids)[0]));
}

#[test]
fn a_run_that_ended_before_sigterm_keeps_its_outcome() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let did = dir.path("did");
    db.register(
        &dir,
        &format!(
            "[pipelines.p]\ncommand = \"sleep 0.5; echo did >> {}\"\n",
            did.display()
        ),
    );
    let id = db.queue("p");
    // A long tick: the run ends well before the scheduler's next look.
    let mut s = db.scheduler(&dir, &[("ORCA_TICK_SECONDS", "6")]);
    wait_until("the run did its work", 20.0, || did.exists());
    wait_until("its process has exited", 10.0, || {
        !std::process::Command::new("pgrep")
            .args(["-f", &format!("echo did >> {}", did.display())])
            .status()
            .unwrap()
            .success()
    });
    s.stop();
    assert_eq!(db.state(id), "succeeded", "not queued to run a second time");
}

#[test]
fn a_cancel_outlives_the_scheduler_that_was_asked() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let pids = dir.path("pids");
    db.register(
        &dir,
        &format!("[pipelines.p]\ncommand = \"{}\"\n", hang(&pids)),
    );
    let id = db.queue("p");
    let mut a = db.scheduler(&dir, &[]);
    wait_until("the run is running", 30.0, || !pids_in(&pids).is_empty());
    a.signal(libc::SIGKILL);
    a.wait(10.0);
    // No scheduler supervises it now; the cancel is asked for all the same.
    assert!(db.ok(&["cancel", &id.to_string()]).contains("SIGTERM"));
    let mut b = db.scheduler(&dir, &[]);
    wait_until(
        "the sweep cancels it rather than running it again",
        30.0,
        || db.state(id) == "cancelled",
    );
    assert_eq!(
        db.one::<i32>(&format!("SELECT start FROM orca.runs WHERE id = {id}")),
        1
    );
    assert_eq!(db.events(id, "started"), 1);
    b.stop();
}
