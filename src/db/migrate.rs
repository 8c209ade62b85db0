//! `orca migrate`: the migrations this binary knows that the database
//! lacks, then the functions of `sql/functions/` that changed, in one
//! transaction under [`MIGRATE_LOCK`].

use std::time::Duration;

use postgres::Client;

use super::{MIGRATE_LOCK, MIGRATIONS, plain, sql};

/// Whether the database has orca's schema: false before the first `orca
/// migrate`. Needs no privilege on orca's tables (a machine's login may ask).
pub fn schema_present(client: &mut Client) -> Result<bool, postgres::Error> {
    client.query_one(sql::SCHEMA_PRESENT, &[]).map(|r| r.get(0))
}

/// What a command that needs orca's schema says before `orca migrate`.
pub const NO_SCHEMA: &str = "the database has no orca schema yet: run `orca migrate`";

/// What `orca migrate` did.
pub struct Migrated {
    /// The migrations it applied now, by version and name.
    pub applied: Vec<(i32, &'static str)>,
    /// How many the database knew before.
    pub before: i32,
    /// What it could not harden (see `sql/database_harden.sql`).
    pub warnings: Vec<String>,
}

/// The `application_name` of `orca migrate`'s session.
pub const MIGRATE_APP: &str = "orca migrate";

/// Applies the missing migrations in one transaction under [`MIGRATE_LOCK`],
/// so two at once are safe and a second run is a no-op.
pub fn migrate(client: &mut Client) -> Result<Migrated, String> {
    let mut intruders = Vec::new();
    // A prepared transaction holding the lock has no session to end.
    let prepared =
        crate::db::locks::free_from_prepared(client, MIGRATE_LOCK).map_err(|e| plain(&e))?;
    // At READ COMMITTED whatever the database's default: a migration's
    // statement that follows a lock wait (an ALTER TABLE waiting out the
    // transactions under way) must see what they committed meanwhile
    // (migration 0015 marks the attempts that have output chunks).
    let mut tx = client
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::ReadCommitted)
        .start()
        .map_err(|e| plain(&e))?;
    // Another `orca migrate` (orca's role, `orca migrate` sessions) is
    // waited for; any other session holding the lock is ended.
    loop {
        let got: bool = tx
            .query_one(sql::MIGRATE_LOCK, &[&MIGRATE_LOCK])
            .map_err(|e| plain(&e))?
            .get(0);
        if got {
            break;
        }
        let found = crate::db::locks::end_intruders(
            &mut tx,
            MIGRATE_LOCK,
            "the migration lock",
            MIGRATE_APP,
            false,
        )
        .map_err(|e| plain(&e))?;
        intruders.extend(found);
        std::thread::sleep(Duration::from_millis(100));
    }
    tx.batch_execute(sql::MIGRATIONS_TABLE)
        .map_err(|e| plain(&e))?;
    let done: Vec<i32> = tx
        .query(sql::MIGRATIONS_APPLIED, &[])
        .map_err(|e| plain(&e))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let before = done.iter().copied().max().unwrap_or(0);
    let mut applied = Vec::new();
    for m in MIGRATIONS.iter().filter(|m| !done.contains(&m.version)) {
        tx.batch_execute(m.sql)
            .map_err(|e| format!("migration {:04}_{}: {}", m.version, m.name, plain(&e)))?;
        tx.execute(sql::MIGRATION_RECORD, &[&m.version, &m.name])
            .map_err(|e| plain(&e))?;
        applied.push((m.version, m.name));
    }
    tx.commit().map_err(|e| plain(&e))?;
    let mut warnings = Vec::new();
    if let Err(e) = client.batch_execute(sql::DATABASE_HARDEN) {
        warnings.push(format!(
            "can't revoke TEMPORARY on this database from PUBLIC ({}): machine logins can make temporary objects until the database's owner or a superuser does (docs/security.md)",
            plain(&e)
        ));
    }
    match crate::db::locks::database_warnings(client) {
        Ok(w) => warnings.extend(w),
        Err(e) => warnings.push(format!("can't read the server's settings: {}", plain(&e))),
    }
    let whys = intruders
        .iter()
        .map(|i| i.describe("the migration lock"))
        .chain(prepared.iter().map(|p| format!("the migration lock: {p}")));
    for why in whys {
        let _ = crate::db::locks::record(client, &why);
    }
    Ok(Migrated {
        applied,
        before,
        warnings,
    })
}

/// How many migrations the database has had applied (0 before the first).
pub fn migrations_applied(client: &mut Client) -> Result<i32, postgres::Error> {
    if !schema_present(client)? {
        return Ok(0);
    }
    client
        .query_one(sql::MIGRATIONS_COUNT, &[])
        .map(|r| r.get(0))
}

