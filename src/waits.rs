//! Why a queued run waits: `orca runs` (its `WHY`, and `waits` in
//! `--json`), `orca run --wait` and `orca logs -f` say it.
//!
//! What the database can tell is read in one statement
//! (`sql/run_waits.sql`, for many runs at once); the reason is decided from
//! it by [`decide`], pure and unit-tested: its pipeline paused, no
//! scheduler leading, a retry's delay, `max_runs` (or `max_fills`) reached
//! with the runs that hold it, or its pool without room (a machine
//! booting, `max_machines` standing, or what the scaler last said).

use postgres::Client;

use crate::db::sql;
use crate::runs::{RunRow, RunState};

/// What the database says about one queued run (`sql/run_waits.sql`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    /// The run.
    pub id: i64,
    /// Its pipeline.
    pub pipeline: String,
    /// A fill run (held to `max_fills`, not `max_runs`).
    pub fill: bool,
    /// Its pipeline is paused.
    pub paused: bool,
    /// A live scheduler leads.
    pub led: bool,
    /// Its failed attempts so far.
    pub failures: i32,
    /// The attempts its pipeline's retries allow (1 + retries).
    pub tries: i32,
    /// When it may start (UTC, `HH:MM:SS`, the date first when not today),
    /// if that is still ahead.
    pub retry_at: Option<String>,
    /// Its pipeline's `max_runs` (`max_fills` for a fill run).
    pub max_runs: i32,
    /// Runs of its kind (fill or not) of its pipeline running now.
    pub running: i64,
    /// The first few of them.
    pub running_ids: Vec<i64>,
    /// Its pool, for a `worker:<pool>` run.
    pub pool: Option<PoolFacts>,
}

/// A `worker:<pool>` run's pool, as the database has it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolFacts {
    /// Its name.
    pub name: String,
    /// Registered and not retired.
    pub registered: bool,
    /// Its live machines.
    pub machines: i64,
    /// A live machine whose worker has not been seen yet.
    pub booting: Option<String>,
    /// Its `max_machines`.
    pub max_machines: Option<i32>,
    /// Runs its seen workers can still take.
    pub room: i64,
    /// What the scaler's last pass said (`orca pools`).
    pub status: String,
}

/// Why a queued run waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waiting {
    /// Its pipeline (named) is paused: nothing of it starts.
    Paused(String),
    /// No live scheduler leads: nothing starts any run.
    NoLeader,
    /// It failed and waits for its retry: attempt `next` of `tries`, at
    /// `at` (UTC).
    Retry {
        /// The attempt it will be (counting failures).
        next: i32,
        /// The attempts its retries allow.
        tries: i32,
        /// When (UTC, `HH:MM:SS`).
        at: String,
    },
    /// Its pipeline's `max_runs` (or `max_fills`) are running.
    MaxRuns {
        /// A fill run (held to `max_fills`).
        fill: bool,
        /// The bound.
        max: i32,
        /// The first few of the runs running.
        running: Vec<i64>,
        /// How many run in all.
        of: i64,
    },
    /// Its pool (named) is retired, or was never registered.
    NoPool(String),
    /// Its pool has no room and a machine of it is booting.
    PoolBooting {
        /// The pool.
        pool: String,
        /// The machine.
        machine: String,
    },
    /// Its pool has no room and stands at `max_machines`.
    PoolFull {
        /// The pool.
        pool: String,
        /// Its `max_machines`.
        max: i32,
    },
    /// Its pool has no room; what the scaler last said of it.
    PoolNoRoom {
        /// The pool.
        pool: String,
        /// The scaler's status line (empty: it said nothing yet).
        status: String,
    },
}

/// Why the run of `f` waits, if the facts tell: the first of its pipeline
/// paused, no leader, a retry's delay, `max_runs` reached, its pool without
/// room. `None`: nothing holds it (it starts on a next tick or claim).
pub fn decide(f: &Facts) -> Option<Waiting> {
    if f.paused {
        return Some(Waiting::Paused(f.pipeline.clone()));
    }
    if !f.led {
        return Some(Waiting::NoLeader);
    }
    if let Some(at) = &f.retry_at {
        return Some(Waiting::Retry {
            next: f.failures + 1,
            tries: f.tries.max(f.failures + 1),
            at: at.clone(),
        });
    }
    if f.running >= i64::from(f.max_runs) {
        return Some(Waiting::MaxRuns {
            fill: f.fill,
            max: f.max_runs,
            running: f.running_ids.clone(),
            of: f.running,
        });
    }
    let p = f.pool.as_ref()?;
    if !p.registered {
        return Some(Waiting::NoPool(p.name.clone()));
    }
    if p.room > 0 {
        return None;
    }
    Some(if let Some(m) = &p.booting {
        Waiting::PoolBooting {
            pool: p.name.clone(),
            machine: m.clone(),
        }
    } else if let Some(max) = p.max_machines.filter(|&m| p.machines >= i64::from(m)) {
        Waiting::PoolFull {
            pool: p.name.clone(),
            max,
        }
    } else {
        Waiting::PoolNoRoom {
            pool: p.name.clone(),
            status: p.status.clone(),
        }
    })
}

impl Waiting {
    /// The reason in a few words, as `orca runs` shows it (and `--json`'s
    /// `waits`).
    pub fn short(&self) -> String {
        match self {
            Waiting::Paused(p) => format!("paused: waits for `orca resume {p}`"),
            Waiting::NoLeader => "no scheduler leads".into(),
            Waiting::Retry { next, tries, at } => format!("retry {next} of {tries} at {at} UTC"),
            Waiting::MaxRuns {
                fill,
                max,
                running,
                of,
            } => {
                let ids: Vec<String> = running.iter().map(|i| i.to_string()).collect();
                let more = of.saturating_sub(running.len() as i64);
                format!(
                    "{} ({max}) reached: running {}{}",
                    if *fill { "max_fills" } else { "max_runs" },
                    if ids.is_empty() {
                        "-".to_string()
                    } else {
                        ids.join(", ")
                    },
                    if more > 0 && !ids.is_empty() {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    }
                )
            }
            Waiting::NoPool(p) => format!("pool {p} is retired or not registered"),
            Waiting::PoolBooting { pool, machine } => {
                format!("pool {pool} has no room: machine {machine} is booting")
            }
            Waiting::PoolFull { pool, max } => {
                format!("pool {pool} has no room: at max_machines ({max})")
            }
            Waiting::PoolNoRoom { pool, status } if status.is_empty() => {
                format!("pool {pool} has no room: no machine asked for yet")
            }
            Waiting::PoolNoRoom { pool, status } => {
                format!("pool {pool} has no room: {status}")
            }
        }
    }

    /// The line that says it, for run `run` (`orca run --wait`, `orca logs
    /// -f`).
    pub fn said(&self, run: i64) -> String {
        match self {
            Waiting::Paused(p) => {
                format!("pipeline {p} is paused: run {run} waits for `orca resume {p}`")
            }
            Waiting::NoLeader => format!("no scheduler leads: run {run} waits for one"),
            other => format!("run {run} waits: {}", other.short()),
        }
    }
}

/// Why each queued run among `ids` waits, if the database can tell (`stale`
/// seconds the limit on a leader's beat, by the database's clock): run ids
/// with their reason; runs not queued, gone, or held by nothing are left
/// out.
pub fn read(
    client: &mut Client,
    ids: &[i64],
    stale: f64,
) -> Result<Vec<(i64, Waiting)>, postgres::Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let lock = crate::lead::lock::LEAD_LOCK;
    let rows = client.query(sql::RUN_WAITS, &[&ids, &lock, &stale])?;
    let mut out = Vec::new();
    for r in rows {
        let pool: Option<String> = r.get("pool");
        let f = Facts {
            id: r.get("id"),
            pipeline: r.get("pipeline"),
            fill: r.get("fill"),
            paused: r.get("paused"),
            led: r.get("led"),
            failures: r.get("failures"),
            tries: r.get("tries"),
            retry_at: r.get("retry_at"),
            max_runs: r.get("max_runs"),
            running: r.get("running"),
            running_ids: r
                .get::<_, Option<Vec<i64>>>("running_ids")
                .unwrap_or_default(),
            pool: pool.map(|name| PoolFacts {
                name,
                registered: r.get("pool_registered"),
                machines: r.get::<_, Option<i64>>("machines").unwrap_or(0),
                booting: r.get("booting"),
                max_machines: r.get("max_machines"),
                room: r.get::<_, Option<i64>>("room").unwrap_or(0),
                status: r.get("pool_status"),
            }),
        };
        if let Some(w) = decide(&f) {
            out.push((f.id, w));
        }
    }
    Ok(out)
}

/// Sets `waits` of the queued runs among `rows` (see [`read`]).
pub fn fill(client: &mut Client, rows: &mut [RunRow], stale: f64) -> Result<(), postgres::Error> {
    let queued: Vec<i64> = rows
        .iter()
        .filter(|r| r.state == RunState::Queued.as_str())
        .map(|r| r.id)
        .collect();
    let mut waits: std::collections::HashMap<i64, Waiting> =
        read(client, &queued, stale)?.into_iter().collect();
    for r in rows {
        r.waits = waits.remove(&r.id).map(|w| w.short());
    }
    Ok(())
}

/// Why queued run `run` waits, if the database can tell (see [`read`]).
pub fn waiting(
    client: &mut Client,
    run: i64,
    stale: f64,
) -> Result<Option<Waiting>, postgres::Error> {
    Ok(read(client, &[run], stale)?.pop().map(|(_, w)| w))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued() -> Facts {
        Facts {
            id: 7,
            pipeline: "etl".into(),
            led: true,
            tries: 1,
            max_runs: 1,
            ..Facts::default()
        }
    }

    fn pool() -> PoolFacts {
        PoolFacts {
            name: "b".into(),
            registered: true,
            max_machines: Some(2),
            ..PoolFacts::default()
        }
    }

    #[test]
    fn a_run_nothing_holds_waits_for_nothing() {
        assert_eq!(decide(&queued()), None);
        let f = Facts {
            pool: Some(PoolFacts { room: 1, ..pool() }),
            ..queued()
        };
        assert_eq!(decide(&f), None);
    }

    #[test]
    fn paused_comes_first_then_no_leader_then_the_retry() {
        let f = Facts {
            paused: true,
            led: false,
            retry_at: Some("19:14:03".into()),
            ..queued()
        };
        assert_eq!(decide(&f), Some(Waiting::Paused("etl".into())));
        let f = Facts { paused: false, ..f };
        assert_eq!(decide(&f), Some(Waiting::NoLeader));
        let f = Facts {
            led: true,
            failures: 1,
            tries: 4,
            ..f
        };
        let w = decide(&f).unwrap();
        assert_eq!(w.short(), "retry 2 of 4 at 19:14:03 UTC");
        assert_eq!(w.said(7), "run 7 waits: retry 2 of 4 at 19:14:03 UTC");
    }

    #[test]
    fn a_retry_past_its_allowance_counts_itself() {
        // Retries lowered since it failed: never "retry 3 of 2".
        let f = Facts {
            failures: 2,
            tries: 2,
            retry_at: Some("01:02:03".into()),
            ..queued()
        };
        assert_eq!(decide(&f).unwrap().short(), "retry 3 of 3 at 01:02:03 UTC");
    }

    #[test]
    fn max_runs_names_the_runs_that_hold_it() {
        let f = Facts {
            running: 2,
            max_runs: 2,
            running_ids: vec![3, 5],
            ..queued()
        };
        assert_eq!(
            decide(&f).unwrap().short(),
            "max_runs (2) reached: running 3, 5"
        );
        let f = Facts { fill: true, ..f };
        assert_eq!(
            decide(&f).unwrap().short(),
            "max_fills (2) reached: running 3, 5"
        );
        // Only the first five ids are read: the rest are counted.
        let many = Facts {
            running: 12,
            max_runs: 12,
            running_ids: vec![1, 2, 3, 4, 5],
            ..queued()
        };
        assert_eq!(
            decide(&many).unwrap().short(),
            "max_runs (12) reached: running 1, 2, 3, 4, 5 and 7 more"
        );
        // Under the bound: nothing.
        let f = Facts { running: 1, ..f };
        assert_eq!(decide(&f), None);
    }

    #[test]
    fn a_pool_without_room_says_what_it_waits_for() {
        let with = |p: PoolFacts| Facts {
            pool: Some(p),
            ..queued()
        };
        let booting = with(PoolFacts {
            machines: 2,
            booting: Some("orca-b-3".into()),
            ..pool()
        });
        assert_eq!(
            decide(&booting).unwrap().short(),
            "pool b has no room: machine orca-b-3 is booting"
        );
        let full = with(PoolFacts {
            machines: 2,
            ..pool()
        });
        assert_eq!(
            decide(&full).unwrap().short(),
            "pool b has no room: at max_machines (2)"
        );
        let failed = with(PoolFacts {
            machines: 1,
            status: "waiting out ORCA_POOL_TRY_SECONDS; last attempt: no capacity".into(),
            ..pool()
        });
        assert_eq!(
            decide(&failed).unwrap().short(),
            "pool b has no room: waiting out ORCA_POOL_TRY_SECONDS; last attempt: no capacity"
        );
        let fresh = with(pool());
        assert_eq!(
            decide(&fresh).unwrap().short(),
            "pool b has no room: no machine asked for yet"
        );
        let gone = with(PoolFacts {
            registered: false,
            ..pool()
        });
        assert_eq!(
            decide(&gone).unwrap().short(),
            "pool b is retired or not registered"
        );
    }

    #[test]
    fn the_old_lines_stay_as_they_were() {
        assert_eq!(
            Waiting::Paused("etl".into()).said(7),
            "pipeline etl is paused: run 7 waits for `orca resume etl`"
        );
        assert_eq!(
            Waiting::NoLeader.said(7),
            "no scheduler leads: run 7 waits for one"
        );
    }
}
