//! TLS for client connections (`--tls-cert`, `--tls-key`, `--tls-client-ca`), through
//! pgwire's tokio-rustls integration on ring: an SSLRequest is answered `S` when TLS is
//! configured (`N` otherwise). With `--tls-client-ca`, clients may present a certificate
//! signed by that CA; a `cert` rule then logs such a client in as the role named by the
//! certificate's CN. What was negotiated is kept per session ([`TlsSession`]) for
//! `pg_stat_ssl`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pgwire::tokio::tokio_rustls::TlsAcceptor;
use pgwire::tokio::tokio_rustls::rustls;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::{Result, WeirError};

#[derive(Debug, Clone)]
pub struct TlsConfig {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

fn bad(path: &Path, what: &str, e: impl std::fmt::Display) -> WeirError {
    WeirError::invalid_parameter(format!("{what} {}: {e}", path.display()))
}

fn certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(path, what, e))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad(path, what, e))?;
    if certs.is_empty() {
        return Err(bad(path, what, "no PEM certificate in it"));
    }
    Ok(certs)
}

/// The acceptor for `config`; errors name the file that is wrong.
pub fn acceptor(config: &TlsConfig) -> Result<TlsAcceptor> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certs(&config.cert, "--tls-cert")?;
    let key =
        PrivateKeyDer::from_pem_file(&config.key).map_err(|e| bad(&config.key, "--tls-key", e))?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| WeirError::internal(format!("TLS: {e}")))?;
    let builder = match &config.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in certs(ca, "--tls-client-ca")? {
                roots.add(c).map_err(|e| bad(ca, "--tls-client-ca", e))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            // a certificate is asked for, not required: rules decide who needs one
            .allow_unauthenticated()
            .build()
            .map_err(|e| bad(ca, "--tls-client-ca", e))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut server = builder
        .with_single_cert(chain, key)
        .map_err(|e| bad(&config.cert, "--tls-cert/--tls-key", e))?;
    // direct TLS connections (Postgres 17's sslnegotiation=direct) name this protocol
    server.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(server)))
}

/// What a TLS connection negotiated (as `pg_stat_ssl` shows it), and the CN of the
/// client certificate it presented, which `cert` rules compare with the role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSession {
    pub info: crate::catalog::TlsInfo,
    pub client_cn: Option<String>,
}

impl TlsSession {
    pub fn of(conn: &rustls::ServerConnection) -> TlsSession {
        let version = match conn.protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3".to_owned(),
            Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2".to_owned(),
            Some(v) => format!("{v:?}"),
            None => String::new(),
        };
        // the IANA name (TLS 1.3's as OpenSSL prints it: TLS_AES_256_GCM_SHA384)
        let cipher = conn
            .negotiated_cipher_suite()
            .map(|s| format!("{:?}", s.suite()).replacen("TLS13_", "TLS_", 1))
            .unwrap_or_default();
        // DNs as OpenSSL's one-line form, which pg_stat_ssl shows: /CN=carol/O=...
        let oneline = |s: String| format!("/{}", s.replace(", ", "/"));
        let bits = if cipher.contains("128") { 128 } else { 256 };
        let cert = conn
            .peer_certificates()
            .and_then(|c| c.first())
            .and_then(|c| {
                x509_certificate::CapturedX509Certificate::from_der(c.as_ref().to_vec()).ok()
            });
        TlsSession {
            info: crate::catalog::TlsInfo {
                version,
                cipher,
                bits,
                client_dn: cert
                    .as_ref()
                    .and_then(|c| c.subject_name().user_friendly_str().ok())
                    .map(oneline),
                issuer_dn: cert
                    .as_ref()
                    .and_then(|c| c.issuer_name().user_friendly_str().ok())
                    .map(oneline),
            },
            client_cn: cert.as_ref().and_then(|c| c.subject_common_name()),
        }
    }
}
