//! Scheduler overlap (ORCA_OVERLAP=on): deploys, crashes, hangs and outages
//! with several real `orca scheduler` processes on one database.

use crate::harness::*;

fn overlap(db: &TestDb, dir: &TempDir, image: &str) -> Proc {
    db.scheduler(dir, &[("ORCA_OVERLAP", "on"), ("ORCA_IMAGE", image)])
}

/// The id of the scheduler (its row in orca.schedulers) with pid `pid`.
fn scheduler_of(db: &TestDb, pid: i32) -> i64 {
    let mut id = 0;
    wait_until("the scheduler joins", 30.0, || {
        let row = db
            .client()
            .query_opt("SELECT id FROM orca.schedulers WHERE pid = $1", &[&pid])
            .unwrap();
        if let Some(r) = row {
            id = r.get(0);
        }
        id != 0
    });
    id
}

fn leads(db: &TestDb, id: i64) -> bool {
    db.client()
        .query_one("SELECT leads FROM orca.schedulers WHERE id = $1", &[&id])
        .unwrap()
        .get(0)
}

/// Seconds from joining to taking the lead, by the database's clock.
fn join_to_lead(db: &TestDb, id: i64) -> f64 {
    db.client()
        .query_one(
            "SELECT extract(epoch FROM lead_since - joined_at)::float8 FROM orca.schedulers WHERE id = $1",
            &[&id],
        )
        .unwrap()
        .get(0)
}

fn spans_config(log: &std::path::Path, max_runs: u32, secs: f64) -> String {
    format!(
        "[pipelines.p]\nmax_runs = {max_runs}\ncommand = \"echo start $ORCA_RUN_ID $(date +%s.%N) >> {0}; sleep {secs}; echo end $ORCA_RUN_ID $(date +%s.%N) >> {0}\"\n",
        log.display()
    )
}

#[test]
fn a_deploy_hands_over_without_losing_or_doubling_a_run() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let log = dir.path("spans");
    db.register(&dir, &spans_config(&log, 5, 1.5));
    let ids: Vec<i64> = (0..20).map(|_| db.queue("p")).collect();
    let mut a = overlap(&db, &dir, "a");
    let a_id = scheduler_of(&db, a.pid());
    wait_until("A runs five", 30.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.runs WHERE state = 'running'") == 5
    });
    let mut b = overlap(&db, &dir, "b");
    let b_id = scheduler_of(&db, b.pid());
    assert!(b_id > a_id);
    wait_until("B leads", 30.0, || leads(&db, b_id));
    // A drains: it lets its runs end, then exits 0.
    assert!(
        a.wait(60.0).success(),
        "A drains and exits 0:\n{}",
        a.output()
    );
    wait_until("all twenty succeed", 90.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.runs WHERE state = 'succeeded'") == 20
    });
    for id in &ids {
        assert_eq!(db.events(*id, "started"), 1, "run {id} started once");
        assert_eq!(db.events(*id, "succeeded"), 1, "run {id} ended once");
        assert_eq!(db.events(*id, "requeued"), 0, "run {id} was not requeued");
    }
    let spans = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        spans.lines().filter(|l| l.starts_with("start")).count(),
        20,
        "no run ran twice"
    );
    assert!(
        crate::scheduler::max_overlap(&spans) <= 5,
        "max_runs held across A and B:\n{spans}"
    );
    let by_b: i64 = db.one(&format!(
        "SELECT count(*) FROM orca.runs WHERE instance = {b_id}"
    ));
    let by_a: i64 = db.one(&format!(
        "SELECT count(*) FROM orca.runs WHERE instance = {a_id}"
    ));
    assert!(
        by_a >= 5 && by_b >= 1 && by_a + by_b == 20,
        "A started {by_a}, B {by_b}"
    );
    let schedulers: serde_json::Value =
        serde_json::from_str(&db.ok(&["schedulers", "--json"])).unwrap();
    let roles: Vec<(i64, String, String)> = schedulers
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["id"].as_i64().unwrap(),
                i["role"].as_str().unwrap().to_string(),
                i["image"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        roles,
        vec![
            (a_id, "gone".into(), "a".into()),
            (b_id, "leader".into(), "b".into())
        ]
    );
    b.stop();
}

/// The newer scheduler waits on the lead lock between its ticks, so it
/// leads the moment the older drains, not at its own next tick: with a 5 s
/// tick, polling would leave about 5 s without a leader.
/// On a database hardened as docs/security.md says.
#[test]
fn the_newer_scheduler_leads_as_the_older_drains_not_a_tick_later() {
    hands_over_at_once(TestDb::new());
}

/// On a database without the administrator's hardening (as on RDS).
#[test]
fn the_newer_scheduler_leads_at_once_on_an_unhardened_database() {
    hands_over_at_once(TestDb::unhardened());
}

/// On a database hardened as docs/security.md once said, keeping only the
/// try forms for orca's role: the standby may not wait on the lock, so it
/// tries it every 0.1 s, says so once, and still leads within a tick.
#[test]
fn the_newer_scheduler_leads_at_once_where_orca_may_not_wait_on_the_lock() {
    let db = TestDb::new();
    db.admin_here(&format!(
        "REVOKE EXECUTE ON FUNCTION pg_advisory_lock(bigint) FROM {OWNER}"
    ));
    let b_log = hands_over_at_once(db);
    let said = |what: &str| b_log.matches(what).count();
    assert_eq!(
        said("orca's role may not execute pg_advisory_lock(bigint)"),
        1,
        "warned once at start:\n{b_log}"
    );
    // Only if B waited at all (A may drain before B's first try).
    assert!(
        said("this standby tries the lead every 0.1 s") <= 1,
        "said once:\n{b_log}"
    );
}

/// A hands over to B, whose tick is 5 s, within 2 s of draining, and B
/// logs no refusal: B's log.
fn hands_over_at_once(db: TestDb) -> String {
    let dir = TempDir::new();
    db.register(&dir, "[pipelines.t]\ncommand = \"true\"\n");
    let mut a = overlap(&db, &dir, "a");
    let a_id = scheduler_of(&db, a.pid());
    wait_until("A leads", 30.0, || leads(&db, a_id));
    let mut b = db.scheduler(
        &dir,
        &[
            ("ORCA_OVERLAP", "on"),
            ("ORCA_IMAGE", "b"),
            ("ORCA_TICK_SECONDS", "5"),
        ],
    );
    let b_id = scheduler_of(&db, b.pid());
    wait_until("B leads", 30.0, || leads(&db, b_id));
    assert!(a.wait(30.0).success(), "A drains:\n{}", a.output());
    let gap: f64 = db.one(&format!(
        "SELECT extract(epoch FROM s.lead_since - e.at)::float8
         FROM orca.schedulers s, orca.events e
         WHERE s.id = {b_id} AND e.kind = 'draining' AND e.why LIKE 'scheduler {a_id} %'"
    ));
    assert!(
        (0.0..2.0).contains(&gap),
        "B led {gap:.2}s after A drained (B's tick is 5 s); B's log:\n{}",
        b.output()
    );
    b.stop();
    let log = b.output();
    assert!(!log.contains("permission denied"), "{log}");
    log
}

#[test]
fn a_crashed_leader_restarted_at_once_leads_and_its_runs_finish_once() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let pids = dir.path("pids");
    db.register(
        &dir,
        &format!(
            "[pipelines.p]\nmax_runs = 3\ncommand = \"{}\"\n",
            hang_first_attempt(&pids)
        ),
    );
    let ids: Vec<i64> = (0..3).map(|_| db.queue("p")).collect();
    let mut a = overlap(&db, &dir, "a");
    wait_until("three runs running", 30.0, || pids_in(&pids).len() == 3);
    a.signal(libc::SIGKILL);
    a.wait(10.0);
    let started = std::time::Instant::now();
    let b = overlap(&db, &dir, "a");
    let b_id = scheduler_of(&db, b.pid());
    wait_until("the restarted scheduler leads", 20.0, || leads(&db, b_id));
    let took = join_to_lead(&db, b_id);
    assert!(
        took < 2.0,
        "joined to leading took {took}s (wall {:?})",
        started.elapsed()
    );
    wait_until("the dead one's runs finish, once each", 60.0, || {
        ids.iter().all(|id| db.state(*id) == "succeeded")
    });
    for id in &ids {
        assert_eq!(db.events(*id, "requeued"), 1);
        assert_eq!(db.events(*id, "succeeded"), 1);
        assert_eq!(
            db.one::<i32>(&format!("SELECT start FROM orca.runs WHERE id = {id}")),
            2
        );
    }
    assert!(pids_in(&pids).iter().all(|p| !alive(*p)));
}

#[test]
fn a_hung_leader_is_fenced_off_and_drains_after_it_wakes() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let pids = dir.path("pids");
    db.register(
        &dir,
        &format!(
            "[pipelines.p]\nmax_runs = 2\ncommand = \"{}\"\n[pipelines.q]\ncommand = \"echo q\"\n",
            hang(&pids)
        ),
    );
    let first: Vec<i64> = (0..2).map(|_| db.queue("p")).collect();
    let mut a = overlap(&db, &dir, "a");
    let a_id = scheduler_of(&db, a.pid());
    wait_until("two runs running", 30.0, || pids_in(&pids).len() == 2);
    let old_processes = pids_in(&pids);
    a.signal(libc::SIGSTOP);
    let b = overlap(&db, &dir, "b");
    let b_id = scheduler_of(&db, b.pid());
    wait_until("B takes the lead from the hung A", 30.0, || {
        leads(&db, b_id)
    });
    let stale = 3.0;
    let took = join_to_lead(&db, b_id);
    assert!(
        took <= stale + 2.0,
        "took {took}s to lead (stale limit {stale}s)"
    );
    // A's runs: A is gone and their heartbeats are stale: B runs them again.
    wait_until("B starts A's runs again", 60.0, || {
        first.iter().all(|id| {
            db.client()
                .query_one("SELECT start, instance FROM orca.runs WHERE id = $1", &[id])
                .map(|r| r.get::<_, i32>(0) == 2 && r.get::<_, Option<i64>>(1) == Some(b_id))
                .unwrap()
        })
    });
    a.signal(libc::SIGCONT);
    let q = db.queue("q");
    wait_until("q succeeds", 30.0, || db.state(q) == "succeeded");
    // A wakes, finds its session ended and a newer scheduler: it decides
    // nothing, kills the processes whose runs moved on, drains and exits.
    let status = a.wait(60.0);
    assert!(status.success(), "A drains and exits 0:\n{}", a.output());
    wait_until("A's old processes are gone", 10.0, || {
        old_processes.iter().all(|p| !alive(*p))
    });
    let by_a: i64 = db.one(&format!(
        "SELECT count(*) FROM orca.runs WHERE instance = {a_id}"
    ));
    assert_eq!(by_a, 0, "every run is B's now");
    let q_by: Option<i64> = db.one(&format!("SELECT instance FROM orca.runs WHERE id = {q}"));
    assert_eq!(q_by, Some(b_id));
    for id in &first {
        assert_eq!(db.state(*id), "running", "run {id} still runs under B");
        assert_eq!(db.events(*id, "started"), 2);
    }
    assert!(
        a.output().contains("queued again elsewhere"),
        "{}",
        a.output()
    );
}

#[test]
fn a_database_restart_with_two_schedulers_requeues_nothing() {
    let cluster = Cluster::new("");
    cluster.start();
    let db = TestDb::on(&cluster.url());
    let dir = TempDir::new();
    let done = dir.path("done");
    db.register(
        &dir,
        &format!(
            "[pipelines.p]\nmax_runs = 4\ncommand = \"sleep 16; echo $ORCA_RUN_ID >> {}\"\n",
            done.display()
        ),
    );
    let ids: Vec<i64> = (0..4).map(|_| db.queue("p")).collect();
    let mut a = overlap(&db, &dir, "a");
    wait_until("four running", 30.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.runs WHERE state = 'running'") == 4
    });
    let mut b = overlap(&db, &dir, "b");
    let b_id = scheduler_of(&db, b.pid());
    wait_until("B leads, A drains its runs", 30.0, || leads(&db, b_id));
    // Down for over twice the stale limit: every beat and heartbeat is stale
    // when it comes back, yet A lives and holds its runs.
    cluster.stop();
    let down = std::time::Instant::now();
    wait_until("both schedulers notice the outage", 20.0, || {
        a.output().contains("can't be reached") && b.output().contains("can't be reached")
    });
    // The rest of the outage's seven seconds: its length is the fault
    // itself, with no fact of the system's to wait on while the server is
    // down.
    std::thread::sleep(std::time::Duration::from_secs(7).saturating_sub(down.elapsed()));
    cluster.start();
    wait_until("the four runs end", 60.0, || {
        ids.iter().all(|id| db.state(*id) == "succeeded")
    });
    assert!(
        a.wait(30.0).success(),
        "A drains and exits:\n{}",
        a.output()
    );
    for id in &ids {
        assert_eq!(
            db.events(*id, "requeued"),
            0,
            "run {id} requeued while A lived"
        );
        assert_eq!(db.events(*id, "started"), 1);
        assert_eq!(db.events(*id, "succeeded"), 1);
    }
    b.stop();
}

#[test]
fn schedulers_drain_and_deploy_commands() {
    let db = TestDb::new();
    let dir = TempDir::new();
    // Overlap off: no rows in orca.schedulers, but `orca schedulers` names it.
    let mut off = db.scheduler(&dir, &[]);
    off.wait_for("the overlap-off scheduler leads", 20.0, || db.lead_held());
    let text_out = db.ok(&["schedulers"]);
    assert!(
        text_out.contains(&format!("pid {}", off.pid())) && text_out.contains("ORCA_OVERLAP=off"),
        "{text_out}"
    );
    // --json: the same scheduler, one more element of the one array.
    let json: serde_json::Value = serde_json::from_str(&db.ok(&["schedulers", "--json"])).unwrap();
    let all = json.as_array().unwrap();
    assert_eq!(all.len(), 1, "{json}");
    assert_eq!(all[0]["overlap"], false, "{json}");
    assert_eq!(all[0]["role"], "leader", "{json}");
    assert!(
        all[0]["host"]
            .as_str()
            .is_some_and(|h| h.contains(&format!("pid {}", off.pid()))),
        "{json}"
    );
    // It can't hand over: a new binary can't start beside it.
    let check = db.run(&["deploy", "check"]);
    assert_eq!(check.status.code(), Some(1));
    assert!(
        text(&check.stderr).contains("ORCA_OVERLAP=off"),
        "{}",
        text(&check.stderr)
    );
    off.stop();

    // No scheduler at all: nothing blocks a start.
    let check = db.run(&["deploy", "check"]);
    assert_eq!(check.status.code(), Some(0), "{}", text(&check.stderr));
    assert!(text(&check.stdout).contains("no scheduler is running"));
    let none = db.run(&["scheduler", "drain"]);
    assert_eq!(none.status.code(), Some(1), "no leader to drain");
    assert!(
        db.run(&["deploy", "wait", "--timeout", "1"])
            .status
            .success(),
        "no scheduler: at once"
    );

    let mut a = overlap(&db, &dir, "img-a");
    let a_id = scheduler_of(&db, a.pid());
    wait_until("A leads", 20.0, || leads(&db, a_id));
    let check = db.run(&["deploy", "check"]);
    assert_eq!(check.status.code(), Some(0), "{}", text(&check.stderr));
    assert!(check.stdout.is_empty() && check.stderr.is_empty());
    assert!(
        db.run(&["deploy", "wait", "--timeout", "5"])
            .status
            .success()
    );
    // Waiting for an image that hasn't joined yet is not satisfied by A.
    let other = db
        .orca(&["deploy", "wait", "--timeout", "1"])
        .env("ORCA_IMAGE", "img-next")
        .output()
        .unwrap();
    assert_eq!(other.status.code(), Some(1));
    let same = db
        .orca(&["deploy", "wait", "--timeout", "5"])
        .env("ORCA_IMAGE", "img-a")
        .output()
        .unwrap();
    assert!(same.status.success());

    // A live (draining) scheduler that knows fewer migrations than the floor.
    db.client()
        .execute(
            "INSERT INTO orca.schedulers (host, pid, image, migrations, draining) VALUES ('old-host', 4242, 'old', 1, true)",
            &[],
        )
        .unwrap();
    let check = db.run(&["deploy", "check"]);
    assert_eq!(check.status.code(), Some(1));
    let why = text(&check.stderr);
    assert!(
        why.contains("old-host pid 4242 knows 1 migration, fewer than") && why.contains("floor"),
        "{why}"
    );
    let listing = db.ok(&["schedulers"]);
    let lines: Vec<&str> = listing.lines().collect();
    assert!(
        lines[1].contains("leader") && lines[1].contains("img-a"),
        "{listing}"
    );
    assert!(
        lines[2].contains("draining") && lines[2].contains("old-host 4242"),
        "{listing}"
    );
    db.client()
        .execute("DELETE FROM orca.schedulers WHERE pid = 4242", &[])
        .unwrap();

    // A newer live scheduler that never takes the lead: A drains for it, and
    // `deploy wait` times out.
    db.client()
        .execute(
            "INSERT INTO orca.schedulers (host, pid, image, migrations, seen_at) \
             VALUES ('new-host', 4343, 'new', 99, now() + interval '1 hour')",
            &[],
        )
        .unwrap();
    let wait = db.run(&["deploy", "wait", "--timeout", "1"]);
    assert_eq!(wait.status.code(), Some(1));
    assert!(a.wait(30.0).success(), "A drains for the newer scheduler");
    db.client()
        .execute("DELETE FROM orca.schedulers WHERE pid = 4343", &[])
        .unwrap();

    // `orca scheduler drain` asks the leader (the only live scheduler: forced).
    let mut c = overlap(&db, &dir, "img-c");
    let c_id = scheduler_of(&db, c.pid());
    wait_until("C leads", 20.0, || leads(&db, c_id));
    let asked = db.ok(&["scheduler", "drain", "--force"]);
    assert!(asked.contains(&c_id.to_string()), "{asked}");
    assert!(c.wait(30.0).success(), "C drains and exits 0");
    let again = db.run(&["scheduler", "drain", &c_id.to_string()]);
    assert_eq!(again.status.code(), Some(1), "C is gone");
    let events = db.ok(&["events"]);
    for kind in ["lead taken", "draining", "drain asked", "ended"] {
        assert!(events.contains(kind), "no '{kind}' event:\n{events}");
    }
}

#[test]
fn sigterm_with_overlap_on_drains() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let flag = dir.path("flag");
    db.register(
        &dir,
        &format!(
            "[pipelines.p]\ncommand = \"while [ ! -f {} ]; do sleep 0.1; done; echo done\"\n",
            flag.display()
        ),
    );
    let id = db.queue("p");
    let mut a = overlap(&db, &dir, "a");
    let a_id = scheduler_of(&db, a.pid());
    wait_until("the run is running", 30.0, || db.state(id) == "running");
    a.signal(libc::SIGTERM);
    wait_until("A drains", 20.0, || {
        db.one::<bool>(&format!(
            "SELECT draining FROM orca.schedulers WHERE id = {a_id}"
        ))
    });
    // Draining: its run goes on, under it, and it waits for it.
    assert_eq!(db.state(id), "running");
    assert!(a.child.try_wait().unwrap().is_none(), "A waits for its run");
    std::fs::write(&flag, "").unwrap();
    assert!(a.wait(30.0).success(), "A exits 0 once its run ends");
    assert_eq!(db.state(id), "succeeded");
    assert_eq!(db.events(id, "requeued"), 0);
    assert_eq!(db.events(id, "started"), 1);
    let ended: bool = db.one(&format!(
        "SELECT ended_at IS NOT NULL FROM orca.schedulers WHERE id = {a_id}"
    ));
    assert!(ended);
}

/// A standby waiting for a hung leader's lock still hears SIGTERM
/// at once (it used to check every 50 ms).
#[test]
fn a_waiting_standby_drains_on_sigterm_without_waiting_out_its_tick() {
    let db = TestDb::new();
    let dir = TempDir::new();
    db.register(&dir, "[pipelines.t]\ncommand = \"true\"\n");
    let mut a = overlap(&db, &dir, "a");
    let a_id = scheduler_of(&db, a.pid());
    wait_until("A leads", 30.0, || leads(&db, a_id));
    a.signal(libc::SIGSTOP);
    let mut b = db.scheduler(
        &dir,
        &[
            ("ORCA_OVERLAP", "on"),
            ("ORCA_IMAGE", "b"),
            ("ORCA_TICK_SECONDS", "20"),
        ],
    );
    let b_id = scheduler_of(&db, b.pid());
    b.wait_for("B waits for the lead", 30.0, || {
        b.output()
            .contains(&format!("scheduler {b_id} waits for the lead"))
    });
    let t = std::time::Instant::now();
    b.signal(libc::SIGTERM);
    let st = b.wait(40.0);
    let took = t.elapsed().as_secs_f64();
    a.signal(libc::SIGCONT);
    // Well within its 20 s tick: the wait for the lead heeds SIGTERM.
    assert!(
        took < 10.0,
        "B exited {took:.1}s after SIGTERM ({st:?}); B's log:\n{}",
        b.output()
    );
    a.stop();
}

/// Issue 26 §4.1: draining the only live scheduler leaves nobody leading, so
/// it is refused (one line, exit 1) unless `--force`; forced, it drains as
/// asked, and `orca deploy check` says the truth: the scheduler is draining
/// and none will lead (no handover is under way).
#[test]
fn draining_the_only_live_scheduler_needs_force() {
    let (db, dir) = setup("[pipelines.p]\ncommand = \"sleep 600\"\n");
    let mut a = overlap(&db, &dir, "img-a");
    let a_id = scheduler_of(&db, a.pid());
    wait_until("A leads", 20.0, || leads(&db, a_id));
    // A run keeps A live while it drains.
    let run = db.queue("p");
    wait_until("the run runs", 30.0, || db.state(run) == "running");
    let id = a_id.to_string();
    for args in [vec!["scheduler", "drain"], vec!["scheduler", "drain", &id]] {
        let out = db.run(&args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "orca {args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(
            err.contains("only live scheduler") && err.contains("--force"),
            "orca {args:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "orca {args:?}");
    }
    assert_eq!(db.events_of_kind("drain asked"), 0, "nothing asked");
    assert!(leads(&db, a_id), "A still leads");
    // Beside another live scheduler that may lead (A), one is drained
    // without --force (a row of an older scheduler, which A won't drain for).
    let old: i64 = db.one(
        "INSERT INTO orca.schedulers (host, pid, image, migrations, seen_at) \
         VALUES ('old-host', 4242, 'old', 1, now() + interval '1 hour') RETURNING id",
    );
    let asked = db.ok(&["scheduler", "drain", &old.to_string()]);
    assert!(asked.contains(&old.to_string()), "{asked}");
    // Asked to drain, it is no one that will lead: A is alone again.
    let out = db.run(&["scheduler", "drain"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    db.client()
        .execute("DELETE FROM orca.schedulers WHERE id = $1", &[&old])
        .unwrap();
    assert_eq!(db.events_of_kind("drain asked"), 1);

    let forced = db.ok(&["scheduler", "drain", "--force"]);
    assert!(forced.contains(&a_id.to_string()), "{forced}");
    // At once, asked but (most likely) not draining yet: no handover either.
    let check = db.run(&["deploy", "check"]);
    let said = format!("{}{}", text(&check.stdout), text(&check.stderr));
    assert!(
        !said.contains("handover") && said.contains("none will lead"),
        "asked to drain: {said}"
    );
    wait_until("A drains", 30.0, || {
        db.one::<bool>(&format!(
            "SELECT draining FROM orca.schedulers WHERE id = {a_id}"
        ))
    });
    let check = db.run(&["deploy", "check"]);
    let said = format!("{}{}", text(&check.stdout), text(&check.stderr));
    assert!(
        !said.contains("handover"),
        "no handover is under way: {said}"
    );
    assert!(
        said.contains("draining") && said.contains("none will lead"),
        "{said}"
    );
    assert_eq!(
        check.status.code(),
        Some(0),
        "nothing blocks a start: {said}"
    );
    db.ok(&["cancel", &run.to_string()]);
    assert!(
        a.wait(30.0).success(),
        "A drains and exits 0:\n{}",
        a.output()
    );
}
