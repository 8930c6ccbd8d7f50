//! Bootstrap wiring: the discovery method named by `[discovery]`, the coordinator for this node
//! with the `[bootstrap]` settings, and the task that runs it and performs its join through the
//! driver's [`Control`].

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use convoke_bootstrap::{
    BootstrapStatus, Coordinator, Decision, HttpProber, LocalNode, SelfContactPoint,
};
use convoke_discovery::{AggregateDiscovery, ConfigDiscovery, ResolvedTarget, ServiceDiscovery};
use convoke_membership::Address;
use tokio::sync::watch;

use crate::control::Control;
use crate::settings::{METHODS, Settings, SettingsError};

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
    let d = &settings.discovery.dns;
    let discovery = convoke_discovery::dns::DnsDiscovery::new(d.clone()).map_err(|e| {
        SettingsError::new(
            "discovery.dns.nameservers",
            format!("{:?}", d.nameservers),
            e.to_string(),
        )
    })?;
    Ok(Arc::new(discovery))
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
    let k = settings.discovery.kubernetes_api.clone();
    convoke_discovery::kubernetes::KubernetesApiDiscovery::new(k)
        .map(|d| Arc::new(d) as Arc<dyn ServiceDiscovery>)
        .map_err(|e| {
            SettingsError::new(
                "discovery.kubernetes_api",
                "(the API server settings)",
                e.to_string(),
            )
        })
}

#[cfg(not(feature = "kubernetes"))]
fn kubernetes(_: &Settings) -> Result<Arc<dyn ServiceDiscovery>, SettingsError> {
    Err(SettingsError::new(
        "discovery.method",
        "\"kubernetes-api\"",
        "a method this build includes (build with the `kubernetes` feature)",
    ))
}

/// Starts bootstrap when it is used — no seed nodes, `bootstrap.enabled`, and a management server
/// at `management` for the contact-point probes — and returns its status, which says why when it
/// is not used. `control` is the driver's: bootstrap waits on its snapshots and joins through it.
///
/// # Errors
/// A bootstrap or discovery setting that cannot be used, named by its key.
pub(crate) fn start(
    settings: &Settings,
    management: Option<SocketAddr>,
    self_address: &Address,
    control: &Control,
) -> Result<watch::Receiver<BootstrapStatus>, SettingsError> {
    let not_used = |reason: &str| {
        tracing::info!(reason, "bootstrap not used");
        Ok(watch::channel(BootstrapStatus::not_used(reason)).1)
    };
    if !settings.cluster.seed_nodes.is_empty() {
        return not_used("cluster.seed_nodes is set; the node joins them");
    }
    if !settings.bootstrap.enabled {
        return not_used("bootstrap.enabled = false; join through the API or Node::join");
    }
    let Some(management) = management else {
        return not_used(
            "management.enabled = false; bootstrap needs the management server for contact-point probes",
        );
    };
    let local = LocalNode {
        https: settings.management.tls.is_some(),
        base_path: settings.management.route_prefix(),
        ..LocalNode::new(
            &settings.cluster.core.system_name,
            SelfContactPoint::new(settings.management.hostname.clone(), management.port()),
            (self_address.host().to_owned(), self_address.port()),
        )
    };
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
    let (coordinator, status) =
        Coordinator::new(&settings.bootstrap, local, discovery, Arc::new(prober));
    tokio::spawn(run(coordinator, control.clone(), self_address.clone()));
    Ok(status)
}

/// Runs the coordinator until it decides or this node joins otherwise, then performs the join.
async fn run(coordinator: Coordinator, control: Control, me: Address) {
    let joined_otherwise = {
        let mut watch = control.watch();
        let me = me.clone();
        async move {
            // An error means the node stopped: bootstrap stops too.
            let _ = watch.wait_for(|s| s.state.members.iter().any(|m| *m.address() == me)).await;
        }
    };
    let Some(decision) = coordinator.run_until(joined_otherwise).await else {
        return;
    };
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
                control.join(me).await
            } else {
                control.join_seed_nodes(seeds).await
            }
        }
        Decision::JoinSelf | Decision::KeepProbing => control.join(me).await,
    };
    if let Err(e) = result {
        tracing::error!(error = %e, "bootstrap: the join failed");
    }
}
