//! SigV4 signing of one request, with the `aws-sigv4` crate: the headers to
//! add (`authorization`, `x-amz-date`, and `x-amz-security-token` for
//! temporary credentials).

use std::time::SystemTime;

use super::credentials::Credentials;

/// A request to sign.
pub struct Request<'a> {
    /// `GET`, `POST`, ...
    pub method: &'a str,
    /// The whole URL.
    pub url: &'a str,
    /// Headers to sign besides `host`.
    pub headers: &'a [(&'a str, &'a str)],
    /// The body.
    pub body: &'a [u8],
}

/// The headers that sign `req` for `service` in `region` at `time`.
pub fn headers(
    req: &Request,
    creds: &Credentials,
    region: &str,
    service: &str,
    time: SystemTime,
) -> Result<Vec<(String, String)>, String> {
    use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
    let identity = aws_credential_types::Credentials::new(
        creds.access_key_id.clone(),
        creds.secret_access_key.clone(),
        creds.session_token.clone(),
        None,
        "orca",
    )
    .into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| format!("signing parameters: {e}"))?
        .into();
    let request = SignableRequest::new(
        req.method,
        req.url,
        req.headers.iter().copied(),
        SignableBody::Bytes(req.body),
    )
    .map_err(|e| format!("can't sign the request: {e}"))?;
    let (instructions, _) = sign(request, &params)
        .map_err(|e| format!("can't sign the request: {e}"))?
        .into_parts();
    Ok(instructions
        .headers()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_published_get_vanilla_vector() {
        // aws-sig-v4-test-suite "get-vanilla".
        let creds = Credentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: None,
        };
        let time = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_440_938_160);
        let req = Request {
            method: "GET",
            url: "https://example.amazonaws.com/",
            headers: &[],
            body: b"",
        };
        let signed = headers(&req, &creds, "us-east-1", "service", time).unwrap();
        let auth = signed
            .iter()
            .find(|(k, _)| k == "authorization")
            .map(|(_, v)| v.as_str());
        assert_eq!(
            auth,
            Some(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
                 SignedHeaders=host;x-amz-date, \
                 Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
            )
        );
        assert!(
            signed
                .iter()
                .any(|(k, v)| k == "x-amz-date" && v == "20150830T123600Z")
        );
    }
}
