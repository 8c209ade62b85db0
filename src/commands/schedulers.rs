//! The commands about the schedulers: `orca scheduler drain`, `orca
//! schedulers` (the schedulers' rows, for history; `orca instances`, its
//! old name, still taken), `orca deploy check` and `orca deploy wait`. Each reads the stale
//! limit (`ORCA_STALE_SECONDS`) the schedulers judge each other by.

use super::{connect, pg, print_json, stale};
use crate::cli::DbOpts;
use crate::db;
use crate::exit::{Outcome, no};
use crate::lead::{self, DeployVerdict};
use crate::runs;

/// `orca scheduler drain [ID] [--force]`. Draining the only live scheduler
/// that is not draining leaves nobody to lead: refused (exit 1, "no")
/// without `force`.
pub fn drain(id: Option<i64>, force: bool, opts: &DbOpts) -> Outcome {
    let stale = stale()?;
    let mut client = connect(opts)?;
    match lead::ask_drain(&mut client, id, stale, &runs::whoami(), force).map_err(pg)? {
        lead::DrainAsked::Asked(asked) => {
            println!("asked scheduler {asked} to drain");
            Ok(())
        }
        lead::DrainAsked::Alone(alone) => Err(no(format!(
            "scheduler {alone} is the only live scheduler not draining: drained, none would lead; \
             start another first, or drain it with --force"
        ))),
        lead::DrainAsked::NoSuch => Err(no(match id {
            Some(id) => format!("no live scheduler {id}"),
            None => "no live scheduler leads".to_string(),
        })),
    }
}

/// `orca schedulers` (alias `orca instances`): live ones and those gone
/// within the hour (`all`: every one). With overlap off there are no rows
/// in `orca.schedulers`; the scheduler holding the lead is shown from the
/// lock itself.
pub fn schedulers(json: bool, all: bool, opts: &DbOpts) -> Outcome {
    let stale = stale()?;
    let mut client = connect(opts)?;
    let rows = lead::schedulers(&mut client, stale, all).map_err(pg)?;
    let unlisted_holder = if rows.iter().any(|r| r.role == "leader") {
        None
    } else {
        lead::lock::holder(&mut client)
    };
    if json {
        // One array: each scheduler's row, and a scheduler with ORCA_OVERLAP=off
        // holding the lead as one more element with the same keys.
        let mut doc: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                let mut v = serde_json::to_value(r).expect("json");
                v["overlap"] = true.into();
                v
            })
            .collect();
        if let Some(holder) = &unlisted_holder {
            doc.push(serde_json::json!({
                "id": null, "host": holder, "pid": null, "role": "leader", "image": null,
                "migrations": null, "runs": null, "seen_ago": null, "last_seen": null,
                "overlap": false,
            }));
        }
        return print_json(&doc);
    }
    println!(
        "{:>5}  {:<28} {:<9} {:<16} {:>10}  {:>4}  LAST SEEN",
        "ID", "HOST PID", "ROLE", "IMAGE", "MIGRATIONS", "RUNS"
    );
    for r in &rows {
        println!(
            "{:>5}  {:<28} {:<9} {:<16} {:>10}  {:>4}  {} ({:.0}s ago)",
            r.id,
            format!("{} {}", r.host, r.pid),
            r.role,
            if r.image.is_empty() { "-" } else { &r.image },
            r.migrations,
            r.runs,
            r.last_seen,
            r.seen_ago
        );
    }
    if let Some(holder) = unlisted_holder {
        println!("    -  {holder:<28} leader    (a scheduler with ORCA_OVERLAP=off)");
    }
    Ok(())
}

/// `orca deploy check`: exit 0 when this binary can start beside the
/// scheduler going now (nothing printed) or no scheduler runs (said); else
/// why, and exit 1.
pub fn deploy_check(opts: &DbOpts) -> Outcome {
    let stale = stale()?;
    let mut client = connect(opts)?;
    match lead::deploy_check(&mut client, stale, db::migration_floor()).map_err(pg)? {
        DeployVerdict::Clear => Ok(()),
        DeployVerdict::NoneRunning => {
            println!("no scheduler is running: nothing blocks a start");
            Ok(())
        }
        DeployVerdict::Draining(names) => {
            println!(
                "{} draining and none will lead: nothing blocks a start",
                match names.as_slice() {
                    [one] => format!("{one} is"),
                    many => format!("{} are", many.join(", ")),
                }
            );
            Ok(())
        }
        DeployVerdict::Blocked(why) => Err(no(why)),
    }
}

/// `orca deploy wait`.
pub fn deploy_wait(timeout: f64, opts: &DbOpts) -> Outcome {
    let stale = stale()?;
    let mut client = connect(opts)?;
    if lead::deploy_wait(&mut client, stale, timeout).map_err(pg)? {
        Ok(())
    } else {
        Err(no(format!(
            "the newest live scheduler does not lead after {timeout}s"
        )))
    }
}
