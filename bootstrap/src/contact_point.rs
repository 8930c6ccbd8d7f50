//! Contact points: what discovery found, in the order the decider uses to pick the lowest, and
//! how this node recognises itself among them.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use convoke_discovery::ResolvedTarget;
use serde::Serialize;

/// A discovered contact point: a host, with its port and IP when discovery knows them.
///
/// Ordered by IP (absent first, then by the address bytes compared unsigned, then length), then
/// host, then port (absent first): the order that decides which node forms a new cluster.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct ContactPoint {
    /// The host name or IP text.
    pub host: String,
    /// The port, when known; the fallback port is probed otherwise.
    pub port: Option<u16>,
    /// The IP address, when known.
    pub address: Option<IpAddr>,
}

impl ContactPoint {
    /// A contact point from its parts.
    pub fn new(host: impl Into<String>, port: Option<u16>, address: Option<IpAddr>) -> Self {
        Self { host: host.into(), port, address }
    }

    /// The port to probe: its own, or `fallback_port`.
    pub fn probe_port(&self, fallback_port: u16) -> u16 {
        self.port.unwrap_or(fallback_port)
    }

    /// `host:port` with IPv6 hosts in brackets, suitable for a URL authority.
    pub fn authority(&self, fallback_port: u16) -> String {
        authority(&self.host, self.probe_port(fallback_port))
    }
}

impl From<ResolvedTarget> for ContactPoint {
    fn from(t: ResolvedTarget) -> Self {
        Self { host: t.host, port: t.port, address: t.address }
    }
}

impl fmt::Display for ContactPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(port) => f.write_str(&authority(&self.host, port)),
            None => f.write_str(&self.host),
        }
    }
}

impl Ord for ContactPoint {
    fn cmp(&self, other: &Self) -> Ordering {
        fn bytes(ip: &Option<IpAddr>) -> Option<Vec<u8>> {
            ip.map(|ip| match ip {
                IpAddr::V4(v4) => v4.octets().to_vec(),
                IpAddr::V6(v6) => v6.octets().to_vec(),
            })
        }
        bytes(&self.address)
            .cmp(&bytes(&other.address))
            .then_with(|| self.host.cmp(&other.host))
            .then_with(|| self.port.cmp(&other.port))
    }
}

impl PartialOrd for ContactPoint {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// `host:port`, bracketing an IPv6 host.
pub fn authority(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// This node's own contact point: the management server's advertised host and port.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SelfContactPoint {
    /// The advertised management host (a name, an IPv4 or an IPv6 address, brackets allowed).
    pub host: String,
    /// The management port.
    pub port: u16,
}

impl SelfContactPoint {
    /// A self contact point.
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        Self { host: host.into(), port }
    }

    /// Whether `target` is this node: same host (textually, without IPv6 brackets, or as the
    /// same IP), and the same port when the target has one.
    pub fn matches(&self, target: &ContactPoint) -> bool {
        let host = self.host.trim_start_matches('[').trim_end_matches(']');
        let self_ip: Option<IpAddr> = host.parse().ok();
        let target_host_ip: Option<IpAddr> =
            target.host.trim_start_matches('[').trim_end_matches(']').parse().ok();
        let host_matches = self.host == target.host
            || host == target.host
            || (self_ip.is_some() && (self_ip == target.address || self_ip == target_host_ip));
        host_matches && target.port.is_none_or(|p| p == self.port)
    }
}

impl fmt::Display for SelfContactPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&authority(self.host.trim_start_matches('[').trim_end_matches(']'), self.port))
    }
}

/// Picks the targets to probe (as Akka's `selectHosts` does): when the lookup had no port name and
/// filtering is on, a host with several targets keeps only those on `fallback_port` if any of
/// its targets has a port, so that a DNS answer listing every port of a host (management,
/// remoting, http) does not make the node probe its remoting port. Returns the selected targets
/// and the others, each with the reason it was left out.
pub fn select_hosts(
    targets: Vec<ContactPoint>,
    has_port_name: bool,
    filter_on_fallback_port: bool,
    fallback_port: u16,
) -> (BTreeSet<ContactPoint>, Vec<(ContactPoint, String)>) {
    if has_port_name || !filter_on_fallback_port {
        return (targets.into_iter().collect(), Vec::new());
    }
    let mut by_host: BTreeMap<String, Vec<ContactPoint>> = BTreeMap::new();
    for t in targets {
        by_host.entry(t.host.clone()).or_default().push(t);
    }
    let mut selected = BTreeSet::new();
    let mut dropped = Vec::new();
    for (host, group) in by_host {
        if group.len() > 1 && group.iter().any(|t| t.port.is_some()) {
            let n = group.len();
            let (keep, drop): (Vec<_>, Vec<_>) =
                group.into_iter().partition(|t| t.port == Some(fallback_port));
            let why = format!(
                "host {host} has {n} targets and the lookup names no port (bootstrap.port_name), so \
                 only its targets on the fallback port {fallback_port} are probed \
                 (bootstrap.contact_point.filter_on_fallback_port)"
            );
            dropped.extend(drop.into_iter().map(|t| (t, why.clone())));
            selected.extend(keep);
        } else {
            selected.extend(group);
        }
    }
    (selected, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cp(host: &str, port: Option<u16>, ip: Option<&str>) -> ContactPoint {
        ContactPoint::new(host, port, ip.map(|i| i.parse().unwrap()))
    }

    #[test]
    fn targets_without_ip_sort_by_host_then_port() {
        let mut v = vec![
            cp("b", Some(1), None),
            cp("a", Some(2), None),
            cp("a", Some(1), None),
            cp("a", None, None),
        ];
        v.sort();
        assert_eq!(
            v,
            vec![
                cp("a", None, None),
                cp("a", Some(1), None),
                cp("a", Some(2), None),
                cp("b", Some(1), None)
            ]
        );
    }

    #[test]
    fn targets_sort_by_ip_even_when_the_names_disagree_and_ips_compare_unsigned() {
        let mut v = [
            cp("a", Some(1), Some("10.0.0.200")),
            cp("z", Some(1), Some("10.0.0.1")),
            cp("m", Some(1), None),
        ];
        v.sort();
        assert_eq!(v.iter().map(|t| t.host.as_str()).collect::<Vec<_>>(), ["m", "z", "a"]);
    }

    #[test]
    fn self_matches_by_host_name_by_ip_and_by_ipv6_with_or_without_brackets() {
        let by_name = SelfContactPoint::new("node-1.svc", 8558);
        assert!(by_name.matches(&cp("node-1.svc", Some(8558), Some("10.0.0.1"))));
        assert!(by_name.matches(&cp("node-1.svc", None, None)));
        assert!(!by_name.matches(&cp("node-1.svc", Some(8559), None)));
        assert!(!by_name.matches(&cp("node-2.svc", Some(8558), None)));

        let by_ip = SelfContactPoint::new("10.0.0.1", 8558);
        assert!(by_ip.matches(&cp("10-0-0-1.ns.pod.cluster.local", Some(8558), Some("10.0.0.1"))));

        let v6 = SelfContactPoint::new("[240b:c0e0:202:5e2b:b424:2:0:450]", 8558);
        let expanded = "240b:c0e0:0202:5e2b:b424:0002:0000:0450";
        assert!(v6.matches(&cp("240b:c0e0:202:5e2b:b424:2:0:450", Some(8558), None)));
        assert!(v6.matches(&cp("pod-a", Some(8558), Some(expanded))));
        assert!(v6.matches(&cp(expanded, Some(8558), None)));
        assert!(!v6.matches(&cp("pod-a", Some(8558), Some("240b:c0e0::451"))));
        assert_eq!(v6.to_string(), "[240b:c0e0:202:5e2b:b424:2:0:450]:8558");
    }

    #[test]
    fn with_a_port_name_or_filtering_off_every_target_is_kept() {
        let targets = vec![cp("h", Some(8558), None), cp("h", Some(25520), None)];
        for (has_port_name, filter) in [(true, true), (false, false)] {
            let (selected, dropped) = select_hosts(targets.clone(), has_port_name, filter, 8558);
            assert_eq!(selected.len(), 2);
            assert!(dropped.is_empty());
        }
    }

    #[test]
    fn without_a_port_name_multi_port_hosts_keep_only_the_fallback_port() {
        let targets = vec![
            cp("a", Some(8558), None),
            cp("a", Some(25520), None),
            cp("a", Some(8080), None),
            cp("b", Some(9999), None),
            cp("c", None, None),
            cp("c", None, Some("10.0.0.3")),
        ];
        let (selected, dropped) = select_hosts(targets, false, true, 8558);
        let expected: BTreeSet<ContactPoint> = [
            cp("a", Some(8558), None),
            cp("b", Some(9999), None),
            cp("c", None, None),
            cp("c", None, Some("10.0.0.3")),
        ]
        .into_iter()
        .collect();
        assert_eq!(selected, expected);
        let dropped: Vec<&ContactPoint> = dropped.iter().map(|(t, _)| t).collect();
        assert_eq!(dropped, [&cp("a", Some(25520), None), &cp("a", Some(8080), None)]);
    }

    #[test]
    fn five_targets_on_one_host_say_why_four_are_not_probed() {
        let targets =
            (0..5).map(|i| cp("10.0.0.1", Some(8558 + i), Some("10.0.0.1"))).collect::<Vec<_>>();
        let (selected, dropped) = select_hosts(targets, false, true, 8558);
        assert_eq!(selected.len(), 1);
        assert_eq!(dropped.len(), 4);
        for (_, why) in &dropped {
            assert!(why.contains("host 10.0.0.1 has 5 targets"), "{why}");
            assert!(why.contains("fallback port 8558"), "{why}");
            assert!(why.contains("filter_on_fallback_port"), "{why}");
        }
    }
}
