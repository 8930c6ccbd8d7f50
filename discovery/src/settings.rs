//! The settings of each discovery method, as plain data with serde, so a node's settings file
//! reads them as they are: `[discovery.dns]` is [`DnsSettings`], `[discovery.kubernetes_api]` is
//! [`KubernetesSettings`]. Compiled without the `dns` and `kubernetes` features too, so a build
//! without a method still reads (and then refuses to use) its table.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use convoke_membership::config::text;
use serde::{Deserialize, Serialize};

use crate::DiscoveryError;

const NAMESERVER_EXPECTED: &str =
    "an IP address with an optional port, like \"10.96.0.10\" or \"127.0.0.1:5353\"";

/// Settings of DNS discovery (`DnsDiscovery`, feature `dns`), and the `[discovery.dns]` table of
/// a node's settings file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct DnsSettings {
    /// The nameservers to ask, each over UDP and TCP. Empty: the system's (`/etc/resolv.conf`),
    /// with its search domains and options.
    #[serde(with = "nameservers")]
    pub nameservers: Vec<SocketAddr>,
    /// The longest time an answer is reused. Answers with a shorter TTL are reused for their
    /// TTL; zero asks the nameserver on every lookup. Default 5 s.
    #[serde(with = "text::duration")]
    pub cache_ttl_cap: Duration,
}

impl Default for DnsSettings {
    fn default() -> Self {
        Self { nameservers: Vec::new(), cache_ttl_cap: Duration::from_secs(5) }
    }
}

impl DnsSettings {
    /// Settings that ask `nameservers` (empty: the system's).
    pub fn new(nameservers: Vec<SocketAddr>) -> Self {
        Self { nameservers, ..Self::default() }
    }

    /// Sets [`cache_ttl_cap`](Self::cache_ttl_cap).
    #[must_use]
    pub fn with_cache_ttl_cap(mut self, cap: Duration) -> Self {
        self.cache_ttl_cap = cap;
        self
    }

    /// Parses configured nameservers: `"ip:port"`, `"[ipv6]:port"`, or a bare IP (port 53).
    pub fn parse_nameservers<S: AsRef<str>>(
        nameservers: &[S],
    ) -> Result<Vec<SocketAddr>, DiscoveryError> {
        nameservers
            .iter()
            .map(|text| {
                let text = text.as_ref();
                nameserver(text).ok_or_else(|| {
                    DiscoveryError::Config(format!(
                        "discovery.dns.nameservers: {text:?} is not an IP address with an \
                         optional port (expected {NAMESERVER_EXPECTED})"
                    ))
                })
            })
            .collect()
    }
}

/// A nameserver: `"ip:port"`, `"[ipv6]:port"`, or a bare IP (port 53).
fn nameserver(text: &str) -> Option<SocketAddr> {
    let text = text.trim();
    text.parse::<SocketAddr>()
        .or_else(|_| text.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 53)))
        .ok()
}

/// `nameservers` written as a list of texts.
mod nameservers {
    use std::net::SocketAddr;

    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(list: &[SocketAddr], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(list.iter().map(ToString::to_string))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<SocketAddr>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|text| {
                super::nameserver(text).ok_or_else(|| {
                    D::Error::custom(format!(
                        "{text:?} is not valid: expected {}",
                        super::NAMESERVER_EXPECTED
                    ))
                })
            })
            .collect()
    }
}

/// The service-account directory Kubernetes mounts into every pod.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The environment variable naming the namespace (set it from the downward API).
pub const NAMESPACE_ENV: &str = "KUBERNETES_NAMESPACE";
/// The environment variables Kubernetes sets in every pod to locate the API server.
pub const SERVICE_HOST_ENV: &str = "KUBERNETES_SERVICE_HOST";
/// See [`SERVICE_HOST_ENV`].
pub const SERVICE_PORT_ENV: &str = "KUBERNETES_SERVICE_PORT";

/// Every environment variable this crate reads.
pub const ENV_VARS: [&str; 3] = [NAMESPACE_ENV, SERVICE_HOST_ENV, SERVICE_PORT_ENV];

/// How to reach the Kubernetes API server and in which namespace to work.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApiServerSettings {
    /// The API server's URL, e.g. `https://10.96.0.1:443`. `None`: in-cluster, from the
    /// environment variables `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT`.
    pub api_url: Option<String>,
    /// The CA certificate (PEM) to trust for the API server. Default
    /// `/var/run/secrets/kubernetes.io/serviceaccount/ca.crt`. `None`: the platform's roots.
    pub api_ca_path: Option<PathBuf>,
    /// The bearer token file. Default `/var/run/secrets/kubernetes.io/serviceaccount/token`.
    /// `None`: send no token (e.g. through `kubectl proxy`).
    pub api_token_path: Option<PathBuf>,
    /// How long a token read from the file is used before the file is read again. Default 60 s;
    /// zero reads it for every request.
    pub token_reload_interval: Duration,
    /// The namespace. `None`: the environment variable `KUBERNETES_NAMESPACE`, else the contents
    /// of [`namespace_path`](Self::namespace_path), else `default`.
    pub namespace: Option<String>,
    /// The file naming the pod's namespace. Default
    /// `/var/run/secrets/kubernetes.io/serviceaccount/namespace`.
    pub namespace_path: PathBuf,
}

impl Default for ApiServerSettings {
    fn default() -> Self {
        let dir = Path::new(SERVICE_ACCOUNT_DIR);
        Self {
            api_url: None,
            api_ca_path: Some(dir.join("ca.crt")),
            api_token_path: Some(dir.join("token")),
            token_reload_interval: Duration::from_secs(60),
            namespace: None,
            namespace_path: dir.join("namespace"),
        }
    }
}

impl ApiServerSettings {
    /// The in-cluster defaults (see the fields).
    pub fn in_cluster() -> Self {
        Self::default()
    }

    /// Sets [`api_url`](Self::api_url).
    #[must_use]
    pub fn with_api_url(mut self, url: impl Into<String>) -> Self {
        self.api_url = Some(url.into());
        self
    }

    /// Sets [`api_ca_path`](Self::api_ca_path).
    #[must_use]
    pub fn with_api_ca_path(mut self, path: Option<PathBuf>) -> Self {
        self.api_ca_path = path;
        self
    }

    /// Sets [`api_token_path`](Self::api_token_path).
    #[must_use]
    pub fn with_api_token_path(mut self, path: Option<PathBuf>) -> Self {
        self.api_token_path = path;
        self
    }

    /// Sets [`token_reload_interval`](Self::token_reload_interval).
    #[must_use]
    pub fn with_token_reload_interval(mut self, interval: Duration) -> Self {
        self.token_reload_interval = interval;
        self
    }

    /// Sets [`namespace`](Self::namespace).
    #[must_use]
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Sets [`namespace_path`](Self::namespace_path).
    #[must_use]
    pub fn with_namespace_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.namespace_path = path.into();
        self
    }

    /// The namespace to work in: the configured one, else `KUBERNETES_NAMESPACE`, else the
    /// namespace file (trimmed), else `default`.
    pub fn resolve_namespace(&self) -> String {
        resolve_namespace(
            self.namespace.as_deref(),
            std::env::var(NAMESPACE_ENV).ok().as_deref(),
            &self.namespace_path,
        )
    }
}

pub(crate) fn resolve_namespace(
    configured: Option<&str>,
    env: Option<&str>,
    path: &Path,
) -> String {
    let non_empty = |s: &str| {
        let s = s.trim();
        (!s.is_empty()).then(|| s.to_owned())
    };
    configured
        .and_then(non_empty)
        .or_else(|| env.and_then(non_empty))
        .or_else(|| std::fs::read_to_string(path).ok().as_deref().and_then(non_empty))
        .unwrap_or_else(|| "default".to_owned())
}

/// Settings of Kubernetes API discovery (`KubernetesApiDiscovery`, feature `kubernetes`), and
/// the `[discovery.kubernetes_api]` table of a node's settings file. The table is flat: the keys
/// of [`ApiServerSettings`] sit beside the others, and `""` stands for a setting's default (an
/// in-cluster API server, the service-account CA and token, the pod's namespace, no container
/// check); see `KubernetesTable`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "KubernetesTable", into = "KubernetesTable")]
#[non_exhaustive]
pub struct KubernetesSettings {
    /// The API server, credentials and namespace.
    pub api: ApiServerSettings,
    /// The label selector; `%s` is replaced by the lookup's service name. Default `app=%s`.
    pub pod_label_selector: String,
    /// The cluster domain used in pod DNS names. Default `cluster.local`.
    pub pod_domain: String,
    /// Whether hosts are pod IPs (default) or pod DNS names
    /// `<ip-with-dashes>.<namespace>.pod.<pod_domain>`.
    pub use_raw_ip: bool,
    /// When set, a pod counts only once this container of it is no longer `waiting`.
    pub container_name: Option<String>,
}

impl Default for KubernetesSettings {
    fn default() -> Self {
        Self {
            api: ApiServerSettings::default(),
            pod_label_selector: "app=%s".into(),
            pod_domain: "cluster.local".into(),
            use_raw_ip: true,
            container_name: None,
        }
    }
}

impl KubernetesSettings {
    /// Defaults with `api` as the API server settings.
    pub fn new(api: ApiServerSettings) -> Self {
        Self { api, ..Self::default() }
    }

    /// Sets [`pod_label_selector`](Self::pod_label_selector).
    #[must_use]
    pub fn with_pod_label_selector(mut self, selector: impl Into<String>) -> Self {
        self.pod_label_selector = selector.into();
        self
    }

    /// Sets [`pod_domain`](Self::pod_domain).
    #[must_use]
    pub fn with_pod_domain(mut self, domain: impl Into<String>) -> Self {
        self.pod_domain = domain.into();
        self
    }

    /// Sets [`use_raw_ip`](Self::use_raw_ip).
    #[must_use]
    pub fn with_use_raw_ip(mut self, use_raw_ip: bool) -> Self {
        self.use_raw_ip = use_raw_ip;
        self
    }

    /// Sets [`container_name`](Self::container_name).
    #[must_use]
    pub fn with_container_name(mut self, name: Option<String>) -> Self {
        self.container_name = name;
        self
    }
}

/// The file's shape of [`KubernetesSettings`]: one flat table, `""` for "the default".
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct KubernetesTable {
    api_url: String,
    api_ca_path: String,
    api_token_path: String,
    #[serde(with = "text::duration")]
    token_reload_interval: Duration,
    namespace: String,
    pod_label_selector: String,
    pod_domain: String,
    use_raw_ip: bool,
    container_name: String,
}

impl Default for KubernetesTable {
    fn default() -> Self {
        KubernetesSettings::default().into()
    }
}

fn text_of(value: Option<&String>) -> String {
    value.cloned().unwrap_or_default()
}

fn non_empty(text: String) -> Option<String> {
    (!text.is_empty()).then_some(text)
}

/// A file path that is `""` when it is the default one.
fn path_text(path: Option<&PathBuf>, default: Option<&PathBuf>) -> String {
    match path {
        Some(p) if Some(p) != default => p.display().to_string(),
        _ => String::new(),
    }
}

impl From<KubernetesSettings> for KubernetesTable {
    fn from(k: KubernetesSettings) -> Self {
        let defaults = ApiServerSettings::default();
        Self {
            api_url: text_of(k.api.api_url.as_ref()),
            api_ca_path: path_text(k.api.api_ca_path.as_ref(), defaults.api_ca_path.as_ref()),
            api_token_path: path_text(
                k.api.api_token_path.as_ref(),
                defaults.api_token_path.as_ref(),
            ),
            token_reload_interval: k.api.token_reload_interval,
            namespace: text_of(k.api.namespace.as_ref()),
            pod_label_selector: k.pod_label_selector,
            pod_domain: k.pod_domain,
            use_raw_ip: k.use_raw_ip,
            container_name: text_of(k.container_name.as_ref()),
        }
    }
}

impl From<KubernetesTable> for KubernetesSettings {
    fn from(t: KubernetesTable) -> Self {
        let defaults = ApiServerSettings::default();
        let path_or = |text: String, default: Option<PathBuf>| {
            if text.is_empty() { default } else { Some(PathBuf::from(text)) }
        };
        let api = ApiServerSettings {
            api_url: non_empty(t.api_url),
            api_ca_path: path_or(t.api_ca_path, defaults.api_ca_path),
            api_token_path: path_or(t.api_token_path, defaults.api_token_path),
            token_reload_interval: t.token_reload_interval,
            namespace: non_empty(t.namespace),
            namespace_path: defaults.namespace_path,
        };
        Self {
            api,
            pod_label_selector: t.pod_label_selector,
            pod_domain: t.pod_domain,
            use_raw_ip: t.use_raw_ip,
            container_name: non_empty(t.container_name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_kubernetes_table_is_the_in_cluster_default_and_prints_back_empty() {
        let k: KubernetesSettings = toml::from_str("").unwrap();
        assert_eq!(k, KubernetesSettings::default());
        let printed = toml::Table::try_from(&k).unwrap();
        assert_eq!(printed["api_ca_path"].as_str(), Some(""));
        assert_eq!(printed["api_url"].as_str(), Some(""));
        assert_eq!(printed["pod_label_selector"].as_str(), Some("app=%s"));
    }

    #[test]
    fn kubernetes_table_values_reach_the_api_server_settings_and_read_back_the_same() {
        let text = "api_url = \"https://10.0.0.1:6443\"\napi_ca_path = \"/etc/ca.pem\"\n\
                    namespace = \"orders\"\ncontainer_name = \"app\"\n\
                    token_reload_interval = \"5s\"\n";
        let k: KubernetesSettings = toml::from_str(text).unwrap();
        assert_eq!(k.api.api_url.as_deref(), Some("https://10.0.0.1:6443"));
        assert_eq!(k.api.api_ca_path, Some(PathBuf::from("/etc/ca.pem")));
        assert_eq!(k.api.api_token_path, ApiServerSettings::default().api_token_path);
        assert_eq!(k.api.namespace.as_deref(), Some("orders"));
        assert_eq!(k.api.token_reload_interval, Duration::from_secs(5));
        assert_eq!(k.container_name.as_deref(), Some("app"));
        let back: KubernetesSettings = toml::from_str(&toml::to_string(&k).unwrap()).unwrap();
        assert_eq!(back, k);
    }

    #[test]
    fn dns_nameservers_read_with_or_without_a_port_and_refuse_names() {
        let d: DnsSettings =
            toml::from_str("nameservers = [\"10.96.0.10\", \"[::1]:5353\"]").unwrap();
        assert_eq!(
            d.nameservers,
            ["10.96.0.10:53".parse().unwrap(), "[::1]:5353".parse().unwrap()]
        );
        let e = toml::from_str::<DnsSettings>("nameservers = [\"dns.example\"]").unwrap_err();
        assert!(
            e.to_string().contains("\"dns.example\" is not valid: expected an IP address"),
            "{e}"
        );
    }
}
