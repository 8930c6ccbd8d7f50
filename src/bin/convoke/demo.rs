//! `convoke demo`: N nodes on 127.0.0.1 in one process that form one cluster by bootstrap, with
//! config discovery listing their management servers.

use std::process::ExitCode;
use std::time::Duration;

use convoke_membership::{ClusterEvent, CurrentClusterState, MemberStatus};

use convoke::node::Node;
use convoke::settings::{ConfigService, Endpoint, Settings};

/// How long the demo waits for the cluster to form before giving up.
const FORM_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs the demo until Ctrl-C.
pub(crate) async fn run(n: usize) -> ExitCode {
    // Bootstrap with config discovery: every node's management server is a contact point.
    let ports = match free_ports(n) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("convoke demo: cannot find {n} free ports on 127.0.0.1: {e}");
            return ExitCode::from(1);
        }
    };
    let mut settings = Settings::default();
    settings.cluster.port = 0;
    settings.management.enabled = true;
    settings.bootstrap.required_contact_point_nr = n;
    settings.bootstrap.stable_margin = Duration::from_secs(2);
    // Every contact point is on 127.0.0.1, so they must not be filtered down to one port per host.
    settings.bootstrap.contact_point.filter_on_fallback_port = false;
    settings.discovery.method = "config".into();
    let endpoints =
        ports.iter().map(|p| Endpoint { host: "127.0.0.1".into(), port: Some(*p) }).collect();
    settings.discovery.config.services.insert(
        settings.bootstrap.effective_service_name(&settings.cluster.core.system_name),
        ConfigService { endpoints },
    );
    println!(
        "Starting {n} nodes on 127.0.0.1; they find each other by bootstrap (config discovery, management ports {}) ...",
        ports.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    );
    let mut nodes: Vec<Node> = Vec::with_capacity(n);
    for port in &ports {
        settings.management.port = *port;
        match Node::start(&settings).await {
            Ok(node) => nodes.push(node),
            Err(e) => {
                eprintln!("convoke demo: cannot start a node: {e}");
                return ExitCode::from(1);
            }
        }
    }
    println!("Dashboard:        http://127.0.0.1:{}/dashboard", ports[0]);
    println!("Bootstrap status: http://127.0.0.1:{}/bootstrap/status", ports[0]);
    let first = nodes[0].self_address().clone();
    let Ok(mut events) = nodes[0].subscribe().await else {
        eprintln!("convoke demo: the first node stopped");
        return ExitCode::from(1);
    };
    let mut watch = nodes[0].watch();
    let formed = tokio::time::timeout(FORM_TIMEOUT, async {
        loop {
            let state = watch.borrow_and_update().state.clone();
            let up = state.members.iter().filter(|m| m.status() == MemberStatus::Up).count();
            if up == n && state.convergence {
                return state;
            }
            if watch.changed().await.is_err() {
                return state;
            }
        }
    })
    .await;
    let Ok(state) = formed else {
        eprintln!("convoke demo: the cluster did not form within {FORM_TIMEOUT:?}");
        return ExitCode::from(1);
    };
    println!("\nCluster formed: {n} members Up\n");
    print!("{}", members_table(&state));
    println!("\nWatching membership changes from {first} (Ctrl-C leaves gracefully) ...");
    // Skip the replay of the initial state: the table already shows it.
    while let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(50), events.recv()).await {}
    let printer = tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(e) => println!("{}", event_line(&e)),
                Err(convoke::control::RecvError::Lagged(k)) => println!("({k} events skipped)"),
                // The node stopped (`Closed`), or a kind of end this loop does not know.
                Err(_) => break,
            }
        }
    });
    let _ = tokio::signal::ctrl_c().await;
    println!("\nLeaving gracefully ...");
    // The other nodes leave first, so the first node's events show them go.
    let results = futures::future::join_all(nodes[1..].iter().map(Node::shutdown)).await;
    let first = nodes[0].shutdown().await;
    printer.abort();
    let results: Vec<_> = std::iter::once(first).chain(results).collect();
    for (node, r) in nodes.iter().zip(results) {
        println!("{}: {r:?}", node.self_address());
    }
    ExitCode::SUCCESS
}

/// `n` distinct ports the OS reports free on 127.0.0.1.
fn free_ports(n: usize) -> std::io::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    listeners.iter().map(|l| l.local_addr().map(|a| a.port())).collect()
}

/// A human table of the members: status, roles, up-number, leader and oldest marks, and
/// unreachable members with their observers.
pub(crate) fn members_table(state: &CurrentClusterState) -> String {
    use std::fmt::Write;
    let width =
        state.members.iter().map(|m| m.address().to_string().len()).max().unwrap_or(7).max(7);
    let mut out = format!(
        "{:<width$}  {:<20}  {:<5}  {:<6}  {:<6}  ROLES\n",
        "ADDRESS", "STATUS", "UP#", "LEADER", "OLDEST"
    );
    for m in &state.members {
        let addr = m.address().to_string();
        let up =
            if m.up_number().0 == u32::MAX { "-".to_owned() } else { m.up_number().0.to_string() };
        let leader = if state.leader.as_ref() == Some(m.address()) { "*" } else { "" };
        let oldest = if state.oldest.as_ref() == Some(m.address()) { "*" } else { "" };
        let roles: Vec<&str> = m.roles().iter().map(String::as_str).collect();
        let _ = writeln!(
            out,
            "{addr:<width$}  {:<20}  {up:<5}  {leader:<6}  {oldest:<6}  {}",
            m.status().name(),
            roles.join(",")
        );
    }
    for (m, observers) in &state.unreachable {
        let by: Vec<String> = observers.iter().map(|o| o.address.to_string()).collect();
        let _ = writeln!(out, "UNREACHABLE {} (observed by {})", m.address(), by.join(", "));
    }
    out
}

/// One line per cluster event.
pub(crate) fn event_line(e: &ClusterEvent) -> String {
    match (e, e.member()) {
        (ClusterEvent::MemberRemoved { member, previous_status }, _) => {
            format!("{:<28} {} (was {previous_status})", e.type_name(), member.address())
        }
        (_, Some(m)) => format!("{:<28} {}", e.type_name(), m.address()),
        (ClusterEvent::LeaderChanged(l), None) => {
            format!(
                "{:<28} {}",
                e.type_name(),
                l.as_ref().map_or("none".to_owned(), ToString::to_string)
            )
        }
        (ClusterEvent::RoleLeaderChanged { role, leader }, None) => format!(
            "{:<28} {role}: {}",
            e.type_name(),
            leader.as_ref().map_or("none".to_owned(), ToString::to_string)
        ),
        _ => format!("{e:?}"),
    }
}
