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
//! to a pid used again. Its output's pipe is made here and read by this
//! process's one output thread ([`super::output`]); the keeper gets the
//! write end.
//!
//! Should the keeper die (SIGKILL, say), its commands die with it (their
//! parent-death signal) and end here as killed; the next command starts a
//! new keeper.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::keeper::{KEEPER, SOCKET_FD};
use super::wire::{self, Event, Identity, Request};
use crate::runs::Exit;

/// How much of a run's output is kept: the last 64 KiB.
pub const TAIL_BYTES: usize = 64 * 1024;

/// How long a command has, once the keeper was asked to kill it and
/// everything it started, before it is taken for killed here all the same
/// (a process stuck in the kernel can't die at once; the keeper reaps it
/// and what it left behind when it can).
pub const KILL_SECONDS: f64 = 5.0;

/// A pid not told yet.
const UNKNOWN: i32 = i32::MIN;

/// Events are read at most once in this many microseconds.
const REFRESH_MICROS: u64 = 500;

/// How long the keeper may take to start a command before it is taken for
/// wedged (and replaced: its commands die with it).
const START_SECONDS: u64 = 30;

/// How much may wait to be sent to the keeper before it is taken for
/// wedged.
const MAX_QUEUED_BYTES: usize = 64 << 20;

/// The wait status of a process killed by SIGKILL.
const KILLED: i32 = libc::SIGKILL;
/// The last [`TAIL_BYTES`] of a child's stdout and stderr, interleaved, and
/// where they are in everything it wrote (its output stream).
#[derive(Default)]
pub struct Tail {
    kept: Mutex<Kept>,
    /// The pipe reached its end: every writer is gone, all is read.
    pub(super) done: std::sync::atomic::AtomicBool,
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
    /// been read (its writers are gone once the command and what it left
    /// behind have ended, so this is at once but for the reading thread's
    /// turn). True if it has.
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
    /// only what [`passed_on`] allows reaches it (nor the keeper): no
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

/// A command of a keeper's: which keeper (its generation: the next one
/// never takes the last one's commands for its own) and the command's
/// token. Copied freely; it signals nothing once the command is reaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handle {
    generation: u64,
    token: u64,
}

impl Handle {
    /// Sends `sig` to the command's process group, if it is not reaped.
    pub fn signal(self, sig: i32) {
        KEEPERS.lock().expect("keepers").ask(
            self,
            Request::Signal {
                token: self.token,
                signal: sig,
            },
        );
    }

    /// SIGKILLs the command and everything it started, if it is not
    /// reaped.
    pub fn kill_all(self) {
        KEEPERS
            .lock()
            .expect("keepers")
            .ask(self, Request::KillAll { token: self.token });
    }
}

/// This process's keeper, if it has one, and how many it has had.
struct Keepers {
    now: Option<KeeperLink>,
    generation: u64,
}

/// This process's keepers (one at a time).
static KEEPERS: Mutex<Keepers> = Mutex::new(Keepers {
    now: None,
    generation: 0,
});

/// The supervisor's end of a keeper.
struct KeeperLink {
    sock: UnixStream,
    pid: i32,
    next: u64,
    /// Bytes of events read but not yet a whole frame.
    inbuf: Vec<u8>,
    started: HashMap<u64, i32>,
    ended: HashMap<u64, i32>,
    /// Commands whose end no one waits for any more.
    forgotten: HashSet<u64>,
    /// When events were last read.
    pumped: Instant,
    /// Frames not sent yet (each with the descriptor to send beside its
    /// first byte, and how much of it is sent), and their bytes.
    queue: VecDeque<(Vec<u8>, Option<OwnedFd>, usize)>,
    queued_bytes: usize,
    /// Commands asked for and not yet said started, with when, in order.
    waiting: VecDeque<(u64, Instant)>,
}

impl Keepers {
    /// Asks the keeper to start a command (starting a keeper first if
    /// there is none): its handle.
    fn start(
        &mut self,
        argv: Vec<Vec<u8>>,
        vars: Vec<Vec<u8>>,
        run_as: Identity,
        out: OwnedFd,
    ) -> std::io::Result<Handle> {
        if self.now.is_none() {
            self.now = Some(KeeperLink::start()?);
            self.generation += 1;
        }
        let k = self.now.as_mut().expect("a keeper");
        let token = k.next;
        k.next += 1;
        let frame = Request::Spawn(wire::Spawn {
            token,
            argv,
            vars,
            run_as,
        })
        .encode();
        if frame.len() - 4 > wire::MAX_FRAME {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the command and its environment are too long",
            ));
        }
        k.waiting.push_back((token, Instant::now()));
        // (The keeper has its own copy of `out` once it is sent.)
        match k.send(frame, Some(out)) {
            Ok(()) => Ok(Handle {
                generation: self.generation,
                token,
            }),
            Err(e) => {
                self.lost(&e);
                Err(e)
            }
        }
    }

    /// The keeper command `h` was asked of, if it is this one (not one
    /// since gone).
    fn of(&mut self, h: Handle) -> Option<&mut KeeperLink> {
        self.now
            .as_mut()
            .filter(|_| self.generation == h.generation)
    }

    /// Command `h`'s pid, if the keeper's word of it has been read (by
    /// [`Keepers::ended`]: this reads nothing); 0 if it could not be
    /// started, or its keeper is gone.
    fn pid(&mut self, h: Handle) -> Option<i32> {
        match self.of(h) {
            Some(k) => k.started.remove(&h.token),
            None => Some(0),
        }
    }

    /// The wait status the command ended with, if it has; one whose keeper
    /// is gone ended killed.
    fn ended(&mut self, h: Handle) -> Option<i32> {
        let Some(k) = self.of(h) else {
            return Some(KILLED);
        };
        match k.refresh() {
            Ok(()) => k.ended.remove(&h.token),
            Err(e) => {
                self.lost(&e);
                Some(KILLED)
            }
        }
    }

    /// Sends `req` about command `h`, if its keeper is this one.
    fn ask(&mut self, h: Handle, req: Request) {
        if let Some(k) = self.of(h)
            && let Err(e) = k.send(req.encode(), None)
        {
            self.lost(&e);
        }
    }

    /// No one waits for command `h`'s end any more: it is dropped when it
    /// comes. A keeper asked to kill that doesn't answer may be stopped:
    /// it is sent SIGCONT.
    fn forget(&mut self, h: Handle) {
        let Some(k) = self.of(h) else {
            return;
        };
        k.started.remove(&h.token);
        if k.ended.remove(&h.token).is_none() {
            k.forgotten.insert(h.token);
            // SAFETY: kill(2) on our own child, not reaped (so its pid is
            // not reused).
            unsafe { libc::kill(k.pid, libc::SIGCONT) };
        }
    }

    /// The keeper failed (`why`): it is killed (its commands die with it)
    /// and reaped on a thread of its own; the next command starts another.
    fn lost(&mut self, why: &std::io::Error) {
        let Some(k) = self.now.take() else {
            return;
        };
        log::error!(
            "the keeper (pid {}) failed ({why}): its commands are killed; the next command starts a new one",
            k.pid
        );
        let pid = k.pid;
        // The end of its socket tells it to kill everything under it and
        // end (as its supervisor's death would); SIGCONT should it be
        // stopped; SIGKILL if it hasn't ended a while later.
        drop(k);
        // SAFETY: kill(2) on our own child, not reaped yet.
        unsafe { libc::kill(pid, libc::SIGCONT) };
        let reap = move || {
            reap_or_kill(
                pid,
                Duration::from_secs(super::keeper::DIE_SECONDS + 2),
                Duration::from_millis(50),
            )
        };
        if std::thread::Builder::new()
            .name("reap".into())
            .stack_size(64 * 1024)
            .spawn(reap)
            .is_err()
        {
            reap();
        }
    }
}

impl KeeperLink {
    /// Starts a keeper: `/proc/self/exe __keeper PID`, in a session of its
    /// own, its stdin `/dev/null`, its stdout and stderr this process's,
    /// its end of a new socket at [`SOCKET_FD`], and only the environment a
    /// run may have ([`passed_on`]); SIGCHLD and SIGUSR2 blocked, so none
    /// is lost before it takes them.
    fn start() -> std::io::Result<KeeperLink> {
        let (ours, theirs) = UnixStream::pair()?;
        // Their end above SOCKET_FD first: a dup2 onto itself would leave
        // it close-on-exec.
        // SAFETY: fcntl(2) on a descriptor we own; the new one is ours.
        let above = unsafe { libc::fcntl(theirs.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10) };
        if above < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `above` was just made and nothing else owns it.
        let above = unsafe { OwnedFd::from_raw_fd(above) };
        drop(theirs);
        let pid = spawn_keeper(above.as_raw_fd())?;
        Ok(KeeperLink {
            sock: ours,
            pid,
            next: 1,
            inbuf: Vec::new(),
            started: HashMap::new(),
            ended: HashMap::new(),
            forgotten: HashSet::new(),
            pumped: Instant::now(),
            queue: VecDeque::new(),
            queued_bytes: 0,
            waiting: VecDeque::new(),
        })
    }

    /// Queues a frame (with descriptor `fd` beside its first byte) and
    /// sends what it can without waiting: a keeper that doesn't read (it
    /// is stopped, say) holds up no thread here. More than
    /// [`MAX_QUEUED_BYTES`] waiting is an error (the keeper is wedged).
    fn send(&mut self, frame: Vec<u8>, fd: Option<OwnedFd>) -> std::io::Result<()> {
        self.queued_bytes += frame.len();
        self.queue.push_back((frame, fd, 0));
        self.flush()?;
        if self.queued_bytes > MAX_QUEUED_BYTES {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the keeper reads nothing: its socket is full",
            ));
        }
        Ok(())
    }

    /// Sends what is queued, as far as the socket takes it now.
    fn flush(&mut self) -> std::io::Result<()> {
        while let Some((frame, fd, sent)) = self.queue.front_mut() {
            let n = match fd.as_ref() {
                Some(fd) => send_with_fd(&self.sock, frame, fd),
                None => {
                    // SAFETY: send(2) from a buffer we own.
                    let n = unsafe {
                        libc::send(
                            self.sock.as_raw_fd(),
                            frame[*sent..].as_ptr().cast(),
                            frame.len() - *sent,
                            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                        )
                    };
                    if n < 0 {
                        Err(std::io::Error::last_os_error())
                    } else {
                        Ok(n as usize)
                    }
                }
            };
            match n {
                Ok(n) => {
                    // The descriptor went with the first byte.
                    *fd = None;
                    *sent += n;
                    if *sent == frame.len() {
                        self.queued_bytes -= frame.len();
                        self.queue.pop_front();
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// [`KeeperLink::pump`], unless it was done less than
    /// [`REFRESH_MICROS`] ago: a supervisor asks of each of its commands in
    /// turn, and one read serves them all.
    fn refresh(&mut self) -> std::io::Result<()> {
        if self.pumped.elapsed() < Duration::from_micros(REFRESH_MICROS) {
            return Ok(());
        }
        self.pumped = Instant::now();
        self.flush()?;
        self.pump()?;
        match self.waiting.front() {
            Some((_, asked)) if asked.elapsed() >= Duration::from_secs(START_SECONDS) => {
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("it started no command asked {START_SECONDS}s ago"),
                ))
            }
            _ => Ok(()),
        }
    }

    /// Reads the events that have come, without waiting.
    fn pump(&mut self) -> std::io::Result<()> {
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: recv(2) into a buffer we own.
            let n = unsafe {
                libc::recv(
                    self.sock.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n > 0 {
                self.inbuf.extend_from_slice(&buf[..n as usize]);
                continue;
            }
            if n == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the keeper ended",
                ));
            }
            let e = std::io::Error::last_os_error();
            match e.kind() {
                std::io::ErrorKind::Interrupted => continue,
                std::io::ErrorKind::WouldBlock => break,
                _ => return Err(e),
            }
        }
        let mut at = 0;
        let bad = |e: wire::WireError| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
        while let Some((range, used)) = wire::next_frame(&self.inbuf[at..]).map_err(bad)? {
            match Event::decode(&self.inbuf[at..][range]).map_err(bad)? {
                Event::Started { token, pid } => {
                    if let Some(i) = self.waiting.iter().position(|(t, _)| *t == token) {
                        self.waiting.remove(i);
                    }
                    if !self.forgotten.contains(&token) {
                        self.started.insert(token, pid);
                    }
                }
                Event::Ended { token, status } => {
                    if !self.forgotten.remove(&token) {
                        self.ended.insert(token, status);
                    }
                }
            }
            at += used;
        }
        self.inbuf.drain(..at);
        Ok(())
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

/// Sends (without waiting) as much of `frame` as the socket takes, with
/// descriptor `fd` beside its first byte: how much.
fn send_with_fd(sock: &UnixStream, frame: &[u8], fd: &OwnedFd) -> std::io::Result<usize> {
    // Aligned room for one descriptor's control message.
    let mut control = [0u64; 4];
    let mut iov = libc::iovec {
        iov_base: frame.as_ptr() as *mut _,
        iov_len: frame.len(),
    };
    // SAFETY: a zeroed msghdr is valid; its pointers are set to buffers
    // that live across the call, and the control message is written within
    // `control` (CMSG_SPACE of one int fits).
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        (libc::CMSG_DATA(c) as *mut RawFd).write_unaligned(fd.as_raw_fd());
        libc::sendmsg(
            sock.as_raw_fd(),
            &msg,
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Starts the keeper (see [`KeeperLink::start`]) with `posix_spawn(3)`: the
/// C library starts it without copying this process's memory map. Its pid.
fn spawn_keeper(sock: RawFd) -> std::io::Result<i32> {
    let program = c"/proc/self/exe";
    // SAFETY: getpid(2) can't fail.
    let me = unsafe { libc::getpid() };
    let argv: Vec<CString> = ["orca".to_string(), KEEPER.into(), me.to_string()]
        .into_iter()
        .map(|a| CString::new(a).expect("no NUL"))
        .collect();
    let mut argv_p: Vec<*mut libc::c_char> = argv.iter().map(|a| a.as_ptr() as *mut _).collect();
    argv_p.push(std::ptr::null_mut());
    let mut envp_p: Vec<*mut libc::c_char> = inherited()
        .iter()
        .map(|(_, kv)| kv.as_ptr() as *mut _)
        .collect();
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
        let mut mask: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut mask);
        libc::sigaddset(&mut mask, libc::SIGCHLD);
        libc::sigaddset(&mut mask, libc::SIGUSR2);
        // (The constants' types differ between C libraries.)
        #[allow(clippy::unnecessary_cast)]
        let flags = libc::POSIX_SPAWN_SETSIGMASK as i32 | libc::POSIX_SPAWN_SETSID as i32;
        let mut pid: libc::pid_t = 0;
        let spawned = check(libc::posix_spawnattr_setsigmask(&mut attr, &mask))
            .and_then(|()| {
                check(libc::posix_spawnattr_setflags(
                    &mut attr,
                    flags as libc::c_short,
                ))
            })
            .and_then(|()| {
                check(libc::posix_spawn_file_actions_addopen(
                    &mut actions,
                    0,
                    c"/dev/null".as_ptr(),
                    libc::O_RDONLY,
                    0,
                ))
            })
            .and_then(|()| {
                check(libc::posix_spawn_file_actions_adddup2(
                    &mut actions,
                    sock,
                    SOCKET_FD,
                ))
            })
            .and_then(|()| {
                check(libc::posix_spawn(
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

/// Reaps this process's child `pid`, looking every `poll`; past `within`,
/// SIGKILLs it and reaps it then.
pub(super) fn reap_or_kill(pid: i32, within: Duration, poll: Duration) {
    let deadline = Instant::now() + within;
    // SAFETY: waitpid(2) and kill(2) on our own child, not reaped (so its
    // pid is not reused) until waitpid says so.
    unsafe {
        while libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) == 0 {
            if Instant::now() >= deadline {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
                return;
            }
            std::thread::sleep(poll);
        }
    }
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
