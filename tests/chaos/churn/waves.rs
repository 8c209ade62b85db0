//! The churn's demand: how many runs each pool wants at each moment, in
//! steps, rising and falling pool by pool.

use super::*;

/// What the demand thread did.
#[derive(Default)]
pub(super) struct Demand {
    pub(super) ids: Vec<i64>,
    pub(super) waves: u64,
    pub(super) refused: u64,
}

/// Queues a burst of short runs for a pool whose queue is empty and whose
/// machines are all gone (so every wave makes machines anew), until `stop`.
pub(super) fn demand(
    db_url: String,
    mut rng: Rng,
    stop: Arc<AtomicBool>,
    out: Arc<Mutex<Demand>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut c: Option<postgres::Client> = None;
        while !stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(300));
            if c.as_ref().is_none_or(|c| c.is_closed()) {
                c = connect_quick(&db_url);
            }
            let Some(client) = c.as_mut() else { continue };
            let quiet: Vec<String> = match client.query(
                "SELECT p.pool FROM unnest($1::text[]) AS p(pool)
                 WHERE NOT EXISTS (SELECT 1 FROM orca.pool_machines m WHERE m.pool = p.pool AND m.ended_at IS NULL)
                   AND NOT EXISTS (SELECT 1 FROM orca.runs r WHERE r.pipeline = p.pool || '_run'
                                   AND r.state IN ('queued', 'running'))",
                &[&Churn::pools().into_iter().map(|p| p.0).collect::<Vec<_>>()],
            ) {
                Ok(rows) => rows.iter().map(|r| r.get(0)).collect(),
                Err(_) => {
                    c = None;
                    continue;
                }
            };
            for pool in quiet {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                // Enough to grow the pool to its most, a wave at a time.
                let n = 2 + rng.below(MAX_MACHINES * 2);
                let pipeline = format!("{pool}_run");
                for _ in 0..n {
                    let o = std::process::Command::new(bin())
                        .args(["run", &pipeline, "--db-wait", "3"])
                        .env("ORCA_DATABASE_URL", &db_url)
                        .env("RUST_LOG", "warn")
                        .stdin(std::process::Stdio::null())
                        .output();
                    let mut d = out.lock().unwrap();
                    match o {
                        Ok(o) if o.status.success() => {
                            if let Ok(id) = text(&o.stdout).trim().parse() {
                                d.ids.push(id);
                            }
                        }
                        _ => d.refused += 1,
                    }
                }
                out.lock().unwrap().waves += 1;
            }
        }
    })
}

/// How finely a late window is judged for demand, seconds.
pub(super) const DEMAND_STEP: f64 = 0.05;

/// The midpoints of `DEMAND_STEP`s from `from` to `to`.
pub(super) fn steps(from: f64, to: f64) -> impl Iterator<Item = f64> {
    let n = ((to - from) / DEMAND_STEP).ceil().max(0.0) as usize;
    (0..n).map(move |i| from + (i as f64 + 0.5) * DEMAND_STEP)
}

/// Whether `t` falls in one of `windows`.
pub(super) fn in_windows(t: f64, windows: &[(f64, f64)]) -> bool {
    windows.iter().any(|(a, b)| *a <= t && t < *b)
}

/// The pool a machine name is of (`orca-cl1-998`: `cl1`).
pub(super) fn pool_of(name: &str) -> String {
    name.split('-').nth(1).unwrap_or_default().to_string()
}

/// The samples (pool, when: seconds since the epoch) at which the pool had
/// demand, as the scaler counts it (`sql/pools_view.sql`, `pools::demand`):
/// runs of its pipelines queued and due at least `ORCA_POOL_GROW_AFTER`
/// (1 s here) and not started, at most `max_runs` less its running ones,
/// beyond the room of its live machines (slots less the attempts running
/// on them). From the events: a wait runs from a run's `queued`,
/// `requeued` or `retried` (after its delay) to its next event, an attempt
/// from its `started` to its next. A wait counts for its first 3 s only
/// (`ORCA_POOL_GROW_AFTER` and an idle worker's look every 2 s): a run that
/// waits longer beside an idle machine is a claim that failed, not demand.
/// Per pool, as the churn has one pipeline a pool.
pub(super) fn demand_at(
    c: &mut postgres::Client,
    samples: &[(String, f64)],
) -> HashSet<(String, u64)> {
    if samples.is_empty() {
        return HashSet::new();
    }
    let pools: Vec<&str> = samples.iter().map(|(p, _)| p.as_str()).collect();
    let times: Vec<f64> = samples.iter().map(|(_, t)| *t).collect();
    c.query(
        "WITH s AS (SELECT * FROM unnest($1::text[], $2::float8[]) AS s(pool, t)),
         ev AS (
             SELECT e.kind, e.why, r.pipeline, extract(epoch FROM e.at)::float8 AS at,
                    coalesce(extract(epoch FROM lead(e.at) OVER (PARTITION BY e.run ORDER BY e.id))::float8,
                             'infinity') AS next_at
             FROM orca.events e JOIN orca.runs r ON r.id = e.run
             WHERE e.kind IN ('queued', 'started', 'succeeded', 'failed', 'cancelled', 'requeued', 'retried')
         ),
         waits AS (
             SELECT substr(p.placement, 8) AS pool, p.max_runs,
                    ev.at + CASE WHEN ev.kind = 'retried'
                                 THEN coalesce(substring(ev.why FROM 'in ([0-9.]+)s$')::float8, 0)
                                 ELSE 0 END AS from_t,
                    ev.next_at AS to_t
             FROM ev JOIN orca.pipelines p ON p.name = ev.pipeline
             WHERE ev.kind IN ('queued', 'requeued', 'retried')
         ),
         busy AS (
             SELECT substring(why FROM 'on machine (\\S+)$') AS machine, at AS from_t, next_at AS to_t
             FROM ev WHERE ev.kind = 'started'
         ),
         m AS (
             SELECT s.pool, s.t, pm.slots,
                    (SELECT count(*) FROM busy b WHERE b.machine = pm.name
                       AND b.from_t <= s.t AND s.t < b.to_t) AS running
             FROM s JOIN orca.pool_machines pm ON pm.pool = s.pool
              AND extract(epoch FROM pm.made_at)::float8 <= s.t
              AND s.t < coalesce(extract(epoch FROM pm.ended_at)::float8, 'infinity')
         )
         SELECT s.pool, s.t FROM s
         WHERE (SELECT least(count(*), greatest(max(w.max_runs)
                        - (SELECT coalesce(sum(m.running), 0) FROM m WHERE m.pool = s.pool AND m.t = s.t), 0))
                FROM waits w WHERE w.pool = s.pool AND w.from_t + 1.0 <= s.t
                  AND s.t < least(w.to_t, w.from_t + 3.0))
             > (SELECT coalesce(sum(greatest(m.slots - m.running, 0)), 0)
                FROM m WHERE m.pool = s.pool AND m.t = s.t)",
        &[&pools, &times],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get::<_, String>(0), r.get::<_, f64>(1).to_bits()))
    .collect()
}

/// How much of `span` the `windows` cover (they don't overlap each other).
pub(super) fn overlap(span: (f64, f64), windows: &[(f64, f64)]) -> f64 {
    windows
        .iter()
        .map(|(a, b)| (b.min(span.1) - a.max(span.0)).max(0.0))
        .sum()
}
