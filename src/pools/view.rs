//! A pool's row as the scaler's pass and the removals thread read it
//! (`sql/pools_view.sql`): one place that turns it into a
//! [`PoolView`], shared by both.

use crate::config::Pool;
use crate::pools::decide::PoolView;

/// A pool as `sql/pools_view.sql` reads it; `None` (said) if its stored
/// spec is not one this binary reads.
pub(super) fn view_of(row: &postgres::Row) -> Option<PoolView> {
    let name: String = row.get("name");
    let pool: Pool = match serde_json::from_value(row.get("spec")) {
        Ok(p) => p,
        Err(e) => {
            log::error!(
                "pool {name}: its stored spec is not one this binary reads: {:?} error",
                e.classify()
            );
            return None;
        }
    };
    Some(PoolView {
        pool,
        retired: row.get("retired"),
        walk_type: row.get::<_, i32>("walk_type").max(0) as usize,
        walk_for: row.get("walk_for"),
        tried_ago: row.get("tried_ago"),
        status: row.get("status"),
        waiting: row.get("waiting"),
        demand: row.get("demand"),
    })
}
