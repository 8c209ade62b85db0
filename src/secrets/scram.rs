//! Secrets made here: random hex from the kernel, and the SCRAM-SHA-256
//! verifier Postgres stores in place of a login's secret, so neither the
//! server nor its log ever holds the secret itself.

/// `bytes` random bytes from the kernel, as lowercase hex.
pub fn random_hex(bytes: usize) -> std::io::Result<String> {
    use std::io::Read;
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// A new random secret and its SCRAM verifier (4096 iterations, a random
/// salt); an error only when `/dev/urandom` can't be read.
pub fn new_secret() -> Result<(String, String), String> {
    let random = |n| random_hex(n).map_err(|e| format!("can't read /dev/urandom: {e}"));
    let secret = random(24)?;
    let salt = random(16)?;
    let verifier = scram_verifier(&secret, salt.as_bytes(), 4096);
    Ok((secret, verifier))
}

/// The SCRAM-SHA-256 verifier Postgres stores for `password` (RFC 5802 and
/// 7677, as `pg_authid.rolpassword` spells it).
pub fn scram_verifier(password: &str, salt: &[u8], iterations: u32) -> String {
    use base64::Engine;
    use ring::{digest, hmac, pbkdf2};
    let mut salted = [0u8; 32];
    pbkdf2::derive(
        pbkdf2::PBKDF2_HMAC_SHA256,
        std::num::NonZeroU32::new(iterations).expect("iterations > 0"),
        salt,
        password.as_bytes(),
        &mut salted,
    );
    let key = hmac::Key::new(hmac::HMAC_SHA256, &salted);
    let client_key = hmac::sign(&key, b"Client Key");
    let stored_key = digest::digest(&digest::SHA256, client_key.as_ref());
    let server_key = hmac::sign(&key, b"Server Key");
    let b64 = base64::engine::general_purpose::STANDARD;
    format!(
        "SCRAM-SHA-256${iterations}:{}${}:{}",
        b64.encode(salt),
        b64.encode(stored_key.as_ref()),
        b64.encode(server_key.as_ref())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scram_verifier_has_postgres_form() {
        // The keys themselves are checked by a server: workers log in with
        // their secret over scram-sha-256 in the integration tests.
        let v = scram_verifier("secret", b"0123456789abcdef", 4096);
        assert!(v.starts_with("SCRAM-SHA-256$4096:MDEyMzQ1Njc4OWFiY2RlZg==$"));
        assert_eq!(v.split('$').count(), 3);
    }

    #[test]
    fn a_new_secret_is_random_and_its_verifier_is_scram() {
        let (a, va) = new_secret().unwrap();
        let (b, _) = new_secret().unwrap();
        assert_eq!(a.len(), 48);
        assert_ne!(a, b);
        assert!(va.starts_with("SCRAM-SHA-256$4096:") && !va.contains(&a));
    }
}
