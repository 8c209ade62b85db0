//! EC2, called by hand: the Query API (`Version=2016-11-15`) as form POSTs
//! over `ureq`, each signed with SigV4 ([`sign`]); answers and error answers
//! read with an XML parser. This is the one place that signs and sends.
//!
//! Error answers are sorted for the scaler ([`Ec2Error`]): "this location
//! doesn't have it" (try the next), throttling and 5xx (retried here, with
//! backoff and jitter), and everything else (said plainly, nothing made).

pub mod credentials;
pub mod images;
pub mod sign;

use std::time::{Duration, Instant, SystemTime};

use credentials::Chain;

/// The Query API version every call names.
const VERSION: &str = "2016-11-15";

/// Error codes that mean "this location doesn't have it now".
const CAPACITY: &[&str] = &[
    "InsufficientInstanceCapacity",
    "Unsupported",
    "InstanceLimitExceeded",
    "VcpuLimitExceeded",
    "InsufficientHostCapacity",
    "InsufficientCapacity",
];

/// Error codes of spot launches that mean "no spot capacity for it here
/// now" (beside [`CAPACITY`], which spot launches answer too): the walk
/// moves on as for any location without room.
const SPOT_CAPACITY: &[&str] = &[
    "SpotMaxPriceTooLow",
    "MaxSpotInstanceCountExceeded",
    "UnfulfillableCapacity",
    "InsufficientSpotCapacity",
    "SpotCapacityNotAvailable",
];

/// Whether EC2's error `code` means the location doesn't have it now.
pub fn is_capacity(code: &str) -> bool {
    CAPACITY.contains(&code) || SPOT_CAPACITY.contains(&code)
}

/// What to do when a spot launch is refused for the missing service-linked
/// role of EC2 Spot (`AWSServiceRoleForEC2Spot`).
pub const SPOT_ROLE_FIX: &str = "spot launches need EC2 Spot's service-linked role: create it once with `aws iam create-service-linked-role --aws-service-name spot.amazonaws.com` (or allow orca iam:CreateServiceLinkedRole for spot.amazonaws.com, see docs/aws.md)";

/// Whether EC2's refusal (`code`, `message`) is of the missing
/// service-linked role of EC2 Spot, which orca's credentials may not create.
pub fn is_spot_role_missing(code: &str, message: &str) -> bool {
    code == "AuthFailure.ServiceLinkedRoleCreationNotPermitted"
        || ((code.starts_with("AuthFailure") || code == "UnauthorizedOperation")
            && message.to_ascii_lowercase().contains("service-linked role"))
}

/// Error codes that mean the credentials were refused.
const AUTH: &[&str] = &[
    "AuthFailure",
    "ExpiredToken",
    "RequestExpired",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "SignatureDoesNotMatch",
];

/// Attempts of one call when throttled or on a 5xx or a lost answer.
const ATTEMPTS: u32 = 4;

/// How long one attempt may wait for its answer.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// The least time an attempt sent before a caller's deadline is given,
/// even if less is left: a call sent just before the deadline ends at most
/// this late.
pub const ATTEMPT_FLOOR: Duration = Duration::from_secs(1);

/// How an EC2 call failed.
#[derive(Debug, Clone)]
pub enum Ec2Error {
    /// The location doesn't have the type now (code, message).
    Capacity(String, String),
    /// Anything else EC2 answered (code, message): auth, a bad AMI, ...
    Refused(String, String),
    /// No answer (after retries), or credentials not found.
    Unreachable(String),
}

impl std::fmt::Display for Ec2Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ec2Error::Capacity(c, m) | Ec2Error::Refused(c, m) => write!(f, "{c}: {m}"),
            Ec2Error::Unreachable(m) => f.write_str(m),
        }
    }
}

/// An EC2 client for one region.
pub struct Client {
    endpoint: String,
    /// The region it signs for.
    pub region: String,
    chain: Chain,
    agent: ureq::Agent,
    /// HTTP requests made (each attempt counts).
    pub calls: u64,
    /// No attempt is sent after this (see [`Client::until`]).
    deadline: Option<Instant>,
}

/// `application/x-www-form-urlencoded` value encoding (RFC 3986 unreserved
/// characters kept).
pub fn form_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A small random number, for jitter.
fn jitter_ms(max: u64) -> u64 {
    let mut b = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut b);
    }
    u64::from_le_bytes(b) % max.max(1)
}

/// The `Code` and `Message` of an EC2 error answer.
pub fn error_of(xml: &str) -> Option<(String, String)> {
    let doc = roxmltree::Document::parse(xml).ok()?;
    let err = doc.descendants().find(|n| n.has_tag_name("Error"))?;
    let text = |name: &str| {
        err.children()
            .find(|n| n.has_tag_name(name))
            .and_then(|n| n.text())
            .unwrap_or("")
            .trim()
            .to_string()
    };
    Some((text("Code"), trim_message(&text("Message"))))
}

/// An AWS error message as orca passes it on: its first line, at most 300
/// characters (some messages carry an encoded blob, or the canonical
/// request with its security token, on later lines).
pub fn trim_message(m: &str) -> String {
    let first = m.lines().next().unwrap_or("").trim();
    match first.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &first[..i]),
        None => first.to_string(),
    }
}

impl Client {
    /// A client for `region` (else the credential chain's region), at
    /// `ORCA_EC2_ENDPOINT` if set, else `https://ec2.<region>.amazonaws.com/`.
    pub fn new(region: Option<&str>) -> Result<Client, String> {
        let region = match region {
            Some(r) => r.to_string(),
            None => credentials::region()?,
        };
        // It goes into a host name: nothing but a region's characters.
        if region.is_empty()
            || !region
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        {
            return Err(format!("'{region}' is not an AWS region"));
        }
        let endpoint = std::env::var("ORCA_EC2_ENDPOINT")
            .ok()
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| format!("https://ec2.{region}.amazonaws.com/"));
        Ok(Client {
            endpoint,
            region,
            chain: Chain::default(),
            agent: ureq::AgentBuilder::new()
                .timeout_connect(Duration::from_secs(5))
                .timeout(ATTEMPT_TIMEOUT)
                .build(),
            calls: 0,
            deadline: None,
        })
    }

    /// From now on, no attempt is sent after `deadline` (a call then fails
    /// at once, unsent) and none waits past it by more than
    /// [`ATTEMPT_FLOOR`]; `None`: each call has all its attempts. A caller
    /// that must get on with other work (the scaler's pass, a tick) bounds
    /// what a hung EC2 costs it this way.
    pub fn until(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
    }

    /// Calls `action` with `params`; the answer's XML text. Throttling, 5xx
    /// and lost answers are retried (backoff with jitter) up to
    /// [`ATTEMPTS`] times; a call that makes something must carry a
    /// `ClientToken`, so a retry can't make it twice.
    pub fn call(&mut self, action: &str, params: &[(String, String)]) -> Result<String, Ec2Error> {
        let mut body = format!("Action={}&Version={VERSION}", form_encode(action));
        for (k, v) in params {
            body.push('&');
            body.push_str(&form_encode(k));
            body.push('=');
            body.push_str(&form_encode(v));
        }
        let began = Instant::now();
        let mut last = String::new();
        for attempt in 0..ATTEMPTS {
            if attempt > 0 {
                let base = 200u64 << (attempt - 1);
                let pause = Duration::from_millis(base + jitter_ms(base));
                if attempt_wait(self.deadline, Instant::now() + pause).is_none() {
                    return Err(out_of_time(action, attempt, &last));
                }
                std::thread::sleep(pause);
            }
            let Some(wait) = attempt_wait(self.deadline, Instant::now()) else {
                return Err(out_of_time(action, attempt, &last));
            };
            let req = sign::Request {
                method: "POST",
                url: &self.endpoint,
                headers: &[(
                    "content-type",
                    "application/x-www-form-urlencoded; charset=utf-8",
                )],
                body: body.as_bytes(),
            };
            self.calls += 1;
            match signed_post(
                &self.agent,
                &mut self.chain,
                &req,
                &self.region,
                "ec2",
                wait,
            )
            .map_err(Ec2Error::Unreachable)?
            {
                Sent::Answer(resp) => {
                    return resp.into_string().map_err(|e| {
                        Ec2Error::Unreachable(format!("{action}: reading the answer: {e}"))
                    });
                }
                Sent::Status(code, resp) => {
                    let text = resp.into_string().unwrap_or_default();
                    let (c, m) = error_of(&text).unwrap_or_else(|| {
                        (format!("HTTP{code}"), format!("{action} answered {code}"))
                    });
                    // Capacity errors come as 5xx: they are answers, not
                    // trouble to retry here (the walk tries the next location).
                    if is_capacity(&c) {
                        return Err(Ec2Error::Capacity(c, m));
                    }
                    if c == "RequestLimitExceeded" || c == "Throttling" || code >= 500 {
                        log::warn!("{action}: {c} (attempt {}): retrying", attempt + 1);
                        last = format!("{c}: {m}");
                        continue;
                    }
                    if AUTH.contains(&c.as_str()) {
                        // Credentials from a file may have been renewed:
                        // found again on the next call.
                        self.chain.forget();
                    }
                    return Err(Ec2Error::Refused(c, m));
                }
                Sent::Lost(t) => {
                    log::warn!("{action}: {} (attempt {}): retrying", t.kind(), attempt + 1);
                    last = format!("{}: no answer from {}", t.kind(), self.host());
                }
            }
        }
        Err(Ec2Error::Unreachable(format!(
            "{action}: gave up after {ATTEMPTS} attempts in {:.1}s ({last})",
            began.elapsed().as_secs_f64()
        )))
    }

    /// The endpoint's host, for messages (never its user info).
    fn host(&self) -> &str {
        match crate::url::split(&self.endpoint) {
            Some(u) => u.host,
            None => self.endpoint.split('/').next().unwrap_or(&self.endpoint),
        }
    }
}

/// Call `action`'s error when its caller's deadline came after `sent`
/// attempts, the last of which failed with `last`.
fn out_of_time(action: &str, sent: u32, last: &str) -> Ec2Error {
    let done = match sent {
        0 => "not sent".to_string(),
        n => format!(
            "gave up after {}",
            crate::plural::count(n as i64, "attempt")
        ),
    };
    let last = if last.is_empty() {
        String::new()
    } else {
        format!(" ({last})")
    };
    Ec2Error::Unreachable(format!("{action}: {done}: its caller's time was up{last}"))
}

/// How long an attempt sent at `at` may wait for its answer, with no
/// attempt sent after `deadline`: `None` if it is not to be sent.
pub fn attempt_wait(deadline: Option<Instant>, at: Instant) -> Option<Duration> {
    match deadline {
        None => Some(ATTEMPT_TIMEOUT),
        Some(d) if at >= d => None,
        Some(d) => Some((d - at).clamp(ATTEMPT_FLOOR, ATTEMPT_TIMEOUT)),
    }
}

/// What a signed POST came to.
enum Sent {
    /// An answer with a success status.
    Answer(ureq::Response),
    /// An answer with an error status: the status and the answer.
    Status(u16, ureq::Response),
    /// No answer.
    Lost(ureq::Transport),
}

/// Signs `req` (a POST) for `service` in `region` with the chain's
/// credentials and sends it, waiting at most `wait` for the answer: what
/// it came to. Err: no credentials, or it can't be signed.
fn signed_post(
    agent: &ureq::Agent,
    chain: &mut Chain,
    req: &sign::Request,
    region: &str,
    service: &str,
    wait: Duration,
) -> Result<Sent, String> {
    let creds = chain.get()?;
    let signed = sign::headers(req, &creds, region, service, SystemTime::now())?;
    let mut post = agent.post(req.url).timeout(wait);
    for (k, v) in req.headers.iter().copied() {
        post = post.set(k, v);
    }
    for (k, v) in &signed {
        post = post.set(k, v);
    }
    Ok(match post.send_bytes(req.body) {
        Ok(resp) => Sent::Answer(resp),
        Err(ureq::Error::Status(code, resp)) => Sent::Status(code, resp),
        Err(ureq::Error::Transport(t)) => Sent::Lost(t),
    })
}

/// The credentials ECR calls sign with (one chain for the process).
static ECR_CHAIN: std::sync::OnceLock<std::sync::Mutex<Chain>> = std::sync::OnceLock::new();

/// The `Authorization` header value for pulling from ECR in `region`:
/// `Basic` with ECR's GetAuthorizationToken answer (signed like every AWS
/// call; at `ORCA_ECR_ENDPOINT` if set).
pub fn ecr_authorization(region: &str) -> Result<String, String> {
    let url = std::env::var("ORCA_ECR_ENDPOINT")
        .ok()
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| format!("https://api.ecr.{region}.amazonaws.com/"));
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(10))
        .build();
    let req = sign::Request {
        method: "POST",
        url: &url,
        headers: &[
            ("content-type", "application/x-amz-json-1.1"),
            (
                "x-amz-target",
                "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken",
            ),
        ],
        body: b"{}",
    };
    let what = "ECR GetAuthorizationToken";
    let chain = ECR_CHAIN.get_or_init(|| std::sync::Mutex::new(Chain::default()));
    let mut chain = chain.lock().unwrap_or_else(|p| p.into_inner());
    let text = match signed_post(&agent, &mut chain, &req, region, "ecr", ATTEMPT_TIMEOUT)? {
        Sent::Answer(resp) => resp
            .into_string()
            .map_err(|e| format!("{what}: reading the answer: {e}"))?,
        Sent::Status(code, resp) => {
            let doc: serde_json::Value =
                serde_json::from_str(&resp.into_string().unwrap_or_default()).unwrap_or_default();
            let kind = doc["__type"]
                .as_str()
                .unwrap_or("")
                .rsplit('#')
                .next()
                .unwrap_or("");
            let message = trim_message(
                doc["message"]
                    .as_str()
                    .or(doc["Message"].as_str())
                    .unwrap_or(""),
            );
            return Err(format!("{what}: HTTP {code}: {kind}: {message}"));
        }
        Sent::Lost(t) => return Err(format!("{what}: {}", t.kind())),
    };
    let doc: serde_json::Value =
        serde_json::from_str(&text).map_err(|_| format!("{what}: the answer is not JSON"))?;
    doc["authorizationData"][0]["authorizationToken"]
        .as_str()
        .map(|t| format!("Basic {t}"))
        .ok_or_else(|| format!("{what}: no authorizationToken in the answer"))
}

/// An instance as DescribeInstances tells it.
#[derive(Debug, Clone)]
pub struct Instance {
    /// `i-...`.
    pub id: String,
    /// Its `Name` tag.
    pub name: String,
    /// Its `orca-pool` tag.
    pub pool: String,
}

/// What RunInstances is asked to make.
pub struct Launch<'a> {
    /// The AMI.
    pub ami: &'a str,
    /// The instance type.
    pub type_: &'a str,
    /// A subnet id (`subnet-...`) or an availability zone.
    pub location: &'a str,
    /// An instance profile's name or ARN.
    pub instance_profile: Option<&'a str>,
    /// Security group ids.
    pub security_groups: &'a [String],
    /// The user-data script (sent base64-encoded).
    pub user_data: &'a str,
    /// Tags for the instance and its volumes.
    pub tags: &'a [(&'a str, &'a str)],
    /// Makes a retry idempotent.
    pub client_token: &'a str,
    /// Spot: a one-time spot instance, terminated when interrupted, at
    /// most at this price an hour if given (`Some(None)`: EC2's on-demand
    /// price); `None`: on-demand.
    pub spot: Option<Option<&'a str>>,
}

/// The parameters of a spot launch (`max_price`: the most paid an hour,
/// none for EC2's default): a one-time request that ends the instance when
/// EC2 takes it back.
pub fn spot_params(max_price: Option<&str>) -> Vec<(String, String)> {
    let mut p: Vec<(String, String)> = vec![
        ("InstanceMarketOptions.MarketType".into(), "spot".into()),
        (
            "InstanceMarketOptions.SpotOptions.SpotInstanceType".into(),
            "one-time".into(),
        ),
        (
            "InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior".into(),
            "terminate".into(),
        ),
    ];
    if let Some(price) = max_price {
        p.push((
            "InstanceMarketOptions.SpotOptions.MaxPrice".into(),
            price.into(),
        ));
    }
    p
}

impl Client {
    /// RunInstances of one instance; its id and private address.
    pub fn run_instance(&mut self, l: &Launch) -> Result<(String, String), Ec2Error> {
        use base64::Engine;
        let mut p: Vec<(String, String)> = vec![
            ("ImageId".into(), l.ami.into()),
            ("InstanceType".into(), l.type_.into()),
            ("MinCount".into(), "1".into()),
            ("MaxCount".into(), "1".into()),
            ("ClientToken".into(), l.client_token.into()),
            (
                "UserData".into(),
                base64::engine::general_purpose::STANDARD.encode(l.user_data),
            ),
            ("MetadataOptions.HttpTokens".into(), "required".into()),
            ("MetadataOptions.HttpEndpoint".into(), "enabled".into()),
            (
                "InstanceInitiatedShutdownBehavior".into(),
                "terminate".into(),
            ),
        ];
        if l.location.starts_with("subnet-") {
            p.push(("SubnetId".into(), l.location.into()));
        } else {
            p.push(("Placement.AvailabilityZone".into(), l.location.into()));
        }
        if let Some(profile) = l.instance_profile {
            let key = if profile.starts_with("arn:") {
                "IamInstanceProfile.Arn"
            } else {
                "IamInstanceProfile.Name"
            };
            p.push((key.into(), profile.into()));
        }
        for (i, g) in l.security_groups.iter().enumerate() {
            p.push((format!("SecurityGroupId.{}", i + 1), g.clone()));
        }
        if let Some(max_price) = l.spot {
            p.extend(spot_params(max_price));
        }
        for (s, kind) in ["instance", "volume"].iter().enumerate() {
            let spec = format!("TagSpecification.{}", s + 1);
            p.push((format!("{spec}.ResourceType"), kind.to_string()));
            for (t, (k, v)) in l.tags.iter().enumerate() {
                p.push((format!("{spec}.Tag.{}.Key", t + 1), k.to_string()));
                p.push((format!("{spec}.Tag.{}.Value", t + 1), v.to_string()));
            }
        }
        let xml = self.call("RunInstances", &p).map_err(|e| match e {
            Ec2Error::Refused(c, m) if l.spot.is_some() && is_spot_role_missing(&c, &m) => {
                Ec2Error::Refused(c, format!("{m} ({SPOT_ROLE_FIX})"))
            }
            other => other,
        })?;
        let doc = roxmltree::Document::parse(&xml)
            .map_err(|e| Ec2Error::Unreachable(format!("RunInstances: unreadable answer: {e}")))?;
        let text = |name: &str| {
            doc.descendants()
                .find(|n| n.has_tag_name(name))
                .and_then(|n| n.text())
                .map(str::to_string)
        };
        let id = text("instanceId").ok_or_else(|| {
            Ec2Error::Unreachable("RunInstances: no instanceId in the answer".into())
        })?;
        Ok((id, text("privateIpAddress").unwrap_or_default()))
    }

    /// DescribeInstances with `filters` (name, values), every page.
    pub fn describe(&mut self, filters: &[(&str, Vec<String>)]) -> Result<Vec<Instance>, Ec2Error> {
        let mut out = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let mut p: Vec<(String, String)> = Vec::new();
            for (i, (name, values)) in filters.iter().enumerate() {
                p.push((format!("Filter.{}.Name", i + 1), name.to_string()));
                for (j, v) in values.iter().enumerate() {
                    p.push((format!("Filter.{}.Value.{}", i + 1, j + 1), v.clone()));
                }
            }
            if let Some(t) = &next {
                p.push(("NextToken".into(), t.clone()));
            }
            let xml = self.call("DescribeInstances", &p)?;
            let doc = roxmltree::Document::parse(&xml).map_err(|e| {
                Ec2Error::Unreachable(format!("DescribeInstances: unreadable answer: {e}"))
            })?;
            for inst in doc.descendants().filter(|n| {
                n.has_tag_name("item") && n.children().any(|c| c.has_tag_name("instanceId"))
            }) {
                let child_text = |name: &str| {
                    inst.children()
                        .find(|c| c.has_tag_name(name))
                        .and_then(|c| c.text())
                        .unwrap_or("")
                        .to_string()
                };
                let tag = |key: &str| {
                    inst.children()
                        .find(|c| c.has_tag_name("tagSet"))
                        .and_then(|set| {
                            set.children().find(|item| {
                                item.children()
                                    .any(|k| k.has_tag_name("key") && k.text() == Some(key))
                            })
                        })
                        .and_then(|item| item.children().find(|c| c.has_tag_name("value")))
                        .and_then(|v| v.text())
                        .unwrap_or("")
                        .to_string()
                };
                out.push(Instance {
                    id: child_text("instanceId"),
                    name: tag("Name"),
                    pool: tag("orca-pool"),
                });
            }
            next = doc
                .descendants()
                .find(|n| n.has_tag_name("nextToken"))
                .and_then(|n| n.text())
                .map(str::to_string)
                .filter(|t| !t.is_empty());
            if next.is_none() {
                return Ok(out);
            }
        }
    }

    /// TerminateInstances of `id`.
    pub fn terminate(&mut self, id: &str) -> Result<(), Ec2Error> {
        match self.call("TerminateInstances", &[("InstanceId.1".into(), id.into())]) {
            Ok(_) => Ok(()),
            // Gone already: what was asked for holds.
            Err(Ec2Error::Refused(c, _)) if c == "InvalidInstanceID.NotFound" => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The architectures (EC2's names: `x86_64`, `arm64`) of `type_`.
    pub fn architectures(&mut self, type_: &str) -> Result<Vec<String>, Ec2Error> {
        let xml = self.call(
            "DescribeInstanceTypes",
            &[("InstanceType.1".into(), type_.into())],
        )?;
        let doc = roxmltree::Document::parse(&xml).map_err(|e| {
            Ec2Error::Unreachable(format!("DescribeInstanceTypes: unreadable answer: {e}"))
        })?;
        let arches: Vec<String> = doc
            .descendants()
            .filter(|n| n.has_tag_name("supportedArchitectures"))
            .flat_map(|n| {
                n.children()
                    .filter_map(|c| c.text().map(|t| t.trim().to_string()))
            })
            .filter(|t| !t.is_empty())
            .collect();
        if arches.is_empty() {
            return Err(Ec2Error::Refused(
                "UnknownInstanceType".into(),
                format!("DescribeInstanceTypes knows no type {type_}"),
            ));
        }
        Ok(arches)
    }
}

#[cfg(test)]
mod tests;
