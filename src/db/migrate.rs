//! `orca migrate`: the migrations this binary knows that the database
//! lacks, then the functions of `sql/functions/` that changed, in one
//! transaction under [`MIGRATE_LOCK`].

use std::collections::HashMap;
use std::time::Duration;

use postgres::{Client, Transaction};

use super::fault::plain;
use super::migrations::{MIGRATE_LOCK, MIGRATIONS, migrations_known};
use super::sql;

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
    /// The `sql/functions/` files it applied now, by name.
    pub functions: Vec<&'static str>,
    /// How many the database knew before.
    pub before: i32,
    /// What it could not harden (see `sql/database_harden.sql`).
    pub warnings: Vec<String>,
}

/// The `application_name` of `orca migrate`'s session.
pub const MIGRATE_APP: &str = "orca migrate";

/// Applies the missing migrations, then the `sql/functions/` files that
/// changed ([`function_step`]), in one transaction under [`MIGRATE_LOCK`],
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
    let functions = apply_functions(&mut tx, !applied.is_empty(), before > migrations_known())?;
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
        functions,
        before,
        warnings,
    })
}

/// What `orca migrate` does with a file of `sql/functions/`.
#[derive(Debug, PartialEq, Eq)]
pub enum FunctionStep {
    /// The database has another version of it, or none, or this
    /// `orca migrate` applied migrations (which may have dropped or changed
    /// what it defines): applied.
    Apply,
    /// The database has this version and no migration was applied: not
    /// applied again.
    Current,
    /// The database has migrations this binary doesn't know: its functions
    /// are a newer binary's, left as they are.
    Newer,
}

/// What `orca migrate` does with a file whose text has SHA-256 `hash`, the
/// database having had version `had` of it (`None`: never), `migrated` when
/// this `orca migrate` applied migrations, and `database_newer` when the
/// database has migrations this binary doesn't know. A function change
/// that an older binary's `orca migrate` must not undo comes with a
/// migration.
pub fn function_step(
    hash: &str,
    had: Option<&str>,
    migrated: bool,
    database_newer: bool,
) -> FunctionStep {
    if database_newer {
        if had == Some(hash) {
            FunctionStep::Current
        } else {
            FunctionStep::Newer
        }
    } else if had == Some(hash) && !migrated {
        FunctionStep::Current
    } else {
        FunctionStep::Apply
    }
}

/// The SHA-256 of `text`, in hex.
fn sha256_hex(text: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, text.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Applies the files of [`sql::FUNCTIONS`] that [`function_step`] says to,
/// in `tx` (after the migrations), and records their versions; the names
/// of those applied.
fn apply_functions(
    tx: &mut Transaction<'_>,
    migrated: bool,
    database_newer: bool,
) -> Result<Vec<&'static str>, String> {
    let had: HashMap<String, String> = tx
        .query(sql::FUNCTION_FILES, &[])
        .map_err(|e| plain(&e))?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut applied = Vec::new();
    for &(name, text) in sql::FUNCTIONS {
        let hash = sha256_hex(text);
        let had = had.get(name).map(String::as_str);
        match function_step(&hash, had, migrated, database_newer) {
            FunctionStep::Apply => {
                tx.batch_execute(text)
                    .map_err(|e| format!("sql/functions/{name}.sql: {}", plain(&e)))?;
                tx.execute(sql::FUNCTION_FILE_RECORD, &[&name, &hash])
                    .map_err(|e| plain(&e))?;
                applied.push(name);
            }
            FunctionStep::Current | FunctionStep::Newer => {}
        }
    }
    if !database_newer {
        let names: Vec<&str> = sql::FUNCTIONS.iter().map(|(n, _)| *n).collect();
        tx.execute(sql::FUNCTION_FILES_FORGET, &[&names])
            .map_err(|e| plain(&e))?;
    }
    Ok(applied)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_function_file_is_applied_when_its_version_is_not_the_database_s() {
        assert_eq!(function_step("b", None, false, false), FunctionStep::Apply);
        assert_eq!(
            function_step("b", Some("a"), false, false),
            FunctionStep::Apply
        );
        assert_eq!(
            function_step("b", Some("b"), false, false),
            FunctionStep::Current
        );
    }

    #[test]
    fn every_function_file_is_applied_after_migrations() {
        // A migration may have dropped what the file defines (a DROP
        // FUNCTION, a DROP TABLE ... CASCADE of a type in its signature).
        assert_eq!(
            function_step("b", Some("b"), true, false),
            FunctionStep::Apply
        );
        assert_eq!(
            function_step("b", Some("a"), true, false),
            FunctionStep::Apply
        );
    }

    #[test]
    fn a_newer_binary_s_functions_are_left_to_it() {
        for migrated in [false, true] {
            assert_eq!(
                function_step("b", Some("a"), migrated, true),
                FunctionStep::Newer
            );
            assert_eq!(
                function_step("b", None, migrated, true),
                FunctionStep::Newer
            );
            assert_eq!(
                function_step("b", Some("b"), migrated, true),
                FunctionStep::Current
            );
        }
    }

    #[test]
    fn a_version_is_its_text_s_sha256() {
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn every_function_file_is_embedded_once_in_name_order() {
        let names: Vec<&str> = sql::FUNCTIONS.iter().map(|(n, _)| *n).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(names, sorted);
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/sql/functions");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        let embedded: Vec<String> = names.iter().map(|n| format!("{n}.sql")).collect();
        assert_eq!(
            files, embedded,
            "regenerate src/db/sql.rs: scripts/gen-sql-rs.sh"
        );
    }
}
