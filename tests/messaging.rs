//! Typed messaging between members of a real cluster (nodes in one process over TCP).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use convoke::Node;
use convoke::membership::{ClusterEvent, Uid, UniqueAddress};
use convoke::messaging::{AskError, EndpointKey, MemberGone};
use convoke::transport::frame::encode_frame;
use convoke::transport::handshake::{Handshake, StreamKind};
use serde::{Deserialize, Serialize};
use support::{fast_settings, wait_for};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const T: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Greet {
    name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Greeting {
    text: String,
    served_by: String,
}

const GREET: EndpointKey<Greet, Greeting> = EndpointKey::new("greet");

fn serve_greet(node: &Node) {
    let me = node.self_address().to_string();
    node.messaging()
        .serve(&GREET, 16, move |_from, g: Greet| {
            let me = me.clone();
            async move { Greeting { text: format!("hello {}", g.name), served_by: me } }
        })
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asks_and_tells_reach_the_named_endpoint_of_the_target_and_of_the_node_itself() {
    let _live = support::live().await;
    let nodes = support::start_cluster(&fast_settings(), 2).await;
    serve_greet(&nodes[1]);
    let target = nodes[1].self_node().clone();
    let reply =
        nodes[0].messaging().ask(&target, &GREET, &Greet { name: "ann".into() }, T).await.unwrap();
    assert_eq!(reply.text, "hello ann");
    assert_eq!(reply.served_by, nodes[1].self_address().to_string());

    // An ask to the node itself takes the same path without the network.
    let self_reply =
        nodes[1].messaging().ask(&target, &GREET, &Greet { name: "me".into() }, T).await.unwrap();
    assert_eq!(self_reply.text, "hello me");

    // Tells arrive in order, each with its sender.
    const NOTE: EndpointKey<u32, ()> = EndpointKey::new("note");
    let mut notes = nodes[0].messaging().endpoint(&NOTE, 64).unwrap();
    for n in 0..10u32 {
        nodes[1].messaging().tell(nodes[0].self_node(), &NOTE, &n).unwrap();
    }
    for n in 0..10u32 {
        let r = tokio::time::timeout(T, notes.recv()).await.unwrap().unwrap();
        assert_eq!((r.message, &r.from, r.is_ask()), (n, nodes[1].self_node(), false));
    }
    // Nothing waits now; a tell to the node itself is queued before `tell` returns, so
    // `try_recv` takes each at once, in order, then finds the queue empty again.
    assert!(notes.try_recv().is_none());
    for n in 10..13u32 {
        nodes[0].messaging().tell(nodes[0].self_node(), &NOTE, &n).unwrap();
    }
    let taken: Vec<u32> = std::iter::from_fn(|| notes.try_recv()).map(|r| r.message).collect();
    assert_eq!(taken, [10, 11, 12]);
    // A name can be registered once at a time; dropping the endpoint frees it.
    assert!(nodes[0].messaging().endpoint(&NOTE, 1).is_err());
    drop(notes);
    assert!(nodes[0].messaging().endpoint(&NOTE, 1).is_ok());
    for n in &nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failure_of_an_ask_is_told_apart() {
    let _live = support::live().await;
    let mut settings = fast_settings();
    settings.cluster.transport.max_frame_size = 64 * 1024;
    let nodes = support::start_cluster(&settings, 2).await;
    let (a, b) = (nodes[0].messaging(), &nodes[1]);
    let target = b.self_node().clone();

    // Not a member: an address nobody joined with, or another incarnation of a member.
    let stranger = UniqueAddress::new(target.address.clone(), Uid::new(12345).unwrap());
    let e = a.ask(&stranger, &GREET, &Greet { name: "x".into() }, T).await.unwrap_err();
    assert_eq!(e, AskError::NotAMember { target: stranger.clone() });
    assert!(matches!(
        a.tell(&stranger, &GREET, &Greet { name: "x".into() }),
        Err(AskError::NotAMember { .. })
    ));

    // No such endpoint on the target.
    let e = a.ask(&target, &GREET, &Greet { name: "x".into() }, T).await.unwrap_err();
    assert!(matches!(&e, AskError::NoSuchEndpoint { endpoint, .. } if endpoint == "greet"), "{e}");

    // Too large: refused before sending.
    let big = Greet { name: "x".repeat(100 * 1024) };
    let e = a.ask(&target, &GREET, &big, T).await.unwrap_err();
    assert!(matches!(e, AskError::TooLarge { limit: 65536, .. }), "{e}");

    // The two sides disagree on the request type: the target says it cannot decode it.
    const WRONG: EndpointKey<Vec<u64>, Greeting> = EndpointKey::new("greet");
    serve_greet(b);
    let e = a.ask(&target, &WRONG, &vec![u64::MAX; 3], T).await.unwrap_err();
    assert!(matches!(e, AskError::Decode(_)), "{e}");

    // A handler that drops the request: no reply, said at once.
    const DROPS: EndpointKey<u8, u8> = EndpointKey::new("drops");
    let mut drops = b.messaging().endpoint(&DROPS, 4).unwrap();
    tokio::spawn(async move {
        while let Some(r) = drops.recv().await {
            drop(r);
        }
    });
    let e = a.ask(&target, &DROPS, &1, T).await.unwrap_err();
    assert!(matches!(e, AskError::NoReply { .. }), "{e}");

    // A handler that never answers: timeout.
    const SLOW: EndpointKey<u8, u8> = EndpointKey::new("slow");
    let mut slow = b.messaging().endpoint(&SLOW, 1).unwrap();
    let e = a.ask(&target, &SLOW, &1, Duration::from_millis(300)).await.unwrap_err();
    assert!(matches!(e, AskError::Timeout { .. }), "{e}");

    // Overloaded: the queue holds one request (the one above is still in it), so the next is
    // refused at once, long before its timeout.
    let e = a.ask(&target, &SLOW, &2, T).await.unwrap_err();
    assert!(matches!(&e, AskError::Overloaded { detail, .. } if detail.contains("slow")), "{e}");
    assert!(b.messaging().stats().overloaded >= 1);
    let held = slow.recv().await.unwrap();
    assert_eq!(held.message, 1);
    for n in &nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_in_flight_fails_as_soon_as_its_target_is_downed() {
    let _live = support::live().await;
    let nodes = support::start_cluster(&fast_settings(), 3).await;
    const HOLD: EndpointKey<u8, u8> = EndpointKey::new("hold");
    let mut held = nodes[2].messaging().endpoint(&HOLD, 4).unwrap();
    let target = nodes[2].self_node().clone();
    let asker = nodes[0].messaging().clone();
    let ask = tokio::spawn({
        let target = target.clone();
        async move { asker.ask(&target, &HOLD, &7, Duration::from_secs(600)).await }
    });
    // The request has arrived and is held unanswered; the watch of the target is still open.
    let request = tokio::time::timeout(T, held.recv()).await.unwrap().unwrap();
    assert_eq!(request.message, 7);
    let watch = nodes[1].messaging().watch_member(&target);
    assert_eq!(watch.status(), None);
    nodes[2].stop().await;
    nodes[0].down(target.address.clone()).await.unwrap();
    let e =
        tokio::time::timeout(T, ask).await.expect("the ask ended long before its timeout").unwrap();
    assert!(matches!(e, Err(AskError::TargetRemoved { .. })), "{e:?}");
    let how = tokio::time::timeout(T, watch.gone()).await.unwrap();
    assert!(matches!(how, MemberGone::Downed | MemberGone::Removed));
    drop(request);
    for n in &nodes[..2] {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_from_a_non_member_is_dropped_and_counted() {
    let _live = support::live().await;
    let nodes = support::start_cluster(&fast_settings(), 2).await;
    const NOTE: EndpointKey<u32, ()> = EndpointKey::new("note");
    let mut notes = nodes[0].messaging().endpoint(&NOTE, 8).unwrap();
    let target = nodes[0].self_node().clone();

    // A stranger speaks the protocol correctly: an application-stream handshake, then a tell.
    let stranger_address = "convoke://convoke@127.0.0.1:9".parse().unwrap();
    let stranger = UniqueAddress::new(stranger_address, Uid::new(99).unwrap());
    let mut raw = TcpStream::connect(nodes[0].listen_addr()).await.unwrap();
    let handshake = Handshake::new(stranger, StreamKind::Application).encode().unwrap();
    raw.write_all(&encode_frame(&handshake)).await.unwrap();
    raw.write_all(&encode_frame(&tell_frame(target.uid.get(), "note", &[7]))).await.unwrap();
    raw.flush().await.unwrap();
    wait_until(|| nodes[0].messaging().stats().from_non_members == 1).await;
    let metrics = nodes[0].metrics().render(&convoke::metrics::Scrape::of(nodes[0].state(), false));
    assert!(
        metrics.contains("convoke_messaging_dropped_total{reason=\"from_non_member\"} 1"),
        "{metrics}"
    );

    // A member's tell on the same endpoint is delivered: the stranger's never was.
    nodes[1].messaging().tell(&target, &NOTE, &8).unwrap();
    let r = tokio::time::timeout(T, notes.recv()).await.unwrap().unwrap();
    assert_eq!((r.message, &r.from), (8, nodes[1].self_node()));
    for n in &nodes {
        n.stop().await;
    }
}

/// A tell envelope as documented in `src/messaging/envelope.rs`.
fn tell_frame(to_uid: u64, endpoint: &str, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8];
    f.extend_from_slice(&to_uid.to_be_bytes());
    f.extend_from_slice(&0u64.to_be_bytes());
    f.push(endpoint.len() as u8);
    f.extend_from_slice(endpoint.as_bytes());
    f.extend_from_slice(payload);
    f
}

/// Waits for a counter the node updates on its own; there is no event to await for a drop.
async fn wait_until(cond: impl Fn() -> bool) {
    tokio::time::timeout(T, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("condition not reached in time");
}

/// Two nodes ask each other as fast as they can (64 asks in flight each way, 10 KB payloads)
/// for 60 s; heartbeats have their own connection, so neither ever sees the other unreachable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saturated_application_traffic_never_makes_a_member_unreachable() {
    let _live = support::live().await;
    const ECHO: EndpointKey<Vec<u8>, Vec<u8>> = EndpointKey::new("echo");
    let nodes = support::start_cluster(&fast_settings(), 2).await;
    let mut events = Vec::new();
    for n in &nodes {
        n.messaging().serve(&ECHO, 256, |_, payload: Vec<u8>| async move { payload }).unwrap();
        events.push(n.subscribe().await.unwrap());
    }
    let answered = Arc::new(AtomicU64::new(0));
    let until = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut load = Vec::new();
    for (from, to) in [(0, 1), (1, 0)] {
        let target = nodes[to].self_node().clone();
        for _ in 0..64 {
            let m = nodes[from].messaging().clone();
            let (target, answered) = (target.clone(), answered.clone());
            load.push(tokio::spawn(async move {
                let payload = vec![7u8; 10 * 1024];
                while tokio::time::Instant::now() < until {
                    if m.ask(&target, &ECHO, &payload, T).await.is_ok() {
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
    }
    for task in load {
        task.await.unwrap();
    }
    let answered = answered.load(Ordering::Relaxed);
    assert!(answered > 10_000, "only {answered} asks answered in 60 s");
    for (n, sub) in nodes.iter().zip(&mut events) {
        while let Ok(e) = tokio::time::timeout(Duration::ZERO, sub.recv()).await {
            let e = e.expect("the subscription kept up");
            assert!(
                !matches!(e, ClusterEvent::UnreachableMember(_)),
                "{}: {e:?}",
                n.self_address()
            );
        }
        wait_for(n, T, "both members Up and reachable", |s| {
            support::all_up(s, 2) && s.state.unreachable.is_empty()
        })
        .await;
    }
    for n in &nodes {
        n.stop().await;
    }
}
