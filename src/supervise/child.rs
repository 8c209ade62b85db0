//! Child processes: a run's (or a sensor's) command in a process group of its
//! own that can't outlive the process that started it, with the tail of its
//! output kept in memory.
//!
//! `PR_SET_PDEATHSIG` only reaches a parent's direct child, and a command
//! such as `sh -c 'a; b'` has children of its own. So every command is started
//! under a shim, `orca __shim CMD...`: the leader of a new process group,
//! whose parent-death signal makes it kill that whole group. The shim waits
//! for the command and leaves with its status (the same exit code, or the same
//! signal re-raised), so the supervisor sees the command's own outcome.
//!
//! The shim is also the child subreaper of everything under it, so what
//! leaves the group (`setsid`, a double fork) is reparented to it when its
//! parent ends, and is found in its list of children. Killing is therefore
//! the shim's job: asked with SIGUSR1 (to it alone, see [`Child::kill_all`]),
//! it SIGKILLs its command and every descendant it has, in the group or
//! not, walking its list of children again until none is left, and then
//! leaves with the command's status. SIGKILL to the whole group, which would
//! kill the shim first and leave what escaped the group to init, is only the
//! last resort for a shim that doesn't end within [`SHIM_KILL_SECONDS`].

use std::collections::VecDeque;
use std::ffi::{CString, OsString};
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::runs::Exit;

/// How much of a run's output is kept: the last 64 KiB.
pub const TAIL_BYTES: usize = 64 * 1024;

/// The name of the hidden subcommand the shim runs as.
pub const SHIM: &str = "__shim";

/// How long the shim has, once asked to kill its command and everything it
/// started, before its whole group gets SIGKILL (the last resort).
pub const SHIM_KILL_SECONDS: f64 = 5.0;

/// The signal that asks the shim to kill everything under it.
const KILL_ALL: i32 = libc::SIGUSR1;

const SHIM_PARENT: &str = "ORCA_SHIM_PARENT";

/// `UID:GID` the shim's command runs as (`ORCA_RUN_AS`), when set.
const SHIM_RUN_AS: &str = "ORCA_SHIM_RUN_AS";

/// The last [`TAIL_BYTES`] of a child's stdout and stderr, interleaved, and
/// where they are in everything it wrote (its output stream).
#[derive(Default)]
pub struct Tail {
    kept: Mutex<Kept>,
    /// The pipe reached its end: every writer is gone, all is read.
    done: std::sync::atomic::AtomicBool,
}

/// What a [`Tail`] holds.
#[derive(Default)]
struct Kept {
    /// The last bytes of the stream, at most [`TAIL_BYTES`].
    bytes: VecDeque<u8>,
    /// How many bytes the stream has had in all.
    total: u64,
}

impl Tail {
    /// Keeps `data`, which the child wrote next.
    pub(super) fn push(&self, data: &[u8]) {
        let mut kept = self.kept.lock().expect("tail lock");
        kept.bytes.extend(data);
        kept.total += data.len() as u64;
        let excess = kept.bytes.len().saturating_sub(TAIL_BYTES);
        kept.bytes.drain(..excess);
    }

    /// A copy of what is kept now.
    pub fn snapshot(&self) -> Vec<u8> {
        let kept = self.kept.lock().expect("tail lock");
        kept.bytes.iter().copied().collect()
    }

    /// How many bytes the child has written so far: where its stream ends.
    pub fn total(&self) -> u64 {
        self.kept.lock().expect("tail lock").total
    }

    /// What follows byte `from` of the stream, as much of it as is kept:
    /// where that begins in the stream (`from`, or later when more than
    /// what is kept came since), and the bytes.
    pub fn since(&self, from: u64) -> (u64, Vec<u8>) {
        let kept = self.kept.lock().expect("tail lock");
        let first = kept.total - kept.bytes.len() as u64;
        let at = from.clamp(first, kept.total);
        let skip = (at - first) as usize;
        (at, kept.bytes.iter().skip(skip).copied().collect())
    }

    /// Waits, at most `limit`, until everything written to the pipe has
    /// been read (its writers are gone once the shim has ended, so this is
    /// at once but for the reading thread's turn). True if it has.
    pub fn drained(&self, limit: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        while !self.done.load(Ordering::Acquire) {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        true
    }
}

/// A command started under the shim.
pub struct Child {
    /// Its process group (the shim's pid).
    pub pgid: i32,
    /// How the shim ended, once reaped (its pid is not waited for again:
    /// it may be another process's by then).
    status: Option<ExitStatus>,
    /// Its output.
    pub tail: Arc<Tail>,
    /// When the shim was asked to kill everything, and whether its group
    /// got SIGKILL since (the last resort).
    killing: Option<(Instant, bool)>,
}

impl Child {
    /// Starts `argv` under the shim with `env` added, in a new process group.
    /// Of orca's own environment only what [`passed_on`] allows reaches it
    /// (not the shim either): no secret of orca's, and not the local
    /// provider's machine labels (`ORCA_LOCAL_*`), so a run's process is
    /// never taken for a machine.
    /// Call from a thread that lives as long as the process (the main
    /// thread): the parent-death signal fires when the starting thread ends.
    pub fn spawn(argv: &[String], env: &[(String, String)]) -> std::io::Result<Child> {
        let (reader, writer) = std::io::pipe()?;
        // Later settings win over earlier ones of the same name: orca's own
        // environment first (but what the run sets itself), then the run's.
        let mut own: Vec<(OsString, OsString)> = Vec::with_capacity(env.len() + 5);
        let mut set = |k: OsString, v: OsString| {
            own.retain(|(have, _)| *have != k);
            own.push((k, v));
        };
        for (k, v) in env {
            set(k.into(), v.into());
        }
        set(SHIM_PARENT.into(), std::process::id().to_string().into());
        if let Some(user) = crate::secrets::run_as() {
            set(
                SHIM_RUN_AS.into(),
                format!("{}:{}", user.uid, user.gid).into(),
            );
            set("HOME".into(), user.home.clone().into());
            set("USER".into(), user.name.clone().into());
            set("LOGNAME".into(), user.name.clone().into());
        }
        let inherited: Vec<&CString> = inherited()
            .iter()
            .filter(|(k, _)| !own.iter().any(|(o, _)| o == k))
            .map(|(_, kv)| kv)
            .collect();
        let mut args: Vec<OsString> = vec!["orca".into(), SHIM.into(), "--".into()];
        args.extend(argv.iter().map(OsString::from));
        let pid = spawn_shim(&args, &inherited, &own, &writer)?;
        drop(writer); // our copy of the pipe's write end
        let tail = Arc::new(Tail::default());
        let sink = tail.clone();
        std::thread::Builder::new()
            .name("output".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                let mut reader = reader;
                let mut buf = [0u8; 8192];
                loop {
                    match reader.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => sink.push(&buf[..n]),
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                }
                sink.done.store(true, Ordering::Release);
            })?;
        Ok(Child {
            pgid: pid,
            status: None,
            tail,
            killing: None,
        })
    }

    /// The shim's pid.
    pub fn pid(&self) -> i32 {
        self.pgid
    }

    /// Whether it has ended, without waiting. Once it has, what is left of
    /// its group (daemons it left behind) is killed.
    pub fn try_exit(&mut self) -> Option<Exit> {
        if let Some(status) = self.status {
            return Some(Exit::from_status(status));
        }
        let mut raw = 0;
        loop {
            // SAFETY: waitpid(2) on our own child, not reaped yet.
            let got = unsafe { libc::waitpid(self.pgid, &mut raw, libc::WNOHANG) };
            if got == 0 {
                return None;
            }
            if got < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
            {
                continue;
            }
            if got != self.pgid {
                return Some(Exit::Code(-1));
            }
            let status = ExitStatus::from_raw(raw);
            self.status = Some(status);
            signal_group(self.pgid, libc::SIGKILL);
            return Some(Exit::from_status(status));
        }
    }

    /// Kills the command and everything it started, without waiting: the
    /// first call asks the shim (SIGUSR1 to the shim alone), which SIGKILLs
    /// its command and every descendant, those that left the group too, and
    /// then ends with the command's status ([`Child::try_exit`]). Call it
    /// again until the shim has ended: once [`SHIM_KILL_SECONDS`] have
    /// passed with the shim still there, its whole group gets SIGKILL (the
    /// last resort; what left the group may then live on).
    pub fn kill_all(&mut self) {
        match self.killing {
            None => {
                // SAFETY: kill(2) on our own child, not reaped yet (so its
                // pid is not reused).
                unsafe { libc::kill(self.pgid, KILL_ALL) };
                self.killing = Some((Instant::now(), false));
            }
            Some((asked, false)) if asked.elapsed().as_secs_f64() >= SHIM_KILL_SECONDS => {
                log::warn!(
                    "shim {} did not end {SHIM_KILL_SECONDS}s after it was asked to kill its command: SIGKILL to its process group",
                    self.pgid
                );
                signal_group(self.pgid, libc::SIGKILL);
                self.killing = Some((asked, true));
            }
            Some(_) => {}
        }
    }

    /// Whether [`Child::kill_all`] was called.
    pub fn killing(&self) -> bool {
        self.killing.is_some()
    }

    /// [`Child::kill_all`], and waits for the end (at most a little over
    /// [`SHIM_KILL_SECONDS`]), leaving no zombie. Not for the tick: see
    /// [`Child::kill`].
    pub fn kill_and_wait(mut self) {
        loop {
            self.kill_all();
            if self.try_exit().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// [`Child::kill_and_wait`] on a thread of its own: returns at once
    /// (waits only if no thread can be started).
    pub fn kill(mut self) {
        self.kill_all();
        let slot = Arc::new(Mutex::new(Some(self)));
        let theirs = slot.clone();
        let spawned = std::thread::Builder::new()
            .name("reap".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                let child = theirs.lock().expect("reap slot").take();
                if let Some(c) = child {
                    c.kill_and_wait();
                }
            });
        if spawned.is_err() {
            let child = slot.lock().expect("reap slot").take();
            if let Some(c) = child {
                c.kill_and_wait();
            }
        }
    }

    /// Sends `sig` to its whole process group.
    pub fn signal(&self, sig: i32) {
        signal_group(self.pgid, sig);
    }
}

/// Whether variable `key` of orca's own environment is passed on to a
/// command it runs. Not orca's settings and secrets (every `ORCA_*`: the
/// database URL, a machine's token, the local provider's machine labels),
/// not Postgres's client settings (every `PG*`: `PGPASSWORD`, `PGPASSFILE`,
/// `PGSSLKEY`, `PGSERVICEFILE`...), not AWS credentials (every `AWS_*` but
/// the region). A pipeline that needs one sets it in its `env`; orca sets
/// `ORCA_RUN_ID`, `ORCA_RUN_START` and `ORCA_PIPELINE` itself, and on an
/// EC2 run's instance `ORCA_INSTANCE`, `ORCA_HEAD_ADDRESS` and
/// `ORCA_WORKER_ADDRESSES` (addresses, not secrets).
pub fn passed_on(key: &std::ffi::OsStr) -> bool {
    let Some(key) = key.to_str() else {
        return false;
    };
    let upper = key.to_ascii_uppercase();
    !(upper.starts_with("ORCA_")
        || upper.starts_with("PG")
        || (upper.starts_with("AWS_") && upper != "AWS_REGION" && upper != "AWS_DEFAULT_REGION"))
}

/// Orca's own environment as a run gets it (what [`passed_on`] allows), as
/// each variable's name and its `NAME=value` entry, read once: it doesn't
/// change once orca runs (`secrets::protect` moves its secrets first
/// thing). A variable with a NUL byte (it can't have one) is left out.
fn inherited() -> &'static [(OsString, CString)] {
    static INHERITED: std::sync::OnceLock<Vec<(OsString, CString)>> = std::sync::OnceLock::new();
    INHERITED.get_or_init(|| {
        use std::os::unix::ffi::OsStrExt;
        std::env::vars_os()
            .filter(|(k, _)| passed_on(k))
            .filter_map(|(k, v)| {
                let kv = CString::new([k.as_bytes(), b"=", v.as_bytes()].concat()).ok()?;
                Some((k, kv))
            })
            .collect()
    })
}

/// Starts the shim, `/proc/self/exe` with `args` (its `argv`, `argv[0]`
/// first) and only `inherited` (`NAME=value`) and `vars` as its
/// environment, its stdin `/dev/null`, its
/// stdout and stderr `out`; in a new session (so a new process group, led
/// by it) with no controlling terminal: a command can't type into the
/// terminal orca was started from (TIOCSTI) nor be signalled through it.
/// Its signal mask is [`KILL_ALL`] alone, so one sent before the shim is
/// ready waits for it instead of killing it alone; SIGPIPE is back to its
/// default (orca ignores it). Its pid.
fn spawn_shim(
    args: &[OsString],
    inherited: &[&CString],
    vars: &[(OsString, OsString)],
    out: &std::io::PipeWriter,
) -> std::io::Result<i32> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // The write end as a descriptor above stderr's (dup2 onto itself would
    // leave it close-on-exec), closed again when this returns.
    // SAFETY: fcntl(2) on a descriptor we own; the new one is ours.
    let above = unsafe { libc::fcntl(out.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if above < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `above` was just made and nothing else owns it.
    let above = unsafe { OwnedFd::from_raw_fd(above) };
    spawn(&Spawn {
        program: b"/proc/self/exe",
        search: false,
        argv: args,
        inherited,
        vars,
        new_session: true,
        mask: &[KILL_ALL],
        default: &[libc::SIGPIPE],
        out: Some(above.as_raw_fd()),
    })
}

/// Where `program` is, as `execvp(3)` finds it: itself if it has a `/`,
/// else the first executable file of that name in a `PATH` directory.
fn found(program: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if program.contains('/') {
        return Some(program.into());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// How [`spawn`] starts a process.
struct Spawn<'a> {
    /// What it runs: a path, or with `search` a name looked up in `PATH`
    /// (as `execvp(3)` does) when it has no `/`.
    program: &'a [u8],
    search: bool,
    /// Its `argv`, `argv[0]` first.
    argv: &'a [OsString],
    /// Its whole environment: entries made already (`NAME=value`), and
    /// more.
    inherited: &'a [&'a CString],
    vars: &'a [(OsString, OsString)],
    /// In a new session (so a new process group, led by it) with no
    /// controlling terminal, or in this one's.
    new_session: bool,
    /// Its signal mask.
    mask: &'a [libc::c_int],
    /// Signals whose action it starts with at their default (an action this
    /// process ignores is otherwise kept across exec).
    default: &'a [libc::c_int],
    /// Its stdin `/dev/null` and its stdout and stderr this descriptor (one
    /// above stderr's); or all three this process's.
    out: Option<std::os::fd::RawFd>,
}

/// Starts a process as `s` says, with `posix_spawn(3)`, not fork and exec:
/// the C library starts it without copying this process's memory map (a
/// vfork), what every run's start costs twice, the shim's and its
/// command's (issue 14's starts a second). Its pid.
fn spawn(s: &Spawn) -> std::io::Result<i32> {
    use std::os::unix::ffi::OsStrExt;
    let c = |b: &[u8]| {
        CString::new(b).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a NUL byte in the command or its environment",
            )
        })
    };
    let program = c(s.program)?;
    let argv: Vec<CString> = s
        .argv
        .iter()
        .map(|a| c(a.as_bytes()))
        .collect::<Result<_, _>>()?;
    let envp: Vec<CString> = s
        .vars
        .iter()
        .map(|(k, v)| c(&[k.as_bytes(), b"=", v.as_bytes()].concat()))
        .collect::<Result<_, _>>()?;
    let envp: Vec<&CString> = s.inherited.iter().copied().chain(&envp).collect();
    let mut argv_p: Vec<*mut libc::c_char> = argv.iter().map(|a| a.as_ptr() as *mut _).collect();
    argv_p.push(std::ptr::null_mut());
    let mut envp_p: Vec<*mut libc::c_char> = envp.iter().map(|e| e.as_ptr() as *mut _).collect();
    envp_p.push(std::ptr::null_mut());
    let check = |r: libc::c_int| match r {
        0 => Ok(()),
        e => Err(std::io::Error::from_raw_os_error(e)),
    };
    // SAFETY: the attributes and file actions are initialised before use
    // and destroyed after; every pointer passed lives until posix_spawn
    // returns (the C strings, their arrays, the path).
    unsafe {
        let mut attr: libc::posix_spawnattr_t = std::mem::zeroed();
        check(libc::posix_spawnattr_init(&mut attr))?;
        let mut actions: libc::posix_spawn_file_actions_t = std::mem::zeroed();
        if let Err(e) = check(libc::posix_spawn_file_actions_init(&mut actions)) {
            libc::posix_spawnattr_destroy(&mut attr);
            return Err(e);
        }
        let set = |signals: &[libc::c_int]| {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for &sig in signals {
                libc::sigaddset(&mut set, sig);
            }
            set
        };
        let (mask, default) = (set(s.mask), set(s.default));
        // (The constants' types differ between C libraries.)
        #[allow(clippy::unnecessary_cast)]
        let mut flags = libc::POSIX_SPAWN_SETSIGMASK as i32 | libc::POSIX_SPAWN_SETSIGDEF as i32;
        if s.new_session {
            #[allow(clippy::unnecessary_cast)]
            {
                flags |= libc::POSIX_SPAWN_SETSID as i32;
            }
        }
        let mut pid: libc::pid_t = 0;
        let mut ready = check(libc::posix_spawnattr_setsigmask(&mut attr, &mask))
            .and_then(|()| check(libc::posix_spawnattr_setsigdefault(&mut attr, &default)))
            .and_then(|()| {
                check(libc::posix_spawnattr_setflags(
                    &mut attr,
                    flags as libc::c_short,
                ))
            });
        if let Some(out) = s.out {
            ready = ready
                .and_then(|()| {
                    check(libc::posix_spawn_file_actions_addopen(
                        &mut actions,
                        0,
                        c"/dev/null".as_ptr(),
                        libc::O_RDONLY,
                        0,
                    ))
                })
                .and_then(|()| check(libc::posix_spawn_file_actions_adddup2(&mut actions, out, 1)))
                .and_then(|()| check(libc::posix_spawn_file_actions_adddup2(&mut actions, out, 2)));
        }
        let spawn = if s.search {
            libc::posix_spawnp
        } else {
            libc::posix_spawn
        };
        let spawned = ready.and_then(|()| {
            check(spawn(
                &mut pid,
                program.as_ptr(),
                &actions,
                &attr,
                argv_p.as_ptr(),
                envp_p.as_ptr(),
            ))
        });
        libc::posix_spawn_file_actions_destroy(&mut actions);
        libc::posix_spawnattr_destroy(&mut attr);
        spawned.map(|()| pid)
    }
}

/// Sends `sig` to process group `pgid`; a group that is gone is no error.
pub fn signal_group(pgid: i32, sig: i32) {
    if pgid > 1 {
        // SAFETY: kill(2) with a negative pid signals a process group; no memory is touched.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

/// Asks shim `pid` to kill its command and everything it started (the
/// first step of [`Child::kill_all`]), for a thread that doesn't own the
/// [`Child`]: the owner must not have reaped the shim (its pid is then not
/// reused) while this may be called.
pub fn ask_kill_all(pid: i32) {
    if pid > 1 {
        // SAFETY: kill(2) on a shim not reaped yet (see above).
        unsafe { libc::kill(pid, KILL_ALL) };
    }
}

/// The shim's children now: its command, and descendants that left their
/// process group or session (`setsid`) and were reparented to the shim, the
/// subreaper, when their parent ended.
fn children() -> Vec<i32> {
    // SAFETY: getpid(2) can't fail.
    let me = unsafe { libc::getpid() };
    // The kernel's own list (the shim is single-threaded: its one task);
    // a scan of /proc where the kernel doesn't keep it.
    if let Ok(list) = std::fs::read_to_string(format!("/proc/self/task/{me}/children")) {
        return list
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|st| {
                    // pid (comm) state ppid ...: comm may hold spaces.
                    let rest = &st[st.rfind(')')? + 2..];
                    rest.split_whitespace().nth(1)?.parse::<i32>().ok()
                })
                == Some(me)
        })
        .collect()
}

/// SIGKILL to each of the shim's children now and to the groups they lead.
/// Their own children are reparented to the shim as they die: the next call
/// finds them.
fn kill_children() -> Vec<i32> {
    let left = children();
    for pid in &left {
        // SAFETY: kill(2) on our own children (and the groups they lead).
        unsafe {
            libc::kill(-*pid, libc::SIGKILL);
            libc::kill(*pid, libc::SIGKILL);
        }
    }
    left
}

/// Kills every process left under the shim, those that escaped its group
/// too, and reaps them, walking its children again as orphans are
/// reparented to it, until none is left; gives up after two seconds.
fn end_descendants() {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let left = kill_children();
        // SAFETY: reaping our own children; WNOHANG never blocks.
        while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
        // A child reaped has had its own children reparented to the shim
        // first (the kernel does so as it exits), so an empty list is final.
        if (left.is_empty() && children().is_empty()) || Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The shim's command run as `uid`:`gid`, which `posix_spawn(3)` can't do:
/// forked, its groups and ids set, then exec'd (`std::process::Command`).
/// Its pid.
fn run_as_user(
    program: &str,
    args: &[String],
    uid: libc::uid_t,
    gid: libc::gid_t,
) -> std::io::Result<i32> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_remove(SHIM_PARENT)
        .env_remove(SHIM_RUN_AS);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // Groups first: after setuid they can't be dropped.
            if libc::setgroups(1, &gid) != 0 || libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGHUP, libc::SIG_DFL);
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            Ok(())
        });
    }
    // The child is reaped by pid (waitpid), not through `Child`.
    cmd.spawn().map(|child| child.id() as i32)
}

/// `orca __shim -- CMD...`: runs CMD in this process group and leaves with
/// its status. It is a subreaper: when CMD ends, whatever CMD left behind
/// (in the group or not: `setsid`, `nohup`) is killed. On SIGUSR1 it kills
/// CMD and everything under it, then leaves with CMD's status (SIGKILL,
/// unless CMD ended first). If the process that started the shim dies,
/// everything under it is killed, then the group.
pub fn shim_main(argv: &[String]) -> i32 {
    let parent: i32 = std::env::var(SHIM_PARENT)
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    // SIGUSR1 (kill everything), SIGUSR2 (the parent's death) and SIGCHLD
    // are blocked and taken with sigtimedwait below, so none can slip
    // between a check and a wait.
    // SAFETY: plain libc calls on this single-threaded process: signal
    // masks, prctl, signal dispositions.
    let mut wanted: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigemptyset(&mut wanted);
        libc::sigaddset(&mut wanted, KILL_ALL);
        libc::sigaddset(&mut wanted, libc::SIGUSR2);
        libc::sigaddset(&mut wanted, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &wanted, std::ptr::null_mut());
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGUSR2);
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
        if libc::getppid() != parent {
            libc::kill(0, libc::SIGKILL);
        }
        // The group gets SIGTERM on a cancel or timeout; the shim stays to
        // report how the command took it.
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
    let Some((program, args)) = argv.split_first() else {
        eprintln!("orca: {SHIM}: no command");
        return 2;
    };
    // `UID:GID` to run the command as; the shim stays orca's user, so the
    // command can't signal or read it.
    let run_as: Option<(libc::uid_t, libc::gid_t)> =
        std::env::var(SHIM_RUN_AS).ok().and_then(|v| {
            let (u, g) = v.split_once(':')?;
            Some((u.parse().ok()?, g.parse().ok()?))
        });
    // The command starts with no signal blocked and the shim's ignored ones
    // (and SIGPIPE, which the Rust runtime ignores) at their default.
    let command = match run_as {
        None => {
            let vars: Vec<(OsString, OsString)> = std::env::vars_os()
                .filter(|(k, _)| k != SHIM_PARENT && k != SHIM_RUN_AS)
                .collect();
            let argv: Vec<OsString> = argv.iter().map(OsString::from).collect();
            let start = |program: &[u8], search: bool, argv: &[OsString]| {
                spawn(&Spawn {
                    program,
                    search,
                    argv,
                    inherited: &[],
                    vars: &vars,
                    new_session: false,
                    mask: &[],
                    default: &[libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGPIPE],
                    out: None,
                })
            };
            match start(program.as_bytes(), !program.contains('/'), &argv) {
                // As execvp(3) does (and Command, which ORCA_RUN_AS uses): a
                // file with no `#!` line is run by /bin/sh.
                Err(e) if e.raw_os_error() == Some(libc::ENOEXEC) => match found(program) {
                    Some(path) => {
                        let mut sh = vec![OsString::from("sh"), path.into_os_string()];
                        sh.extend(argv[1..].iter().cloned());
                        start(b"/bin/sh", false, &sh)
                    }
                    None => Err(e),
                },
                other => other,
            }
        }
        Some((uid, gid)) => run_as_user(program, args, uid, gid),
    };
    let command = match command {
        Ok(pid) => pid,
        Err(e) => {
            eprintln!("orca: can't run {program}: {e}");
            return 127;
        }
    };
    // Wait for the command; orphans reparented to the shim are reaped on
    // the way. Once asked, everything under the shim is killed, again at
    // each turn (for orphans just reparented) until the command is reaped.
    // The parent's death ends everything under the shim, the shim too.
    let mut killing = false;
    let status = 'wait: loop {
        loop {
            let mut raw = 0;
            // SAFETY: waitpid(2) on our own children; WNOHANG never blocks.
            let pid = unsafe { libc::waitpid(-1, &mut raw, libc::WNOHANG) };
            if pid == command {
                break 'wait ExitStatus::from_raw(raw);
            }
            if pid <= 0 {
                break;
            }
        }
        if killing {
            kill_children();
        }
        let timeout = if killing {
            libc::timespec {
                tv_sec: 0,
                tv_nsec: 10_000_000,
            }
        } else {
            libc::timespec {
                tv_sec: 1,
                tv_nsec: 0,
            }
        };
        // SAFETY: waits for a blocked signal of `wanted`, at most a second.
        let sig = unsafe { libc::sigtimedwait(&wanted, std::ptr::null_mut(), &timeout) };
        // SAFETY: getppid(2) can't fail.
        if sig == libc::SIGUSR2 || unsafe { libc::getppid() } != parent {
            end_descendants();
            // SAFETY: kill(2): the shim's group, the shim with it.
            unsafe { libc::kill(0, libc::SIGKILL) };
        }
        killing |= sig == KILL_ALL;
    };
    end_descendants();
    // SAFETY: a kill request that came too late is dropped (SIG_IGN discards
    // a pending signal), then what was blocked above is unblocked, before
    // the shim may re-raise the command's signal at itself.
    unsafe {
        libc::signal(KILL_ALL, libc::SIG_IGN);
        libc::sigprocmask(libc::SIG_UNBLOCK, &wanted, std::ptr::null_mut());
    }
    if let Some(sig) = status.signal() {
        // SAFETY: restore the default action and die of the same signal.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::kill(libc::getpid(), sig);
        }
        return 128 + sig;
    }
    status.code().unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_says_what_followed_a_byte_of_its_stream() {
        let t = Tail::default();
        t.push(b"hello ");
        t.push(b"world");
        assert_eq!(t.total(), 11);
        assert_eq!(t.since(0), (0, b"hello world".to_vec()));
        assert_eq!(t.since(6), (6, b"world".to_vec()));
        assert_eq!(t.since(11), (11, Vec::new()));
        assert_eq!(t.since(99), (11, Vec::new()));
        // More than is kept came since: what is kept, from where it begins.
        t.push(&vec![0; TAIL_BYTES + 100]);
        let total = 11 + TAIL_BYTES as u64 + 100;
        assert_eq!(t.total(), total);
        let (at, bytes) = t.since(5);
        assert_eq!(at, total - TAIL_BYTES as u64);
        assert_eq!(bytes, vec![0; TAIL_BYTES]);
        assert_eq!(t.snapshot(), bytes);
    }

    #[test]
    fn runs_get_no_setting_or_secret_of_orca_s() {
        for key in [
            "ORCA_DATABASE_URL",
            "ORCA_POOL_DATABASE_URL",
            "ORCA_TOKEN",
            "orca_token",
            "ORCA_LOCAL_LABELS",
            "PGPASSWORD",
            "PGPASSFILE",
            "PGSSLKEY",
            "PGSERVICEFILE",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            "AWS_WEB_IDENTITY_TOKEN_FILE",
        ] {
            assert!(!passed_on(std::ffi::OsStr::new(key)), "{key}");
        }
        for key in ["PATH", "HOME", "LANG", "AWS_REGION", "TZ"] {
            assert!(passed_on(std::ffi::OsStr::new(key)), "{key}");
        }
    }
}
