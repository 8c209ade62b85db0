//! Sensors: one run queued at a time, one that hangs or escapes its
//! session killed at its time limit, one that cannot run said once per
//! change.

use super::*;

#[test]
fn a_sensor_queues_one_run_at_a_time() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let flag = dir.path("flag");
    let asked = dir.path("asked");
    db.register(
        &dir,
        &format!(
            "[pipelines.s]\ncommand = \"sleep 300\"\nsensor = \"echo 0 >> {}; test -f {}\"\nsensor_every = 0.3\n",
            asked.display(),
            flag.display()
        ),
    );
    let mut s = db.scheduler(&dir, &[]);
    let count = || db.one::<i64>("SELECT count(*) FROM orca.runs WHERE origin = 'sensor'");
    // No file, no run, however often the sensor is asked.
    wait_until("the sensor has run three times", 20.0, || {
        pids_in(&asked).len() >= 3
    });
    assert_eq!(count(), 0, "the sensor said no");
    std::fs::write(&flag, "").unwrap();
    wait_until("the sensor queues a run", 20.0, || count() >= 1);
    // One starts (max_runs 1); the next sensor run queues one more, and no
    // more while that one waits.
    wait_until("a second run waits", 20.0, || count() >= 2);
    // The sensor keeps saying yes; still only one run waits.
    let asked_so_far = pids_in(&asked).len();
    wait_until("five more yeses", 20.0, || {
        pids_in(&asked).len() >= asked_so_far + 5
    });
    assert_eq!(count(), 2, "one running, one waiting, no more");
    s.stop();
}

#[test]
fn a_sensor_that_hangs_is_killed_at_its_time_limit() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let pids = dir.path("pids");
    db.register(
        &dir,
        &format!(
            "[pipelines.s]\ncommand = \"true\"\nsensor = \"{}\"\nsensor_every = 0.5\n",
            hang(&pids)
        ),
    );
    let mut s = db.scheduler(&dir, &[]);
    // A second sensor process starts only once the first is gone.
    wait_until("the sensor ran twice", 20.0, || pids_in(&pids).len() >= 2);
    let first = pids_in(&pids)[0];
    wait_until("the first sensor's process is gone", 10.0, || !alive(first));
    assert_eq!(db.one::<i64>("SELECT count(*) FROM orca.runs"), 0);
    s.stop();
}

#[test]
fn a_sensor_that_escapes_its_session_and_ignores_sigterm_dies_at_its_time_limit() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let _leftovers = KillLeftovers(dir.0.clone());
    let pids = dir.path("sensor.pid");
    db.register(
        &dir,
        &format!(
            "[pipelines.s]\ncommand = \"true\"\nsensor = {}\nsensor_every = 0.5\n",
            toml_str(&escapes_and_ignores_term(&pids.display().to_string()))
        ),
    );
    let mut s = db.scheduler(&dir, &[]);
    // A second sensor process starts only once the first is gone.
    wait_until("the sensor ran twice", 30.0, || pids_in(&pids).len() >= 2);
    let first = pids_in(&pids)[0];
    wait_until("the first sensor's escaped sleep is gone", 15.0, || {
        !alive(first)
    });
    assert_eq!(db.one::<i64>("SELECT count(*) FROM orca.runs"), 0);
    s.stop();
}

/// Issue 26 §4.3: a sensor that fails to run (exit 126: not executable;
/// 127: not found, a typo) is said once per change, an event (`orca
/// events`) and a log line, not once every `sensor_every`.
#[test]
fn a_sensor_that_cannot_run_is_said_once_per_change() {
    let dir = TempDir::new();
    let ran = dir.path("ran");
    let code = dir.path("code");
    std::fs::write(&code, "127").unwrap();
    let (db, _d) = setup(&format!(
        "[pipelines.s]\ncommand = \"true\"\nsensor = \"echo x >> {}; exit $(cat {})\"\nsensor_every = 0.2\n",
        ran.display(),
        code.display()
    ));
    let mut s = db.scheduler(&dir, &[]);
    let runs = || {
        std::fs::read_to_string(&ran)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    let said = || {
        db.client()
            .query(
                "SELECT why FROM orca.events WHERE kind = 'sensor' AND pipeline = 's' ORDER BY id",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect::<Vec<_>>()
    };
    s.wait_for("the sensor's failure is said", 30.0, || !said().is_empty());
    let n = runs();
    s.wait_for("the sensor runs three more times", 30.0, || runs() >= n + 3);
    let whys = said();
    assert_eq!(whys.len(), 1, "once, not each time: {whys:?}");
    assert!(whys[0].contains("127"), "{whys:?}");
    let events = db.ok(&["events"]);
    assert!(
        events
            .lines()
            .any(|l| l.contains("sensor") && l.contains("127")),
        "{events}"
    );
    // It runs again (and says no): said once.
    std::fs::write(&code, "1").unwrap();
    s.wait_for("its recovery is said", 30.0, || said().len() == 2);
    let n = runs();
    s.wait_for("the sensor runs three more times", 30.0, || runs() >= n + 3);
    // Not executable now: said once more.
    std::fs::write(&code, "126").unwrap();
    s.wait_for("the new failure is said", 30.0, || said().len() == 3);
    let n = runs();
    s.wait_for("the sensor runs three more times", 30.0, || runs() >= n + 3);
    let whys = said();
    assert_eq!(whys.len(), 3, "{whys:?}");
    assert!(whys[2].contains("126"), "{whys:?}");
    let log = s.output();
    let lines = log
        .lines()
        .filter(|l| l.contains("sensor of s") && (l.contains("126") || l.contains("127")))
        .count();
    assert_eq!(lines, 2, "a log line per failure:\n{log}");
    s.stop();
}
