//! Runs as another Unix user (`ORCA_RUN_AS`): looked up once at start, by
//! [`super::guard`], and read by the supervisor when it starts a command.

/// The Unix user runs execute as (unset: orca's own).
pub const RUN_AS_VAR: &str = "ORCA_RUN_AS";

static RUN_AS: std::sync::OnceLock<Option<RunAs>> = std::sync::OnceLock::new();

/// Sets the user runs execute as (`None`: orca's own); the first call wins.
pub(super) fn set(user: Option<RunAs>) {
    let _ = RUN_AS.set(user);
}

/// The user runs execute as, when `ORCA_RUN_AS` names one (and this
/// process starts runs).
pub fn run_as() -> Option<&'static RunAs> {
    RUN_AS.get().and_then(|u| u.as_ref())
}

/// What a process that starts runs says at start when it runs as root
/// (`euid` 0) with no user to run them as (`ORCA_RUN_AS`) and no uids of
/// their own (`ORCA_RUN_UIDS`; `elsewhere`: either is set): its runs get
/// root.
pub fn root_warning(euid: u32, elsewhere: bool) -> Option<String> {
    (euid == 0 && !elsewhere).then(|| {
        format!(
            "running as root with no {RUN_AS_VAR}: pipelines run as root too; set {RUN_AS_VAR} to a user of their own, or ORCA_RUN_UIDS to a range of uids (docs/security.md)"
        )
    })
}

/// The Unix user runs execute as.
#[derive(Debug, Clone, PartialEq)]
pub struct RunAs {
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
    /// Its home directory.
    pub home: String,
}

/// `ORCA_RUN_AS`, looked up: `None` when unset or empty; an error (bad
/// input) for an unknown user, or when this process can't switch users
/// (it isn't root).
pub fn run_as_from_env() -> Result<Option<RunAs>, String> {
    let Some(name) = std::env::var(RUN_AS_VAR)
        .ok()
        .filter(|n| !n.trim().is_empty())
    else {
        return Ok(None);
    };
    let name = name.trim().to_string();
    let Ok(cname) = std::ffi::CString::new(name.clone()) else {
        return Err(format!("{RUN_AS_VAR}: not a user name"));
    };
    // SAFETY: getpwnam(3) returns a pointer into static storage or NULL; its
    // fields are copied out at once, on this thread, before any other call.
    let found = unsafe {
        let pw = libc::getpwnam(cname.as_ptr());
        if pw.is_null() {
            None
        } else {
            let home = std::ffi::CStr::from_ptr((*pw).pw_dir)
                .to_string_lossy()
                .into_owned();
            Some(((*pw).pw_uid, (*pw).pw_gid, home))
        }
    };
    let Some((uid, gid, home)) = found else {
        return Err(format!("{RUN_AS_VAR}={name}: no such user"));
    };
    // SAFETY: geteuid(2) can't fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(format!(
            "{RUN_AS_VAR}={name}: orca must run as root to start runs as another user"
        ));
    }
    if uid == 0 {
        return Err(format!(
            "{RUN_AS_VAR}={name}: runs as root would reach orca's secrets; name an unprivileged user"
        ));
    }
    Ok(Some(RunAs {
        name,
        uid,
        gid,
        home,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_with_no_run_as_is_warned_of() {
        let w = root_warning(0, false).unwrap();
        assert!(
            w.contains("ORCA_RUN_AS") && w.contains("docs/security.md"),
            "{w}"
        );
        assert_eq!(root_warning(0, true), None);
        assert_eq!(root_warning(1000, false), None);
    }
}
