//! Probing one contact point: `GET <scheme>://<host>:<port><base>/bootstrap/seed-nodes`.

use std::fmt;
use std::time::Duration;

use convoke_membership::{CurrentClusterState, MemberStatus};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::decider::MAX_SEED_NODES;

/// One seed node in a `seed-nodes` answer, in Akka Management's JSON shape (`nodeUid` is a JSON
/// number).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeedNode {
    /// Its cluster address.
    pub node: String,
    /// Its uid, signed as Akka's `Long` (a Pekko node's uid is often negative).
    pub node_uid: i64,
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

impl SeedNodes {
    /// What a node whose cluster state is `state` answers on `GET /bootstrap/seed-nodes`: its
    /// reachable Up, WeaklyUp or Joining members, the first five in address order; none when
    /// it is in no cluster. The management route serves it, and the simulator's probes get it.
    pub fn advertised(state: &CurrentClusterState) -> Self {
        let self_node = state.self_node.as_ref().map(|n| n.address.to_string()).unwrap_or_default();
        let in_cluster = state.self_node.as_ref().is_some_and(|me| {
            state.members.iter().any(|m| m.node() == me && m.status() != MemberStatus::Removed)
        });
        let mut seeds: Vec<SeedNode> = if in_cluster {
            state
                .members
                .iter()
                .filter(|m| {
                    matches!(
                        m.status(),
                        MemberStatus::Up | MemberStatus::WeaklyUp | MemberStatus::Joining
                    )
                })
                .filter(|m| !state.unreachable.iter().any(|(u, _)| u.node() == m.node()))
                .map(|m| SeedNode {
                    node: m.address().to_string(),
                    node_uid: m.node().uid.signed(),
                    status: m.status().name().to_owned(),
                    roles: m.roles().iter().cloned().collect(),
                })
                .collect()
        } else {
            Vec::new()
        };
        seeds.sort_by(|a, b| a.node.cmp(&b.node));
        seeds.truncate(MAX_SEED_NODES);
        Self { self_node, seed_nodes: seeds }
    }
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

/// Why an [`HttpProber`] cannot be built: mostly, what is wrong with the CA PEM
/// (`bootstrap.contact_point.ca_path`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HttpProberError {
    /// The CA file is not PEM: a section without its end line, a bad section start line, or a
    /// section body that is not base64.
    #[error("the CA file is not valid PEM: {reason}")]
    CaNotPem {
        /// What the PEM reader found wrong.
        reason: String,
    },
    /// The CA file is PEM but holds no `CERTIFICATE` section (empty, or only keys, say).
    #[error("the CA file holds no \"-----BEGIN CERTIFICATE-----\" section (found {})", found_list(.found))]
    CaWithoutCertificate {
        /// The PEM sections it holds instead, such as `"PRIVATE KEY"`; empty when none.
        found: Vec<&'static str>,
    },
    /// A `CERTIFICATE` section of the CA file cannot be used as a trusted root (its content is
    /// not a valid X.509 certificate).
    #[error("certificate {index} of the CA file cannot be trusted as a root: {reason}")]
    CaRejected {
        /// Which `CERTIFICATE` section, counting from 1.
        index: usize,
        /// Why the TLS library rejected it.
        reason: String,
    },
    /// The HTTP client cannot be built, for a reason other than the CA.
    #[error("the HTTP client cannot be built: {reason}")]
    Client {
        /// Details.
        reason: String,
    },
}

fn found_list(found: &[&'static str]) -> String {
    if found.is_empty() { "no PEM section at all".into() } else { found.join(", ") }
}

impl HttpProber {
    /// A prober with its own connection pool; `extra_root_pem` (the content of
    /// `bootstrap.contact_point.ca_path`) adds trusted CA certificates for HTTPS.
    ///
    /// # Errors
    /// The CA is not PEM, has no certificate, or has a certificate the TLS library rejects; or
    /// the client cannot be built.
    pub fn new(extra_root_pem: Option<&[u8]>) -> Result<Self, HttpProberError> {
        let builder = || reqwest::Client::builder().user_agent("convoke-bootstrap");
        let Some(pem) = extra_root_pem else {
            let client = builder()
                .build()
                .map_err(|e| HttpProberError::Client { reason: error_chain(&e) })?;
            return Ok(Self { client });
        };
        let certs = ca_certificates(pem)?;
        let with = |certs: &[reqwest::Certificate], builder: reqwest::ClientBuilder| {
            certs
                .iter()
                .cloned()
                .fold(builder, reqwest::ClientBuilder::add_root_certificate)
                .build()
        };
        match with(&certs, builder()) {
            Ok(client) => Ok(Self { client }),
            Err(e) => {
                // Name the first certificate the TLS library rejects on its own, if any.
                let alone = || builder().tls_built_in_root_certs(false);
                for (i, cert) in certs.iter().enumerate() {
                    if let Err(e) = with(std::slice::from_ref(cert), alone()) {
                        return Err(HttpProberError::CaRejected {
                            index: i + 1,
                            reason: error_chain(&e),
                        });
                    }
                }
                Err(HttpProberError::Client { reason: error_chain(&e) })
            }
        }
    }
}

/// The `CERTIFICATE` sections of a PEM text, as reqwest certificates.
fn ca_certificates(pem: &[u8]) -> Result<Vec<reqwest::Certificate>, HttpProberError> {
    use rustls_pemfile::{Error, Item};
    let mut certs = Vec::new();
    let mut found = Vec::new();
    let mut rest = pem;
    loop {
        let (item, remainder) = match rustls_pemfile::read_one_from_slice(rest) {
            Ok(Some(next)) => next,
            Ok(None) => break,
            Err(e) => {
                let reason = match e {
                    Error::MissingSectionEnd { end_marker } => {
                        let label = String::from_utf8_lossy(&end_marker);
                        format!("a {label} section has no \"-----END {label}-----\" line")
                    }
                    Error::IllegalSectionStart { line } => {
                        format!("bad section start line {:?}", String::from_utf8_lossy(&line))
                    }
                    Error::Base64Decode(detail) => {
                        format!("a section's body is not base64 ({detail})")
                    }
                };
                return Err(HttpProberError::CaNotPem { reason });
            }
        };
        rest = remainder;
        match item {
            Item::X509Certificate(der) => certs.push(der),
            Item::SubjectPublicKeyInfo(_) => found.push("PUBLIC KEY"),
            Item::Pkcs1Key(_) => found.push("RSA PRIVATE KEY"),
            Item::Pkcs8Key(_) => found.push("PRIVATE KEY"),
            Item::Sec1Key(_) => found.push("EC PRIVATE KEY"),
            Item::Crl(_) => found.push("X509 CRL"),
            Item::Csr(_) => found.push("CERTIFICATE REQUEST"),
            _ => found.push("an unsupported section"),
        }
    }
    if certs.is_empty() {
        return Err(HttpProberError::CaWithoutCertificate { found });
    }
    certs
        .iter()
        .enumerate()
        .map(|(i, der)| {
            reqwest::Certificate::from_der(der)
                .map_err(|e| HttpProberError::CaRejected { index: i + 1, reason: error_chain(&e) })
        })
        .collect()
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
                parse_seed_nodes(&body).map_err(|e| ProbeError::BadAnswer {
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

/// Parses the body of a 200 answer to `GET /bootstrap/seed-nodes`. Public only for the fuzz
/// target in `fuzz/` (`fuzz/fuzz_targets/seed_nodes.rs`); not part of the API.
///
/// # Errors
/// When the body is not seed-nodes JSON.
#[doc(hidden)]
pub fn parse_seed_nodes(body: &[u8]) -> Result<SeedNodes, serde_json::Error> {
    serde_json::from_slice(body)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ca() -> rcgen::CertifiedKey<rcgen::KeyPair> {
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap()
    }

    #[test]
    fn a_prober_without_or_with_a_valid_ca_is_built() {
        assert!(HttpProber::new(None).is_ok());
        let one = ca().cert.pem();
        assert!(HttpProber::new(Some(one.as_bytes())).is_ok());
        // A bundle, with a key and text around the sections.
        let key = ca().signing_key.serialize_pem();
        let bundle = format!("# our CAs\n{one}\n{}{key}", ca().cert.pem());
        assert!(HttpProber::new(Some(bundle.as_bytes())).is_ok());
    }

    #[test]
    fn a_ca_file_without_a_certificate_says_what_it_holds() {
        let e = HttpProber::new(Some(b"")).unwrap_err();
        assert_eq!(e, HttpProberError::CaWithoutCertificate { found: vec![] });
        assert!(e.to_string().contains("no PEM section at all"), "{e}");
        let e = HttpProber::new(Some(b"not a pem file")).unwrap_err();
        assert_eq!(e, HttpProberError::CaWithoutCertificate { found: vec![] });
        let key = ca().signing_key.serialize_pem();
        let e = HttpProber::new(Some(key.as_bytes())).unwrap_err();
        assert_eq!(e, HttpProberError::CaWithoutCertificate { found: vec!["PRIVATE KEY"] });
        assert!(e.to_string().contains("found PRIVATE KEY"), "{e}");
    }

    #[test]
    fn a_ca_file_that_is_not_pem_says_where_it_breaks() {
        let pem = ca().cert.pem();
        let truncated = &pem[..pem.len() / 2];
        let e = HttpProber::new(Some(truncated.as_bytes())).unwrap_err();
        assert!(
            matches!(&e, HttpProberError::CaNotPem { reason } if reason.contains("-----END CERTIFICATE-----")),
            "{e:?}"
        );
        let not_base64 = "-----BEGIN CERTIFICATE-----\n%%%%\n-----END CERTIFICATE-----\n";
        let e = HttpProber::new(Some(not_base64.as_bytes())).unwrap_err();
        assert!(
            matches!(&e, HttpProberError::CaNotPem { reason } if reason.contains("base64")),
            "{e:?}"
        );
        assert!(e.to_string().starts_with("the CA file is not valid PEM"), "{e}");
    }

    #[test]
    fn a_certificate_section_that_is_not_a_certificate_is_named() {
        let garbage = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let bundle = format!("{}{garbage}", ca().cert.pem());
        let e = HttpProber::new(Some(bundle.as_bytes())).unwrap_err();
        assert!(matches!(&e, HttpProberError::CaRejected { index: 2, .. }), "{e:?}");
        assert!(e.to_string().starts_with("certificate 2 of the CA file"), "{e}");
    }

    /// Serves one HTTP request on a port-0 listener with `body` as a 200 JSON answer.
    async fn answer_once(body: &'static str) -> std::net::SocketAddr {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = vec![0u8; 4096];
            let mut read = 0;
            while !request[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                read += stream.read(&mut request[read..]).await.unwrap();
            }
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(response.as_bytes()).await.unwrap();
        });
        addr
    }

    #[tokio::test]
    async fn a_pekko_contact_point_with_a_negative_uid_is_an_answer() {
        let addr = answer_once(
            r#"{"seedNodes":[{"node":"pekko://System@127.0.0.1:7355","nodeUid":-2440990093160003086,"roles":["dc-default"],"status":"Up"}],"selfNode":"pekko://System@127.0.0.1:7355"}"#,
        )
        .await;
        let prober = HttpProber::new(None).unwrap();
        let url = format!("http://{addr}/bootstrap/seed-nodes");
        let answer = prober.probe(&url, Duration::from_secs(5)).await.unwrap();
        assert_eq!(answer.self_node, "pekko://System@127.0.0.1:7355");
        assert_eq!(answer.seed_nodes[0].node_uid, -2_440_990_093_160_003_086);
    }
}
