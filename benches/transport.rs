//! Transport figures on loopback, plaintext and with mutual TLS in the same run: heartbeat round
//! trip (p50, p99), how many frames per second one node receives, and the memory one connection
//! costs. `cargo bench --bench transport` prints each figure as the median of 5 runs, and the TLS
//! figure as a ratio to the plaintext one.

#[path = "../tests/support/mod.rs"]
mod support;

use support::certs;

use std::time::{Duration, Instant};

use convoke::membership::vclock::VectorClock;
use convoke::membership::{Address, Message, Uid, UniqueAddress};
use convoke::settings::{ClusterTlsSettings, TransportSettings};
use convoke::transport::{Inbound, Transport, TransportConfig};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

const RUNS: usize = 5;

/// Plaintext (`None`) or mutual TLS with these settings.
type Tls = Option<ClusterTlsSettings>;

async fn start(
    uid: u64,
    queue: usize,
    tls: &Tls,
) -> (Transport, mpsc::Receiver<Inbound>, UniqueAddress) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let address = Address::new("bench", "127.0.0.1", port).unwrap();
    let node = UniqueAddress::new(address, Uid::new(uid).unwrap());
    let settings = TransportSettings { outbound_queue_size: queue, ..TransportSettings::default() };
    let config = TransportConfig {
        system_name: "bench".into(),
        settings,
        tls: tls.clone().unwrap_or_default(),
    };
    let (t, rx) = Transport::start(listener, node.clone(), config).unwrap();
    (t, rx, node)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// Sequential heartbeat round trips between two transports; returns (p50, p99).
async fn heartbeat_round_trip(samples: u64, tls: &Tls) -> (Duration, Duration) {
    let (a, mut a_rx, a_node) = start(1, 1024, tls).await;
    let (b, mut b_rx, b_node) = start(2, 1024, tls).await;
    let peer = b_node.address.clone();
    let responder = tokio::spawn(async move {
        while let Some(inb) = b_rx.recv().await {
            if let Message::Heartbeat { sequence_nr, .. } = inb.message {
                let rsp = Message::HeartbeatRsp { from: b_node.clone(), sequence_nr };
                b.send(&inb.from.address, rsp);
            }
        }
    });
    let warmup = 100;
    let mut rtts = Vec::new();
    for seq in 0..samples + warmup {
        let sent = Instant::now();
        let hb = Message::Heartbeat { from: a_node.clone(), sequence_nr: seq };
        a.send(&peer, hb);
        loop {
            let inb = a_rx.recv().await.unwrap();
            if matches!(inb.message, Message::HeartbeatRsp { sequence_nr, .. } if sequence_nr == seq)
            {
                break;
            }
        }
        if seq >= warmup {
            rtts.push(sent.elapsed());
        }
    }
    responder.abort();
    a.shutdown(Duration::ZERO).await;
    rtts.sort();
    (percentile(&rtts, 0.5), percentile(&rtts, 0.99))
}

/// `senders` transports each send `per_sender` GossipStatus frames to one receiver; returns the
/// frames per second the receiver delivered.
async fn receive_rate(senders: u64, per_sender: u64, tls: &Tls) -> f64 {
    let (_r, mut r_rx, r_node) = start(100, 1024, tls).await;
    let mut txs = Vec::new();
    for i in 0..senders {
        let (t, rx, node) = start(200 + i, usize::try_from(per_sender).unwrap() + 16, tls).await;
        txs.push((t, rx, node));
    }
    let total = senders * per_sender;
    let started = Instant::now();
    for (t, _, node) in &txs {
        for _ in 0..per_sender {
            let status = Message::GossipStatus {
                from: node.clone(),
                version: VectorClock::new(),
                seen_digest: vec![0; 20],
            };
            t.send(&r_node.address, status);
        }
    }
    let mut got = 0;
    while got < total {
        r_rx.recv().await.unwrap();
        got += 1;
    }
    let secs = started.elapsed().as_secs_f64();
    for (t, _, _) in &txs {
        t.shutdown(Duration::ZERO).await;
    }
    total as f64 / secs
}

/// Starts `n` + 1 transports, then has each of `n` send one frame to the last, so that `n`
/// connections open (both ends in this process); returns the RSS growth per connection.
async fn rss_per_connection(n: u64, tls: &Tls) -> f64 {
    let (_r, mut r_rx, r_node) = start(100, 16, tls).await;
    let mut txs = Vec::new();
    for i in 0..n {
        txs.push(start(1000 + i, 16, tls).await);
    }
    let before = support::vm_rss();
    for (t, _, node) in &txs {
        let status = Message::GossipStatus {
            from: node.clone(),
            version: VectorClock::new(),
            seen_digest: vec![0; 20],
        };
        t.send(&r_node.address, status);
    }
    for _ in 0..n {
        r_rx.recv().await.unwrap();
    }
    let grown = support::vm_rss().saturating_sub(before);
    for (t, _, _) in &txs {
        t.shutdown(Duration::ZERO).await;
    }
    grown as f64 / n as f64
}

/// The variable that makes this bench measure one [`rss_per_connection`] and print it: memory
/// freed by earlier runs in the same process would hide what new connections take.
const RSS_CHILD: &str = "CONVOKE_BENCH_RSS_CHILD";

/// Runs this bench again as a child process measuring RSS per connection with `tls`.
fn rss_in_fresh_process(tls: &Tls) -> f64 {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.env(RSS_CHILD, "plain");
    if let Some(t) = tls {
        cmd.env(RSS_CHILD, "tls")
            .env("CERT", &t.cert_path)
            .env("KEY", &t.key_path)
            .env("CA", &t.ca_path);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// Mutual TLS settings with a fresh CA and one certificate every transport of the bench uses.
fn tls_settings(dir: &std::path::Path) -> ClusterTlsSettings {
    let ca = certs::Ca::new("bench CA");
    certs::Files::write(dir, &ca.leaf(certs::Flaw::None), &ca.pem).settings()
}

/// The medians of one mode: round trip p50 and p99, frames per second, bytes per connection.
#[derive(Default)]
struct Figures {
    p50: Vec<Duration>,
    p99: Vec<Duration>,
    rate: Vec<f64>,
    rss: Vec<f64>,
}

impl Figures {
    fn run(&mut self, rt: &tokio::runtime::Runtime, tls: &Tls) {
        let (p50, p99) = rt.block_on(heartbeat_round_trip(2000, tls));
        self.p50.push(p50);
        self.p99.push(p99);
        self.rate.push(rt.block_on(receive_rate(4, 50_000, tls)));
        self.rss.push(rss_in_fresh_process(tls));
    }
}

fn median<T: PartialOrd + Copy>(mut v: Vec<T>) -> T {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    if let Ok(mode) = std::env::var(RSS_CHILD) {
        let path = |k: &str| std::path::PathBuf::from(std::env::var(k).unwrap());
        let tls = (mode == "tls").then(|| {
            certs::Files { cert: path("CERT"), key: path("KEY"), ca: path("CA") }.settings()
        });
        println!("{}", rt.block_on(rss_per_connection(200, &tls)));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tls = Some(tls_settings(dir.path()));
    // The modes alternate run by run, so that load from elsewhere on a shared machine and the
    // allocator's growth fall on both alike.
    let (mut plain, mut with_tls) = (Figures::default(), Figures::default());
    for _ in 0..RUNS {
        plain.run(&rt, &None);
        with_tls.run(&rt, &tls);
    }
    let ratio = |a: f64, b: f64| a / b;
    let secs = |v: &[Duration]| median(v.to_vec()).as_secs_f64();
    let header = format!("median of {RUNS} runs, alternating");
    println!("{header:<34} | plaintext | mutual TLS 1.3 | TLS / plaintext");
    for (name, a, b) in [
        ("heartbeat RTT p50 (2000 seq.), us", secs(&plain.p50), secs(&with_tls.p50)),
        ("heartbeat RTT p99, us", secs(&plain.p99), secs(&with_tls.p99)),
    ] {
        println!("{name:<34} | {:>9.1} | {:>14.1} | {:.2}", a * 1e6, b * 1e6, ratio(b, a));
    }
    for (name, a, b) in [
        ("frames/s received (4 x 50000)", median(plain.rate), median(with_tls.rate)),
        ("RSS per connection, bytes", median(plain.rss), median(with_tls.rss)),
    ] {
        println!("{name:<34} | {a:>9.0} | {b:>14.0} | {:.2}", ratio(b, a));
    }
}
