//! Embedding convoke in a service: two nodes in one process form a cluster, one prints the
//! membership events it sees, then both leave gracefully.
//!
//! Run with `cargo run --example embedded`.

use std::time::Duration;

use convoke::Node;
use convoke::membership::ClusterEvent;
use convoke::settings::Settings;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut settings = Settings::default();
    settings.cluster.port = 0; // pick free ports
    settings.management.enabled = false;

    let first = Node::start(&settings).await?;
    let second = Node::start(&settings).await?;
    let mut events = first.subscribe().await?;

    // The first node forms the cluster; the second joins through it.
    let seed = first.self_address().clone();
    first.join_seed_nodes(vec![seed.clone()]).await?;
    second.join_seed_nodes(vec![seed]).await?;

    // Print events until both members are Up.
    let mut up = 0;
    while up < 2 {
        let event = tokio::time::timeout(Duration::from_secs(30), events.recv()).await??;
        println!("{} {:?}", event.type_name(), event.member().map(|m| m.address().to_string()));
        if matches!(event, ClusterEvent::MemberUp(_)) {
            up += 1;
        }
    }
    for m in first.state().members {
        println!("member {} is {}", m.address(), m.status());
    }

    println!("second node leaves: {:?}", second.shutdown().await);
    println!("first node leaves: {:?}", first.shutdown().await);
    Ok(())
}
