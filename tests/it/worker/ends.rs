//! A worker's ends: written in the round of its next claim, on their own
//! when a round could not write them, its machine's own and bounded, read
//! from its attempt alone, and the same written alone or in a batch.

use super::*;

/// A round's end reads its attempt by its id, not among all its machine's
/// running attempts: a machine running 400 reads them once (its room's
/// count), not again for each end (the condition on the machine alone
/// would let the planner take the machine's index for the end too).
#[test]
fn a_round_s_end_reads_its_attempt_not_its_machine_s_others() {
    let (db, _dir) = setup(&with_pool(
        "p",
        "[pipelines.job]\ncommand = \"true\"\nplacement = \"worker:p\"\nmax_runs = 1000\n",
    ));
    let role = hand_machine(&db, "p", "end_reads", "pw");
    let mut c = db.client();
    c.batch_execute(
        "UPDATE orca.pool_machines SET slots = 1000;
         INSERT INTO orca.runs (pipeline, state, start, started_at, heartbeat, machine)
         SELECT 'job', 'running', 1, now(), now(), m.id
         FROM orca.pool_machines m, generate_series(1, 400);
         INSERT INTO orca.runs (pipeline, state, start, ended_at)
         SELECT 'job', 'succeeded', 1, now() FROM generate_series(1, 20000);
         ANALYZE orca.runs",
    )
    .unwrap();
    let ends: Vec<i64> = c
        .query("SELECT id FROM orca.runs ORDER BY id LIMIT 3", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut m = db.client_as(&role, "pw");
    let mut tx = m.transaction().unwrap();
    let ended = tx
        .query(
            "SELECT state FROM orca.worker_round('{}', '{}', '{}', '{}', '{}', '{}', '{}', 0,
             $1, '{1,1,1}', '{succeeded,succeeded,failed}', '{0,0,1}', '{NULL,NULL,NULL}', '{a,b,c}',
             ARRAY[''::bytea, ''::bytea, ''::bytea], ARRAY['{}'::jsonb, '{}'::jsonb, '{}'::jsonb])",
            &[&ends],
        )
        .unwrap();
    assert_eq!(ended.len(), 3);
    // (Counted by this session's own statistics, not yet reported: a
    // machine role may read them.)
    let entries: i64 = tx
        .query_one(
            "SELECT pg_stat_get_xact_tuples_returned('orca.runs_machine_running'::regclass)",
            &[],
        )
        .unwrap()
        .get(0);
    tx.commit().unwrap();
    assert!(
        entries <= 450,
        "a round ending three of its machine's 400 running attempts read {entries} of its index's entries"
    );
}

/// A worker with one slot writes a run's end and claims the next in one
/// round trip, one transaction: the end's event and the next run's start
/// carry one transaction's time (two statements, two transactions, before).
#[test]
fn a_workers_end_and_its_next_claim_are_one_round() {
    let (db, dir) = setup(&with_pool(
        "p",
        "[pipelines.quick]\ncommand = \"true\"\nplacement = \"worker:p\"\n",
    ));
    let role = hand_machine(&db, "p", "round", "pw");
    db.client()
        .execute("UPDATE orca.pool_machines SET slots = 1", &[])
        .unwrap();
    let first = db.queue("quick");
    let second = db.queue("quick");
    let mut w = hand_worker(&db, &dir, "p", &role, "pw");
    wait_until("both runs succeed", 60.0, || {
        db.state(first) == "succeeded" && db.state(second) == "succeeded"
    });
    w.stop();
    let (ended, started): (i64, i64) = {
        let r = db
            .client()
            .query_one(
                "SELECT (SELECT run FROM orca.events WHERE kind = 'succeeded' ORDER BY id LIMIT 1),
                        (SELECT run FROM orca.events WHERE kind = 'started' ORDER BY id OFFSET 1 LIMIT 1)",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    let same: bool = db
        .client()
        .query_one(
            "SELECT (SELECT at FROM orca.events WHERE run = $1 AND kind = 'succeeded')
                  = (SELECT at FROM orca.events WHERE run = $2 AND kind = 'started')",
            &[&ended, &started],
        )
        .unwrap()
        .get(0);
    assert!(
        same,
        "run {ended}'s end and run {started}'s start were written in two transactions"
    );
}

/// A round carrying an end it can't write now (the run's row locked, past
/// the login's 2 s lock wait) fails as a whole: the end stays, is written
/// on its own once it can be (the worker says so), and the next run is
/// claimed after it.
#[test]
fn an_end_a_round_could_not_write_is_written_on_its_own() {
    let (db, dir) = setup(&with_pool(
        "p",
        "[pipelines.quick]\ncommand = [\"sleep\", \"4\"]\nplacement = \"worker:p\"\n",
    ));
    let role = hand_machine(&db, "p", "fallback", "pw");
    db.client()
        .execute("UPDATE orca.pool_machines SET slots = 1", &[])
        .unwrap();
    let first = db.queue("quick");
    let second = db.queue("quick");
    let mut w = hand_worker(&db, &dir, "p", &role, "pw");
    wait_until("the first run runs", 30.0, || db.state(first) == "running");
    let mut holder = db.client();
    let mut tx = holder.transaction().unwrap();
    // Locked while it still runs (a loaded box may see "running" late: the
    // lock must hold the row before the worker writes its end, or the
    // round has nothing to fail on).
    let locked = tx
        .execute(
            "SELECT 1 FROM orca.runs WHERE id = $1 AND state = 'running' FOR UPDATE",
            &[&first],
        )
        .unwrap();
    assert_eq!(locked, 1, "the first run still runs when its row is locked");
    wait_until("the round carrying its end fails", 30.0, || {
        w.output().contains("ends failed")
    });
    assert_eq!(db.state(first), "running");
    tx.commit().unwrap();
    wait_until("both runs succeed", 60.0, || {
        db.state(first) == "succeeded" && db.state(second) == "succeeded"
    });
    w.stop();
}

/// A round's ends are its machine's own attempts and are bounded: an end of
/// another machine's attempt writes nothing, ends' arrays of unequal
/// lengths or more than 1,024 ends are refused, and nothing is written then.
#[test]
fn a_rounds_ends_are_its_machines_own_and_bounded() {
    let (db, _dir) = setup(&with_pool(
        "p",
        "[pipelines.job]\ncommand = \"true\"\nplacement = \"worker:p\"\nmax_runs = 10\n",
    ));
    let mine = hand_machine(&db, "p", "ends_a", "pw");
    let theirs = machine_role("ends_b");
    db.login_role(&theirs, "pw", "orca_worker");
    db.client()
        .execute(
            "INSERT INTO orca.pool_machines (pool, name, type, location, role, slots)
             VALUES ('p', 'orca-p-other', 'small', 'here', $1, 2)",
            &[&theirs],
        )
        .unwrap();
    db.queue("job");
    let mut b = db.client_as(&theirs, "pw");
    let claimed = b
        .query_one("SELECT id, start FROM orca.worker_claim(1)", &[])
        .unwrap();
    let (id, start): (i64, i32) = (claimed.get(0), claimed.get(1));
    let mut a = db.client_as(&mine, "pw");
    let round =
        "SELECT kind, id, state FROM orca.worker_round('{}', '{}', '{}', '{}', '{}', '{}', '{}', 0,
                 $1, $2, $3, '{1}', '{NULL}', '{stolen}', ARRAY[''::bytea], ARRAY['{}'::jsonb])";
    let rows = a
        .query(round, &[&vec![id], &vec![start], &vec!["failed"]])
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, &str>("kind"), "ended");
    assert_eq!(rows[0].get::<_, Option<&str>>("state"), None);
    assert_eq!(db.state(id), "running", "another machine's end landed");
    let unequal = a
        .query(round, &[&vec![id, id], &vec![start], &vec!["failed"]])
        .unwrap_err();
    assert_eq!(unequal.code().map(|c| c.code()), Some("22023"), "{unequal}");
    let many: Vec<i64> = vec![id; 1025];
    let too_many = a
        .query(
            "SELECT kind FROM orca.worker_round('{}', '{}', '{}', '{}', '{}', '{}', '{}', 0,
             $1, '{}', '{}', '{}', '{}', '{}', '{}', '{}')",
            &[&many],
        )
        .unwrap_err();
    assert_eq!(
        too_many.code().map(|c| c.code()),
        Some("54000"),
        "{too_many}"
    );
    assert_eq!(db.state(id), "running");
    // A round that names its states from subscript 0 is refused whole, as
    // each end's state is read from 1 (the first attempt is not ended).
    let mine_too: i64 = {
        let q = db.queue("job");
        let r = a.query_one(CLAIM_ROUND, &[&1i32]).unwrap();
        assert_eq!(r.get::<_, i64>(0), q);
        q
    };
    let shifted = a
        .query(
            "SELECT kind FROM orca.worker_round('{}', '{}', '{}', '{}', '{}', '{}', '{}', 0,
             ARRAY[$1::bigint, 0], '{1,1}', '[0:1]={failed,cancelled}'::text[], '{0,0}', '{NULL,NULL}',
             '{a,b}', ARRAY[''::bytea, ''::bytea], ARRAY['{}'::jsonb, '{}'::jsonb])",
            &[&mine_too],
        )
        .unwrap_err();
    assert_eq!(shifted.code().map(|c| c.code()), Some("22023"), "{shifted}");
    assert_eq!(db.state(mine_too), "running");
    // A round whose room is NULL claims nothing.
    let waiting = db.queue("job");
    let none = a.query(CLAIM_ROUND, &[&None::<i32>]).unwrap();
    assert!(none.is_empty(), "a NULL room claimed {}", none.len());
    db.client()
        .execute(
            "UPDATE orca.runs SET state = 'cancelled' WHERE id = ANY($1)",
            &[&vec![waiting, mine_too]],
        )
        .unwrap();
    // A round that names no beats at all (NULL) and claims a run marks its
    // machine busy, as every claim does: a removal judges idleness by it.
    let queued = db.queue("job");
    let busy = "SELECT busy_at FROM orca.pool_machines WHERE role = $1";
    let before: chrono::DateTime<chrono::Utc> =
        db.client().query_one(busy, &[&mine]).unwrap().get(0);
    let claimed: Vec<i64> = a
        .query(
            "SELECT id FROM orca.worker_round(NULL, NULL, NULL, '{}', '{}', '{}', '{}', 1,
             '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}') WHERE kind = 'claimed'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(claimed, vec![queued]);
    let after: chrono::DateTime<chrono::Utc> =
        db.client().query_one(busy, &[&mine]).unwrap().get(0);
    assert!(after > before, "a claim left busy_at at {before}");
}

/// An attempt's end written alone (`orca.finish_attempt`, a scheduler's
/// one by one, an older worker's), in a batch (`orca.finish_attempts`, a scheduler's tick) and
/// by a worker's round (`orca.worker_round`, which writes its ends itself
/// since migration 16: one a round and several in one) come to the same
/// thing, case by case: the run's state, failures, retry time, exit, why
/// and output (both bounded), its events in order, the alert of a final
/// failure; an attempt no longer running is left alone, and one named
/// twice in a batch or a round ends once. (Their forms of migration 0020,
/// with no ago: what this binary calls.)
#[test]
fn ends_written_alone_and_in_a_batch_agree() {
    let (db, _dir) = setup(&with_pool(
        "p",
        r#"
[pipelines.ok]
command = "true"

[pipelines.retry]
command = "true"
retries = 2
retry_delay = 30

[pipelines.alerting]
command = "true"
alert = "http://127.0.0.1:9/hook"
"#,
    ));
    let role = hand_machine(&db, "p", "agree", "pw");
    let machine: i64 = db.one("SELECT id FROM orca.pool_machines");
    let long_why = "w".repeat(5000);
    let big_output = vec![b'o'; 70 * 1024];
    let body = serde_json::json!({ "output": "x".repeat(5000) });
    // (pipeline, state asked, exit code, cancel asked, queued rather than running)
    let cases: &[(&str, &str, i32, bool, bool)] = &[
        ("ok", "succeeded", 0, false, false),
        ("retry", "failed", 1, false, false),
        ("retry", "failed", 1, true, false),
        ("alerting", "failed", 3, false, false),
        ("ok", "cancelled", 143, false, false),
        ("ok", "succeeded", 0, false, true),
    ];
    let mut c = db.client();
    let mut make = |on: Option<i64>| -> Vec<i64> {
        cases
            .iter()
            .map(|(p, _, _, cancel, queued)| {
                c.query_one(
                    "INSERT INTO orca.runs (pipeline, state, start, cancel, started_at, heartbeat, machine)
                     VALUES ($1, CASE WHEN $3 THEN 'queued' ELSE 'running' END, 1, $2, now(), now(), $4)
                     RETURNING id",
                    &[p, cancel, queued, &on],
                )
                .unwrap()
                .get(0)
            })
            .collect()
    };
    let alone = make(None);
    let batch = make(None);
    let round = make(Some(machine));
    let mut c = db.client();
    let mut alone_states: Vec<Option<String>> = Vec::new();
    for (id, (_, state, code, _, _)) in alone.iter().zip(cases) {
        alone_states.push(
            c.query_one(
                "SELECT orca.finish_attempt($1, 1, $2, $3, NULL, $4, $5, $6, NULL, $7)",
                &[id, state, code, &long_why, &big_output, &body, &None::<f64>],
            )
            .unwrap()
            .get(0),
        );
    }
    // The batch names its first attempt again at the end.
    let mut ids = batch.clone();
    ids.push(batch[0]);
    let n = ids.len();
    let states: Vec<&str> = cases.iter().map(|c| c.1).chain(["succeeded"]).collect();
    let codes: Vec<i32> = cases.iter().map(|c| c.2).chain([0]).collect();
    let batch_states: Vec<Option<String>> = c
        .query(
            "SELECT state FROM orca.finish_attempts($1, $2, $3, $4, $5, $6, $7, $8, NULL, $9)",
            &[
                &ids,
                &vec![1i32; n],
                &states,
                &codes,
                &vec![None::<i32>; n],
                &vec![long_why.as_str(); n],
                &vec![big_output.as_slice(); n],
                &vec![body.clone(); n],
                &vec![None::<f64>; n],
            ],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(&batch_states[..cases.len()], &alone_states[..]);
    assert_eq!(batch_states[cases.len()], None, "ended twice");
    // The round: its first three ends a round each, the other three in one
    // round that names its first again at the end.
    let mut m = db.client_as(&role, "pw");
    let mut round_states: Vec<Option<String>> = Vec::new();
    for ends in [vec![0], vec![1], vec![2], vec![3, 4, 5, 3]] {
        let n = ends.len();
        let rows = m
            .query(
                "SELECT kind, id, start, state FROM orca.worker_round('{}', '{}', '{}', '{}', '{}', '{}', '{}', 0,
                 $1, $2, $3, $4, $5, $6, $7, $8, $9)",
                &[
                    &ends.iter().map(|&i| round[i]).collect::<Vec<i64>>(),
                    &vec![1i32; n],
                    &ends.iter().map(|&i| cases[i].1).collect::<Vec<&str>>(),
                    &ends.iter().map(|&i| cases[i].2).collect::<Vec<i32>>(),
                    &vec![None::<i32>; n],
                    &vec![long_why.as_str(); n],
                    &vec![big_output.as_slice(); n],
                    &vec![body.clone(); n],
                    &vec![None::<f64>; n],
                ],
            )
            .unwrap();
        assert_eq!(rows.len(), n, "a row per end");
        for (row, &i) in rows.iter().zip(&ends) {
            assert_eq!(row.get::<_, &str>("kind"), "ended");
            assert_eq!(row.get::<_, i64>("id"), round[i]);
            assert_eq!(row.get::<_, i32>("start"), 1);
            round_states.push(row.get("state"));
        }
    }
    assert_eq!(&round_states[..cases.len()], &alone_states[..]);
    assert_eq!(round_states[cases.len()], None, "ended twice in a round");
    assert_eq!(
        alone_states,
        [
            Some("succeeded"),
            Some("queued"),
            Some("failed"),
            Some("failed"),
            Some("cancelled"),
            None
        ]
        .map(|s| s.map(String::from))
    );
    let row = |c: &mut postgres::Client, id: i64| -> String {
        c.query_one(
            "SELECT format('%s %s %s %s %s %s %s', r.state, r.failures, r.exit_code,
                           r.not_before > now() + interval '20 seconds', length(r.why),
                           octet_length(r.output), r.ended_at IS NOT NULL)
                    || ' events: ' || coalesce((SELECT string_agg(e.kind || '/' || left(e.why, 30), ', ' ORDER BY e.id)
                                                FROM orca.events e WHERE e.run = r.id), '')
                    || ' alerts: ' || coalesce((SELECT string_agg((a.body - 'run')::text, ', ' ORDER BY a.id)
                                                FROM orca.alerts a WHERE a.run = r.id), '')
             FROM orca.runs r WHERE r.id = $1",
            &[&id],
        )
        .unwrap()
        .get(0)
    };
    for (i, ((a, b), r)) in alone.iter().zip(&batch).zip(&round).enumerate() {
        let (ra, rb, rr) = (row(&mut c, *a), row(&mut c, *b), row(&mut c, *r));
        assert_eq!(ra, rb, "case {i}: {:?}", cases[i]);
        assert_eq!(ra, rr, "case {i} (a round's): {:?}", cases[i]);
    }
    // What each case came to, once (the rest is the two agreeing).
    let retried = row(&mut c, alone[1]);
    assert!(
        retried.starts_with("queued 1 1 t 4088 65536 t events: failed/"),
        "{retried}"
    );
    assert!(
        retried.contains(", retried/retry 1 of 2 in 30s"),
        "{retried}"
    );
    assert!(row(&mut c, alone[3]).contains("\"exit_code\": 3"));
    assert!(row(&mut c, alone[5]).starts_with("queued 0"));
    // A state that is none of an end's: refused both ways.
    for sql in [
        "SELECT orca.finish_attempt($1, 1, 'running', 0, NULL, '', ''::bytea, '{}')",
        "SELECT * FROM orca.finish_attempts(ARRAY[$1::bigint], '{1}'::int[], '{running}'::text[], '{0}'::int[],
             '{NULL}'::int[], '{\"\"}'::text[], ARRAY[''::bytea], '{\"{}\"}'::jsonb[], NULL::bigint)",
    ] {
        let e = c.query(sql, &[&alone[5]]).unwrap_err();
        assert_eq!(e.code(), Some(&postgres::error::SqlState::INVALID_PARAMETER_VALUE), "{sql}");
    }
    for states in ["{running}", "{NULL}"] {
        let e = m
            .query(
                "SELECT * FROM orca.worker_round('{}', '{}', '{}', '{}', '{}', '{}', '{}', 0,
                 ARRAY[$1::bigint], '{1}', $2::text::text[], '{0}', '{NULL}', '{\"\"}', ARRAY[''::bytea], '{\"{}\"}')",
                &[&round[5], &states],
            )
            .unwrap_err();
        assert_eq!(
            e.code(),
            Some(&postgres::error::SqlState::INVALID_PARAMETER_VALUE),
            "a round's end {states}"
        );
    }
    // And by the table, whoever writes it (migration 16's CHECK, a cast to
    // the enum orca.run_state).
    let e = c
        .execute(
            "UPDATE orca.runs SET state = 'runing' WHERE id = $1",
            &[&alone[0]],
        )
        .unwrap_err();
    assert_eq!(e.code().map(|c| c.code()), Some("22P02"), "{e}");
}
