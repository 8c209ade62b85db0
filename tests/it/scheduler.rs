//! The scheduler as real processes: schedules, max_runs, retries and alerts,
//! timeouts, cancels, sensors, output, kill -9 and SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use crate::harness::*;

#[test]
fn a_second_scheduler_is_refused_and_names_the_first() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let mut first = db.scheduler(&dir, &[]);
    wait_until("the first scheduler leads", 20.0, || {
        first.output().contains("leads")
    });
    let out = db.orca(&["scheduler"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains(&format!("pid {}", first.pid())), "{err}");
    first.stop();
}

#[test]
fn a_schedule_fires_once_per_slot_across_restarts() {
    let (db, dir) =
        setup("[pipelines.tick]\ncommand = \"true\"\nschedule = \"* * * * * *\"\nmax_runs = 5\n");
    let fired =
        |db: &TestDb| db.one::<i64>("SELECT count(*) FROM orca.runs WHERE origin = 'schedule'");
    let mut a = db.scheduler(&dir, &[]);
    wait_until("three slots fired", 20.0, || fired(&db) >= 3);
    // A clean stop, then a few slots of downtime (by the database's clock).
    a.stop();
    let stopped: f64 = db.one("SELECT extract(epoch FROM now())::float8");
    wait_until("3.5 s of downtime", 20.0, || {
        db.one::<f64>("SELECT extract(epoch FROM now())::float8") > stopped + 3.5
    });
    let before = fired(&db);
    let mut b = db.scheduler(&dir, &[]);
    wait_until("three more slots", 20.0, || fired(&db) >= before + 3);
    // A crash, and a restart at once.
    b.signal(libc::SIGKILL);
    b.wait(10.0);
    let before = fired(&db);
    let mut c = db.scheduler(&dir, &[]);
    wait_until("three more slots", 20.0, || fired(&db) >= before + 3);
    c.stop();

    let slots: Vec<f64> = db
        .client()
        .query(
            "SELECT extract(epoch FROM scheduled_for)::float8 FROM orca.runs \
             WHERE origin = 'schedule' ORDER BY scheduled_for",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let distinct: std::collections::BTreeSet<i64> = slots.iter().map(|s| *s as i64).collect();
    assert_eq!(distinct.len(), slots.len(), "a slot fired twice: {slots:?}");
    // The downtime of 3.5 s+ left one gap (slots skipped, one catch-up);
    // elsewhere every second has its run.
    let gaps: Vec<f64> = slots
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|g| *g > 1.0)
        .collect();
    assert!(
        gaps.iter().any(|g| *g >= 3.0),
        "the downtime should skip slots, not fire each: {slots:?}"
    );
    let catch_ups: i64 =
        db.one("SELECT count(*) FROM orca.events WHERE kind = 'fired' AND why LIKE '%catch-up%'");
    assert!(
        catch_ups >= 1,
        "the restart after downtime fires one catch-up run"
    );
}

/// Reads `start ID T` / `end ID T` lines and returns the most runs that
/// were inside their command at once.
pub fn max_overlap(log: &str) -> usize {
    let mut points: Vec<(f64, i32)> = log
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let kind = w.next()?;
            let _id = w.next()?;
            let t: f64 = w.next()?.parse().ok()?;
            Some((t, if kind == "start" { 1 } else { -1 }))
        })
        .collect();
    // Ends sort before starts at the same instant.
    points.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut most) = (0, 0);
    for (_, d) in points {
        now += d;
        most = most.max(now);
    }
    most as usize
}

#[test]
fn max_runs_holds_with_twenty_queued() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let log = dir.path("spans");
    db.register(
        &dir,
        &format!(
            "[pipelines.m]\nmax_runs = 3\ncommand = \"echo start $ORCA_RUN_ID $(date +%s.%N) >> {0}; sleep 0.4; echo end $ORCA_RUN_ID $(date +%s.%N) >> {0}\"\n",
            log.display()
        ),
    );
    let ids: Vec<i64> = (0..20).map(|_| db.queue("m")).collect();
    let fill = db
        .ok(&["run", "m", "--fill"])
        .trim()
        .parse::<i64>()
        .unwrap();
    let mut s = db.scheduler(&dir, &[]);
    wait_until("all 21 runs succeeded", 60.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.runs WHERE state = 'succeeded'") == 21
    });
    let spans = std::fs::read_to_string(&log).unwrap();
    let most = max_overlap(&spans);
    // 3 by max_runs, plus the fill run on top.
    assert!(most <= 4, "more than max_runs at once: {most}\n{spans}");
    assert!(most >= 3, "max_runs was never reached: {most}");
    // Oldest first.
    let order: Vec<i64> = spans
        .lines()
        .filter(|l| l.starts_with("start"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
        .filter(|id| *id != fill)
        .collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order.len(), ids.len());
    // Started in id order, up to the jitter of three starting in one tick.
    for (i, id) in order.iter().enumerate() {
        let pos = sorted.iter().position(|x| x == id).unwrap();
        assert!(
            (pos as i64 - i as i64).abs() < 3,
            "run {id} started out of order: {order:?}"
        );
    }
    s.stop();
}

/// A tiny HTTP receiver: records each request's body and answers with the
/// next status in `statuses` (then 200).
fn receiver(statuses: Vec<u16>) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://127.0.0.1:{}/hook",
        listener.local_addr().unwrap().port()
    );
    let got = Arc::new(Mutex::new(Vec::new()));
    let seen = got.clone();
    std::thread::spawn(move || {
        let mut statuses = statuses.into_iter();
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
                if line == "\r\n" {
                    break;
                }
            }
            let mut body = vec![0u8; len];
            let _ = reader.read_exact(&mut body);
            seen.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&body).into_owned());
            let status = statuses.next().unwrap_or(200);
            let _ = write!(
                conn,
                "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
        }
    });
    (url, got)
}

#[test]
fn retries_then_one_alert_on_final_failure() {
    let db = TestDb::new();
    let dir = TempDir::new();
    // The receiver fails the first delivery: the alert is retried.
    let (url, got) = receiver(vec![500]);
    db.register(
        &dir,
        &format!(
            "[pipelines.flaky]\ncommand = \"echo attempt $ORCA_RUN_START; exit 3\"\nretries = 2\nretry_delay = 1.5\nalert = \"{url}\"\n"
        ),
    );
    let id = db.queue("flaky");
    let mut s = db.scheduler(&dir, &[]);
    wait_until("the alert is delivered", 60.0, || {
        db.events(id, "alert sent") == 1
    });
    assert_eq!(db.state(id), "failed");
    assert_eq!(
        db.one::<i32>(&format!("SELECT start FROM orca.runs WHERE id = {id}")),
        3
    );
    assert_eq!(db.events(id, "retried"), 2);
    assert_eq!(db.events(id, "failed"), 3);
    // Each retry waited its retry_delay (by the database's clock).
    let shortest: f64 = db.one(&format!(
        "SELECT min(extract(epoch FROM s.at - r.at))::float8 FROM orca.events r \
         CROSS JOIN LATERAL (SELECT at FROM orca.events s WHERE s.run = r.run \
           AND s.kind = 'started' AND s.id > r.id ORDER BY s.id LIMIT 1) s \
         WHERE r.run = {id} AND r.kind = 'retried'"
    ));
    assert!(
        shortest >= 1.5,
        "a retry started {shortest}s after its failure"
    );
    assert_eq!(db.events(id, "alert failed"), 1, "the 500 was retried");
    let bodies = got.lock().unwrap().clone();
    assert_eq!(
        bodies.len(),
        2,
        "one failed delivery, one delivered: {bodies:?}"
    );
    let body: serde_json::Value = serde_json::from_str(&bodies[1]).unwrap();
    assert_eq!(body["pipeline"], "flaky");
    assert_eq!(body["run"], id);
    assert_eq!(body["start"], 3);
    assert_eq!(body["state"], "failed");
    assert_eq!(body["exit_code"], 3);
    assert!(body["output"].as_str().unwrap().contains("attempt 3"));
    assert_eq!(
        db.one::<i64>("SELECT count(*) FROM orca.alerts"),
        1,
        "one alert for the run"
    );
    s.stop();
}

#[test]
fn a_timeout_kills_the_whole_process_group() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let pids = dir.path("pids");
    // The command ignores SIGTERM (and so does its child): SIGKILL follows.
    db.register(
        &dir,
        &format!(
            "[pipelines.slow]\ncommand = \"trap '' TERM; sleep 300 & echo $! >> {0}; echo $$ >> {0}; wait\"\ntimeout = 1\n",
            pids.display()
        ),
    );
    let id = db.queue("slow");
    let mut s = db.scheduler(&dir, &[("ORCA_KILL_GRACE_SECONDS", "1")]);
    wait_until("the run ends", 30.0, || {
        !["running", "queued"].contains(&db.state(id).as_str())
    });
    assert_eq!(db.state(id), "failed");
    let why: String = db.one(&format!("SELECT why FROM orca.runs WHERE id = {id}"));
    assert!(why.contains("timed out"), "{why}");
    let sig: Option<i32> = db.one(&format!(
        "SELECT exit_signal FROM orca.runs WHERE id = {id}"
    ));
    assert_eq!(sig, Some(libc::SIGKILL), "SIGTERM was ignored, so SIGKILL");
    assert_eq!(db.events(id, "failed"), 1);
    assert_eq!(db.events(id, "timed out"), 1);
    let pids = pids_in(&pids);
    assert_eq!(pids.len(), 2);
    wait_until("no process of the run is left", 10.0, || {
        pids.iter().all(|p| !alive(*p))
    });
    s.stop();
}

#[test]
fn cancel_stops_a_running_run() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let pids = dir.path("pids");
    db.register(
        &dir,
        &format!("[pipelines.long]\ncommand = \"{}\"\n", hang(&pids)),
    );
    let id = db.queue("long");
    let mut s = db.scheduler(&dir, &[]);
    wait_until("the run is running", 30.0, || !pids_in(&pids).is_empty());
    assert_eq!(db.state(id), "running");
    let out = db.ok(&["cancel", &id.to_string()]);
    assert!(out.contains("SIGTERM"), "{out}");
    wait_until("the run is cancelled", 20.0, || db.state(id) == "cancelled");
    assert_eq!(db.events(id, "cancelled"), 1);
    let pid = pids_in(&pids)[0];
    wait_until("its process is gone", 10.0, || !alive(pid));
    s.stop();
}

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
fn output_tail_is_kept_and_live() {
    let (db, dir) = setup(
        "[pipelines.big]\ncommand = \"seq 1 30000; echo stderr-line >&2\"\n[pipelines.live]\ncommand = \"echo early; sleep 300\"\n[pipelines.argv]\ncommand = [\"printf\", \"%s|\"]\n[pipelines.env]\ncommand = \"echo $ORCA_PIPELINE $ORCA_RUN_ID $ORCA_RUN_START $GREETING $1 ${ORCA_DATABASE_URL:-no-url}\"\nenv = { GREETING = \"hi\" }\n",
    );
    let big = db.queue("big");
    let live = db.queue("live");
    let env = db
        .ok(&["run", "env", "--", "arg1"])
        .trim()
        .parse::<i64>()
        .unwrap();
    let argv = db
        .ok(&["run", "argv", "--", "a b", "c"])
        .trim()
        .parse::<i64>()
        .unwrap();
    let mut s = db.scheduler(&dir, &[]);
    wait_until("argv ends", 30.0, || db.state(argv) == "succeeded");
    // Under its attempt's line, the output as it is.
    let out = db.ok(&["logs", &argv.to_string()]);
    assert!(out.starts_with("--- attempt 1 of 1: succeeded (exit 0) at "));
    assert_eq!(logs_body(out.as_bytes()), b"a b|c|");
    wait_until("big and env end", 30.0, || {
        db.state(big) == "succeeded" && db.state(env) == "succeeded"
    });
    let out = db.ok(&["logs", &big.to_string()]);
    let out = text(logs_body(out.as_bytes()));
    assert!(
        out.len() <= 64 * 1024 && out.len() > 60 * 1024,
        "{}",
        out.len()
    );
    assert!(out.ends_with("30000\nstderr-line\n"));
    // The database URL (a secret) is not handed to runs.
    assert_eq!(
        text(logs_body(db.ok(&["logs", &env.to_string()]).as_bytes())),
        format!("env {env} 1 hi arg1 no-url\n")
    );
    wait_until("a running run's output is visible", 20.0, || {
        let out = db.ok(&["logs", &live.to_string()]);
        out.starts_with("--- attempt 1 of 1: running since ")
            && logs_body(out.as_bytes()) == b"early\n"
    });
    s.stop();
}

#[test]
fn paused_pipelines_start_nothing() {
    let (db, dir) = setup("[pipelines.p]\ncommand = \"true\"\n[pipelines.q]\ncommand = \"true\"\n");
    db.ok(&["pause", "p"]);
    let p = db.queue("p");
    let q = db.queue("q");
    let mut s = db.scheduler(&dir, &[]);
    wait_until("q runs", 30.0, || db.state(q) == "succeeded");
    assert_eq!(db.state(p), "queued");
    db.ok(&["resume", "p"]);
    wait_until("p runs once resumed", 30.0, || db.state(p) == "succeeded");
    s.stop();
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

#[test]
fn a_webhook_that_never_answers_does_not_hold_up_the_tick() {
    let db = TestDb::new();
    let dir = TempDir::new();
    // Accepts connections and never answers (the alert's HTTP timeout is 10 s).
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://127.0.0.1:{}/hook",
        listener.local_addr().unwrap().port()
    );
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = held.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            keep.lock().unwrap().push(conn);
        }
    });
    db.register(
        &dir,
        &format!(
            "[pipelines.doomed]\ncommand = \"exit 1\"\nalert = \"{url}\"\n[pipelines.ok]\ncommand = \"true\"\n"
        ),
    );
    db.queue("doomed");
    let mut s = db.scheduler(&dir, &[]);
    wait_until("the alert is being sent", 20.0, || {
        !held.lock().unwrap().is_empty()
    });
    let started = std::time::Instant::now();
    let ok = db.queue("ok");
    wait_until("another run starts and ends meanwhile", 8.0, || {
        db.state(ok) == "succeeded"
    });
    assert!(started.elapsed().as_secs_f64() < 8.0);
    s.stop();
}

#[test]
fn a_process_that_left_its_group_does_not_outlive_its_run_or_the_scheduler() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let (left, held) = (dir.path("left"), dir.path("held"));
    // `ends` leaves a setsid'd sleep behind and ends; `hangs` waits on one.
    db.register(
        &dir,
        &format!(
            "[pipelines.ends]\ncommand = \"setsid sleep 300 & echo $! >> {}; echo ended\"\n\n\
             [pipelines.hangs]\ncommand = \"setsid sleep 300 & echo $! >> {}; wait\"\n",
            left.display(),
            held.display()
        ),
    );
    let ends = db.queue("ends");
    let mut a = db.scheduler(&dir, &[]);
    wait_until("the run that left a process behind succeeds", 30.0, || {
        db.state(ends) == "succeeded"
    });
    wait_until("what it left behind is killed", 10.0, || {
        !pids_in(&left).is_empty() && pids_in(&left).iter().all(|p| !alive(*p))
    });
    // kill -9 of the scheduler: the escaped process dies too.
    db.queue("hangs");
    wait_until("the escaped sleep runs", 30.0, || {
        !pids_in(&held).is_empty()
    });
    a.signal(libc::SIGKILL);
    a.wait(10.0);
    let escaped = pids_in(&held);
    wait_until("the escaped process is gone", 10.0, || {
        escaped.iter().all(|p| !alive(*p))
    });
}

/// The pids written by run `run` of a pipeline whose command is
/// [`escapes_and_ignores_term`] with its pid file in `dir`.
fn escaped(dir: &TempDir, run: i64) -> Vec<i32> {
    pids_in(&dir.path(&format!("{run}.pid")))
}

#[test]
fn a_command_that_escapes_its_session_and_ignores_sigterm_dies_with_its_attempt() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let _leftovers = KillLeftovers(dir.0.clone());
    let command = toml_str(&escapes_and_ignores_term(&format!(
        "{}/$ORCA_RUN_ID.pid",
        dir.0.display()
    )));
    db.register(
        &dir,
        &format!(
            "[pipelines.slow]\ncommand = {command}\ntimeout = 2\n\n\
             [pipelines.held]\ncommand = {command}\nmax_runs = 2\n"
        ),
    );
    let slow = db.queue("slow");
    let cancelled = db.queue("held");
    let stays = db.queue("held");
    let mut s = db.scheduler(&dir, &[]);
    // A timeout: SIGTERM is ignored, so after the grace everything is killed,
    // the escaped sleep included.
    wait_until(
        "the escaped sleep of the run that times out runs",
        30.0,
        || !escaped(&dir, slow).is_empty(),
    );
    wait_until("the run times out", 30.0, || db.state(slow) == "failed");
    let (why, sig): (String, Option<i32>) = {
        let r = db
            .client()
            .query_one(
                "SELECT why, exit_signal FROM orca.runs WHERE id = $1",
                &[&slow],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert!(why.contains("timed out"), "{why}");
    assert_eq!(sig, Some(libc::SIGKILL), "SIGTERM was ignored, so SIGKILL");
    assert_eq!(db.events(slow, "timed out"), 1);
    wait_until("nothing the timed-out run started is alive", 15.0, || {
        escaped(&dir, slow).iter().all(|p| !alive(*p))
    });
    // A cancel.
    wait_until("the escaped sleeps of the held runs run", 30.0, || {
        !escaped(&dir, cancelled).is_empty() && !escaped(&dir, stays).is_empty()
    });
    db.ok(&["cancel", &cancelled.to_string()]);
    wait_until("the run is cancelled", 30.0, || {
        db.state(cancelled) == "cancelled"
    });
    wait_until("nothing the cancelled run started is alive", 15.0, || {
        escaped(&dir, cancelled).iter().all(|p| !alive(*p))
    });
    // The scheduler stopping.
    assert_eq!(db.state(stays), "running");
    s.stop();
    assert_eq!(db.state(stays), "queued");
    wait_until(
        "nothing the stopped scheduler's run started is alive",
        15.0,
        || escaped(&dir, stays).iter().all(|p| !alive(*p)),
    );
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

#[test]
fn a_schedule_that_never_fires_costs_the_tick_nothing() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let mut file = String::new();
    for n in 0..20 {
        file.push_str(&format!(
            "[pipelines.p{n}]\ncommand = \"true\"\nschedule = \"0 0 28 2 *\"\n"
        ));
    }
    file.push_str("[pipelines.probe]\ncommand = \"true\"\n");
    db.register(&dir, &file);
    // Stored by a binary that did not refuse it: the 31st of February.
    db.client()
        .batch_execute(
            "UPDATE orca.pipelines SET schedule = '0 0 31 2 *',
                 spec = jsonb_set(spec, '{schedule}', '\"0 0 31 2 *\"'), next_fire = NULL
             WHERE name <> 'probe'",
        )
        .unwrap();
    let stats = dir.path("ticks");
    let mut s = db.scheduler(&dir, &[("ORCA_TICK_STATS", stats.to_str().unwrap())]);
    s.wait_for("the schedules are found never to fire", 20.0, || {
        s.output().contains("never fires")
    });
    // Ticks after that one: a run queued now is started and ended by them.
    for _ in 0..3 {
        let run = db.queue("probe");
        wait_until("a probe run succeeds", 20.0, || {
            db.state(run) == "succeeded"
        });
    }
    s.stop();
    let line = std::fs::read_to_string(&stats).unwrap();
    let p50: f64 = line
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("p50_ms="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no p50_ms in {line}"));
    // Searching years ahead for each of them, every tick, took some 80 ms
    // each (a debug build): over a second a tick.
    assert!(p50 < 250.0, "a tick took {p50} ms: {line}");
    let log = s.output();
    assert_eq!(log.matches("never fires").count(), 1, "said once:\n{log}");
    assert_eq!(
        db.one::<i64>("SELECT count(*) FROM orca.pipelines WHERE next_fire IS NOT NULL"),
        0
    );
}

/// A supervisor's ends (`orca.finish_attempts`, one array per field) with
/// one array shorter than the rest are refused whole (migration 0015):
/// unnest padded it with NULLs, and the second end was recorded with no
/// exit code.
#[test]
fn ends_whose_arrays_differ_in_length_are_refused_and_nothing_ends() {
    let (db, _dir) = setup("[pipelines.job]\ncommand = \"true\"\nmax_runs = 2\n");
    let mut c = db.client();
    let ids: Vec<i64> = (0..2)
        .map(|_| {
            c.query_one(
                "INSERT INTO orca.runs (pipeline, state, start, started_at, heartbeat)
                 VALUES ('job', 'running', 1, now(), now()) RETURNING id",
                &[],
            )
            .unwrap()
            .get(0)
        })
        .collect();
    let e = c
        .query(
            "SELECT * FROM orca.finish_attempts($1, '{1,1}', '{succeeded,succeeded}', '{0}',
                 '{NULL,NULL}', '{a,b}', '{\"\",\"\"}', '{\"{}\",\"{}\"}', NULL)",
            &[&ids],
        )
        .unwrap_err();
    assert_eq!(
        e.code(),
        Some(&postgres::error::SqlState::INVALID_PARAMETER_VALUE),
        "{e}"
    );
    for id in ids {
        assert_eq!(db.state(id), "running");
    }
}

/// The keeper SIGKILLed (it can't be told to die otherwise: it ignores
/// SIGTERM): its command dies with it, the attempt ends as killed, and
/// the scheduler's next run starts under a new keeper.
#[test]
fn a_keeper_killed_takes_its_command_with_it_and_the_next_run_gets_a_new_one() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let pid = dir.path("pid");
    db.register(
        &dir,
        &format!(
            "[pipelines.long]\ncommand = [\"/bin/sh\", \"-c\", \"echo $$ > {}; exec sleep 300\"]\n\n\
             [pipelines.quick]\ncommand = \"echo quick\"\n",
            pid.display()
        ),
    );
    let long = db.queue("long");
    let mut s = db.scheduler(&dir, &[]);
    wait_until("the long run runs", 30.0, || !pids_in(&pid).is_empty());
    let command = pids_in(&pid)[0];
    let keeper = keeper_of(s.pid());
    // SIGTERM is ignored: an operator's stray signal ends nothing.
    // SAFETY: kill(2) of the keeper this test's scheduler started.
    unsafe { libc::kill(keeper, libc::SIGTERM) };
    let quick = db.queue("quick");
    wait_until("the quick run succeeds beside it", 30.0, || {
        db.state(quick) == "succeeded"
    });
    assert!(alive(keeper) && alive(command));
    // SAFETY: as above.
    unsafe { libc::kill(keeper, libc::SIGKILL) };
    wait_until("the long run's command is gone", 10.0, || !alive(command));
    wait_until("the long run ends as killed", 30.0, || {
        db.state(long) == "failed"
    });
    let again = db.queue("quick");
    wait_until("the next run succeeds", 30.0, || {
        db.state(again) == "succeeded"
    });
    assert_ne!(keeper_of(s.pid()), keeper, "a new keeper");
    s.stop();
}

/// The keeper a supervisor started: its child running `orca __keeper`.
fn keeper_of(supervisor: i32) -> i32 {
    let mut found = 0;
    wait_until("the supervisor has a keeper", 10.0, || {
        found = children(supervisor)
            .into_iter()
            .find(|c| {
                std::fs::read(format!("/proc/{c}/cmdline"))
                    .unwrap_or_default()
                    .split(|&b| b == 0)
                    .any(|a| a == b"__keeper")
            })
            .unwrap_or(0);
        found != 0
    });
    found
}

/// A chain still growing as its run ends: each member forks the next (which
/// goes on) and stays, so the chain grows deeper faster than a walk that
/// kills one level at a time (a member is reparented to the keeper only as
/// its parent dies) can follow. In C (built here with `cc`): a level every
/// few hundred microseconds.
#[test]
fn a_chain_growing_deeper_as_its_run_ends_is_killed_whole() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let mark = format!("orca-chain-{}", std::process::id());
    // At most 3,000 deep; each member ends on its own 20 s on (the test's
    // safety net).
    let source = dir.path("chain.c");
    std::fs::write(
        &source,
        "#include <time.h>\n#include <unistd.h>\n\
         int main(void) {\n\
           time_t end = time(0) + 20;\n\
           for (int depth = 0; depth < 3000 && time(0) < end; depth++) {\n\
             setpgid(0, 0);\n\
             pid_t c = fork();\n\
             if (c == 0) continue;\n\
             if (c < 0) { usleep(200); continue; }\n\
             break;\n\
           }\n\
           while (time(0) < end) sleep(1);\n\
           return 0;\n\
         }\n",
    )
    .unwrap();
    let chain = dir.path(&mark);
    let built = std::process::Command::new("cc")
        .arg("-O2")
        .arg("-o")
        .arg(&chain)
        .arg(&source)
        .status()
        .unwrap_or_else(|e| {
            panic!("can't run cc ({e}): install gcc (Debian: apt-get install gcc)")
        });
    assert!(built.success(), "cc failed");
    db.register(
        &dir,
        &format!(
            "[pipelines.grows]\ncommand = \"{} & sleep 0.3\"\n",
            chain.display()
        ),
    );
    let run = db.queue("grows");
    let mut s = db.scheduler(&dir, &[]);
    wait_until("the run ends", 30.0, || db.state(run) == "succeeded");
    let chain_s = chain.to_str().unwrap().to_string();
    wait_until("no member of the chain is left", 5.0, || {
        named(&chain_s).is_empty()
    });
    s.stop();
}

/// A keeper stopped (by a run of orca's own user, say) starts nothing; the
/// scheduler's tick goes on meanwhile, and a keeper that started no command
/// asked 30 s before is replaced: the attempt it held ends as killed, the
/// next run runs under a new keeper.
#[test]
fn a_stopped_keeper_is_replaced_and_the_next_run_runs() {
    let db = TestDb::new();
    let dir = TempDir::new();
    db.register(&dir, "[pipelines.quick]\ncommand = \"echo quick\"\n");
    let first = db.queue("quick");
    let mut s = db.scheduler(&dir, &[]);
    wait_until("the first run succeeds", 30.0, || {
        db.state(first) == "succeeded"
    });
    let keeper = keeper_of(s.pid());
    // SAFETY: kill(2) of the keeper this test's scheduler started.
    unsafe { libc::kill(keeper, libc::SIGSTOP) };
    let held = db.queue("quick");
    wait_until("the run asked of the stopped keeper ends", 60.0, || {
        db.state(held) == "failed"
    });
    let next = db.queue("quick");
    wait_until("the next run succeeds", 30.0, || {
        db.state(next) == "succeeded"
    });
    assert_ne!(keeper_of(s.pid()), keeper, "a new keeper");
    wait_until("the stopped keeper is gone", 15.0, || !alive(keeper));
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

/// Issue 26 §4.6: fill runs (`orca run --fill`) have a bound, the
/// pipeline's `max_fills`: those beyond it wait, and start as running ones
/// end; runs within `max_runs` start beside them as before.
#[test]
fn fill_runs_wait_beyond_max_fills() {
    let (db, dir) = setup("[pipelines.p]\ncommand = \"sleep 600\"\nmax_runs = 1\nmax_fills = 2\n");
    let fills: Vec<i64> = (0..5)
        .map(|_| {
            db.ok(&["run", "p", "--fill"])
                .trim()
                .parse::<i64>()
                .unwrap()
        })
        .collect();
    let running_fills =
        || db.one::<i64>("SELECT count(*) FROM orca.runs WHERE fill AND state = 'running'");
    let mut s = db.scheduler(&dir, &[]);
    s.wait_for("two fill runs run", 30.0, || running_fills() >= 2);
    // A plain run starts beside them (its tick also looked at the fills).
    let plain = db.queue("p");
    s.wait_for("the plain run runs", 30.0, || db.state(plain) == "running");
    assert_eq!(running_fills(), 2, "no more than max_fills at once");
    // One ends: the next waiting one starts, and no more.
    let first = *fills.iter().find(|&&f| db.state(f) == "running").unwrap();
    db.ok(&["cancel", &first.to_string()]);
    s.wait_for("another fill run starts", 30.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.runs WHERE fill AND state <> 'queued'") == 3
    });
    let again = db.queue("p");
    db.ok(&["cancel", &plain.to_string()]);
    s.wait_for("the next plain run runs", 30.0, || {
        db.state(again) == "running"
    });
    assert_eq!(running_fills(), 2, "{fills:?}");
    s.stop();
}
