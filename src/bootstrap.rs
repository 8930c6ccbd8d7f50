//! Bootstrap wiring: the discovery method named by `[discovery]`, the coordinator's settings from
//! `[bootstrap]`, and the task that runs the coordinator and performs its join.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use convoke_bootstrap::{BootstrapConfig, Coordinator, Decision, HttpProber, SelfContactPoint};
use convoke_discovery::{AggregateDiscovery, ConfigDiscovery, ResolvedTarget, ServiceDiscovery};
use convoke_membership::Address;

use crate::node::Node;
use crate::settings::{Settings, SettingsError};

/// The single discovery methods, which `aggregate` combines.
pub const METHODS: &[&str] = &["config", "dns", "kubernetes-api"];

/// The discovery method `[discovery] method` names. Must run inside a tokio runtime (the
/// Kubernetes client needs one).
///
/// # Errors
/// An unknown method, a method this build leaves out, or a bad method setting.
pub fn discovery(settings: &Settings) -> Result<Arc<dyn ServiceDiscovery>, SettingsError> {
    let method = settings.discovery.method.as_str();
    // `Settings::validate` has checked the method names.
    if method == "aggregate" {
        let methods = settings
            .discovery
            .aggregate
            .discovery_methods
            .iter()
            .map(|n| Ok((n.clone(), single(settings, n, "discovery.aggregate.discovery_methods")?)))
            .collect::<Result<Vec<_>, SettingsError>>()?;
        return Ok(Arc::new(AggregateDiscovery::new(methods)));
    }
    single(settings, method, "discovery.method")
}

fn single(
    settings: &Settings,
    method: &str,
    key: &str,
) -> Result<Arc<dyn ServiceDiscovery>, SettingsError> {
    match method {
        "config" => {
            let services = settings
                .discovery
                .config
                .services
                .iter()
                .map(|(name, service)| {
                    let targets = service
                        .endpoints
                        .iter()
                        .map(|e| {
                            let ip = e.host.trim_start_matches('[').trim_end_matches(']');
                            ResolvedTarget::new(e.host.clone(), e.port, ip.parse::<IpAddr>().ok())
                        })
                        .collect();
                    (name.clone(), targets)
                })
                .collect::<BTreeMap<_, _>>();
            Ok(Arc::new(ConfigDiscovery::new(services)))
        }
        "dns" => dns(settings),
        "kubernetes-api" => kubernetes(settings),
        other => Err(SettingsError::new(
            key,
            format!("{other:?}"),
            format!("one of {}", METHODS.join(", ")),
        )),
    }
}

#[cfg(feature = "dns")]
fn dns(settings: &Settings) -> Result<Arc<dyn ServiceDiscovery>, SettingsError> {
    use convoke_discovery::dns::{DnsDiscovery, DnsSettings};
    let d = &settings.discovery.dns;
    let bad = |e: convoke_discovery::DiscoveryError| {
        SettingsError::new(
            "discovery.dns.nameservers",
            format!("{:?}", d.nameservers),
            e.to_string(),
        )
    };
    let names: Vec<&str> = d.nameservers.iter().map(String::as_str).collect();
    let nameservers = DnsSettings::parse_nameservers(&names).map_err(bad)?;
    let dns_settings = DnsSettings::new(nameservers).with_cache_ttl_cap(d.cache_ttl_cap.0);
    Ok(Arc::new(DnsDiscovery::new(dns_settings).map_err(bad)?))
}

#[cfg(not(feature = "dns"))]
fn dns(_: &Settings) -> Result<Arc<dyn ServiceDiscovery>, SettingsError> {
    Err(SettingsError::new(
        "discovery.method",
        "\"dns\"",
        "a method this build includes (build with the `dns` feature)",
    ))
}

#[cfg(feature = "kubernetes")]
fn kubernetes(settings: &Settings) -> Result<Arc<dyn ServiceDiscovery>, SettingsError> {
    use convoke_discovery::kubernetes::{KubernetesApiDiscovery, KubernetesSettings};
    let k = &settings.discovery.kubernetes_api;
    let mut discovery_settings = KubernetesSettings::new(kubernetes_api(settings))
        .with_pod_label_selector(k.pod_label_selector.clone())
        .with_pod_domain(k.pod_domain.clone())
        .with_use_raw_ip(k.use_raw_ip);
    if !k.container_name.is_empty() {
        discovery_settings = discovery_settings.with_container_name(Some(k.container_name.clone()));
    }
    KubernetesApiDiscovery::new(discovery_settings)
        .map(|d| Arc::new(d) as Arc<dyn ServiceDiscovery>)
        .map_err(|e| {
            SettingsError::new(
                "discovery.kubernetes_api",
                "(the API server settings)",
                e.to_string(),
            )
        })
}

/// The API server location of `[discovery.kubernetes_api]`, with in-cluster defaults.
#[cfg(feature = "kubernetes")]
pub fn kubernetes_api(settings: &Settings) -> convoke_discovery::kubernetes::ApiServerSettings {
    let k = &settings.discovery.kubernetes_api;
    let mut api = convoke_discovery::kubernetes::ApiServerSettings::default()
        .with_token_reload_interval(k.token_reload_interval.0);
    if !k.api_url.is_empty() {
        api = api.with_api_url(k.api_url.clone());
    }
    if !k.api_ca_path.is_empty() {
        api = api.with_api_ca_path(Some(k.api_ca_path.clone().into()));
    }
    if !k.api_token_path.is_empty() {
        api = api.with_api_token_path(Some(k.api_token_path.clone().into()));
    }
    if !k.namespace.is_empty() {
        api = api.with_namespace(k.namespace.clone());
    }
    api
}

#[cfg(not(feature = "kubernetes"))]
fn kubernetes(_: &Settings) -> Result<Arc<dyn ServiceDiscovery>, SettingsError> {
    Err(SettingsError::new(
        "discovery.method",
        "\"kubernetes-api\"",
        "a method this build includes (build with the `kubernetes` feature)",
    ))
}

/// The coordinator's settings for a node whose management server listens on `management`.
///
/// # Errors
/// Inconsistent timeouts or backoff settings, named by key.
pub fn config(
    settings: &Settings,
    management: SocketAddr,
    self_address: &Address,
) -> Result<BootstrapConfig, SettingsError> {
    let b = &settings.bootstrap;
    let cp = &b.contact_point;
    let self_contact =
        SelfContactPoint::new(settings.management.hostname.clone(), management.port());
    let mut c = BootstrapConfig::new(
        b.effective_service_name(&settings.cluster.system_name),
        self_contact,
        (self_address.host().to_owned(), self_address.port()),
    );
    c.port_name = Some(b.port_name.clone()).filter(|p| !p.is_empty());
    c.protocol = Some(b.protocol.clone()).filter(|p| !p.is_empty());
    c.required_contact_point_nr = b.required_contact_point_nr;
    c.stable_margin = b.stable_margin.0;
    c.contact_with_all_contact_points = b.contact_with_all_contact_points;
    c.new_cluster_enabled = b.new_cluster_enabled;
    c.discovery_interval = b.discovery_interval.0;
    c.discovery_backoff_max = b.discovery_backoff_max.0;
    c.discovery_backoff_random_factor = b.discovery_backoff_random_factor;
    c.resolve_timeout = b.resolve_timeout.0;
    c.fallback_port = cp.fallback_port.0.unwrap_or(management.port());
    c.filter_on_fallback_port = cp.filter_on_fallback_port;
    c.probing_failure_timeout = cp.probing_failure_timeout.0;
    c.probe_interval = cp.probe_interval.0;
    c.probe_interval_jitter = cp.probe_interval_jitter;
    c.probe_timeout = cp.probe_timeout.0;
    c.scheme = if settings.management.tls.is_some() { "https" } else { "http" }.into();
    c.base_path = settings.management.base_path.trim_end_matches('/').to_owned();
    c.validate().map_err(|e| SettingsError::new(e.key, e.value, e.expected))?;
    Ok(c)
}

/// Starts bootstrap for `node` when it is used, and records why when it is not.
pub(crate) fn start(node: &Node, settings: &Settings) -> Result<(), crate::node::StartError> {
    use convoke_bootstrap::BootstrapStatus;
    let not_used = |reason: &str| {
        tracing::info!(reason, "bootstrap not used");
        node.set_bootstrap_status(tokio::sync::watch::channel(BootstrapStatus::not_used(reason)).1);
        Ok(())
    };
    if !settings.cluster.seed_nodes.is_empty() {
        return not_used("cluster.seed_nodes is set; the node joins them");
    }
    if !settings.bootstrap.enabled {
        return not_used("bootstrap.enabled = false; join through the API or Node::join");
    }
    let Some(management) = node.management_addr() else {
        return not_used(
            "management.enabled = false; bootstrap needs the management server for contact-point probes",
        );
    };
    let config = config(settings, management, node.self_address())?;
    let discovery = discovery(settings)?;
    let ca = &settings.bootstrap.contact_point.ca_path;
    let pem = if ca.is_empty() {
        None
    } else {
        Some(std::fs::read(ca).map_err(|e| {
            SettingsError::new(
                "bootstrap.contact_point.ca_path",
                format!("{ca:?}"),
                format!("a readable PEM file ({e})"),
            )
        })?)
    };
    let prober = HttpProber::new(pem.as_deref()).map_err(|e| {
        SettingsError::new(
            "bootstrap.contact_point.ca_path",
            format!("{ca:?}"),
            format!("a PEM CA certificate ({e})"),
        )
    })?;
    let (coordinator, status) = Coordinator::new(config, discovery, Arc::new(prober));
    node.set_bootstrap_status(status);
    let node = node.clone();
    tokio::spawn(async move {
        let joined_otherwise = {
            let node = node.clone();
            async move {
                let me = node.self_address().clone();
                let mut watch = node.watch();
                // An error means the node stopped: bootstrap stops too.
                let _ =
                    watch.wait_for(|s| s.state.members.iter().any(|m| *m.address() == me)).await;
            }
        };
        let Some(decision) = coordinator.run_until(joined_otherwise).await else {
            return;
        };
        let me = node.self_address().clone();
        let result = match decision {
            Decision::JoinOthers(seeds) => {
                let seeds: Vec<Address> = seeds
                    .iter()
                    .filter_map(|s| match s.parse::<Address>() {
                        Ok(a) => Some(a),
                        Err(e) => {
                            tracing::warn!(seed = %s, error = %e, "bootstrap: ignoring a seed node that is not an address");
                            None
                        }
                    })
                    .filter(|a| *a != me)
                    .collect();
                if seeds.is_empty() {
                    node.join(me).await
                } else {
                    node.join_seed_nodes(seeds).await
                }
            }
            Decision::JoinSelf | Decision::KeepProbing => node.join(me).await,
        };
        if let Err(e) = result {
            tracing::error!(error = %e, "bootstrap: the join failed");
        }
    });
    Ok(())
}
