//! Mutual TLS on every cluster connection (`[cluster.tls]`; the design is in `docs/security.md`).
//!
//! Both ends present a certificate: the accepting node verifies the dialler's with
//! [`WebPkiClientVerifier`] plus the identity rule (valid for `peer_name`), the dialling node
//! verifies the acceptor's as a TLS client verifies a server named `peer_name`. Only TLS 1.3, no
//! session resumption. A connection whose TLS handshake fails is closed before a single frame is
//! read; the refusal is counted by reason and logged at WARN once per peer host and reason.
//!
//! The PEM files are read again every `reload_interval`; when their bytes changed and they load,
//! new connections use them. Connections already open keep their session, so members stay
//! members. Files that do not load (a half-written update) are reported and the previous ones
//! stay in use.

use std::collections::HashSet;
use std::hash::Hash;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls::client::Resumption;
use tokio_rustls::rustls::client::danger::HandshakeSignatureValid;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use tokio_rustls::rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use tokio_rustls::rustls::{
    self, CertificateError, ClientConfig, DigitallySignedStruct, DistinguishedName, ServerConfig,
    SignatureScheme,
};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tokio_util::sync::CancellationToken;

use super::stats::{Counters, inc};
use crate::settings::{ClusterTlsSettings, SettingsError, TlsFiles, TlsMaterial, crypto_provider};

/// A connection's byte stream: a plain socket or a TLS session over one.
pub(super) trait Connection: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Connection for T {}
/// A boxed [`Connection`].
pub(super) type Io = Box<dyn Connection>;

/// Keys already logged at WARN; cleared when this many accumulate.
const MAX_LOGGED_KEYS: usize = 1024;

/// Remembers which keys have been logged at WARN, so each is logged there once and at DEBUG
/// after that; bounded by [`MAX_LOGGED_KEYS`] (when full it starts over).
struct LogOnce<K>(Mutex<HashSet<K>>);

impl<K: Hash + Eq> LogOnce<K> {
    fn new() -> Self {
        Self(Mutex::new(HashSet::new()))
    }

    /// Whether `key` is seen for the first time.
    fn first(&self, key: K) -> bool {
        let mut seen = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.len() >= MAX_LOGGED_KEYS {
            seen.clear();
        }
        seen.insert(key)
    }
}

/// Why a peer's TLS handshake was refused, as counted in `/metrics`. The discriminant is the
/// index of its label in [`TLS_REFUSAL_REASONS`](super::TLS_REFUSAL_REASONS).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Refusal {
    /// Its certificate does not chain to a trusted CA (or is malformed, or not for this use).
    Untrusted,
    /// Its certificate has expired or is not valid yet.
    Expired,
    /// Its certificate is not valid for `peer_name`.
    NameMismatch,
    /// It presented no certificate.
    NoCertificate,
    /// It does not speak TLS (a plaintext node, a port scanner).
    NotTls,
    /// Any other handshake failure.
    Other,
}

impl Refusal {
    /// Every reason; their labels are [`TLS_REFUSAL_REASONS`](super::TLS_REFUSAL_REASONS).
    #[cfg(test)]
    const ALL: [Refusal; 6] = [
        Self::Untrusted,
        Self::Expired,
        Self::NameMismatch,
        Self::NoCertificate,
        Self::NotTls,
        Self::Other,
    ];

    /// The `reason` label.
    pub(super) fn as_str(self) -> &'static str {
        super::TLS_REFUSAL_REASONS[self as usize]
    }

    /// The reason a rustls error stands for.
    fn of(error: &rustls::Error) -> Self {
        use CertificateError as C;
        match error {
            rustls::Error::InvalidCertificate(c) => match c {
                C::Expired
                | C::ExpiredContext { .. }
                | C::NotValidYet
                | C::NotValidYetContext { .. } => Self::Expired,
                C::NotValidForName | C::NotValidForNameContext { .. } => Self::NameMismatch,
                _ => Self::Untrusted,
            },
            rustls::Error::NoCertificatesPresented => Self::NoCertificate,
            rustls::Error::InvalidMessage(_)
            | rustls::Error::InappropriateMessage { .. }
            | rustls::Error::InappropriateHandshakeMessage { .. } => Self::NotTls,
            _ => Self::Other,
        }
    }
}

/// The rustls error inside an IO error of a TLS stream, if any.
fn rustls_error(e: &io::Error) -> Option<&rustls::Error> {
    e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>())
}

/// The TLS side of a transport: the current configurations, their reloading, the refusal log.
pub(super) struct Tls {
    settings: ClusterTlsSettings,
    current: RwLock<Arc<Configs>>,
    /// The file bytes [`Self::current`] was built from.
    loaded: Mutex<TlsFiles>,
    /// (peer host, reason) pairs already logged.
    refusals: LogOnce<(IpAddr, Refusal)>,
    /// Peers whose TLS alert was already logged.
    alerts: LogOnce<String>,
    /// The last reload error logged, so a broken file is reported once, not every interval.
    last_reload_error: Mutex<Option<String>>,
}

/// What one version of the files gives: both ends' configurations.
struct Configs {
    acceptor: TlsAcceptor,
    connector: TlsConnector,
    peer_name: ServerName<'static>,
}

impl Tls {
    /// Loads the files named by `settings` (already validated with the rest of the settings).
    ///
    /// # Errors
    /// A file no longer loads, named by its key.
    pub(super) fn new(settings: ClusterTlsSettings) -> Result<Self, SettingsError> {
        let loaded = settings.read()?;
        let configs = Configs::build(settings.parse(&loaded)?).map_err(|e| {
            SettingsError::new(
                "cluster.tls.cert_path",
                format!("{:?}", settings.cert_path),
                format!("a certificate and key rustls accepts ({e})"),
            )
        })?;
        Ok(Self {
            settings,
            current: RwLock::new(Arc::new(configs)),
            loaded: Mutex::new(loaded),
            refusals: LogOnce::new(),
            alerts: LogOnce::new(),
            last_reload_error: Mutex::new(None),
        })
    }

    fn current(&self) -> Arc<Configs> {
        self.current.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Runs the server side of the handshake on an accepted socket within `timeout`; `None`
    /// (counted and logged) when the peer is refused or fails to complete it.
    pub(super) async fn accept(
        &self,
        socket: TcpStream,
        peer: SocketAddr,
        timeout: Duration,
        counters: &Counters,
    ) -> Option<Io> {
        let acceptor = self.current().acceptor.clone();
        match tokio::time::timeout(timeout, acceptor.accept(socket)).await {
            Ok(Ok(stream)) => Some(Box::new(stream)),
            Ok(Err(e)) => {
                match rustls_error(&e) {
                    Some(error) => self.refuse(peer.ip(), Refusal::of(error), error, counters),
                    // Closed or reset before the handshake ended, with nothing TLS could judge.
                    None => {
                        tracing::debug!(%peer, error = %e, "connection closed during the TLS handshake")
                    }
                }
                None
            }
            Err(_) => {
                inc(&counters.handshake_failures);
                tracing::warn!(%peer, ?timeout, "closing connection: no TLS handshake within handshake_timeout");
                None
            }
        }
    }

    /// Runs the client side of the handshake on a connected socket; a server refused for its
    /// certificate is counted and logged like an inbound refusal.
    ///
    /// # Errors
    /// The handshake failed.
    pub(super) async fn connect(&self, socket: TcpStream, counters: &Counters) -> io::Result<Io> {
        let peer = socket.peer_addr().ok();
        let configs = self.current();
        match configs.connector.connect(configs.peer_name.clone(), socket).await {
            Ok(stream) => Ok(Box::new(stream)),
            Err(e) => {
                if let (Some(error), Some(peer)) = (rustls_error(&e), peer) {
                    self.refuse(peer.ip(), Refusal::of(error), error, counters);
                }
                Err(e)
            }
        }
    }

    /// Logs a fatal TLS alert received on an established outbound connection, at WARN once per
    /// peer: it is how a node learns that a peer refused its own certificate.
    pub(super) fn note_closed(&self, peer: &str, error: &io::Error) {
        if let Some(rustls::Error::AlertReceived(alert)) = rustls_error(error) {
            if !self.alerts.first(peer.to_owned()) {
                tracing::debug!(peer, alert = ?alert, "a peer closed the TLS connection with an alert");
                return;
            }
            tracing::warn!(
                peer,
                alert = ?alert,
                "a peer closed the TLS connection with an alert: it probably refuses this node's certificate"
            );
        }
    }

    fn refuse(&self, host: IpAddr, reason: Refusal, error: &rustls::Error, counters: &Counters) {
        inc(&counters.tls_refused[reason as usize]);
        if self.refusals.first((host, reason)) {
            tracing::warn!(peer = %host, reason = %reason.as_str(), error = %error, "refused a TLS peer");
        } else {
            tracing::debug!(peer = %host, reason = %reason.as_str(), error = %error, "refused a TLS peer");
        }
    }

    /// Reads the files every `reload_interval` until `stopping`; when their bytes changed and they
    /// load, new connections use them.
    pub(super) async fn reload(&self, stopping: &CancellationToken, counters: &Counters) {
        let mut interval = tokio::time::interval(self.settings.reload_interval);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval.tick().await;
        loop {
            tokio::select! {
                biased;
                () = stopping.cancelled() => return,
                _ = interval.tick() => {}
            }
            let settings = self.settings.clone();
            let loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner).clone();
            let reloaded = tokio::task::spawn_blocking(move || {
                let files = match settings.read() {
                    Ok(files) if files == loaded => return None,
                    Ok(files) => files,
                    Err(e) => return Some(Err(e.to_string())),
                };
                let material = settings.parse(&files).map_err(|e| e.to_string());
                let configs = material.and_then(|m| Configs::build(m).map_err(|e| e.to_string()));
                Some(configs.map(|c| (c, files)))
            })
            .await;
            match reloaded {
                Ok(None) | Err(_) => {}
                Ok(Some(Ok((configs, files)))) => {
                    *self.current.write().unwrap_or_else(PoisonError::into_inner) =
                        Arc::new(configs);
                    *self.loaded.lock().unwrap_or_else(PoisonError::into_inner) = files;
                    *self.last_reload_error.lock().unwrap_or_else(PoisonError::into_inner) = None;
                    inc(&counters.tls_reloads);
                    tracing::info!("cluster TLS files changed; new connections use them");
                }
                Ok(Some(Err(error))) => {
                    let mut last =
                        self.last_reload_error.lock().unwrap_or_else(PoisonError::into_inner);
                    if last.as_ref() != Some(&error) {
                        tracing::warn!(%error, "changed cluster TLS files do not load; still using the previous ones");
                        *last = Some(error);
                    }
                }
            }
        }
    }
}

impl Configs {
    fn build(material: TlsMaterial) -> Result<Self, rustls::Error> {
        let TlsMaterial { chain, key, roots, peer_name, .. } = material;
        let provider = crypto_provider();
        let roots = Arc::new(roots);
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| rustls::Error::General(e.to_string()))?;
        let verifier = Arc::new(NamedClientVerifier { inner: verifier, name: peer_name.clone() });
        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())?;
        // Nothing resumes a session: every connection is a full handshake with both certificates.
        server.send_tls13_tickets = 0;
        let mut client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)?;
        client.resumption = Resumption::disabled();
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            connector: TlsConnector::from(Arc::new(client)),
            peer_name,
        })
    }
}

/// The WebPKI client verifier plus the identity rule: the client's certificate must also be valid
/// for `peer_name`, as a server's is for the name a client dials.
#[derive(Debug)]
struct NamedClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    name: ServerName<'static>,
}

impl ClientCertVerifier for NamedClientVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self.inner.verify_client_cert(end_entity, intermediates, now)?;
        rustls::client::verify_server_name(&ParsedCertificate::try_from(end_entity)?, &self.name)?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_has_its_label_in_the_published_list() {
        let labels = Refusal::ALL.map(Refusal::as_str);
        assert_eq!(labels, super::super::TLS_REFUSAL_REASONS);
    }

    #[test]
    fn certificate_errors_map_to_the_reason_an_operator_acts_on() {
        use CertificateError as C;
        let of = |e| Refusal::of(&rustls::Error::InvalidCertificate(e));
        assert_eq!(of(C::Expired), Refusal::Expired);
        assert_eq!(of(C::NotValidYet), Refusal::Expired);
        assert_eq!(of(C::UnknownIssuer), Refusal::Untrusted);
        assert_eq!(of(C::BadSignature), Refusal::Untrusted);
        assert_eq!(of(C::NotValidForName), Refusal::NameMismatch);
        assert_eq!(Refusal::of(&rustls::Error::NoCertificatesPresented), Refusal::NoCertificate);
        let garbage = rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType);
        assert_eq!(Refusal::of(&garbage), Refusal::NotTls);
        assert_eq!(Refusal::of(&rustls::Error::HandshakeNotComplete), Refusal::Other);
    }
}
