//! Cluster bootstrap end to end: `convoke run` processes with DNS discovery (a real DNS server on
//! loopback) and no seed nodes, each on its own 127.0.N.x address with the standard ports, the
//! way pods of a Kubernetes deployment see each other.

mod support;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use convoke_discovery::testkit::{DnsRecords, TestDnsServer};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use support::process::Proc;

const SERVICE: &str = "convoke.test";
const MANAGEMENT_PORT: u16 = 8558;
const T: Duration = Duration::from_secs(60);

fn ip(net: u8, host: u8) -> IpAddr {
    IpAddr::from([127, 0, net, host])
}

/// `--set` arguments of the node on `ip` that discovers its peers through the DNS server `dns`.
fn sets(
    ip: IpAddr,
    dns: std::net::SocketAddr,
    required: usize,
    stable_margin: &str,
) -> Vec<String> {
    let mut sets: Vec<String> =
        support::fast_sets().into_iter().filter(|s| !s.starts_with("management.enabled")).collect();
    sets.extend([
        format!("cluster.hostname=\"{ip}\""),
        format!("management.hostname=\"{ip}\""),
        format!("management.port={MANAGEMENT_PORT}"),
        "discovery.method=\"dns\"".to_owned(),
        format!("discovery.dns.nameservers=[\"{dns}\"]"),
        format!("bootstrap.service_name=\"{SERVICE}\""),
        format!("bootstrap.required_contact_point_nr={required}"),
        format!("bootstrap.stable_margin=\"{stable_margin}\""),
        "bootstrap.discovery_interval=\"500ms\"".to_owned(),
        "bootstrap.contact_point.probe_interval=\"500ms\"".to_owned(),
    ]);
    sets
}

fn run(ip: IpAddr, dns: std::net::SocketAddr, required: usize, stable_margin: &str) -> Proc {
    Proc::run(25520, &sets(ip, dns, required, stable_margin))
}

/// The JSON body `url` answers with, or what went wrong, naming the URL.
async fn get_json(client: &reqwest::Client, url: &str) -> Result<serde_json::Value, String> {
    let response = client.get(url).send().await.map_err(|e| format!("{url}: {e}"))?;
    response.json().await.map_err(|e| format!("{url}: {e}"))
}

/// What one node's management API reports: its Up members and its leader.
async fn view(client: &reqwest::Client, ip: IpAddr) -> Result<(BTreeSet<String>, String), String> {
    let url = format!("http://{ip}:{MANAGEMENT_PORT}/cluster/members");
    let json = get_json(client, &url).await?;
    let up = json["members"]
        .as_array()
        .ok_or_else(|| format!("{url}: no members in {json}"))?
        .iter()
        .filter(|m| m["status"] == "Up")
        .filter_map(|m| m["node"].as_str().map(str::to_owned))
        .collect();
    Ok((up, json["leader"].as_str().unwrap_or_default().to_owned()))
}

/// Waits until every node in `ips` reports the same `n` Up members; returns when that happened.
/// Panics with each node's view if it does not happen within `timeout`.
async fn wait_one_cluster(ips: &[IpAddr], n: usize, timeout: Duration, procs: &[&Proc]) -> Instant {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(2)).build().unwrap();
    let deadline = Instant::now() + timeout;
    loop {
        let mut views = Vec::new();
        for ip in ips {
            views.push(view(&client, *ip).await);
        }
        let first = views[0].as_ref().ok().map(|v| &v.0);
        if views.iter().all(|v| v.as_ref().is_ok_and(|v| v.0.len() == n && Some(&v.0) == first)) {
            return Instant::now();
        }
        if Instant::now() >= deadline {
            let logs: Vec<String> = procs
                .iter()
                .map(|p| p.log().iter().rev().take(8).rev().cloned().collect::<Vec<_>>().join("\n"))
                .collect();
            panic!(
                "no single cluster of {n} within {timeout:?}: {views:#?}\nlast log lines:\n{}",
                logs.join("\n---\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn self_joins(procs: &[Proc]) -> usize {
    procs.iter().map(|p| p.count(&["bootstrap: forming a new cluster"])).sum()
}

/// Starts one node per address in random order, all within 100 ms (random gaps of up to 20 ms).
async fn start_all(
    ips: &[IpAddr],
    dns: std::net::SocketAddr,
    margin: &str,
    rng: &mut impl Rng,
) -> Vec<(IpAddr, Proc)> {
    let mut order = ips.to_vec();
    order.shuffle(rng);
    let mut procs = Vec::new();
    for ip in order {
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..=20))).await;
        procs.push((ip, run(ip, dns, ips.len(), margin)));
    }
    procs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_started_together_form_exactly_one_cluster_every_time() {
    let _live = support::live().await;
    let runs: usize =
        std::env::var("BOOTSTRAP_E2E_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let margin = std::env::var("BOOTSTRAP_E2E_MARGIN").unwrap_or_else(|_| "1s".into());
    let ips: Vec<IpAddr> = (1..=5).map(|h| ip(1, h)).collect();
    let (_dns, dns) =
        TestDnsServer::start(DnsRecords::new().addresses(SERVICE, ips.clone())).await.unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(20);
    let mut times = Vec::new();
    for run_nr in 0..runs {
        let started = Instant::now();
        let procs = start_all(&ips, dns, &margin, &mut rng).await;
        let spread = started.elapsed();
        let procs: Vec<Proc> = procs.into_iter().map(|(_, p)| p).collect();
        let formed = wait_one_cluster(&ips, 5, T, &procs.iter().collect::<Vec<_>>()).await;
        assert_eq!(self_joins(&procs), 1, "run {run_nr}: exactly one node forms the cluster");
        times.push(formed - started);
        eprintln!(
            "run {run_nr}: started within {spread:?}, one cluster of 5 after {:?}",
            formed - started
        );
        drop(procs);
        // The next run needs the ports again: wait until the killed processes released them.
        wait_ports_free(&ips).await;
    }
    times.sort();
    eprintln!(
        "{runs} runs, stable margin {margin}: median {:?}, max {:?}, runs with more than one cluster: 0",
        times[times.len() / 2],
        times[times.len() - 1]
    );
}

async fn wait_ports_free(ips: &[IpAddr]) {
    for ip in ips {
        for port in [25520, MANAGEMENT_PORT] {
            let deadline = Instant::now() + T;
            while std::net::TcpListener::bind((*ip, port)).is_err() {
                assert!(Instant::now() < deadline, "{ip}:{port} stays bound");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_started_later_joins_the_existing_cluster_without_self_joining() {
    let _live = support::live().await;
    let first: Vec<IpAddr> = (1..=4).map(|h| ip(2, h)).collect();
    let late = ip(2, 5);
    let (dns_server, dns) =
        TestDnsServer::start(DnsRecords::new().addresses(SERVICE, first.clone())).await.unwrap();
    let procs: Vec<Proc> = first.iter().map(|ip| run(*ip, dns, 4, "1s")).collect();
    wait_one_cluster(&first, 4, T, &procs.iter().collect::<Vec<_>>()).await;
    assert_eq!(self_joins(&procs), 1);

    let all: Vec<IpAddr> = first.iter().copied().chain([late]).collect();
    dns_server.set_records(DnsRecords::new().addresses(SERVICE, all.clone())).await;
    let newcomer = run(late, dns, 4, "1s");
    wait_one_cluster(&all, 5, T, &procs.iter().chain([&newcomer]).collect::<Vec<_>>()).await;
    newcomer.wait_log(&["bootstrap: joining an existing cluster"], T).await;
    assert_eq!(newcomer.count(&["bootstrap: forming a new cluster"]), 0, "{:#?}", newcomer.log());

    // `convoke bootstrap-status` shows the newcomer's phase, verdict and contact points.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_convoke"))
        .args(["bootstrap-status", "--url", &format!("http://{late}:{MANAGEMENT_PORT}")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("PHASE          joining-existing\n"), "{text}");
    assert!(text.contains("\nVERDICT        JoinOthers ("), "{text}");
    let points: BTreeSet<IpAddr> = text
        .lines()
        .skip_while(|l| !l.starts_with("CONTACT POINT"))
        .skip(1)
        .filter_map(|l| l.split_whitespace().next()?.split(':').next()?.parse().ok())
        .collect();
    assert_eq!(points, all.iter().copied().collect(), "{text}");
}

/// What one node's `GET /bootstrap/status` reports: its phase and the IPs of its contact points.
async fn bootstrap_status(
    client: &reqwest::Client,
    ip: IpAddr,
) -> Result<(String, BTreeSet<IpAddr>), String> {
    let url = format!("http://{ip}:{MANAGEMENT_PORT}/bootstrap/status");
    let json = get_json(client, &url).await?;
    let points = json["contactPoints"]
        .as_array()
        .ok_or_else(|| format!("{url}: no contactPoints in {json}"))?
        .iter()
        .map(|c| c["host"].as_str().and_then(|h| h.parse().ok()).ok_or(format!("{url}: {c}")))
        .collect::<Result<_, _>>()?;
    Ok((json["phase"].as_str().unwrap_or_default().to_owned(), points))
}

/// Waits until the node on `ip` reports exactly `expected` as its contact points while still
/// probing: it has looked them up and holds that view. Panics with its status and log after `T`.
async fn wait_contact_points(client: &reqwest::Client, ip: IpAddr, expected: &[IpAddr], p: &Proc) {
    let expected: BTreeSet<IpAddr> = expected.iter().copied().collect();
    let deadline = Instant::now() + T;
    loop {
        let status = bootstrap_status(client, ip).await;
        if status.as_ref().is_ok_and(|(phase, points)| phase == "probing" && *points == expected) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{ip} never reported the contact points {expected:?} within {T:?}; last status: \
             {status:?}\nlog:\n{}",
            p.log().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_that_see_different_subsets_at_first_form_one_cluster_late_never_two() {
    let _live = support::live().await;
    let ips: Vec<IpAddr> = (1..=5).map(|h| ip(3, h)).collect();
    // At first {1,2} and {3,4,5} only see their own group; each group alone is enough contact
    // points (2) and has its own lowest address, so each could form a cluster of its own once its
    // view has been stable for the margin.
    let group = |i: usize| if i < 2 { ips[..2].to_vec() } else { ips[2..].to_vec() };
    let mut servers = Vec::new();
    for i in 0..ips.len() {
        servers.push(
            TestDnsServer::start(DnsRecords::new().addresses(SERVICE, group(i))).await.unwrap(),
        );
    }
    // The views are healed as soon as every node has been seen holding its partial one, usually
    // a second or two after the start; the margin leaves room for a slow start on a busy machine.
    let margin = Duration::from_secs(8);
    let started = Instant::now();
    let procs: Vec<Proc> = ips
        .iter()
        .zip(&servers)
        .map(|(ip, (_, dns))| Proc::run(25520, &sets(*ip, *dns, 2, "8s")))
        .collect();
    // The partial views happened: every node reports exactly its own group as contact points.
    let client = reqwest::Client::builder().timeout(Duration::from_secs(2)).build().unwrap();
    for (i, ip) in ips.iter().enumerate() {
        wait_contact_points(&client, *ip, &group(i), &procs[i]).await;
    }
    let healed = Instant::now();
    for (server, _) in &servers {
        server.set_records(DnsRecords::new().addresses(SERVICE, ips.clone())).await;
    }
    // The scenario needs the views healed before a group's margin runs out: it counts from each
    // node's first lookup (after `started`), and a node sees the healed records at its next
    // lookup (every 500 ms, TTL 0), so 2 s before the margin is the latest safe heal.
    assert!(
        healed - started < margin - Duration::from_secs(2),
        "the partial views lasted {:?}: too close to the stable margin {margin:?} for the scenario",
        healed - started
    );
    assert_eq!(self_joins(&procs), 0, "no group formed a cluster of its own while partial");
    let formed = wait_one_cluster(&ips, 5, T, &procs.iter().collect::<Vec<_>>()).await;
    assert_eq!(self_joins(&procs), 1, "exactly one node forms the cluster");
    assert!(
        formed - healed >= margin,
        "formed {:?} after the views healed, before the stable margin",
        formed - healed
    );
    eprintln!(
        "partial views seen on all five {:?} after the start; one cluster of 5 {:?} after healing",
        healed - started,
        formed - healed
    );
}

/// `--set` arguments of the node on `ip` with every setting at its default except those that put
/// it on its own address and the stable margin, discovering its peers in `ips` through `method`:
/// `"dns"` (the DNS server `dns`) or `"config"`.
fn default_sets(
    ip: IpAddr,
    ips: &[IpAddr],
    method: &str,
    dns: std::net::SocketAddr,
) -> Vec<String> {
    let mut sets = vec![
        format!("cluster.hostname=\"{ip}\""),
        format!("management.hostname=\"{ip}\""),
        format!("management.port={MANAGEMENT_PORT}"),
        format!("bootstrap.required_contact_point_nr={}", ips.len()),
        "bootstrap.stable_margin=\"2s\"".to_owned(),
        format!("discovery.method=\"{method}\""),
    ];
    if method == "dns" {
        sets.push(format!("bootstrap.service_name=\"{SERVICE}\""));
        sets.push(format!("discovery.dns.nameservers=[\"{dns}\"]"));
    } else {
        // A `--set` key is dotted, so the configured service's name has no dot of its own.
        sets.push("bootstrap.service_name=\"formation\"".to_owned());
        let endpoints: Vec<String> =
            ips.iter().map(|ip| format!("{{host=\"{ip}\", port={MANAGEMENT_PORT}}}")).collect();
        sets.push(format!(
            "discovery.config.services.formation.endpoints=[{}]",
            endpoints.join(", ")
        ));
    }
    sets
}

/// Formation time with default settings and a stable margin of 2 s: five processes started
/// together (in random order within 100 ms) until every one reports the same five Up members,
/// ten times with config discovery and ten times with DNS discovery; prints each run and the
/// medians. A measurement, listed in `docs/benchmarks.md`:
/// `cargo test --release -p convoke --test bootstrap measure_formation -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check: about two minutes"]
async fn measure_formation_with_default_settings_and_a_stable_margin_of_2s() {
    let _live = support::live().await;
    let runs: usize =
        std::env::var("FORMATION_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let ips: Vec<IpAddr> = (1..=5).map(|h| ip(4, h)).collect();
    let (_dns, dns) =
        TestDnsServer::start(DnsRecords::new().addresses(SERVICE, ips.clone())).await.unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let mut summary = Vec::new();
    for method in ["config", "dns"] {
        let mut times = Vec::new();
        for run_nr in 0..runs {
            let mut order = ips.clone();
            order.shuffle(&mut rng);
            let started = Instant::now();
            let mut procs = Vec::new();
            for ip in order {
                tokio::time::sleep(Duration::from_millis(rng.random_range(0..=20))).await;
                procs.push(Proc::run(25520, &default_sets(ip, &ips, method, dns)));
            }
            let formed = wait_one_cluster(&ips, 5, T, &procs.iter().collect::<Vec<_>>()).await;
            assert_eq!(self_joins(&procs), 1, "{method} run {run_nr}: exactly one node forms");
            let took = formed - started;
            eprintln!("{method} run {run_nr}: one cluster of 5, all Up everywhere, after {took:?}");
            if std::env::var_os("FORMATION_LOGS").is_some() {
                for p in &procs {
                    eprintln!("---\n{}", p.log().join("\n"));
                }
            }
            times.push(took);
            drop(procs);
            wait_ports_free(&ips).await;
        }
        times.sort();
        summary.push(format!(
            "{method}: median {:?}, min {:?}, max {:?} over {runs} runs",
            times[times.len() / 2],
            times[0],
            times[times.len() - 1]
        ));
    }
    eprintln!("formation with stable margin 2 s, default settings:\n{}", summary.join("\n"));
}
