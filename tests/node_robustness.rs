//! A cluster node keeps its membership and keeps answering heartbeats while clients abuse its
//! transport port: random bytes, an oversized length prefix, a truncated frame, a wrong system
//! name, and 1000 idle connections.

mod support;

use std::time::Duration;

use convoke::Node;
use convoke::membership::{Address, ClusterEvent, Uid, UniqueAddress, wire};
use convoke::transport::frame::encode_frame;
use convoke::transport::handshake::{Handshake, StreamKind};
use support::{all_up, fast_settings, wait_for};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const T: Duration = Duration::from_secs(30);

async fn connect(node: &Node) -> TcpStream {
    TcpStream::connect(node.listen_addr()).await.unwrap()
}

fn handshake(system: &str) -> Vec<u8> {
    let from =
        UniqueAddress::new(Address::new(system, "127.0.0.1", 1).unwrap(), Uid::new(42).unwrap());
    let hs =
        Handshake { protocol_version: wire::PROTOCOL_VERSION, stream: StreamKind::Ordinary, from };
    encode_frame(&hs.encode().unwrap())
}

/// Waits until the peer closes `s` (a read returns 0 or an error).
async fn closed_by_peer(mut s: TcpStream) {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 64];
    let r = tokio::time::timeout(T, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(r.is_ok(), "the node did not close the bad connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_keeps_its_membership_while_clients_send_garbage_and_hold_idle_connections() {
    // Three nodes, 1000 client sockets and the connections accepted for them live in this
    // process: more than the usual soft open-file limit of 1024 an ordinary user starts with.
    let limit = rlimit::increase_nofile_limit(4096).expect("cannot read the open-file limit");
    assert!(limit >= 2500, "open-file limit {limit} is too low for this test; raise `ulimit -n`");
    let _live = support::live().await;
    let mut settings = fast_settings();
    settings.cluster.transport.handshake_timeout = Duration::from_secs(3);
    let nodes = support::start_cluster(&settings, 3).await;
    let target = nodes[1].clone();
    let mut watchers = Vec::new();
    for n in [&nodes[0], &nodes[2]] {
        watchers.push(n.subscribe().await.unwrap());
    }

    // Random bytes.
    let mut s = connect(&target).await;
    let noise: Vec<u8> =
        (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    s.write_all(&noise).await.unwrap();
    closed_by_peer(s).await;

    // An oversized length prefix after a valid handshake.
    let mut s = connect(&target).await;
    s.write_all(&handshake("convoke")).await.unwrap();
    s.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
    closed_by_peer(s).await;

    // A truncated frame: a length prefix promising more than is sent, then the client closes.
    let mut s = connect(&target).await;
    s.write_all(&handshake("convoke")).await.unwrap();
    s.write_all(&100u32.to_be_bytes()).await.unwrap();
    s.write_all(&[1, 2, 3]).await.unwrap();
    s.shutdown().await.unwrap();
    closed_by_peer(s).await;

    // A valid handshake frame naming another system.
    let mut s = connect(&target).await;
    s.write_all(&handshake("othersystem")).await.unwrap();
    closed_by_peer(s).await;

    // 1000 idle connections held open for longer than a failure-detection window.
    let mut idle = Vec::new();
    for _ in 0..1000 {
        idle.push(connect(&target).await);
    }
    tokio::time::sleep(Duration::from_secs(2)).await; // a fixed hold time is the point of this step
    drop(idle);

    let stats = target.transport().stats();
    assert!(stats.closed_bad_frame + stats.handshake_failures >= 4, "{stats:?}");

    // Membership untouched: still 3 Up everywhere, and nobody saw the target unreachable.
    for n in &nodes {
        wait_for(n, T, "3 Up", |s| all_up(s, 3)).await;
    }
    for mut w in watchers {
        while let Ok(Ok(e)) = tokio::time::timeout(Duration::from_millis(100), w.recv()).await {
            assert!(!matches!(e, ClusterEvent::UnreachableMember(_)), "{e:?}");
        }
    }
    for n in &nodes {
        n.stop().await;
    }
}
