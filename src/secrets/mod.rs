//! What keeps orca's secrets out of its runs' reach (docs/security.md):
//! long-lived processes that can't be dumped or read through `/proc`, a
//! machine's single-use boot token replaced at its first login and handed
//! on in a file only orca's user reads, runs as another Unix user
//! (`ORCA_RUN_AS`), and runs as uids of their own (`ORCA_RUN_UIDS`).

//!
//! The bottom layer: it imports no other part of orca. `db` logs in with a
//! [`Login`]; `machines` makes secrets and verifiers with [`scram`];
//! `supervise` starts runs as [`run_as`], or as uids of [`run_uids`].

mod login;
pub mod run_as;
pub mod run_uids;
pub mod scram;

pub use login::{Login, TOKEN_FILE_VAR};
pub use run_as::{RUN_AS_VAR, run_as, run_as_from_env};
pub use run_uids::run_uids;

/// Sets up a long-lived orca process before it reads a secret: it is
/// [`protect`]ed, and, for one that starts runs (`starts_runs`), the user
/// runs execute as is read from `ORCA_RUN_AS`, and the range of uids of
/// their own from `ORCA_RUN_UIDS` (bad input: an error).
pub fn guard(starts_runs: bool) -> Result<(), String> {
    protect();
    if starts_runs {
        run_uids::set(run_uids::run_uids_from_env()?);
        run_as::set(run_as_from_env()?);
    }
    Ok(())
}

/// [`guard`] for `orca ec2-serve`, which starts the commands of one run
/// on an instance of that run's own: as `ORCA_RUN_AS`, never as uids of
/// their own (`ORCA_RUN_UIDS` is left unread). One run at a time has
/// nothing to be kept from, and its `update` must write what the next run
/// finds (the code it pulls), which a uid given back can't.
pub fn guard_one_run() -> Result<(), String> {
    protect();
    run_uids::set(None);
    run_as::set(run_as_from_env()?);
    Ok(())
}

/// [`undumpable`], and the secrets in `/proc/PID/environ` blanked: called
/// first thing in `main`, before anything reads the environment (again by
/// [`guard`], which is idempotent). A process of the same user that stops
/// orca before then (having restarted it) still reads them: with one Unix
/// user, runs are trusted with orca's secrets (docs/security.md).
pub fn protect() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        undumpable();
        scrub_environ();
    });
}

/// Variables whose values are secrets (or hold one: a URL's password).
const SECRET_VARS: &[&str] = &[
    "ORCA_DATABASE_URL",
    "ORCA_POOL_DATABASE_URL",
    "ORCA_TOKEN",
    "PGPASSWORD",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
];

/// Blanks the secrets in the environment block the kernel shows as
/// `/proc/PID/environ` (the strings this process was started with), keeping
/// them for `std::env::var` in copies of libc's. A process of the same user
/// that may read that file (root, without `ORCA_RUN_AS`) sees `*`s.
/// Call first thing in `main`, while the process has one thread.
fn scrub_environ() {
    unsafe extern "C" {
        static mut environ: *mut *mut libc::c_char;
    }
    // SAFETY: single-threaded at this point (called first in main): nothing
    // else reads or writes the environment meanwhile. `environ` is a NULL-
    // terminated array of NUL-terminated strings; each secret's value is
    // copied out (setenv makes libc keep its own copy and point `environ`
    // at it) before the original bytes are overwritten in place, keeping
    // their length and terminator.
    unsafe {
        let mut originals: Vec<*mut libc::c_char> = Vec::new();
        let mut p = environ;
        while !p.is_null() && !(*p).is_null() {
            let entry = std::ffi::CStr::from_ptr(*p).to_bytes();
            if SECRET_VARS.iter().any(|v| {
                entry.len() > v.len() && entry.starts_with(v.as_bytes()) && entry[v.len()] == b'='
            }) {
                originals.push(*p);
            }
            p = p.add(1);
        }
        for ptr in originals {
            let entry = std::ffi::CStr::from_ptr(ptr).to_bytes().to_vec();
            let Some(eq) = entry.iter().position(|&b| b == b'=') else {
                continue;
            };
            use std::os::unix::ffi::OsStrExt;
            let name = std::ffi::OsStr::from_bytes(&entry[..eq]);
            let value = std::ffi::OsStr::from_bytes(&entry[eq + 1..]);
            std::env::set_var(name, value);
            for i in eq + 1..entry.len() {
                *ptr.add(i) = b'*' as libc::c_char;
            }
        }
    }
}

/// Makes this process non-dumpable: no core dump, no ptrace, and its
/// `/proc/PID/environ`, `mem` and `fd` unreadable to other processes of its
/// user that lack `CAP_SYS_PTRACE`. Called first thing by every long-lived
/// orca process, before it reads a secret.
pub fn undumpable() {
    // SAFETY: prctl(2) with PR_SET_DUMPABLE only changes this process's flag.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
}
