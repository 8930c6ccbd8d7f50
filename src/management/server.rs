//! The HTTP server loop: a connection cap, a header-read timeout (so slowloris clients are cut
//! off), optional TLS, and shutdown on a signal. Takes an already bound listener.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use crate::settings::crypto_provider;

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("cannot load management TLS material from {path}: {why}")]
pub struct TlsError {
    /// The file.
    pub path: String,
    /// What was wrong.
    pub why: String,
}

/// Builds a TLS acceptor from PEM files.
///
/// # Errors
/// When a file cannot be read or holds no certificate or key.
pub fn tls_acceptor(cert_path: &str, key_path: &str) -> Result<TlsAcceptor, TlsError> {
    let err = |path: &str, why: String| TlsError { path: path.to_owned(), why };
    let certs_pem = std::fs::read(cert_path).map_err(|e| err(cert_path, e.to_string()))?;
    let certs: Vec<_> = rustls_pemfile::certs(&mut certs_pem.as_slice())
        .collect::<Result<_, _>>()
        .map_err(|e| err(cert_path, e.to_string()))?;
    if certs.is_empty() {
        return Err(err(cert_path, "no PEM certificate found".into()));
    }
    let key_pem = std::fs::read(key_path).map_err(|e| err(key_path, e.to_string()))?;
    let key = rustls_pemfile::private_key(&mut key_pem.as_slice())
        .map_err(|e| err(key_path, e.to_string()))?
        .ok_or_else(|| err(key_path, "no PEM private key found".into()))?;
    let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(crypto_provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| err(cert_path, e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| err(key_path, e.to_string()))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Serves `router` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    max_connections: usize,
    header_read_timeout: Duration,
    tls: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send,
) {
    let slots = Arc::new(Semaphore::new(max_connections));
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "management server: accept failed");
                    continue;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            tracing::warn!(%peer, max_connections, "management server: connection limit reached; closing a new connection");
            drop(stream);
            continue;
        };
        let service = TowerToHyperService::new(router.clone());
        let tls = tls.clone();
        connections.spawn(async move {
            let _permit = permit;
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new()).header_read_timeout(header_read_timeout);
            let result = match tls {
                None => http.serve_connection(TokioIo::new(stream), service).await,
                Some(acceptor) => match tokio::time::timeout(header_read_timeout, acceptor.accept(stream)).await {
                    Ok(Ok(tls_stream)) => http.serve_connection(TokioIo::new(tls_stream), service).await,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "management server: TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "management server: TLS handshake timed out");
                        return;
                    }
                },
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "management server: connection ended with an error");
            }
        });
    }
    connections.shutdown().await;
}
