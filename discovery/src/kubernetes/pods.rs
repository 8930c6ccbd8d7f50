//! Which pods of a `PodList` are contact points, and on which ports.

use std::collections::BTreeSet;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Pod;

use crate::ResolvedTarget;

/// How a target's host is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum HostStyle {
    /// The pod IP as text.
    RawIp,
    /// `<ip with dashes>.<namespace>.pod.<pod_domain>`.
    PodDns { namespace: String, pod_domain: String },
}

impl HostStyle {
    fn host(&self, ip: &str) -> String {
        match self {
            Self::RawIp => ip.to_owned(),
            Self::PodDns { namespace, pod_domain } => {
                format!("{}.{namespace}.pod.{pod_domain}", ip.replace('.', "-"))
            }
        }
    }
}

/// The targets of `pods`, in list order: pods being deleted, not Running, without an IP, or
/// whose `container_name` container is waiting are skipped; with a `port_name`, a pod gives one
/// target per container port of that name, without one, a single target with no port.
pub(crate) fn targets(
    pods: &[Pod],
    port_name: Option<&str>,
    container_name: Option<&str>,
    host_style: &HostStyle,
) -> Vec<ResolvedTarget> {
    let mut targets = Vec::new();
    let mut port_names_seen = BTreeSet::new();
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let (Some(spec), Some(status)) = (&pod.spec, &pod.status) else { continue };
        if status.phase.as_deref() != Some("Running") {
            continue;
        }
        if let Some(container) = container_name {
            let ready = status.container_statuses.iter().flatten().any(|s| {
                s.name == container && s.state.as_ref().is_none_or(|state| state.waiting.is_none())
            });
            if !ready {
                continue;
            }
        }
        let Some(ip_text) = status.pod_ip.as_deref().filter(|ip| !ip.is_empty()) else {
            continue;
        };
        let address = ip_text.parse::<IpAddr>().ok();
        let host = host_style.host(ip_text);
        let Some(port_name) = port_name else {
            targets.push(ResolvedTarget::new(host, None, address));
            continue;
        };
        for port in spec.containers.iter().flat_map(|c| c.ports.iter().flatten()) {
            let Some(name) = port.name.as_deref() else { continue };
            port_names_seen.insert(name.to_owned());
            if name != port_name {
                continue;
            }
            match u16::try_from(port.container_port) {
                Ok(number) => {
                    targets.push(ResolvedTarget::new(host.clone(), Some(number), address))
                }
                Err(_) => tracing::warn!(port = port.container_port, "container port out of range"),
            }
        }
    }
    if let (true, Some(port_name)) = (targets.is_empty(), port_name)
        && !port_names_seen.is_empty()
    {
        tracing::info!(
            port_name,
            ?port_names_seen,
            "no targets found from the pod list; is the correct port name configured?"
        );
    }
    targets
}
