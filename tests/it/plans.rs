//! The statements a claim, a start, a beat and an end repeat look their
//! runs up by key whatever the table's statistics say. `orca.runs` has
//! partial indexes on `state = 'queued'` and `state = 'running'`; a lookup
//! by id that also says `state = 'running'` may scan one of them whole
//! instead, and the planner does when the statistics say few runs wait or
//! run (a burst queued or started since the last ANALYZE): every claim
//! then read every queued run's index entry (migration 0011 has the
//! figures), and an end or a beat could read every running run. Nor do
//! the picks of queued runs read the runs of the other kind: a claim's or
//! a tick's pick of runs within `max_runs` skips a backfill's fill runs
//! without reading them, and the pick of fill runs a queue without fill
//! runs (migration 0012).

use postgres::{Client, Transaction};

use crate::harness::*;
use crate::pools::with_pool;
use crate::worker::hand_made_machine;

/// Buffers of `orca.runs` and its indexes, and rows its index scans
/// fetched, that this session read so far (PostgreSQL's counters of the
/// transaction not yet reported: read twice in one transaction, the
/// difference is what ran between).
const READS: &str = "SELECT (sum(pg_stat_get_xact_blocks_fetched(x.oid))
        + pg_stat_get_xact_tuples_fetched('orca.runs'::regclass))::bigint
    FROM (SELECT 'orca.runs'::regclass::oid AS oid
          UNION ALL SELECT indexrelid FROM pg_index WHERE indrelid = 'orca.runs'::regclass) x";

/// What `step` read of `orca.runs` in a transaction of its own on `c`.
fn reads(c: &mut Client, step: impl FnOnce(&mut Transaction)) -> i64 {
    let mut tx = c.transaction().unwrap();
    let before: i64 = tx.query_one(READS, &[]).unwrap().get(0);
    step(&mut tx);
    let after: i64 = tx.query_one(READS, &[]).unwrap().get(0);
    tx.commit().unwrap();
    after - before
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

/// Most a step here may read: its own runs' few index pages, heap pages
/// and index insertions (about 100), far below a scan of the 100,000
/// queued runs' index entries (hundreds of pages) or the 1,200 running
/// runs' rows.
const BOUND: i64 = 400;

/// Seven rounds of a claim, a worker's round and end (on `m`, a machine's
/// session), and a tick's pick of local runs (with `fill`, a backfill's
/// queued: a tick's most), a start, a beat and two kinds of end (on `c`,
/// orca's),
/// of runs `running` (each round four) and `queued` (local; each round
/// two): what each read, named with `phase`. Seven: a statement prepared
/// by a client, or in a function without plan_cache_mode, is planned for
/// its values five times, then may keep a generic plan.
fn rounds(
    c: &mut Client,
    m: &mut Client,
    running: &[i64],
    queued: &[i64],
    fill: bool,
    phase: &str,
) -> Vec<(String, i64)> {
    let mut seen = Vec::new();
    let mut note = |step: &str, n: i64| seen.push((format!("{phase}: {step}"), n));
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
                    "SELECT orca.worker_finish($1, $2, 'succeeded', 0, NULL, 'done', ''::bytea, '{}'::jsonb)",
                    &[&ids[0], &starts[0]],
                )
                .unwrap()
                .get(0);
            assert_eq!(state.as_deref(), Some("succeeded"));
        });
        note("worker_finish", n);
        let n = reads(c, |tx| {
            let picked = tx
                .query(include_str!("../../sql/startable.sql"), &[&"local", &64i64])
                .unwrap();
            if fill {
                assert_eq!(picked.len(), 64, "the tick's pick ({phase}, round {i})");
            }
        });
        note("startable.sql", n);
        let start = queued[i * 2..i * 2 + 2].to_vec();
        let n = reads(c, |tx| {
            let started = tx
                .query(
                    include_str!("../../sql/runs_start.sql"),
                    &[&start, &"here", &None::<i64>],
                )
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
                         '{0,0}', '{NULL,NULL}', '{a,b}', '{\"\",\"\"}', '{\"{}\",\"{}\"}', NULL)",
                    &[&beat, &ones],
                )
                .unwrap();
            assert_eq!(ended.len(), 2);
        });
        note("finish_attempts", n);
        let n = reads(c, |tx| {
            let state: Option<String> = tx
                .query_one(
                    "SELECT orca.finish_attempt($1, 1, 'failed', 1, NULL, 'x', ''::bytea, '{}'::jsonb, NULL)",
                    &[&running[i * 4 + 2]],
                )
                .unwrap()
                .get(0);
            assert_eq!(state.as_deref(), Some("failed"));
        });
        note("finish_attempt", n);
    }
    seen
}

#[test]
fn claims_starts_beats_and_ends_read_their_own_runs_when_statistics_say_few_wait_or_run() {
    let (db, _dir) = setup(&with_pool(
        "p",
        r#"
[pipelines.job]
command = "true"
placement = "worker:p"
max_runs = 100

[pipelines.local]
command = "true"

[pipelines.backfill]
command = "true"
placement = "worker:p"
max_runs = 100

[pipelines.busy]
command = "true"
"#,
    ));
    let role = format!("orca_m_plans_{}", std::process::id());
    hand_made_machine(&db, "p", &role, "pw");
    let mut c = db.client();
    let mut m = db.client_as(&role, "pw");
    // busy: the running runs' pipeline, paused so a tick's pick doesn't
    // count them (a count of a pipeline's running runs reads them all).
    c.batch_execute(
        "UPDATE orca.pool_machines SET slots = 100;
         UPDATE orca.pipelines SET paused = true WHERE name = 'busy';
         ALTER TABLE orca.runs SET (autovacuum_enabled = false)",
    )
    .unwrap();
    // Statistics taken with 300,000 runs ended, a few queued and three
    // running; then bursts they don't know of: 1,200 running, later
    // 100,000 queued, and last backfills of 100,000 fill runs queued
    // before all (of a pool's pipeline with no other run queued, and of a
    // local one).
    runs(&mut c, "local", "succeeded", 300_000);
    runs(&mut c, "job", "queued", 14);
    runs(&mut c, "busy", "running", 3);
    c.batch_execute("ANALYZE orca.runs").unwrap();
    let running = runs(&mut c, "busy", "running", 1_200);
    let queued = runs(&mut c, "local", "queued", 14);
    let mut seen = rounds(
        &mut c,
        &mut m,
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
        &running[56..],
        &queued,
        true,
        "and backfills",
    ));
    for (step, n) in &seen {
        eprintln!("{step}: {n}");
    }
    let over: Vec<_> = seen.iter().filter(|(_, n)| *n > BOUND).collect();
    assert!(
        over.is_empty(),
        "steps that read more than {BOUND} buffers and rows of orca.runs: {over:?}"
    );
}
