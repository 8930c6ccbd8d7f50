//! Transport figures on loopback: heartbeat round trip (p50, p99) and how many frames per second
//! one node receives. `cargo bench --bench transport` prints each figure as the median of 5 runs.

use std::time::{Duration, Instant};

use convoke::membership::vclock::VectorClock;
use convoke::membership::{Address, Message, Uid, UniqueAddress};
use convoke::settings::TransportSettings;
use convoke::transport::{Inbound, Transport, TransportConfig};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

const RUNS: usize = 5;

async fn start(uid: u64, queue: usize) -> (Transport, mpsc::Receiver<Inbound>, UniqueAddress) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let address = Address::new("bench", "127.0.0.1", port).unwrap();
    let node = UniqueAddress::new(address, Uid::new(uid).unwrap());
    let settings = TransportSettings { outbound_queue_size: queue, ..TransportSettings::default() };
    let config = TransportConfig { system_name: "bench".into(), settings };
    let (t, rx) = Transport::start(listener, node.clone(), config);
    (t, rx, node)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// Sequential heartbeat round trips between two transports; returns (p50, p99).
async fn heartbeat_round_trip(samples: u64) -> (Duration, Duration) {
    let (a, mut a_rx, a_node) = start(1, 1024).await;
    let (b, mut b_rx, b_node) = start(2, 1024).await;
    let peer = b_node.address.clone();
    let responder = tokio::spawn(async move {
        while let Some(inb) = b_rx.recv().await {
            if let Message::Heartbeat { sequence_nr, creation_time_nanos, .. } = inb.message {
                let rsp = Message::HeartbeatRsp {
                    from: b_node.clone(),
                    sequence_nr,
                    creation_time_nanos,
                };
                b.send(&inb.from.address, rsp);
            }
        }
    });
    let warmup = 100;
    let mut rtts = Vec::new();
    for seq in 0..samples + warmup {
        let sent = Instant::now();
        let hb =
            Message::Heartbeat { from: a_node.clone(), sequence_nr: seq, creation_time_nanos: 0 };
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
async fn receive_rate(senders: u64, per_sender: u64) -> f64 {
    let (_r, mut r_rx, r_node) = start(100, 1024).await;
    let mut txs = Vec::new();
    for i in 0..senders {
        let (t, rx, node) = start(200 + i, usize::try_from(per_sender).unwrap() + 16).await;
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

fn median<T: PartialOrd + Copy>(mut v: Vec<T>) -> T {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let mut p50s = Vec::new();
    let mut p99s = Vec::new();
    let mut rates = Vec::new();
    for _ in 0..RUNS {
        let (p50, p99) = rt.block_on(heartbeat_round_trip(2000));
        p50s.push(p50);
        p99s.push(p99);
        rates.push(rt.block_on(receive_rate(4, 50_000)));
    }
    println!(
        "heartbeat round trip on loopback (2000 sequential, median of {RUNS} runs): p50 {:?}, p99 {:?}",
        median(p50s),
        median(p99s)
    );
    println!(
        "frames received per second by one node (4 senders x 50000 GossipStatus, median of {RUNS} runs): {:.0}",
        median(rates)
    );
}
