//! A real DNS server (hickory-server) on 127.0.0.1, answering from records the test controls.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hickory_server::Server;
use hickory_server::net::runtime::TokioRuntimeProvider;
use hickory_server::proto::rr::rdata::{SOA, SRV};
use hickory_server::proto::rr::{LowerName, Name, RData, Record, RecordSet, RrKey};
use hickory_server::store::in_memory::InMemoryZoneHandler;
use hickory_server::zone_handler::{AxfrPolicy, Catalog, ZoneType};
use tokio::net::{TcpListener, UdpSocket};

/// Records served by a [`TestDnsServer`], all with TTL 0 so that no resolver caches them.
///
/// Names are absolute (a trailing dot is added when missing). The server is authoritative for
/// the whole namespace: any other name is NXDOMAIN.
#[derive(Clone, Debug, Default)]
pub struct DnsRecords {
    records: Vec<Record>,
}

impl DnsRecords {
    /// No records.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an A or AAAA record `name -> ip`.
    #[must_use]
    pub fn address(mut self, name: &str, ip: IpAddr) -> Self {
        self.records.push(Record::from_rdata(absolute(name), 0, RData::from(ip)));
        self
    }

    /// Adds one A/AAAA record per IP for `name`.
    #[must_use]
    pub fn addresses(self, name: &str, ips: impl IntoIterator<Item = IpAddr>) -> Self {
        ips.into_iter().fold(self, |records, ip| records.address(name, ip))
    }

    /// Adds an SRV record `name -> target:port` (priority and weight 0). The server puts the
    /// target's A/AAAA records, when it has them, in the additional section of the answer.
    #[must_use]
    pub fn srv(mut self, name: &str, port: u16, target: &str) -> Self {
        let srv = SRV::new(0, 0, port, absolute(target));
        self.records.push(Record::from_rdata(absolute(name), 0, RData::SRV(srv)));
        self
    }

    fn into_record_sets(self, serial: u32) -> BTreeMap<RrKey, RecordSet> {
        let mut sets: BTreeMap<RrKey, RecordSet> = BTreeMap::new();
        for record in std::iter::once(soa_record(serial)).chain(self.records) {
            let key = RrKey::new(LowerName::new(&record.name), record.record_type());
            let set = sets.entry(key).or_insert_with(|| {
                RecordSet::new(record.name.clone(), record.record_type(), serial)
            });
            set.insert(record, serial);
        }
        sets
    }
}

fn absolute(name: &str) -> Name {
    let name = if name.ends_with('.') { name.to_owned() } else { format!("{name}.") };
    Name::from_utf8(&name).unwrap_or_else(|e| panic!("bad DNS name {name:?}: {e}"))
}

fn soa_record(serial: u32) -> Record {
    // A zero minimum TTL: NXDOMAIN answers are not cached either.
    let soa = SOA::new(absolute("ns.test"), absolute("admin.test"), serial, 60, 60, 60, 0);
    Record::from_rdata(Name::root(), 0, RData::SOA(soa))
}

/// A DNS server on `127.0.0.1:<ephemeral>` (UDP and TCP) serving [`DnsRecords`]; it stops when
/// dropped.
///
/// Records can be replaced while it runs ([`set_records`](Self::set_records)); the next query
/// sees the new set. To give different nodes different views (each sees a subset of the
/// others), start one server per node and point each node's `discovery.dns.nameservers` at its
/// own server.
pub struct TestDnsServer {
    zone: Arc<InMemoryZoneHandler<TokioRuntimeProvider>>,
    addr: SocketAddr,
    serial: std::sync::atomic::AtomicU32,
    _server: Server<Catalog>,
}

impl std::fmt::Debug for TestDnsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestDnsServer").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl TestDnsServer {
    /// Starts a server answering from `records` on one ephemeral port, UDP and TCP. Returns it
    /// and its address (what to give as a nameserver). Must be called inside a tokio runtime.
    pub async fn start(records: DnsRecords) -> std::io::Result<(Self, SocketAddr)> {
        let (udp, tcp) = bind_udp_and_tcp().await?;
        let addr = udp.local_addr()?;
        let zone = InMemoryZoneHandler::<TokioRuntimeProvider>::new(
            Name::root(),
            records.into_record_sets(1),
            ZoneType::Primary,
            AxfrPolicy::Deny,
        )
        .map_err(std::io::Error::other)?;
        let zone = Arc::new(zone);
        let mut catalog = Catalog::new();
        catalog.upsert(LowerName::new(&Name::root()), vec![zone.clone()]);
        let mut server = Server::new(catalog);
        server.register_socket(udp);
        server.register_listener(tcp, Duration::from_secs(5), 64);
        let serial = std::sync::atomic::AtomicU32::new(1);
        Ok((Self { zone, addr, serial, _server: server }, addr))
    }

    /// The address it listens on (UDP and TCP).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Replaces every record; queries answered after this returns see only `records`.
    pub async fn set_records(&self, records: DnsRecords) {
        let serial = self.serial.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let sets = records.into_record_sets(serial);
        *self.zone.records_mut().await =
            sets.into_iter().map(|(key, set)| (key, Arc::new(set))).collect();
    }
}

/// A nameserver that never answers: a UDP socket that reads nothing back and a TCP listener
/// that accepts no connection, on the same loopback port. Lookups against it time out.
#[derive(Debug)]
pub struct UnresponsiveDnsServer {
    _udp: UdpSocket,
    _tcp: TcpListener,
}

impl UnresponsiveDnsServer {
    /// Binds the sockets; returns them and the address to give as a nameserver.
    pub async fn start() -> std::io::Result<(Self, SocketAddr)> {
        let (udp, tcp) = bind_udp_and_tcp().await?;
        let addr = udp.local_addr()?;
        Ok((Self { _udp: udp, _tcp: tcp }, addr))
    }
}

/// A UDP socket and a TCP listener on the same ephemeral loopback port (retrying when the port
/// the UDP socket got is taken for TCP).
async fn bind_udp_and_tcp() -> std::io::Result<(UdpSocket, TcpListener)> {
    let mut last_error = None;
    for _ in 0..16 {
        let udp = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let port = udp.local_addr()?.port();
        match TcpListener::bind((Ipv4Addr::LOCALHOST, port)).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(error) => last_error = Some(error),
        }
    }
    Err(last_error.unwrap_or_else(|| std::io::Error::other("no free port")))
}
