//! The pipelines a leading tick sees (`sql/tick_pipelines.sql`): each
//! stored spec this binary reads, its next slot and whether it is paused,
//! and the database's clock; read once a tick and lent to each duty.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::config::Pipeline;
use crate::db::sql;
use crate::lead::{DutyError, Term};

/// A pipeline as this tick sees it: its spec, next slot, and whether paused.
pub struct View {
    /// Its stored spec.
    pub p: Arc<Pipeline>,
    /// Its next slot not yet fired (`None`: none computed yet).
    pub next_fire: Option<DateTime<Utc>>,
    /// Whether it is paused.
    pub paused: bool,
}

/// This tick's pipelines, by name.
pub type Views = HashMap<String, View>;

/// This tick's pipelines, those whose stored spec this binary reads (one
/// it can't read is said once and skipped), and the database's clock
/// (`None` when there is no pipeline), read on the lead (`term`).
pub fn pipelines(
    term: &mut Term,
    unreadable: &mut HashSet<String>,
) -> Result<(Option<DateTime<Utc>>, Views), DutyError> {
    let rows = term.prepared(sql::TICK_PIPELINES, |c, s| c.query(s, &[]))?;
    let mut now: Option<DateTime<Utc>> = None;
    let mut pipelines = HashMap::new();
    for row in &rows {
        now = Some(row.get("now"));
        let name: String = row.get("name");
        let spec: serde_json::Value = row.get("spec");
        let next_fire: Option<DateTime<Utc>> = row.get("next_fire");
        let paused: bool = row.get("paused");
        match serde_json::from_value::<Pipeline>(spec) {
            Ok(p) => {
                pipelines.insert(
                    name,
                    View {
                        p: Arc::new(p),
                        next_fire,
                        paused,
                    },
                );
            }
            Err(e) => {
                if unreadable.insert(name.clone()) {
                    log::error!(
                        "pipeline {name}: its stored spec is not one this binary reads \
                         (registered by another version?); skipping it: {:?} error",
                        e.classify()
                    );
                }
            }
        }
    }
    Ok((now, pipelines))
}
