//! How the keeper starts a command ([`start`]): cloned as `posix_spawn(3)`
//! does, or forked when it runs as another user, then made a session
//! leader and a subreaper with SIGKILL as its parent-death signal, its
//! descriptors but 0 to 2 closed, and exec'd as `execvp(3)` would (see the
//! keeper's module doc).

use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::super::wire::{Identity, Spawn};

/// Starts `s`'s command with `out` as its stdout and stderr and `/dev/null`
/// (`devnull`) as its stdin, with `env` (the keeper's own environment, as
/// `(name, NAME=value)`) under the request's settings (see the module's
/// doc). Cloned as `posix_spawn(3)` does (no copy of the keeper's memory
/// map), the keeper waiting only until it execs. The program is found as `execvp(3)` finds it, in the command's
/// `PATH`; a file with no `#!` line is run by `/bin/sh`. What can't be
/// started says why on its stderr and exits 127. Its pid.
pub(super) fn start(
    s: &Spawn,
    out: &OwnedFd,
    env: &[(Vec<u8>, CString)],
    devnull: RawFd,
    stack: &mut [u8],
    own_uid: bool,
) -> std::io::Result<i32> {
    let Some((program, args)) = s.argv.split_first() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "no command",
        ));
    };
    let nul = |_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a NUL byte");
    let name = |kv: &[u8]| {
        kv.iter()
            .position(|&b| b == b'=')
            .map(|eq| kv[..eq].to_vec())
    };
    let ours: Vec<CString> = s
        .vars
        .iter()
        .filter(|kv| name(kv).is_some())
        .map(|kv| CString::new(kv.clone()).map_err(nul))
        .collect::<Result<_, _>>()?;
    let set: std::collections::HashSet<Vec<u8>> = s.vars.iter().filter_map(|kv| name(kv)).collect();
    let mut envp: Vec<*const libc::c_char> = env
        .iter()
        .filter(|(k, _)| !set.contains(k))
        .map(|(_, kv)| kv.as_ptr())
        .chain(ours.iter().map(|kv| kv.as_ptr()))
        .collect();
    envp.push(std::ptr::null());
    // Where to look for it: itself if it has a `/`, else each directory of
    // the command's PATH (its own setting's, or the keeper's).
    let path = s
        .vars
        .iter()
        .rev()
        .find_map(|kv| kv.strip_prefix(b"PATH="))
        .map(<[u8]>::to_vec)
        .or_else(|| {
            env.iter()
                .find(|(k, _)| k == b"PATH")
                .map(|(_, kv)| kv.as_bytes()[5..].to_vec())
        })
        .unwrap_or_else(|| b"/usr/bin:/bin".to_vec());
    let candidates: Vec<CString> = if program.contains(&b'/') {
        vec![CString::new(program.clone()).map_err(nul)?]
    } else {
        path.split(|&b| b == b':')
            .map(|dir| {
                let dir = if dir.is_empty() { &b"."[..] } else { dir };
                CString::new([dir, b"/", program].concat()).map_err(nul)
            })
            .collect::<Result<_, _>>()?
    };
    let argv: Vec<CString> = s
        .argv
        .iter()
        .map(|a| CString::new(a.clone()).map_err(nul))
        .collect::<Result<_, _>>()?;
    let mut argv_p: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_p.push(std::ptr::null());
    // The same under /bin/sh, for a file with no `#!` line: `sh PATH
    // ARGS...`, PATH (slot 1) set by the child to the file it found.
    let sh_args: Vec<CString> = args
        .iter()
        .map(|a| CString::new(a.clone()).map_err(nul))
        .collect::<Result<_, _>>()?;
    let mut sh_argv: Vec<*const libc::c_char> = vec![c"sh".as_ptr(), std::ptr::null()];
    sh_argv.extend(sh_args.iter().map(|a| a.as_ptr()));
    sh_argv.push(std::ptr::null());
    // A command run as another user is that user's from its setuid on, so
    // that user's processes could stop it before it execs: the keeper must
    // not wait on it then. It is forked (a copy of the keeper's small
    // memory), not cloned into the keeper's, and says itself why it could
    // not exec.
    let run_as = match s.run_as {
        Identity::User(uid, gid) => Some((uid, gid)),
        Identity::Keeper => None,
        Identity::Range(..) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "no uid taken from the range",
            ));
        }
    };
    let shared = run_as.is_none();
    let x = Exec {
        run_as,
        own_uid,
        // SAFETY: getpid(2) can't fail.
        keeper: unsafe { libc::getpid() },
        devnull,
        out: out.as_raw_fd(),
        candidates: &candidates,
        argv: &argv_p,
        envp: &envp,
        sh_argv: sh_argv.as_mut_ptr(),
        shared,
        said: format!("orca: can't run {}: ", String::from_utf8_lossy(program)),
        error: std::sync::atomic::AtomicI32::new(0),
    };
    let flags = if shared {
        libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD
    } else {
        libc::SIGCHLD
    };
    // The child's stack, its top 16-byte aligned (it grows down).
    let top = stack.as_mut_ptr_range().end as usize & !15;
    // SAFETY: clone(2). Shared: with CLONE_VM | CLONE_VFORK, as
    // posix_spawn(3) does, the child runs `exec_child` on a stack of its
    // own in this memory while the keeper waits, until it execs or exits.
    // Not shared: as fork(2), on its copy of that stack. `x` and what it
    // points to live across the call. SIGCHLD tells its end.
    let pid = unsafe {
        libc::clone(
            exec_child,
            top as *mut libc::c_void,
            flags,
            (&x as *const Exec).cast_mut().cast(),
        )
    };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let error = x.error.load(std::sync::atomic::Ordering::Acquire);
    if error != 0 {
        // It exits 127 (reaped and told as any end); its output says why.
        let mut w = std::fs::File::from(out.try_clone()?);
        let _ = writeln!(w, "{}{}", x.said, std::io::Error::from_raw_os_error(error));
    }
    Ok(pid)
}

/// What [`exec_child`] is given: all made before the clone, so that the
/// child, sharing the keeper's memory, allocates nothing.
struct Exec<'a> {
    run_as: Option<(u32, u32)>,
    /// It runs as a uid of its own (`ORCA_RUN_UIDS`): it starts with umask
    /// 077 and no new privileges (`PR_SET_NO_NEW_PRIVS`: a set-user-ID
    /// program a run of its uid left somewhere can't make another run's
    /// process that uid again).
    own_uid: bool,
    keeper: i32,
    devnull: RawFd,
    out: RawFd,
    /// Where the program may be, in order: each NUL-terminated.
    candidates: &'a [CString],
    /// Its `argv` and `envp`, each ending with a null pointer.
    argv: &'a [*const libc::c_char],
    envp: &'a [*const libc::c_char],
    /// `sh _ ARGS... NULL`, its slot 1 for the child to fill.
    sh_argv: *mut *const libc::c_char,
    /// Cloned into the keeper's memory (else forked).
    shared: bool,
    /// `orca: can't run PROGRAM: `, what the output says before why.
    said: String,
    /// Why it could not exec (an errno), written by a shared child.
    error: std::sync::atomic::AtomicI32,
}

/// The cloned child of [`start`]: [`child`], then exit 127, why left for
/// the keeper (shared) or said on its stderr (forked).
extern "C" fn exec_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `start` passes an `Exec` that outlives the child's use of it.
    let x = unsafe { &*(arg as *const Exec) };
    // SAFETY: this is the child of `start`'s clone.
    let e = unsafe { child(x) };
    if x.shared {
        x.error.store(
            e.raw_os_error().unwrap_or(libc::EINVAL),
            std::sync::atomic::Ordering::Release,
        );
    } else {
        // A copy of the keeper's memory, the keeper single-threaded: this
        // may allocate.
        let line = format!("{}{e}\n", x.said);
        // SAFETY: write(2) of a buffer we own to our stderr (the output).
        unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
    }
    // SAFETY: _exit(2) runs no handler of the keeper's.
    unsafe { libc::_exit(127) }
}

/// The child of [`start`]: makes itself the command and execs it (see the
/// module's doc); returns only why it could not. Allocates nothing.
///
/// # Safety
///
/// Only in the cloned child of the (single-threaded) keeper, with what
/// `x` points to alive.
unsafe fn child(x: &Exec) -> std::io::Error {
    let last = std::io::Error::last_os_error;
    unsafe {
        // Its output first, so that what goes wrong from here is said in it.
        if libc::dup2(x.devnull, 0) < 0 || libc::dup2(x.out, 1) < 0 || libc::dup2(x.out, 2) < 0 {
            return last();
        }
        if libc::setsid() < 0 {
            return last();
        }
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
        if let Some((uid, gid)) = x.run_as {
            // Groups first: after setuid they can't be dropped.
            if libc::setgroups(1, &gid) != 0 || libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
                return last();
            }
        }
        // After the ids: a change of them clears it.
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if libc::getppid() != x.keeper {
            libc::_exit(127);
        }
        if x.own_uid {
            libc::umask(0o077);
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return last();
            }
        }
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGPIPE] {
            libc::signal(sig, libc::SIG_DFL);
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        // Nothing but its stdin, stdout and stderr: not what orca was
        // started with and left open (the keeper's own are close-on-exec).
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) != 0 {
            let open_max = libc::sysconf(libc::_SC_OPEN_MAX).clamp(0, 1 << 16) as i32;
            for fd in 3..open_max {
                libc::close(fd);
            }
        }
        // As execvp(3): the first that execs; a file found but not to be
        // run (EACCES) is the error said if none does.
        let mut error = std::io::Error::from_raw_os_error(libc::ENOENT);
        for path in x.candidates {
            libc::execve(path.as_ptr(), x.argv.as_ptr(), x.envp.as_ptr());
            let e = last();
            match e.raw_os_error() {
                Some(libc::ENOEXEC) => {
                    *x.sh_argv.add(1) = path.as_ptr();
                    libc::execve(c"/bin/sh".as_ptr(), x.sh_argv, x.envp.as_ptr());
                    return last();
                }
                Some(libc::ENOENT | libc::ENOTDIR) => {}
                Some(libc::EACCES) => error = e,
                _ => return e,
            }
        }
        error
    }
}
