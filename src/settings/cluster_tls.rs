//! `[cluster.tls]`: mutual TLS on the cluster transport, and loading its PEM files into
//! [`TlsMaterial`]. How the transport uses it (verification, the identity rule, rotation,
//! refusals) is in `docs/security.md`.

use std::sync::Arc;
use std::time::Duration;

use convoke_membership::config::text;
use serde::{Deserialize, Serialize};
use tokio_rustls::rustls::RootCertStore;
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::sign::CertifiedKey;

use super::SettingsError;

/// `[cluster.tls]`: when enabled, every cluster connection (all three lanes) is TLS 1.3 and both
/// ends present a certificate that chains to `ca_path` and is valid for `peer_name`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterTlsSettings {
    /// Whether the cluster transport uses mutual TLS; all members must agree.
    pub enabled: bool,
    /// PEM certificate chain of this node, leaf first. It must be valid for `peer_name` and
    /// allowed for both server and client authentication.
    pub cert_path: String,
    /// PEM private key of that certificate (PKCS#8, PKCS#1 or SEC1).
    pub key_path: String,
    /// PEM bundle of the certificate authorities a peer's certificate must chain to.
    pub ca_path: String,
    /// The DNS name every peer's certificate must be valid for (a wildcard certificate such as
    /// `*.convoke.default.svc.cluster.local` covers `convoke.default.svc.cluster.local`'s pods
    /// only if it matches the name exactly as TLS hostname verification does).
    pub peer_name: String,
    /// How often the three files are read again; changed files are used for new connections.
    #[serde(with = "text::duration")]
    pub reload_interval: Duration,
}

impl Default for ClusterTlsSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            cert_path: String::new(),
            key_path: String::new(),
            ca_path: String::new(),
            peer_name: String::new(),
            reload_interval: Duration::from_secs(30),
        }
    }
}

/// The bytes of the three `[cluster.tls]` files as read: certificate chain, key, CA bundle.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles([Vec<u8>; 3]);

/// The parsed contents of the `[cluster.tls]` files, checked against each other.
#[derive(Debug)]
pub struct TlsMaterial {
    /// This node's certificate chain, leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    /// Its private key, known to match the leaf.
    pub key: PrivateKeyDer<'static>,
    /// The trusted authorities.
    pub roots: RootCertStore,
    /// The name peers' certificates must be valid for.
    pub peer_name: ServerName<'static>,
}

impl ClusterTlsSettings {
    /// Checks the keys and, when enabled, that the files load ([`load`](Self::load)).
    ///
    /// # Errors
    /// The first bad key.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if self.reload_interval.is_zero() {
            return Err(SettingsError::new(
                "cluster.tls.reload_interval",
                "\"0s\"",
                "a duration greater than 0, like \"30s\"",
            ));
        }
        if self.enabled {
            self.load()?;
        }
        Ok(())
    }

    /// Reads and checks the files ([`read`](Self::read), then [`parse`](Self::parse)).
    ///
    /// # Errors
    /// The key whose file or value is bad, with the reason.
    pub fn load(&self) -> Result<TlsMaterial, SettingsError> {
        self.parse(&self.read()?)
    }

    /// Reads the three files, unparsed.
    ///
    /// # Errors
    /// The key whose path is empty or whose file cannot be read.
    pub fn read(&self) -> Result<TlsFiles, SettingsError> {
        let read = |key: &str, path: &str| {
            let bad = |why: String| SettingsError::new(key, format!("{path:?}"), why);
            if path.is_empty() {
                return Err(bad(
                    "the path of a PEM file (required when cluster.tls.enabled)".into()
                ));
            }
            std::fs::read(path).map_err(|e| bad(format!("a readable PEM file ({e})")))
        };
        Ok(TlsFiles([
            read("cluster.tls.cert_path", &self.cert_path)?,
            read("cluster.tls.key_path", &self.key_path)?,
            read("cluster.tls.ca_path", &self.ca_path)?,
        ]))
    }

    /// Checks `files`: a certificate chain, a private key matching its leaf, at least one CA
    /// certificate, and a valid DNS name as `peer_name`.
    ///
    /// # Errors
    /// The key whose file or value is bad, with the reason.
    pub fn parse(&self, files: &TlsFiles) -> Result<TlsMaterial, SettingsError> {
        let [cert_pem, key_pem, ca_pem] = &files.0;
        let peer_name = ServerName::try_from(self.peer_name.clone())
            .ok()
            .filter(|_| !self.peer_name.is_empty())
            .ok_or_else(|| {
                SettingsError::new(
                    "cluster.tls.peer_name",
                    format!("{:?}", self.peer_name),
                    "the DNS name every peer's certificate is valid for, like \"convoke.default.svc.cluster.local\"",
                )
            })?;
        let chain = parse_pem("cluster.tls.cert_path", &self.cert_path, || {
            let chain = rustls_pemfile::certs(&mut &cert_pem[..])
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            if chain.is_empty() {
                return Err("no PEM certificate in the file".to_owned());
            }
            Ok(chain)
        })?;
        let key = parse_pem("cluster.tls.key_path", &self.key_path, || {
            rustls_pemfile::private_key(&mut &key_pem[..])
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "no PEM private key in the file".to_owned())
        })?;
        let roots = parse_pem("cluster.tls.ca_path", &self.ca_path, || {
            let mut roots = RootCertStore::empty();
            for cert in rustls_pemfile::certs(&mut &ca_pem[..]) {
                let cert = cert.map_err(|e| e.to_string())?;
                roots.add(cert).map_err(|e| format!("a CA certificate is unusable: {e}"))?;
            }
            if roots.is_empty() {
                return Err("no PEM certificate in the file".to_owned());
            }
            Ok(roots)
        })?;
        check_key_matches(&self.key_path, &chain, &key)?;
        Ok(TlsMaterial { chain, key, roots, peer_name })
    }
}

/// The crypto provider of the node's TLS: the cluster transport's and the management server's.
pub fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(tokio_rustls::rustls::crypto::ring::default_provider())
}

/// Runs `parse` on the file at `path` (the value of `key`), naming both in its error.
fn parse_pem<T>(
    key: &str,
    path: &str,
    parse: impl FnOnce() -> Result<T, String>,
) -> Result<T, SettingsError> {
    parse()
        .map_err(|why| SettingsError::new(key, format!("{path:?}"), format!("a PEM file ({why})")))
}

fn check_key_matches(
    key_path: &str,
    chain: &[CertificateDer<'static>],
    key: &PrivateKeyDer<'static>,
) -> Result<(), SettingsError> {
    let bad =
        |why: String| SettingsError::new("cluster.tls.key_path", format!("{key_path:?}"), why);
    let signing_key = crypto_provider()
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|e| bad(format!("a usable private key ({e})")))?;
    CertifiedKey::new(chain.to_vec(), signing_key)
        .keys_match()
        .map_err(|e| bad(format!("the private key of cluster.tls.cert_path's certificate ({e})")))
}
