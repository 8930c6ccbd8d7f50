//! The management API of live nodes over real HTTP: downing through the API, readiness, the event
//! stream, slowloris protection and the admin CLI.

mod support;

use std::time::{Duration, Instant};

use convoke::Node;
use convoke::settings::Settings;
use support::{all_up, fast_settings, wait_for};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const T: Duration = Duration::from_secs(30);

fn settings() -> Settings {
    let mut s = fast_settings();
    s.management.enabled = true;
    s.management.port = 0;
    s.management.read_only = false;
    s.management.limits.header_read_timeout = Duration::from_secs(2);
    s
}

fn url(node: &Node) -> String {
    format!("http://{}", node.management_addr().unwrap())
}

async fn start(n: usize) -> Vec<Node> {
    support::start_nodes(&settings(), n).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_flips_to_200_when_up_and_a_put_down_removes_the_member_everywhere_with_sse_events() {
    let _live = support::live().await;
    let nodes = start(3).await;
    let http = reqwest::Client::new();
    let ready = http.get(format!("{}/ready", url(&nodes[0]))).send().await.unwrap();
    assert_eq!(ready.status(), 503, "not joined yet");
    assert!(ready.text().await.unwrap().contains("Removed"));
    assert_eq!(http.get(format!("{}/alive", url(&nodes[0]))).send().await.unwrap().status(), 200);

    // An SSE client on node 0 from the start.
    let mut sse =
        http.get(format!("{}/cluster/domain-events", url(&nodes[0]))).send().await.unwrap();
    assert_eq!(sse.status(), 200);
    support::join_through_first(&nodes).await;
    for n in &nodes {
        let r = http.get(format!("{}/ready", url(n))).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.text().await.unwrap(), "OK");
    }

    // Down node 2 through node 1's API, exactly as `curl -X PUT .../cluster/members/<addr> -d operation=down`.
    let victim = nodes[2].self_address().to_string();
    let resp = http
        .put(format!("{}/cluster/members/{victim}", url(&nodes[1])))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("operation=down")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.unwrap().contains(&format!("Downing {victim}")));
    for n in &nodes[..2] {
        wait_for(n, T, "the downed member removed", |s| all_up(s, 2)).await;
    }

    // The event stream saw every node Up and the victim removed.
    let mut text = String::new();
    let deadline = Instant::now() + T;
    while !(text.contains("MemberRemoved")
        && nodes.iter().all(|n| text.contains(&format!("\"address\":\"{}\"", n.self_address()))))
    {
        assert!(Instant::now() < deadline, "events so far:\n{text}");
        match tokio::time::timeout(Duration::from_secs(5), sse.chunk()).await {
            Ok(Ok(Some(chunk))) => text.push_str(&String::from_utf8_lossy(&chunk)),
            other => panic!("stream ended: {other:?}; events so far:\n{text}"),
        }
    }
    let ups = text.lines().filter(|l| l.starts_with("event:") && l.contains("MemberUp")).count();
    assert!(ups >= 3, "{text}");
    assert!(text.contains("\"previousStatus\":\"Down\""), "{text}");
    for n in &nodes[..2] {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sending_headers_one_byte_per_second_is_cut_off_while_others_are_served() {
    let _live = support::live().await;
    let nodes = start(1).await;
    support::join_through_first(&nodes).await;
    let addr = nodes[0].management_addr().unwrap();
    let slow = tokio::spawn(async move {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let started = Instant::now();
        let request = b"GET /cluster/members HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
        for b in request {
            if s.write_all(&[*b]).await.is_err() {
                return (started.elapsed(), true);
            }
            // One byte per second is the attack being modelled.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let mut buf = [0u8; 256];
            if let Ok(Ok(0)) =
                tokio::time::timeout(Duration::from_millis(1), s.read(&mut buf)).await
            {
                return (started.elapsed(), true);
            }
        }
        (started.elapsed(), false)
    });
    // Meanwhile ordinary requests are answered promptly.
    let http = reqwest::Client::new();
    for _ in 0..5 {
        let t = Instant::now();
        let r = http.get(format!("http://{addr}/cluster/members")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert!(t.elapsed() < Duration::from_secs(2));
    }
    let (after, cut) = slow.await.unwrap();
    assert!(cut, "the slow client was never cut off");
    assert!(after < Duration::from_secs(10), "cut off only after {after:?}");
    nodes[0].stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_cli_prints_tables_and_json_and_explains_errors() {
    let _live = support::live().await;
    let nodes = start(2).await;
    support::join_through_first(&nodes).await;
    let bin = env!("CARGO_BIN_EXE_convoke");
    let u = url(&nodes[0]);
    let run = |args: &[&str]| {
        let out = std::process::Command::new(bin).args(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, _) = run(&["members", "--url", &u]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("ADDRESS"), "{out}");
    for n in &nodes {
        assert!(out.contains(&n.self_address().to_string()), "{out}");
    }
    assert!(out.contains("(this node)") && out.contains('*'), "{out}");
    assert!(out.contains("VERSION") && out.contains("0.0.0"), "the app version column: {out}");
    let (code, out, _) = run(&["members", "--url", &u, "-o", "json"]);
    assert_eq!(code, Some(0));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["members"].as_array().unwrap().len(), 2);
    let second = nodes[1].self_address().to_string();
    let (code, out, _) = run(&["member", &second, "--url", &u]);
    assert_eq!(code, Some(0));
    assert!(out.contains("Up") && out.contains("version 0.0.0"), "{out}");
    let (code, _, err) = run(&["member", "convoke@nowhere:1", "--url", &u]);
    assert_eq!(code, Some(3), "a missing member exits 3");
    assert!(err.contains("not found"), "{err}");
    // Without sharding or singletons the lists are empty and a named type is missing.
    let (code, out, _) = run(&["shards", "--url", &u]);
    assert_eq!((code, out.as_str()), (Some(0), "ENTITY TYPE\n"));
    let (code, _, err) = run(&["shards", "counter", "--url", &u]);
    assert_eq!(code, Some(3));
    assert!(err.contains("Shard Region counter is not started"), "{err}");
    let (code, out, _) = run(&["singletons", "--url", &u, "-o", "json"]);
    assert_eq!(code, Some(0));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["singletons"].as_array().map(Vec::len), Some(0), "{out}");
    let (code, out, _) = run(&["bootstrap-status", "--url", &u, "-o", "json"]);
    assert_eq!(code, Some(0));
    let phase = serde_json::from_str::<serde_json::Value>(&out).unwrap()["phase"].clone();
    let (code, out, _) = run(&["bootstrap-status", "--url", &u]);
    assert_eq!(code, Some(0));
    let phase = phase.as_str().expect("a phase");
    assert!(out.starts_with(&format!("PHASE          {phase}\n")), "{out}");
    assert!(out.contains("CONTACT POINT"), "{out}");
    let (code, _, err) = run(&["members", "--url", "http://127.0.0.1:1"]);
    assert_eq!(code, Some(1), "no answer exits 1");
    assert!(err.contains("cannot reach the management API"), "{err}");
    let (code, out, _) = run(&["down", &second, "--url", &u]);
    assert_eq!(code, Some(0));
    assert!(out.contains("Downing"), "{out}");
    wait_for(&nodes[0], T, "the downed member removed", |s| all_up(s, 1)).await;

    // Read-only and authenticated nodes explain themselves.
    let mut s = settings();
    s.management.read_only = true;
    let ro = Node::start(&s).await.unwrap();
    let (code, _, err) = run(&["down", "convoke@x:1", "--url", &url(&ro)]);
    assert_eq!(code, Some(4), "a refused request exits 4");
    assert!(err.contains("read_only"), "{err}");
    let mut s = settings();
    s.management.auth = Some(convoke::settings::AuthSettings {
        bearer_tokens: vec!["tok".into()],
        ..Default::default()
    });
    let authed = Node::start(&s).await.unwrap();
    let (code, _, err) = run(&["members", "--url", &url(&authed)]);
    assert_eq!(code, Some(4));
    assert!(err.contains("--token"), "{err}");
    let (code, _, _) = run(&["members", "--url", &url(&authed), "--token", "tok"]);
    assert_eq!(code, Some(0));
    for n in [&nodes[0], &ro, &authed] {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tls_configured_the_api_is_served_over_https_only() {
    let _live = support::live().await;
    let dir = tempfile::tempdir().unwrap();
    let certified =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .unwrap();
    let cert_path = dir.path().join("cert.pem");
    let key_path = dir.path().join("key.pem");
    std::fs::write(&cert_path, certified.cert.pem()).unwrap();
    std::fs::write(&key_path, certified.signing_key.serialize_pem()).unwrap();
    let mut s = settings();
    s.management.tls = Some(convoke::settings::TlsSettings {
        cert_path: cert_path.display().to_string(),
        key_path: key_path.display().to_string(),
    });
    let node = Node::start(&s).await.unwrap();
    let addr = node.management_addr().unwrap();

    let trusting = reqwest::Client::builder()
        .add_root_certificate(
            reqwest::Certificate::from_pem(certified.cert.pem().as_bytes()).unwrap(),
        )
        .build()
        .unwrap();
    let alive = trusting.get(format!("https://{addr}/alive")).send().await.unwrap();
    assert_eq!(alive.status(), 200);
    let members: serde_json::Value = trusting
        .get(format!("https://{addr}/cluster/members"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(members["selfNode"], node.self_address().to_string());

    // A client that does not trust the certificate fails the handshake, and plain HTTP gets no
    // HTTP answer.
    let untrusting = reqwest::Client::new();
    assert!(untrusting.get(format!("https://{addr}/alive")).send().await.is_err());
    assert!(untrusting.get(format!("http://{addr}/alive")).send().await.is_err());

    // The server still serves after the failed attempts.
    let again = trusting.get(format!("https://{addr}/alive")).send().await.unwrap();
    assert_eq!(again.status(), 200);
    node.shutdown().await;
}
