//! Mutual TLS on the cluster transport, with `convoke run` processes on 127.0.0.1 and
//! certificates from a CA made in the test: a TLS cluster forms; peers with a certificate from
//! another CA, an expired one, one for another name, or no TLS at all are refused and never
//! become members; certificates replaced on disk are used for new connections while the members
//! stay.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use support::certs::{Ca, Files, Flaw, Leaf, PEER_NAME};
use support::fast_sets;
use support::live;
use support::process::{Proc, address};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

const T: Duration = Duration::from_secs(30);

/// A running TLS cluster: its CA, each node's certificate and files, in a directory of its own.
struct TlsCluster {
    dir: tempfile::TempDir,
    ca: Ca,
    leaves: Vec<Leaf>,
    files: Vec<Files>,
    procs: Vec<Proc>,
}

/// Starts `n` TLS processes with certificates of a new CA, the first forming the cluster with
/// its management API on, the others joining through it; waits until each has seen all Up.
async fn start_tls_cluster(n: usize) -> TlsCluster {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("cluster CA");
    let leaves: Vec<Leaf> = (0..n).map(|_| ca.leaf(Flaw::None)).collect();
    let (procs, files) = start_tls_processes(dir.path(), &ca, &leaves).await;
    TlsCluster { dir, ca, leaves, files, procs }
}

async fn start_tls_processes(
    dir: &std::path::Path,
    ca: &Ca,
    leaves: &[Leaf],
) -> (Vec<Proc>, Vec<Files>) {
    let files: Vec<Files> = leaves
        .iter()
        .enumerate()
        .map(|(i, leaf)| Files::write(&dir.join(format!("node-{i}")), leaf, &ca.pem))
        .collect();
    let with = |i: usize| -> Vec<String> {
        let mut sets = fast_sets();
        sets.extend(files[i].sets("1s"));
        sets
    };
    let first = Proc::start_forming(&with(0)).await;
    let seed = format!("cluster.seed_nodes=[\"{}\"]", address(first.port));
    let mut procs = vec![first];
    for i in 1..leaves.len() {
        let mut sets = with(i);
        sets.push(seed.clone());
        procs.push(Proc::start(&sets).await);
    }
    for p in &procs {
        for q in &procs {
            p.wait_log(&["membership change: MemberUp", &address(q.port)], T).await;
        }
    }
    (procs, files)
}

/// The members node `proc` (management on) lists: address → status.
async fn members(proc: &Proc) -> BTreeMap<String, String> {
    let url = proc.management_url().await;
    let body: serde_json::Value =
        reqwest::get(format!("{url}/cluster/members")).await.unwrap().json().await.unwrap();
    body["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["node"].as_str().unwrap().to_owned(), m["status"].as_str().unwrap().to_owned()))
        .collect()
}

/// The value of `convoke_transport_tls_refused_total{reason=...}` on node `proc`.
async fn refused(proc: &Proc, reason: &str) -> u64 {
    let url = proc.management_url().await;
    let text = reqwest::get(format!("{url}/metrics")).await.unwrap().text().await.unwrap();
    let series = format!("convoke_transport_tls_refused_total{{reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .unwrap_or_else(|| panic!("no {series} in /metrics:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

/// Waits until node `proc` has refused at least `n` handshakes for `reason`.
async fn wait_refused(proc: &Proc, reason: &str, n: u64) {
    let deadline = tokio::time::Instant::now() + T;
    let mut every = tokio::time::interval(Duration::from_millis(200));
    while refused(proc, reason).await < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "fewer than {n} {reason} refusals in {T:?}"
        );
        every.tick().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_refuses_foreign_expired_misnamed_and_plaintext_peers() {
    let _live = live().await;
    let TlsCluster { dir, ca, procs, .. } = start_tls_cluster(3).await;
    let before = members(&procs[0]).await;
    assert_eq!(before.len(), 3, "{before:?}");

    // Each intruder trusts the cluster's CA (so it would happily join) and presents a
    // certificate the cluster must refuse; the last one speaks no TLS at all.
    let foreign = Ca::new("another application's CA");
    let intruders = [
        ("untrusted", Some(foreign.leaf(Flaw::None))),
        ("expired", Some(ca.leaf(Flaw::Expired))),
        ("name_mismatch", Some(ca.leaf(Flaw::OtherName))),
        ("not_tls", None),
    ];
    let seed = format!("cluster.seed_nodes=[\"{}\"]", address(procs[0].port));
    let mut started = Vec::new();
    for (reason, leaf) in &intruders {
        let mut sets = fast_sets();
        if let Some(leaf) = leaf {
            sets.extend(Files::write(&dir.path().join(reason), leaf, &ca.pem).sets("1s"));
        }
        sets.push(seed.clone());
        started.push((*reason, Proc::start(&sets).await));
    }
    // Refused on every join attempt (they retry every 2 s): wait for a second refusal of each,
    // so the membership below is checked after the intruders had more than one chance.
    for (reason, _) in &started {
        wait_refused(&procs[0], reason, 2).await;
        procs[0].wait_log(&["refused a TLS peer", &format!("reason={reason}")], T).await;
        assert_eq!(
            procs[0].count(&["refused a TLS peer", &format!("reason={reason}"), "WARN"]),
            1,
            "one WARN line per peer and reason"
        );
    }
    assert_eq!(members(&procs[0]).await, before, "the intruders never became members");
    for (reason, intruder) in &started {
        let own = address(intruder.port);
        for p in &procs {
            assert!(
                !p.logged(&["membership change", &own]),
                "{reason} intruder seen by {}",
                p.port
            );
            assert!(!p.logged(&["UnreachableMember"]), "an unreachable event on {}", p.port);
        }
        assert!(!intruder.logged(&["Welcome"]) && !intruder.logged(&["MemberUp"]), "{reason}");
    }
    let log = procs[0].log();
    for line in log.iter().filter(|l| l.contains("refused a TLS peer") && l.contains("WARN")) {
        eprintln!("{line}");
    }
}

/// The certificate node `port` presents to a new TLS connection, read by a client that
/// authenticates with `client`.
async fn presented_certificate(port: u16, ca: &Ca, client: &Leaf) -> Vec<u8> {
    let mut roots = RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut ca.pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let chain: Vec<CertificateDer<'static>> = vec![CertificateDer::from(client.der.clone())];
    let key: PrivateKeyDer<'static> =
        rustls_pemfile::private_key(&mut client.key_pem.as_bytes()).unwrap().unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
    let socket = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tls = connector.connect(ServerName::try_from(PEER_NAME).unwrap(), socket).await.unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaced_certificates_are_used_for_new_connections_and_members_stay() {
    let _live = live().await;
    let TlsCluster { dir, ca, leaves, files, procs } = start_tls_cluster(3).await;
    let client = ca.leaf(Flaw::None);
    for (p, leaf) in procs.iter().zip(&leaves) {
        assert_eq!(presented_certificate(p.port, &ca, &client).await, leaf.der);
    }
    let before = members(&procs[0]).await;

    let renewed: Vec<Leaf> = (0..3).map(|_| ca.leaf(Flaw::None)).collect();
    for (f, leaf) in files.iter().zip(&renewed) {
        f.replace(leaf);
    }
    for p in &procs {
        p.wait_log(&["cluster TLS files changed"], T).await;
    }
    for (p, leaf) in procs.iter().zip(&renewed) {
        assert_eq!(presented_certificate(p.port, &ca, &client).await, leaf.der, "node {}", p.port);
    }
    // A node joining now connects to every member (and they to it) with the renewed certificates.
    let joiner_files = Files::write(&dir.path().join("joiner"), &ca.leaf(Flaw::None), &ca.pem);
    let mut sets = fast_sets();
    sets.extend(joiner_files.sets("1s"));
    sets.push(format!("cluster.seed_nodes=[\"{}\"]", address(procs[0].port)));
    let joiner = Proc::start(&sets).await;
    for p in &procs {
        p.wait_log(&["membership change: MemberUp", &address(joiner.port)], T).await;
    }
    let after = members(&procs[0]).await;
    for (node, status) in &before {
        assert_eq!(after.get(node), Some(status), "{node} is still a member: {after:?}");
    }
    assert_eq!(after.len(), 4, "{after:?}");
    for p in &procs {
        assert!(!p.logged(&["UnreachableMember"]), "an unreachable event on {}", p.port);
    }
}
