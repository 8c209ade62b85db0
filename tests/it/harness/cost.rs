//! What orca's processes cost the database, as the server itself counts it:
//! sessions (`pg_stat_activity`, by login or `application_name`),
//! transactions (`pg_stat_database.xact_commit + xact_rollback` of one
//! database) and WAL (`pg_current_wal_lsn`, the whole server's).
//!
//! Read on a connection of its own to the server's `postgres` database as
//! the administrator, so the reading costs the measured database nothing.
//! Transactions are counted per database: measure in a database with
//! nothing else running in it (each test has its own). WAL is the server's:
//! a figure means something only on a server of its own ([`super::Cluster`]).
//! Backends report their counts at most once a second, so measure a steady
//! process over a window of many seconds. Autovacuum's workers count as
//! the database's too: the test database's own tables are not vacuumed
//! automatically ([`Cost::of`]), but the server's catalogs (shared ones
//! among them, which other tests change) may be, now and then, in any
//! window: [`Cost::least`] measures again when a window is over a limit.

use std::time::{Duration, Instant};

use super::db::{TestDb, connect, with_db};

/// A window's figures (see [`Cost::measure`]).
#[derive(Debug, Clone, Copy)]
pub struct Figures {
    /// How long the window was, by the database's clock (s).
    pub seconds: f64,
    /// Transactions the database committed or rolled back in it.
    pub transactions: i64,
    /// The same, per second.
    pub per_second: f64,
    /// WAL the server wrote in it, bytes per second.
    pub wal_per_second: f64,
    /// The fewest and the most sessions of the login measured, sampled
    /// every half second (`(0, 0)` when none was named).
    pub sessions: (i64, i64),
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.2} transactions/s ({} in {:.1}s), {:.0} WAL bytes/s, sessions {}..{}",
            self.per_second,
            self.transactions,
            self.seconds,
            self.wal_per_second,
            self.sessions.0,
            self.sessions.1
        )
    }
}

/// The server's view of one database.
pub struct Cost {
    admin: postgres::Client,
    datname: String,
}

/// How long [`Cost::measure`] watches before its window opens: a backend
/// reports what it did at most once a second, when it next goes idle.
const SETTLE_SECONDS: f64 = 3.0;

impl Cost {
    /// The cost of test database `db`. Its tables are analyzed and vacuumed
    /// now, and orca's not automatically from here on: autovacuum's own
    /// transactions would be counted as the database's.
    pub fn of(db: &TestDb) -> Cost {
        let mut own = connect(&with_db(&db.admin_url(), db.name()));
        own.batch_execute(
            "DO $$
             DECLARE t regclass;
             BEGIN
                 FOR t IN SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                          WHERE n.nspname = 'orca' AND c.relkind = 'r' LOOP
                     EXECUTE format('ALTER TABLE %s SET (autovacuum_enabled = false,
                                     toast.autovacuum_enabled = false)', t);
                 END LOOP;
             END $$",
        )
        .unwrap();
        // Autovacuum has nothing left to do here for a while: every table
        // analyzed, then what that left in pg_statistic vacuumed, each
        // reported at once (the server would report it later, and autovacuum
        // then find it to do).
        let report = "DO $$ BEGIN PERFORM pg_stat_force_next_flush();
                      EXCEPTION WHEN undefined_function THEN NULL; END $$";
        for step in ["ANALYZE", report, "VACUUM", report] {
            own.batch_execute(step).unwrap();
        }
        Cost::on(&db.admin_url(), db.name())
    }

    /// The cost of database `datname` on the server the administrator's
    /// `admin_url` reaches.
    pub fn on(admin_url: &str, datname: &str) -> Cost {
        Cost {
            admin: connect(&with_db(admin_url, "postgres")),
            datname: datname.to_string(),
        }
    }

    /// Sessions in the database logged in as `role`.
    pub fn sessions_of(&mut self, role: &str) -> i64 {
        self.admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND usename = $2",
                &[&self.datname, &role],
            )
            .unwrap()
            .get(0)
    }

    /// Sessions in the database whose `application_name` begins with `prefix`.
    pub fn sessions_named(&mut self, prefix: &str) -> i64 {
        self.admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = $1 AND starts_with(application_name, $2)",
                &[&self.datname, &prefix],
            )
            .unwrap()
            .get(0)
    }

    /// [`Cost::measure`], up to three windows until one is within
    /// `limit` transactions a second: the fewest of them (a process's own
    /// rate is in every window; autovacuum's work now and then adds to
    /// one), its sessions the fewest and the most over them all.
    pub fn least(&mut self, secs: f64, role: Option<&str>, limit: f64) -> Figures {
        let mut best = self.measure(secs, role);
        let (mut lo, mut hi) = best.sessions;
        for _ in 1..3 {
            if best.per_second <= limit {
                break;
            }
            let f = self.measure(secs, role);
            (lo, hi) = (lo.min(f.sessions.0), hi.max(f.sessions.1));
            if f.per_second < best.per_second {
                best = f;
            }
        }
        Figures {
            sessions: (lo, hi),
            ..best
        }
    }

    /// The database's transactions so far (committed and rolled back),
    /// where the server's WAL is (bytes), and the database's clock (s).
    pub fn now(&mut self) -> (i64, i64, f64) {
        let r = self
            .admin
            .query_one(
                "SELECT (xact_commit + xact_rollback)::bigint,
                        (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint,
                        extract(epoch FROM clock_timestamp())::float8
                 FROM pg_stat_database WHERE datname = $1",
                &[&self.datname],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2))
    }

    /// Measures the database over `secs` seconds (after a few for what
    /// happened before to be reported): its transactions and the server's
    /// WAL per second, and (when `role` is named) how many sessions that
    /// login held, sampled every half second. A measurement, not a wait: it
    /// watches for its time whatever happens.
    pub fn measure(&mut self, secs: f64, role: Option<&str>) -> Figures {
        let settled = Instant::now() + Duration::from_secs_f64(SETTLE_SECONDS);
        while Instant::now() < settled {
            std::thread::sleep(Duration::from_millis(100));
        }
        let (x0, w0, t0) = self.now();
        let mut sessions: Option<(i64, i64)> = None;
        let end = Instant::now() + Duration::from_secs_f64(secs);
        while Instant::now() < end {
            if let Some(role) = role {
                let n = self.sessions_of(role);
                let (lo, hi) = sessions.unwrap_or((n, n));
                sessions = Some((lo.min(n), hi.max(n)));
            }
            std::thread::sleep(Duration::from_millis(500).min(end - Instant::now()));
        }
        let (x1, w1, t1) = self.now();
        let seconds = t1 - t0;
        Figures {
            seconds,
            transactions: x1 - x0,
            per_second: (x1 - x0) as f64 / seconds,
            wal_per_second: (w1 - w0) as f64 / seconds,
            sessions: sessions.unwrap_or((0, 0)),
        }
    }
}
