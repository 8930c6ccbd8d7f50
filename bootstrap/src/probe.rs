//! Probing one contact point: `GET <scheme>://<host>:<port><base>/bootstrap/seed-nodes`.

use std::fmt;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

/// One seed node in a `seed-nodes` answer (spec §4.3; `nodeUid` is a number there).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeedNode {
    /// Its cluster address.
    pub node: String,
    /// Its uid.
    pub node_uid: u64,
    /// Its status.
    pub status: String,
    /// Its roles.
    pub roles: Vec<String>,
}

/// The body of `GET /bootstrap/seed-nodes`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeedNodes {
    /// The answering node's cluster address.
    pub self_node: String,
    /// Up to 5 reachable Up, WeaklyUp or Joining members; empty when it is in no cluster.
    pub seed_nodes: Vec<SeedNode>,
}

/// Why a probe failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProbeError {
    /// No answer within the probe timeout.
    #[error("probing timeout of [{url}] after {timeout:?}")]
    Timeout {
        /// The probed URL.
        url: String,
        /// The timeout.
        timeout: Duration,
    },
    /// The request failed (connection refused, TLS, ...).
    #[error("probing [{url}] failed: {reason}")]
    Request {
        /// The probed URL.
        url: String,
        /// Details.
        reason: String,
    },
    /// The answer was not a 200 with seed-nodes JSON.
    #[error("probing [{url}]: {reason}")]
    BadAnswer {
        /// The probed URL.
        url: String,
        /// Details.
        reason: String,
    },
}

/// Asks one contact point for its seed nodes.
pub trait Prober: Send + Sync + fmt::Debug + 'static {
    /// Probes `url`, giving up after `timeout`.
    fn probe<'a>(
        &'a self,
        url: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<SeedNodes, ProbeError>>;
}

/// The real prober: reqwest, no retries, a timeout per request.
#[derive(Clone, Debug)]
pub struct HttpProber {
    client: reqwest::Client,
}

impl HttpProber {
    /// A prober with its own connection pool; `extra_root_pem` adds a trusted CA for HTTPS.
    ///
    /// # Errors
    /// When the CA is not valid PEM or the client cannot be built.
    pub fn new(extra_root_pem: Option<&[u8]>) -> Result<Self, String> {
        let mut builder = reqwest::Client::builder().user_agent("convoke-bootstrap");
        if let Some(pem) = extra_root_pem {
            let cert = reqwest::Certificate::from_pem(pem).map_err(|e| e.to_string())?;
            builder = builder.add_root_certificate(cert);
        }
        Ok(Self { client: builder.build().map_err(|e| e.to_string())? })
    }
}

impl Prober for HttpProber {
    fn probe<'a>(
        &'a self,
        url: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<SeedNodes, ProbeError>> {
        Box::pin(async move {
            let attempt = async {
                let response = self.client.get(url).send().await.map_err(|e| {
                    ProbeError::Request { url: url.to_owned(), reason: error_chain(&e) }
                })?;
                let status = response.status();
                let body = response.bytes().await.map_err(|e| ProbeError::Request {
                    url: url.to_owned(),
                    reason: error_chain(&e),
                })?;
                if status != reqwest::StatusCode::OK {
                    let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
                    return Err(ProbeError::BadAnswer {
                        url: url.to_owned(),
                        reason: format!(
                            "expected response '200 OK' but found {status}. Body: '{text}'"
                        ),
                    });
                }
                serde_json::from_slice::<SeedNodes>(&body).map_err(|e| ProbeError::BadAnswer {
                    url: url.to_owned(),
                    reason: format!("the answer is not seed-nodes JSON: {e}"),
                })
            };
            match tokio::time::timeout(timeout, attempt).await {
                Ok(result) => result,
                Err(_) => Err(ProbeError::Timeout { url: url.to_owned(), timeout }),
            }
        })
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
