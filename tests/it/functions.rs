//! The functions of schema `orca`: each one's current definition in one
//! file, `sql/functions/<name>.sql`, applied by `orca migrate` when it
//! changed (`orca.function_files` says which version the database has).

use crate::harness::*;
use std::collections::{BTreeMap, BTreeSet};

const FUNCTIONS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/sql/functions");
const MIGRATIONS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/sql/migrations");

/// Every function of schema `orca` (by its signature) with the id of the
/// transaction that last wrote its row: a function applied again has a new
/// one, even with the same text.
fn written(db: &TestDb) -> BTreeMap<String, String> {
    db.client()
        .query(
            "SELECT p.oid::regprocedure::text, p.xmin::text FROM pg_proc p
             WHERE p.pronamespace = 'orca'::regnamespace",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// The `.sql` files of `dir`: name without `.sql`, and text.
fn files(dir: &str) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// The names `CREATE OR REPLACE FUNCTION orca.<name>(` statements of
/// `text` define, one per statement.
fn defined(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("CREATE OR REPLACE FUNCTION orca."))
        .map(|rest| rest.split('(').next().unwrap().to_string())
        .collect()
}

#[test]
fn every_function_has_one_file_and_every_file_its_functions() {
    let db = TestDb::new();
    let mut in_db: BTreeMap<String, usize> = BTreeMap::new();
    for sig in written(&db).keys() {
        let name = sig
            .strip_prefix("orca.")
            .unwrap()
            .split('(')
            .next()
            .unwrap();
        *in_db.entry(name.to_string()).or_default() += 1;
    }
    let bodies = files(FUNCTIONS);
    assert_eq!(
        bodies.keys().collect::<BTreeSet<_>>(),
        in_db.keys().collect::<BTreeSet<_>>(),
        "a file for each function's name, a function for each file"
    );
    for (name, text) in &bodies {
        let made = defined(text);
        assert!(
            made.iter().all(|m| m == name),
            "sql/functions/{name}.sql defines {made:?}"
        );
        assert_eq!(
            made.len(),
            in_db[name],
            "sql/functions/{name}.sql defines each overload of orca.{name} once"
        );
    }
    // No migration restates a body: a trigger's first migration makes a
    // one-line stand-in at most.
    for (name, text) in files(MIGRATIONS) {
        let about_one = |l: &&str| l.contains("FUNCTION orca.") && !l.contains("EXECUTE FUNCTION");
        for line in text.lines().filter(about_one) {
            let line = line.trim();
            let stand_in = line.starts_with("CREATE FUNCTION orca.")
                && line
                    .ends_with("RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;");
            assert!(
                line.starts_with("--") || stand_in,
                "sql/migrations/{name}.sql defines a function: {line}"
            );
        }
    }
}

#[test]
fn migrate_twice_applies_no_function_again() {
    let db = TestDb::new();
    let before = written(&db);
    let versions: i64 = db.one("SELECT count(*) FROM orca.function_files");
    assert_eq!(
        versions,
        files(FUNCTIONS).len() as i64,
        "a version per file"
    );
    let out = db.ok(&["migrate"]);
    assert!(out.contains("nothing to apply"), "{out}");
    assert!(!out.contains("sql/functions/"), "{out}");
    assert_eq!(written(&db), before, "no function written again");
    assert_eq!(
        db.one::<i64>("SELECT count(*) FROM orca.migrations"),
        files(MIGRATIONS).len() as i64
    );
}

#[test]
fn a_changed_function_file_is_applied_by_the_next_migrate_and_only_it() {
    let db = TestDb::new();
    let def = |db: &TestDb| -> String {
        db.one("SELECT pg_get_functiondef('orca.worker_claim(integer)'::regprocedure)")
    };
    let current = def(&db);
    // The database has another version of the file (an older binary's):
    // its function as that one left it (here: without its settings).
    let mut c = db.client();
    c.batch_execute(
        "UPDATE orca.function_files SET hash = 'another version' WHERE name = 'worker_claim';
         ALTER FUNCTION orca.worker_claim(integer) RESET ALL;",
    )
    .unwrap();
    assert_ne!(def(&db), current);
    let before = written(&db);
    let out = db.ok(&["migrate"]);
    let applied: Vec<&str> = out.lines().filter(|l| l.starts_with("applied")).collect();
    assert_eq!(applied, ["applied sql/functions/worker_claim.sql"], "{out}");
    assert!(out.starts_with("applied") && out.contains("done:"), "{out}");
    assert_eq!(def(&db), current, "the file's definition again");
    let after = written(&db);
    for (sig, xmin) in &before {
        if sig.starts_with("orca.worker_claim(") {
            assert_ne!(&after[sig], xmin, "{sig} applied");
        } else {
            assert_eq!(&after[sig], xmin, "{sig} left alone");
        }
    }
    let hash: String = db.one("SELECT hash FROM orca.function_files WHERE name = 'worker_claim'");
    assert_eq!(hash.len(), 64, "the file's SHA-256: {hash}");
    let out = db.ok(&["migrate"]);
    assert!(out.contains("nothing to apply"), "{out}");
    assert_eq!(written(&db), after);
}

/// A database a newer binary migrated (it has a migration this binary
/// doesn't know) keeps that binary's functions: an older `orca migrate`
/// applies none, as it applies no migration.
#[test]
fn an_older_binary_leaves_a_newer_database_s_functions_alone() {
    let db = TestDb::new();
    let mut c = db.client();
    c.batch_execute(
        "INSERT INTO orca.migrations (version, name) VALUES (9999, 'from a newer binary');
         UPDATE orca.function_files SET hash = 'a newer version' WHERE name = 'worker_claim';
         ALTER FUNCTION orca.worker_claim(integer) RESET ALL;",
    )
    .unwrap();
    let before = written(&db);
    let out = db.ok(&["migrate"]);
    assert!(out.contains("nothing to apply"), "{out}");
    assert!(out.contains("from a newer binary"), "{out}");
    assert_eq!(written(&db), before, "no function written");
    let hash: String = db.one("SELECT hash FROM orca.function_files WHERE name = 'worker_claim'");
    assert_eq!(hash, "a newer version");
}

/// A function a migration dropped, its file deleted, is forgotten.
#[test]
fn a_version_of_a_file_no_longer_in_the_tree_is_forgotten() {
    let db = TestDb::new();
    db.client()
        .execute(
            "INSERT INTO orca.function_files (name, hash) VALUES ('gone', 'x')",
            &[],
        )
        .unwrap();
    db.ok(&["migrate"]);
    assert_eq!(
        db.one::<i64>("SELECT count(*) FROM orca.function_files WHERE name = 'gone'"),
        0
    );
}

/// After migrations are applied every file is applied again, its version
/// the database's or not: a migration may have dropped what it defines.
/// (Migration 24 changed only a function, so it has no statement left to
/// apply twice.)
#[test]
fn every_function_file_is_applied_after_a_migration() {
    let db = TestDb::new();
    let mut c = db.client();
    c.batch_execute(
        "DELETE FROM orca.migrations WHERE version = 24;
         DROP FUNCTION orca.bounded_why(text) CASCADE;",
    )
    .unwrap();
    let before = written(&db);
    let out = db.ok(&["migrate"]);
    assert!(out.contains("applied 0024_on lost attempt"), "{out}");
    let applied = out
        .lines()
        .filter(|l| l.starts_with("applied sql/functions/"))
        .count();
    assert_eq!(applied, files(FUNCTIONS).len(), "{out}");
    let after = written(&db);
    assert!(after.contains_key("orca.bounded_why(text)"), "made again");
    for (sig, xmin) in &before {
        assert_ne!(&after[sig], xmin, "{sig} applied again");
    }
    assert_eq!(after.len(), before.len() + 1);
}
