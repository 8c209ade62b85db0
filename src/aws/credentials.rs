//! AWS credentials and region, found in the AWS CLI's order:
//!
//! 1. `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` / `AWS_SESSION_TOKEN`;
//! 2. the shared credentials file (`AWS_SHARED_CREDENTIALS_FILE`, else
//!    `~/.aws/credentials`) and config file (`AWS_CONFIG_FILE`, else
//!    `~/.aws/config`), profile `AWS_PROFILE` (else `default`);
//! 3. the instance role, through IMDSv2 (a token PUT, the role's name, its
//!    credentials JSON), fetched again five minutes before `Expiration`.
//!
//! The region: `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's `region`,
//! then IMDS. `AWS_EC2_METADATA_SERVICE_ENDPOINT` moves IMDS (the tests put
//! it on loopback); `AWS_EC2_METADATA_DISABLED=true` turns it off.
//!
//! Secrets never reach a log line or an error message: `Credentials`'
//! `Debug` hides them, and errors name files and keys, never values.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

/// A set of AWS credentials. `Debug` never shows the secret or the token.
#[derive(Clone)]
pub struct Credentials {
    /// The access key id.
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
    /// The session token of temporary credentials.
    pub session_token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}, ***)", self.access_key_id)
    }
}

/// Instance-role credentials are fetched again this long before they expire.
const REFRESH_BEFORE: Duration = Duration::from_secs(300);

/// The credential chain, with what it found last.
#[derive(Default)]
pub struct Chain {
    cached: Option<(Credentials, Option<SystemTime>)>,
    /// Where the cached credentials came from, for messages.
    pub source: String,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn home_file(var: &str, default: &str) -> Option<String> {
    env(var).or_else(|| env("HOME").map(|h| format!("{h}/{default}")))
}

/// The profile in use: `AWS_PROFILE`, else `default`.
pub fn profile() -> String {
    env("AWS_PROFILE").unwrap_or_else(|| "default".into())
}

/// Parses an AWS INI file into sections of keys.
fn ini(text: &str) -> HashMap<String, HashMap<String, String>> {
    let mut out: HashMap<String, HashMap<String, String>> = HashMap::new();
    let mut section = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.trim().to_string();
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            out.entry(section.clone())
                .or_default()
                .insert(k.trim().to_lowercase(), v.trim().to_string());
        }
    }
    out
}

/// The keys of `profile` in the credentials file, then the config file
/// (where a profile's section is `[profile NAME]`, but `[default]`).
fn profile_keys(profile: &str) -> HashMap<String, String> {
    let mut keys = HashMap::new();
    if let Some(path) = home_file("AWS_CONFIG_FILE", ".aws/config")
        && let Ok(text) = std::fs::read_to_string(&path)
    {
        let sections = ini(&text);
        let name = if profile == "default" {
            "default".to_string()
        } else {
            format!("profile {profile}")
        };
        if let Some(s) = sections.get(&name) {
            keys.extend(s.clone());
        }
    }
    if let Some(path) = home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials")
        && let Ok(text) = std::fs::read_to_string(&path)
        && let Some(s) = ini(&text).get(profile)
    {
        keys.extend(s.clone());
    }
    keys
}

/// IMDS: where it is, and whether it may be asked.
pub(crate) fn imds_base() -> Option<String> {
    if env("AWS_EC2_METADATA_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return None;
    }
    Some(
        env("AWS_EC2_METADATA_SERVICE_ENDPOINT")
            .unwrap_or_else(|| "http://169.254.169.254".into())
            .trim_end_matches('/')
            .to_string(),
    )
}

fn imds_agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(1))
        .timeout(Duration::from_secs(3))
        .build()
}

/// GETs `path` from IMDS with a fresh IMDSv2 session token.
fn imds_get(base: &str, paths: &[&str]) -> Result<Vec<String>, String> {
    let agent = imds_agent();
    let token = agent
        .put(&format!("{base}/latest/api/token"))
        .set("X-aws-ec2-metadata-token-ttl-seconds", "21600")
        .call()
        .map_err(|e| format!("instance metadata (IMDSv2 token): {}", short(&e)))?
        .into_string()
        .map_err(|e| format!("instance metadata (IMDSv2 token): {e}"))?;
    let mut out = Vec::new();
    let mut prefix = String::new();
    for path in paths {
        // A path ending in '/' lists names: its first line is appended to
        // the next path (the role's name).
        let url = format!("{base}{path}{prefix}");
        let text = agent
            .get(&url)
            .set("X-aws-ec2-metadata-token", token.trim())
            .call()
            .map_err(|e| format!("instance metadata ({path}): {}", short(&e)))?
            .into_string()
            .map_err(|e| format!("instance metadata ({path}): {e}"))?;
        prefix = if path.ends_with('/') {
            text.lines().next().unwrap_or("").trim().to_string()
        } else {
            String::new()
        };
        out.push(text);
    }
    Ok(out)
}

/// IMDS's answers to `paths`, asked with one fresh IMDSv2 token (of a
/// minute), each call bounded by `timeout`: each `None` on 404, else its
/// body, read up to `max + 1` bytes (so that one too long is seen to be).
pub(crate) fn imds_answers(
    base: &str,
    paths: &[&str],
    timeout: Duration,
    max: usize,
) -> Result<Vec<Option<Vec<u8>>>, String> {
    use std::io::Read;
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(timeout)
        .timeout(timeout)
        .build();
    let token = agent
        .put(&format!("{base}/latest/api/token"))
        .set("X-aws-ec2-metadata-token-ttl-seconds", "60")
        .call()
        .map_err(|e| format!("instance metadata (IMDSv2 token): {}", short(&e)))?
        .into_string()
        .map_err(|e| format!("instance metadata (IMDSv2 token): {e}"))?;
    let mut out = Vec::new();
    for path in paths {
        match agent
            .get(&format!("{base}{path}"))
            .set("X-aws-ec2-metadata-token", token.trim())
            .call()
        {
            Ok(r) => {
                let mut body = Vec::new();
                r.into_reader()
                    .take(max as u64 + 1)
                    .read_to_end(&mut body)
                    .map_err(|e| format!("instance metadata ({path}): {e}"))?;
                out.push(Some(body));
            }
            Err(ureq::Error::Status(404, _)) => out.push(None),
            Err(e) => return Err(format!("instance metadata ({path}): {}", short(&e))),
        }
    }
    Ok(out)
}

/// A ureq error in a few words (never a URL's query or a header).
fn short(e: &ureq::Error) -> String {
    match e {
        ureq::Error::Status(code, _) => format!("HTTP {code}"),
        ureq::Error::Transport(t) => t.kind().to_string(),
    }
}

/// Parses IMDS's RFC 3339 `Expiration` (`2026-11-30T14:00:00Z`).
fn expiration(text: &str) -> Option<SystemTime> {
    let t = chrono::DateTime::parse_from_rfc3339(text).ok()?;
    let secs = t.timestamp();
    (secs > 0).then(|| SystemTime::UNIX_EPOCH + Duration::from_secs(secs as u64))
}

impl Chain {
    /// Forgets the cached credentials (refused: they may have been renewed).
    pub fn forget(&mut self) {
        self.cached = None;
    }

    /// Credentials to sign with now: the cached ones unless they expire
    /// within five minutes, else found again down the chain.
    pub fn get(&mut self) -> Result<Credentials, String> {
        if let Some((c, until)) = &self.cached
            && until.is_none_or(|u| SystemTime::now() + REFRESH_BEFORE < u)
        {
            return Ok(c.clone());
        }
        let (c, until, source) = find()?;
        if self.source != source {
            log::info!("AWS credentials from {source}");
        }
        self.source = source;
        self.cached = Some((c.clone(), until));
        Ok(c)
    }
}

/// Walks the chain once.
fn find() -> Result<(Credentials, Option<SystemTime>, String), String> {
    if let (Some(id), Some(secret)) = (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
        return Ok((
            Credentials {
                access_key_id: id,
                secret_access_key: secret,
                session_token: env("AWS_SESSION_TOKEN"),
            },
            None,
            "the environment".into(),
        ));
    }
    let profile = profile();
    let keys = profile_keys(&profile);
    if let (Some(id), Some(secret)) = (
        keys.get("aws_access_key_id"),
        keys.get("aws_secret_access_key"),
    ) {
        return Ok((
            Credentials {
                access_key_id: id.clone(),
                secret_access_key: secret.clone(),
                session_token: keys.get("aws_session_token").cloned(),
            },
            None,
            format!("profile {profile}"),
        ));
    }
    let Some(base) = imds_base() else {
        return Err(
            "no AWS credentials: none in the environment, none in profile \
                    {profile}, and instance metadata is disabled"
                .replace("{profile}", &profile),
        );
    };
    let texts = imds_get(
        &base,
        &[
            "/latest/meta-data/iam/security-credentials/",
            "/latest/meta-data/iam/security-credentials/",
        ],
    )
    .map_err(|e| {
        format!("no AWS credentials: none in the environment, none in profile {profile}, and {e}")
    })?;
    let role = texts[0].lines().next().unwrap_or("").trim().to_string();
    let doc: serde_json::Value = serde_json::from_str(&texts[1])
        .map_err(|_| format!("instance role {role}: its credentials are not JSON"))?;
    let field = |k: &str| {
        doc[k]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("instance role {role}: no {k} in its credentials"))
    };
    Ok((
        Credentials {
            access_key_id: field("AccessKeyId")?,
            secret_access_key: field("SecretAccessKey")?,
            session_token: doc["Token"].as_str().map(str::to_string),
        },
        doc["Expiration"].as_str().and_then(expiration),
        format!("instance role {role}"),
    ))
}

/// The region: `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's `region`,
/// then the instance's own (IMDS).
pub fn region() -> Result<String, String> {
    if let Some(r) = env("AWS_REGION").or_else(|| env("AWS_DEFAULT_REGION")) {
        return Ok(r);
    }
    let profile = profile();
    if let Some(r) = profile_keys(&profile).remove("region") {
        return Ok(r);
    }
    let base = imds_base().ok_or_else(|| {
        format!("no AWS region: set AWS_REGION, a region in profile {profile}, or a pool's region")
    })?;
    imds_get(&base, &["/latest/meta-data/placement/region"])
        .map(|t| t[0].trim().to_string())
        .map_err(|e| {
            format!("no AWS region: set AWS_REGION, a region in profile {profile}, or a pool's region ({e})")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ini_sections_and_keys() {
        let s = ini("# c\n[default]\naws_access_key_id = A\n\n[profile ci]\nRegion=eu-west-1\n");
        assert_eq!(s["default"]["aws_access_key_id"], "A");
        assert_eq!(s["profile ci"]["region"], "eu-west-1");
    }

    #[test]
    fn debug_hides_the_secret() {
        let c = Credentials {
            access_key_id: "AKID".into(),
            secret_access_key: "s3cr3t".into(),
            session_token: Some("tok".into()),
        };
        let shown = format!("{c:?}");
        assert!(shown.contains("AKID") && !shown.contains("s3cr3t") && !shown.contains("tok"));
    }

    #[test]
    fn expiration_parses() {
        let t = expiration("2015-08-30T12:36:00Z").unwrap();
        assert_eq!(
            t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs(),
            1_440_938_160
        );
    }
}
