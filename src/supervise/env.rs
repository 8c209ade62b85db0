//! What a run's environment gets of orca's own ([`passed_on`]): no
//! setting or secret of orca's, of Postgres's client or of AWS's. The
//! keeper is started with just that ([`inherited`]), so nothing in its
//! environment is a secret.

use std::ffi::{CString, OsString};

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
pub(super) fn inherited() -> &'static [(OsString, CString)] {
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

#[cfg(test)]
mod tests {
    use super::*;

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
