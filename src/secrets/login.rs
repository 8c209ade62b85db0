//! A machine's or instance's login: its role and live secret, the boot
//! token replaced at the first login (single use), and the token file that
//! hands the live secret to the next orca process on the machine.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::scram;

/// The environment variable with a machine's (or an instance's) own
/// credentials, `ROLE:SECRET`.
pub const TOKEN_VAR: &str = "ORCA_TOKEN";

/// Where a machine or instance keeps its live secret (`ROLE:SECRET`), set
/// by the boot and instance scripts: a file only orca's user can read.
pub const TOKEN_FILE_VAR: &str = "ORCA_TOKEN_FILE";

/// A machine's or instance's login: its role and current secret, and, where
/// the secret came from its boot token, the file to keep the one that
/// replaces it at its first login.
pub struct Login {
    /// The login role.
    pub role: String,
    secret: Mutex<String>,
    /// The token file, when the scripts set one.
    file: Option<PathBuf>,
    /// The secret is still the boot token's: replace it at the next login.
    pending: Mutex<bool>,
    /// A replacement left in `<token file>.new` by a process that ended
    /// between the database taking it and the file's rename: tried when the
    /// boot token is refused.
    fallback: Mutex<Option<String>>,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Login({}:***)", self.role)
    }
}

/// `ROLE:SECRET` split, or an error naming where it came from (never the
/// secret).
fn split_token(token: &str, from: &str) -> Result<(String, String), String> {
    match token.trim().split_once(':') {
        Some((role, secret)) if !role.is_empty() && !secret.is_empty() => {
            Ok((role.to_string(), secret.to_string()))
        }
        _ => Err(format!("{from} is not ROLE:SECRET")),
    }
}

impl Login {
    /// The credentials this process logs in with: the token file's, if the
    /// file is set and has one (a secret that replaced the boot token);
    /// else `ORCA_TOKEN` (the boot token, replaced at the first login when
    /// a token file is set).
    pub fn from_env(who: &str) -> Result<Login, String> {
        let file = std::env::var_os(TOKEN_FILE_VAR)
            .filter(|f| !f.is_empty())
            .map(PathBuf::from);
        if let Some(path) = &file
            && let Ok(text) = read_bounded(path)
            && !text.trim().is_empty()
        {
            let (role, secret) =
                split_token(&text, &format!("{TOKEN_FILE_VAR} {}", path.display()))?;
            return Ok(Login {
                role,
                secret: Mutex::new(secret),
                file,
                pending: Mutex::new(false),
                fallback: Mutex::new(None),
            });
        }
        let token = std::env::var(TOKEN_VAR).map_err(|_| {
            format!(
                "{TOKEN_VAR} is not set (nor a token in {TOKEN_FILE_VAR}): orca {who} runs with its machine's own credentials"
            )
        })?;
        let (role, secret) = split_token(&token, TOKEN_VAR)?;
        let pending = file.is_some();
        let fallback = file
            .as_ref()
            .and_then(|f| read_bounded(&pending_path(f)).ok())
            .and_then(|t| split_token(&t, "").ok())
            .filter(|(r, _)| *r == role)
            .map(|(_, s)| s);
        Ok(Login {
            role,
            secret: Mutex::new(secret),
            file,
            pending: Mutex::new(pending),
            fallback: Mutex::new(fallback),
        })
    }

    /// The secret to log in with now.
    pub fn secret(&self) -> String {
        self.secret.lock().expect("secret lock").clone()
    }

    /// The secret to try when the boot token is refused: a replacement the
    /// database may have taken though its answer never came (left in
    /// `<token file>.new` by this process or an earlier one). None once the
    /// boot token is replaced.
    pub fn fallback(&self) -> Option<String> {
        if !*self.pending.lock().expect("pending lock") {
            return None;
        }
        self.fallback.lock().expect("fallback lock").clone()
    }

    /// `secret` (a [`Login::fallback`]) logged in: it is the live secret
    /// now, kept in the token file.
    pub fn adopt(&self, secret: String) {
        let mut pending = self.pending.lock().expect("pending lock");
        *self.secret.lock().expect("secret lock") = secret;
        *pending = false;
        *self.fallback.lock().expect("fallback lock") = None;
        if let Some(file) = &self.file {
            let _ = std::fs::rename(pending_path(file), file);
        }
        log::info!(
            "login {}: logged in with the secret that replaced the boot token",
            self.role
        );
    }

    /// After a login with [`Login::secret`]: if that secret was the boot
    /// token's, replaces it with a new random one, whose SCRAM verifier
    /// `store` gives the database (`orca.login_rotate` on the new
    /// connection), kept in the token file for the next orca process on
    /// this machine. The boot token logs nobody in after this. A failure is
    /// logged and tried again at the next login.
    pub fn rotate_if_pending(&self, store: impl FnOnce(&str) -> Result<(), String>) {
        let mut pending = self.pending.lock().expect("pending lock");
        if !*pending {
            return;
        }
        let Some(file) = &self.file else {
            *pending = false;
            return;
        };
        match self.rotate(store, file) {
            Ok(()) => {
                *pending = false;
                log::info!(
                    "login {}: the boot token is replaced (single use)",
                    self.role
                );
            }
            Err(e) => log::warn!(
                "login {}: can't replace the boot token yet ({e}); trying again at the next login",
                self.role
            ),
        }
    }

    fn rotate(
        &self,
        store: impl FnOnce(&str) -> Result<(), String>,
        file: &Path,
    ) -> Result<(), String> {
        let (secret, verifier) = scram::new_secret()?;
        // The new secret is on disk before the database takes it; it
        // replaces the file only once the database has it.
        let tmp = pending_path(file);
        write_private(&tmp, &format!("{}:{secret}", self.role))?;
        if let Err(e) = store(&verifier) {
            // It may have committed with its answer lost: the boot token
            // may be refused from now on, and this secret taken instead.
            *self.fallback.lock().expect("fallback lock") = Some(secret);
            return Err(e);
        }
        std::fs::rename(&tmp, file).map_err(|e| format!("{}: {e}", file.display()))?;
        *self.secret.lock().expect("secret lock") = secret;
        *self.fallback.lock().expect("fallback lock") = None;
        Ok(())
    }
}

/// Where a new secret waits until the database has it: `<token file>.new`
/// (as the scripts name it).
fn pending_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".new");
    PathBuf::from(name)
}

/// Reads a token file of at most 4 KiB.
fn read_bounded(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(4096)
        .read_to_string(&mut text)?;
    Ok(text)
}

/// Writes `text` to a new file `path` that only this user may read, in a
/// directory made likewise if missing.
fn write_private(path: &Path, text: &str) -> Result<(), String> {
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
        && !dir.exists()
    {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    }
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all(text.as_bytes())
        .and_then(|_| f.sync_all())
        .map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_role_colon_secret_and_errors_never_show_it() {
        assert_eq!(
            split_token("orca_m_1:s3cr:et\n", "X").unwrap(),
            ("orca_m_1".into(), "s3cr:et".into())
        );
        for bad in ["", "nocolon", ":secret", "role:"] {
            let e = split_token(bad, "ORCA_TOKEN").unwrap_err();
            assert_eq!(e, "ORCA_TOKEN is not ROLE:SECRET");
        }
    }

    #[test]
    fn a_private_file_is_readable_by_its_user_alone() {
        let dir = std::env::temp_dir().join(format!("orca-secrets-{}", std::process::id()));
        let path = dir.join("sub").join("token");
        write_private(&path, "r:s").unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let dmode = std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(dmode & 0o777, 0o700);
        assert_eq!(read_bounded(&path).unwrap(), "r:s");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
