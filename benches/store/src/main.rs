//! A load generator for the replicated store and for etcd, over their HTTP APIs: `--in-flight`
//! requests at once, round-robin over `--endpoints`, each key `k<i>` written once (a put phase)
//! or read once (a get phase). Prints one JSON line: ops, seconds, ops/s, p50 and p99 in
//! milliseconds, errors.
//!
//! convoke: `PUT /data/keys/k<i>?w=quorum` with the value as the body, `GET /data/keys/k<i>?r=quorum`.
//! etcd (v3 JSON gateway): `POST /v3/kv/put {"key","value"}` (base64), `POST /v3/kv/range {"key"}`
//! (a linearizable read, etcd's default).
//!
//! Usage: store-bench --target convoke|etcd --endpoints URL[,URL...] --phase put|get
//!        [--from N] [--ops N] [--in-flight N] [--value-bytes N]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use base64::Engine;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned()
}

fn num(name: &str, default: u64) -> u64 {
    arg(name).map_or(default, |v| v.parse().expect("a number"))
}

#[tokio::main]
async fn main() {
    let target = arg("--target").expect("--target convoke|etcd");
    let endpoints: Vec<String> =
        arg("--endpoints").expect("--endpoints").split(',').map(str::to_owned).collect();
    let phase = arg("--phase").expect("--phase put|get");
    let from = num("--from", 0);
    let ops = num("--ops", 10_000);
    let in_flight = num("--in-flight", 64);
    let value = vec![b'v'; usize::try_from(num("--value-bytes", 100)).unwrap_or(100)];
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(usize::try_from(in_flight).unwrap_or(64))
        .timeout(Duration::from_secs(30))
        .build()
        .expect("an HTTP client");
    let next = Arc::new(AtomicU64::new(from));
    let errors = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let workers = (0..in_flight).map(|w| {
        let (client, next, errors, endpoints) =
            (client.clone(), next.clone(), errors.clone(), endpoints.clone());
        let (target, phase, value) = (target.clone(), phase.clone(), value.clone());
        async move {
            let b64 = base64::engine::general_purpose::STANDARD;
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= from + ops {
                    return latencies;
                }
                let ep = &endpoints[usize::try_from((i + w) % endpoints.len() as u64).unwrap_or(0)];
                let key = format!("k{i}");
                let req = match (target.as_str(), phase.as_str()) {
                    ("convoke", "put") => client.put(format!("{ep}/data/keys/{key}?w=quorum")).body(value.clone()),
                    ("convoke", _) => client.get(format!("{ep}/data/keys/{key}?r=quorum")),
                    ("etcd", "put") => client.post(format!("{ep}/v3/kv/put")).body(
                        serde_json::json!({"key": b64.encode(&key), "value": b64.encode(&value)}).to_string(),
                    ),
                    _ => client
                        .post(format!("{ep}/v3/kv/range"))
                        .body(serde_json::json!({"key": b64.encode(&key)}).to_string()),
                };
                let t = Instant::now();
                let ok = match req.send().await {
                    Ok(r) => {
                        let good = r.status().is_success();
                        let body = r.bytes().await;
                        good && body.is_ok_and(|b| phase == "put" || target == "convoke" || b.windows(4).any(|w| w == b"\"kvs"))
                    }
                    Err(_) => false,
                };
                latencies.push(t.elapsed());
                if !ok {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    });
    let mut all: Vec<Duration> = futures::future::join_all(workers).await.concat();
    let seconds = started.elapsed().as_secs_f64();
    all.sort_unstable();
    let pct = |p: f64| all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1))).map_or(0.0, |d| d.as_secs_f64() * 1000.0);
    println!(
        "{}",
        serde_json::json!({
            "target": target, "phase": phase, "ops": ops, "seconds": seconds,
            "ops_per_s": ops as f64 / seconds, "p50_ms": pct(0.50), "p99_ms": pct(0.99),
            "errors": errors.load(Ordering::Relaxed),
        })
    );
}
