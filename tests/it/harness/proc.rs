//! Real orca processes and the processes runs leave: spawning with a log,
//! signals, waiting, and finding what is still alive (and how much memory
//! it took).

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

static BIN: OnceLock<String> = OnceLock::new();

/// The orca binary the processes run: the one cargo built for this target
/// (the tests': debug; `cargo bench`: release), unless [`use_bin`] chose
/// another.
pub fn bin() -> &'static str {
    BIN.get()
        .map(String::as_str)
        .unwrap_or(env!("CARGO_BIN_EXE_orca"))
}

/// Makes [`bin`] `path` from now on (the bench's `ORCA_BIN`). Once, before
/// the first process starts.
pub fn use_bin(path: String) {
    BIN.set(path).expect("use_bin is called once");
}

/// An exit status as a shell reports it: the code, or 128 + the signal.
pub fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1)
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
    pub fn wait(&mut self, secs: f64) -> ExitStatus {
        self.wait_exit(secs).unwrap_or_else(|| {
            panic!(
                "process did not exit within {secs}s; log:\n{}",
                self.output()
            )
        })
    }

    /// Waits for it to exit, up to `secs`: its exit status, or None if it
    /// is still running.
    pub fn wait_exit(&mut self, secs: f64) -> Option<ExitStatus> {
        let deadline = Instant::now() + Duration::from_secs_f64(secs);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM, then up to `secs` for it to exit: its exit code
    /// ([`exit_code`]). Still running then: SIGKILL to it and to the process
    /// groups of the children it had (a run leads a group of its own), and
    /// 137.
    pub fn terminate(&mut self, secs: f64) -> i32 {
        if let Some(s) = self.child.try_wait().unwrap() {
            return exit_code(s);
        }
        let kids = children(self.pid());
        self.signal(libc::SIGTERM);
        if let Some(s) = self.wait_exit(secs) {
            return exit_code(s);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        for k in kids {
            // SAFETY: kill(2) on the group a child of our own child led.
            unsafe { libc::kill(-k, libc::SIGKILL) };
        }
        137
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

    /// The last `n` lines it has printed.
    pub fn tail(&self, n: usize) -> String {
        let out = self.output();
        let lines: Vec<&str> = out.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
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

/// The pids whose parent is `pid`.
pub fn children(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // After the command's `(name)`: state, then the parent's pid.
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|s| s.split_whitespace().nth(1))
            .and_then(|s| s.parse::<i32>().ok());
        if ppid == Some(pid) {
            out.push(p);
        }
    }
    out
}

/// The peak resident set (`VmHWM`) of process `pid` in KiB, while it lives.
pub fn peak_rss_kib(pid: i32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
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

/// The processes whose `argv[0]` is `name` (a program that sets its own,
/// as perl's `$0 = ...` does, or one run by that path).
pub fn named(name: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if cmd.split(|&b| b == 0).next() == Some(name.as_bytes()) {
            out.push(pid);
        }
    }
    out
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
