//! A database of each test's own (or, for the bench, of a given name), as
//! orca's non-superuser role, and the URLs and connections tests use to
//! look at it.

use super::proc::{Proc, bin, local_machines};
use super::util::{TempDir, text, unique};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The server the tests run against (`scripts/test-db.sh` sets it).
pub fn admin_url() -> String {
    std::env::var("ORCA_TEST_DATABASE_URL")
        .expect("ORCA_TEST_DATABASE_URL is not set: run the tests with `make test`")
}

/// The role orca runs as in every test, made as the README tells operators
/// to: LOGIN, CREATEROLE, a member of `pg_signal_backend`, the owner of its
/// database, not a superuser.
pub const OWNER: &str = "orca_owner";

/// [`OWNER`]'s password (the tests' clusters check passwords over TCP).
pub const OWNER_PASSWORD: &str = "orca-owner-pw";

/// Makes [`OWNER`] on the server `admin` is on, unless it is there.
fn ensure_owner(admin: &mut postgres::Client) {
    let made = admin.batch_execute(&format!(
        "DO $$ BEGIN
           CREATE ROLE {OWNER} LOGIN CREATEROLE NOSUPERUSER PASSWORD '{OWNER_PASSWORD}' IN ROLE pg_signal_backend;
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
         END $$"
    ));
    // Two tests making it at once: the loser's error is the winner's role.
    if let Err(e) = made {
        let there: bool = admin
            .query_one(
                "SELECT count(*) > 0 FROM pg_roles WHERE rolname = $1",
                &[&OWNER],
            )
            .map(|r| r.get(0))
            .unwrap_or(false);
        assert!(there, "making {OWNER}: {e}");
    }
}

/// Runs `docs/security.md`'s SQL (the administrator's hardening) as a
/// superuser in the database `admin_db` reaches, its role `orca` being
/// [`OWNER`]: the page's own text, so the suite runs as the page says.
pub fn harden(admin_db: &str) {
    let page = std::fs::read_to_string(format!("{}/docs/security.md", env!("CARGO_MANIFEST_DIR")))
        .expect("docs/security.md");
    let start = page.find("```sql\n").expect("docs/security.md has its SQL") + 7;
    let sql = page[start..start + page[start..].find("```").unwrap()]
        .replace("TO orca;", &format!("TO {OWNER};"));
    let mut c = connect(admin_db);
    // Its REVOKE CONNECT on the server's own databases updates rows every
    // database shares: two tests' at once can collide, so it is tried again.
    let mut tries = 0;
    while let Err(e) = c.batch_execute(&sql) {
        tries += 1;
        assert!(tries < 20, "docs/security.md's SQL: {e}");
        std::thread::sleep(Duration::from_millis(50 * tries));
    }
}

/// Kills the local pool machines and instances labelled with `stack` (their
/// process groups) and removes their token directories (see the local
/// provider).
pub fn end_local_machines(stack: &str) {
    for pid in local_machines(stack) {
        // SAFETY: kill(2) on a process group a test's scheduler made.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    let prefix = format!("orca-{stack}-");
    for e in std::fs::read_dir(std::env::temp_dir())
        .into_iter()
        .flatten()
        .flatten()
    {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// `url` with its user and password replaced.
pub fn with_user(url: &str, user: &str, password: &str) -> String {
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[scheme_end..];
    let host_start = match rest.find('@') {
        Some(at) if rest[..at].find('/').is_none() => at + 1,
        _ => 0,
    };
    format!(
        "{}{user}:{password}@{}",
        &url[..scheme_end],
        &rest[host_start..]
    )
}

/// `url` with its database name replaced by `db`.
pub fn with_db(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let root = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    format!("{root}/{db}{query}")
}

/// A database of this test's own on a server, dropped at the end.
pub struct TestDb {
    /// Its URL.
    pub url: String,
    admin: String,
    name: String,
    /// Login roles made for it (roles are the server's): dropped with it.
    roles: std::cell::RefCell<Vec<String>>,
    /// Left in place when dropped (see [`TestDb::keep`]).
    keep: bool,
}

impl TestDb {
    /// A fresh, migrated database on the shared test server.
    pub fn new() -> TestDb {
        TestDb::on(&admin_url())
    }

    /// A fresh, migrated database on the server `admin` reaches, hardened
    /// as `docs/security.md` tells administrators to ([`harden`]).
    pub fn on(admin: &str) -> TestDb {
        let db = TestDb::empty_on(admin);
        db.migrate();
        db
    }

    /// A fresh, migrated database on the shared test server without
    /// `docs/security.md`'s hardening, as on RDS (where it can't be done):
    /// logins may take advisory locks there, which orca must survive.
    pub fn unhardened() -> TestDb {
        TestDb::unhardened_on(&admin_url())
    }

    /// As [`TestDb::unhardened`], on the server `admin` reaches.
    pub fn unhardened_on(admin: &str) -> TestDb {
        let db = TestDb::make(admin, &unique("orca_t"), false);
        db.migrate();
        db
    }

    fn migrate(&self) {
        let out = self.orca(&["migrate"]).output().unwrap();
        assert!(out.status.success(), "migrate: {}", text(&out.stderr));
    }

    /// A fresh, hardened database with nothing in it, owned by [`OWNER`]:
    /// its URL logs in as that role, as the README tells operators to set
    /// up.
    pub fn empty_on(admin: &str) -> TestDb {
        TestDb::make(admin, &unique("orca_t"), true)
    }

    /// A fresh, migrated database named `name` (a plain identifier) on the
    /// server `admin` reaches: one left by an earlier run is dropped first.
    /// For the bench, whose databases have names to look at them by.
    pub fn named(admin: &str, name: &str) -> TestDb {
        let db = TestDb::named_empty(admin, name);
        db.migrate();
        db
    }

    /// As [`TestDb::named`], with nothing in it (no orca schema). One left
    /// by an earlier run (kept, or its run killed) goes first, as a dropped
    /// `TestDb` goes, with its machines' and instances' logins and the
    /// roles named after it ([`TestDb::role_name`]).
    pub fn named_empty(admin: &str, name: &str) -> TestDb {
        let leftover: Vec<String> = connect(admin)
            .query(
                "SELECT rolname::text FROM pg_roles WHERE starts_with(rolname, $1)",
                &[&format!("{name}_")],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        drop(TestDb {
            url: with_user(&with_db(admin, name), OWNER, OWNER_PASSWORD),
            roles: std::cell::RefCell::new(leftover),
            admin: admin.to_string(),
            name: name.to_string(),
            keep: false,
        });
        TestDb::make(admin, name, true)
    }

    /// A role name of this database's own (`<database>_<what>`): dropped
    /// with it, and with a database of its name left by an earlier run.
    pub fn role_name(&self, what: &str) -> String {
        format!("{}_{what}", self.name)
    }

    fn make(admin: &str, name: &str, hardened: bool) -> TestDb {
        let mut c = connect(admin);
        ensure_owner(&mut c);
        c.batch_execute(&format!("CREATE DATABASE {name} OWNER {OWNER}"))
            .unwrap();
        if hardened {
            harden(&with_db(admin, name));
        }
        TestDb {
            url: with_user(&with_db(admin, name), OWNER, OWNER_PASSWORD),
            roles: Default::default(),
            admin: admin.to_string(),
            name: name.to_string(),
            keep: false,
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Leaves the database and its login roles in place when dropped (the
    /// bench's `ORCA_BENCH_KEEP`); its machines' processes still go.
    pub fn keep(&mut self) {
        self.keep = true;
    }

    /// The administrator's URL of its server (not of this database).
    pub fn admin_url(&self) -> String {
        self.admin.clone()
    }

    /// A client on it, as orca's role ([`OWNER`]).
    pub fn client(&self) -> postgres::Client {
        connect(&self.url)
    }

    /// Its URL, logging in as `user` with `password` (a machine's login).
    pub fn url_as(&self, user: &str, password: &str) -> String {
        with_user(&self.url, user, password)
    }

    /// Its URL with no user or password (what machines are given).
    pub fn url_without_user(&self) -> String {
        let scheme_end = self.url.find("://").map_or(0, |i| i + 3);
        let rest = &self.url[scheme_end..];
        match rest.find('@') {
            Some(at) => format!("{}{}", &self.url[..scheme_end], &rest[at + 1..]),
            None => self.url.clone(),
        }
    }

    /// A client logged in as `user` with `password`.
    pub fn client_as(&self, user: &str, password: &str) -> postgres::Client {
        postgres::Client::connect(&self.url_as(user, password), postgres::NoTls)
            .unwrap_or_else(|e| panic!("log in as {user}: {e}"))
    }

    /// The single value of a query with no parameters.
    pub fn one<T: for<'a> postgres::types::FromSql<'a>>(&self, sql: &str) -> T {
        self.client().query_one(sql, &[]).unwrap().get(0)
    }

    /// `orca ARGS` against this database.
    pub fn orca(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin());
        c.args(args)
            .env("ORCA_DATABASE_URL", &self.url)
            .env("RUST_LOG", "info")
            .env_remove("ORCA_CONFIG")
            .stdin(Stdio::null());
        c
    }

    /// `orca ARGS` as a machine or an instance runs it: logging in as
    /// `login` with boot token secret `secret` (no token file: the secret
    /// is not replaced), given the URL without user or password.
    pub fn orca_as(&self, login: &str, secret: &str, args: &[&str]) -> Command {
        let mut c = self.orca(args);
        c.env("ORCA_DATABASE_URL", self.url_without_user())
            .env("ORCA_TOKEN", format!("{login}:{secret}"))
            .env_remove("ORCA_TOKEN_FILE");
        c
    }

    /// `orca ARGS`, waited for.
    pub fn run(&self, args: &[&str]) -> Output {
        self.orca(args).output().unwrap()
    }

    /// `orca ARGS` that must succeed; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "orca {args:?} failed ({:?}): {}",
            out.status,
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// Registers a config given as text (as `orca.toml` in `dir`).
    pub fn register(&self, dir: &TempDir, toml: &str) {
        let path = dir.write("orca.toml", toml);
        self.ok(&["register", "-c", &path]);
    }

    /// Queues a run of `pipeline`; its id.
    pub fn queue(&self, pipeline: &str) -> i64 {
        self.ok(&["run", pipeline]).trim().parse().unwrap()
    }

    /// A scheduler with quick time constants (overridable with `env`).
    pub fn scheduler(&self, dir: &TempDir, env: &[(&str, &str)]) -> Proc {
        let mut c = self.orca(&["scheduler"]);
        c.env("ORCA_TICK_SECONDS", "0.2")
            .env("ORCA_STALE_SECONDS", "3")
            .env("ORCA_KILL_GRACE_SECONDS", "2")
            .env("ORCA_STOP_GRACE_SECONDS", "5");
        for (k, v) in env {
            c.env(k, v);
        }
        Proc::spawn(c, &dir.path(&unique("scheduler.log")))
    }

    /// A run's output as stored (its last 64 KiB; while an attempt runs,
    /// what its supervisor appended so far), as `orca logs` reads it.
    pub fn output(&self, run: i64) -> Vec<u8> {
        self.client()
            .query_one(
                "SELECT orca.output_tail(id, start, output) FROM orca.runs WHERE id = $1",
                &[&run],
            )
            .unwrap()
            .get(0)
    }

    /// A run's state.
    pub fn state(&self, run: i64) -> String {
        self.client()
            .query_one("SELECT state FROM orca.runs WHERE id = $1", &[&run])
            .unwrap()
            .get(0)
    }

    /// Makes login role `name` with password `pw`, a member of `group`;
    /// dropped with this database.
    /// Made as orca makes machine and instance logins
    /// (`orca.login_role_make`), with a plain password.
    pub fn login_role(&self, name: &str, pw: &str, group: &str) {
        self.client()
            .execute(
                "SELECT orca.login_role_make($1, $2, $3)",
                &[&name, &pw, &group],
            )
            .unwrap();
        self.roles.borrow_mut().push(name.to_string());
    }

    /// Makes plain login role `name` with password `pw` on the server (no
    /// orca schema needed); dropped with this database.
    pub fn plain_login_role(&self, name: &str, pw: &str) {
        connect(&self.admin)
            .batch_execute(&format!("CREATE ROLE \"{name}\" LOGIN PASSWORD '{pw}'"))
            .unwrap();
        self.roles.borrow_mut().push(name.to_string());
    }

    /// Makes login role `name` with password `pw` on the server, a member
    /// of [`OWNER`] (so it has orca's rights: an operator of its own);
    /// dropped with this database.
    pub fn owner_member_role(&self, name: &str, pw: &str) {
        connect(&self.admin)
            .batch_execute(&format!(
                "CREATE ROLE \"{name}\" LOGIN PASSWORD '{pw}' IN ROLE {OWNER}"
            ))
            .unwrap();
        self.roles.borrow_mut().push(name.to_string());
    }

    /// Runs `sql` as the server's administrator (not on this database).
    pub fn admin(&self, sql: &str) {
        connect(&self.admin).batch_execute(sql).unwrap();
    }

    /// Runs `sql` as the server's administrator in this database (what
    /// only a superuser may do to it: its functions' privileges).
    pub fn admin_here(&self, sql: &str) {
        connect(&with_db(&self.admin, &self.name))
            .batch_execute(sql)
            .unwrap();
    }

    /// Whether a session holds the lead lock on this database now (the
    /// server's view, `pg_locks`: after a restart, only a session made
    /// since can).
    pub fn lead_held(&self) -> bool {
        self.one(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
                             AND classid = 0 AND objid = 1869767525 AND objsubid = 1
                             AND database = (SELECT oid FROM pg_database
                                             WHERE datname = current_database()))",
        )
    }

    /// How many events of `kind` there are, of any run or none.
    pub fn events_of_kind(&self, kind: &str) -> i64 {
        self.client()
            .query_one("SELECT count(*) FROM orca.events WHERE kind = $1", &[&kind])
            .unwrap()
            .get(0)
    }

    /// How many events of `kind` run `run` has.
    pub fn events(&self, run: i64, kind: &str) -> i64 {
        self.client()
            .query_one(
                "SELECT count(*) FROM orca.events WHERE run = $1 AND kind = $2",
                &[&run, &kind],
            )
            .unwrap()
            .get(0)
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        // Local pool machines of this database's stack, and their roles.
        let stack: Option<String> = postgres::Client::connect(&self.url, postgres::NoTls)
            .ok()
            .and_then(|mut c| c.query_opt("SELECT id FROM orca.stack", &[]).ok().flatten())
            .map(|r| r.get(0));
        if let Some(stack) = &stack {
            end_local_machines(stack);
        }
        if self.keep {
            return;
        }
        if let Ok(mut c) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            // The database first: a role that still owns something in it
            // can't be dropped before.
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
            for role in self.roles.borrow().iter() {
                let _ = c.batch_execute(&format!("DROP ROLE IF EXISTS \"{role}\""));
            }
            // Its machines' and its EC2 runs' instances' logins.
            if let Some(stack) = &stack {
                let roles = c
                    .query(
                        "SELECT rolname FROM pg_roles
                         WHERE starts_with(rolname, $1) OR starts_with(rolname, $2)",
                        &[&format!("orca_m_{stack}_"), &format!("orca_i_{stack}_")],
                    )
                    .unwrap_or_default();
                for r in roles {
                    let role: String = r.get(0);
                    let _ = c.batch_execute(&format!("DROP ROLE IF EXISTS \"{role}\""));
                }
            }
        }
    }
}

/// What most tests start from: a database of their own with `toml`
/// registered, and the scratch directory holding it (and the logs of the
/// processes the test starts).
pub fn setup(toml: &str) -> (TestDb, TempDir) {
    setup_in(TestDb::new(), toml)
}

/// As [`setup`], in `db`.
pub fn setup_in(db: TestDb, toml: &str) -> (TestDb, TempDir) {
    let dir = TempDir::new();
    db.register(&dir, toml);
    (db, dir)
}

/// A plain connection (tests connect without TLS unless they test it).
pub fn connect(url: &str) -> postgres::Client {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match postgres::Client::connect(url, postgres::NoTls) {
            Ok(c) => return c,
            Err(e) if Instant::now() >= deadline => panic!("connect {url}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Asserts that `sql`, run on `c`, is refused for want of privilege.
pub fn refused(c: &mut postgres::Client, sql: &str) {
    let e = c.batch_execute(sql).unwrap_err();
    assert_eq!(
        e.code(),
        Some(&postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
        "{sql}: {e:?}"
    );
}
