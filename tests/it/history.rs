//! History that stays bounded (issue 27 §1): the leader prunes what ended
//! more than the keep ago (`ORCA_KEEP_SECONDS` here, `ORCA_KEEP_DAYS` in
//! production) and never what is still needed; a backlog goes over several
//! ticks without holding one up; and a machine login can't queue a run
//! again without end.

use crate::hardening::tick_max_ms;
use crate::harness::*;
use crate::pools::with_pool;

/// Inserts, as orca's role, a run of `pipeline` in `state` that ended an
/// hour ago (by the database's clock), with an event and an output chunk;
/// its id.
fn old_run(db: &TestDb, pipeline: &str, state: &str) -> i64 {
    let mut c = db.client();
    let id: i64 = c
        .query_one(
            "INSERT INTO orca.runs (pipeline, state, start, queued_at, started_at, ended_at, output)
             VALUES ($1, $2, 1, now() - interval '2 hours', now() - interval '2 hours',
                     now() - interval '1 hour', 'old output')
             RETURNING id",
            &[&pipeline, &state],
        )
        .unwrap()
        .get(0);
    c.execute(
        "INSERT INTO orca.events (at, run, pipeline, kind, why)
         VALUES (now() - interval '1 hour', $1, $2, $3, 'long ago')",
        &[&id, &pipeline, &state],
    )
    .unwrap();
    c.execute(
        "INSERT INTO orca.output_chunks (run, start, at, upto, bytes) VALUES ($1, 1, 0, 3, 'old')",
        &[&id],
    )
    .unwrap();
    c.execute(
        "INSERT INTO orca.attempts (run, attempt, started_at, ended_at, outcome, why, output)
         VALUES ($1, 1, now() - interval '2 hours', now() - interval '1 hour', 'failed',
                 'first attempt', 'old attempt output')",
        &[&id],
    )
    .unwrap();
    id
}

/// How many rows `sql` (a `count(*)` with `$1`) counts for `id`.
fn count(db: &TestDb, sql: &str, id: i64) -> i64 {
    db.client().query_one(sql, &[&id]).unwrap().get(0)
}

fn run_exists(db: &TestDb, id: i64) -> bool {
    count(db, "SELECT count(*) FROM orca.runs WHERE id = $1", id) == 1
}

#[test]
fn ended_history_is_pruned_and_what_is_still_needed_is_kept() {
    let (db, dir) = setup(
        "[pipelines.job]\ncommand = \"echo hello\"\nmax_runs = 5\n\n\
         [pipelines.slow]\ncommand = \"sleep 120\"\n\n\
         [pipelines.held]\ncommand = \"true\"\n\n\
         [pipelines.loud]\ncommand = \"false\"\nalert = \"http://127.0.0.1:9/hook\"\n",
    );
    db.ok(&["pause", "held"]);
    // Ended an hour ago: pruned with their events, output and sent alert.
    let done = old_run(&db, "job", "succeeded");
    let failed = old_run(&db, "loud", "failed");
    let cancelled = old_run(&db, "job", "cancelled");
    let mut c = db.client();
    c.execute(
        "INSERT INTO orca.alerts (run, pipeline, url, body, done) VALUES ($1, 'loud', 'http://x', '{}', true)",
        &[&failed],
    )
    .unwrap();
    // Still needed whatever their age: a queued run (queued again an hour
    // ago: its ended_at is old), a running one, a failed run whose alert is
    // not sent yet, a run with a live instance row.
    let queued = old_run(&db, "held", "queued");
    let running = old_run(&db, "job", "running");
    // (Its beat in the future: no sweep queues it again meanwhile.)
    c.execute(
        "UPDATE orca.runs SET heartbeat = now() + interval '1 day' WHERE id = $1",
        &[&running],
    )
    .unwrap();
    let unsent = old_run(&db, "loud", "failed");
    c.execute(
        "INSERT INTO orca.alerts (run, pipeline, url, body, next_try)
         VALUES ($1, 'loud', 'http://127.0.0.1:9/hook', '{}', now() + interval '1 day')",
        &[&unsent],
    )
    .unwrap();
    let held_by_instance = old_run(&db, "job", "succeeded");
    c.execute(
        "INSERT INTO orca.instances (instance, run, start, role, login, state)
         VALUES ('i-live', $1, 1, 'head', 'orca_i_nobody', 'joined')",
        &[&held_by_instance],
    )
    .unwrap();
    // Machines, instances, schedulers and events of no run: ended an hour
    // ago (pruned) and live (kept).
    c.batch_execute(
        "INSERT INTO orca.pool_machines (pool, name, type, location, role, ended_at)
         VALUES ('gone', 'orca-gone-1', 't', 'l', 'orca_m_x_gone', now() - interval '1 hour'),
                ('gone', 'orca-gone-2', 't', 'l', 'orca_m_x_live', NULL);
         INSERT INTO orca.instances (instance, run, start, role, login, state, ended_at)
         VALUES ('i-ended', 0, 1, 'worker', 'orca_i_ended', 'ended', now() - interval '1 hour');
         INSERT INTO orca.schedulers (host, pid, migrations, ended_at, seen_at)
         VALUES ('ended', 1, 18, now() - interval '1 hour', now() - interval '1 hour'),
                ('gone', 2, 18, NULL, now() - interval '1 hour'),
                ('live', 3, 18, NULL, now() + interval '1 day');
         INSERT INTO orca.events (at, kind, why) VALUES (now() - interval '1 hour', 'lead', 'old'),
                                                        (now() + interval '1 day', 'lead', 'new');",
    )
    .unwrap();

    // (EC2 runs' upkeep ends an instance row whose run is over: with a warm
    // pool, a lost limit after its run ended, so i-live stays live here.)
    let mut s = db.scheduler(
        &dir,
        &[
            ("ORCA_KEEP_SECONDS", "15"),
            ("ORCA_EC2_POOL_SECONDS", "60"),
            ("ORCA_POOL_LOST_SECONDS", "86400"),
        ],
    );
    let slow = db.queue("slow");
    let fresh = db.queue("job");
    wait_until("the fresh run ends and the slow one runs", 30.0, || {
        db.state(fresh) == "succeeded" && db.state(slow) == "running"
    });
    s.wait_for("the old history is pruned", 30.0, || {
        !run_exists(&db, done) && !run_exists(&db, failed) && !run_exists(&db, cancelled)
    });
    assert!(
        run_exists(&db, fresh),
        "a run ended within the keep is kept"
    );
    for (what, id) in [
        ("queued", queued),
        ("running", running),
        ("alert unsent", unsent),
        ("live instance", held_by_instance),
    ] {
        assert!(run_exists(&db, id), "the {what} run {id} is kept");
        assert_eq!(
            count(&db, "SELECT count(*) FROM orca.events WHERE run = $1", id),
            1,
            "the {what} run's event is kept"
        );
        assert!(
            count(&db, "SELECT count(*) FROM orca.attempts WHERE run = $1", id) >= 1,
            "the {what} run's attempts are kept"
        );
    }
    for id in [done, failed, cancelled] {
        for table in ["events", "output_chunks", "alerts", "attempts"] {
            let sql = format!("SELECT count(*) FROM orca.{table} WHERE run = $1");
            assert_eq!(count(&db, &sql, id), 0, "run {id}'s {table} go with it");
        }
    }
    let names: String = db.one(
        "SELECT (SELECT string_agg(name, ',' ORDER BY name) FROM orca.pool_machines) || ' ' ||
                (SELECT string_agg(instance, ',' ORDER BY instance) FROM orca.instances) || ' ' ||
                (SELECT string_agg(host, ',' ORDER BY host) FROM orca.schedulers) || ' ' ||
                (SELECT string_agg(why, ',' ORDER BY why) FROM orca.events WHERE run IS NULL AND kind = 'lead')",
    );
    assert_eq!(
        names, "orca-gone-2 i-live live new",
        "ended and gone rows pruned"
    );
    // Then the fresh run, once it ended more than the keep ago.
    s.wait_for("the fresh run is pruned after the keep", 40.0, || {
        !run_exists(&db, fresh)
    });
    assert_eq!(db.state(slow), "running", "a running run is never pruned");
    assert!(s.output().contains("pruned history ended over 15s ago: "));
    // `orca runs` lists what is left.
    let listed = db.ok(&["runs"]);
    assert!(listed.contains(&format!("{slow} ")), "{listed}");
    assert!(!listed.contains(&format!("\n{done} ")), "{listed}");
    db.ok(&["cancel", &slow.to_string()]);
    s.stop();
}

#[test]
fn a_big_backlog_is_pruned_over_several_ticks_none_of_them_long() {
    let (db, dir) = setup("[pipelines.job]\ncommand = \"true\"\n");
    db.client()
        .batch_execute(
            "INSERT INTO orca.runs (pipeline, state, start, ended_at, output)
             SELECT 'job', 'succeeded', 1, now() - interval '1 hour' + g * interval '1 ms', 'out'
             FROM generate_series(1, 6000) g;
             INSERT INTO orca.events (at, run, pipeline, kind, why)
             SELECT now() - interval '1 hour', r.id, 'job', k, 'x'
             FROM orca.runs r, unnest(ARRAY['started', 'succeeded']) k;
             ANALYZE orca.runs; ANALYZE orca.events;",
        )
        .unwrap();
    let stats = dir.path("stats");
    let mut s = db.scheduler(
        &dir,
        &[
            ("ORCA_KEEP_SECONDS", "60"),
            ("ORCA_TICK_STATS", stats.to_str().unwrap()),
        ],
    );
    let fresh = db.queue("job");
    // (A loaded box's statements pass the 10 ms budget: batches halve to
    // ten runs a tick, so the deadline is wide; the ticks' bound is below.)
    s.wait_for("the backlog is pruned", 300.0, || {
        db.one::<i64>("SELECT count(*) FROM orca.runs") == 1
    });
    assert_eq!(
        db.state(fresh),
        "succeeded",
        "the run within the keep stays"
    );
    let others = count(
        &db,
        "SELECT count(*) FROM orca.events WHERE run IS NOT NULL AND run <> $1",
        fresh,
    );
    assert_eq!(others, 0, "the pruned runs' events went with them");
    let passes = s.output().matches("pruned history").count();
    assert!(passes >= 5, "over several ticks, not one: {passes} passes");
    let listed = db.ok(&["runs", "--limit", "5"]);
    assert!(listed.contains(&format!("{fresh} ")), "{listed}");
    s.stop();
    // The tick's budget is 10 ms here (0.2 s ticks); a statement may go
    // over it (a batch then halves), never by far. The bound is wide: a
    // loaded 2-core box stalls ticks on its own.
    let max = tick_max_ms(&stats);
    assert!(max < 1500.0, "the longest tick took {max} ms");
}

#[test]
fn a_machine_login_requeueing_a_run_without_end_fails_it_at_the_bound() {
    let db = TestDb::new();
    let dir = TempDir::new();
    db.register(
        &dir,
        &with_pool(
            "p",
            "[pipelines.job]\ncommand = \"true\"\nplacement = \"worker:p\"\nalert = \"http://127.0.0.1:9/hook\"\n",
        ),
    );
    let role = hand_machine(&db, "p", "loop", "pw");
    let run = db.queue("job");
    let mut c = db.client_as(&role, "pw");
    c.execute("SELECT * FROM orca.worker_hello()", &[]).unwrap();
    let why = "w".repeat(16 * 1024);
    let mut loops = 0;
    loop {
        let rows = c
            .query("SELECT id, start FROM orca.worker_claim(1)", &[])
            .unwrap();
        let Some(row) = rows.first() else { break };
        let (id, start): (i64, i32) = (row.get(0), row.get(1));
        assert_eq!(id, run);
        c.query_one(
            "SELECT orca.worker_requeue($1, $2, $3, ''::bytea)",
            &[&id, &start, &why],
        )
        .unwrap();
        loops += 1;
        assert!(loops <= 600, "still claimable after {loops} requeues");
    }
    assert_eq!(loops, 500, "the 500th requeue fails the run");
    let row = db
        .client()
        .query_one(
            "SELECT state, start, why FROM orca.runs WHERE id = $1",
            &[&run],
        )
        .unwrap();
    let (state, start, why_now): (String, i32, String) = (row.get(0), row.get(1), row.get(2));
    assert_eq!((state.as_str(), start), ("failed", 500));
    assert!(
        why_now.starts_with("failed: requeued 500 times (bound), the last by orca-p-hand: www"),
        "{}",
        &why_now[..80]
    );
    assert!(why_now.len() < 1400, "the why is cut: {}", why_now.len());
    assert_eq!(db.events(run, "failed"), 1, "said once");
    let events = count(&db, "SELECT count(*) FROM orca.events WHERE run = $1", run);
    // Its `queued`, a `started` a start, a `requeued` each of the 499
    // requeues, its `failed` (the 500th is no requeue: migration 22).
    assert_eq!(events, 1 + 500 + 499 + 1, "{events} events");
    let alerts: i64 = db.one("SELECT count(*) FROM orca.alerts");
    assert_eq!(alerts, 1, "its alert, as any final failure's");
    // Nothing more is written for it: it is claimed no more, and the
    // login's requeue of its last attempt finds nothing running.
    assert!(
        c.query("SELECT * FROM orca.worker_claim(1)", &[])
            .unwrap()
            .is_empty()
    );
    let again: bool = c
        .query_one(
            "SELECT orca.worker_requeue($1, 500, 'again', ''::bytea)",
            &[&run],
        )
        .unwrap()
        .get(0);
    assert!(!again);
    assert_eq!(
        count(&db, "SELECT count(*) FROM orca.events WHERE run = $1", run),
        events
    );
    assert_eq!(db.one::<String>("SELECT state FROM orca.runs"), "failed");
}

#[test]
fn a_keep_out_of_its_range_is_refused_before_the_scheduler_starts() {
    let db = TestDb::new();
    for (var, value, said) in [
        (
            "ORCA_KEEP_DAYS",
            "0",
            "orca: ORCA_KEEP_DAYS=0 is out of range: a number of days from 1 to 3650\n",
        ),
        (
            "ORCA_KEEP_SECONDS",
            "soon",
            "orca: ORCA_KEEP_SECONDS=soon is out of range: a number of seconds from 1 to 315360000\n",
        ),
    ] {
        let out = db.orca(&["scheduler"]).env(var, value).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{var}={value}");
        assert_eq!(text(&out.stderr), said);
    }
    let leads: i64 = db.one("SELECT count(*) FROM orca.events");
    assert_eq!(leads, 0, "nothing was started");
}
