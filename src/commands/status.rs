//! `orca status`: one screen an operator (or a health check) reads: who
//! leads and since when, the runs running and queued and the oldest due,
//! each pool's machines by state, the last failed runs. Exit 0 when the
//! database answers and a live scheduler leads, else 1 with the reason.
//!
//! "Leads" is judged by the database's clock, as `orca deploy check`
//! judges it: with rows in `orca.schedulers` (`ORCA_OVERLAP=on`), the one that leads
//! beat within the stale limit and the lead lock is held; without, a
//! scheduler's session holds the lead lock and ran a statement within the
//! stale limit (its tick runs one every tick).

use std::collections::BTreeMap;

use serde::Serialize;

use super::{connect, pg, stale};
use crate::cli::DbOpts;
use crate::db::sql;
use crate::exit::{Outcome, no};
use crate::lead::lock::{LEAD_LOCK, SCHEDULER_APP, holder_named};
use crate::plural::count;
use crate::printable;

/// How many failed runs `orca status` shows.
const FAILURES_SHOWN: i64 = 5;

/// The session holding the lead lock, as the database shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Holder {
    /// Its `application_name` (None: another role's session, not shown).
    pub app: Option<String>,
    /// Its backend pid.
    pub backend: i32,
    /// Where it connects from (None: a local socket, or not shown).
    pub addr: Option<String>,
    /// When its session began (UTC).
    pub since: Option<String>,
    /// Seconds since its last statement began or ended (0 while one runs;
    /// None: not shown).
    pub quiet: Option<f64>,
}

/// The row of `orca.schedulers` that says it leads (`ORCA_OVERLAP=on`).
#[derive(Debug, Clone, PartialEq)]
pub struct LeadingRow {
    /// Its id.
    pub id: i64,
    /// Its host.
    pub host: String,
    /// Its pid.
    pub pid: i32,
    /// Since when it leads (UTC).
    pub since: Option<String>,
    /// Seconds since its last beat.
    pub seen_ago: f64,
}

/// Who leads, when a live scheduler does.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Leader {
    /// Its row's id in `orca.schedulers` (None with `ORCA_OVERLAP=off`: no
    /// rows). `--json` calls it `instance`, as it always has: a format
    /// operators' scripts read.
    #[serde(rename = "instance")]
    pub scheduler: Option<i64>,
    /// `host H pid P` (or, for a session this role can't see, what is known).
    pub who: String,
    /// Since when: with a row, when it took the lead; else when its
    /// session began (it takes the lead as it connects).
    pub since: Option<String>,
}

/// Whether a live scheduler leads, from what the database shows, with the
/// stale limit `stale` (s): the leader, or why none does.
pub fn judge_lead(
    holder: Option<&Holder>,
    row: Option<&LeadingRow>,
    stale: f64,
) -> Result<Leader, String> {
    if let Some(r) = row {
        if r.seen_ago >= stale {
            return Err(format!(
                "scheduler {} on {} pid {} was to lead but was last seen {:.0}s ago \
                 (stale limit {stale}s)",
                r.id,
                printable::line(&r.host),
                r.pid,
                r.seen_ago
            ));
        }
        if holder.is_none() {
            return Err(format!(
                "scheduler {} on {} pid {} is to lead but holds no lead lock",
                r.id,
                printable::line(&r.host),
                r.pid
            ));
        }
        return Ok(Leader {
            scheduler: Some(r.id),
            who: format!("host {} pid {}", printable::line(&r.host), r.pid),
            since: r.since.clone(),
        });
    }
    let Some(h) = holder else {
        return Err("no scheduler leads".into());
    };
    let who = printable::line(&holder_named(
        h.app.as_deref(),
        h.addr.as_deref(),
        h.backend,
    ))
    .into_owned();
    match h.app.as_deref() {
        Some(app) if !app.starts_with(SCHEDULER_APP) => Err(format!(
            "no scheduler leads: the lead lock is held by {who}, which is no scheduler"
        )),
        Some(_) if h.quiet.is_some_and(|q| q >= stale) => Err(format!(
            "the lead is held by scheduler {who}, whose session has been quiet for {:.0}s \
             (stale limit {stale}s)",
            h.quiet.unwrap_or_default()
        )),
        _ => Ok(Leader {
            scheduler: None,
            who,
            since: h.since.clone(),
        }),
    }
}

/// The oldest due queued run.
#[derive(Serialize, Debug)]
struct Oldest {
    run: i64,
    pipeline: String,
    waiting_seconds: f64,
}

/// A pool's machines by state.
#[derive(Serialize, Debug)]
struct PoolLine {
    pool: String,
    retired: bool,
    demand: i32,
    /// How many of its live machines are in each state (those with any).
    machines: BTreeMap<&'static str, i64>,
}

/// A failed run.
#[derive(Serialize, Debug)]
struct Failed {
    run: i64,
    pipeline: String,
    exit_code: Option<i32>,
    exit_signal: Option<i32>,
    why: Option<String>,
    ended_at: Option<String>,
}

/// What `orca status --json` prints.
#[derive(Serialize, Debug)]
struct Status {
    /// A live scheduler leads (exit 0).
    ok: bool,
    /// Why not, when not.
    why: Option<String>,
    leader: Option<Leader>,
    running: i64,
    queued: i64,
    oldest_queued: Option<Oldest>,
    pools: Vec<PoolLine>,
    failures: Vec<Failed>,
    /// The database's clock (UTC).
    now: String,
}

/// The states a machine's `state()` takes, in the order it goes through them.
const MACHINE_STATES: [&str; 5] = ["booting", "idle", "busy", "silent", "removing"];

/// `orca status [--json]`.
pub fn status(json: bool, opts: &DbOpts) -> Outcome {
    let stale = stale()?;
    let mut client = connect(opts)?;
    let r = client.query_one(sql::STATUS, &[&LEAD_LOCK]).map_err(pg)?;
    let holder = r
        .get::<_, Option<i32>>("holder_backend")
        .map(|backend| Holder {
            app: r.get("holder_app"),
            backend,
            addr: r.get("holder_addr"),
            since: r.get("holder_since"),
            quiet: r.get("holder_quiet"),
        });
    let row = r.get::<_, Option<i64>>("leader_id").map(|id| LeadingRow {
        id,
        host: r.get("leader_host"),
        pid: r.get("leader_pid"),
        since: r.get("leader_since"),
        seen_ago: r.get("leader_seen_ago"),
    });
    let lead = judge_lead(holder.as_ref(), row.as_ref(), stale);
    let oldest = r.get::<_, Option<i64>>("oldest_id").map(|run| Oldest {
        run,
        pipeline: r.get("oldest_pipeline"),
        waiting_seconds: r.get("oldest_waited"),
    });
    let machines = crate::machines::logins::live(&mut client).map_err(pg)?;
    let pools: Vec<PoolLine> = client
        .query(sql::POOLS_LIST, &[])
        .map_err(pg)?
        .iter()
        .map(|p| {
            let name: String = p.get("name");
            let mine: Vec<_> = machines.iter().filter(|m| m.pool == name).collect();
            PoolLine {
                machines: MACHINE_STATES
                    .iter()
                    .map(|s| (*s, mine.iter().filter(|m| m.state() == *s).count() as i64))
                    .filter(|(_, n)| *n > 0)
                    .collect(),
                pool: name,
                retired: p.get("retired"),
                demand: p.get("demand"),
            }
        })
        .collect();
    let failures: Vec<Failed> = client
        .query(sql::STATUS_FAILURES, &[&FAILURES_SHOWN])
        .map_err(pg)?
        .iter()
        .map(|f| Failed {
            run: f.get("id"),
            pipeline: f.get("pipeline"),
            exit_code: f.get("exit_code"),
            exit_signal: f.get("exit_signal"),
            why: f.get("why"),
            ended_at: f.get("ended_at"),
        })
        .collect();
    let status = Status {
        ok: lead.is_ok(),
        why: lead.as_ref().err().cloned(),
        leader: lead.as_ref().ok().cloned(),
        running: r.get("running"),
        queued: r.get("queued"),
        oldest_queued: oldest,
        pools,
        failures,
        now: r.get("now"),
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&status).expect("json"));
    } else {
        print_text(&status);
    }
    match lead {
        Ok(_) => Ok(()),
        Err(why) => Err(no(why)),
    }
}

fn print_text(s: &Status) {
    println!("database  answers; its clock says {}", s.now);
    match (&s.leader, &s.why) {
        (Some(l), _) => println!(
            "leader    {}{}{}",
            l.scheduler
                .map_or(String::new(), |i| format!("scheduler {i}, ")),
            l.who,
            l.since
                .as_deref()
                .map_or(String::new(), |t| format!(", since {t}"))
        ),
        (None, Some(why)) => println!("leader    none: {why}"),
        (None, None) => println!("leader    none"),
    }
    println!(
        "runs      {} running, {} queued{}",
        s.running,
        s.queued,
        s.oldest_queued.as_ref().map_or(String::new(), |o| format!(
            "; the oldest due: run {} ({}), waiting {:.0}s",
            o.run, o.pipeline, o.waiting_seconds
        ))
    );
    if s.pools.is_empty() {
        println!("pools     none");
    }
    for p in &s.pools {
        let total: i64 = p.machines.values().sum();
        // In the order machines go through the states.
        let by_state: Vec<String> = MACHINE_STATES
            .iter()
            .filter_map(|s| p.machines.get(s).map(|n| format!("{n} {s}")))
            .collect();
        println!(
            "pool      {}{}: {}{}, demand {}",
            p.pool,
            if p.retired { " (retired)" } else { "" },
            count(total, "machine"),
            if by_state.is_empty() {
                String::new()
            } else {
                format!(" ({})", by_state.join(", "))
            },
            p.demand
        );
    }
    if s.failures.is_empty() {
        println!("failures  none among the newest 10000 runs");
    }
    for f in &s.failures {
        let how = match (f.exit_code, f.exit_signal) {
            (Some(c), _) => format!("exit {c}"),
            (None, Some(sig)) => format!("signal {sig}"),
            _ => "-".into(),
        };
        println!(
            "failed    run {} ({}) at {}, {}: {}",
            f.run,
            f.pipeline,
            f.ended_at.as_deref().unwrap_or("-"),
            how,
            printable::line(f.why.as_deref().unwrap_or(""))
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(app: Option<&str>, quiet: Option<f64>) -> Holder {
        Holder {
            app: app.map(str::to_string),
            backend: 42,
            addr: None,
            since: Some("2026-01-01T00:00:00Z".into()),
            quiet,
        }
    }

    fn row(seen_ago: f64) -> LeadingRow {
        LeadingRow {
            id: 7,
            host: "h1".into(),
            pid: 99,
            since: Some("2026-01-01T00:00:01Z".into()),
            seen_ago,
        }
    }

    const APP: &str = "orca scheduler host h1 pid 99 tag 0badcafe";

    #[test]
    fn a_scheduler_row_leads_while_its_beat_is_fresh_and_it_holds_the_lock() {
        let h = holder(Some(APP), Some(0.1));
        let l = judge_lead(Some(&h), Some(&row(1.0)), 30.0).unwrap();
        assert_eq!(l.scheduler, Some(7));
        assert_eq!(l.who, "host h1 pid 99");
        assert_eq!(l.since.as_deref(), Some("2026-01-01T00:00:01Z"));
        let e = judge_lead(Some(&h), Some(&row(31.0)), 30.0).unwrap_err();
        assert!(e.contains("last seen 31s ago"), "{e}");
        let e = judge_lead(None, Some(&row(1.0)), 30.0).unwrap_err();
        assert!(e.contains("holds no lead lock"), "{e}");
    }

    #[test]
    fn without_scheduler_rows_a_busy_scheduler_session_on_the_lock_leads() {
        let l = judge_lead(Some(&holder(Some(APP), Some(0.5))), None, 30.0).unwrap();
        assert_eq!(l.scheduler, None);
        assert_eq!(l.who, "host h1 pid 99");
        let e = judge_lead(Some(&holder(Some(APP), Some(45.0))), None, 30.0).unwrap_err();
        assert!(e.contains("quiet for 45s"), "{e}");
        let e = judge_lead(Some(&holder(Some("psql"), Some(0.0))), None, 30.0).unwrap_err();
        assert!(e.contains("no scheduler"), "{e}");
        assert_eq!(
            judge_lead(None, None, 30.0).unwrap_err(),
            "no scheduler leads"
        );
        // Another role's session: what it is can't be seen; the lock held
        // is taken as the lead, as `orca run --wait` takes it.
        assert!(judge_lead(Some(&holder(None, None)), None, 30.0).is_ok());
    }

    #[test]
    fn the_leaders_json_keeps_its_stored_keys() {
        // `orca status --json`'s `leader` is read by operators' scripts: the
        // scheduler's row id keeps the key `instance` it always had.
        let l = judge_lead(Some(&holder(Some(APP), Some(0.1))), Some(&row(1.0)), 30.0).unwrap();
        assert_eq!(
            serde_json::to_value(&l).unwrap(),
            serde_json::json!({
                "instance": 7,
                "who": "host h1 pid 99",
                "since": "2026-01-01T00:00:01Z",
            })
        );
    }
}
