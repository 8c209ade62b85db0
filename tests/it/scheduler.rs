//! The scheduler as real processes: schedules, max_runs, retries and alerts,
//! timeouts, cancels, sensors, output, kill -9 and SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use crate::harness::*;

mod processes;
mod restarts;
mod sensors;

#[test]
fn a_second_scheduler_is_refused_and_names_the_first() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let mut first = db.scheduler(&dir, &[]);
    first.wait_for("the first scheduler leads", 20.0, || db.lead_held());
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
    let ok = db.queue("ok");
    wait_until("another run starts and ends", 30.0, || {
        db.state(ok) == "succeeded"
    });
    // Meanwhile: the alert's one attempt still hangs (none has failed, as
    // it would at its 10 s timeout), so the tick did not wait for it.
    let (attempts, done): (i32, bool) = {
        let r = db
            .client()
            .query_one("SELECT attempts, done FROM orca.alerts", &[])
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(
        (attempts, done),
        (0, false),
        "the alert's attempt ended first"
    );
    s.stop();
}

/// The pids written by run `run` of a pipeline whose command is
/// [`escapes_and_ignores_term`] with its pid file in `dir`.
fn escaped(dir: &TempDir, run: i64) -> Vec<i32> {
    pids_in(&dir.path(&format!("{run}.pid")))
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
