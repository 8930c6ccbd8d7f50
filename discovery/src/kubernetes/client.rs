//! The Kubernetes API client shared by pod discovery and the lease: where the API server is, the
//! CA to trust, the bearer token (re-read from its file periodically, because bound service
//! account tokens expire) and the namespace.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::header::AUTHORIZATION;
use http::{HeaderValue, Request};
use kube::client::{Body, ClientBuilder};
use tokio::time::Instant;
use tower::util::MapRequestLayer;

use crate::DiscoveryError;

pub use crate::settings::{
    ApiServerSettings, ENV_VARS, NAMESPACE_ENV, SERVICE_ACCOUNT_DIR, SERVICE_HOST_ENV,
    SERVICE_PORT_ENV,
};

impl ApiServerSettings {
    /// The API server URL: the configured one, else the in-cluster environment.
    pub fn resolve_api_url(&self) -> Result<http::Uri, DiscoveryError> {
        let url = match &self.api_url {
            Some(url) => url.clone(),
            None => in_cluster_url(
                std::env::var(SERVICE_HOST_ENV).ok(),
                std::env::var(SERVICE_PORT_ENV).ok(),
            )?,
        };
        url.parse().map_err(|e| {
            DiscoveryError::Config(format!("Kubernetes API URL {url:?} is not a URL: {e}"))
        })
    }
}

fn in_cluster_url(host: Option<String>, port: Option<String>) -> Result<String, DiscoveryError> {
    let non_empty = |v: Option<String>| v.filter(|v| !v.is_empty());
    let (Some(host), Some(port)) = (non_empty(host), non_empty(port)) else {
        return Err(DiscoveryError::Config(
            "cannot find the Kubernetes API server: set discovery.kubernetes_api.api_url, or run \
             in a pod (expecting the environment variables KUBERNETES_SERVICE_HOST and \
             KUBERNETES_SERVICE_PORT)"
                .into(),
        ));
    };
    let host = if host.contains(':') { format!("[{host}]") } else { host };
    Ok(format!("https://{host}:{port}"))
}

/// Builds a kube [`Client`](kube::Client) for `settings`: trusting the CA file, sending the
/// token file's contents as bearer token and re-reading that file every
/// `token_reload_interval`. Must be called inside a tokio runtime.
///
/// Fails when the URL is missing or invalid, or the CA or token file cannot be read.
pub fn api_client(settings: &ApiServerSettings) -> Result<kube::Client, DiscoveryError> {
    let mut config = kube::Config::new(settings.resolve_api_url()?);
    config.default_namespace = settings.resolve_namespace();
    if let Some(path) = &settings.api_ca_path {
        let certs = read_ca(path)?;
        config.root_cert = Some(certs);
        // kube re-reads this file (about once a minute) to follow a CA rotation.
        config.root_cert_file = Some(path.clone());
    }
    let builder = ClientBuilder::try_from(config).map_err(|e| {
        DiscoveryError::Config(format!("cannot build the Kubernetes API client: {e}"))
    })?;
    let client = match &settings.api_token_path {
        Some(path) => {
            let token = Arc::new(TokenFile::open(path.clone(), settings.token_reload_interval)?);
            // kube reloads a `token_file` only once a minute, on its own clock; this layer lets
            // the interval be configured (and tested).
            let add_bearer = MapRequestLayer::new(move |mut request: Request<Body>| {
                request.headers_mut().insert(AUTHORIZATION, token.header());
                request
            });
            builder.with_layer(&add_bearer).build()
        }
        None => builder.build(),
    };
    Ok(client)
}

fn read_ca(path: &Path) -> Result<Vec<Vec<u8>>, DiscoveryError> {
    let pem = std::fs::read(path).map_err(|e| {
        DiscoveryError::Config(format!(
            "cannot read the Kubernetes CA file {}: {e}",
            path.display()
        ))
    })?;
    let certs = rustls_pemfile::certs(&mut pem.as_slice())
        .map(|cert| cert.map(|der| der.to_vec()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            DiscoveryError::Config(format!("the CA file {} is not PEM: {e}", path.display()))
        })?;
    if certs.is_empty() {
        return Err(DiscoveryError::Config(format!(
            "the CA file {} holds no certificate",
            path.display()
        )));
    }
    Ok(certs)
}

/// A bearer token read from a file and read again once it is `reload_interval` old. A failed
/// re-read keeps the last token (the file may be replaced non-atomically) and logs a warning.
pub(crate) struct TokenFile {
    path: PathBuf,
    reload_interval: Duration,
    current: Mutex<(HeaderValue, Instant)>,
}

impl fmt::Debug for TokenFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenFile")
            .field("path", &self.path)
            .field("reload_interval", &self.reload_interval)
            .finish_non_exhaustive()
    }
}

impl TokenFile {
    pub(crate) fn open(path: PathBuf, reload_interval: Duration) -> Result<Self, DiscoveryError> {
        let value = read_token(&path)
            .map_err(|e| DiscoveryError::Config(format!("Kubernetes API token: {e}")))?;
        Ok(Self { path, reload_interval, current: Mutex::new((value, Instant::now())) })
    }

    /// The `Authorization` header value to send now.
    pub(crate) fn header(&self) -> HeaderValue {
        let mut current = self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if current.1.elapsed() >= self.reload_interval {
            match read_token(&self.path) {
                Ok(value) => *current = (value, Instant::now()),
                Err(error) => tracing::warn!(%error, "keeping the previous Kubernetes API token"),
            }
        }
        current.0.clone()
    }
}

fn read_token(path: &Path) -> Result<HeaderValue, String> {
    let token = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?;
    let mut value = HeaderValue::from_str(&format!("Bearer {}", token.trim()))
        .map_err(|_| format!("the token file {} holds invalid characters", path.display()))?;
    value.set_sensitive(true);
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::resolve_namespace;

    #[test]
    fn the_namespace_comes_from_config_then_the_environment_then_the_file_then_default() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("namespace");
        std::fs::write(&file, "from-file\n").unwrap();
        let missing = dir.path().join("missing");

        assert_eq!(resolve_namespace(Some("configured"), Some("from-env"), &file), "configured");
        assert_eq!(resolve_namespace(None, Some("from-env"), &file), "from-env");
        assert_eq!(resolve_namespace(Some(""), Some(" "), &file), "from-file");
        assert_eq!(resolve_namespace(None, None, &missing), "default");
    }

    #[test]
    fn the_in_cluster_url_brackets_an_ipv6_host_and_missing_variables_are_named() {
        let url = |host: &str, port: &str| in_cluster_url(Some(host.into()), Some(port.into()));
        assert_eq!(url("10.96.0.1", "443").unwrap(), "https://10.96.0.1:443");
        assert_eq!(url("fd00::1", "443").unwrap(), "https://[fd00::1]:443");
        let error = in_cluster_url(Some("10.96.0.1".into()), None).unwrap_err().to_string();
        assert!(error.contains("KUBERNETES_SERVICE_PORT"), "{error}");

        let settings = ApiServerSettings::default().with_api_url("https://127.0.0.1:6443");
        assert_eq!(settings.resolve_api_url().unwrap().to_string(), "https://127.0.0.1:6443/");
    }

    #[tokio::test(start_paused = true)]
    async fn a_rewritten_token_file_is_used_once_the_reload_interval_has_passed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "first\n").unwrap();
        let token = TokenFile::open(path.clone(), Duration::from_secs(60)).unwrap();
        assert_eq!(token.header(), "Bearer first");

        std::fs::write(&path, "second").unwrap();
        tokio::time::advance(Duration::from_secs(59)).await;
        assert_eq!(token.header(), "Bearer first");

        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(token.header(), "Bearer second");

        std::fs::remove_file(&path).unwrap();
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(token.header(), "Bearer second", "a failed re-read keeps the token");
    }
}
