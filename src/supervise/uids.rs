//! The keeper's side of `ORCA_RUN_UIDS` (see `secrets::run_uids`): taking a
//! uid of the range for one command, and giving it back once nothing of
//! that uid runs.
//!
//! A uid is **free** when no live process has it (as its real, effective,
//! saved or file uid), no user or group of the host is named by it, and
//! the keeper gets its lock: `flock` on `<BASE>/<uid>.lock`, which every
//! supervisor's keeper on the host tries, and which the keeper holds for as
//! long as the command or anything of its uid may run (the kernel lets go
//! of it should the keeper die). Taken, the uid gets a fresh home,
//! `<BASE>/<uid>/` (0700, the uid's), the command's `HOME` and `TMPDIR`.
//!
//! Given back (after the command's end and what it left was killed, before
//! the end is told): every process of the uid is stopped and killed (a
//! `/proc` walk, then a child that becomes the uid and sends `kill(-1,
//! SIGKILL)`, which the kernel delivers to all of them at once, so none can
//! fork behind it); then a cleaner, a child of the keeper's, removes its
//! home and what the uid left at the top of `/tmp`, `/var/tmp` and
//! `/dev/shm`, so that the next command of that uid finds nothing of this
//! one's. Only once the cleaner is reaped (the keeper goes on meanwhile: a
//! run's million files hold up no other run) is the lock let go; the
//! cleaner holds it too, so a keeper gone first lets go of no uid whose
//! cleaner is still at work.

use std::collections::HashSet;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::wire::{Identity, Spawn};
use crate::secrets::run_uids::{BASE, UidRange, candidates};

/// A uid taken for one command.
pub struct Slot {
    /// The uid (and gid).
    pub uid: u32,
    /// Its home (and TMPDIR).
    pub home: PathBuf,
    /// The lock, held while the slot lives.
    _lock: File,
}

/// The uids in the `Uid:` line of a `/proc/PID/status` text (real,
/// effective, saved, file), and whether it is a zombie (or dead) with no
/// other thread: such a process runs nothing. (A process whose first
/// thread ended while others run on shows as a zombie with `Threads:` over
/// 1: it runs.)
pub fn status_uids(status: &str) -> (Vec<u32>, bool) {
    let mut uids = Vec::new();
    let mut gone = false;
    let mut threads = 1u32;
    for line in status.lines() {
        if let Some(rest) = line.strip_prefix("Threads:") {
            threads = rest.trim().parse().unwrap_or(1);
        }
        if let Some(rest) = line.strip_prefix("Uid:") {
            uids = rest
                .split_whitespace()
                .filter_map(|u| u.parse().ok())
                .collect();
        } else if let Some(rest) = line.strip_prefix("State:") {
            gone = matches!(rest.trim_start().as_bytes().first(), Some(b'Z' | b'X'));
        }
    }
    (uids, gone && threads <= 1)
}

/// Every live process, with its uids.
fn processes() -> Vec<(i32, Vec<u32>)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let (uids, gone) = status_uids(&status);
            (!gone).then_some((pid, uids))
        })
        .collect()
}

/// The live processes of `uid`.
fn processes_of(uid: u32) -> Vec<i32> {
    processes()
        .into_iter()
        .filter(|(_, uids)| uids.contains(&uid))
        .map(|(pid, _)| pid)
        .collect()
}

/// Whether `uid` names a user or a group of the host.
fn named(uid: u32) -> bool {
    // SAFETY: getpwuid(3) and getgrgid(3) return static storage or NULL;
    // only the pointers are looked at, on the keeper's one thread.
    unsafe { !libc::getpwuid(uid).is_null() || !libc::getgrgid(uid).is_null() }
}

/// Takes a free uid of `range` (see the module's doc), with a fresh home.
pub fn take(range: UidRange) -> std::io::Result<Slot> {
    let base = Path::new(BASE);
    // Made again should a cleaner of /var/tmp have removed it.
    crate::secrets::run_uids::prepare_base(base).map_err(std::io::Error::other)?;
    let in_use: HashSet<u32> = processes().into_iter().flat_map(|(_, u)| u).collect();
    for uid in candidates(range, &in_use, named) {
        let Some(lock) = lock(&base.join(format!("{uid}.lock")))? else {
            continue;
        };
        // Whatever a holder that died left (its keeper killed before its
        // cleaner was done: its home is still there) goes first.
        let home = base.join(uid.to_string());
        if std::fs::symlink_metadata(&home).is_ok() {
            remove(&home);
            sweep_tmp(uid);
        }
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().mode(0o700).create(&home)?;
        std::os::unix::fs::chown(&home, Some(uid), Some(uid))?;
        return Ok(Slot {
            uid,
            home,
            _lock: lock,
        });
    }
    Err(std::io::Error::other(format!(
        "no free uid in ORCA_RUN_UIDS ({}-{}): each is a live run's, a process's or a user's",
        range.first, range.last
    )))
}

/// For a command asked to run as a uid of its own ([`Identity::Range`]): a
/// uid taken ([`take`]), the request made to run as it, with `HOME` and
/// `TMPDIR` its home and `USER` and `LOGNAME` `orca-run-<uid>`. `None` for
/// any other command.
pub fn take_for(s: &mut Spawn) -> std::io::Result<Option<Slot>> {
    let Identity::Range(first, last) = s.run_as else {
        return Ok(None);
    };
    let slot = take(UidRange { first, last })?;
    s.run_as = Identity::User(slot.uid, slot.uid);
    let home = slot.home.as_os_str().as_bytes();
    let name = format!("orca-run-{}", slot.uid);
    for (k, v) in [
        (&b"HOME"[..], home),
        (b"TMPDIR", home),
        (b"USER", name.as_bytes()),
        (b"LOGNAME", name.as_bytes()),
    ] {
        s.vars.push([k, b"=", v].concat());
    }
    Ok(Some(slot))
}

/// The lock at `path`, if no one holds it: the file locked, and still the
/// one at `path` (not one removed and made again meanwhile).
fn lock(path: &Path) -> std::io::Result<Option<File>> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    // SAFETY: flock(2) on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EWOULDBLOCK) => Ok(None),
            _ => Err(e),
        };
    }
    let ours = f.metadata()?;
    let there = std::fs::symlink_metadata(path)?;
    Ok((ours.ino() == there.ino() && ours.dev() == there.dev()).then_some(f))
}

/// Begins giving `slot` back: every process of its uid killed, then a
/// cleaner started, a child of the keeper's, which removes its home and
/// what the uid left at the top of the temp directories (however many
/// files a run made, the keeper doesn't wait on their removal). The
/// cleaner's pid, the slot to hand to [`cleaned`] once it is reaped;
/// `None` if it could not be started (then cleaned here).
pub fn give_back(slot: Slot) -> Option<(i32, Slot)> {
    kill_uid(slot.uid);
    let lock = slot._lock.as_raw_fd() as u32;
    // SAFETY: fork(2) of the single-threaded keeper: the child may
    // allocate (no lock is held by another thread), and _exit(2)s.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: in the child: no descriptor of the keeper's kept but the
        // uid's lock (shared with the keeper: should the keeper go first,
        // the cleaner still holds it, and no run is given the uid until
        // it is done; a root cleaner keeps no uid in use), then the uid's
        // files removed. As root, so that a directory the run made
        // unreadable (mode 000) goes too; nothing of the uid runs to race
        // it, and `remove_dir_all` follows no link.
        unsafe {
            if lock > 0 {
                libc::syscall(libc::SYS_close_range, 0u32, lock - 1, 0u32);
            }
            libc::syscall(libc::SYS_close_range, lock + 1, u32::MAX, 0u32);
            remove(&slot.home);
            sweep_tmp(slot.uid);
            libc::_exit(0);
        }
    }
    if pid < 0 {
        cleaned(slot, false);
        return None;
    }
    Some((pid, slot))
}

/// Ends giving `slot` back once its cleaner is reaped (`done`: it exited
/// 0): if it didn't finish (killed), what it left is removed here; then
/// the lock let go. A cleaner that finished leaves the keeper no walk of
/// the temp directories (which a run could have filled with names).
pub fn cleaned(slot: Slot, done: bool) {
    if !done {
        remove(&slot.home);
        sweep_tmp(slot.uid);
    }
    drop(slot);
}

/// Kills every process of `uid`: stopped and killed tree by tree as they
/// are found in `/proc` (a few passes), then `kill(-1, SIGKILL)` as `uid`
/// by a child of the keeper's, which the kernel sends to every process of
/// the uid at once. That child is waited for at most 200 ms (a process of
/// the uid could stop it before it kills) and then killed itself.
fn kill_uid(uid: u32) {
    for _ in 0..5 {
        let left = processes_of(uid);
        if left.is_empty() {
            break;
        }
        super::trees::kill_trees(&left);
    }
    // SAFETY: fork(2) of the single-threaded keeper; the child calls only
    // async-signal-safe functions and _exit(2)s.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: in the child: no descriptor of the keeper's kept, its
        // ids, one signal, its end.
        unsafe {
            libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32);
            if libc::setgroups(0, std::ptr::null()) == 0
                && libc::setresgid(uid, uid, uid) == 0
                && libc::setresuid(uid, uid, uid) == 0
            {
                libc::kill(-1, libc::SIGKILL);
            }
            libc::_exit(0);
        }
    }
    if pid < 0 {
        return;
    }
    super::trees::reap_or_kill(pid, Duration::from_millis(200), Duration::from_millis(1));
}

/// Removes what `uid` owns at the top of `/tmp`, `/var/tmp`, `/dev/shm`
/// and the temp dir (a directory whole, without following links), when no
/// process of it runs.
fn sweep_tmp(uid: u32) {
    use std::os::unix::fs::MetadataExt;
    let mut dirs = vec![
        PathBuf::from("/tmp"),
        PathBuf::from("/var/tmp"),
        PathBuf::from("/dev/shm"),
    ];
    let tmp = std::env::temp_dir();
    if !dirs.contains(&tmp) {
        dirs.push(tmp);
    }
    for dir in dirs {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if e.metadata().is_ok_and(|m| m.uid() == uid) {
                remove(&e.path());
            }
        }
    }
}

/// Removes `path` (a directory whole, a link itself, not what it names).
fn remove(path: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            let _ = std::fs::remove_dir_all(path);
        }
        Ok(_) => {
            let _ = std::fs::remove_file(path);
        }
        Err(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_s_uids_and_whether_it_is_gone_are_read_from_its_status() {
        let running =
            "Name:\tsleep\nState:\tS (sleeping)\nUid:\t62000\t62000\t62000\t62000\nGid:\t0\n";
        assert_eq!(status_uids(running), (vec![62000; 4], false));
        // A setuid program a run started: its real uid is the run's.
        let setuid = "State:\tR (running)\nUid:\t62001\t0\t0\t0\n";
        assert_eq!(status_uids(setuid), (vec![62001, 0, 0, 0], false));
        let zombie = "State:\tZ (zombie)\nUid:\t62000\t62000\t62000\t62000\nThreads:\t1\n";
        assert!(status_uids(zombie).1);
        // Its first thread ended, another runs on: not gone.
        let leader_gone = "State:\tZ (zombie)\nUid:\t62000\t62000\t62000\t62000\nThreads:\t2\n";
        assert!(!status_uids(leader_gone).1);
        assert_eq!(status_uids(""), (vec![], false));
    }
}
