//! DNS discovery against a real DNS server on 127.0.0.1 (hickory-server, see the testkit).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use convoke_discovery::dns::{DnsDiscovery, DnsSettings};
use convoke_discovery::testkit::{DnsRecords, TestDnsServer, UnresponsiveDnsServer};
use convoke_discovery::{DiscoveryError, Lookup, ResolvedTarget, ServiceDiscovery};

const TIMEOUT: Duration = Duration::from_secs(5);

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn records() -> DnsRecords {
    DnsRecords::new()
        .addresses("orders.svc.test", [ip("10.0.0.1"), ip("10.0.0.2"), ip("fd00::3")])
        .srv("_management._tcp.orders.svc.test", 8558, "pod-a.orders.svc.test")
        .srv("_management._tcp.orders.svc.test", 8559, "pod-b.orders.svc.test")
        .srv("_management._tcp.orders.svc.test", 8560, "pod-c.elsewhere.test")
        .address("pod-a.orders.svc.test", ip("10.0.1.1"))
        .address("pod-b.orders.svc.test", ip("10.0.1.2"))
        .address("pod-b.orders.svc.test", ip("fd00::1:2"))
        .address("pod-c.elsewhere.test", ip("10.0.2.1"))
}

async fn discovery_for(server: &TestDnsServer) -> DnsDiscovery {
    DnsDiscovery::new(DnsSettings::new(vec![server.addr()]).with_cache_ttl_cap(Duration::ZERO))
        .unwrap()
}

fn sorted(mut targets: Vec<ResolvedTarget>) -> Vec<ResolvedTarget> {
    targets.sort();
    targets
}

#[tokio::test]
async fn a_lookup_without_port_name_returns_one_target_per_a_and_aaaa_record_with_the_ip_as_host() {
    let (server, _) = TestDnsServer::start(records()).await.unwrap();
    let dns = discovery_for(&server).await;

    let resolved = dns.lookup(&Lookup::new("orders.svc.test"), TIMEOUT).await.unwrap();

    assert_eq!(resolved.service_name, "orders.svc.test");
    let expected = ["10.0.0.1", "10.0.0.2", "fd00::3"]
        .map(|text| ResolvedTarget::new(text, None, Some(ip(text))));
    assert_eq!(sorted(resolved.targets), sorted(expected.to_vec()));
}

#[tokio::test]
async fn a_lookup_with_port_name_and_protocol_uses_srv_records_and_their_addresses() {
    let (server, _) = TestDnsServer::start(records()).await.unwrap();
    let dns = discovery_for(&server).await;
    let lookup = Lookup::new("orders.svc.test").with_port_name("management").with_protocol("tcp");

    let resolved = dns.lookup(&lookup, TIMEOUT).await.unwrap();

    let expected = vec![
        ResolvedTarget::new("pod-a.orders.svc.test", Some(8558), Some(ip("10.0.1.1"))),
        ResolvedTarget::new("pod-b.orders.svc.test", Some(8559), Some(ip("10.0.1.2"))),
        ResolvedTarget::new("pod-b.orders.svc.test", Some(8559), Some(ip("fd00::1:2"))),
        ResolvedTarget::new("pod-c.elsewhere.test", Some(8560), Some(ip("10.0.2.1"))),
    ];
    assert_eq!(sorted(resolved.targets), expected);
}

#[tokio::test]
async fn an_srv_target_without_any_address_record_is_returned_without_an_address() {
    let records = DnsRecords::new()
        .srv("_management._tcp.orders.svc.test", 8558, "pod-a.orders.svc.test")
        .address("pod-a.orders.svc.test", ip("10.0.1.1"))
        .srv("_management._tcp.orders.svc.test", 8559, "gone.orders.svc.test");
    let (server, _) = TestDnsServer::start(records).await.unwrap();
    let dns = discovery_for(&server).await;
    let lookup = Lookup::new("orders.svc.test").with_port_name("management").with_protocol("tcp");

    let resolved = dns.lookup(&lookup, TIMEOUT).await.unwrap();

    let expected = vec![
        ResolvedTarget::new("gone.orders.svc.test", Some(8559), None),
        ResolvedTarget::new("pod-a.orders.svc.test", Some(8558), Some(ip("10.0.1.1"))),
    ];
    assert_eq!(sorted(resolved.targets), expected);
}

#[tokio::test]
async fn a_name_that_does_not_exist_is_not_found_and_the_error_names_the_lookup() {
    let (server, _) = TestDnsServer::start(records()).await.unwrap();
    let dns = discovery_for(&server).await;

    let error = dns.lookup(&Lookup::new("billing.svc.test"), TIMEOUT).await.unwrap_err();

    assert!(matches!(error, DiscoveryError::NotFound { .. }), "{error:?}");
    let text = error.to_string();
    assert!(text.contains("billing.svc.test") && text.contains("NXDOMAIN"), "{text}");

    let srv = Lookup::new("billing.svc.test").with_port_name("management").with_protocol("tcp");
    let error = dns.lookup(&srv, TIMEOUT).await.unwrap_err();
    assert!(error.to_string().contains("_management._tcp.billing.svc.test"), "{error}");
}

#[tokio::test]
async fn a_nameserver_that_never_answers_gives_a_timeout_after_the_lookup_timeout() {
    let (_silent, addr) = UnresponsiveDnsServer::start().await.unwrap();
    let dns = DnsDiscovery::new(DnsSettings::new(vec![addr])).unwrap();
    let timeout = Duration::from_millis(300);

    let started = tokio::time::Instant::now();
    let error = dns.lookup(&Lookup::new("orders.svc.test"), timeout).await.unwrap_err();

    assert!(
        matches!(&error, DiscoveryError::Timeout { lookup, timeout: t } if lookup == "orders.svc.test" && *t == timeout),
        "{error:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
}

#[tokio::test]
async fn records_changed_at_runtime_are_seen_by_the_next_lookup() {
    let five = |n: u8| (1..=n).map(|i| IpAddr::V4(Ipv4Addr::new(127, 0, 0, i)));
    let (server, _) =
        TestDnsServer::start(DnsRecords::new().addresses("convoke.test", five(2))).await.unwrap();
    let dns = DnsDiscovery::new(DnsSettings::new(vec![server.addr()])).unwrap();
    let lookup = Lookup::new("convoke.test");

    let before = dns.lookup(&lookup, TIMEOUT).await.unwrap();
    assert_eq!(before.targets.len(), 2);

    server.set_records(DnsRecords::new().addresses("convoke.test", five(5))).await;
    let after = dns.lookup(&lookup, TIMEOUT).await.unwrap();
    let mut ips: Vec<_> = after.targets.iter().filter_map(|t| t.address).collect();
    ips.sort();
    assert_eq!(ips, five(5).collect::<Vec<_>>());

    server
        .set_records(DnsRecords::new().address("other.test", IpAddr::V6(Ipv6Addr::LOCALHOST)))
        .await;
    let error = dns.lookup(&lookup, TIMEOUT).await.unwrap_err();
    assert!(matches!(error, DiscoveryError::NotFound { .. }), "{error:?}");
}
