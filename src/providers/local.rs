//! The local provider: a machine is a process group on this host running the
//! boot script with the machine's settings in its environment (as user-data
//! would give them on EC2). Its labels live in that environment too
//! (`ORCA_LOCAL_LABELS`), so listing finds machines by their labels alone,
//! from `/proc`, whoever made them: strays are real. A location has room
//! for as many machines as the pool's `capacity` says (no entry: no limit),
//! and a type in a location (`TYPE@LOCATION`) for as many as it says.
//! Deleting a machine kills its process group.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use super::{Listed, Made, Make, MakeError, Provider};
use crate::config::MachineSettings;
use crate::config::arch::Fit;

/// Environment variables of a local machine's boot process.
const NAME_VAR: &str = "ORCA_LOCAL_MACHINE";
const LABELS_VAR: &str = "ORCA_LOCAL_LABELS";
const LOCATION_VAR: &str = "ORCA_LOCAL_LOCATION";
const TYPE_VAR: &str = "ORCA_LOCAL_TYPE";

/// The local provider. It keeps the machines it started, to reap them.
#[derive(Default)]
pub struct Local {
    children: Vec<std::process::Child>,
    /// This pass's reading of `/proc` (listing every pool reads it once).
    listed: Option<Vec<Found>>,
}

/// A machine found in `/proc`.
struct Found {
    pid: i32,
    name: String,
    labels: String,
    location: String,
    type_: String,
}

/// Whether variable `key` of the scheduler's environment reaches a local
/// machine: a few of the host's, and orca's settings, never a secret (a
/// database URL, a token, a password, a key) nor the labels of another,
/// nor the scheduler's own metrics address (its port is the scheduler's: a
/// worker given it could never listen, and would exit 2 again and again).
fn passed_to_machine(key: &str) -> bool {
    let secret = ["URL", "TOKEN", "PASSWORD", "SECRET", "KEY"]
        .iter()
        .any(|s| key.to_ascii_uppercase().contains(s));
    matches!(
        key,
        "PATH" | "HOME" | "USER" | "LANG" | "TZ" | "RUST_LOG" | "TMPDIR"
    ) || (key.starts_with("ORCA_")
        && !secret
        && !key.starts_with("ORCA_LOCAL_")
        && key != crate::metrics::serve::VAR)
}

/// Where local machine `name` of `stack` keeps its live secret (a
/// directory of its own, made by its script; removed with the machine).
fn token_dir(stack: &str, name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("orca-{stack}-{name}"))
}

fn labels(pool: &str, stack: &str) -> String {
    format!("orca-pool={pool} orca-stack={stack}")
}

/// The boot processes of local machines: process group leaders with a
/// machine name and labels in their environment.
fn scan() -> Vec<Found> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: getpgid(2) only reads.
        if unsafe { libc::getpgid(pid) } != pid {
            continue;
        }
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let mut vars: BTreeMap<&str, String> = BTreeMap::new();
        for kv in environ.split(|&b| b == 0) {
            let kv = String::from_utf8_lossy(kv);
            if let Some((k, v)) = kv.split_once('=') {
                for want in [NAME_VAR, LABELS_VAR, LOCATION_VAR, TYPE_VAR] {
                    if k == want {
                        vars.insert(want, v.to_string());
                    }
                }
            }
        }
        if let (Some(name), Some(labels)) = (vars.remove(NAME_VAR), vars.remove(LABELS_VAR)) {
            out.push(Found {
                pid,
                name,
                labels,
                location: vars.remove(LOCATION_VAR).unwrap_or_default(),
                type_: vars.remove(TYPE_VAR).unwrap_or_default(),
            });
        }
    }
    out
}

impl Local {
    fn reap(&mut self) {
        self.children
            .retain_mut(|c| matches!(c.try_wait(), Ok(None)));
    }
}

impl Provider for Local {
    fn begin_pass(&mut self) {
        self.listed = None;
    }

    fn fit(&mut self, _type: &str, _settings: &MachineSettings) -> Result<Fit, String> {
        // A local machine is a process of this binary: this host's.
        Ok(Fit::Launch {
            ami: String::new(),
            arch: super::ec2_arch(std::env::consts::ARCH).to_string(),
        })
    }

    fn make(&mut self, m: &Make) -> Result<Made, MakeError> {
        self.reap();
        let labels = labels(m.group, m.stack);
        let machines = scan();
        let typed = format!("{}@{}", m.type_, m.location);
        for (key, of_type) in [(m.location, false), (typed.as_str(), true)] {
            let Some(&room) = m.settings.capacity.get(key) else {
                continue;
            };
            let here = machines
                .iter()
                .filter(|f| f.labels == labels && f.location == m.location)
                .filter(|f| !of_type || f.type_ == m.type_)
                .count();
            if here >= room.max(0) as usize {
                return Err(MakeError::NoCapacity(format!(
                    "{key} is full ({here} of {room})"
                )));
            }
        }
        let exe = std::env::current_exe()
            .map_err(|e| MakeError::Failed(format!("can't find this binary: {e}")))?;
        // A machine gets what a fresh machine would have, not the
        // scheduler's environment (its secrets): the basics, and orca's
        // settings other than its database URLs.
        let passed = std::env::vars().filter(|(k, _)| passed_to_machine(k));
        // Made here, new and only this user's (not taken over if another
        // user made it first in the shared temp directory).
        let token_dir = token_dir(m.stack, m.name);
        let _ = std::fs::remove_dir_all(&token_dir);
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&token_dir)
                .map_err(|e| {
                    MakeError::Failed(format!("can't make {}: {e}", token_dir.display()))
                })?;
        }
        let child = Command::new("/bin/sh")
            .arg("-c")
            .arg(m.script)
            .arg("orca-boot")
            .env_clear()
            .envs(passed)
            .envs(m.env.iter().map(|(k, v)| (k, v)))
            .env("ORCA_BIN", exe)
            .env(crate::secrets::TOKEN_FILE_VAR, token_dir.join("token"))
            // Runs as the scheduler's ORCA_RUN_AS, else as this user (the
            // scripts' default, a user of their own, is for real machines).
            .env(
                crate::secrets::RUN_AS_VAR,
                std::env::var(crate::secrets::RUN_AS_VAR).unwrap_or_default(),
            )
            // And as uids of their own from the scheduler's range, if set.
            .env(
                crate::secrets::run_uids::RUN_UIDS_VAR,
                std::env::var(crate::secrets::run_uids::RUN_UIDS_VAR).unwrap_or_default(),
            )
            .env("ORCA_SHUTDOWN", "true")
            .env(NAME_VAR, m.name)
            .env(LABELS_VAR, &labels)
            .env(LOCATION_VAR, m.location)
            .env(TYPE_VAR, m.type_)
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| MakeError::Failed(format!("can't start /bin/sh: {e}")))?;
        let id = child.id().to_string();
        self.children.push(child);
        Ok(Made {
            id,
            address: "127.0.0.1".into(),
        })
    }

    fn list(&mut self, pool: &str, stack: &str) -> Result<Vec<Listed>, String> {
        self.reap();
        let want = labels(pool, stack);
        Ok(self
            .listed
            .get_or_insert_with(scan)
            .iter()
            .filter(|f| f.labels == want)
            .map(|f| Listed {
                id: f.pid.to_string(),
                name: f.name.clone(),
            })
            .collect())
    }

    fn delete(&mut self, id: &str, name: &str) -> Result<(), String> {
        let pid: i32 = id
            .parse()
            .map_err(|_| format!("'{id}' is not a local machine id"))?;
        // Only that machine: a pid reused by anything else is left be.
        if let Some(f) = scan().iter().find(|f| f.pid == pid && f.name == name) {
            // SAFETY: kill(2) with a negative pid signals that process group.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            if let Some(stack) = f.labels.split("orca-stack=").nth(1) {
                let _ = std::fs::remove_dir_all(token_dir(stack.trim(), name));
            }
        }
        self.reap();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_machine_gets_settings_but_no_secret_and_not_the_metrics_address() {
        for passed in ["PATH", "HOME", "ORCA_TICK_SECONDS", "ORCA_LOG_FORMAT"] {
            assert!(passed_to_machine(passed), "{passed}");
        }
        for kept in [
            "ORCA_DATABASE_URL",
            "ORCA_POOL_DATABASE_URL",
            "ORCA_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "ORCA_LOCAL_LABELS",
            "ORCA_METRICS_ADDR",
            "SHELL",
        ] {
            assert!(!passed_to_machine(kept), "{kept}");
        }
    }
}
