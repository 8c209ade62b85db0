//! The architectures a container image has variants for, read from its
//! registry (the OCI distribution API): an index or manifest list names its
//! platforms; a single manifest's config blob names its one architecture.
//!
//! Anonymous pulls, the bearer-token flow (`WWW-Authenticate: Bearer
//! realm=...,service=...,scope=...`) and ECR (`<account>.dkr.ecr.<region>.
//! amazonaws.com`: `Basic` with ECR's GetAuthorizationToken) are supported. A registry on a loopback
//! address is spoken to over plain HTTP (as Docker does); others over HTTPS.

use std::time::Duration;

/// The manifest types asked for, most useful first.
const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
    application/vnd.docker.distribution.manifest.list.v2+json, \
    application/vnd.oci.image.manifest.v1+json, \
    application/vnd.docker.distribution.manifest.v2+json";

/// An image reference, split.
#[derive(Debug, PartialEq)]
pub struct Reference {
    /// `host[:port]` of the registry.
    pub registry: String,
    /// The repository: `library/debian`, `team/worker`.
    pub name: String,
    /// A tag or a `sha256:` digest.
    pub reference: String,
}

/// Splits `registry/name:tag` or `registry/name@digest` (Docker Hub when the
/// first part is not a host).
pub fn parse(image: &str) -> Result<Reference, String> {
    let bad = || format!("'{image}' is not an image reference (registry/name:tag or @digest)");
    let (rest, reference) = match image.split_once('@') {
        // name:tag@digest: the digest decides.
        Some((r, d)) => match r.rsplit_once(':') {
            Some((n, t)) if !t.contains('/') => (n, d.to_string()),
            _ => (r, d.to_string()),
        },
        None => match image.rsplit_once(':') {
            Some((r, t)) if !t.contains('/') => (r, t.to_string()),
            _ => (image, "latest".to_string()),
        },
    };
    if rest.is_empty() || reference.is_empty() {
        return Err(bad());
    }
    let (registry, name) = match rest.split_once('/') {
        Some((h, n)) if h.contains('.') || h.contains(':') || h == "localhost" => {
            (h.to_string(), n.to_string())
        }
        _ if rest.contains('/') => ("registry-1.docker.io".to_string(), rest.to_string()),
        _ => (
            "registry-1.docker.io".to_string(),
            format!("library/{rest}"),
        ),
    };
    if name.is_empty() {
        return Err(bad());
    }
    // Docker Hub by its other names; its official images are library/NAME.
    let (registry, name) = match registry.as_str() {
        "docker.io" | "index.docker.io" | "registry-1.docker.io" if !name.contains('/') => (
            "registry-1.docker.io".to_string(),
            format!("library/{name}"),
        ),
        "docker.io" | "index.docker.io" => ("registry-1.docker.io".to_string(), name),
        _ => (registry, name),
    };
    Ok(Reference {
        registry,
        name,
        reference,
    })
}

fn base(registry: &str) -> String {
    let host = registry.rsplit_once(':').map_or(registry, |(h, _)| h);
    let loopback = matches!(host, "localhost" | "[::1]") || host.starts_with("127.");
    format!("{}://{registry}", if loopback { "http" } else { "https" })
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .redirects(5)
        .build()
}

/// A `key="value"` parameter of a `WWW-Authenticate` header.
fn auth_param(header: &str, key: &str) -> Option<String> {
    let at = header.find(&format!("{key}=\""))? + key.len() + 2;
    let end = header[at..].find('"')? + at;
    Some(header[at..end].to_string())
}

/// A response's body as JSON (at most 4 MiB).
fn read_json(resp: ureq::Response) -> Result<serde_json::Value, String> {
    use std::io::Read;
    let mut body = Vec::new();
    resp.into_reader()
        .take(4 << 20)
        .read_to_end(&mut body)
        .map_err(|e| format!("reading the answer: {e}"))?;
    serde_json::from_slice(&body).map_err(|e| format!("not JSON: {e}"))
}

/// The region of an ECR registry host, `<account>.dkr.ecr.<region>.amazonaws.com`.
pub fn ecr_region(host: &str) -> Option<String> {
    let host = host.split(':').next().unwrap_or(host);
    let rest = host
        .strip_suffix(".amazonaws.com")
        .or_else(|| host.strip_suffix(".amazonaws.com.cn"))?;
    let mut parts = rest.split('.');
    let (account, dkr, ecr, region) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    (account.chars().all(|c| c.is_ascii_digit())
        && dkr == "dkr"
        && ecr.starts_with("ecr")
        && parts.next().is_none())
    .then(|| region.to_string())
}

/// GETs `url` as JSON with `auth` (an `Authorization` value), following the
/// bearer-token flow once if asked to.
fn get_json(
    agent: &ureq::Agent,
    url: &str,
    accept: &str,
    auth: &mut Option<String>,
) -> Result<serde_json::Value, String> {
    for _ in 0..2 {
        let mut req = agent.get(url).set("Accept", accept);
        if let Some(a) = auth.as_deref() {
            req = req.set("Authorization", a);
        }
        match req.call() {
            Ok(resp) => {
                return read_json(resp).map_err(|e| format!("{url}: {e}"));
            }
            Err(ureq::Error::Status(401, resp)) if auth.is_none() => {
                let header = resp.header("www-authenticate").unwrap_or("").to_string();
                let realm = auth_param(&header, "realm")
                    .ok_or_else(|| format!("{url}: 401 without a bearer realm"))?;
                let mut token_url = realm.clone();
                let mut sep = if realm.contains('?') { '&' } else { '?' };
                for key in ["service", "scope"] {
                    if let Some(v) = auth_param(&header, key) {
                        token_url.push_str(&format!("{sep}{key}={v}"));
                        sep = '&';
                    }
                }
                let token = agent
                    .get(&token_url)
                    .call()
                    .map_err(|e| e.to_string())
                    .and_then(read_json)
                    .map_err(|e| format!("token from {realm}: {e}"))?;
                let t = token["token"]
                    .as_str()
                    .or(token["access_token"].as_str())
                    .ok_or_else(|| format!("token from {realm}: no token in the answer"))?;
                *auth = Some(format!("Bearer {t}"));
            }
            Err(ureq::Error::Status(code, _)) => return Err(format!("{url}: HTTP {code}")),
            Err(e) => return Err(format!("{url}: {e}")),
        }
    }
    Err(format!("{url}: refused after authenticating"))
}

/// The architectures `image` has variants for (OCI's names), sorted.
pub fn architectures(image: &str) -> Result<Vec<String>, String> {
    let r = parse(image)?;
    let agent = agent();
    // ECR through another address (a VPC endpoint, a proxy; the tests).
    let root = match std::env::var("ORCA_ECR_REGISTRY_ENDPOINT") {
        Ok(e) if !e.is_empty() && ecr_region(&r.registry).is_some() => {
            e.trim_end_matches('/').to_string()
        }
        _ => base(&r.registry),
    };
    let mut auth = match ecr_region(&r.registry) {
        Some(region) => Some(crate::aws::ecr_authorization(&region)?),
        None => None,
    };
    let url = format!("{root}/v2/{}/manifests/{}", r.name, r.reference);
    let manifest = get_json(&agent, &url, ACCEPT, &mut auth)?;
    let mut arches: Vec<String> = if let Some(list) = manifest["manifests"].as_array() {
        list.iter()
            // Linux variants only (an index may hold Windows ones too).
            .filter(|m| m["platform"]["os"].as_str().is_none_or(|os| os == "linux"))
            .filter_map(|m| m["platform"]["architecture"].as_str())
            .filter(|a| *a != "unknown")
            .map(str::to_string)
            .collect()
    } else {
        let digest = manifest["config"]["digest"]
            .as_str()
            .ok_or_else(|| format!("{url}: neither an index nor a manifest with a config"))?;
        let url = format!("{root}/v2/{}/blobs/{digest}", r.name);
        let config = get_json(&agent, &url, "*/*", &mut auth)?;
        vec![
            config["architecture"]
                .as_str()
                .ok_or_else(|| format!("{url}: no architecture in the image config"))?
                .to_string(),
        ]
    };
    arches.sort();
    arches.dedup();
    if arches.is_empty() {
        return Err(format!("{image}: its index lists no architecture"));
    }
    Ok(arches)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_split() {
        let r = parse("127.0.0.1:5000/team/worker:v2").unwrap();
        assert_eq!(
            (r.registry.as_str(), r.name.as_str(), r.reference.as_str()),
            ("127.0.0.1:5000", "team/worker", "v2")
        );
        let r = parse("debian").unwrap();
        assert_eq!(
            (r.name.as_str(), r.reference.as_str()),
            ("library/debian", "latest")
        );
        let r = parse("ghcr.io/o/w@sha256:abc").unwrap();
        assert_eq!(r.reference, "sha256:abc");
        let r = parse("ghcr.io/o/w:v1@sha256:abc").unwrap();
        assert_eq!(
            (r.name.as_str(), r.reference.as_str()),
            ("o/w", "sha256:abc")
        );
        let r = parse("docker.io/debian:12").unwrap();
        assert_eq!(
            (r.registry.as_str(), r.name.as_str()),
            ("registry-1.docker.io", "library/debian")
        );
        assert!(parse(":x").is_err());
        assert_eq!(base("localhost:5000"), "http://localhost:5000");
        assert_eq!(base("ghcr.io"), "https://ghcr.io");
    }

    #[test]
    fn ecr_hosts_name_their_region() {
        assert_eq!(
            ecr_region("123456789012.dkr.ecr.eu-west-1.amazonaws.com").as_deref(),
            Some("eu-west-1")
        );
        assert_eq!(
            ecr_region("123456789012.dkr.ecr-fips.us-east-1.amazonaws.com").as_deref(),
            Some("us-east-1")
        );
        assert_eq!(ecr_region("ghcr.io"), None);
        assert_eq!(ecr_region("public.ecr.aws"), None);
        assert_eq!(ecr_region("evil.dkr.ecr.eu-west-1.amazonaws.com"), None);
    }

    #[test]
    fn auth_params_parse() {
        let h =
            r#"Bearer realm="http://127.0.0.1:9/token",service="reg",scope="repository:w:pull""#;
        assert_eq!(auth_param(h, "realm").unwrap(), "http://127.0.0.1:9/token");
        assert_eq!(auth_param(h, "scope").unwrap(), "repository:w:pull");
    }
}
