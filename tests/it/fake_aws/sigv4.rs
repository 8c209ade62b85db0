//! Signature V4 as the fake checks it: the request's region from its
//! credential scope, the signature computed again with the secret of its
//! access key.

use super::*;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn sha256(b: &[u8]) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA256, b)
        .as_ref()
        .to_vec()
}

fn hmac(key: &[u8], msg: &[u8]) -> Vec<u8> {
    let k = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    ring::hmac::sign(&k, msg).as_ref().to_vec()
}

/// Checks the SigV4 signature of `req`; the access key it names.
/// The region in `req`'s signing scope.
pub(super) fn scope_region(req: &Request) -> String {
    req.header("authorization")
        .and_then(|a| a.split("Credential=").nth(1))
        .and_then(|c| c.split('/').nth(2))
        .unwrap_or("")
        .to_string()
}

/// `req`'s access key, and whether its signature is the one the secret
/// `secrets` has for that key gives.
pub(super) fn verify(req: &Request, secrets: &HashMap<String, String>) -> (String, bool) {
    let Some(auth) = req.header("authorization") else {
        return (String::new(), false);
    };
    let field = |name: &str| {
        auth.split(&[' ', ','][..])
            .find_map(|p| p.trim().strip_prefix(&format!("{name}=")))
            .unwrap_or("")
            .to_string()
    };
    let cred = field("Credential");
    let mut scope = cred.split('/');
    let key = scope.next().unwrap_or("").to_string();
    let (date, region, service) = (
        scope.next().unwrap_or(""),
        scope.next().unwrap_or(""),
        scope.next().unwrap_or(""),
    );
    let Some(secret) = secrets.get(&key) else {
        return (key, false);
    };
    let signed = field("SignedHeaders");
    let mut canonical = format!("{}\n{}\n\n", req.method, req.path);
    for name in signed.split(';') {
        let v = req.header(name).unwrap_or("");
        canonical.push_str(&format!(
            "{name}:{}\n",
            v.split_whitespace().collect::<Vec<_>>().join(" ")
        ));
    }
    canonical.push_str(&format!("\n{signed}\n{}", hex(&sha256(&req.body))));
    let amz_date = req.header("x-amz-date").unwrap_or("");
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{date}/{region}/{service}/aws4_request\n{}",
        hex(&sha256(canonical.as_bytes()))
    );
    let k = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k = hmac(&k, region.as_bytes());
    let k = hmac(&k, service.as_bytes());
    let k = hmac(&k, b"aws4_request");
    let wanted = if req.header("x-amz-target").is_some() {
        "ecr"
    } else {
        "ec2"
    };
    let good = hex(&hmac(&k, to_sign.as_bytes())) == field("Signature")
        && service == wanted
        && amz_date.starts_with(date);
    (key, good)
}
