//! The keeper, `orca __keeper PARENT`: one process per supervisor (a
//! scheduler, a worker, `ec2-serve`) that starts every command the
//! supervisor runs, so that a run is one process, not two (issue 14's
//! starts a second), and that nothing a command starts outlives it.
//!
//! How it holds that guarantee:
//! * Each command is started as the leader of a new session with no
//!   controlling terminal, a **child subreaper** itself
//!   (`PR_SET_CHILD_SUBREAPER`, kept across exec) and with SIGKILL as its
//!   parent-death signal, holding no descriptor but 0 to 2. While a
//!   command lives, whatever it orphans (a double fork, `setsid`, `nohup`)
//!   is reparented to the command, not to the keeper.
//! * The keeper is a subreaper too. So a child of the keeper that is not a
//!   live command was left behind by one that ended (or by such a
//!   leftover that ended): a **leftover** ([`leftovers`]; not the pools'
//!   unheld machines, which are "strays"). Leftovers are killed whole
//!   ([`kill_trees`]): every process under them is stopped top-down (each
//!   seen stopped before its children are read, so a chain that forks
//!   deeper as it is killed can't outrun the walk), then all get SIGKILL.
//!   A command's end is told to the supervisor only once what was killed
//!   with it or after it is gone ([`Held`]; at most [`HOLD_SECONDS`]), so
//!   an attempt is recorded ended only when nothing of it runs.
//! * Asked (a timeout or cancel past its grace, an attempt lost, a
//!   supervisor stopping), it kills the command's tree the same way.
//!   Signals go to a command only while it is not reaped, so never to a
//!   pid used again.
//! * When its supervisor dies (its parent-death signal, SIGUSR2, or the end
//!   of its socket, whichever comes first) it kills every command's tree
//!   and walks until nothing is left under it, then ends.
//! * It never waits on what a command can stop. A command of orca's own
//!   user is cloned into the keeper's memory (`CLONE_VM | CLONE_VFORK`, as
//!   `posix_spawn(3)` does), the keeper waiting only until it execs; one
//!   run as another user (`ORCA_RUN_AS`, or a uid of its own from
//!   `ORCA_RUN_UIDS`, taken and given back by [`super::uids`]) is forked
//!   instead, since from its setuid to its exec that user's processes
//!   could stop it.
//!
//! It is single-threaded: a `poll(2)` on its socket and a `signalfd` for
//! SIGCHLD and SIGUSR2. It ignores SIGTERM, SIGINT and SIGHUP (no command
//! is in its group; an operator's mistaken signal must not end it), and is
//! non-dumpable. Its environment is what of orca's a run may have
//! (`env::passed_on`), so nothing in it is a secret; a command's own
//! settings come with its request ([`super::wire`]) and are set over it.
//!
//! What it can't hold:
//! * SIGKILL to the keeper itself (only its own user or the kernel's OOM
//!   killer can send one) kills its commands through their parent-death
//!   signal, unless a command cleared it (`prctl`) or exec'd a setuid
//!   program; what they had orphaned goes to init. So did a shim's, before.
//! * A process a command started that orca's user may not signal (a setuid
//!   program's) is out of its reach.
//! * A run of orca's own user can stop or kill the keeper as it can the
//!   scheduler (docs/security.md: `ORCA_RUN_AS`). The supervisor then
//!   replaces a keeper that started no command asked 30 s before.

use std::collections::{HashMap, VecDeque};
use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, Instant};

use super::trees::{children_of, exists, kill_trees};
use super::uids::{self, Slot};
use super::wire::{self, Event, Request};
use exec::start;

mod exec;

/// The name of the hidden subcommand the keeper runs as.
pub const KEEPER: &str = "__keeper";

/// Where the keeper's end of its socket is when it starts.
pub const SOCKET_FD: RawFd = 3;

/// The signal the keeper gets when its supervisor dies.
const PARENT_DIED: i32 = libc::SIGUSR2;

/// How long the keeper, its supervisor gone, goes on killing what is left
/// under it before it ends anyway (what has had SIGKILL dies all the same,
/// once out of the kernel).
pub const DIE_SECONDS: u64 = 5;

/// How long a command's end is held for what was killed with it (a
/// process stuck in the kernel dies only once out of it).
const HOLD_SECONDS: u64 = 2;

/// The keeper's state.
struct Keeper {
    sock: OwnedFd,
    signals: OwnedFd,
    /// `/dev/null`, every command's stdin.
    devnull: OwnedFd,
    /// The keeper's own environment, as `(name, NAME=value)`.
    env: Vec<(Vec<u8>, CString)>,
    /// The stack a command starts on until it execs.
    stack: Vec<u8>,
    parent: i32,
    /// Commands not reaped yet, by pid, and by token.
    pids: HashMap<i32, u64>,
    tokens: HashMap<u64, i32>,
    /// Bytes of requests read but not yet a whole frame.
    inbuf: Vec<u8>,
    /// Descriptors come with spawn requests, in order.
    fds: VecDeque<OwnedFd>,
    /// Events not yet sent.
    out: Vec<u8>,
    /// Leftovers were killed at the last walk: walk again soon.
    walking: bool,
    /// Processes killed since the last [`Keeper::release`].
    dying: Vec<i32>,
    /// Commands' ends not told yet.
    held: Vec<Held>,
    /// The uids of their own commands hold (`ORCA_RUN_UIDS`), by token:
    /// given back as their ends are told.
    slots: HashMap<u64, Slot>,
    /// Uids being given back, by the pid of their cleaner: let go once it
    /// is reaped. Cleaners are no leftovers.
    cleaning: HashMap<i32, Slot>,
}

/// A command's end, held until the processes killed with it or after it
/// (its tree, asked; what it left behind, at its end) are gone: the
/// supervisor records an attempt's end only once nothing of it runs.
struct Held {
    end: Event,
    /// Processes killed since it ended (or as it was asked to die) that
    /// were still there at the last look.
    waits_for: Vec<i32>,
    since: Instant,
}

/// The children of the keeper that are leftovers: every one that is not a
/// command not reaped yet (see the module's doc).
pub fn leftovers(children: &[i32], commands: &HashMap<i32, u64>) -> Vec<i32> {
    children
        .iter()
        .copied()
        .filter(|p| *p > 1 && !commands.contains_key(p))
        .collect()
}

/// `orca __keeper PARENT`, its socket at [`SOCKET_FD`]: see the module's
/// doc. Ends when its supervisor does (0), or at once if its parent is not
/// `PARENT` (1), or if its supervisor sends what it can't read (2).
pub fn keeper_main(argv: &[String]) -> i32 {
    let parent: i32 = argv.first().and_then(|p| p.parse().ok()).unwrap_or(0);
    let mut wanted: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: plain libc calls on this single-threaded process: the signal
    // mask, prctl, dispositions, descriptor flags, a new signalfd.
    let signals = unsafe {
        // Nothing of what orca was started with and left open but stdin,
        // stdout and stderr: a pipe held here would never see its end.
        if libc::syscall(
            libc::SYS_close_range,
            (SOCKET_FD + 1) as u32,
            u32::MAX,
            0u32,
        ) != 0
        {
            let open_max = libc::sysconf(libc::_SC_OPEN_MAX).clamp(0, 1 << 16) as i32;
            for fd in SOCKET_FD + 1..open_max {
                libc::close(fd);
            }
        }
        libc::sigemptyset(&mut wanted);
        libc::sigaddset(&mut wanted, libc::SIGCHLD);
        libc::sigaddset(&mut wanted, PARENT_DIED);
        libc::sigprocmask(libc::SIG_BLOCK, &wanted, std::ptr::null_mut());
        libc::prctl(libc::PR_SET_PDEATHSIG, PARENT_DIED);
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
        // Not to be read or traced by a run of orca's own user (what it is
        // asked holds pipelines' env values); a command's exec resets it.
        libc::prctl(libc::PR_SET_DUMPABLE, 0);
        if parent <= 1 || libc::getppid() != parent {
            return 1;
        }
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        libc::fcntl(SOCKET_FD, libc::F_SETFD, libc::FD_CLOEXEC);
        let flags = libc::fcntl(SOCKET_FD, libc::F_GETFL);
        libc::fcntl(SOCKET_FD, libc::F_SETFL, flags | libc::O_NONBLOCK);
        let fd = libc::signalfd(-1, &wanted, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if fd < 0 {
            eprintln!(
                "orca: keeper: signalfd: {}",
                std::io::Error::last_os_error()
            );
            return 1;
        }
        OwnedFd::from_raw_fd(fd)
    };
    let devnull = match std::fs::File::open("/dev/null") {
        Ok(f) => OwnedFd::from(f),
        Err(e) => {
            eprintln!("orca: keeper: /dev/null: {e}");
            return 1;
        }
    };
    let env = std::env::vars_os()
        .filter_map(|(k, v)| {
            let kv = CString::new([k.as_bytes(), b"=", v.as_bytes()].concat()).ok()?;
            Some((k.as_bytes().to_vec(), kv))
        })
        .collect();
    let mut k = Keeper {
        // SAFETY: the supervisor put its socket here; nothing else owns it.
        sock: unsafe { OwnedFd::from_raw_fd(SOCKET_FD) },
        signals,
        devnull,
        env,
        stack: vec![0; 256 * 1024],
        parent,
        pids: HashMap::new(),
        tokens: HashMap::new(),
        inbuf: Vec::new(),
        fds: VecDeque::new(),
        out: Vec::new(),
        walking: false,
        dying: Vec::new(),
        held: Vec::new(),
        slots: HashMap::new(),
        cleaning: HashMap::new(),
    };
    match k.serve() {
        Ok(()) => k.die(0),
        Err(e) => {
            eprintln!("orca: keeper: {e}; killing every command");
            k.die(2)
        }
    }
}

impl Keeper {
    /// The loop: until the supervisor is gone (`Ok`) or says what can't be
    /// read (`Err`).
    fn serve(&mut self) -> Result<(), wire::WireError> {
        loop {
            let mut polled = [
                libc::pollfd {
                    fd: self.sock.as_raw_fd(),
                    events: libc::POLLIN
                        | if self.out.is_empty() {
                            0
                        } else {
                            libc::POLLOUT
                        },
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.signals.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let timeout = if !self.held.is_empty() {
                2
            } else if self.walking {
                10
            } else {
                1000
            };
            // SAFETY: poll(2) on two descriptors we own.
            let ready = unsafe { libc::poll(polled.as_mut_ptr(), 2, timeout) };
            if self.signalled() || unsafe { libc::getppid() } != self.parent {
                return Ok(());
            }
            if polled[0].revents != 0 && !self.read_requests()? {
                return Ok(());
            }
            // After a reap, while leftovers are dying, and once a second.
            if self.reap() || self.walking || ready == 0 {
                self.walk();
            }
            self.release();
            if !self.flush() {
                return Ok(());
            }
        }
    }

    /// Drains the signalfd; true if the supervisor died.
    fn signalled(&mut self) -> bool {
        let mut died = false;
        loop {
            // SAFETY: read(2) of whole signalfd_siginfo records into one.
            let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
            let n = unsafe {
                libc::read(
                    self.signals.as_raw_fd(),
                    (&mut info as *mut libc::signalfd_siginfo).cast(),
                    std::mem::size_of::<libc::signalfd_siginfo>(),
                )
            };
            if n <= 0 {
                return died;
            }
            died |= info.ssi_signo == PARENT_DIED as u32;
        }
    }

    /// Reads what the supervisor sent and carries out each whole request;
    /// false at the end of the socket (the supervisor is gone).
    fn read_requests(&mut self) -> Result<bool, wire::WireError> {
        let open;
        loop {
            // Read straight onto the end of what came before.
            self.inbuf.reserve(64 * 1024);
            let had = self.inbuf.len();
            // Room for a few descriptors' control message: a stream socket
            // gives at most one sender's call's descriptors at once.
            let mut control = [0u8; 64];
            let mut iov = libc::iovec {
                // SAFETY: within the capacity just reserved.
                iov_base: unsafe { self.inbuf.as_mut_ptr().add(had) }.cast(),
                iov_len: self.inbuf.capacity() - had,
            };
            // SAFETY: a zeroed msghdr is valid; its pointers are set to
            // buffers that live across the call.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = control.len() as _;
            let n = unsafe {
                libc::recvmsg(
                    self.sock.as_raw_fd(),
                    &mut msg,
                    libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
                )
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                open = e.kind() == std::io::ErrorKind::WouldBlock;
                break;
            }
            // SAFETY: walking the control messages recvmsg(2) filled in.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&msg);
                while !c.is_null() {
                    if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                        let data = libc::CMSG_DATA(c) as *const RawFd;
                        let len = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                        for i in 0..len / std::mem::size_of::<RawFd>() {
                            self.fds
                                .push_back(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                        }
                    }
                    c = libc::CMSG_NXTHDR(&msg, c);
                }
            }
            if msg.msg_flags & libc::MSG_CTRUNC != 0 {
                return Err(wire::WireError::Malformed);
            }
            if n == 0 {
                open = false;
                break;
            }
            // SAFETY: recvmsg(2) wrote `n` bytes there.
            unsafe { self.inbuf.set_len(had + n as usize) };
        }
        let mut at = 0;
        while let Some((range, used)) = wire::next_frame(&self.inbuf[at..])? {
            let req = Request::decode(&self.inbuf[at..][range])?;
            at += used;
            self.carry_out(req)?;
        }
        self.inbuf.drain(..at);
        Ok(open)
    }

    fn carry_out(&mut self, req: Request) -> Result<(), wire::WireError> {
        match req {
            Request::Spawn(mut s) => {
                let out = self.fds.pop_front().ok_or(wire::WireError::Malformed)?;
                let token = s.token;
                // A uid of its own: taken here, given back once its end is
                // told (or at once, should it not start).
                let slot = uids::take_for(&mut s);
                let started = slot.and_then(|slot| {
                    let own_uid = slot.is_some();
                    let pid = start(
                        &s,
                        &out,
                        &self.env,
                        self.devnull.as_raw_fd(),
                        &mut self.stack,
                        own_uid,
                    );
                    match (pid, slot) {
                        (Ok(pid), Some(slot)) => {
                            self.slots.insert(token, slot);
                            Ok(pid)
                        }
                        (Err(e), Some(slot)) => {
                            self.give_back(slot);
                            Err(e)
                        }
                        (pid, None) => pid,
                    }
                });
                match started {
                    Ok(pid) => {
                        self.pids.insert(pid, token);
                        self.tokens.insert(token, pid);
                        Event::Started { token, pid }.encode_into(&mut self.out);
                    }
                    Err(e) => {
                        // As a shell says it: the run's output holds why.
                        let program =
                            String::from_utf8_lossy(s.argv.first().map_or(&[][..], |p| p));
                        let mut w = std::fs::File::from(out);
                        let _ = writeln!(w, "orca: can't run {program}: {e}");
                        Event::Started { token, pid: 0 }.encode_into(&mut self.out);
                        Event::Ended {
                            token,
                            status: 127 << 8,
                        }
                        .encode_into(&mut self.out);
                    }
                }
            }
            Request::Signal { token, signal } => {
                if let Some(&pid) = self.tokens.get(&token) {
                    // SAFETY: kill(2) to the group of a command not reaped
                    // yet (its pid, so its group's id, is not reused).
                    unsafe { libc::kill(-pid, signal) };
                }
            }
            Request::KillAll { token } => {
                // The command is a subreaper: everything it started is
                // under it, in its group or not.
                if let Some(&pid) = self.tokens.get(&token) {
                    self.dying.extend(kill_trees(&[pid]));
                }
            }
        }
        Ok(())
    }

    /// Reaps every child that ended; a command's end becomes an event.
    /// True if any was reaped.
    fn reap(&mut self) -> bool {
        let mut any = false;
        loop {
            let mut status = 0;
            // SAFETY: waitpid(2) on our own children; WNOHANG never blocks.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                return any;
            }
            any = true;
            if let Some(slot) = self.cleaning.remove(&pid) {
                uids::cleaned(slot, status == 0);
            }
            if let Some(token) = self.pids.remove(&pid) {
                self.tokens.remove(&token);
                self.held.push(Held {
                    end: Event::Ended { token, status },
                    waits_for: Vec::new(),
                    since: Instant::now(),
                });
            }
        }
    }

    /// Tells the ends held (see [`Held`]) whose processes are all gone, or
    /// that have waited [`HOLD_SECONDS`].
    fn release(&mut self) {
        let dying = std::mem::take(&mut self.dying);
        for h in &mut self.held {
            h.waits_for.extend(&dying);
            h.waits_for.retain(|&p| exists(p));
        }
        let (told, held): (Vec<Held>, Vec<Held>) =
            std::mem::take(&mut self.held).into_iter().partition(|h| {
                h.waits_for.is_empty() || h.since.elapsed() >= Duration::from_secs(HOLD_SECONDS)
            });
        self.held = held;
        for h in told {
            // Nothing of its uid runs once its end is told.
            if let Event::Ended { token, .. } = h.end
                && let Some(slot) = self.slots.remove(&token)
            {
                self.give_back(slot);
            }
            h.end.encode_into(&mut self.out);
        }
    }

    /// Every leftover now, and everything under it, stopped and killed
    /// ([`kill_trees`]).
    fn walk(&mut self) {
        let mut leftovers = leftovers(&children(), &self.pids);
        leftovers.retain(|p| !self.cleaning.contains_key(p));
        self.dying.extend(kill_trees(&leftovers));
        self.walking = !leftovers.is_empty();
    }

    /// Begins giving a uid back ([`uids::give_back`]), its cleaner's end
    /// awaited in [`Keeper::reap`].
    fn give_back(&mut self, slot: Slot) {
        if let Some((pid, slot)) = uids::give_back(slot) {
            self.cleaning.insert(pid, slot);
        }
    }

    /// Sends what events it can without waiting; false if the supervisor
    /// is gone.
    fn flush(&mut self) -> bool {
        while !self.out.is_empty() {
            // SAFETY: send(2) from a buffer we own.
            let n = unsafe {
                libc::send(
                    self.sock.as_raw_fd(),
                    self.out.as_ptr().cast(),
                    self.out.len(),
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                )
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                match e.kind() {
                    std::io::ErrorKind::Interrupted => continue,
                    std::io::ErrorKind::WouldBlock => return true,
                    _ => return false,
                }
            }
            self.out.drain(..n as usize);
        }
        true
    }

    /// Kills every command and everything under the keeper, reaping as it
    /// goes, until nothing is left (or [`DIE_SECONDS`] have passed); the
    /// keeper's exit code.
    fn die(&mut self, code: i32) -> i32 {
        let commands: Vec<i32> = self.pids.keys().copied().collect();
        kill_trees(&commands);
        self.pids.clear();
        let deadline = Instant::now() + Duration::from_secs(DIE_SECONDS);
        loop {
            self.reap();
            self.walk();
            // A child reaped had its own children reparented to the keeper
            // first, so an empty list is final.
            if (!self.walking && children().is_empty()) || Instant::now() >= deadline {
                let slots: Vec<Slot> = self.slots.drain().map(|(_, s)| s).collect();
                for slot in slots {
                    self.give_back(slot);
                }
                // Cleaners still at work go on alone, each holding its
                // uid's lock until it is done.
                return code;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The keeper's children now: its commands, and leftovers reparented to it.
fn children() -> Vec<i32> {
    // SAFETY: getpid(2) can't fail.
    children_of(unsafe { libc::getpid() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_child_but_a_live_command_is_a_leftover() {
        let commands: HashMap<i32, u64> = [(100, 1), (200, 2)].into();
        assert_eq!(leftovers(&[100, 150, 200, 250], &commands), vec![150, 250]);
        assert_eq!(leftovers(&[100, 200], &commands), Vec::<i32>::new());
        // Never init, nor "every process" (kill(-1) would be that).
        assert_eq!(leftovers(&[0, 1, -1, 7], &HashMap::new()), vec![7]);
    }
}
