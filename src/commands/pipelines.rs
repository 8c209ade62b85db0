//! `orca pipelines`: each pipeline as it stands, in one read
//! (`sql/pipelines_list.sql`): placement, schedule and next fire (UTC),
//! paused, `max_runs`, runs running and queued, and its last ended run.

use serde::Serialize;

use super::{connect, pg, print_json};
use crate::cli::DbOpts;
use crate::db::sql;
use crate::exit::Outcome;
use crate::printable;

/// A pipeline as `orca pipelines` shows it.
#[derive(Serialize, Debug)]
pub struct PipelineRow {
    /// Its name.
    pub name: String,
    /// `local`, `worker:<pool>` or `ec2`.
    pub placement: String,
    /// Its cron schedule (UTC), if it has one.
    pub schedule: Option<String>,
    /// The next slot it fires for (UTC), if scheduled.
    pub next_fire: Option<String>,
    /// Paused: it fires and starts nothing until resumed.
    pub paused: bool,
    /// Retired: gone from orca.toml (listed with `--all` only).
    pub retired: bool,
    /// Runs it may have running at once.
    pub max_runs: i32,
    /// What a lost supervisor means for its runs: `retry` or `fail`.
    pub on_lost: String,
    /// Its runs running now.
    pub running: i64,
    /// Its runs queued now (retries waiting among them).
    pub queued: i64,
    /// Its last ended run, if any.
    pub last: Option<LastRun>,
}

/// A pipeline's last ended run.
#[derive(Serialize, Debug)]
pub struct LastRun {
    /// Its id.
    pub id: i64,
    /// succeeded, failed or cancelled.
    pub state: String,
    /// Its exit code.
    pub exit_code: Option<i32>,
    /// The signal that ended it.
    pub exit_signal: Option<i32>,
    /// When it ended (UTC).
    pub ended_at: Option<String>,
}

impl LastRun {
    /// `succeeded`, `failed (exit 3)`, `failed (signal 9)`, `cancelled`.
    fn outcome(&self) -> String {
        match (self.exit_code, self.exit_signal) {
            (Some(c), _) if self.state == "failed" => format!("failed (exit {c})"),
            (None, Some(s)) if self.state == "failed" => format!("failed (signal {s})"),
            _ => self.state.clone(),
        }
    }
}

/// `orca pipelines [--all] [--json]`.
pub fn pipelines(all: bool, json: bool, opts: &DbOpts) -> Outcome {
    let mut client = connect(opts)?;
    let rows: Vec<PipelineRow> = client
        .query(sql::PIPELINES_LIST, &[&all])
        .map_err(pg)?
        .iter()
        .map(|r| PipelineRow {
            name: r.get("name"),
            placement: r.get("placement"),
            schedule: r.get("schedule"),
            next_fire: r.get("next_fire"),
            paused: r.get("paused"),
            retired: r.get("retired"),
            max_runs: r.get("max_runs"),
            on_lost: r.get("on_lost"),
            running: r.get("running"),
            queued: r.get("queued"),
            last: r.get::<_, Option<i64>>("last_id").map(|id| LastRun {
                id,
                state: r.get("last_state"),
                exit_code: r.get("last_exit_code"),
                exit_signal: r.get("last_exit_signal"),
                ended_at: r.get("last_ended_at"),
            }),
        })
        .collect();
    if json {
        return print_json(&rows);
    }
    println!(
        "{:<20} {:<16} {:<16} {:<20}  {:<7} {:>4} {:<7} {:>7} {:>6}  LAST RUN",
        "PIPELINE",
        "PLACEMENT",
        "SCHEDULE",
        "NEXT FIRE",
        "PAUSED",
        "MAX",
        "ON LOST",
        "RUNNING",
        "QUEUED"
    );
    for p in &rows {
        let name = if p.retired {
            format!("{} (retired)", p.name)
        } else {
            p.name.clone()
        };
        let last = p.last.as_ref().map_or("-".to_string(), |l| {
            format!(
                "run {} {} at {}",
                l.id,
                l.outcome(),
                l.ended_at.as_deref().unwrap_or("-")
            )
        });
        println!(
            "{:<20} {:<16} {:<16} {:<20}  {:<7} {:>4} {:<7} {:>7} {:>6}  {}",
            name,
            p.placement,
            printable::line(p.schedule.as_deref().unwrap_or("-")),
            p.next_fire.as_deref().unwrap_or("-"),
            if p.paused { "yes" } else { "no" },
            p.max_runs,
            p.on_lost,
            p.running,
            p.queued,
            last
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_run_s_outcome_says_how_it_ended() {
        let last = |state: &str, code, signal| LastRun {
            id: 1,
            state: state.into(),
            exit_code: code,
            exit_signal: signal,
            ended_at: None,
        };
        assert_eq!(last("failed", Some(3), None).outcome(), "failed (exit 3)");
        assert_eq!(last("failed", None, Some(9)).outcome(), "failed (signal 9)");
        assert_eq!(last("failed", None, None).outcome(), "failed");
        assert_eq!(last("succeeded", Some(0), None).outcome(), "succeeded");
        assert_eq!(last("cancelled", None, Some(15)).outcome(), "cancelled");
    }
}
