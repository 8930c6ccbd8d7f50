//! DNS discovery through hickory-resolver: A/AAAA records of the service name, or SRV records of
//! `_<port>._<proto>.<name>` when the lookup names both a port and a protocol.
//!
//! Answers are cached by the resolver for at most their TTL, and never longer than
//! [`DnsSettings::cache_ttl_cap`], so that a discovery loop polling every second sees a
//! Kubernetes headless service grow within a few seconds.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use futures::future::BoxFuture;
use hickory_resolver::config::{
    ConnectionConfig, LookupIpStrategy, NameServerConfig, ResolverConfig, ResolverOpts,
};
use hickory_resolver::net::NetError;
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::{Name, RData, RecordType};
use hickory_resolver::{Resolver, TokioResolver};

use crate::{DiscoveryError, Lookup, Resolved, ResolvedTarget, ServiceDiscovery, with_timeout};

pub use crate::settings::DnsSettings;

/// Discovery by DNS.
#[derive(Clone)]
pub struct DnsDiscovery {
    resolver: TokioResolver,
    settings: DnsSettings,
}

impl fmt::Debug for DnsDiscovery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DnsDiscovery").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl DnsDiscovery {
    /// A resolver asking the configured nameservers, or the system's when there are none.
    /// Fails when the system configuration cannot be read.
    pub fn new(settings: DnsSettings) -> Result<Self, DiscoveryError> {
        let provider = TokioRuntimeProvider::default();
        let mut builder = if settings.nameservers.is_empty() {
            Resolver::builder(provider).map_err(|e| {
                DiscoveryError::Config(format!(
                    "cannot read the system DNS configuration (/etc/resolv.conf): {e}; \
                     set discovery.dns.nameservers"
                ))
            })?
        } else {
            let servers = settings.nameservers.iter().map(|addr| {
                let connection = |mut c: ConnectionConfig| {
                    c.port = addr.port();
                    c
                };
                NameServerConfig::new(
                    addr.ip(),
                    true,
                    vec![connection(ConnectionConfig::udp()), connection(ConnectionConfig::tcp())],
                )
            });
            Resolver::builder_with_config(
                ResolverConfig::from_name_servers(servers.collect()),
                provider,
            )
            .with_options(ResolverOpts::default())
        };
        let options = builder.options_mut();
        options.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        options.positive_max_ttl = Some(settings.cache_ttl_cap);
        options.negative_max_ttl = Some(settings.cache_ttl_cap);
        // A truncated UDP answer (a large SRV set) is retried over TCP.
        options.try_tcp_on_error = true;
        let resolver = builder
            .build()
            .map_err(|e| DiscoveryError::Config(format!("cannot build the DNS resolver: {e}")))?;
        Ok(Self { resolver, settings })
    }

    /// The settings this resolver was built with.
    pub fn settings(&self) -> &DnsSettings {
        &self.settings
    }

    async fn lookup_addresses(
        &self,
        lookup: &Lookup,
        timeout: Duration,
    ) -> Result<Resolved, DiscoveryError> {
        let targets = match self.resolver.lookup_ip(lookup.service_name.as_str()).await {
            Ok(ips) => {
                ips.iter().map(|ip| ResolvedTarget::new(ip.to_string(), None, Some(ip))).collect()
            }
            Err(error) => empty_or_error(lookup, timeout, error)?,
        };
        Ok(Resolved::new(lookup.service_name.clone(), targets))
    }

    async fn lookup_srv(
        &self,
        lookup: &Lookup,
        port: &str,
        proto: &str,
        timeout: Duration,
    ) -> Result<Resolved, DiscoveryError> {
        let query = format!("_{port}._{proto}.{}", lookup.service_name);
        let answer = match self.resolver.lookup(query.as_str(), RecordType::SRV).await {
            Ok(answer) => answer,
            Err(error) => {
                let targets = empty_or_error(lookup, timeout, error)?;
                return Ok(Resolved::new(lookup.service_name.clone(), targets));
            }
        };
        let mut targets = Vec::new();
        for srv in srv_targets(&answer) {
            let addresses = if srv.addresses.is_empty() {
                match self.resolver.lookup_ip(srv.name.clone()).await {
                    Ok(ips) => ips.iter().collect(),
                    Err(error) => {
                        tracing::debug!(%lookup, target = %srv.host, %error, "SRV target has no address");
                        Vec::new()
                    }
                }
            } else {
                srv.addresses
            };
            if addresses.is_empty() {
                targets.push(ResolvedTarget::new(srv.host.clone(), Some(srv.port), None));
            }
            for ip in addresses {
                targets.push(ResolvedTarget::new(srv.host.clone(), Some(srv.port), Some(ip)));
            }
        }
        Ok(Resolved::new(lookup.service_name.clone(), targets))
    }
}

/// One SRV record of an answer, with the addresses the additional section gives its target.
#[derive(Debug, PartialEq, Eq)]
struct SrvTarget {
    name: Name,
    host: String,
    port: u16,
    addresses: Vec<IpAddr>,
}

fn srv_targets(answer: &hickory_resolver::lookup::Lookup) -> Vec<SrvTarget> {
    let mut additional: BTreeMap<&Name, Vec<IpAddr>> = BTreeMap::new();
    for record in answer.additionals() {
        if let Some(ip) = record.data.ip_addr() {
            additional.entry(&record.name).or_default().push(ip);
        }
    }
    answer
        .answers()
        .iter()
        .filter_map(|record| match &record.data {
            RData::SRV(srv) => Some(SrvTarget {
                host: srv.target.to_utf8().trim_end_matches('.').to_owned(),
                port: srv.port,
                addresses: additional.get(&srv.target).cloned().unwrap_or_default(),
                name: srv.target.clone(),
            }),
            _ => None,
        })
        .collect()
}

/// An existing name without records of the asked type is an empty answer; NXDOMAIN, a timeout
/// and anything else are errors.
fn empty_or_error(
    lookup: &Lookup,
    timeout: Duration,
    error: NetError,
) -> Result<Vec<ResolvedTarget>, DiscoveryError> {
    if error.is_nx_domain() {
        return Err(DiscoveryError::NotFound {
            lookup: lookup.to_string(),
            reason: format!("the DNS name does not exist (NXDOMAIN): {error}"),
        });
    }
    if error.is_no_records_found() {
        return Ok(Vec::new());
    }
    if matches!(error, NetError::Timeout) {
        return Err(DiscoveryError::Timeout { lookup: lookup.to_string(), timeout });
    }
    Err(DiscoveryError::Failed { lookup: lookup.to_string(), reason: error.to_string() })
}

impl ServiceDiscovery for DnsDiscovery {
    fn lookup<'a>(
        &'a self,
        lookup: &'a Lookup,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Resolved, DiscoveryError>> {
        Box::pin(with_timeout(lookup, timeout, async move {
            match (&lookup.port_name, &lookup.protocol) {
                (Some(port), Some(proto)) => self.lookup_srv(lookup, port, proto, timeout).await,
                _ => self.lookup_addresses(lookup, timeout).await,
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use hickory_resolver::proto::op::Query;
    use hickory_resolver::proto::rr::Record;
    use hickory_resolver::proto::rr::rdata::SRV;

    use super::*;

    #[test]
    fn srv_targets_take_their_addresses_from_the_additional_section_matching_the_target_name() {
        let name = |text: &str| Name::from_utf8(text).unwrap();
        let srv = |port, target: &str| {
            Record::from_rdata(
                name("_m._tcp.svc.test."),
                5,
                RData::SRV(SRV::new(0, 0, port, name(target))),
            )
        };
        let address = |host: &str, ip: &str| {
            Record::from_rdata(name(host), 5, RData::from(ip.parse::<IpAddr>().unwrap()))
        };
        let query = Query::query(name("_m._tcp.svc.test."), RecordType::SRV);
        let mut answer = hickory_resolver::lookup::Lookup::new_with_max_ttl(
            query,
            [srv(1, "a.svc.test."), srv(2, "B.svc.test."), srv(3, "c.svc.test.")],
        );
        answer.extend_additionals([
            address("a.svc.test.", "10.0.0.1"),
            address("b.svc.test.", "10.0.0.2"),
            address("b.svc.test.", "fd00::2"),
            address("unrelated.test.", "10.9.9.9"),
        ]);

        let targets: Vec<_> =
            srv_targets(&answer).into_iter().map(|t| (t.host, t.port, t.addresses)).collect();

        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        assert_eq!(
            targets,
            vec![
                ("a.svc.test".to_owned(), 1, vec![ip("10.0.0.1")]),
                ("b.svc.test".to_owned(), 2, vec![ip("10.0.0.2"), ip("fd00::2")]),
                ("c.svc.test".to_owned(), 3, vec![]),
            ]
        );
    }

    #[test]
    fn nameservers_parse_with_and_without_a_port_and_a_bad_one_names_the_key() {
        let parsed =
            DnsSettings::parse_nameservers(&["127.0.0.1:5353", "10.96.0.10", "[::1]:53"]).unwrap();
        assert_eq!(
            parsed,
            vec![
                "127.0.0.1:5353".parse().unwrap(),
                "10.96.0.10:53".parse().unwrap(),
                "[::1]:53".parse().unwrap()
            ]
        );
        let error = DnsSettings::parse_nameservers(&["dns.example"]).unwrap_err().to_string();
        assert!(error.contains("discovery.dns.nameservers") && error.contains("dns.example"));
    }
}
