//! `ORCA_METRICS_ADDR`: a real Prometheus (Debian's `prometheus`, from
//! `scripts/deps.sh test`) scrapes a running scheduler and its query API is
//! asked what it saw; `promtool check metrics` reads the scraped text; a
//! scheduler that doesn't lead says `orca_leader 0`; a bad address or a
//! port taken exits 2 with one line; a slow or huge request doesn't stop
//! the next scrape. The rules in docs/operations.md pass `promtool check
//! rules` as written.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::ec2::{KEY, SECRET, ec2_env, start, with_keys};
use crate::fake_aws::FakeEc2;
use crate::harness::*;
use crate::pools::with_pool;
use crate::setup::{blocks, repo_file};

/// The Debian package's binaries, or a failure saying how to get them.
fn tool(name: &str) -> &'static str {
    let path: &'static str = if name == "prometheus" {
        "/usr/bin/prometheus"
    } else {
        "/usr/bin/promtool"
    };
    assert!(
        std::path::Path::new(path).exists(),
        "{path} is missing: install Debian's prometheus package (scripts/deps.sh test, as root)"
    );
    path
}

/// One HTTP/1.1 GET of `path` on `addr`: its status and body (`None`: no
/// answer within `secs`).
fn get(addr: &str, path: &str, secs: f64) -> Option<(u16, String)> {
    let deadline = Duration::from_secs_f64(secs);
    let mut s = TcpStream::connect_timeout(&addr.parse().ok()?, deadline).ok()?;
    s.set_read_timeout(Some(deadline)).ok()?;
    s.set_write_timeout(Some(deadline)).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let raw = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    // Prometheus's API may answer chunked; these answers are one chunk.
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let (_, rest) = body.split_once("\r\n")?;
        rest.rsplit_once("\r\n0\r\n")
            .map(|(b, _)| b)
            .unwrap_or(rest)
            .to_string()
    } else {
        body.to_string()
    };
    Some((status, body))
}

/// `ORCA_METRICS_ADDR`'s `/metrics` text (the test fails without it).
fn scrape(addr: &str) -> String {
    let (status, body) = get(addr, "/metrics", 10.0).expect("an answer from /metrics");
    assert_eq!(status, 200, "{body}");
    body
}

/// The value of the sample `line` names (`name{labels}`) in `text`.
fn sample(text: &str, line: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(line)?.strip_prefix(' ')?.parse().ok())
}

/// A Prometheus of the test's own, scraping `target` every second (killed
/// with its `Proc` when dropped).
struct Prometheus {
    proc: Proc,
    addr: String,
}

impl Prometheus {
    fn new(dir: &TempDir, target: &str) -> Prometheus {
        let config = dir.write(
            "prometheus.yml",
            &format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: orca\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        );
        let addr = format!("127.0.0.1:{}", free_port());
        let mut c = Command::new(tool("prometheus"));
        c.arg(format!("--config.file={config}"))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path("tsdb").display()
            ))
            .arg(format!("--web.listen-address={addr}"));
        let proc = Proc::spawn(c, &dir.path("prometheus.log"));
        Prometheus { proc, addr }
    }

    /// The instant query's values (one a series), empty while it has none.
    fn query(&self, q: &str) -> Vec<f64> {
        let enc: String = q
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"_-.".contains(&b) {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        let Some((200, body)) = get(&self.addr, &format!("/api/v1/query?query={enc}"), 5.0) else {
            return Vec::new();
        };
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        v["data"]["result"]
            .as_array()
            .map(|rs| {
                rs.iter()
                    .filter_map(|r| r["value"][1].as_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The one value of `q` once Prometheus has one and `ok` holds it.
    fn wait_for(&self, q: &str, secs: f64, ok: impl Fn(f64) -> bool) -> f64 {
        let mut last = Vec::new();
        let held = within(secs, Duration::from_millis(250), || {
            last = self.query(q);
            last.len() == 1 && ok(last[0])
        });
        assert!(
            held,
            "Prometheus's {q}: {last:?} after {secs}s\n{}",
            self.proc.tail(20)
        );
        last[0]
    }
}

const PIPELINES: &str = "\
[pipelines.ok]
command = \"true\"
max_runs = 5

[pipelines.flaky]
command = \"exit 7\"
retries = 1
retry_delay = 0.2

[pipelines.hang]
command = \"sleep 60\"
timeout = 0.5

[pipelines.hold]
command = \"sleep 60\"
max_runs = 1
";

#[test]
fn prometheus_scrapes_the_leading_scheduler_and_promtool_passes_its_text() {
    let (db, dir) = setup(PIPELINES);
    let metrics = format!("127.0.0.1:{}", free_port());
    for p in ["ok", "ok", "ok", "flaky", "hang", "hold", "hold"] {
        db.queue(p);
    }
    let mut s = db.scheduler(
        &dir,
        &[
            ("ORCA_METRICS_ADDR", metrics.as_str()),
            ("ORCA_KILL_GRACE_SECONDS", "0"),
        ],
    );
    let prom = Prometheus::new(&dir, &metrics);
    prom.wait_for("orca_leader", 60.0, |v| v == 1.0);
    // Three ok runs, flaky's two attempts, hang's and hold's first.
    prom.wait_for("sum(orca_runs_started_total)", 60.0, |v| v == 7.0);
    prom.wait_for(
        r#"orca_runs_ended_total{pipeline="ok",outcome="succeeded"}"#,
        30.0,
        |v| v == 3.0,
    );
    prom.wait_for(
        r#"orca_runs_ended_total{pipeline="flaky",outcome="failed"}"#,
        30.0,
        |v| v == 2.0,
    );
    prom.wait_for(r#"orca_runs_retried_total{pipeline="flaky"}"#, 30.0, |v| {
        v == 1.0
    });
    prom.wait_for(
        r#"orca_runs_ended_total{pipeline="hang",outcome="timed_out"}"#,
        30.0,
        |v| v == 1.0,
    );
    prom.wait_for("orca_tick_duration_seconds_count", 30.0, |v| v > 0.0);
    // hold: one running, one queued behind max_runs, waiting ever longer
    // (read by the leader every few seconds).
    prom.wait_for(r#"orca_runs{pipeline="hold",state="running"}"#, 30.0, |v| {
        v == 1.0
    });
    prom.wait_for(r#"orca_runs{pipeline="hold",state="queued"}"#, 30.0, |v| {
        v == 1.0
    });
    prom.wait_for(r#"orca_runs{pipeline="ok",state="queued"}"#, 30.0, |v| {
        v == 0.0
    });
    prom.wait_for("orca_queue_oldest_seconds", 60.0, |v| v >= 2.0);
    // The database's own figures agree with what the leader said.
    assert_eq!(
        db.one::<i64>(
            "SELECT count(*) FROM orca.runs WHERE pipeline = 'flaky' AND state = 'failed'"
        ),
        1
    );

    // promtool reads the text as Prometheus's own linter.
    let text = scrape(&metrics);
    assert!(text.contains("\norca_leader 1\n"), "{text}");
    let mut check = Command::new(tool("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        crate::harness::text(&out.stdout),
        crate::harness::text(&out.stderr)
    );
    s.stop();
}

#[test]
fn a_scheduler_that_does_not_lead_says_orca_leader_0_and_no_run_gauges() {
    let (db, dir) = setup(PIPELINES);
    let (ma, mb) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let held = db.queue("hold");
    let overlap = |m: &str| db.scheduler(&dir, &[("ORCA_OVERLAP", "on"), ("ORCA_METRICS_ADDR", m)]);
    let mut a = overlap(&ma);
    wait_until("A leads and runs hold", 60.0, || {
        db.state(held) == "running"
            && get(&ma, "/metrics", 5.0).is_some_and(|(_, t)| {
                sample(&t, "orca_leader") == Some(1.0)
                    && sample(&t, r#"orca_runs{pipeline="hold",state="running"}"#) == Some(1.0)
            })
    });
    // B is newer: A drains (supervising its run to its end) and B leads.
    let mut b = overlap(&mb);
    wait_until("B leads and A doesn't", 60.0, || {
        let (Some((_, ta)), Some((_, tb))) = (get(&ma, "/metrics", 5.0), get(&mb, "/metrics", 5.0))
        else {
            return false;
        };
        sample(&ta, "orca_leader") == Some(0.0) && sample(&tb, "orca_leader") == Some(1.0)
    });
    let ta = scrape(&ma);
    assert!(
        !ta.contains("\norca_runs{"),
        "a scheduler not leading reports no run gauges (the leader's count once):\n{ta}"
    );
    assert!(
        sample(&ta, "orca_tick_duration_seconds_count").is_some_and(|n| n > 0.0),
        "{ta}"
    );
    db.ok(&["cancel", &held.to_string()]);
    a.stop();
    b.stop();
}

/// The leader counts the starts and ends of every run, whatever its
/// placement: a pool run, ended by its machine's worker, and an `ec2` run,
/// ended by its head instance, each once (read from the events).
#[test]
fn the_leader_counts_the_ends_of_pool_and_ec2_runs() {
    let (db, dir) = setup(&with_pool(
        "p",
        "[pipelines.good]\ncommand = \"true\"\nplacement = \"worker:p\"\n\n\
         [pipelines.job]\ncommand = \"exit 3\"\nplacement = \"ec2\"\n\n\
         [pipelines.job.ec2]\nprovider = \"local\"\ntype = \"small\"\nlocations = [\"here\"]\n",
    ));
    let (good, job) = (db.queue("good"), db.queue("job"));
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut s = db.scheduler(
        &dir,
        &[
            ("ORCA_METRICS_ADDR", metrics.as_str()),
            ("ORCA_POOL_SCALE_SECONDS", "0.5"),
        ],
    );
    s.wait_for("both end", 120.0, || {
        db.state(good) == "succeeded" && db.state(job) == "failed"
    });
    let expected = [
        (r#"orca_runs_started_total{pipeline="good"}"#, 1.0),
        (r#"orca_runs_started_total{pipeline="job"}"#, 1.0),
        (
            r#"orca_runs_ended_total{pipeline="good",outcome="succeeded"}"#,
            1.0,
        ),
        (
            r#"orca_runs_ended_total{pipeline="job",outcome="failed"}"#,
            1.0,
        ),
    ];
    // Counted once settled (10 s old by the database's clock).
    s.wait_for("the leader counts both", 60.0, || {
        get(&metrics, "/metrics", 5.0).is_some_and(|(_, t)| {
            expected
                .iter()
                .all(|(series, n)| sample(&t, series) == Some(*n))
        })
    });
    // Reads after those count what is new, not the same again: another
    // run of `good` is counted, `job`'s figures stay.
    let again = db.queue("good");
    s.wait_for("the second run of good counted", 90.0, || {
        db.state(again) == "succeeded"
            && get(&metrics, "/metrics", 5.0).is_some_and(|(_, t)| {
                sample(
                    &t,
                    r#"orca_runs_ended_total{pipeline="good",outcome="succeeded"}"#,
                ) == Some(2.0)
            })
    });
    let t = scrape(&metrics);
    for (series, n) in [
        (r#"orca_runs_started_total{pipeline="good"}"#, 2.0),
        (r#"orca_runs_started_total{pipeline="job"}"#, 1.0),
        (
            r#"orca_runs_ended_total{pipeline="job",outcome="failed"}"#,
            1.0,
        ),
    ] {
        assert_eq!(sample(&t, series), Some(n), "{series}: {t}");
    }
    assert_eq!(
        sample(
            &t,
            r#"orca_runs_ended_total{pipeline="job",outcome="succeeded"}"#
        ),
        None,
        "{t}"
    );
    s.stop();
}

#[test]
fn a_worker_serves_its_runs_starts_and_ends() {
    let (db, dir) = setup(&with_pool(
        "p",
        "[pipelines.good]\ncommand = \"true\"\nplacement = \"worker:p\"\n\
         [pipelines.bad]\ncommand = \"exit 3\"\nplacement = \"worker:p\"\n",
    ));
    let role = hand_machine(&db, "p", "metrics", "pw-metrics");
    let metrics = format!("127.0.0.1:{}", free_port());
    let (good, bad) = (db.queue("good"), db.queue("bad"));
    let mut w = hand_worker_with(
        &db,
        &dir,
        "p",
        &role,
        "pw-metrics",
        &[("ORCA_METRICS_ADDR", &metrics)],
    );
    w.wait_for("both end", 60.0, || {
        db.state(good) == "succeeded" && db.state(bad) == "failed"
    });
    let t = scrape(&metrics);
    assert_eq!(sample(&t, "orca_leader"), Some(0.0), "{t}");
    for (series, n) in [
        (r#"orca_runs_started_total{pipeline="good"}"#, 1.0),
        (r#"orca_runs_started_total{pipeline="bad"}"#, 1.0),
        (
            r#"orca_runs_ended_total{pipeline="good",outcome="succeeded"}"#,
            1.0,
        ),
        (
            r#"orca_runs_ended_total{pipeline="bad",outcome="failed"}"#,
            1.0,
        ),
    ] {
        assert_eq!(sample(&t, series), Some(n), "{series}: {t}");
    }
    assert!(!t.contains("\norca_runs{"), "a worker reads no gauges: {t}");
    w.stop();
}

#[test]
fn make_attempts_and_failures_are_counted_by_pool() {
    let ec2 = FakeEc2::start(KEY, SECRET);
    ec2.state.lock().unwrap().fail_run = Some((
        403,
        "UnauthorizedOperation".into(),
        "You are not authorized to perform this operation.".into(),
    ));
    let (db, dir) = setup(
        "[pools.p]\nprovider = \"ec2\"\nami = \"ami-0123456789abcdef0\"\n\
         types = [{ type = \"m7i.large\", wait = 0 }]\nlocations = [\"subnet-a\"]\n\
         [pipelines.job]\ncommand = \"true\"\nplacement = \"worker:p\"\n",
    );
    db.queue("job");
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut env = with_keys(ec2_env(&ec2));
    env.push(("ORCA_METRICS_ADDR", metrics.clone()));
    let mut s = start(&db, &dir, &env);
    wait_until("three refused makes counted", 60.0, || {
        get(&metrics, "/metrics", 5.0).is_some_and(|(_, t)| {
            sample(&t, r#"orca_pool_make_failures_total{pool="p"}"#).is_some_and(|n| n >= 3.0)
        })
    });
    let t = scrape(&metrics);
    let attempts = sample(&t, r#"orca_pool_make_attempts_total{pool="p"}"#).unwrap();
    let failures = sample(&t, r#"orca_pool_make_failures_total{pool="p"}"#).unwrap();
    assert_eq!(attempts, failures, "every attempt was refused: {t}");
    assert!(
        attempts as usize <= ec2.count("RunInstances"),
        "each attempt counted is a call the fake saw"
    );
    // Once EC2 makes it, the machine is counted, booting (the fake's
    // instance never runs a worker).
    ec2.state.lock().unwrap().fail_run = None;
    wait_until("the leader reads the machine as booting", 60.0, || {
        get(&metrics, "/metrics", 5.0).is_some_and(|(_, t)| {
            sample(&t, r#"orca_pool_machines{pool="p",state="booting"}"#) == Some(1.0)
                && sample(&t, r#"orca_pool_machines{pool="p",state="up"}"#) == Some(0.0)
        })
    });
    let t = scrape(&metrics);
    let (attempts, failures) = (
        sample(&t, r#"orca_pool_make_attempts_total{pool="p"}"#).unwrap(),
        sample(&t, r#"orca_pool_make_failures_total{pool="p"}"#).unwrap(),
    );
    assert_eq!(attempts, failures + 1.0, "one make succeeded: {t}");
    s.stop();
}

#[test]
fn a_bad_metrics_address_or_a_port_taken_exits_2_with_one_line() {
    let (db, dir) = setup("[pipelines.p]\ncommand = \"true\"\n");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    for (addr, says) in [
        ("localhost:9187", "is not an address"),
        ("127.0.0.1", "is not an address"),
        (taken.as_str(), "can't listen there"),
    ] {
        let mut s = db.scheduler(&dir, &[("ORCA_METRICS_ADDR", addr)]);
        let status = s.wait(30.0);
        let err = s.output();
        assert_eq!(exit_code(status), 2, "{addr}: {err}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "one line: {err}");
        assert!(
            lines[0].starts_with(&format!("orca: ORCA_METRICS_ADDR={addr}"))
                && lines[0].contains(says),
            "{err}"
        );
    }
}

#[test]
fn a_slow_or_huge_request_does_not_stop_the_next_scrape() {
    let (db, dir) = setup("[pipelines.p]\ncommand = \"true\"\n");
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut s = db.scheduler(&dir, &[("ORCA_METRICS_ADDR", metrics.as_str())]);
    wait_until("metrics served", 30.0, || {
        get(&metrics, "/metrics", 5.0).is_some()
    });
    assert_eq!(get(&metrics, "/", 5.0).map(|r| r.0), Some(404));
    assert_eq!(get(&metrics, "/metrics/x", 5.0).map(|r| r.0), Some(404));
    // A client that sends half a request and waits, and one that sends a
    // megabyte of headers: both are held at most a couple of seconds.
    let mut slow = TcpStream::connect(&metrics).unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let mut huge = TcpStream::connect(&metrics).unwrap();
    huge.set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let junk = vec![b'a'; 1 << 20];
    let _ = huge.write_all(b"GET /metrics HTTP/1.1\r\nX: ");
    let _ = huge.write_all(&junk);
    let began = Instant::now();
    let (status, body) = get(&metrics, "/metrics", 30.0).expect("the next scrape is answered");
    assert_eq!(status, 200);
    assert!(body.contains("# TYPE orca_leader gauge"), "{body}");
    // The slow client still holds its socket: it was let go, not waited on.
    assert!(
        began.elapsed() < Duration::from_secs(15),
        "the scrape waited {:?} behind them",
        began.elapsed()
    );
    drop(slow);
    drop(huge);
    s.stop();
    // A restart takes the same address at once (its connections of a
    // moment ago left in TIME_WAIT).
    let mut again = db.scheduler(&dir, &[("ORCA_METRICS_ADDR", metrics.as_str())]);
    again.wait_for("metrics served again", 30.0, || {
        get(&metrics, "/metrics", 5.0).is_some_and(|r| r.0 == 200)
    });
    again.stop();
}

/// What the page's alerts say they catch, as `promtool test rules` series:
/// no leader for a minute (one scheduler stops leading, another never
/// did), a run due for over an hour (for 5 minutes), a pipeline failing
/// over half its attempts (another succeeding is not named, nor one whose
/// failures are a worker's own count, nor whose handed-back attempts
/// would thin its failures out), a pool whose every make fails (another
/// with one failure in two is not).
const RULES_TEST: &str = r#"rule_files:
  - orca-rules.yml
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'orca_leader{instance="a"}'
        values: '1 1 0 0 0 0'
      - series: 'orca_leader{instance="b"}'
        values: '0 0 0 0 0 0'
      - series: 'orca_queue_oldest_seconds{instance="a"}'
        values: '0 0 4000x20'
      - series: 'orca_runs_ended_total{job="orca",pipeline="p",outcome="failed"}'
        values: '0+10x120'
      - series: 'orca_runs_ended_total{job="orca",pipeline="p",outcome="succeeded"}'
        values: '0+1x120'
      - series: 'orca_runs_ended_total{job="orca",pipeline="ok",outcome="succeeded"}'
        values: '0+10x120'
      - series: 'orca_runs_ended_total{job="orca-workers",pipeline="ok",outcome="failed"}'
        values: '0+100x120'
      - series: 'orca_runs_ended_total{job="orca",pipeline="lost",outcome="failed"}'
        values: '0+6x120'
      - series: 'orca_runs_ended_total{job="orca",pipeline="lost",outcome="succeeded"}'
        values: '0+5x120'
      - series: 'orca_runs_ended_total{job="orca",pipeline="lost",outcome="requeued"}'
        values: '0+100x120'
      - series: 'orca_pool_make_attempts_total{pool="q"}'
        values: '0+1x60'
      - series: 'orca_pool_make_failures_total{pool="q"}'
        values: '0+1x60'
      - series: 'orca_pool_make_attempts_total{pool="fine"}'
        values: '0+2x60'
      - series: 'orca_pool_make_failures_total{pool="fine"}'
        values: '0+1x60'
    alert_rule_test:
      - eval_time: 1m
        alertname: OrcaNoLeader
        exp_alerts: []
      - eval_time: 4m
        alertname: OrcaNoLeader
        exp_alerts:
          - exp_annotations:
              summary: no orca scheduler has led for a minute
      - eval_time: 3m
        alertname: OrcaRunWaiting
        exp_alerts: []
      - eval_time: 10m
        alertname: OrcaRunWaiting
        exp_alerts:
          - exp_annotations:
              summary: a queued run has been due to start for over an hour
      - eval_time: 90m
        alertname: OrcaFailureRate
        exp_alerts:
          - exp_labels:
              pipeline: lost
            exp_annotations:
              summary: 'pipeline lost: over half its attempts fail'
          - exp_labels:
              pipeline: p
            exp_annotations:
              summary: 'pipeline p: over half its attempts fail'
      - eval_time: 40m
        alertname: OrcaPoolMakeFailures
        exp_alerts:
          - exp_labels:
              pool: q
            exp_annotations:
              summary: 'pool q: no machine made in 30 minutes (orca pools says why)'
"#;

/// docs/operations.md's alerting rules pass `promtool check rules` and fire
/// when they say they do (`promtool test rules`, [`RULES_TEST`]), and its
/// scrape config `promtool check config` with them beside it, as written.
#[test]
fn many_slow_clients_at_once_do_not_hold_up_a_scrape() {
    let (db, dir) = setup("[pipelines.p]\ncommand = \"true\"\n");
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut s = db.scheduler(&dir, &[("ORCA_METRICS_ADDR", metrics.as_str())]);
    wait_until("metrics served", 30.0, || {
        get(&metrics, "/metrics", 5.0).is_some()
    });
    // Twenty clients each send half a request and wait: served one after
    // another, each held its 2 s, a scrape behind them would wait 40 s,
    // past Prometheus's 10 s scrape timeout.
    let slow: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut c = TcpStream::connect(&metrics).unwrap();
            c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                .unwrap();
            c
        })
        .collect();
    let began = Instant::now();
    let (status, _) = get(&metrics, "/metrics", 30.0).expect("the scrape is answered");
    assert_eq!(status, 200);
    // Twenty slow clients are 2 s each: a scrape served beside them, not
    // after a share of them, is well under 5 s (and Prometheus's 10 s
    // scrape timeout).
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "the scrape waited {:?} behind the slow clients",
        began.elapsed()
    );
    // Each slow one is let go (its connection closed) within its time.
    for mut c in slow {
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut rest = Vec::new();
        assert!(c.read_to_end(&mut rest).is_ok(), "closed by the server");
    }
    s.stop();
}

#[test]
fn the_operations_page_s_prometheus_blocks_pass_promtool() {
    let page = repo_file("docs/operations.md");
    let yaml = blocks(&page, "yaml");
    let config = yaml
        .iter()
        .find(|b| b.starts_with("# prometheus.yml"))
        .expect("a prometheus.yml block");
    let rules = yaml
        .iter()
        .find(|b| b.starts_with("# orca-rules.yml"))
        .expect("an orca-rules.yml block");
    let dir = TempDir::new();
    let rules_path = dir.write("orca-rules.yml", rules);
    let config_path = dir.write("prometheus.yml", config);
    let tests_path = dir.write("orca-rules-test.yml", RULES_TEST);
    for args in [
        vec!["check", "rules", rules_path.as_str()],
        vec!["check", "config", config_path.as_str()],
        vec!["test", "rules", tests_path.as_str()],
    ] {
        let out = Command::new(tool("promtool"))
            .args(&args)
            .current_dir(&dir.0)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
    // Every metric the rules name is one orca serves.
    let served = repo_file("src/metrics/mod.rs");
    for word in rules.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if let Some(name) = word.strip_prefix("orca_") {
            let base = name
                .trim_end_matches("_bucket")
                .trim_end_matches("_count")
                .trim_end_matches("_sum");
            assert!(
                served.contains(&format!("name: \"orca_{base}\"")),
                "the rules name orca_{name}, which orca doesn't serve"
            );
        }
    }
}
