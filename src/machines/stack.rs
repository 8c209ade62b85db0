//! This stack's id: made once and stored (`orca.stack`), it labels the
//! machines this stack makes, so several stacks sharing one provider account
//! (or one host, for the local provider) keep their machines apart.

use postgres::Client;

use crate::db::sql;

/// This stack's id, made now if there is none yet (the first writer wins).
pub fn stack_id(client: &mut Client) -> Result<String, String> {
    let fresh = crate::secrets::scram::random_hex(6)
        .map_err(|e| format!("can't read /dev/urandom: {e}"))?;
    client
        .query_one(sql::STACK_ID, &[&fresh])
        .map(|r| r.get(0))
        .map_err(|e| crate::db::plain(&e))
}
