//! The supervisor's end of its keeper ([`super::keeper`]): the keeper
//! started (`/proc/self/exe __keeper PID`, with `posix_spawn(3)`) at the
//! first command and replaced should it fail, what is asked of it sent
//! without ever waiting (queued, sent as its socket takes it), and what it
//! tells (a command's pid, its end) read without waiting. A command is
//! named by a [`Handle`]: its keeper's generation and its token, never a
//! pid.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::env::inherited;
use super::keeper::{DIE_SECONDS, KEEPER, SOCKET_FD};
use super::trees::reap_or_kill;
use super::wire::{self, Event, Identity, Request};

/// Events are read at most once in this many microseconds.
const REFRESH_MICROS: u64 = 500;

/// How long the keeper may take to start a command before it is taken for
/// wedged (and replaced: its commands die with it).
const START_SECONDS: u64 = 30;

/// How much may wait to be sent to the keeper before it is taken for
/// wedged.
const MAX_QUEUED_BYTES: usize = 64 << 20;

/// The wait status of a process killed by SIGKILL.
pub(super) const KILLED: i32 = libc::SIGKILL;

/// A command of a keeper's: which keeper (its generation: the next one
/// never takes the last one's commands for its own) and the command's
/// token. Copied freely; it signals nothing once the command is reaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handle {
    generation: u64,
    /// The command's token, as the keeper names it.
    pub(super) token: u64,
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
pub(super) struct Keepers {
    now: Option<KeeperLink>,
    generation: u64,
}

/// This process's keepers (one at a time).
pub(super) static KEEPERS: Mutex<Keepers> = Mutex::new(Keepers {
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
    pub(super) fn start(
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
    pub(super) fn pid(&mut self, h: Handle) -> Option<i32> {
        match self.of(h) {
            Some(k) => k.started.remove(&h.token),
            None => Some(0),
        }
    }

    /// The wait status the command ended with, if it has; one whose keeper
    /// is gone ended killed.
    pub(super) fn ended(&mut self, h: Handle) -> Option<i32> {
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
    pub(super) fn forget(&mut self, h: Handle) {
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
                Duration::from_secs(DIE_SECONDS + 2),
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
    /// run may have ([`super::env::passed_on`]); SIGCHLD and SIGUSR2 blocked, so none
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
