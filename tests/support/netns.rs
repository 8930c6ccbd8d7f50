//! A private routed network for multi-process fault injection: one network namespace per node
//! and one router namespace joining them, each node on its own subnet (`10.77.<k>.2/24`, router
//! `10.77.<k>.1`). A partition is a set of iptables DROP rules in the router's FORWARD chain;
//! healing flushes them. Nothing outside these namespaces is touched, and they disappear with
//! their processes. The test process itself stays in its own namespace, which has no route to
//! the nodes; [`Network::forward`] carries its connections to a server on a node's loopback.
//!
//! Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), `unshare`/`nsenter` (util-linux), `ip`
//! (iproute2) and `iptables`; `.ci/install-test-deps` installs the last two on Debian. Without
//! them the tests using this fail, naming what is missing: they never skip.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A namespace kept alive by a `sleep` process that `unshare -n` started inside it.
struct Namespace {
    holder: Child,
}

impl Namespace {
    fn new() -> Namespace {
        let holder = Command::new("unshare")
            .args(["--net", "--", "sleep", "100000"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run unshare (util-linux): {e}"));
        let ns = Namespace { holder };
        // `unshare` enters the new namespace and then execs sleep; wait until it has.
        let own = std::fs::read_link("/proc/self/ns/net").unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let theirs = std::fs::read_link(format!("/proc/{}/ns/net", ns.pid()));
            if theirs.as_ref().is_ok_and(|t| *t != own) {
                return ns;
            }
            assert!(
                Instant::now() < deadline,
                "unshare --net did not create a network namespace ({theirs:?}); this test needs \
                 root (CAP_SYS_ADMIN and CAP_NET_ADMIN)"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn pid(&self) -> u32 {
        self.holder.id()
    }

    /// `nsenter` arguments that run a command inside this namespace.
    fn enter(&self) -> Vec<String> {
        ["nsenter", "-t", &self.pid().to_string(), "-n", "--"].map(str::to_owned).to_vec()
    }

    /// Runs `cmd` inside this namespace; panics with its output when it fails.
    fn run(&self, cmd: &[&str]) -> String {
        let enter = self.enter();
        let out = Command::new(&enter[0])
            .args(&enter[1..])
            .args(cmd)
            .output()
            .unwrap_or_else(|e| panic!("cannot run nsenter (util-linux): {e}"));
        assert!(
            out.status.success(),
            "{cmd:?} failed in the test network ({}): {}{}; the partition tests need root, `ip` \
             (iproute2) and `iptables`, see .ci/install-test-deps",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// `n` nodes behind one router. Node `i` (from 0) has the address [`Network::ip`]`(i)`.
pub struct Network {
    router: Namespace,
    nodes: Vec<Namespace>,
}

impl Network {
    /// Creates the namespaces, links and routes, and checks that every node reaches every other.
    pub fn new(n: usize) -> Network {
        assert!(n < 250);
        install_tools();
        let router = Namespace::new();
        let nodes: Vec<Namespace> = (0..n).map(|_| Namespace::new()).collect();
        router.run(&["ip", "link", "set", "lo", "up"]);
        router.run(&["sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"]);
        for (i, node) in nodes.iter().enumerate() {
            let k = i + 1;
            let link = format!("r{k}");
            let pid = node.pid().to_string();
            router.run(&[
                "ip", "link", "add", &link, "type", "veth", "peer", "name", "eth0", "netns", &pid,
            ]);
            router.run(&["ip", "addr", "add", &format!("10.77.{k}.1/24"), "dev", &link]);
            router.run(&["ip", "link", "set", &link, "up"]);
            node.run(&["ip", "link", "set", "lo", "up"]);
            node.run(&["ip", "addr", "add", &format!("10.77.{k}.2/24"), "dev", "eth0"]);
            node.run(&["ip", "link", "set", "eth0", "up"]);
            node.run(&["ip", "route", "add", "default", "via", &format!("10.77.{k}.1")]);
        }
        // iptables must work before the test relies on it for a partition.
        router.run(&["iptables", "-S", "FORWARD"]);
        Network { router, nodes }
    }

    /// The address of node `i`.
    pub fn ip(&self, i: usize) -> String {
        format!("10.77.{}.2", i + 1)
    }

    /// A wrapper running a command inside node `i`'s namespace (for [`super::process::Proc`]).
    pub fn wrapper(&self, i: usize) -> Vec<String> {
        self.nodes[i].enter()
    }

    /// Runs `cmd` inside node `i`'s namespace and returns its standard output, or the error.
    pub fn output(&self, i: usize, cmd: &[&str]) -> Result<String, String> {
        let enter = self.nodes[i].enter();
        let out = Command::new(&enter[0])
            .args(&enter[1..])
            .args(cmd)
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr)))
        }
    }

    /// Drops every packet between a node of `a` and a node of `b`, both ways.
    pub fn partition(&self, a: &[usize], b: &[usize]) {
        for &x in a {
            for &y in b {
                for (from, to) in [(x, y), (y, x)] {
                    let (s, d) = (self.ip(from), self.ip(to));
                    self.router
                        .run(&["iptables", "-I", "FORWARD", "-s", &s, "-d", &d, "-j", "DROP"]);
                }
            }
        }
    }

    /// Removes every partition.
    pub fn heal(&self) {
        self.router.run(&["iptables", "-F", "FORWARD"]);
    }

    /// The router's FORWARD rules, for the record.
    pub fn rules(&self) -> String {
        self.router.run(&["iptables", "-S", "FORWARD"])
    }

    /// Carries every connection to the returned port on 127.0.0.1 of the test's own namespace
    /// to `127.0.0.1:port` inside node `i`'s namespace, so that the test reaches a server that
    /// listens on the node's loopback (an HTTP front, the management API) with an ordinary
    /// client. Only a thread of the test process enters the node's namespace, to open the
    /// connections there; no interface, address or route is added to either namespace. It
    /// stops when dropped.
    pub fn forward(&self, i: usize, port: u16) -> Forward {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a forwarding port");
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let path = format!("/proc/{}/ns/net", self.nodes[i].pid());
        let ns = std::fs::File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (entered, entering) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            // setns(2) moves only this thread: the sockets it opens from now on are in node i's
            // namespace, while the listener, opened before, stays in the test's.
            let net = Some(rustix::thread::LinkNameSpaceType::Network);
            let moved = rustix::thread::move_into_link_name_space(ns.as_fd(), net);
            drop(ns);
            let failed = moved.is_err();
            let _ = entered.send(moved);
            if failed {
                return;
            }
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let target = SocketAddr::from(([127, 0, 0, 1], port));
                tokio::pin!(stopped);
                loop {
                    tokio::select! {
                        _ = &mut stopped => return,
                        accepted = listener.accept() => {
                            let Ok((mut inbound, _)) = accepted else { continue };
                            // Spawned on this thread's runtime: the connection opens in the
                            // node's namespace. A refused one closes the client's at once.
                            tokio::spawn(async move {
                                let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await
                                else {
                                    return;
                                };
                                let _ = inbound.set_nodelay(true);
                                let _ = outbound.set_nodelay(true);
                                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound)
                                    .await;
                            });
                        }
                    }
                }
            });
        });
        let moved = entering.recv().expect("the forwarding thread reports");
        moved.unwrap_or_else(|e| panic!("setns into {path}: {e}; this test needs root"));
        Forward { addr, stop: Some(stop), thread: Some(thread) }
    }
}

/// A running [`Network::forward`]; dropping it closes the port and every connection through it.
pub struct Forward {
    /// The forwarding port's address, on 127.0.0.1 of the test's own namespace.
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Forward {
    /// `http://<addr>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Installs `ip` and `iptables` through the project's script when they are missing, so the README's
/// test command works on a fresh Debian machine (as root, which the namespaces need anyway).
fn install_tools() {
    let present = |tool: &str| {
        std::process::Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if ["ip", "iptables", "nsenter"].iter().all(|t| present(t)) {
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/install-test-deps");
    let status = std::process::Command::new("bash").arg(script).status().expect("run bash");
    assert!(status.success(), "{script} could not install ip/iptables (needs root and apt-get)");
}

/// One node's view: every member's address and status, and the unreachable addresses.
pub type View = (Vec<(String, String)>, Vec<String>);

impl Network {
    /// Node `i`'s view through its management API on 127.0.0.1:8558 of its namespace
    /// (`convoke members -o json`).
    pub fn members(&self, i: usize) -> Result<View, String> {
        let bin = env!("CARGO_BIN_EXE_convoke");
        let out =
            self.output(i, &[bin, "members", "-o", "json", "--url", "http://127.0.0.1:8558"])?;
        let v: serde_json::Value = serde_json::from_str(&out).map_err(|e| format!("{e}: {out}"))?;
        let list = |key: &str| v[key].as_array().cloned().unwrap_or_default();
        let members = list("members")
            .iter()
            .map(|m| {
                (
                    m["node"].as_str().unwrap_or("").to_owned(),
                    m["status"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect();
        let unreachable = list("unreachable")
            .iter()
            .map(|u| u["node"].as_str().unwrap_or("").to_owned())
            .collect();
        Ok((members, unreachable))
    }

    /// Waits until node `i` sees exactly the members `expected`, all Up and none unreachable.
    pub async fn wait_all_up(&self, i: usize, expected: &[String], timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut want = expected.to_vec();
        want.sort();
        loop {
            let seen = self.members(i);
            if let Ok((members, unreachable)) = &seen {
                let mut up: Vec<String> =
                    members.iter().filter(|(_, s)| s == "Up").map(|(a, _)| a.clone()).collect();
                up.sort();
                if up == want && members.len() == want.len() && unreachable.is_empty() {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "node {i} ({}) did not see {want:?} all Up within {timeout:?}; last view: {seen:?}",
                self.ip(i)
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}
