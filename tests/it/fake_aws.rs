//! A fake EC2 endpoint and a fake IMDSv2 on loopback, for the tests. The
//! EC2 side checks every request's SigV4 signature itself (its own
//! implementation, against the secrets it knows), keeps instances with their
//! tags, pages DescribeInstances, answers DescribeInstanceTypes and
//! DescribeImages with architectures (and refuses, as EC2 does, a
//! RunInstances of a type with an AMI of another architecture), and
//! answers with capacity, throttling and auth errors on demand. Nothing here reaches the internet.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

// Paths of their own: `tests/chaos` includes this file by its path too.
#[path = "fake_aws/http.rs"]
mod http;
#[path = "fake_aws/imds.rs"]
mod imds;
#[path = "fake_aws/sigv4.rs"]
mod sigv4;

use http::form_decode;
pub use http::{Request, read_request, reply};
pub use imds::FakeImds;
use sigv4::{scope_region, verify};

/// An instance the fake keeps.
#[derive(Clone, Debug)]
pub struct Inst {
    pub id: String,
    pub type_: String,
    pub tags: Vec<(String, String)>,
    pub terminated: bool,
    pub client_token: String,
    /// RunInstances' parameters, as sent.
    pub params: HashMap<String, String>,
}

impl Inst {
    pub fn tag(&self, k: &str) -> Option<&str> {
        self.tags.iter().find(|t| t.0 == k).map(|t| t.1.as_str())
    }
}

/// What the fake knows and will do.
#[derive(Default)]
pub struct Ec2State {
    /// Access key → secret.
    pub secrets: HashMap<String, String>,
    pub instances: Vec<Inst>,
    /// (type, location) with no capacity; "*" matches any.
    pub no_capacity: Vec<(String, String)>,
    /// The next this many requests get RequestLimitExceeded.
    pub throttle_next: u32,
    /// Every request gets this error: (HTTP status, code, message).
    pub fail_all: Option<(u16, String, String)>,
    /// Every RunInstances gets this error (IAM without `ec2:RunInstances`,
    /// an AMI RunInstances can't use): (HTTP status, code, message).
    pub fail_run: Option<(u16, String, String)>,
    /// Spot RunInstances of a type refused with an error code: (type rule,
    /// code); "*" matches any type. On-demand launches of it go ahead.
    pub spot_refused: Vec<(String, String)>,
    /// Every RunInstances that asked for a new instance (an answered retry
    /// of a token not counted): its type and its `InstanceMarketOptions.*`
    /// parameters, refused or not.
    pub launches: Vec<(String, HashMap<String, String>)>,
    /// Each AMI's architecture, beside the rule of [`image_arch`].
    pub images: HashMap<String, String>,
    /// RunInstances refused for a type and an AMI of different
    /// architectures (orca must never send one).
    pub arch_refused: u32,
    /// The next RunInstances that makes an instance closes the connection
    /// without answering.
    pub drop_next_run_answer: bool,
    /// DescribeInstances page size (0: all in one page).
    pub page_size: usize,
    /// Every request: (action, access key, signature good).
    pub log: Vec<(String, String, bool)>,
    pub throttled: u32,
    /// Every answer is this late (a slow endpoint).
    pub delay_ms: u64,
    /// Requests being held back by a delay now.
    pub in_flight: u32,
    /// How many requests a delay held back, by action.
    pub held: HashMap<String, u32>,
    /// The region each request was signed for.
    pub regions: Vec<String>,
    /// Faults at random (tests/chaos/churn.rs): each request draws from
    /// this seeded generator (splitmix64).
    pub random: RandomFaults,
}

/// Faults the fake does at random, each a fraction of the requests it
/// applies to (0: never), drawn from a seeded generator; and how many it did.
#[derive(Default, Clone, Debug)]
pub struct RandomFaults {
    /// The generator's state (splitmix64).
    pub seed: u64,
    /// RunInstances that makes an instance but whose answer is lost.
    pub lose_run_answer: f64,
    /// TerminateInstances answered 500 InternalError, nothing terminated.
    pub terminate_fail: f64,
    /// TerminateInstances that hangs `hang_ms`, then closes unanswered
    /// (half of them terminated all the same).
    pub terminate_hang: f64,
    /// How long a hung call hangs (ms).
    pub hang_ms: u64,
    /// Any request answered `slow_ms` late.
    pub slow: f64,
    /// How late a slow answer is (ms).
    pub slow_ms: u64,
    /// Any request answered RequestLimitExceeded.
    pub throttle: f64,
    /// RunInstances in a location refused InsufficientInstanceCapacity:
    /// (location, fraction).
    pub no_capacity: Vec<(String, f64)>,
    /// What was done: answers lost, terminates failed, hung, slowed,
    /// throttled, capacity refusals.
    pub lost: u32,
    pub failed: u32,
    pub hung: u32,
    pub slowed: u32,
    pub throttled: u32,
    pub refused: u32,
    /// When each hung call began (seconds since the epoch).
    pub hung_at: Vec<f64>,
}

impl RandomFaults {
    /// Whether a fault of fraction `p` strikes now.
    pub fn strikes(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        self.seed = self.seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        ((z >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

/// The fake EC2 endpoint.
pub struct FakeEc2 {
    pub url: String,
    pub state: Arc<Mutex<Ec2State>>,
}

fn error(code: &str, message: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors><RequestID>fake</RequestID></Response>"
    )
}

const NS: &str = "xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"";

/// The architectures the fake says type `t` runs: Graviton families
/// (`c7g`, `m7gd`, `c6gn`...) arm64; `t2` i386 and x86_64; any other x86_64.
pub fn type_arches(t: &str) -> Vec<&'static str> {
    let family = t.split('.').next().unwrap_or("");
    let graviton = family.len() > 2
        && (family.ends_with('g') || family.ends_with("gd") || family.ends_with("gn"));
    if graviton {
        vec!["arm64"]
    } else if family == "t2" {
        vec!["i386", "x86_64"]
    } else {
        vec!["x86_64"]
    }
}

/// The architecture of AMI `id` as the fake's DescribeImages tells it:
/// `images` first, else arm64 for an id with `arm` in it, x86_64 for any
/// other; `None` (no such AMI) for one starting `ami-gone`.
pub fn image_arch(st: &Ec2State, id: &str) -> Option<String> {
    if let Some(a) = st.images.get(id) {
        return Some(a.clone());
    }
    if id.starts_with("ami-gone") || id.is_empty() {
        None
    } else if id.contains("arm") {
        Some("arm64".into())
    } else {
        Some("x86_64".into())
    }
}

fn matches(rule: &str, v: &str) -> bool {
    rule == "*" || rule == v
}

impl FakeEc2 {
    /// A fake EC2 that knows access key `key` with `secret`.
    pub fn start(key: &str, secret: &str) -> FakeEc2 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(Ec2State::default()));
        state
            .lock()
            .unwrap()
            .secrets
            .insert(key.into(), secret.into());
        let shared = state.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let shared = shared.clone();
                std::thread::spawn(move || {
                    if let Some(req) = read_request(&conn) {
                        handle(&shared, &conn, &req);
                    }
                });
            }
        });
        FakeEc2 { url, state }
    }

    /// Live (not terminated) instances.
    pub fn live(&self) -> Vec<Inst> {
        self.state
            .lock()
            .unwrap()
            .instances
            .iter()
            .filter(|i| !i.terminated)
            .cloned()
            .collect()
    }

    /// Requests whose signature did not check out.
    pub fn bad_signatures(&self) -> usize {
        self.state
            .lock()
            .unwrap()
            .log
            .iter()
            .filter(|l| !l.2)
            .count()
    }

    /// How many requests of `action` there were.
    pub fn count(&self, action: &str) -> usize {
        self.state
            .lock()
            .unwrap()
            .log
            .iter()
            .filter(|l| l.0 == action)
            .count()
    }
}

fn handle(shared: &Arc<Mutex<Ec2State>>, conn: &TcpStream, req: &Request) {
    let params: HashMap<String, String> = String::from_utf8_lossy(&req.body)
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (form_decode(k), form_decode(v)))
        .collect();
    let target = req.header("x-amz-target").unwrap_or("").to_string();
    let action = match target.rsplit_once('.') {
        Some((_, op)) => op.to_string(),
        None => params.get("Action").cloned().unwrap_or_default(),
    };
    let delay = {
        let mut st = shared.lock().unwrap();
        let r = &mut st.random;
        let slow = if r.strikes(r.slow) {
            r.slowed += 1;
            r.slow_ms
        } else {
            0
        };
        let delay = st.delay_ms + slow;
        if delay > 0 {
            st.in_flight += 1;
            *st.held.entry(action.clone()).or_default() += 1;
        }
        delay
    };
    if delay > 0 {
        std::thread::sleep(std::time::Duration::from_millis(delay));
        shared.lock().unwrap().in_flight -= 1;
    }
    let mut st = shared.lock().unwrap();
    let (key, good) = verify(req, &st.secrets);
    st.log.push((action.clone(), key, good));
    st.regions.push(scope_region(req));
    if good && action == "GetAuthorizationToken" {
        let json_ok = req.header("content-type") == Some("application/x-amz-json-1.1")
            && target == "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken";
        return reply(
            conn,
            if json_ok { 200 } else { 400 },
            r#"{"authorizationData":[{"authorizationToken":"QVdTOmZha2UtZWNyLXBhc3N3b3Jk","expiresAt":1.9E9,"proxyEndpoint":"https://123456789012.dkr.ecr.eu-west-1.amazonaws.com"}]}"#,
        );
    }
    if !good {
        return reply(
            conn,
            401,
            &error(
                "AuthFailure",
                "AWS was not able to validate the provided access credentials",
            ),
        );
    }
    if params.get("Version").map(String::as_str) != Some("2016-11-15") {
        return reply(conn, 400, &error("InvalidParameterValue", "bad Version"));
    }
    if let Some((status, code, message)) = st.fail_all.clone() {
        return reply(conn, status, &error(&code, &message));
    }
    let throttle = st.random.throttle;
    if st.random.strikes(throttle) {
        st.random.throttled += 1;
        st.throttle_next += 1;
    }
    if st.throttle_next > 0 {
        st.throttle_next -= 1;
        st.throttled += 1;
        return reply(
            conn,
            503,
            &error("RequestLimitExceeded", "Request limit exceeded."),
        );
    }
    match action.as_str() {
        "RunInstances" => {
            let token = params.get("ClientToken").cloned().unwrap_or_default();
            if let Some(i) = st
                .instances
                .iter()
                .find(|i| !token.is_empty() && i.client_token == token)
            {
                // As EC2 does: the same token with other parameters is refused.
                let same = [
                    "InstanceType",
                    "SubnetId",
                    "Placement.AvailabilityZone",
                    "ImageId",
                ]
                .iter()
                .all(|k| i.params.get(*k) == params.get(*k));
                if !same {
                    return reply(
                        conn,
                        400,
                        &error(
                            "IdempotentParameterMismatch",
                            "The client token was used with other parameters.",
                        ),
                    );
                }
                let body = format!(
                    "<RunInstancesResponse {NS}><reservationId>r-1</reservationId><instancesSet><item><instanceId>{}</instanceId></item></instancesSet></RunInstancesResponse>",
                    i.id
                );
                return reply(conn, 200, &body);
            }
            if let Some((status, code, message)) = st.fail_run.clone() {
                return reply(conn, status, &error(&code, &message));
            }
            let type_ = params.get("InstanceType").cloned().unwrap_or_default();
            let market: HashMap<String, String> = params
                .iter()
                .filter(|(k, _)| k.starts_with("InstanceMarketOptions."))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let spot = market
                .get("InstanceMarketOptions.MarketType")
                .map(String::as_str)
                == Some("spot");
            st.launches.push((type_.clone(), market));
            if spot
                && let Some((_, code)) = st
                    .spot_refused
                    .iter()
                    .find(|(t, _)| matches(t, &type_))
                    .cloned()
            {
                let (status, message) = match code.as_str() {
                    "AuthFailure.ServiceLinkedRoleCreationNotPermitted" => (
                        403,
                        "The provided credentials do not have permission to create the service-linked role for EC2 Spot Instances.".to_string(),
                    ),
                    c if c.starts_with("Insufficient") => (
                        500,
                        format!("There is no Spot capacity available that matches your request ({type_})."),
                    ),
                    _ => (400, format!("Your Spot request for {type_} can't be fulfilled now.")),
                };
                return reply(conn, status, &error(&code, &message));
            }
            let ami = params.get("ImageId").cloned().unwrap_or_default();
            // As EC2 does: an AMI of another architecture than the type's
            // is refused, as is one that doesn't exist.
            let Some(ami_arch) = image_arch(&st, &ami) else {
                return reply(
                    conn,
                    400,
                    &error(
                        "InvalidAMIID.NotFound",
                        &format!("The image id '[{ami}]' does not exist"),
                    ),
                );
            };
            let arches = type_arches(&type_);
            if !arches.contains(&ami_arch.as_str()) {
                st.arch_refused += 1;
                return reply(
                    conn,
                    400,
                    &error(
                        "InvalidParameterValue",
                        &format!(
                            "The architecture '{}' of the specified instance type does not match the architecture '{ami_arch}' of the specified AMI. Specify an instance type and an AMI that have matching architectures, and try again.",
                            arches.join(", ")
                        ),
                    ),
                );
            }
            let location = params
                .get("SubnetId")
                .or_else(|| params.get("Placement.AvailabilityZone"))
                .cloned()
                .unwrap_or_default();
            let short = st
                .random
                .no_capacity
                .iter()
                .find(|(l, _)| *l == location)
                .map_or(0.0, |(_, p)| *p);
            let refused = st.random.strikes(short);
            if refused {
                st.random.refused += 1;
            }
            if refused
                || st
                    .no_capacity
                    .iter()
                    .any(|(t, l)| matches(t, &type_) && matches(l, &location))
            {
                return reply(
                    conn,
                    500,
                    &error(
                        "InsufficientInstanceCapacity",
                        &format!(
                            "We currently do not have sufficient {type_} capacity in {location}."
                        ),
                    ),
                );
            }
            let mut tags = Vec::new();
            for n in 1.. {
                let (Some(k), Some(v)) = (
                    params.get(&format!("TagSpecification.1.Tag.{n}.Key")),
                    params.get(&format!("TagSpecification.1.Tag.{n}.Value")),
                ) else {
                    break;
                };
                tags.push((k.clone(), v.clone()));
            }
            let id = format!("i-{:017x}", st.instances.len() + 1);
            st.instances.push(Inst {
                id: id.clone(),
                type_,
                tags,
                terminated: false,
                client_token: token,
                params: params.clone(),
            });
            let lose = st.random.lose_run_answer;
            if st.random.strikes(lose) {
                st.random.lost += 1;
                return; // the connection closes unanswered
            }
            if st.drop_next_run_answer {
                st.drop_next_run_answer = false;
                return; // the connection closes unanswered
            }
            let body = format!(
                "<RunInstancesResponse {NS}><reservationId>r-1</reservationId><instancesSet><item><instanceId>{id}</instanceId></item></instancesSet></RunInstancesResponse>"
            );
            reply(conn, 200, &body)
        }
        "DescribeInstances" => {
            let mut filters: Vec<(String, Vec<String>)> = Vec::new();
            for n in 1.. {
                let Some(name) = params.get(&format!("Filter.{n}.Name")) else {
                    break;
                };
                let values = (1..)
                    .map_while(|m| params.get(&format!("Filter.{n}.Value.{m}")).cloned())
                    .collect();
                filters.push((name.clone(), values));
            }
            let found: Vec<&Inst> = st
                .instances
                .iter()
                .filter(|i| {
                    filters.iter().all(|(name, values)| {
                        if let Some(tag) = name.strip_prefix("tag:") {
                            i.tag(tag).is_some_and(|v| values.iter().any(|x| x == v))
                        } else if name == "instance-state-name" {
                            let state = if i.terminated {
                                "terminated"
                            } else {
                                "running"
                            };
                            values.iter().any(|x| x == state)
                        } else {
                            true
                        }
                    })
                })
                .collect();
            let start: usize = params
                .get("NextToken")
                .and_then(|t| t.parse().ok())
                .unwrap_or(0);
            let size = if st.page_size == 0 {
                found.len().max(1)
            } else {
                st.page_size
            };
            let page: Vec<&&Inst> = found.iter().skip(start).take(size).collect();
            let mut items = String::new();
            for i in page {
                let tags: String = i
                    .tags
                    .iter()
                    .map(|(k, v)| format!("<item><key>{k}</key><value>{v}</value></item>"))
                    .collect();
                items.push_str(&format!(
                    "<item><reservationId>r-1</reservationId><instancesSet><item><instanceId>{}</instanceId><instanceState><code>16</code><name>running</name></instanceState><tagSet>{tags}</tagSet></item></instancesSet></item>",
                    i.id
                ));
            }
            let next = if start + size < found.len() {
                format!("<nextToken>{}</nextToken>", start + size)
            } else {
                String::new()
            };
            reply(
                conn,
                200,
                &format!(
                    "<DescribeInstancesResponse {NS}><requestId>x</requestId><reservationSet>{items}</reservationSet>{next}</DescribeInstancesResponse>"
                ),
            )
        }
        "TerminateInstances" => {
            let id = params.get("InstanceId.1").cloned().unwrap_or_default();
            let (fail, hang) = (st.random.terminate_fail, st.random.terminate_hang);
            if st.random.strikes(fail) {
                st.random.failed += 1;
                return reply(
                    conn,
                    500,
                    &error("InternalError", "An internal error has occurred."),
                );
            }
            if st.random.strikes(hang) {
                st.random.hung += 1;
                let at = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
                st.random.hung_at.push(at);
                let applied = st.random.strikes(0.5);
                if applied && let Some(i) = st.instances.iter_mut().find(|i| i.id == id) {
                    i.terminated = true;
                }
                let ms = st.random.hang_ms;
                drop(st);
                std::thread::sleep(std::time::Duration::from_millis(ms));
                return; // the connection closes unanswered
            }
            match st.instances.iter_mut().find(|i| i.id == id) {
                Some(i) => {
                    i.terminated = true;
                    reply(
                        conn,
                        200,
                        &format!(
                            "<TerminateInstancesResponse {NS}><instancesSet><item><instanceId>{id}</instanceId></item></instancesSet></TerminateInstancesResponse>"
                        ),
                    )
                }
                None => reply(
                    conn,
                    400,
                    &error(
                        "InvalidInstanceID.NotFound",
                        &format!("The instance ID '{id}' does not exist"),
                    ),
                ),
            }
        }
        "DescribeInstanceTypes" => {
            let t = params.get("InstanceType.1").cloned().unwrap_or_default();
            let arches: String = type_arches(&t)
                .iter()
                .map(|a| format!("<item>{a}</item>"))
                .collect();
            reply(
                conn,
                200,
                &format!(
                    "<DescribeInstanceTypesResponse {NS}><instanceTypeSet><item><instanceType>{t}</instanceType><processorInfo><supportedArchitectures>{arches}</supportedArchitectures></processorInfo></item></instanceTypeSet></DescribeInstanceTypesResponse>"
                ),
            )
        }
        "DescribeImages" => {
            let id = params.get("ImageId.1").cloned().unwrap_or_default();
            match image_arch(&st, &id) {
                Some(arch) => reply(
                    conn,
                    200,
                    &format!(
                        "<DescribeImagesResponse {NS}><requestId>x</requestId><imagesSet><item><imageId>{id}</imageId><imageState>available</imageState><architecture>{arch}</architecture><rootDeviceType>ebs</rootDeviceType></item></imagesSet></DescribeImagesResponse>"
                    ),
                ),
                None => reply(
                    conn,
                    400,
                    &error(
                        "InvalidAMIID.NotFound",
                        &format!("The image id '[{id}]' does not exist"),
                    ),
                ),
            }
        }
        other => reply(
            conn,
            400,
            &error(
                "InvalidAction",
                &format!("The action {other} is not valid for this web service."),
            ),
        ),
    }
}
