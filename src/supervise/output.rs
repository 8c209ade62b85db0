//! The thread that reads every command's output: one per process, an
//! `epoll(7)` over the read ends of the commands' pipes, each read into its
//! [`Tail`] until its end (every writer gone). One thread for all, not one
//! a command: a run's start costs no thread's start and end (issue 14's
//! starts a second).
//!
//! Each turn reads at most [`TURN_BYTES`] of a pipe before the next one's,
//! so a command printing without end holds up no other's output.

use std::collections::HashMap;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::tail::Tail;

/// How much of one pipe a turn reads before it goes on to the next.
const TURN_BYTES: usize = 256 * 1024;

/// The reading thread's inbox: pipes to add, and how to wake it.
struct Inbox {
    new: Vec<(std::io::PipeReader, Arc<Tail>)>,
    /// An eventfd the thread waits on beside the pipes.
    wake: Arc<OwnedFd>,
}

/// The reading thread, once started.
static READING: Mutex<Option<Inbox>> = Mutex::new(None);

/// Reads `pipe` into `tail` until its end, on the reading thread (started
/// first if there is none).
pub fn read_into(pipe: std::io::PipeReader, tail: Arc<Tail>) -> std::io::Result<()> {
    let mut reading = READING.lock().expect("reading");
    if reading.is_none() {
        *reading = Some(start()?);
    }
    let inbox = reading.as_mut().expect("started");
    inbox.new.push((pipe, tail));
    let one: u64 = 1;
    // SAFETY: write(2) of eight bytes to an eventfd we own.
    unsafe { libc::write(inbox.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
    Ok(())
}

/// Starts the reading thread.
fn start() -> std::io::Result<Inbox> {
    // SAFETY: eventfd(2) and epoll_create1(2) make descriptors we then own.
    let (wake, epoll) = unsafe {
        let wake = libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK);
        if wake < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let wake = OwnedFd::from_raw_fd(wake);
        let epoll = libc::epoll_create1(libc::EPOLL_CLOEXEC);
        if epoll < 0 {
            return Err(std::io::Error::last_os_error());
        }
        (Arc::new(wake), OwnedFd::from_raw_fd(epoll))
    };
    watch(&epoll, wake.as_raw_fd(), u64::MAX)?;
    let theirs = wake.clone();
    std::thread::Builder::new()
        .name("output".into())
        .stack_size(256 * 1024)
        .spawn(move || run(epoll, theirs))?;
    Ok(Inbox {
        new: Vec::new(),
        wake,
    })
}

/// Adds descriptor `fd` to `epoll`, for reading, as `key`.
fn watch(epoll: &OwnedFd, fd: i32, key: u64) -> std::io::Result<()> {
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: key,
    };
    // SAFETY: epoll_ctl(2) on descriptors we own.
    if unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The reading thread: waits for output (or new pipes), reads it into the
/// pipes' tails, and lets a pipe go at its end.
fn run(epoll: OwnedFd, wake: Arc<OwnedFd>) {
    let mut pipes: HashMap<u64, (std::io::PipeReader, Arc<Tail>)> = HashMap::new();
    let mut next: u64 = 0;
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: epoll_wait(2) into a buffer of `events.len()` entries.
        let n = unsafe {
            libc::epoll_wait(
                epoll.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as i32,
                -1,
            )
        };
        if n < 0 {
            continue; // EINTR
        }
        for ev in &events[..n as usize] {
            let key = ev.u64;
            if key == u64::MAX {
                let mut count = 0u64;
                // SAFETY: read(2) of an eventfd's eight bytes.
                unsafe { libc::read(wake.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
                let new = std::mem::take(
                    &mut READING
                        .lock()
                        .expect("reading")
                        .as_mut()
                        .expect("started")
                        .new,
                );
                for (pipe, tail) in new {
                    // SAFETY: fcntl(2) on a descriptor we own.
                    unsafe {
                        let fd = pipe.as_raw_fd();
                        let flags = libc::fcntl(fd, libc::F_GETFL);
                        libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
                    }
                    next += 1;
                    if watch(&epoll, pipe.as_raw_fd(), next).is_err() {
                        // Can't be watched: said ended, so nothing waits on it.
                        tail.done.store(true, Ordering::Release);
                        continue;
                    }
                    pipes.insert(next, (pipe, tail));
                }
                continue;
            }
            let Some((pipe, tail)) = pipes.get_mut(&key) else {
                continue;
            };
            let mut read = 0;
            let ended = loop {
                match pipe.read(&mut buf) {
                    Ok(0) => break true,
                    Ok(n) => {
                        tail.push(&buf[..n]);
                        read += n;
                        if read >= TURN_BYTES {
                            break false;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break false,
                    Err(_) => break true,
                }
            };
            if ended {
                let (pipe, tail) = pipes.remove(&key).expect("there");
                drop(pipe); // closing it takes it out of the epoll set
                tail.done.store(true, Ordering::Release);
            }
        }
    }
}
