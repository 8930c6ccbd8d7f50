//! Running the `convoke` binary as a child process and reading its log.

use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::Notify;

/// A `convoke run` process whose stderr log is collected line by line.
pub struct Proc {
    /// The cluster port it listens on: the one it was given, or the one it bound (port 0).
    pub port: u16,
    pub child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    notify: Arc<Notify>,
    /// Set once the whole log has been read (the process closed its stderr).
    read_all: Arc<AtomicBool>,
}

/// How long a starting process may take to log its bound address.
const START_TIMEOUT: Duration = Duration::from_secs(30);

impl Proc {
    /// Starts `convoke run` with `--set` arguments and `cluster.port=0` on 127.0.0.1, and waits
    /// until it has logged the port it bound (`cluster node started ... node=<address>`). The
    /// port is never released between choosing and binding it, so no other test can take it.
    pub async fn start(sets: &[String]) -> Proc {
        let mut proc = Proc::spawn(&[], 0, sets);
        let address = proc.logged_field("cluster node started", "node=").await;
        proc.port = port_of(&address);
        assert_eq!(address, self::address(proc.port), "a node on 127.0.0.1");
        proc
    }

    /// Like [`Proc::start`], for the first node of a cluster that others join through
    /// `cluster.seed_nodes`: its own address is not known before it has bound its port, so instead
    /// of listing itself as the first seed node it is told to join itself (form the cluster)
    /// through its management API (`convoke join`, served on another port-0 listener).
    pub async fn start_forming(sets: &[String]) -> Proc {
        let mut sets = sets.to_vec();
        sets.extend(
            [
                "management.enabled=true",
                "management.hostname=\"127.0.0.1\"",
                "management.port=0",
                "management.read_only=false",
                "bootstrap.enabled=false",
            ]
            .map(str::to_owned),
        );
        let proc = Proc::start(&sets).await;
        proc.form().await;
        proc
    }

    /// Makes this node (management enabled) form a cluster of its own through its management
    /// API (`convoke join <own address>`).
    pub async fn form(&self) {
        let url = self.management_url().await;
        let own = address(self.port);
        let out = Command::new(env!("CARGO_BIN_EXE_convoke"))
            .args(["join", &own, "--url", &url])
            .output()
            .await
            .expect("run convoke join");
        assert!(
            out.status.success(),
            "convoke join {own} --url {url}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts `convoke run` with `--set` arguments on the fixed cluster `port`. Only for ports
    /// that no other test binds: a port on an address of its own (`127.0.N.x`, a network
    /// namespace), or the port of a process that was just killed, restarted on purpose.
    pub fn run(port: u16, sets: &[String]) -> Proc {
        Proc::run_wrapped(&[], port, sets)
    }

    /// Starts `convoke run` through `wrapper` (a command that ends by exec-ing its arguments,
    /// like `nsenter -t PID -n --`), so that the child process is the node itself.
    pub fn run_wrapped(wrapper: &[String], port: u16, sets: &[String]) -> Proc {
        assert_ne!(port, 0, "a node on port 0 is started with Proc::start");
        Proc::spawn(wrapper, port, sets)
    }

    fn spawn(wrapper: &[String], port: u16, sets: &[String]) -> Proc {
        Proc::spawn_program(env!("CARGO_BIN_EXE_convoke"), &["run"], wrapper, port, sets)
    }

    /// Starts example `name` (built by `cargo test` beside the binary) with the settings flags of
    /// `convoke run`, through `wrapper` if any, on cluster `port`; with port 0 it waits until the
    /// node has logged the port it bound, as [`Proc::start`] does.
    pub async fn example(name: &str, wrapper: &[String], port: u16, sets: &[String]) -> Proc {
        Proc::example_with_args(name, &[], wrapper, port, sets).await
    }

    /// As [`Proc::example`], with `args` before the `--set`s.
    pub async fn example_with_args(
        name: &str,
        args: &[&str],
        wrapper: &[String],
        port: u16,
        sets: &[String],
    ) -> Proc {
        let bin = std::path::Path::new(env!("CARGO_BIN_EXE_convoke"))
            .parent()
            .expect("the binary's directory")
            .join("examples")
            .join(name);
        assert!(bin.exists(), "{} is missing: `cargo test` builds the examples", bin.display());
        let mut proc = Proc::spawn_program(bin.to_str().unwrap(), args, wrapper, port, sets);
        if port == 0 {
            let address = proc.logged_field("cluster node started", "node=").await;
            proc.port = port_of(&address);
        }
        proc
    }

    fn spawn_program(
        bin: &str,
        pre_args: &[&str],
        wrapper: &[String],
        port: u16,
        sets: &[String],
    ) -> Proc {
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg(bin);
                cmd
            }
            None => Command::new(bin),
        };
        cmd.args(pre_args);
        for s in sets {
            cmd.arg("--set").arg(s);
        }
        cmd.arg("--set").arg(format!("cluster.port={port}"));
        // `counter=debug`: examples/counter.rs logs every message its entities handle.
        cmd.env("RUST_LOG", "info,convoke::singleton=debug,counter=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd.kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn convoke");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let notify = Arc::new(Notify::new());
        let stderr = child.stderr.take().unwrap();
        let read_all = Arc::new(AtomicBool::new(false));
        let (l, n, all) = (lines.clone(), notify.clone(), read_all.clone());
        tokio::spawn(async move {
            let mut r = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = r.next_line().await {
                l.lock().unwrap().push(line);
                n.notify_waiters();
            }
            all.store(true, Ordering::Release);
            n.notify_waiters();
        });
        Proc { port, child, lines, notify, read_all }
    }

    /// The value of the `key` field (`node=`, `url=`) of the first line containing `message`,
    /// waiting for that line.
    pub async fn logged_field(&self, message: &str, key: &str) -> String {
        self.wait_log(&[message], START_TIMEOUT).await;
        let log = self.log();
        let line = log.iter().find(|l| l.contains(message)).expect("waited for it");
        let value = line.split_whitespace().find_map(|w| w.strip_prefix(key));
        value.unwrap_or_else(|| panic!("no {key} in {line:?}")).to_owned()
    }

    /// The URL of the management server (`management.enabled=true`, e.g. on port 0), from its
    /// `management server listening` log line.
    pub async fn management_url(&self) -> String {
        self.logged_field("management server listening", "url=").await
    }

    /// Every line logged so far.
    pub fn log(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Whether some line contains every one of `parts`.
    pub fn logged(&self, parts: &[&str]) -> bool {
        self.count(parts) > 0
    }

    /// How many lines contain every one of `parts`.
    pub fn count(&self, parts: &[&str]) -> usize {
        self.lines.lock().unwrap().iter().filter(|l| parts.iter().all(|p| l.contains(p))).count()
    }

    /// Waits until a line contains every one of `parts`; panics with the log after `timeout`.
    pub async fn wait_log(&self, parts: &[&str], timeout: Duration) {
        self.wait_count(parts, 1, timeout).await;
    }

    /// Waits until `n` lines contain every one of `parts`; panics with the log after `timeout`.
    pub async fn wait_count(&self, parts: &[&str], n: usize, timeout: Duration) {
        let r = tokio::time::timeout(timeout, async {
            loop {
                let notified = self.notify.notified();
                if self.count(parts) >= n {
                    return;
                }
                notified.await;
            }
        })
        .await;
        if r.is_err() {
            panic!(
                "port {}: no log line with {parts:?} within {timeout:?}; log:\n{}",
                self.port,
                self.log().join("\n")
            );
        }
    }

    /// Sends SIGKILL.
    pub async fn kill9(&mut self) {
        self.child.kill().await.unwrap();
    }

    /// Sends SIGTERM.
    pub fn term(&self) {
        self.signal("TERM");
    }

    /// Sends the signal named `name` (`TERM`, `STOP`, `CONT`).
    pub fn signal(&self, name: &str) {
        let pid = self.child.id().expect("running").to_string();
        let flag = format!("-{name}");
        let ok = std::process::Command::new("kill").args([&flag, &pid]).status().unwrap().success();
        assert!(ok, "kill {flag} {pid}");
    }

    /// Waits for the process to exit and its log to be read to the end, and returns its exit
    /// code. A process still running after `timeout` fails the test with its log, so that the
    /// failure shows what the node was doing.
    pub async fn exit_code(&mut self, timeout: Duration) -> Option<i32> {
        let exited = async {
            let status = self.child.wait().await.unwrap();
            // The last lines may still be in the pipe when the process has gone.
            loop {
                let notified = self.notify.notified();
                if self.read_all.load(Ordering::Acquire) {
                    return status.code();
                }
                notified.await;
            }
        };
        match tokio::time::timeout(timeout, exited).await {
            Ok(code) => code,
            Err(_) => panic!(
                "the process did not exit and close its log within {timeout:?}; its log:\n{}",
                self.log().join("\n")
            ),
        }
    }
}

/// The address of the node on `port`.
pub fn address(port: u16) -> String {
    format!("convoke://convoke@127.0.0.1:{port}")
}

/// The port of a `convoke://system@host:port` address.
fn port_of(address: &str) -> u16 {
    let port = address.rsplit(':').next().unwrap_or_default();
    port.parse().unwrap_or_else(|_| panic!("no port in the address {address:?}"))
}

/// Seconds since the Unix epoch of a log line's leading RFC 3339 timestamp
/// (`2026-11-26T00:40:00.123456Z ...`).
pub fn timestamp(line: &str) -> f64 {
    let ts = line.split_whitespace().next().unwrap_or_default();
    let parse = |r: std::ops::Range<usize>| -> i64 {
        ts.get(r).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no timestamp in {line:?}"))
    };
    let (y, m, d) = (parse(0..4), parse(5..7), parse(8..10));
    // Days from the civil date (proleptic Gregorian), as in Howard Hinnant's algorithm.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs: f64 = ts.get(17..ts.len() - 1).and_then(|s| s.parse().ok()).unwrap();
    (days * 86_400 + parse(11..13) * 3600 + parse(14..16) * 60) as f64 + secs
}

/// Waits until the management API at `base` (`http://host:port`) shows `n` members, all Up;
/// panics after `timeout`.
pub async fn wait_members_up(client: &reqwest::Client, base: &str, n: usize, timeout: Duration) {
    let deadline = tokio::time::Instant::now() + timeout;
    let url = format!("{base}/cluster/members");
    loop {
        if let Ok(r) = client.get(&url).send().await
            && let Ok(body) = r.json::<serde_json::Value>().await
        {
            let members = body["members"].as_array().cloned().unwrap_or_default();
            if members.len() == n && members.iter().all(|m| m["status"] == "Up") {
                return;
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "{url} never showed {n} members Up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
