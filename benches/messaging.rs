//! Messaging figures between two processes on loopback, each next to a plain TCP baseline.
//!
//! The bench re-executes itself as a child process (`CONVOKE_BENCH_ROLE=server`) that starts a
//! node, joins this process's node, serves an echo endpoint, and also runs a plain tokio TCP echo
//! server (u32 length-prefixed frames, pipelined, one connection per client). Once both nodes are
//! Up, this process measures, interleaving convoke and TCP so both see the same machine load:
//!
//! - the round trip (p50, p99) of sequential asks of 100 B, against a TCP echo of 100 B;
//! - asks per second of 100 B and 10 KB with 1 and 64 in flight, against TCP echoes per second of
//!   the same size with as many in flight (64 in flight over one connection: pipelined, answered
//!   in order);
//! - the resident memory of an idle endpoint (no TCP counterpart).
//!
//! `cargo bench --bench messaging` prints each figure as the median of 5 runs, then a Markdown
//! table with the ratio convoke / plain TCP.

use std::io::{BufRead, BufReader as StdBufReader};
use std::net::Ipv4Addr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use convoke::Node;
use convoke::membership::{Address, MemberStatus, UniqueAddress};
use convoke::messaging::{EndpointKey, Messaging};
// The live tests' settings: 200 ms gossip and heartbeats, port 0, management off.
#[path = "../tests/support/mod.rs"]
mod support;

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

const RUNS: usize = 5;
const ROLE_VAR: &str = "CONVOKE_BENCH_ROLE";
const SEED_VAR: &str = "CONVOKE_BENCH_SEED";

const ECHO: EndpointKey<Vec<u8>, Vec<u8>> = EndpointKey::new("bench-echo");
/// Queue of the echo endpoint: more than the 64 asks in flight, so none is refused.
const ECHO_QUEUE: usize = 256;
const ASK_TIMEOUT: Duration = Duration::from_secs(10);

const SMALL: usize = 100;
const LARGE: usize = 10 * 1024;
const IN_FLIGHT: usize = 64;
const LATENCY_WARMUP: usize = 1_000;
const LATENCY_SAMPLES: usize = 20_000;
const RATE_WARMUP: Duration = Duration::from_millis(250);
const RATE_WINDOW: Duration = Duration::from_secs(2);
const ENDPOINTS: usize = 10_000;
const IO_BUFFER: usize = 64 * 1024;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap()
}

fn main() {
    if std::env::var(ROLE_VAR).as_deref() == Ok("server") {
        server();
    } else {
        parent();
    }
}

// ---- the child process -------------------------------------------------------------------------

/// Starts a node that joins the parent's, serves the echo endpoint and a TCP echo server, prints
/// `ready tcp=<port> cluster=<address>`, and runs until its stdin closes.
fn server() {
    let seed: Address = std::env::var(SEED_VAR)
        .expect("the parent passes its cluster address")
        .parse()
        .expect("a cluster address");
    runtime().block_on(async {
        let node = Node::start(&support::fast_settings()).await.expect("the server node starts");
        node.messaging()
            .serve(&ECHO, ECHO_QUEUE, |_from, payload: Vec<u8>| async move { payload })
            .expect("the echo endpoint registers");
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let tcp_port = listener.local_addr().unwrap().port();
        tokio::spawn(echo_server(listener));
        node.join_seed_nodes(vec![seed]).await.expect("the server node joins");
        println!("ready tcp={tcp_port} cluster={}", node.self_address());
        // The parent closes stdin when it ends (or dies); it also kills this process.
        let _ = tokio::task::spawn_blocking(|| {
            std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink())
        })
        .await;
        node.stop().await;
    });
}

async fn echo_server(listener: TcpListener) {
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(async move {
            // A client closing its connection ends the echo with an error; nothing to report.
            let _ = echo_connection(stream).await;
        });
    }
}

/// Echoes each frame back, in order; flushes when no whole frame is left to read, so pipelined
/// requests are answered in batches and a lone request at once.
async fn echo_connection(stream: TcpStream) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let (r, w) = stream.into_split();
    let mut r = BufReader::with_capacity(IO_BUFFER, r);
    let mut w = BufWriter::with_capacity(IO_BUFFER, w);
    let mut frame = Vec::new();
    loop {
        read_frame(&mut r, &mut frame).await?;
        write_frame(&mut w, &frame).await?;
        if !has_whole_frame(r.buffer()) {
            w.flush().await?;
        }
    }
}

async fn read_frame<R: AsyncReadExt + Unpin>(
    r: &mut R,
    frame: &mut Vec<u8>,
) -> std::io::Result<()> {
    let len = r.read_u32().await? as usize;
    frame.resize(len, 0);
    r.read_exact(frame).await?;
    Ok(())
}

async fn write_frame<W: AsyncWriteExt + Unpin>(w: &mut W, frame: &[u8]) -> std::io::Result<()> {
    w.write_u32(u32::try_from(frame.len()).expect("a frame under 4 GiB")).await?;
    w.write_all(frame).await
}

fn has_whole_frame(buffered: &[u8]) -> bool {
    buffered.len() >= 4 && {
        let len = u32::from_be_bytes(buffered[..4].try_into().unwrap()) as usize;
        buffered.len() >= 4 + len
    }
}

// ---- the parent process ------------------------------------------------------------------------

/// The child process; killed when dropped, also when the bench panics.
struct ChildGuard {
    child: Child,
    /// Held open so the child runs; closing it tells the child to stop.
    _stdin: Option<ChildStdin>,
}

impl ChildGuard {
    fn spawn(seed: &Address) -> Self {
        let exe = std::env::current_exe().expect("the bench's own path");
        let mut child = Command::new(exe)
            .env(ROLE_VAR, "server")
            .env(SEED_VAR, seed.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the server process starts");
        let stdin = child.stdin.take();
        Self { child, _stdin: stdin }
    }

    /// Reads the child's `ready` line: its TCP echo port.
    fn ready(&mut self) -> u16 {
        let stdout = self.child.stdout.take().expect("the child's stdout");
        let mut line = String::new();
        StdBufReader::new(stdout).read_line(&mut line).expect("the child's ready line");
        let port = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("tcp="))
            .unwrap_or_else(|| panic!("the server process did not start: {line:?}"));
        port.parse().expect("a port")
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until both nodes are Up and converged in `node`'s view; returns the other node.
async fn wait_for_peer(node: &Node) -> UniqueAddress {
    let mut rx = node.watch();
    let wait = async {
        loop {
            {
                let s = rx.borrow_and_update();
                let members = &s.state.members;
                if members.len() == 2
                    && members.iter().all(|m| m.status() == MemberStatus::Up)
                    && s.state.convergence
                {
                    let peer = members.iter().find(|m| m.node() != node.self_node());
                    return peer.expect("the other member").node().clone();
                }
            }
            rx.changed().await.expect("the node runs");
        }
    };
    tokio::time::timeout(Duration::from_secs(30), wait)
        .await
        .unwrap_or_else(|_| panic!("the cluster did not form: {:#?}", node.state()))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn p50_p99(mut rtts: Vec<Duration>) -> (Duration, Duration) {
    rtts.sort();
    (percentile(&rtts, 0.5), percentile(&rtts, 0.99))
}

/// Sequential asks of `size` bytes; returns (p50, p99).
async fn ask_round_trip(m: Messaging, peer: UniqueAddress, size: usize) -> (Duration, Duration) {
    let payload = vec![0xA5u8; size];
    let mut rtts = Vec::with_capacity(LATENCY_SAMPLES);
    for i in 0..LATENCY_WARMUP + LATENCY_SAMPLES {
        let sent = Instant::now();
        let reply = m.ask(&peer, &ECHO, &payload, ASK_TIMEOUT).await.expect("an ask");
        let rtt = sent.elapsed();
        assert_eq!(reply.len(), size);
        if i >= LATENCY_WARMUP {
            rtts.push(rtt);
        }
    }
    p50_p99(rtts)
}

async fn connect(
    port: u16,
) -> (BufReader<impl AsyncReadExt + Unpin>, BufWriter<impl AsyncWriteExt + Unpin>) {
    let stream =
        TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await.expect("the TCP echo server");
    stream.set_nodelay(true).unwrap();
    let (r, w) = stream.into_split();
    (BufReader::with_capacity(IO_BUFFER, r), BufWriter::with_capacity(IO_BUFFER, w))
}

/// Sequential TCP echoes of `size` bytes on one connection; returns (p50, p99).
async fn tcp_round_trip(port: u16, size: usize) -> (Duration, Duration) {
    let (mut r, mut w) = connect(port).await;
    let payload = vec![0xA5u8; size];
    let mut reply = Vec::with_capacity(size);
    let mut rtts = Vec::with_capacity(LATENCY_SAMPLES);
    for i in 0..LATENCY_WARMUP + LATENCY_SAMPLES {
        let sent = Instant::now();
        write_frame(&mut w, &payload).await.unwrap();
        w.flush().await.unwrap();
        read_frame(&mut r, &mut reply).await.unwrap();
        let rtt = sent.elapsed();
        assert_eq!(reply.len(), size);
        if i >= LATENCY_WARMUP {
            rtts.push(rtt);
        }
    }
    p50_p99(rtts)
}

/// Completions per second of `count` over `RATE_WINDOW`, after `RATE_WARMUP`.
async fn sample_rate(count: &AtomicU64) -> f64 {
    tokio::time::sleep(RATE_WARMUP).await;
    let (c0, t0) = (count.load(Ordering::Relaxed), Instant::now());
    tokio::time::sleep(RATE_WINDOW).await;
    let (c1, t1) = (count.load(Ordering::Relaxed), Instant::now());
    (c1 - c0) as f64 / (t1 - t0).as_secs_f64()
}

/// Asks per second of `size` bytes with `in_flight` asks outstanding (a task each).
async fn ask_rate(m: &Messaging, peer: &UniqueAddress, size: usize, in_flight: usize) -> f64 {
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..in_flight)
        .map(|_| {
            let (m, peer, count, stop) = (m.clone(), peer.clone(), count.clone(), stop.clone());
            tokio::spawn(async move {
                let payload = vec![0xA5u8; size];
                while !stop.load(Ordering::Relaxed) {
                    let reply = m.ask(&peer, &ECHO, &payload, ASK_TIMEOUT).await.expect("an ask");
                    assert_eq!(reply.len(), size);
                    count.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let rate = sample_rate(&count).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("an ask task panicked");
    }
    rate
}

/// TCP echoes per second of `size` bytes with `in_flight` requests outstanding on one connection.
/// One in flight is a plain request/response loop; more are pipelined: a writer task sends while
/// fewer than `in_flight` wait for their answer, and a reader task takes the answers in order.
async fn tcp_rate(port: u16, size: usize, in_flight: usize) -> f64 {
    let (mut r, mut w) = connect(port).await;
    let count = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    if in_flight == 1 {
        let count = count.clone();
        tasks.push(tokio::spawn(async move {
            let payload = vec![0xA5u8; size];
            let mut reply = Vec::with_capacity(size);
            loop {
                write_frame(&mut w, &payload).await?;
                w.flush().await?;
                read_frame(&mut r, &mut reply).await?;
                assert_eq!(reply.len(), size);
                count.fetch_add(1, Ordering::Relaxed);
            }
        }));
    } else {
        let window = Arc::new(Semaphore::new(in_flight));
        let writer_window = window.clone();
        tasks.push(tokio::spawn(async move {
            let payload = vec![0xA5u8; size];
            loop {
                let permit = match writer_window.try_acquire() {
                    Ok(p) => p,
                    Err(_) => {
                        // Everything allowed is written: send it before waiting for answers.
                        w.flush().await?;
                        writer_window.acquire().await.expect("the window stays open")
                    }
                };
                permit.forget();
                write_frame(&mut w, &payload).await?;
            }
        }));
        let count = count.clone();
        tasks.push(tokio::spawn(async move {
            let mut reply = Vec::with_capacity(size);
            loop {
                read_frame(&mut r, &mut reply).await?;
                assert_eq!(reply.len(), size);
                count.fetch_add(1, Ordering::Relaxed);
                window.add_permits(1);
            }
        }));
    }
    let rate = sample_rate(&count).await;
    // The loops end only by failing; one that ended while measured failed. Stopping one closes
    // the connection, which the other may see as an error: those are not failures.
    let failed: Vec<bool> = tasks.iter().map(tokio::task::JoinHandle::is_finished).collect();
    tasks.iter().for_each(tokio::task::JoinHandle::abort);
    for (t, failed) in tasks.into_iter().zip(failed) {
        match t.await {
            Ok(Err::<(), std::io::Error>(e)) if failed => panic!("the TCP echo client failed: {e}"),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            _ => {}
        }
    }
    rate
}

/// Registers `ENDPOINTS` idle endpoints and returns the resident memory they added, per endpoint,
/// and the resident memory once they are dropped again, compared with before (in bytes, may be
/// negative).
fn rss_per_endpoint(m: &Messaging, run: usize) -> (f64, i64) {
    let before = support::vm_rss();
    let endpoints: Vec<_> = (0..ENDPOINTS)
        .map(|i| {
            let key = EndpointKey::<Vec<u8>, Vec<u8>>::named(format!("idle-{run}-{i}"));
            m.endpoint(&key, 16).expect("an idle endpoint registers")
        })
        .collect();
    let during = support::vm_rss();
    drop(endpoints);
    let after = support::vm_rss();
    let per_endpoint = (during as f64 - before as f64) / ENDPOINTS as f64;
    (per_endpoint, after as i64 - before as i64)
}

fn median<T: PartialOrd + Copy>(mut v: Vec<T>) -> T {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// The figures of one payload size and number in flight.
#[derive(Default)]
struct Rates {
    convoke: Vec<f64>,
    tcp: Vec<f64>,
}

fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn parent() {
    let rt = runtime();
    let node = rt.block_on(Node::start(&support::fast_settings())).expect("the bench node starts");
    rt.block_on(node.join_seed_nodes(vec![node.self_address().clone()]))
        .expect("the bench node forms a cluster");
    let mut child = ChildGuard::spawn(node.self_address());
    let tcp_port = child.ready();
    let peer = rt.block_on(wait_for_peer(&node));
    let m = node.messaging().clone();
    // The first asks open the application connections.
    rt.block_on(ask_round_trip(m.clone(), peer.clone(), SMALL));

    // RSS per idle endpoint, first, before the throughput runs leave freed memory to reuse.
    // Dropping the endpoints gives their memory back to the system (glibc trims the top of the
    // main heap, where this thread allocates), so the figure is the median of 5 runs. Measured
    // on Linux/glibc: the first run adds about 3.8 KB per endpoint and keeps about 7.5 MB
    // resident after freeing (the registry's table, grown to 10,000 slots, keeps its capacity,
    // and the heap under it stays); each later run adds about 3.07 KB per endpoint and gives it
    // all back. The median is therefore the cost of an endpoint in a registry that has already
    // grown. Should RSS not shrink back at all (another allocator or libc), the later runs would
    // reuse the freed pages and show next to nothing, so the figure is then the first run alone.
    let mut per_endpoint = Vec::new();
    let mut shrank = true;
    for run in 0..RUNS {
        let (bytes, left) = rss_per_endpoint(&m, run);
        eprintln!(
            "RSS per idle endpoint, run {}: {bytes:.0} B ({left} B still resident after freeing)",
            run + 1
        );
        per_endpoint.push(bytes);
        if left as f64 > bytes * ENDPOINTS as f64 / 2.0 {
            shrank = false;
            break;
        }
    }
    let (rss, rss_note) = if shrank {
        (median(per_endpoint), format!("median of {RUNS} runs"))
    } else {
        (per_endpoint[0], "1 run: RSS did not shrink back".to_owned())
    };

    let configs = [(SMALL, 1), (SMALL, IN_FLIGHT), (LARGE, 1), (LARGE, IN_FLIGHT)];
    let mut rates: Vec<Rates> = configs.iter().map(|_| Rates::default()).collect();
    let (mut ask_p50, mut ask_p99, mut tcp_p50, mut tcp_p99) = (vec![], vec![], vec![], vec![]);
    let started = Instant::now();
    for run in 0..RUNS {
        let (p50, p99) =
            rt.block_on(rt.spawn(ask_round_trip(m.clone(), peer.clone(), SMALL))).unwrap();
        ask_p50.push(p50);
        ask_p99.push(p99);
        let (p50, p99) = rt.block_on(rt.spawn(tcp_round_trip(tcp_port, SMALL))).unwrap();
        tcp_p50.push(p50);
        tcp_p99.push(p99);
        for (&(size, in_flight), r) in configs.iter().zip(&mut rates) {
            r.convoke.push(rt.block_on(ask_rate(&m, &peer, size, in_flight)));
            r.tcp.push(rt.block_on(tcp_rate(tcp_port, size, in_flight)));
        }
        eprintln!("run {}/{RUNS} done after {:.0?}", run + 1, started.elapsed());
    }
    let stats = m.stats();
    assert_eq!(stats.overloaded, 0, "no ask may be refused: {stats:?}");

    let (ask_p50, ask_p99) = (median(ask_p50), median(ask_p99));
    let (tcp_p50, tcp_p99) = (median(tcp_p50), median(tcp_p99));
    let ratio = |a: f64, b: f64| format!("{:.2}", a / b);
    println!();
    println!(
        "Two processes on loopback; each figure is the median of {RUNS} runs. Round trips: \
         {LATENCY_SAMPLES} sequential requests after {LATENCY_WARMUP} of warm-up. Rates: \
         {RATE_WINDOW:?} after {RATE_WARMUP:?} of warm-up; 64 in flight is 64 tasks asking for \
         convoke, and 64 pipelined requests on one connection for TCP. Ratio: convoke / plain \
         TCP (above 1 is slower for a round trip, below 1 is slower for a rate)."
    );
    println!();
    println!("| figure | convoke | plain TCP | ratio |");
    println!("|---|---|---|---|");
    println!(
        "| round trip p50, 100 B | {} | {} | {} |",
        micros(ask_p50),
        micros(tcp_p50),
        ratio(ask_p50.as_secs_f64(), tcp_p50.as_secs_f64())
    );
    println!(
        "| round trip p99, 100 B | {} | {} | {} |",
        micros(ask_p99),
        micros(tcp_p99),
        ratio(ask_p99.as_secs_f64(), tcp_p99.as_secs_f64())
    );
    for (&(size, in_flight), r) in configs.iter().zip(rates) {
        let size = if size >= 1024 { format!("{} KB", size / 1024) } else { format!("{size} B") };
        let (c, t) = (median(r.convoke), median(r.tcp));
        println!(
            "| requests/s, {size}, {in_flight} in flight | {c:.0} | {t:.0} | {} |",
            ratio(c, t)
        );
    }
    println!("| RSS per idle endpoint ({ENDPOINTS} endpoints, {rss_note}) | {rss:.0} B | — | — |");

    rt.block_on(node.stop());
    drop(child);
}
