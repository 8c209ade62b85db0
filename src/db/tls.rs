//! TLS to Postgres over rustls, as libpq's `sslmode` means it: `require`
//! (encrypted, the certificate not checked) and `verify-full` (checked
//! against `sslrootcert`, the name included). Like libpq, `verify-full`
//! trusts a presented certificate byte-identical to one in `sslrootcert`
//! (a self-signed server certificate, its own CA, given as its root), its
//! name and validity still checked. A certificate refused is said in plain
//! words ([`refused_certificate`]): it is no outage, and not waited on.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// `sslmode=require`: encrypted, the server's certificate not checked.
pub fn unverified() -> MakeRustlsConnect {
    let provider = provider();
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(NoCertCheck(provider)))
        .with_no_client_auth();
    MakeRustlsConnect::new(config)
}

/// `sslmode=verify-full` against the certificates in the PEM file
/// `rootcert`: each is trusted as a CA, and a server presenting one of them
/// itself is trusted too ([`RootsOrThemselves`]).
pub fn verified(rootcert: &str) -> Result<MakeRustlsConnect, String> {
    let pem = std::fs::read(rootcert)
        .map_err(|e| format!("sslmode=verify-full: can't read sslrootcert {rootcert}: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    let mut given = Vec::new();
    for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
        let cert = cert.map_err(|e| format!("sslrootcert {rootcert}: {e}"))?;
        roots
            .add(cert.clone())
            .map_err(|e| format!("sslrootcert {rootcert}: {e}"))?;
        given.push(cert);
    }
    if roots.is_empty() {
        return Err(format!("sslrootcert {rootcert} holds no certificate"));
    }
    let provider = provider();
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| format!("sslrootcert {rootcert}: {e}"))?;
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(RootsOrThemselves { webpki, given }))
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// Whether the refusal of a presented certificate by the chain check is
/// only that it is a CA's (`CaUsedAsEndEntity`): webpki checks a
/// certificate's validity dates before its basic constraints, so one
/// refused for this alone is within its dates.
fn only_a_ca(e: &rustls::Error) -> bool {
    match e {
        rustls::Error::InvalidCertificate(CertificateError::Other(other)) => matches!(
            other.0.downcast_ref::<webpki::Error>(),
            Some(webpki::Error::CaUsedAsEndEntity)
        ),
        _ => false,
    }
}

/// The chain check of rustls (webpki) against sslrootcert, and what libpq
/// trusts beside it: a presented certificate that is byte for byte one of
/// sslrootcert's, within its dates and for the name connected to.
#[derive(Debug)]
struct RootsOrThemselves {
    webpki: Arc<WebPkiServerVerifier>,
    given: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for RootsOrThemselves {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let checked = self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        );
        match checked {
            Err(e)
                if only_a_ca(&e)
                    && self.given.iter().any(|g| g.as_ref() == end_entity.as_ref()) =>
            {
                let cert = webpki::EndEntityCert::try_from(end_entity).map_err(|_| {
                    rustls::Error::InvalidCertificate(CertificateError::BadEncoding)
                })?;
                cert.verify_is_valid_for_subject_name(server_name)
                    .map_err(|_| {
                        rustls::Error::InvalidCertificate(CertificateError::NotValidForName)
                    })?;
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// `sslmode=require`, as libpq means it: encrypted, but the server's
/// certificate is not checked (use `verify-full` for that). The handshake's
/// signatures are still verified.
#[derive(Debug)]
struct NoCertCheck(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoCertCheck {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The certificate error rustls refused the server's certificate with, if
/// that is why `e` failed (found in its causes: tokio-rustls hands it on
/// inside an `io::Error`).
pub fn certificate_error<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a CertificateError> {
    let mut cause: Option<&'a (dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        let tls = c.downcast_ref::<rustls::Error>().or_else(|| {
            c.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(rustls::Error::InvalidCertificate(ce)) = tls {
            return Some(ce);
        }
        cause = c.source();
    }
    None
}

/// What a server certificate refused by `sslmode=verify-full` needs, in
/// words, for the host `host` connected to.
pub fn refused_certificate(e: &CertificateError, host: &str) -> String {
    use CertificateError as C;
    let needs = match e {
        C::NotValidForName | C::NotValidForNameContext { .. } => format!(
            "it is not for {host}: its subjectAltName must name the host in ORCA_DATABASE_URL"
        ),
        C::UnknownIssuer => "it is not signed by a certificate in sslrootcert (nor one of them): \
             give sslrootcert the CA that signed it, or the certificate itself"
            .to_string(),
        C::Expired | C::ExpiredContext { .. } => "it has expired".to_string(),
        C::NotValidYet | C::NotValidYetContext { .. } => "it is not valid yet".to_string(),
        C::Other(o)
            if matches!(
                o.0.downcast_ref::<webpki::Error>(),
                Some(webpki::Error::CaUsedAsEndEntity)
            ) =>
        {
            "it is a CA certificate, and not one of sslrootcert's: give sslrootcert that \
             certificate itself, or give the server one its CA signed"
                .to_string()
        }
        other => format!("{other:?}"),
    };
    format!("the server's TLS certificate was refused (sslmode=verify-full): {needs}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_certificate_says_what_it_needs() {
        let s = refused_certificate(&CertificateError::NotValidForName, "db.internal");
        assert!(
            s.contains("not for db.internal") && s.contains("subjectAltName"),
            "{s}"
        );
        let s = refused_certificate(&CertificateError::UnknownIssuer, "h");
        assert!(s.contains("sslrootcert"), "{s}");
        let ca = CertificateError::Other(rustls::OtherError(Arc::new(
            webpki::Error::CaUsedAsEndEntity,
        )));
        let s = refused_certificate(&ca, "h");
        assert!(s.contains("CA certificate"), "{s}");
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
        );
        assert_eq!(
            certificate_error(&io),
            Some(&CertificateError::UnknownIssuer)
        );
        let plain = std::io::Error::other("connection refused");
        assert_eq!(certificate_error(&plain), None);
    }
}
