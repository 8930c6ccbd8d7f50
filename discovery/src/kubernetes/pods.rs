//! Which pods of a `PodList` are contact points, and on which ports.

use std::collections::BTreeSet;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Pod, PodSpec};

use crate::{DroppedTarget, ResolvedTarget};

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

/// The targets of `pods`, in list order, and the pods left out with the reason: pods being
/// deleted, not Running, without an IP, or whose `container_name` container is waiting are left
/// out; with a `port_name`, a pod gives one target per container port of that name, without one,
/// a single target with no port.
pub(crate) fn targets(
    pods: &[Pod],
    port_name: Option<&str>,
    container_name: Option<&str>,
    host_style: &HostStyle,
) -> (Vec<ResolvedTarget>, Vec<DroppedTarget>) {
    let mut targets = Vec::new();
    let mut dropped = Vec::new();
    let mut port_names_seen = BTreeSet::new();
    for pod in pods {
        let name = || format!("pod {}", pod.metadata.name.as_deref().unwrap_or("(unnamed)"));
        let (spec, ip_text) = match usable(pod, container_name) {
            Ok(usable) => usable,
            Err(why) => {
                dropped.push(DroppedTarget::new(name(), why));
                continue;
            }
        };
        let address = ip_text.parse::<IpAddr>().ok();
        let host = host_style.host(ip_text);
        let Some(port_name) = port_name else {
            targets.push(ResolvedTarget::new(host, None, address));
            continue;
        };
        let before = targets.len();
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
        if targets.len() == before {
            dropped.push(DroppedTarget::new(
                name(),
                format!("it has no container port named {port_name:?} (bootstrap.port_name)"),
            ));
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
    (targets, dropped)
}

/// The spec and IP of a pod that can be a target, or why it cannot: being deleted, not Running,
/// its `container_name` container waiting, or no IP yet.
fn usable<'p>(
    pod: &'p Pod,
    container_name: Option<&str>,
) -> Result<(&'p PodSpec, &'p str), String> {
    if pod.metadata.deletion_timestamp.is_some() {
        return Err("the pod is being deleted".into());
    }
    let (Some(spec), Some(status)) = (&pod.spec, &pod.status) else {
        return Err("the pod has no spec or status yet".into());
    };
    if status.phase.as_deref() != Some("Running") {
        let phase = status.phase.as_deref().unwrap_or("unknown");
        return Err(format!("the pod is {phase}, not Running"));
    }
    if let Some(container) = container_name {
        let started = status.container_statuses.iter().flatten().any(|s| {
            s.name == container && s.state.as_ref().is_none_or(|state| state.waiting.is_none())
        });
        if !started {
            return Err(format!(
                "its container {container:?} (discovery.kubernetes_api.container_name) is not started"
            ));
        }
    }
    match status.pod_ip.as_deref().filter(|ip| !ip.is_empty()) {
        Some(ip) => Ok((spec, ip)),
        None => Err("the pod has no IP yet".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, phase: &str, ip: Option<&str>, deleting: bool) -> Pod {
        let mut v = serde_json::json!({
            "metadata": { "name": name },
            "spec": { "containers": [{ "name": "app", "ports": [
                { "name": "management", "containerPort": 8558 },
                { "name": "remoting", "containerPort": 25520 },
            ]}]},
            "status": { "phase": phase },
        });
        if let Some(ip) = ip {
            v["status"]["podIP"] = ip.into();
        }
        if deleting {
            v["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn pods_left_out_are_named_with_the_reason() {
        let pods = [
            pod("a", "Running", Some("10.0.0.1"), false),
            pod("b", "Pending", None, false),
            pod("c", "Running", None, false),
            pod("d", "Running", Some("10.0.0.4"), true),
        ];
        let (targets, dropped) = targets(&pods, Some("management"), None, &HostStyle::RawIp);
        assert_eq!(targets, [ResolvedTarget::new("10.0.0.1", Some(8558), "10.0.0.1".parse().ok())]);
        assert_eq!(
            dropped,
            [
                DroppedTarget::new("pod b", "the pod is Pending, not Running"),
                DroppedTarget::new("pod c", "the pod has no IP yet"),
                DroppedTarget::new("pod d", "the pod is being deleted"),
            ]
        );
        let (targets, dropped) = targets_named(&pods[..1], "http");
        assert!(targets.is_empty());
        assert_eq!(dropped.len(), 1);
        assert!(dropped[0].reason.contains("no container port named \"http\""), "{dropped:?}");
    }

    fn targets_named(pods: &[Pod], port_name: &str) -> (Vec<ResolvedTarget>, Vec<DroppedTarget>) {
        targets(pods, Some(port_name), None, &HostStyle::RawIp)
    }
}
