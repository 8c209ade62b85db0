//! The pools orca.toml declares, as the database keeps them (`orca.pools`):
//! registered with the pipelines, retired when the file no longer has them
//! (their machines are then removed once idle).

use postgres::Transaction;

use crate::config::Pool;
use crate::db::sql;

/// Writes `pools` and retires the pools the file no longer has. Returns the
/// names retired.
pub fn register(tx: &mut Transaction, pools: &[Pool]) -> Result<Vec<String>, postgres::Error> {
    let mut names = Vec::new();
    for p in pools {
        let spec = serde_json::to_value(p).expect("a pool serializes");
        tx.execute(sql::REGISTER_POOL, &[&p.name, &spec])?;
        names.push(p.name.clone());
    }
    Ok(tx
        .query(sql::RETIRE_POOLS, &[&names])?
        .iter()
        .map(|r| r.get("name"))
        .collect())
}
