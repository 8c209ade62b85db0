//! A fake instance metadata service (IMDSv2): a token, then the
//! instance's identity.

use super::*;

/// A fake IMDSv2: a token PUT, then the role and its credentials, each
/// GET refused without the token. Credentials rotate: the n-th fetch gets
/// `creds[min(n, len-1)]`, (key, secret, seconds to expiry).
pub struct FakeImds {
    pub url: String,
    pub fetches: Arc<Mutex<usize>>,
}

impl FakeImds {
    pub fn start(role: &str, region: &str, creds: Vec<(String, String, i64)>) -> FakeImds {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let fetches = Arc::new(Mutex::new(0usize));
        let (role, region, count) = (role.to_string(), region.to_string(), fetches.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let Some(req) = read_request(&conn) else {
                    continue;
                };
                if req.method == "PUT" && req.path == "/latest/api/token" {
                    if req.header("x-aws-ec2-metadata-token-ttl-seconds").is_none() {
                        reply(&conn, 400, "");
                    } else {
                        reply(&conn, 200, "fake-imds-token");
                    }
                    continue;
                }
                if req.header("x-aws-ec2-metadata-token") != Some("fake-imds-token") {
                    reply(&conn, 401, "");
                    continue;
                }
                let base = "/latest/meta-data/iam/security-credentials/";
                if req.path == base {
                    reply(&conn, 200, &role);
                } else if req.path == format!("{base}{role}") {
                    let mut n = count.lock().unwrap();
                    let (k, s, secs) = creds[(*n).min(creds.len() - 1)].clone();
                    *n += 1;
                    let exp = chrono::Utc::now() + chrono::Duration::seconds(secs);
                    reply(
                        &conn,
                        200,
                        &format!(
                            "{{\"Code\":\"Success\",\"Type\":\"AWS-HMAC\",\"AccessKeyId\":\"{k}\",\"SecretAccessKey\":\"{s}\",\"Token\":\"tok-{k}\",\"Expiration\":\"{}\"}}",
                            exp.format("%Y-%m-%dT%H:%M:%SZ")
                        ),
                    );
                } else if req.path == "/latest/meta-data/placement/region" {
                    reply(&conn, 200, &region);
                } else {
                    reply(&conn, 404, "");
                }
            }
        });
        FakeImds { url, fetches }
    }
}
