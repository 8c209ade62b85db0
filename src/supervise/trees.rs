//! Processes as trees, read from `/proc`: a tree stopped top-down and
//! killed whole ([`kill_trees`]), whether a process is there, a process's
//! children, and a child reaped or killed ([`reap_or_kill`]). What the
//! keeper and the per-uid kill share; it knows nothing of commands.

use std::time::{Duration, Instant};

/// The most processes one [`kill_trees`] stops before it kills them.
const MAX_TREE: usize = 100_000;

/// How long one [`kill_trees`] waits, in all, for processes to stop.
const STOP_WAIT_MILLIS: u64 = 200;

/// Stops every process of the trees under `roots`, top-down, then SIGKILLs
/// them all; the processes it killed. A process is stopped, and seen
/// stopped, before its children
/// are read, so none can be added behind the walk: a chain that forks
/// deeper as it is killed (faster than its levels could be reparented to
/// the keeper one by one) is killed whole. A process that won't stop in
/// time (in the kernel) is read and killed all the same: the waits of one
/// call come to at most [`STOP_WAIT_MILLIS`], so no tree holds the keeper
/// up longer.
pub(super) fn kill_trees(roots: &[i32]) -> Vec<i32> {
    let waits_end = Instant::now() + Duration::from_millis(STOP_WAIT_MILLIS);
    let mut seen = std::collections::HashSet::new();
    let mut stopped = Vec::new();
    let mut todo: Vec<i32> = roots.iter().copied().filter(|p| *p > 1).collect();
    while let Some(pid) = todo.pop() {
        if !seen.insert(pid) || stopped.len() >= MAX_TREE {
            continue;
        }
        // SAFETY: kill(2) on a descendant of the keeper's, read from its
        // parent's list while that parent was stopped (so not reaped and
        // its pid not reused, but by a parent that ignores SIGCHLD).
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        while Instant::now() < waits_end {
            match stat_state(pid) {
                Some(b'R' | b'S' | b'D' | b'I' | b'W' | b'P') => {
                    std::thread::sleep(Duration::from_micros(50));
                }
                _ => break,
            }
        }
        stopped.push(pid);
        todo.extend(children_of(pid));
    }
    for &pid in &stopped {
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    stopped
}

/// Whether process `pid` is there (a zombie is, until reaped).
pub(super) fn exists(pid: i32) -> bool {
    // SAFETY: kill(2) with signal 0 sends nothing.
    let sent = unsafe { libc::kill(pid, 0) };
    sent == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The state letter of process `pid` (`/proc/PID/stat`'s third field), if
/// it is there.
fn stat_state(pid: i32) -> Option<u8> {
    let st = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    let close = st.iter().rposition(|&b| b == b')')?;
    st.get(close + 2).copied()
}

/// The children of every thread of process `pid`: the kernel's own lists,
/// or a scan of /proc where the kernel doesn't keep them.
pub(super) fn children_of(pid: i32) -> Vec<i32> {
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        let lists: Vec<String> = tasks
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
            .collect();
        if !lists.is_empty() {
            return lists
                .iter()
                .flat_map(|l| l.split_whitespace().filter_map(|p| p.parse().ok()))
                .collect();
        }
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|st| {
                    // pid (comm) state ppid ...: comm may hold spaces.
                    let rest = &st[st.rfind(')')? + 2..];
                    rest.split_whitespace().nth(1)?.parse::<i32>().ok()
                })
                == Some(pid)
        })
        .collect()
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
