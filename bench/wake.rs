//! Waking on NOTIFY (issue 30, `src/db/wake.rs`), each figure with
//! `ORCA_LISTEN` on (the default) and off (the poll alone):
//! 1. queue to claim: [`MACHINES`] idle local `orca worker`s of one pool
//!    (real processes, each with a machine login of its own, the default
//!    tick); [`CLAIMS`] runs queued one at a time by SQL, each after a
//!    rest of 1.5 to 4 s so that it falls anywhere in the poll's period;
//!    `started_at - queued_at` by the database's clock;
//! 2. idle cost: the same workers idle for `ORCA_BENCH_WAKE_SECONDS`:
//!    `pg_stat_database` transactions per machine per second, beside their
//!    rounds (each round writes the machine's `seen_at`: counted exactly by
//!    a trigger the bench adds), the rest being what else the processes
//!    did; and whether notifications delivered to a listening session
//!    count as transactions (a session notifies, with and without a
//!    session listening);
//! 3. hand-over to `pool-next`'s exit: [`INSTANCES`] idle `pool-next`s,
//!    each handed a run (the scheduler's SQL played by the bench) after a
//!    rest of up to 1 s, from the hand-over's commit to the new row's
//!    `joined_at` (written as pool-next takes it), by the database's clock.
//!
//! Found with it (December 2026): a statement sent as text costs two
//! transactions (its parse is one of its own: 200 `pg_notify` calls, 400),
//! and notifications delivered to a listening session count too (about one
//! transaction per interrupt that reads them: 103 more for 200), so a flood
//! costs the listener until its gate stops it listening. Idle workers'
//! transactions are more than their rounds (listening 0.41 a machine a
//! second, of which rounds 0.25; polling 0.81, rounds 0.55): what the rest
//! is was not found (not the rounds table's autovacuum, now off).

use crate::ctx::{Bench, pause, wait_for};
use crate::harness::{Cost, Proc, bin, connect, with_db};
use crate::out::{fig, heading, quantile};
use postgres::fallible_iterator::FallibleIterator;
use std::process::Command;

/// Idle local workers of the pool.
const MACHINES: i64 = 4;
/// Runs queued one at a time, per mode.
const CLAIMS: usize = 20;
/// Idle `pool-next`s handed a run, per mode.
const INSTANCES: i64 = 10;

const CONFIG: &str = "[pools.p]\ntypes = [{ type = \"small\", wait = 0 }]\nlocations = [\"here\"]\n\n\
[pipelines.job]\ncommand = [\"true\"]\nplacement = \"worker:p\"\nmax_runs = 100\n\n\
[pipelines.inst]\ncommand = \"true\"\nplacement = \"ec2\"\n[pipelines.inst.ec2]\ntype = \"small\"\nlocations = [\"here\"]\n";

/// `ORCA_LISTEN`'s value for a mode.
fn listen(on: bool) -> &'static str {
    if on { "on" } else { "off" }
}

/// A rest of `lo..hi` s, spread by `i` (no randomness needed: the poll's
/// phase is what it falls against).
fn rest(i: usize, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * ((i * 7919) % 101) as f64 / 100.0
}

/// p50 / p99 / max of `v`, in ms.
fn ms3(mut v: Vec<f64>) -> String {
    v.sort_by(f64::total_cmp);
    let f = |x: Option<f64>| x.map_or("n/a".to_string(), |x| format!("{:.0}", x * 1000.0));
    format!(
        "{} / {} / {} ({} measured)",
        f(quantile(&v, 0.5)),
        f(quantile(&v, 0.99)),
        f(v.last().copied()),
        v.len()
    )
}

/// A mode's worker figures.
struct Workers {
    claims: Vec<f64>,
    tx: f64,
    rounds: f64,
    seconds: f64,
}

/// Sections 1 and 2 for one mode.
fn workers(b: &Bench, on: bool) -> Workers {
    let mode = listen(on);
    let db = b.db(&format!("orca_bench_wake_{mode}"), CONFIG);
    let mut c = b.client(&db);
    // Every round a machine makes, counted by the server.
    let mut own = connect(&with_db(&db.admin_url(), db.name()));
    own.batch_execute(
        "CREATE TABLE public.rounds (role text, at timestamptz);
         CREATE FUNCTION public.count_round() RETURNS trigger LANGUAGE plpgsql
         SECURITY DEFINER SET search_path = pg_catalog AS $$
         BEGIN INSERT INTO public.rounds VALUES (NEW.role, clock_timestamp()); RETURN NULL; END $$;
         CREATE TRIGGER count_round AFTER UPDATE OF seen_at ON orca.pool_machines
         FOR EACH ROW EXECUTE FUNCTION public.count_round();
         GRANT SELECT ON public.rounds TO PUBLIC;
         ALTER TABLE public.rounds SET (autovacuum_enabled = false);",
    )
    .unwrap();
    let mut procs = Vec::new();
    for m in 0..MACHINES {
        let role = db.role_name(&format!("m{m}"));
        db.login_role(&role, "bench", "orca_worker");
        c.execute(
            "INSERT INTO orca.pool_machines (pool, name, type, location, role, slots)
             VALUES ('p', 'orca-p-' || $1::bigint, 'small', 'here', $2, 2)",
            &[&m, &role],
        )
        .unwrap();
        let mut cmd = Command::new(bin());
        cmd.args(["worker", "--pool", "p"])
            .env("ORCA_DATABASE_URL", db.url_without_user())
            .env("ORCA_TOKEN", format!("{role}:bench"))
            .env("ORCA_LISTEN", mode)
            .env("RUST_LOG", "info")
            .env_remove("ORCA_CONFIG");
        procs.push(Proc::spawn(
            cmd,
            &b.dir.path(&format!("wake-{mode}-{m}.log")),
        ));
    }
    let up = wait_for(60.0, 0.2, || {
        c.query_one(
            "SELECT count(*) FROM orca.pool_machines WHERE seen_at IS NOT NULL",
            &[],
        )
        .is_ok_and(|r| r.get::<_, i64>(0) == MACHINES)
    });
    if !up {
        progress!("wake ({mode}): not every worker came up within 60 s");
    }
    // One run each first: every worker has started and (on) listens.
    let mut claims = Vec::new();
    for i in 0..=CLAIMS {
        pause(rest(i, 1.5, 4.0));
        let id: i64 = c
            .query_one(
                "INSERT INTO orca.runs (pipeline) VALUES ('job') RETURNING id",
                &[],
            )
            .unwrap()
            .get(0);
        let done = wait_for(30.0, 0.02, || {
            c.query_one(
                "SELECT started_at IS NOT NULL FROM orca.runs WHERE id = $1",
                &[&id],
            )
            .is_ok_and(|r| r.get::<_, bool>(0))
        });
        if !done {
            progress!("wake ({mode}): run {id} not claimed within 30 s");
            continue;
        }
        let took: f64 = c
            .query_one(
                "SELECT extract(epoch FROM started_at - queued_at)::float8 FROM orca.runs WHERE id = $1",
                &[&id],
            )
            .unwrap()
            .get(0);
        if i > 0 {
            claims.push(took);
        }
    }
    wait_for(30.0, 0.2, || {
        c.query_one(
            "SELECT count(*) = 0 FROM orca.runs WHERE ended_at IS NULL",
            &[],
        )
        .is_ok_and(|r| r.get::<_, bool>(0))
    });
    // Idle: what the database counts, and the rounds among it.
    let secs = b.knobs.wake_s;
    let mut cost = Cost::of(&db);
    let r0: i64 = own
        .query_one("SELECT count(*) FROM public.rounds", &[])
        .unwrap()
        .get(0);
    let f = cost.measure(secs, None);
    let r1: i64 = own
        .query_one("SELECT count(*) FROM public.rounds", &[])
        .unwrap()
        .get(0);
    for p in &mut procs {
        p.terminate(10.0);
    }
    drop(own);
    drop(c);
    drop(db);
    Workers {
        claims,
        tx: f.per_second / MACHINES as f64,
        rounds: (r1 - r0) as f64 / f.seconds / MACHINES as f64,
        seconds: f.seconds,
    }
}

/// Whether notifications delivered to a listening session count as
/// transactions: transactions while a session sends 200 notifying
/// transactions, with no session listening and with one listening (the
/// difference is what delivery costs).
fn deliveries(b: &Bench) -> (i64, i64) {
    let db = b.db("orca_bench_wake_notify", "");
    let mut cost = Cost::of(&db);
    let mut count = |listening: bool| -> i64 {
        let mut l = connect(&db.url);
        if listening {
            l.batch_execute("LISTEN bench_wake").unwrap();
        }
        let mut n = connect(&db.url);
        pause(2.0);
        let (x0, _, _) = cost.now();
        for i in 0..200 {
            n.execute("SELECT pg_notify('bench_wake', $1)", &[&i.to_string()])
                .unwrap();
        }
        let got = l
            .notifications()
            .timeout_iter(std::time::Duration::from_secs(2))
            .count()
            .unwrap_or(0);
        // A backend reports its counts when its session ends (else at most
        // once a second, when idle, or after 10 s idle).
        drop(n);
        drop(l);
        pause(2.0);
        let (x1, _, _) = cost.now();
        if listening && got < 200 {
            progress!("wake: the listening session had {got} of 200 notifications");
        }
        x1 - x0
    };
    let alone = count(false);
    let heard = count(true);
    drop(db);
    (alone, heard)
}

/// Section 3 for one mode: hand-over committed to `joined_at`, s.
fn handovers(b: &Bench, on: bool) -> Vec<f64> {
    let mode = listen(on);
    let db = b.db(&format!("orca_bench_wake_next_{mode}"), CONFIG);
    let mut c = b.client(&db);
    let ids: Vec<i64> = c
        .query(
            "INSERT INTO orca.runs (pipeline, state, start)
             SELECT 'inst', 'running', 1 FROM generate_series(1, $1::bigint) RETURNING id",
            &[&INSTANCES],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let login = |id: i64| db.role_name(&format!("inst_{id}"));
    for &id in &ids {
        db.login_role(&login(id), "bench", "orca_instance");
        c.execute(
            "INSERT INTO orca.instances (instance, run, start, role, login, state)
             VALUES ($1, $2, 1, 'head', $3, 'joined')",
            &[&format!("i-{id}"), &id, &login(id)],
        )
        .unwrap();
    }
    let mut procs: Vec<Proc> = ids
        .iter()
        .map(|&id| {
            let (inst, run) = (format!("i-{id}"), id.to_string());
            let mut cmd = db.orca_as(
                &login(id),
                "bench",
                &["pool-next", &inst, &run, "1", "3600"],
            );
            cmd.env("ORCA_LISTEN", mode);
            Proc::spawn(cmd, &b.dir.path(&format!("wake-next-{mode}-{id}.log")))
        })
        .collect();
    let idle = wait_for(60.0, 0.2, || {
        c.query_one(
            "SELECT count(*) FROM orca.instances WHERE state = 'idle'",
            &[],
        )
        .is_ok_and(|r| r.get::<_, i64>(0) == INSTANCES)
    });
    if !idle {
        progress!("wake ({mode}): pool-next did not go idle");
    }
    let mut took = Vec::new();
    for (i, (p, &id)) in procs.iter_mut().zip(&ids).enumerate() {
        pause(rest(i, 0.0, 1.0));
        let inst = format!("i-{id}");
        let mut tx = c.transaction().unwrap();
        tx.execute(
            "UPDATE orca.instances SET state = 'ended', ended_at = now(), why = 'handed over'
             WHERE instance = $1 AND ended_at IS NULL",
            &[&inst],
        )
        .unwrap();
        tx.execute(
            "INSERT INTO orca.instances (instance, run, start, role, login, state, address)
             VALUES ($1, $2, 2, 'worker', $3, 'pooled', '10.0.0.1')",
            &[&inst, &id, &login(id)],
        )
        .unwrap();
        tx.commit().unwrap();
        let at: f64 = c
            .query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[])
            .unwrap()
            .get(0);
        if p.wait_exit(10.0).is_none() {
            progress!("wake ({mode}): pool-next {inst} did not exit within 10 s");
            continue;
        }
        let joined: Option<f64> = c
            .query_one(
                "SELECT extract(epoch FROM joined_at)::float8 FROM orca.instances
                 WHERE instance = $1 AND start = 2",
                &[&inst],
            )
            .unwrap()
            .get(0);
        match joined {
            Some(j) => took.push((j - at).max(0.0)),
            None => progress!("wake ({mode}): {inst} has no joined_at"),
        }
    }
    for p in &mut procs {
        p.terminate(10.0);
    }
    drop(c);
    drop(db);
    took
}

/// Every figure, both modes.
pub fn run(b: &mut Bench) {
    progress!(
        "wake: {MACHINES} idle workers, {CLAIMS} runs queued one at a time, idle {} s; {INSTANCES} pool-nexts; ORCA_LISTEN on and off",
        b.knobs.wake_s
    );
    let w_on = workers(b, true);
    let w_off = workers(b, false);
    let (alone, heard) = deliveries(b);
    let h_on = handovers(b, true);
    let h_off = handovers(b, false);
    heading(&format!(
        "wake on NOTIFY ({MACHINES} idle workers of a pool, {CLAIMS} runs; {INSTANCES} pool-nexts; ORCA_LISTEN on / off)"
    ));
    fig(
        "queue to claim ms, listening, p50 / p99 / max (goal p50 <= 50)",
        ms3(w_on.claims.clone()),
    );
    fig(
        "queue to claim ms, polling, p50 / p99 / max",
        ms3(w_off.claims.clone()),
    );
    fig(
        "hand-over to pool-next's exit ms, listening, p50 / p99 / max (goal p50 <= 50)",
        ms3(h_on),
    );
    fig(
        "hand-over to pool-next's exit ms, polling, p50 / p99 / max",
        ms3(h_off),
    );
    for (w, mode) in [(&w_on, "listening"), (&w_off, "polling")] {
        fig(
            &format!(
                "idle transactions per machine per second, {mode} (goal <= 0.2; {:.0} s)",
                w.seconds
            ),
            format!(
                "{:.3} (rounds {:.3}, the rest {:.3})",
                w.tx,
                w.rounds,
                w.tx - w.rounds
            ),
        );
    }
    fig(
        "transactions while 200 notifying transactions are sent, none listening / one listening",
        format!("{alone} / {heard}"),
    );
}
