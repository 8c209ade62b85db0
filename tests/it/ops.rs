//! The commands an operator reaches for on day two: `orca pipelines`,
//! `retry`, `cancel --pipeline P --queued`, `status` (a health check),
//! `events -f` and its filters, `schedulers` (recent by default, `--all`;
//! `instances`, its old name, the same).

use std::process::{Command, Stdio};

use crate::harness::*;

/// `orca ARGS` parsed as the JSON it prints (it must succeed).
fn json(db: &TestDb, args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&db.ok(args)).unwrap_or_else(|e| panic!("orca {args:?}: {e}"))
}

/// `orca ARGS` that must fail with `code` and one line on stderr: that line.
fn refused(db: &TestDb, args: &[&str], code: i32) -> String {
    let out = db.run(args);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "orca {args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "orca {args:?}: {err}");
    assert!(err.starts_with("orca: "), "orca {args:?}: {err}");
    err.trim_end().to_string()
}

#[test]
fn pipelines_shows_schedule_pause_counts_and_the_last_ended_run() {
    let toml = "[pipelines.a]\ncommand = \"true\"\nschedule = \"0 3 * * *\"\nmax_runs = 2\n\n\
                [pipelines.b]\ncommand = \"true\"\n\n\
                [pipelines.c]\ncommand = \"true\"\n";
    let (db, dir) = setup(toml);
    let mut c = db.client();
    // a: a failed run, then a succeeded one, then one running and two queued.
    c.batch_execute(
        "INSERT INTO orca.runs (pipeline, state, start, exit_code, ended_at) \
         VALUES ('a', 'failed', 1, 3, now() - interval '2 minutes'); \
         INSERT INTO orca.runs (pipeline, state, start, exit_code, ended_at) \
         VALUES ('a', 'failed', 1, 7, now() - interval '1 minute'); \
         INSERT INTO orca.runs (pipeline, state, start) VALUES ('a', 'running', 1); \
         UPDATE orca.pipelines SET next_fire = '2030-01-02 03:00:00+00' WHERE name = 'a';",
    )
    .unwrap();
    let last_failed: i64 = db.one("SELECT max(id) FROM orca.runs WHERE state = 'failed'");
    db.queue("a");
    db.queue("a");
    db.ok(&["pause", "b"]);
    // c is retired: gone from the file.
    db.register(
        &dir,
        "[pipelines.a]\ncommand = \"true\"\nschedule = \"0 3 * * *\"\nmax_runs = 2\n\n\
         [pipelines.b]\ncommand = \"true\"\non_lost = \"fail\"\n",
    );

    let list = json(&db, &["pipelines", "--json"]);
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 2, "retired c left out: {list:?}");
    let a = &list[0];
    assert_eq!(a["name"], "a");
    assert_eq!(a["placement"], "local");
    assert_eq!(a["schedule"], "0 3 * * *");
    assert_eq!(a["next_fire"], "2030-01-02T03:00:00Z");
    assert_eq!(a["paused"], false);
    assert_eq!(a["max_runs"], 2);
    assert_eq!(a["on_lost"], "retry");
    assert_eq!(a["running"], 1);
    assert_eq!(a["queued"], 2);
    // The last *ended* run, not the newest (queued) one.
    assert_eq!(a["last"]["id"], last_failed);
    assert_eq!(a["last"]["state"], "failed");
    assert_eq!(a["last"]["exit_code"], 7);
    assert!(a["last"]["ended_at"].as_str().unwrap().ends_with('Z'));
    let b = &list[1];
    assert_eq!(b["name"], "b");
    assert_eq!(b["paused"], true);
    assert_eq!(b["on_lost"], "fail");
    assert_eq!(b["schedule"], serde_json::Value::Null);
    assert_eq!(b["last"], serde_json::Value::Null);
    assert_eq!(b["queued"], 0);

    let all = json(&db, &["pipelines", "--all", "--json"]);
    let c_row = all
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "c")
        .expect("--all lists retired c");
    assert_eq!(c_row["retired"], true);

    let text = db.ok(&["pipelines"]);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("PIPELINE"), "{text}");
    assert!(
        lines[1].starts_with("a ")
            && lines[1].contains("2030-01-02T03:00:00Z")
            && lines[1].contains(&format!("run {last_failed} failed (exit 7)")),
        "{text}"
    );
    assert!(
        lines[2].starts_with("b ") && lines[2].contains(" yes ") && lines[2].contains(" fail "),
        "{text}"
    );
    assert_eq!(lines.len(), 3, "{text}");
}

#[test]
fn the_last_ended_run_is_read_through_the_index_whatever_the_history() {
    let (db, _dir) =
        setup("[pipelines.a]\ncommand = \"true\"\n\n[pipelines.b]\ncommand = \"true\"\n");
    // 200,000 finished runs, a queue on top, statistics that know them.
    db.client()
        .batch_execute(
            "INSERT INTO orca.runs (pipeline, state, start, ended_at) \
             SELECT CASE WHEN i % 2 = 0 THEN 'a' ELSE 'b' END, 'succeeded', 1, now() \
             FROM generate_series(1, 200000) i; \
             INSERT INTO orca.runs (pipeline) SELECT 'a' FROM generate_series(1, 100); \
             ANALYZE orca.runs;",
        )
        .unwrap();
    let plan: String = db
        .client()
        .query(
            &format!(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT TEXT) {}",
                include_str!("../../sql/pipelines_list.sql").replace("$1::boolean", "false")
            ),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(!plan.contains("Seq Scan on runs"), "{plan}");
    // Shared buffers read: a few hundred at most, not the table's thousands.
    let buffers: i64 = plan
        .lines()
        .next()
        .and_then(|_| {
            plan.lines()
                .find(|l| l.contains("Buffers:"))
                .and_then(|l| l.split("hit=").nth(1))
                .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0);
    assert!(buffers < 2000, "{buffers} buffers:\n{plan}");
}

#[test]
fn retry_queues_a_failed_run_again_with_its_arguments_naming_it() {
    let toml = "[pipelines.a]\ncommand = \"echo \\\"got $1 $2\\\"; exit 3\"\n\n\
                [pipelines.gone]\ncommand = \"true\"\n";
    let (db, dir) = setup(toml);
    let first: i64 = db
        .ok(&["run", "a", "--fill", "--", "x y", "z"])
        .trim()
        .parse()
        .unwrap();
    // Still queued: refused (exit 1), nothing queued.
    let err = refused(&db, &["retry", &first.to_string()], 1);
    assert!(err.contains(&format!("run {first} is queued")), "{err}");
    let mut s = db.scheduler(&dir, &[]);
    s.wait_for("the first run fails", 30.0, || db.state(first) == "failed");
    let out = db.ok(&["retry", &first.to_string()]);
    let second: i64 = out
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("an id: {out}"));
    assert!(second > first);
    s.wait_for("the retry fails too", 30.0, || db.state(second) == "failed");
    // The same arguments and fill flag, and it really ran with them.
    let row = db
        .client()
        .query_one("SELECT args, fill FROM orca.runs WHERE id = $1", &[&second])
        .unwrap();
    assert_eq!(row.get::<_, Vec<String>>(0), ["x y", "z"]);
    assert!(row.get::<_, bool>(1));
    assert!(text(&db.output(second)).contains("got x y z"));
    // Each names the other in its events.
    let why = |run: i64, kind: &str| -> String {
        db.client()
            .query_one(
                "SELECT string_agg(why, ' | ') FROM orca.events WHERE run = $1 AND kind = $2",
                &[&run, &kind],
            )
            .unwrap()
            .get::<_, Option<String>>(0)
            .unwrap_or_default()
    };
    assert!(why(second, "queued").contains(&format!("retry of run {first}")));
    assert!(why(first, "rerun").contains(&format!("retried as run {second}")));
    let shown = db.ok(&["events", "--run", &first.to_string()]);
    assert!(
        shown.contains(&format!("retried as run {second}")),
        "{shown}"
    );
    s.stop();

    // Unknown run: bad input. A retired pipeline's run: refused as bad input.
    let err = refused(&db, &["retry", "999999"], 2);
    assert!(err.contains("unknown run: 999999"), "{err}");
    let gone = db.queue("gone");
    db.ok(&["cancel", &gone.to_string()]);
    db.register(&dir, "[pipelines.a]\ncommand = \"true\"\n");
    let err = refused(&db, &["retry", &gone.to_string()], 2);
    assert!(err.contains("retired"), "{err}");
    refused(&db, &["retry", "x"], 2);
    assert_eq!(
        db.one::<i64>("SELECT count(*) FROM orca.runs"),
        3,
        "nothing queued by a refused retry"
    );
}

#[test]
fn a_run_is_retried_once_however_many_retries_run_at_once() {
    let (db, dir) = setup("[pipelines.a]\ncommand = \"exit 3\"\n");
    let first = db.queue("a");
    let mut s = db.scheduler(&dir, &[]);
    s.wait_for("the run fails", 30.0, || db.state(first) == "failed");
    s.stop();
    // Two operators (or a script that retries on a timeout) at once.
    let children: Vec<_> = (0..6)
        .map(|_| {
            db.orca(&["retry", &first.to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let queued: Vec<&std::process::Output> = outs.iter().filter(|o| o.status.success()).collect();
    assert_eq!(queued.len(), 1, "one retry queued: {outs:?}");
    for o in outs.iter().filter(|o| !o.status.success()) {
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(
            err.contains(&format!("run {first} was already retried")),
            "{err}"
        );
    }
    assert_eq!(db.one::<i64>("SELECT count(*) FROM orca.runs"), 2);
    // The retry itself can be retried once it has ended.
    let second: i64 = text(&queued[0].stdout).trim().parse().unwrap();
    db.ok(&["cancel", &second.to_string()]);
    db.ok(&["retry", &second.to_string()]);
}

#[test]
fn cancel_queued_cancels_every_queued_run_of_one_pipeline() {
    let (db, _dir) =
        setup("[pipelines.a]\ncommand = \"true\"\n\n[pipelines.b]\ncommand = \"true\"\n");
    let a: Vec<i64> = (0..3).map(|_| db.queue("a")).collect();
    let b = db.queue("b");
    db.client()
        .execute(
            "INSERT INTO orca.runs (pipeline, state, start) VALUES ('a', 'running', 1)",
            &[],
        )
        .unwrap();
    let out = db.ok(&["cancel", "--pipeline", "a", "--queued"]);
    assert_eq!(out.trim(), "cancelled 3 queued runs of a");
    for id in &a {
        assert_eq!(db.state(*id), "cancelled");
        assert_eq!(db.events(*id, "cancelled"), 1, "one event each");
    }
    assert_eq!(db.state(b), "queued", "another pipeline's run is left");
    assert_eq!(
        db.one::<i64>("SELECT count(*) FROM orca.runs WHERE state = 'running'"),
        1,
        "a running run goes on"
    );
    let again = db.ok(&["cancel", "--pipeline", "a", "--queued"]);
    assert_eq!(again.trim(), "cancelled 0 queued runs of a");
    let err = refused(&db, &["cancel", "--pipeline", "nope", "--queued"], 2);
    assert!(err.contains("unknown pipeline: nope"), "{err}");
    // Each half alone, or both ways at once, is bad input.
    refused(&db, &["cancel", "--pipeline", "b"], 2);
    refused(&db, &["cancel", "--queued"], 2);
    refused(
        &db,
        &["cancel", &b.to_string(), "--pipeline", "b", "--queued"],
        2,
    );
    refused(&db, &["cancel"], 2);
    assert_eq!(db.state(b), "queued");
}

/// `orca status`: its exit code and stdout, stderr.
fn status(db: &TestDb, args: &[&str]) -> (i32, String, String) {
    let mut argv = vec!["status", "--db-wait", "5"];
    argv.extend_from_slice(args);
    let out = db
        .orca(&argv)
        .env("ORCA_STALE_SECONDS", "3")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

#[test]
fn status_exits_0_while_a_scheduler_leads_and_1_when_none_does() {
    let toml = "[pipelines.a]\ncommand = \"exit 4\"\n\n[pipelines.p]\ncommand = \"true\"\n\n\
                [pools.builders]\nprovider = \"local\"\ntypes = [{ type = \"small\", wait = 0 }]\n\
                locations = [\"here\"]\nmax_machines = 1\n";
    let (db, dir) = setup(toml);
    // A machine of the pool, booting (no worker seen yet), as its row says.
    db.client()
        .batch_execute(
            "INSERT INTO orca.pool_machines (pool, name, type, location, role) \
             VALUES ('builders', 'orca-builders-1', 'small', 'here', 'no_such_role')",
        )
        .unwrap();
    let (code, out, err) = status(&db, &[]);
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(err.trim(), "orca: no scheduler leads");
    assert!(out.contains("leader    none: no scheduler leads"), "{out}");
    assert!(
        out.contains("pool      builders: 1 machine (1 booting), demand 0"),
        "{out}"
    );
    let (_, out, _) = status(&db, &["--json"]);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["pools"][0]["machines"]["booting"], 1, "{out}");
    // Gone before a scheduler's pass would look for it.
    db.client()
        .batch_execute("UPDATE orca.pool_machines SET ended_at = now()")
        .unwrap();

    db.ok(&["pause", "p"]);
    let waiting = db.queue("p");
    let failed = db.queue("a");
    let mut s = db.scheduler(&dir, &[]);
    s.wait_for("the failure", 30.0, || db.state(failed) == "failed");
    s.wait_for("status says it leads", 30.0, || status(&db, &[]).0 == 0);
    let (_, out, err) = status(&db, &[]);
    assert!(err.is_empty(), "{err}");
    assert!(
        out.contains("leader    host ") && out.contains(&format!("pid {}", s.pid())),
        "{out}"
    );
    assert!(out.contains("0 running, 1 queued"), "{out}");
    assert!(
        out.contains(&format!("the oldest due: run {waiting} (p)")),
        "{out}"
    );
    assert!(
        out.contains(&format!("failed    run {failed} (a)")),
        "{out}"
    );
    assert!(out.contains("exit 4"), "{out}");
    let (code, out, _) = status(&db, &["--json"]);
    assert_eq!(code, 0);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["ok"], true);
    assert_eq!(doc["queued"], 1);
    assert_eq!(doc["oldest_queued"]["run"], waiting);
    assert_eq!(doc["failures"][0]["run"], failed);
    assert!(doc["leader"]["since"].as_str().unwrap().ends_with('Z'));

    // Stopped (SIGSTOP): it holds the lock but does nothing; past the stale
    // limit, by the database's clock, it no longer counts as leading.
    s.signal(libc::SIGSTOP);
    wait_until("status says the leader is quiet", 30.0, || {
        status(&db, &[]).0 == 1
    });
    let (_, _, err) = status(&db, &[]);
    assert!(err.contains("quiet for"), "{err}");
    s.signal(libc::SIGCONT);
    wait_until("status says it leads again", 30.0, || {
        status(&db, &[]).0 == 0
    });

    // Killed: exit 1 with the reason, on one line; the JSON says the same.
    s.signal(libc::SIGKILL);
    s.wait(10.0);
    wait_until("status says none leads", 30.0, || status(&db, &[]).0 == 1);
    let (_, out, err) = status(&db, &["--json"]);
    assert_eq!(err.trim(), "orca: no scheduler leads");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["ok"], false);
    assert_eq!(doc["why"], "no scheduler leads");
}

#[test]
fn status_with_scheduler_rows_names_the_leading_scheduler() {
    let (db, dir) = setup("[pipelines.a]\ncommand = \"true\"\n");
    let mut s = db.scheduler(&dir, &[("ORCA_OVERLAP", "on")]);
    s.wait_for("status says it leads", 30.0, || status(&db, &[]).0 == 0);
    let id: i64 = db.one("SELECT id FROM orca.schedulers WHERE leads");
    let (_, out, _) = status(&db, &[]);
    assert!(
        out.contains(&format!("leader    scheduler {id}, host ")),
        "{out}"
    );
    s.signal(libc::SIGKILL);
    s.wait(10.0);
    wait_until("status says none leads", 30.0, || status(&db, &[]).0 == 1);
}

#[test]
fn status_when_the_database_does_not_answer_exits_1() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = Command::new(bin())
        .args(["status", "--db-wait", "0"])
        .env(
            "ORCA_DATABASE_URL",
            format!("postgres://orca:pw@127.0.0.1:{port}/orca"),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(!err.contains("pw"), "{err}");
}

#[test]
fn events_follow_prints_new_events_as_they_come_filtered() {
    let (db, dir) =
        setup("[pipelines.a]\ncommand = \"true\"\n\n[pipelines.b]\ncommand = \"true\"\n");
    let old_b = db.queue("b");
    let mut f = Proc::spawn(
        db.orca(&["events", "-f", "--pipeline", "b", "--kind", "queued"]),
        &dir.path("follow.log"),
    );
    f.wait_for("the old event, listed first", 20.0, || {
        f.output().contains(&format!("run {old_b} "))
    });
    // Written after it started: b's queued event shows, a's doesn't, nor
    // b's cancelled one.
    let a = db.queue("a");
    let b = db.queue("b");
    db.ok(&["cancel", &b.to_string()]);
    let b2 = db.queue("b");
    f.wait_for("the new events of b", 20.0, || {
        f.output().contains(&format!("run {b2} "))
    });
    let out = f.output();
    assert!(out.contains(&format!("run {b} ")), "{out}");
    assert!(!out.contains(&format!("run {a} ")), "{out}");
    assert!(!out.contains("cancelled"), "{out}");
    assert_eq!(
        out.matches(&format!("run {b} ")).count(),
        1,
        "each event once: {out}"
    );
    f.terminate(5.0);

    // Its reader gone (as `| head -1` does), it ends (exit 0) without a
    // new event to write (none matches: the header is all it printed).
    let mut child = db
        .orca(&["events", "-f", "--kind", "no such kind"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::BufRead;
        let mut line = String::new();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        out.read_line(&mut line).unwrap();
        assert!(line.starts_with("AT"), "{line}");
    }
    let mut status = None;
    wait_until("events -f ends once its reader goes", 20.0, || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        text(&out.stderr)
    );

    // Filters without -f: --run with --kind, --since as a duration or a time.
    let listed = db.ok(&["events", "--run", &b.to_string(), "--kind", "cancelled"]);
    assert_eq!(listed.lines().count(), 2, "{listed}");
    let recent = db.ok(&["events", "--since", "10m", "--pipeline", "a"]);
    assert!(recent.contains(&format!("run {a} ")), "{recent}");
    let future = db.ok(&["events", "--since", "2999-01-01T00:00:00Z"]);
    assert_eq!(future.lines().count(), 1, "the header alone: {future}");
    let doc = json(
        &db,
        &[
            "events",
            "--since",
            "2020-01-01T00:00:00Z",
            "--kind",
            "queued",
            "--json",
        ],
    );
    assert_eq!(doc.as_array().unwrap().len(), 4, "old b, a, b, b2");
    for bad in [
        vec!["events", "--since", "5x"],
        vec!["events", "--since", "yesterday"],
        vec!["events", "--pipeline", "nope"],
        vec!["events", "--limit", "0"],
        vec!["events", "-f", "--json"],
    ] {
        refused(&db, &bad, 2);
    }
}

#[test]
fn schedulers_hides_long_gone_ones_unless_all_and_instances_is_its_old_name() {
    let (db, dir) = setup("[pipelines.a]\ncommand = \"true\"\n");
    db.client()
        .batch_execute(
            "INSERT INTO orca.schedulers (host, pid, migrations, joined_at, seen_at, ended_at) \
             VALUES ('old-host', 11, 1, now() - interval '3 hours', now() - interval '2 hours', \
                     now() - interval '2 hours'), \
                    ('recent-host', 12, 1, now() - interval '1 hour', now() - interval '10 minutes', \
                     now() - interval '10 minutes'), \
                    ('vanished-host', 13, 1, now() - interval '5 hours', now() - interval '4 hours', NULL);",
        )
        .unwrap();
    let mut s = db.scheduler(&dir, &[("ORCA_OVERLAP", "on")]);
    s.wait_for("a live scheduler leads", 30.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.schedulers WHERE leads AND ended_at IS NULL") == 1
    });
    let hosts = |args: &[&str]| -> Vec<String> {
        json(&db, args)
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["host"].as_str().unwrap().to_string())
            .collect()
    };
    let shown = hosts(&["schedulers", "--json"]);
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert_eq!(shown[0], "recent-host");
    let all = hosts(&["schedulers", "--all", "--json"]);
    assert_eq!(all.len(), 4, "{all:?}");
    assert!(all.contains(&"old-host".to_string()) && all.contains(&"vanished-host".to_string()));
    let text = db.ok(&["schedulers"]);
    assert!(
        !text.contains("old-host") && text.contains("recent-host"),
        "{text}"
    );
    // `orca instances`, the old name, still lists the same (scripts use it).
    assert_eq!(hosts(&["instances", "--json"]), shown);
    assert_eq!(hosts(&["instances", "--all", "--json"]), all);
    let old_text = db.ok(&["instances"]);
    assert_eq!(
        old_text.lines().next(),
        text.lines().next(),
        "the same header"
    );
    assert!(
        !old_text.contains("old-host") && old_text.contains("recent-host"),
        "{old_text}"
    );
    s.stop();
}

#[test]
fn events_follow_prints_a_backlog_larger_than_one_look_whole() {
    let (db, dir) = setup("[pipelines.a]\ncommand = \"true\"\n");
    let mut f = Proc::spawn(
        db.orca(&["events", "-f", "--pipeline", "a"]),
        &dir.path("follow.log"),
    );
    f.wait_for("the header", 20.0, || f.output().starts_with("AT"));
    // 2,500 events committed at once, already older than the settling
    // window: more than one look (1,000) takes.
    db.client()
        .batch_execute(
            "INSERT INTO orca.events (at, pipeline, kind, why) \
             SELECT now() - interval '1 minute', 'a', 'queued', 'bulk ' || i \
             FROM generate_series(1, 2500) i",
        )
        .unwrap();
    f.wait_for("the last of them", 30.0, || {
        f.output().contains("bulk 2500\n")
    });
    let out = f.output();
    assert_eq!(out.matches(" bulk ").count(), 2500, "each once");
    f.terminate(5.0);
}

#[test]
fn events_follow_prints_an_event_committed_after_it_began_under_a_lower_id() {
    let (db, dir) = setup("[pipelines.a]\ncommand = \"true\"\n");
    // A transaction takes an id for its event and has not committed yet
    // (a tick, an `orca run` elsewhere); a later one commits first.
    let mut slow = db.client();
    let mut tx = slow.transaction().unwrap();
    tx.batch_execute(
        "INSERT INTO orca.events (pipeline, kind, why) VALUES ('a', 'queued', 'in flight')",
    )
    .unwrap();
    db.client()
        .batch_execute(
            "INSERT INTO orca.events (pipeline, kind, why) VALUES ('a', 'queued', 'committed')",
        )
        .unwrap();
    let mut f = Proc::spawn(
        db.orca(&["events", "-f", "--pipeline", "a"]),
        &dir.path("follow.log"),
    );
    f.wait_for("the committed event, listed", 20.0, || {
        f.output().contains("committed\n")
    });
    tx.commit().unwrap();
    f.wait_for("the event committed after -f began", 20.0, || {
        f.output().contains("in flight\n")
    });
    let out = f.output();
    assert_eq!(out.matches(" in flight\n").count(), 1, "once: {out}");
    assert_eq!(out.matches(" committed\n").count(), 1, "once: {out}");
    f.terminate(5.0);
}
