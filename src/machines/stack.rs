//! This stack's id: made once and stored (`orca.stack`), it labels the
//! machines this stack makes, so several stacks sharing one provider account
//! (or one host, for the local provider) keep their machines apart.

use postgres::Client;

use crate::db::sql;

/// This stack's id, made now if there is none yet (the first writer wins).
pub fn stack_id(client: &mut Client) -> Result<String, String> {
    let fresh = crate::secrets::scram::random_hex(6)
        .map_err(|e| format!("can't read /dev/urandom: {e}"))?;
    // Two first writers at once (`orca migrate` run twice together): the
    // one whose insert waited on the other's sees no row, its statement's
    // snapshot being older than the other's commit; a second statement
    // sees the stored one.
    for _ in 0..2 {
        let row = client
            .query_opt(sql::STACK_ID, &[&fresh])
            .map_err(|e| crate::db::plain(&e))?;
        if let Some(row) = row {
            return Ok(row.get(0));
        }
    }
    Err("this stack's id was neither made nor found".into())
}
