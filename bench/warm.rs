//! The warm pool.
//!
//! The instance's side: 10 instances each running `orca pool-next` with a
//! login of its own for `ORCA_BENCH_WARM_SECONDS`: transactions per second
//! on their database per idle instance (`pg_stat_database`), then a
//! hand-over to each (the scheduler's part played by SQL): from the
//! hand-over's commit to pool-next's exit, and pool-next's peak RSS.
//!
//! The scheduler's side: runs of a pipeline on EC2 (local provider:
//! instances are process groups running `scripts/instance.sh`) with a head
//! and two workers, one after another; each after the first is handed the
//! previous run's warm instances. Run queued to its last instance joined,
//! by the database's clock.

use crate::ctx::{Bench, pause, wait_for};
use crate::harness::{Proc, peak_rss_kib};
use crate::out::{f2, fig, heading, or_na, quantile};
use std::time::Instant;

const IDLE: i64 = 10;

/// The instance's side; prints its figures.
fn instances(b: &Bench) {
    let warm_s = b.knobs.warm_s;
    progress!("warm pool: {IDLE} idle instances for {warm_s}s");
    let db = b.db(
        "orca_bench_warm",
        "[pipelines.job]\ncommand = \"true\"\nplacement = \"ec2\"\n[pipelines.job.ec2]\ntype = \"small\"\nlocations = [\"here\"]\n",
    );
    let mut c = b.client(&db);
    let ids: Vec<i64> = c
        .query(
            "INSERT INTO orca.runs (pipeline, state, start)
             SELECT 'job', 'running', 1 FROM generate_series(1, $1::bigint) RETURNING id",
            &[&IDLE],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    // A login of each instance's own, as orca makes them.
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
            let cmd = db.orca_as(
                &login(id),
                "bench",
                &["pool-next", &inst, &run, "1", "3600"],
            );
            Proc::spawn(cmd, &b.dir.path(&format!("next-{id}.log")))
        })
        .collect();
    let idle = wait_for(60.0, 0.2, || {
        c.query_one(
            "SELECT count(*) FROM orca.instances WHERE state = 'idle'",
            &[],
        )
        .is_ok_and(|r| r.get::<_, i64>(0) == IDLE)
    });
    if !idle {
        progress!("pool-next did not go idle");
    }
    let mut xacts = || -> i64 {
        c.query_one(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1",
            &[&db.name()],
        )
        .unwrap()
        .get(0)
    };
    let x0 = xacts();
    let t0 = Instant::now();
    pause(warm_s);
    let x1 = xacts();
    let rate = (x1 - x0) as f64 / t0.elapsed().as_secs_f64() / IDLE as f64;
    let rss = peak_rss_kib(procs[0].pid()).map(|k| k as f64 / 1024.0);
    // Hand each instance the next run, one at a time, timing commit to exit.
    let mut took = Vec::new();
    for (p, &id) in procs.iter_mut().zip(&ids) {
        let t0 = Instant::now();
        let mut tx = c.transaction().unwrap();
        tx.execute(
            "UPDATE orca.instances SET state = 'ended', ended_at = now(), why = 'handed over'
             WHERE instance = $1 AND ended_at IS NULL",
            &[&format!("i-{id}")],
        )
        .unwrap();
        tx.execute(
            "INSERT INTO orca.instances (instance, run, start, role, login, state, address)
             VALUES ($1, $2, 2, 'worker', $3, 'pooled', '10.0.0.1')",
            &[&format!("i-{id}"), &id, &login(id)],
        )
        .unwrap();
        tx.commit().unwrap();
        if p.wait_exit(10.0).is_none() {
            progress!(
                "pool-next {} did not exit within 10 s of its hand-over",
                p.pid()
            );
        }
        took.push(t0.elapsed().as_secs_f64());
    }
    for p in &mut procs {
        p.terminate(10.0);
    }
    drop(c);
    drop(db);
    took.sort_by(f64::total_cmp);
    let two = |v: Option<f64>| f2(v);
    heading(&format!(
        "warm pool ({IDLE} idle instances for {warm_s} s; hand-overs through the scheduler)"
    ));
    fig(
        "transactions per second per idle instance",
        format!("{rate:.2}"),
    );
    fig(
        "hand-over committed to pool-next's exit s, p50 / max",
        format!(
            "{} / {}",
            two(quantile(&took, 0.5)),
            two(took.last().copied())
        ),
    );
    fig("pool-next peak RSS MiB (goal <= 8)", f2(rss));
}

/// The scheduler's side; prints its figures.
fn handovers(b: &Bench) {
    let n = b.knobs.handovers;
    progress!("warm pool: {n} hand-overs through the scheduler");
    let db = b.db(
        "orca_bench_handover",
        "[pipelines.job]\ncommand = [\"true\"]\nplacement = \"ec2\"\n[pipelines.job.ec2]\ntype = \"small\"\nlocations = [\"here\"]\nworkers = 2\n",
    );
    let mut c = b.client(&db);
    let mut s = b.spawn(
        &db,
        &["scheduler"],
        &[
            ("ORCA_TICK_SECONDS", "0.1"),
            ("ORCA_EC2_POOL_SECONDS", "120"),
        ],
        "sched-handover.log",
    );
    let mut ok = 0;
    for i in 0..=n {
        let run = db.queue("job");
        let done = wait_for(60.0, 0.1, || {
            c.query_one(
                "SELECT (SELECT state = 'succeeded' FROM orca.runs WHERE id = $1)
                    AND (SELECT count(*) = 3 FROM orca.instances
                         WHERE state = 'idle' AND ended_at IS NULL)",
                &[&run],
            )
            .is_ok_and(|r| r.get::<_, Option<bool>>(0) == Some(true))
        });
        if !done {
            progress!(
                "run {run}: not done and idle within 60 s; the scheduler's log:\n{}",
                s.tail(20)
            );
            break;
        }
        ok = i;
    }
    let mut joined: Vec<f64> = c
        .query(
            "SELECT extract(epoch FROM max(i.joined_at) - r.queued_at)::float8
             FROM orca.runs r JOIN orca.instances i ON i.run = r.id
             WHERE r.id > (SELECT min(id) FROM orca.runs)
             GROUP BY r.id, r.queued_at",
            &[],
        )
        .unwrap()
        .iter()
        .filter_map(|r| r.get::<_, Option<f64>>(0))
        .collect();
    joined.sort_by(f64::total_cmp);
    let made: i64 = c
        .query_one("SELECT count(DISTINCT instance) FROM orca.instances", &[])
        .unwrap()
        .get(0);
    s.terminate(10.0);
    // Its instances outlive the scheduler, as EC2 instances do: dropping
    // the database ends them (their process groups) and drops their logins.
    drop(c);
    drop(db);
    let three = |v: Option<f64>| or_na(v.map(|v| format!("{v:.3}")));
    fig(
        &format!(
            "run queued to its instances joined s (warm hand-over, {ok} runs), p50 / p99 / max (goal <= 2)"
        ),
        if joined.is_empty() {
            "n/a".to_string()
        } else {
            format!(
                "{} / {} / {}",
                three(quantile(&joined, 0.5)),
                three(quantile(&joined, 0.99)),
                three(joined.last().copied())
            )
        },
    );
    fig(
        &format!("instances made for {} runs of a head and 2 workers", ok + 1),
        made,
    );
}

/// Both sides.
pub fn run(b: &mut Bench) {
    instances(b);
    handovers(b);
}
