//! A Postgres cluster of a test's own: to restart it, stop it, or turn TLS on.

use super::util::{text, unique};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

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

/// Where Postgres's programs are: `ORCA_PG_BINDIR` (`scripts/test-db.sh`
/// sets it), else the newest `/usr/lib/postgresql/*/bin`.
pub fn pg_bindir() -> Option<PathBuf> {
    if let Ok(d) = std::env::var("ORCA_PG_BINDIR") {
        return Some(PathBuf::from(d));
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
}

fn bindir() -> PathBuf {
    pg_bindir().expect("no PostgreSQL server binaries: install the postgresql package")
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

    /// Stops it at once (`-m immediate`: no shutdown checkpoint, every
    /// session cut: a crash, as clients see it). For `tests/chaos`, which
    /// shares this harness.
    #[allow(dead_code)]
    pub fn stop_immediate(&self) {
        self.ctl(&["-m", "immediate", "stop"]);
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
