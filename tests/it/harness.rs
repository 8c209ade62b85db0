//! What the integration tests share: a database of their own per test, the
//! real `orca` binary as a process, clusters of their own for tests that
//! restart Postgres or need TLS, and waiting on conditions with a deadline.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The orca binary cargo built for these tests.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_orca")
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    )
}

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

/// Waits until `f` holds, polling every 100 ms; panics naming `what` when
/// `secs` pass first.
pub fn wait_until(what: &str, secs: f64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    loop {
        if f() {
            return;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {secs}s waiting for: {what}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A scratch directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new empty directory under the system's temp dir.
    pub fn new() -> TempDir {
        let p = std::env::temp_dir().join(unique("orca-test"));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    /// A path inside it.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Writes `text` to `name` inside it and returns the path as a string.
    pub fn write(&self, name: &str, text: &str) -> String {
        let p = self.path(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A database of this test's own on a server, dropped at the end.
pub struct TestDb {
    /// Its URL.
    pub url: String,
    admin: String,
    name: String,
    /// Login roles made for it (roles are the server's): dropped with it.
    roles: std::cell::RefCell<Vec<String>>,
}

impl TestDb {
    /// A fresh, migrated database on the shared test server.
    pub fn new() -> TestDb {
        TestDb::on(&admin_url())
    }

    /// A fresh, migrated database on the server `admin` reaches.
    pub fn on(admin: &str) -> TestDb {
        let db = TestDb::empty_on(admin);
        let out = db.orca(&["migrate"]).output().unwrap();
        assert!(out.status.success(), "migrate: {}", text(&out.stderr));
        db
    }

    /// A fresh database with nothing in it, owned by [`OWNER`]: its URL
    /// logs in as that role, as the README tells operators to set up.
    pub fn empty_on(admin: &str) -> TestDb {
        let name = unique("orca_t");
        let mut c = connect(admin);
        ensure_owner(&mut c);
        c.batch_execute(&format!("CREATE DATABASE {name} OWNER {OWNER}"))
            .unwrap();
        TestDb {
            url: with_user(&with_db(admin, &name), OWNER, OWNER_PASSWORD),
            roles: Default::default(),
            admin: admin.to_string(),
            name,
        }
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

    /// Registers a config given as text.
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

    /// A run's output as stored (its last 64 KiB).
    pub fn output(&self, run: i64) -> Vec<u8> {
        self.client()
            .query_one("SELECT output FROM orca.runs WHERE id = $1", &[&run])
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
            for pid in local_machines(stack) {
                // SAFETY: kill(2) on a process group this test's scheduler made.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
            }
            // Their token directories (see the local provider).
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
            if let Some(stack) = &stack {
                let roles = c
                    .query(
                        "SELECT rolname FROM pg_roles WHERE starts_with(rolname, $1)",
                        &[&format!("orca_m_{stack}_")],
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

/// Bytes as text, for messages.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A running orca process, its output in a log file; killed (SIGKILL) on drop.
pub struct Proc {
    /// The process.
    pub child: Child,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
}

impl Proc {
    /// Spawns `cmd` with its output in `log`.
    pub fn spawn(mut cmd: Command, log: &Path) -> Proc {
        let f = std::fs::File::create(log).unwrap();
        cmd.stdout(f.try_clone().unwrap()).stderr(f);
        let child = cmd.spawn().unwrap();
        Proc {
            child,
            log: log.to_path_buf(),
        }
    }

    /// Its pid.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends a signal.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.pid(), sig);
        }
    }

    /// Waits for it to exit, up to `secs`; its exit status.
    pub fn wait(&mut self, secs: f64) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs_f64(secs);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            if Instant::now() >= deadline {
                panic!(
                    "process did not exit within {secs}s; log:\n{}",
                    self.output()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM, and an exit 0 within 30 s.
    pub fn stop(&mut self) {
        self.signal(libc::SIGTERM);
        let status = self.wait(30.0);
        assert!(status.success(), "exit {status:?}; log:\n{}", self.output());
    }

    /// [`wait_until`], with its log in the panic message.
    pub fn wait_for(&self, what: &str, secs: f64, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs_f64(secs);
        while !f() {
            assert!(
                Instant::now() < deadline,
                "timed out after {secs}s waiting for: {what}; its log:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// What it has printed so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether process `pid` exists (a zombie counts as gone).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|s| s.split_whitespace().next())
                .unwrap_or("");
            state != "Z" && state != "X"
        }
        Err(_) => false,
    }
}

/// A shell command that hangs, leaving the pid of its child in `pids`.
pub fn hang(pids: &Path) -> String {
    format!("sleep 300 & echo $! >> {}; wait", pids.display())
}

/// Issue 10's D9 command: it ignores SIGTERM and leaves behind a `setsid`'d
/// shell (another session, another process group) that ignores SIGTERM too,
/// whose `sleep` appends its pid to `pidfile` (a shell word: it may name
/// `$ORCA_RUN_ID`, expanded by that shell).
pub fn escapes_and_ignores_term(pidfile: &str) -> String {
    format!(
        "trap '' TERM; (setsid sh -c 'trap \"\" TERM; echo $$ >> {pidfile}; exec sleep 1000' &); sleep 1000"
    )
}

/// `text` as a TOML basic string, quotes included.
pub fn toml_str(text: &str) -> String {
    format!("{text:?}")
}

/// SIGKILLs, when dropped, the live processes whose pids are written in the
/// `*.pid` files of a directory: a test about leftovers leaves none behind,
/// even when it fails.
pub struct KillLeftovers(pub PathBuf);

impl Drop for KillLeftovers {
    fn drop(&mut self) {
        let Ok(dir) = std::fs::read_dir(&self.0) else {
            return;
        };
        for entry in dir.flatten() {
            if entry.path().extension().is_some_and(|e| e == "pid") {
                for pid in pids_in(&entry.path()) {
                    if alive(pid) {
                        // SAFETY: kill(2) on a process this test's run started.
                        unsafe { libc::kill(pid, libc::SIGKILL) };
                    }
                }
            }
        }
    }
}

/// A shell command whose first attempt hangs (see [`hang`]); a later one
/// prints `done START`.
pub fn hang_first_attempt(pids: &Path) -> String {
    format!(
        "if [ $ORCA_RUN_START = 1 ]; then {}; fi; echo done $ORCA_RUN_START",
        hang(pids)
    )
}

/// Reads pids written one per line into `path` (missing file: none).
pub fn pids_in(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// A Postgres cluster of a test's own (to restart it, or to turn TLS on),
/// made with initdb as the `postgres` user when the tests run as root.
pub struct Cluster {
    /// Its directory (data, socket, log).
    pub dir: PathBuf,
    /// Its TCP port on 127.0.0.1 (fixed by its first start).
    port: std::cell::Cell<u16>,
    started: std::cell::Cell<bool>,
    bindir: PathBuf,
    root: bool,
}

fn bindir() -> PathBuf {
    if let Ok(d) = std::env::var("ORCA_PG_BINDIR") {
        return PathBuf::from(d);
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs.pop()
        .expect("no PostgreSQL server binaries: install the postgresql package")
}

/// A TCP port on 127.0.0.1 free when asked (not reserved: a test that
/// binds it later may, rarely, find it taken).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

impl Cluster {
    /// A new cluster (not started); `extra` is added to postgresql.conf.
    pub fn new(extra: &str) -> Cluster {
        // SAFETY: getuid(2) can't fail.
        let root = unsafe { libc::getuid() } == 0;
        let dir = std::env::temp_dir().join(unique("orca-pg"));
        std::fs::create_dir_all(&dir).unwrap();
        let c = Cluster {
            dir,
            port: std::cell::Cell::new(free_port()),
            started: std::cell::Cell::new(false),
            bindir: bindir(),
            root,
        };
        if root {
            c.sh(&["chown", "postgres", c.dir.to_str().unwrap()], false);
        }
        let initdb = c.bindir.join("initdb");
        let data = c.data();
        c.sh(
            &[
                initdb.to_str().unwrap(),
                "-D",
                &data,
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
            ],
            true,
        );
        let mut conf = std::fs::OpenOptions::new()
            .append(true)
            .open(format!("{data}/postgresql.conf"))
            .unwrap();
        writeln!(
            conf,
            "listen_addresses = '127.0.0.1'\nport = {}\nunix_socket_directories = '{}'\nfsync = off\nmax_connections = 100\n{extra}",
            c.port.get(),
            c.dir.display()
        )
        .unwrap();
        c
    }

    fn data(&self) -> String {
        format!("{}/data", self.dir.display())
    }

    /// Runs a command (as postgres when root and `as_pg`), which must succeed.
    pub fn sh(&self, argv: &[&str], as_pg: bool) {
        let mut cmd = if self.root && as_pg {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).args(argv);
            c
        } else {
            let mut c = Command::new(argv[0]);
            c.args(&argv[1..]);
            c
        };
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{argv:?}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }

    /// Lets the server read a file the test wrote (a key, a certificate).
    pub fn give(&self, path: &Path) {
        if self.root {
            self.sh(&["chown", "postgres", path.to_str().unwrap()], false);
        }
    }

    fn try_ctl(&self, args: &[&str]) -> bool {
        let pg_ctl = self.bindir.join("pg_ctl");
        let data = self.data();
        let log = format!("{}/server.log", self.dir.display());
        let mut cmd = if self.root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&pg_ctl);
            c
        } else {
            Command::new(&pg_ctl)
        };
        cmd.args(["-D", &data, "-l", &log, "-w", "-t", "60"])
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    }

    fn ctl(&self, args: &[&str]) {
        assert!(
            self.try_ctl(args),
            "pg_ctl {args:?} failed: {}",
            std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
        );
    }

    /// Starts it. The first start moves to another port if its port was
    /// taken meanwhile (it was free when chosen, but not reserved).
    pub fn start(&self) {
        if self.started.replace(true) {
            return self.ctl(&["start"]);
        }
        for _ in 0..3 {
            if self.try_ctl(&["start"]) {
                return;
            }
            self.port.set(free_port());
            let conf = format!("{}/postgresql.conf", self.data());
            let mut f = std::fs::OpenOptions::new().append(true).open(conf).unwrap();
            writeln!(f, "port = {}", self.port.get()).unwrap();
        }
        self.ctl(&["start"]);
    }

    /// Its TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port.get()
    }

    /// Stops it (fast: sessions are ended).
    pub fn stop(&self) {
        self.ctl(&["-m", "fast", "stop"]);
    }

    /// `pg_ctl restart`.
    pub fn restart(&self) {
        self.ctl(&["-m", "fast", "restart"]);
    }

    /// A superuser URL to its `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port.get())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let pg_ctl = self.bindir.join("pg_ctl");
        let data = self.data();
        let mut cmd = if self.root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&pg_ctl);
            c
        } else {
            Command::new(&pg_ctl)
        };
        let _ = cmd.args(["-D", &data, "-m", "immediate", "stop"]).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The boot processes (process group leaders) of local pool machines
/// labelled with `stack`.
pub fn local_machines(stack: &str) -> Vec<i32> {
    let want = format!("orca-stack={stack}");
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: getpgid(2) only reads.
        if unsafe { libc::getpgid(pid) } != pid {
            continue;
        }
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if env.split(|&b| b == 0).any(|kv| {
            kv.starts_with(b"ORCA_LOCAL_LABELS=") && String::from_utf8_lossy(kv).contains(&want)
        }) {
            out.push(pid);
        }
    }
    out
}

/// A registry on loopback serving one image index per repository, with the
/// architectures given.
pub fn tiny_registry(images: &[(&str, &[&str])]) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let images: Vec<(String, String)> = images
        .iter()
        .map(|(name, arches)| {
            let manifests: Vec<String> = arches
                .iter()
                .map(|a| {
                    format!(
                        r#"{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:{:0>64}","size":1,"platform":{{"architecture":"{a}","os":"linux"}}}}"#,
                        a.len()
                    )
                })
                .collect();
            (
                format!("/v2/{name}/manifests/v1"),
                format!(
                    r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{}]}}"#,
                    manifests.join(",")
                ),
            )
        })
        .collect();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let mut reader = std::io::BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                    break;
                }
            }
            let mut conn = conn;
            let reply = match images.iter().find(|(p, _)| *p == path) {
                Some((_, body)) => format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.index.v1+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                ),
                None => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    .to_string(),
            };
            let _ = conn.write_all(reply.as_bytes());
        }
    });
    addr.to_string()
}
