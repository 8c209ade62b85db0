//! The migrations this binary knows (`sql/migrations/NNNN_name.sql`,
//! embedded without their whole-line comments), the lock `orca migrate`
//! applies them under, and the floor: the fewest migrations an older binary
//! running beside this one must know.

/// The advisory lock `orca migrate` holds while it applies migrations.
pub const MIGRATE_LOCK: i64 = 1869767524;

/// An embedded migration: `sql/migrations/NNNN_name.sql`.
pub struct Migration {
    /// Its number, `NNNN`.
    pub version: i32,
    /// Its name, after the number.
    pub name: &'static str,
    /// Its statements.
    pub sql: &'static str,
}

/// Every migration this binary knows, oldest first.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "core",
        sql: sql_file!("migrations/0001_core.sql"),
    },
    Migration {
        version: 2,
        name: "overlap",
        sql: sql_file!("migrations/0002_overlap.sql"),
    },
    Migration {
        version: 3,
        name: "pools",
        sql: sql_file!("migrations/0003_pools.sql"),
    },
    Migration {
        version: 4,
        name: "warm_pool",
        sql: sql_file!("migrations/0004_warm_pool.sql"),
    },
    Migration {
        version: 5,
        name: "hardening",
        sql: sql_file!("migrations/0005_hardening.sql"),
    },
    Migration {
        version: 6,
        name: "cluster",
        sql: sql_file!("migrations/0006_cluster.sql"),
    },
    Migration {
        version: 7,
        name: "codes",
        sql: sql_file!("migrations/0007_codes.sql"),
    },
    Migration {
        version: 8,
        name: "rounds",
        sql: sql_file!("migrations/0008_rounds.sql"),
    },
    Migration {
        version: 9,
        name: "claims",
        sql: sql_file!("migrations/0009_claims.sql"),
    },
    Migration {
        version: 10,
        name: "plans",
        sql: sql_file!("migrations/0010_plans.sql"),
    },
    Migration {
        version: 11,
        name: "lookups",
        sql: sql_file!("migrations/0011_lookups.sql"),
    },
    Migration {
        version: 12,
        name: "picks",
        sql: sql_file!("migrations/0012_picks.sql"),
    },
    Migration {
        version: 13,
        name: "turns",
        sql: sql_file!("migrations/0013_turns.sql"),
    },
    Migration {
        version: 14,
        name: "fewer statements",
        sql: sql_file!("migrations/0014_fewer_statements.sql"),
    },
    Migration {
        version: 15,
        name: "fold when streamed",
        sql: sql_file!("migrations/0015_fold_when_streamed.sql"),
    },
    Migration {
        version: 16,
        name: "one round",
        sql: sql_file!("migrations/0016_one_round.sql"),
    },
    Migration {
        version: 17,
        name: "max fills",
        sql: sql_file!("migrations/0017_max_fills.sql"),
    },
    Migration {
        version: 18,
        name: "history",
        sql: sql_file!("migrations/0018_history.sql"),
    },
    Migration {
        version: 19,
        name: "attempts",
        sql: sql_file!("migrations/0019_attempts.sql"),
    },
    Migration {
        version: 20,
        name: "ended",
        sql: sql_file!("migrations/0020_ended.sql"),
    },
    Migration {
        version: 21,
        name: "login_objects",
        sql: sql_file!("migrations/0021_login_objects.sql"),
    },
    Migration {
        version: 22,
        name: "on lost",
        sql: sql_file!("migrations/0022_on_lost.sql"),
    },
    Migration {
        version: 23,
        name: "login members",
        sql: sql_file!("migrations/0023_login_members.sql"),
    },
    Migration {
        version: 24,
        name: "on lost attempt",
        sql: sql_file!("migrations/0024_on_lost_attempt.sql"),
    },
    Migration {
        version: 25,
        name: "function files",
        sql: sql_file!("migrations/0025_function_files.sql"),
    },
    Migration {
        version: 26,
        name: "wake",
        sql: sql_file!("migrations/0026_wake.sql"),
    },
    Migration {
        version: 27,
        name: "wake pool",
        sql: sql_file!("migrations/0027_wake_pool.sql"),
    },
    Migration {
        version: 30,
        name: "market",
        sql: sql_file!("migrations/0030_market.sql"),
    },
    Migration {
        version: 31,
        name: "spot notice",
        sql: sql_file!("migrations/0031_spot_notice.sql"),
    },
];

/// The marker line by which a migration declares that it raises the floor:
/// a binary that knows fewer migrations can't run beside one that knows it.
pub const FLOOR_MARKER: &str = "-- orca:raises-floor";

/// How many migrations this binary knows.
pub fn migrations_known() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// The fewest migrations an older binary running beside this one must know:
/// the newest migration that declares [`FLOOR_MARKER`].
pub fn migration_floor() -> i32 {
    MIGRATIONS
        .iter()
        .filter(|m| m.sql.lines().any(|l| l.trim() == FLOOR_MARKER))
        .map(|m| m.version)
        .max()
        .unwrap_or(0)
}
