//! Every lookup of `orca.runs` that a claim, a tick, a beat, an end, a
//! requeue, an instance's poll or a sensor repeats reads its own runs,
//! whatever the table's statistics say. `orca.runs` has partial indexes on
//! `state = 'queued'` and `state = 'running'`; one whose statistics were
//! taken while it was nearly empty (a quiet night) looks empty to the
//! planner since, however many entries it has, and a lookup whose
//! condition implies its predicate may read it whole: every claim read
//! every running run, every lookup by key the same (migrations 0011 and
//! 0012 have the figures). Nor do the picks of queued runs read the runs
//! of the other kind: a claim's or a tick's pick of runs within `max_runs`
//! skips a backfill's fill runs without reading them, and the pick of fill
//! runs a queue without fill runs.

use postgres::{Client, Transaction};

use crate::harness::*;
use crate::pools::with_pool;

/// Buffers of `orca.runs` and its indexes, and index entries their scans
/// returned, that this session read so far (PostgreSQL's counters of the
/// transaction not yet reported: read twice in one transaction, the
/// difference is what ran between). The entries count a scan of a partial
/// index whole even where its rows share a few pages, as the runs of a
/// test do and a busy table's don't.
const READS: &str = "SELECT x.oid::regclass::text, (pg_stat_get_xact_blocks_fetched(x.oid)
        + pg_stat_get_xact_tuples_returned(x.oid) * x.idx)::bigint
    FROM (SELECT 'orca.runs'::regclass::oid AS oid, 0 AS idx
          UNION ALL SELECT indexrelid, 1 FROM pg_index WHERE indrelid = 'orca.runs'::regclass) x
    ORDER BY 1";

/// What a step read: in all, and the relation that read most.
type Read = (i64, String);

/// What `step` read of `orca.runs` in a transaction of its own on `c`.
fn reads(c: &mut Client, step: impl FnOnce(&mut Transaction)) -> Read {
    let counts = |tx: &mut Transaction| -> Vec<(String, i64)> {
        let rows = tx.query(READS, &[]).unwrap();
        rows.iter().map(|r| (r.get(0), r.get(1))).collect()
    };
    let mut tx = c.transaction().unwrap();
    let before = counts(&mut tx);
    step(&mut tx);
    let after = counts(&mut tx);
    tx.commit().unwrap();
    let read: Vec<(String, i64)> = after
        .into_iter()
        .zip(before)
        .map(|((rel, a), (_, b))| (rel, a - b))
        .collect();
    let total = read.iter().map(|r| r.1).sum();
    let most = read.into_iter().max_by_key(|r| r.1).unwrap();
    (total, format!("{} {}", most.0, most.1))
}

/// Ids of `n` new runs of `pipeline` in `state` (running: at start 1).
fn runs(c: &mut Client, pipeline: &str, state: &str, n: i64) -> Vec<i64> {
    c.query(
        "INSERT INTO orca.runs (pipeline, state, start, started_at, heartbeat)
         SELECT $1, $2, CASE WHEN $2 = 'running' THEN 1 ELSE 0 END,
                CASE WHEN $2 = 'running' THEN now() END, CASE WHEN $2 = 'running' THEN now() END
         FROM generate_series(1, $3::bigint) RETURNING id",
        &[&pipeline, &state, &n],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// Puts `runs` on two busy machines of pool `p` (rows only; made the first
/// time), half on each.
fn on_two_machines(c: &mut Client, runs: &[i64]) {
    c.batch_execute(
        "INSERT INTO orca.pool_machines (pool, name, type, location, role, slots)
         VALUES ('p', 'busy-a', 'small', 'here', 'busy-a', 1000),
                ('p', 'busy-b', 'small', 'here', 'busy-b', 1000)
         ON CONFLICT DO NOTHING",
    )
    .unwrap();
    c.execute(
        "UPDATE orca.runs r SET machine = m.id FROM orca.pool_machines m
         WHERE r.id = ANY($1) AND m.name = CASE WHEN r.id % 2 = 0 THEN 'busy-a' ELSE 'busy-b' END",
        &[&runs.to_vec()],
    )
    .unwrap();
}

/// Queues `n` fill runs of `pipeline` a day ago: a backfill queued before
/// every other run here, so its pipeline is the first a claim looks at.
fn backfill(c: &mut Client, pipeline: &str, n: i64) {
    c.execute(
        "INSERT INTO orca.runs (pipeline, fill, queued_at)
         SELECT $1, true, now() - interval '1 day' FROM generate_series(1, $2::bigint)",
        &[&pipeline, &n],
    )
    .unwrap();
}

/// Most a step here may read: its own runs' few index pages and entries,
/// heap pages and index insertions (about 100), far below a scan of the
/// 100,000 queued runs' index entries or the 1,200 running runs'.
const BOUND: i64 = 400;

/// Seven rounds of steps, each named with `phase` and what it read:
/// * on `m`, a machine's session: a claim, a worker's round, end and
///   requeue;
/// * on `inst`, an instance's session (and its run): its looks at its run;
/// * on `c`, orca's: a tick's pick of local runs (with `fill`, a
///   backfill's queued: a tick's most), a start of `queued` (local; each
///   round two), a beat, two kinds of end and a requeue of `running`
///   (each round four), a sensor's queueing of a run of `job`, a
///   machine's end (one that ran nothing), and the EC2 runs' looks (there
///   are none). (The live machines' view counts each machine's running
///   runs: it reads them all, by design.)
///
/// Seven: a statement prepared by a client, or in a function without
/// plan_cache_mode, is planned for its values five times, then may keep a
/// generic plan.
fn rounds(
    c: &mut Client,
    m: &mut Client,
    inst: &mut (Client, i64),
    running: &[i64],
    queued: &[i64],
    fill: bool,
    phase: &str,
) -> Vec<(String, Read)> {
    let mut seen = Vec::new();
    let mut note = |step: &str, n: Read| seen.push((format!("{phase}: {step}"), n));
    // Prepared once and used each round, as orca's sessions do: planned
    // for their values five times, then maybe once for any.
    let worker_requeue = m
        .prepare(include_str!("../../sql/worker_requeue.sql"))
        .unwrap();
    let run_over = inst
        .0
        .prepare(include_str!("../../sql/instance_run_over.sql"))
        .unwrap();
    let cluster = inst
        .0
        .prepare(include_str!("../../sql/instance_cluster.sql"))
        .unwrap();
    let prepare = |c: &mut Client, sql: &str| c.prepare(sql).unwrap();
    let startable = prepare(c, include_str!("../../sql/startable.sql"));
    let runs_start = prepare(c, include_str!("../../sql/runs_start.sql"));
    let run_requeue = prepare(c, include_str!("../../sql/run_requeue.sql"));
    let sensor_queue = prepare(c, include_str!("../../sql/sensor_queue.sql"));
    let machine_end = prepare(c, include_str!("../../sql/machine_end.sql"));
    let lost_heads = prepare(c, include_str!("../../sql/ec2_lost_heads.sql"));
    let runs_short = prepare(c, include_str!("../../sql/ec2_runs_short.sql"));
    for i in 0..7 {
        let mut claimed: Vec<(i64, i32)> = Vec::new();
        let n = reads(m, |tx| {
            claimed = tx
                .query("SELECT id, start FROM orca.worker_claim(2)", &[])
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
        });
        note("worker_claim", n);
        assert_eq!(
            claimed.len(),
            2,
            "the machine claims two runs ({phase}, round {i})"
        );
        let ids: Vec<i64> = claimed.iter().map(|c| c.0).collect();
        let starts: Vec<i32> = claimed.iter().map(|c| c.1).collect();
        let n = reads(m, |tx| {
            let beaten = tx
                .query(
                    "SELECT id FROM orca.worker_round($1, $2, $2, $1, $2, '{0,0}', '{x,y}', 0)",
                    &[&ids, &starts],
                )
                .unwrap();
            assert_eq!(beaten.len(), 2);
        });
        note("worker_round", n);
        let n = reads(m, |tx| {
            let state: Option<String> = tx
                .query_one(
                    "SELECT orca.worker_finish($1, $2, 'succeeded', 0, NULL, 'done', ''::bytea, '{}'::jsonb, 0.01)",
                    &[&ids[0], &starts[0]],
                )
                .unwrap()
                .get(0);
            assert_eq!(state.as_deref(), Some("succeeded"));
        });
        note("worker_finish", n);
        let n = reads(m, |tx| {
            let requeued: bool = tx
                .query_one(
                    &worker_requeue,
                    &[&ids[1], &starts[1], &"stopped", &b"".as_slice()],
                )
                .unwrap()
                .get(0);
            assert!(requeued);
        });
        note("worker_requeue.sql", n);
        let (ic, run) = inst;
        let n = reads(ic, |tx| {
            let over: bool = tx
                .query_one(&run_over, &[&"i-plans", &*run, &1i32])
                .unwrap()
                .get(0);
            assert!(!over, "the instance's run is running");
            let cluster = tx.query(&cluster, &[&"i-plans", &*run, &1i32]).unwrap();
            assert_eq!(cluster.len(), 1);
        });
        note("instance_run_over.sql, instance_cluster.sql", n);
        let n = reads(c, |tx| {
            let picked = tx.query(&startable, &[&"local", &64i64]).unwrap();
            if fill {
                assert_eq!(picked.len(), 64, "the tick's pick ({phase}, round {i})");
            }
        });
        note("startable.sql", n);
        let start = queued[i * 2..i * 2 + 2].to_vec();
        let n = reads(c, |tx| {
            let started = tx
                .query(&runs_start, &[&start, &"here", &None::<i64>])
                .unwrap();
            assert_eq!(started.len(), 2);
        });
        note("runs_start.sql", n);
        let beat = running[i * 4..i * 4 + 2].to_vec();
        let ones = vec![1i32; beat.len()];
        let n = reads(c, |tx| {
            let beaten = tx
                .query(
                    "SELECT id FROM orca.runs_beat($1, $2, $2, $1, $2, '{0,0}', '{x,y}')",
                    &[&beat, &ones],
                )
                .unwrap();
            assert_eq!(beaten.len(), 2);
        });
        note("runs_beat", n);
        let n = reads(c, |tx| {
            let ended = tx
                .query(
                    "SELECT state FROM orca.finish_attempts($1, $2, '{succeeded,succeeded}',
                         '{0,0}', '{NULL,NULL}', '{a,b}', '{\"\",\"\"}', '{\"{}\",\"{}\"}', NULL,
                         '{0.01,0.01}')",
                    &[&beat, &ones],
                )
                .unwrap();
            assert_eq!(ended.len(), 2);
        });
        note("finish_attempts", n);
        let n = reads(c, |tx| {
            let state: Option<String> = tx
                .query_one(
                    "SELECT orca.finish_attempt($1, 1, 'failed', 1, NULL, 'x', ''::bytea, '{}'::jsonb,
                         NULL::bigint, 0.01::float8)",
                    &[&running[i * 4 + 2]],
                )
                .unwrap()
                .get(0);
            assert_eq!(state.as_deref(), Some("failed"));
        });
        note("finish_attempt", n);
        let n = reads(c, |tx| {
            let requeued: bool = tx
                .query_one(
                    &run_requeue,
                    &[&running[i * 4 + 3], &1i32, &"stopped", &b"".as_slice()],
                )
                .unwrap()
                .get(0);
            assert!(requeued);
        });
        note("run_requeue.sql", n);
        let n = reads(c, |tx| {
            let queued = tx.query(&sensor_queue, &[&"job", &"yes"]).unwrap();
            assert!(queued.len() <= 1);
        });
        note("sensor_queue.sql", n);
        let gone: i64 = c
            .query_one(
                "INSERT INTO orca.pool_machines (pool, name, type, location, role)
                 VALUES ('p', $1, 'small', 'here', $1) RETURNING id",
                &[&format!("gone-{phase}-{i}")],
            )
            .unwrap()
            .get(0);
        let n = reads(c, |tx| {
            let requeued = tx.query(&machine_end, &[&gone, &"gone"]).unwrap();
            assert!(requeued.is_empty(), "the machine ran nothing");
        });
        note("machine_end.sql", n);
        let n = reads(c, |tx| {
            assert!(
                tx.query(&lost_heads, &[&60.0f64, &60.0f64])
                    .unwrap()
                    .is_empty()
            );
            assert!(tx.query(&runs_short, &[]).unwrap().is_empty());
        });
        note("ec2_lost_heads.sql, ec2_runs_short.sql", n);
    }
    seen
}

#[test]
fn every_repeated_lookup_reads_its_own_runs_whatever_the_statistics_say() {
    let (db, _dir) = setup(&with_pool(
        "p",
        r#"
[pipelines.job]
command = "true"
placement = "worker:p"
max_runs = 100

[pipelines.local]
command = "true"
max_fills = 10000

[pipelines.backfill]
command = "true"
placement = "worker:p"
max_runs = 100
max_fills = 10000

[pipelines.busy]
command = "true"
"#,
    ));
    let role = hand_machine(&db, "p", "plans", "pw");
    let mut c = db.client();
    let mut m = db.client_as(&role, "pw");
    let instance = format!("orca_i_plans_{}", std::process::id());
    db.login_role(&instance, "pw", "orca_instance");
    // busy: the running runs' pipeline, paused so a tick's pick doesn't
    // count them (a count of a pipeline's running runs reads them all).
    c.batch_execute(
        "UPDATE orca.pool_machines SET slots = 100;
         UPDATE orca.pipelines SET paused = true WHERE name = 'busy';
         ALTER TABLE orca.runs SET (autovacuum_enabled = false)",
    )
    .unwrap();
    // Statistics taken with 300,000 runs ended and none queued or running
    // (a quiet night: every partial index looks empty to the planner
    // since); then bursts they don't know of: 1,200 running, later 100,000
    // queued, and last backfills of 100,000 fill runs queued before all
    // (of a pool's pipeline with no other run queued, and of a local one).
    runs(&mut c, "local", "succeeded", 300_000);
    c.batch_execute("ANALYZE orca.runs").unwrap();
    let running = runs(&mut c, "busy", "running", 1_200);
    on_two_machines(&mut c, &running);
    runs(&mut c, "job", "queued", 14);
    // A head instance of the last, which no round ends.
    let head = *running.last().unwrap();
    c.execute(
        "INSERT INTO orca.instances (instance, run, start, role, login, host)
         VALUES ('i-plans', $1, 1, 'head', $2, 'h')",
        &[&head, &instance],
    )
    .unwrap();
    let mut inst = (db.client_as(&instance, "pw"), head);
    let queued = runs(&mut c, "local", "queued", 14);
    let mut seen = rounds(
        &mut c,
        &mut m,
        &mut inst,
        &running[..28],
        &queued,
        false,
        "1,200 running",
    );
    runs(&mut c, "job", "queued", 100_000);
    let queued = runs(&mut c, "local", "queued", 14);
    seen.extend(rounds(
        &mut c,
        &mut m,
        &mut inst,
        &running[28..56],
        &queued,
        false,
        "and 100,000 queued",
    ));
    backfill(&mut c, "backfill", 100_000);
    backfill(&mut c, "local", 100_000);
    let queued = runs(&mut c, "local", "queued", 14);
    seen.extend(rounds(
        &mut c,
        &mut m,
        &mut inst,
        &running[56..],
        &queued,
        true,
        "and backfills",
    ));
    // Statistics taken again with three running (of those above, not yet
    // ended), then 1,200 more running.
    c.execute(
        "UPDATE orca.runs SET state = 'succeeded' WHERE id = ANY($1)",
        &[&running[84..running.len() - 3].to_vec()],
    )
    .unwrap();
    c.batch_execute("ANALYZE orca.runs").unwrap();
    let more = runs(&mut c, "busy", "running", 1_200);
    on_two_machines(&mut c, &more);
    let queued = runs(&mut c, "local", "queued", 14);
    seen.extend(rounds(
        &mut c,
        &mut m,
        &mut inst,
        &more,
        &queued,
        true,
        "and 1,200 more running",
    ));
    for (step, (n, most)) in &seen {
        eprintln!("{step}: {n} (most: {most})");
    }
    let over: Vec<_> = seen.iter().filter(|(_, (n, _))| *n > BOUND).collect();
    assert!(
        over.is_empty(),
        "steps that read more than {BOUND} buffers and index entries of orca.runs: {over:?}"
    );
}
