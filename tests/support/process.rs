//! Running the `convoke` binary as a child process and reading its log.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::Notify;

/// A `convoke run` process whose stderr log is collected line by line.
pub struct Proc {
    pub port: u16,
    pub child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    notify: Arc<Notify>,
}

impl Proc {
    /// Starts `convoke run` with `--set` arguments.
    pub fn run(port: u16, sets: &[String]) -> Proc {
        Proc::run_wrapped(&[], port, sets)
    }

    /// Starts `convoke run` through `wrapper` (a command that ends by exec-ing its arguments,
    /// like `nsenter -t PID -n --`), so that the child process is the node itself.
    pub fn run_wrapped(wrapper: &[String], port: u16, sets: &[String]) -> Proc {
        let bin = env!("CARGO_BIN_EXE_convoke");
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg(bin);
                cmd
            }
            None => Command::new(bin),
        };
        cmd.arg("run");
        for s in sets {
            cmd.arg("--set").arg(s);
        }
        cmd.arg("--set").arg(format!("cluster.port={port}"));
        cmd.env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd.kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn convoke");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let notify = Arc::new(Notify::new());
        let stderr = child.stderr.take().unwrap();
        let (l, n) = (lines.clone(), notify.clone());
        tokio::spawn(async move {
            let mut r = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = r.next_line().await {
                l.lock().unwrap().push(line);
                n.notify_waiters();
            }
            n.notify_waiters();
        });
        Proc { port, child, lines, notify }
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

    /// Waits for the process to exit and returns its exit code.
    pub async fn exit_code(&mut self, timeout: Duration) -> Option<i32> {
        tokio::time::timeout(timeout, self.child.wait())
            .await
            .expect("process exits")
            .unwrap()
            .code()
    }
}

/// The address of the node on `port`.
pub fn address(port: u16) -> String {
    format!("convoke://convoke@127.0.0.1:{port}")
}
