//! The scaler's events for decisions that have no other write (a type
//! skipped, a machine not made, no capacity, a stray deleted), on the
//! lead.

use crate::db::sql;
use crate::lead::{DutyError, Term};

/// Records a scaler decision of `kind` that has no other write, with `why`.
pub(super) fn event(term: &mut Term, kind: &str, why: &str) -> Result<(), DutyError> {
    term.run(|c| {
        c.execute(
            sql::EVENT_ADD,
            &[&None::<i64>, &None::<String>, &kind, &why],
        )
    })
    .map(|_| ())
}
