//! What a run's output costs the database: stored as printed (the last
//! 64 KiB), appended once, a fold only for an attempt that streamed, an
//! attempt streaming across migration 15 keeps its output.

use super::*;

/// Where `out` ends in the stream, if it is a piece of it, byte for byte.
fn end_in_stream(out: &[u8]) -> Option<u64> {
    if out.is_empty() {
        return Some(0);
    }
    let nl = out.iter().rposition(|&b| b == b'\n')?;
    let digits = std::str::from_utf8(out.get(nl.checked_sub(15)?..nl - 5)?).ok()?;
    let k: u64 = digits.parse().ok()?;
    let end = (k + 1) * 16 + (out.len() - 1 - nl) as u64;
    let from = end.checked_sub(out.len() as u64)?;
    (stream(from, out.len()) == out).then_some(end)
}

/// Checks that what `orca logs` shows of `run`, printing `records` records
/// (progress in `progress`), is the last 64 KiB of the stream so far each
/// time it is looked at, and catches up with what was printed within the
/// write interval (generously: 20 s on a loaded machine), twice while it
/// runs; then that its final output is the last 64 KiB of the whole stream.
fn stored_as_printed(db: &TestDb, run: i64, records: u64, progress: &std::path::Path) {
    wait_until("the run prints", 60.0, || printed(progress) > 0);
    for _ in 0..2 {
        let by_now = printed(progress) * 16;
        wait_until(
            "the stored output catches up with what was printed",
            20.0,
            || {
                let out = logs(db, run);
                let end = end_in_stream(&out).unwrap_or_else(|| {
                    panic!(
                        "run {run}: stored output is not a piece of what it printed ({} bytes)",
                        out.len()
                    )
                });
                assert_eq!(
                    out.len() as u64,
                    end.min(64 * 1024),
                    "run {run}: not the last 64 KiB of what it printed by then"
                );
                end >= by_now
            },
        );
    }
    wait_until("the run succeeds", 120.0, || db.state(run) == "succeeded");
    let total = records * 16;
    let want = stream(
        total - (64 * 1024).min(total),
        (64 * 1024).min(total as usize),
    );
    assert!(logs(db, run) == want, "run {run}: final output");
    assert!(db.output(run) == want, "run {run}: final output as stored");
}

/// `orca logs -f RUN`, its stdout in `out`.
fn follow(db: &TestDb, dir: &TempDir, run: i64) -> (std::process::Child, std::path::PathBuf) {
    let out = dir.path(&format!("follow-{run}.out"));
    let child = db
        .orca(&["logs", "-f", &run.to_string()])
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (child, out)
}

/// A fast run (about 160 KB/s, 1 MB) and a slow one (about 8 KB/s,
/// 100 kB), both past 64 KiB: what `orca logs` shows while they run and
/// once they end, and all that `orca logs -f` shows of the slow one.
fn chatty_runs_are_stored_as_printed(db: &TestDb, dir: &TempDir, fast: i64, slow: i64) {
    let (mut follower, followed) = follow(db, dir, slow);
    stored_as_printed(db, fast, 62_500, &dir.path("fast"));
    stored_as_printed(db, slow, 6_250, &dir.path("slow"));
    let mut status = None;
    wait_until("logs -f ends with the run", 30.0, || {
        status = follower.try_wait().unwrap();
        status.is_some()
    });
    assert!(status.unwrap().success());
    let shown = std::fs::read(&followed).unwrap();
    let shown = crate::harness::logs_body(&shown);
    assert!(
        shown == stream(0, 100_000),
        "logs -f showed {} bytes, not the 100000 printed",
        shown.len()
    );
}

/// The fast and slow pipelines, placed at `placement`.
fn chatty_pipelines(dir: &TempDir, placement: &str) -> String {
    format!(
        "[pipelines.fast]\ncommand = {}\nplacement = \"{placement}\"\n\n\
         [pipelines.slow]\ncommand = {}\nplacement = \"{placement}\"\n",
        stream_command(62_500, 1_000, &dir.path("fast")),
        stream_command(6_250, 50, &dir.path("slow")),
    )
}

#[test]
fn a_local_run_s_stored_output_is_the_last_64_kib_of_what_it_printed() {
    let (db, dir) = (TestDb::new(), TempDir::new());
    db.register(&dir, &chatty_pipelines(&dir, "local"));
    let (fast, slow) = (db.queue("fast"), db.queue("slow"));
    let mut s = db.scheduler(&dir, &[]);
    chatty_runs_are_stored_as_printed(&db, &dir, fast, slow);
    s.stop();
}

#[test]
fn a_worker_s_run_s_stored_output_is_the_last_64_kib_of_what_it_printed() {
    let (db, dir) = (TestDb::new(), TempDir::new());
    db.register(&dir, &with_pool("p", &chatty_pipelines(&dir, "worker:p")));
    let role = hand_machine(&db, "p", "chatty", "pw");
    let (fast, slow) = (db.queue("fast"), db.queue("slow"));
    let mut w = hand_worker_with(&db, &dir, "p", &role, "pw", &[]);
    chatty_runs_are_stored_as_printed(&db, &dir, fast, slow);
    w.stop();
}

/// `orca.worker_round` as machine login `c`, beating attempt `(id, start)`
/// and appending `bytes` at `at` of attempt `(id, out_start)`'s output.
fn append(c: &mut postgres::Client, id: i64, start: i32, out_start: i32, at: i64, bytes: &[u8]) {
    c.query(
        "SELECT * FROM orca.worker_round($1, $2, $3, $4, $5, $6, $7, 0)",
        &[
            &vec![id],
            &vec![start],
            &vec![0i32],
            &vec![id],
            &vec![out_start],
            &vec![at],
            &vec![bytes],
        ],
    )
    .unwrap();
}

#[test]
fn appended_output_is_kept_once_within_64_kib_and_kept_when_its_attempt_ends() {
    let (db, _dir) = setup(&with_pool(
        "p",
        "[pipelines.job]\ncommand = \"true\"\nplacement = \"worker:p\"\n",
    ));
    let role = hand_machine(&db, "p", "append", "pw");
    let run = db.queue("job");
    let mut c = db.client_as(&role, "pw");
    c.execute("SELECT * FROM orca.worker_hello()", &[]).unwrap();
    let start: i32 = c
        .query_one("SELECT start FROM orca.worker_claim(1)", &[])
        .unwrap()
        .get(0);
    append(&mut c, run, start, start, 0, b"one\0two\n");
    // Sent again (its answer lost), and again with more: kept once.
    append(&mut c, run, start, start, 0, b"one\0two\n");
    append(&mut c, run, start, start, 0, b"one\0two\nthree\n");
    assert_eq!(db.output(run), b"one\0two\nthree\n");
    // Another attempt's (a start not running) is not kept.
    append(&mut c, run, start, start + 7, 0, b"forged");
    assert_eq!(
        db.one::<i64>(
            "SELECT count(*) FROM orca.output_chunks WHERE start <> (SELECT start FROM orca.runs)"
        ),
        0
    );
    // Past 64 KiB: the last 64 KiB, and only the chunks that hold them.
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    append(&mut c, run, start, start, 14, &big);
    let mut all = b"one\0two\nthree\n".to_vec();
    all.extend_from_slice(&big);
    let last = all[all.len() - 64 * 1024..].to_vec();
    assert!(db.output(run) == last);
    append(&mut c, run, start, start, all.len() as i64, b"tail\n");
    all.extend_from_slice(b"tail\n");
    assert!(db.output(run) == all[all.len() - 64 * 1024..]);
    assert_eq!(db.one::<i64>("SELECT count(*) FROM orca.output_chunks"), 2);
    // Its machine lost (its runs queued again): its output stays in the
    // run's row, the chunks go.
    let machine: i64 = db.one("SELECT id FROM orca.pool_machines");
    db.client()
        .query(
            include_str!("../../../sql/machine_end.sql"),
            &[&machine, &"lost"],
        )
        .unwrap();
    assert_eq!(db.state(run), "queued");
    assert!(db.output(run) == all[all.len() - 64 * 1024..]);
    assert!(
        db.client()
            .query_one("SELECT output FROM orca.runs", &[])
            .unwrap()
            .get::<_, Vec<u8>>(0)
            == all[all.len() - 64 * 1024..]
    );
    assert_eq!(db.one::<i64>("SELECT count(*) FROM orca.output_chunks"), 0);
}

/// How often `orca.output_fold` (the trigger that folds an attempt's
/// chunks into its run's row as it stops running) was called in the open
/// transaction of `c`, a session with `track_functions = 'pl'`.
fn folds(c: &mut postgres::Transaction) -> i64 {
    c.query_one(
        "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_xact_user_functions
         WHERE schemaname = 'orca' AND funcname = 'output_fold'",
        &[],
    )
    .unwrap()
    .get(0)
}

/// A worker's round ending attempt `(id, start)` as succeeded with output
/// `output`, claiming nothing; the state it ended in.
fn end(c: &mut postgres::Transaction, id: i64, start: i32, output: &[u8]) -> String {
    c.query_one(
        "SELECT state FROM orca.worker_round('{}', '{}', '{}', '{}', '{}', '{}', '{}', 0,
             ARRAY[$1::bigint], ARRAY[$2::integer], '{succeeded}', '{0}', ARRAY[NULL::integer],
             ARRAY['exited 0'], ARRAY[$3::bytea], ARRAY['{}'::jsonb], ARRAY[0.01::float8])",
        &[&id, &start, &output],
    )
    .unwrap()
    .get(0)
}

/// Most attempts end before their first append: their end calls no fold
/// (migration 0015: the trigger fires only for an attempt with chunks; a
/// claim has called none since migration 0010), and one that streamed is
/// marked with its first chunk and has its chunks folded away at its end,
/// once.
#[test]
fn only_an_attempt_that_streamed_output_costs_a_fold() {
    let (db, _dir) = setup(&with_pool(
        "p",
        "[pipelines.job]\ncommand = \"true\"\nplacement = \"worker:p\"\nmax_runs = 2\n",
    ));
    let role = hand_machine(&db, "p", "folds", "pw");
    db.admin(&format!("ALTER ROLE {role} SET track_functions = 'pl'"));
    db.client()
        .execute("UPDATE orca.pool_machines SET slots = 2", &[])
        .unwrap();
    let (quiet, chatty) = (db.queue("job"), db.queue("job"));
    let mut m = db.client_as(&role, "pw");
    m.execute("SELECT * FROM orca.worker_hello()", &[]).unwrap();
    let mut tx = m.transaction().unwrap();
    let claimed = tx
        .query("SELECT id, start FROM orca.worker_claim(2)", &[])
        .unwrap();
    assert_eq!(claimed.len(), 2);
    assert_eq!(folds(&mut tx), 0, "claims");
    tx.commit().unwrap();
    let start: i32 = claimed[0].get(1);
    let chunked =
        |run: i64| db.one::<bool>(&format!("SELECT chunked FROM orca.runs WHERE id = {run}"));
    append(&mut m, chatty, start, start, 0, b"streamed\0so far\n");
    append(&mut m, chatty, start, start, 16, b"and more\n");
    assert_eq!(
        db.one::<i64>(&format!(
            "SELECT count(*) FROM orca.output_chunks WHERE run = {chatty}"
        )),
        2
    );
    assert!(chunked(chatty), "marked with its first chunk");
    assert!(!chunked(quiet));
    let mut tx = m.transaction().unwrap();
    assert_eq!(end(&mut tx, quiet, start, b"quiet\n"), "succeeded");
    assert_eq!(
        folds(&mut tx),
        0,
        "the end of an attempt that streamed nothing"
    );
    assert_eq!(
        end(&mut tx, chatty, start, b"the whole tail\n"),
        "succeeded"
    );
    assert_eq!(folds(&mut tx), 1, "the end of one that streamed");
    tx.commit().unwrap();
    assert_eq!(db.output(quiet), b"quiet\n");
    assert_eq!(db.output(chatty), b"the whole tail\n");
    assert_eq!(db.one::<i64>("SELECT count(*) FROM orca.output_chunks"), 0);
    assert!(!chunked(chatty), "cleared by the fold");
}

/// A database at migration `upto`: its migrations applied one by one, as
/// `orca migrate` of a binary that knew no more would have, but for the
/// functions (their bodies are `sql/functions/`'s, as they are now).
fn migrated_to(db: &TestDb, upto: i32) {
    let mut c = db.client();
    c.batch_execute(include_str!("../../../sql/migrations_table.sql"))
        .unwrap();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/sql/migrations");
    let mut files: Vec<(i32, std::path::PathBuf)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            Some((name.get(..4)?.parse().ok()?, p))
        })
        .filter(|(v, _)| *v <= upto)
        .collect();
    files.sort();
    assert_eq!(files.len(), upto as usize);
    for (version, path) in files {
        let mut tx = c.transaction().unwrap();
        tx.batch_execute(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        tx.execute(
            include_str!("../../../sql/migration_record.sql"),
            &[&version, &"as it was"],
        )
        .unwrap();
        tx.commit().unwrap();
    }
}

/// An attempt whose beat stores its first chunk while migration 0015
/// applies (the beat under way as `orca migrate` begins, committed while
/// the migration waits for its lock) still has its output folded into its
/// run's row when it stops running; on a database whose transactions are
/// REPEATABLE READ by default too (`orca migrate` runs at READ COMMITTED,
/// else the migration's marking would not see what the beat committed).
#[test]
fn an_attempt_streaming_as_migration_15_applies_keeps_its_output() {
    let db = TestDb::empty_on(&admin_url());
    migrated_to(&db, 14);
    let mut c = db.client();
    c.batch_execute(&format!(
        "ALTER DATABASE {} SET default_transaction_isolation = 'repeatable read'",
        db.name()
    ))
    .unwrap();
    c.batch_execute("INSERT INTO orca.pipelines (name, spec) VALUES ('job', '{}')")
        .unwrap();
    let run: i64 = c
        .query_one(
            "INSERT INTO orca.runs (pipeline, state, start, started_at, heartbeat)
             VALUES ('job', 'running', 1, now(), now()) RETURNING id",
            &[],
        )
        .unwrap()
        .get(0);
    // A beat: its run's row updated (as every beat does first), then its
    // first chunk; left open.
    let mut beat = db.client();
    let mut tx = beat.transaction().unwrap();
    tx.execute(
        "UPDATE orca.runs SET heartbeat = now() WHERE id = $1",
        &[&run],
    )
    .unwrap();
    // (The chunk orca.output_put of migration 14 stored: the functions of
    // that time are no longer in the tree, whose sql/functions/ files are
    // the current ones.)
    let bytes = b"streamed\0before\n".as_slice();
    tx.execute(
        "INSERT INTO orca.output_chunks (run, start, at, upto, bytes) VALUES ($1, 1, 0, $2, $3)",
        &[&run, &(bytes.len() as i64), &bytes],
    )
    .unwrap();
    let logs = TempDir::new();
    let mut migrate = Proc::spawn(db.orca(&["migrate"]), &logs.path("migrate.log"));
    let mut watch = db.client();
    wait_until("orca migrate waits for the beat's lock", 30.0, || {
        watch
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE application_name = 'orca migrate' AND wait_event_type = 'Lock'",
                &[],
            )
            .unwrap()
            .get::<_, i64>(0)
            == 1
    });
    tx.commit().unwrap();
    let status = migrate.wait(60.0);
    assert!(status.success(), "migrate: {}", migrate.output());
    assert!(db.one::<i32>("SELECT max(version) FROM orca.migrations") >= 15);
    // Whoever ends it (here a lost machine's requeue, written as orca's
    // role): its output is what it streamed, in its row, and no chunk is
    // left.
    c.execute(
        "UPDATE orca.runs SET state = 'queued', heartbeat = NULL WHERE id = $1",
        &[&run],
    )
    .unwrap();
    let row: Vec<u8> = db.one(&format!("SELECT output FROM orca.runs WHERE id = {run}"));
    assert_eq!(row, b"streamed\0before\n", "folded into the run's row");
    assert_eq!(db.one::<i64>("SELECT count(*) FROM orca.output_chunks"), 0);
}
