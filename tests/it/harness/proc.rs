//! Real orca processes and the processes runs leave: spawning with a log,
//! signals, waiting, and finding what is still alive.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The orca binary cargo built for these tests.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_orca")
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
