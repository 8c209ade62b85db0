//! Registering what `orca.toml` declares: its pipelines (`orca.pipelines`)
//! and pools (`orca.pools`, see [`crate::config::pools`]) written in one
//! transaction, and those the file no longer has retired. `orca register`
//! calls it, and so does `orca scheduler -c` once it leads.
//!
//! Invariants:
//! * All or nothing: a file is registered whole, or not at all.
//! * A pipeline's stored spec is its serialized [`crate::config::Pipeline`]:
//!   other binary versions and plpgsql read it, so it changes compatibly.

use postgres::Client;

use crate::config::Config;
use crate::db::sql;

/// Writes `config`'s pipelines and pools in one transaction and retires the
/// ones it no longer has. Returns the names retired (pools as `pool NAME`).
pub fn register(client: &mut Client, config: &Config) -> Result<Vec<String>, postgres::Error> {
    let mut tx = client.transaction()?;
    let mut names = Vec::new();
    for p in &config.pipelines {
        let spec = serde_json::to_value(p).expect("a pipeline serializes");
        tx.execute(
            sql::REGISTER_PIPELINE,
            &[
                &p.name,
                &spec,
                &p.placement.as_text(),
                &p.max_runs,
                &p.schedule,
                &p.on_lost.as_text(),
            ],
        )?;
        names.push(p.name.clone());
    }
    let mut retired: Vec<String> = tx
        .query(sql::RETIRE_PIPELINES, &[&names])?
        .iter()
        .map(|r| r.get("name"))
        .collect();
    for pool in crate::config::pools::register(&mut tx, &config.pools)? {
        retired.push(format!("pool {pool}"));
    }
    tx.commit()?;
    Ok(retired)
}
