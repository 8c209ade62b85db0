//! Child processes: a run's (or a sensor's) command, started by this
//! process's keeper ([`super::keeper`]) in a session of its own, that can't
//! outlive its attempt nor this process, with the tail of its output kept
//! in memory.
//!
//! A run is one process: its command. The keeper, one per supervisor and
//! started with the first command, is the command's parent and kills what
//! it leaves behind (see its module's doc). This side of it ([`Child`])
//! names each command by a token, never by a pid: signals go through the
//! keeper, which sends them only to a command it has not reaped, so never
//! to a pid used again ([`super::link`] is this process's end of the
//! keeper). Its output's pipe is made here and read by this process's one
//! output thread ([`super::output`]) into its [`Tail`]; the keeper gets the
//! write end.
//!
//! Should the keeper die (SIGKILL, say), its commands die with it (their
//! parent-death signal) and end here as killed; the next command starts a
//! new keeper.

use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::link::{KEEPERS, KILLED};
use super::tail::Tail;
use super::wire::Identity;
use crate::runs::Exit;

pub use super::link::Handle;

/// How long a command has, once the keeper was asked to kill it and
/// everything it started, before it is taken for killed here all the same
/// (a process stuck in the kernel can't die at once; the keeper reaps it
/// and what it left behind when it can).
pub const KILL_SECONDS: f64 = 5.0;

/// A pid not told yet.
const UNKNOWN: i32 = i32::MIN;

/// A command started by the keeper.
pub struct Child {
    /// The keeper's name for it.
    handle: Handle,
    /// Its pid (and its process group's and session's id) once the keeper
    /// has told it ([`UNKNOWN`] until then); 0 if it could not be started
    /// (it ends at once, its output says why).
    pid: std::sync::atomic::AtomicI32,
    /// How it ended, once told.
    status: Option<ExitStatus>,
    /// Its output.
    pub tail: Arc<Tail>,
    /// When the keeper was first and last asked to kill everything.
    killing: Option<(Instant, Instant)>,
}

impl Child {
    /// Starts `argv` with `env` added, in a new session, through the
    /// keeper (started first if there is none), without waiting for it:
    /// the keeper starts commands in the order asked while this process
    /// goes on. Of orca's own environment
    /// only what [`super::env::passed_on`] allows reaches it (nor the keeper): no
    /// secret of orca's, and not the local provider's machine labels
    /// (`ORCA_LOCAL_*`), so a run's process is never taken for a machine.
    /// Call from a thread that lives as long as the process (the main
    /// thread): the keeper's parent-death signal fires when the thread
    /// that started it ends.
    pub fn spawn(argv: &[String], env: &[(String, String)]) -> std::io::Result<Child> {
        // Later settings win over earlier ones of the same name: orca's own
        // environment first (the keeper's), then the run's.
        let mut vars: Vec<Vec<u8>> = env.iter().map(|(k, v)| format!("{k}={v}").into()).collect();
        // A uid of its own (the keeper takes it and sets HOME, TMPDIR,
        // USER and LOGNAME), else ORCA_RUN_AS's user, else orca's.
        let run_as = match (crate::secrets::run_uids(), crate::secrets::run_as()) {
            (Some(range), _) => Identity::Range(range.first, range.last),
            (None, Some(user)) => {
                for (k, v) in [
                    ("HOME", &user.home),
                    ("USER", &user.name),
                    ("LOGNAME", &user.name),
                ] {
                    vars.push(format!("{k}={v}").into());
                }
                Identity::User(user.uid, user.gid)
            }
            (None, None) => Identity::Keeper,
        };
        let argv: Vec<Vec<u8>> = argv.iter().map(|a| a.clone().into_bytes()).collect();
        if argv.is_empty() || argv.iter().chain(&vars).any(|b| b.contains(&0)) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "no command, or a NUL byte in the command or its environment",
            ));
        }
        let (reader, writer) = std::io::pipe()?;
        let handle =
            KEEPERS
                .lock()
                .expect("keepers")
                .start(argv, vars, run_as, OwnedFd::from(writer))?;
        let tail = Arc::new(Tail::default());
        let reading = super::output::read_into(reader, tail.clone());
        let child = Child {
            handle,
            pid: UNKNOWN.into(),
            status: None,
            tail,
            killing: None,
        };
        // A command whose output can't be read is not left running (dropped:
        // killed).
        reading.map(|()| child)
    }

    /// Its pid, for what is shown of it: 0 until the keeper has told it,
    /// or if it could not be started.
    pub fn pid(&self) -> i32 {
        let pid = self.pid.load(Ordering::Relaxed);
        if pid != UNKNOWN {
            return pid;
        }
        match KEEPERS.lock().expect("keepers").pid(self.handle) {
            Some(pid) => {
                self.pid.store(pid, Ordering::Relaxed);
                pid
            }
            None => 0,
        }
    }

    /// The keeper's name for it, for a thread that doesn't own it.
    pub fn handle(&self) -> Handle {
        self.handle
    }

    /// Whether it has ended, without waiting (whatever it left behind has
    /// had SIGKILL by then). A command the keeper was asked to kill
    /// [`KILL_SECONDS`] ago and that is still there is taken for killed.
    pub fn try_exit(&mut self) -> Option<Exit> {
        if self.status.is_none() {
            let raw = KEEPERS.lock().expect("keepers").ended(self.handle);
            // Its pid came first: kept for what is shown of it (and so no
            // longer held for it).
            self.pid();
            let given_up = self
                .killing
                .is_some_and(|(first, _)| first.elapsed().as_secs_f64() >= KILL_SECONDS);
            self.status = match raw {
                Some(raw) => Some(ExitStatus::from_raw(raw)),
                None if given_up => {
                    log::warn!(
                        "command {} (pid {}) still there {KILL_SECONDS}s after SIGKILL: taken for killed; its keeper reaps it when it can",
                        self.handle.token,
                        self.pid()
                    );
                    KEEPERS.lock().expect("keepers").forget(self.handle);
                    Some(ExitStatus::from_raw(KILLED))
                }
                None => None,
            };
        }
        self.status.map(Exit::from_status)
    }

    /// Kills the command and everything it started, without waiting: the
    /// keeper SIGKILLs its group and it, and what it left behind once it
    /// ends ([`Child::try_exit`] tells when). Call it again until then: the
    /// keeper is asked again once a second.
    pub fn kill_all(&mut self) {
        let now = Instant::now();
        match self.killing {
            Some((_, last)) if now.duration_since(last) < Duration::from_secs(1) => {}
            _ => {
                self.handle.kill_all();
                let first = self.killing.map_or(now, |(first, _)| first);
                self.killing = Some((first, now));
            }
        }
    }

    /// Whether [`Child::kill_all`] was called.
    pub fn killing(&self) -> bool {
        self.killing.is_some()
    }

    /// [`Child::kill_all`], and waits for the end (at most a little over
    /// [`KILL_SECONDS`]). Not for the tick: see [`Child::kill`].
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
        self.handle.signal(sig);
    }
}

impl Drop for Child {
    /// A command dropped before its end is killed with everything it
    /// started, and its end is not kept for anyone.
    fn drop(&mut self) {
        if self.status.is_none() {
            self.handle.kill_all();
            if let Ok(mut keepers) = KEEPERS.lock() {
                keepers.forget(self.handle);
            }
        }
    }
}
