//! A sharded counter service, run as several processes.
//!
//! Every process starts a node with the same settings flags as `convoke run`, starts the sharded
//! entity type "counter" and serves a small HTTP front on `--http-port`:
//!
//! - `POST /counters/{id}/increment` (optional `?by=N`; with `--store` also `&request=ID`: an
//!   increment sent again with the same id after a failure is counted once) adds to counter `id` and answers
//!   `{"id": ..., "value": ..., "node": ...}`, `node` being the member whose entity answered;
//! - `GET /counters/{id}` answers the same without adding.
//!
//! Any process answers for any counter: the request goes to the node hosting the counter's shard.
//! With `--store` a counter keeps its value in the cluster's replicated store, as entity state
//! (`EntityContext::state`/`persist`; README, "Entities with state"): each process has a data
//! directory of its own (`--set data.enabled=true --set data.dir=...`), nothing is shared, and a
//! counter keeps its value across moves, `kill -9` and restarts of every process, as long as a
//! quorum of its replicas' disks remains (`data.replicas`). An increment is answered only once
//! its new value is durable at a quorum. With `--data-dir DIR` (one directory shared by all processes, on one machine) a counter keeps
//! its value in `DIR/<id>` and survives moves, crashes and restarts. The sharding runs a counter
//! in one process at a time; each message also reads and writes the file under an exclusive lock
//! on `DIR/<id>.lock`, so that a write a frozen process had begun cannot land over a newer one
//! when it resumes (docs/sharding-design.md, "Frozen hosts"). Without `--data-dir` the value
//! lives in memory and starts again from zero when its shard moves. Entities log `entity
//! started` and `entity stopped`, and at debug level (`RUST_LOG=info,counter=debug`) `entity
//! handled` for every message; with `--data-dir` a message logs `entity locked` once it holds the
//! lock, an increment `entity storing` before it writes the file, and `entity handled` once it is
//! stored, all three under the lock. SIGTERM or Ctrl-C hands the shards
//! off and leaves the cluster.
//!
//! ```text
//! cargo run --release --example counter -- --http-port 8080 --store \
//!     --set data.enabled=true --set data.dir=/tmp/counter-a \
//!     --set cluster.port=25520 --set management.port=8558 \
//!     --set 'cluster.seed_nodes=["convoke://convoke@127.0.0.1:25520"]'
//! cargo run --release --example counter -- --http-port 8081 --store \
//!     --set data.enabled=true --set data.dir=/tmp/counter-b \
//!     --set cluster.port=25521 --set management.port=8559 \
//!     --set 'cluster.seed_nodes=["convoke://convoke@127.0.0.1:25520"]'
//! curl -s -X POST localhost:8081/counters/apples/increment
//! curl -s localhost:8558/data/keys/entity/counter/apples
//! ```
//!
//! With a shared directory instead:
//!
//! ```text
//! cargo run --release --example counter -- --http-port 8080 --data-dir /tmp/counters \
//!     --set cluster.port=25520 --set management.port=8558 \
//!     --set 'cluster.seed_nodes=["convoke://convoke@127.0.0.1:25520"]'
//! cargo run --release --example counter -- --http-port 8081 --data-dir /tmp/counters \
//!     --set cluster.port=25521 --set management.port=8559 \
//!     --set 'cluster.seed_nodes=["convoke://convoke@127.0.0.1:25520"]'
//! curl -s -X POST localhost:8081/counters/apples/increment
//! curl -s localhost:8080/counters/apples
//! curl -s localhost:8558/cluster/shards/counter
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use clap::Parser;
use convoke::Node;
use convoke::settings::{Settings, Sources};
use convoke::sharding::{Entity, EntityContext, EntityRef, ShardingError};
use serde::{Deserialize, Serialize};

/// How long the front waits for a counter.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// The settings flags of `convoke run`, plus the front's.
#[derive(Parser, Debug)]
struct Args {
    /// A TOML settings file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// `KEY=VALUE` overrides, e.g. `--set cluster.port=25521`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// The port of the HTTP front (0 picks one, logged at start).
    #[arg(long, default_value_t = 8080)]
    http_port: u16,
    /// The address the HTTP front listens on (`0.0.0.0` in a container).
    #[arg(long, default_value = "127.0.0.1")]
    http_host: String,
    /// A directory shared by every process where counters keep their values.
    #[arg(long, conflicts_with = "store")]
    data_dir: Option<PathBuf>,
    /// Keep counters in the replicated store (needs `data.enabled` and a `data.dir` of this
    /// process's own).
    #[arg(long)]
    store: bool,
}

#[derive(Debug, Serialize, Deserialize)]
enum Op {
    /// Adds to the counter; with `--store`, at most once per request id.
    Add(u64, Option<String>),
    Get,
}

/// A counter's state in the store: its value and the ids of its latest increments, so that an
/// increment sent again after a failure (its outcome unknown) is not counted twice.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Stored {
    value: u64,
    #[serde(default)]
    recent: std::collections::VecDeque<String>,
}

/// How many increment ids a counter remembers.
const RECENT_REQUESTS: usize = 64;

/// The counter's value and the member hosting it, or why it could not be stored.
type Answer = Result<(u64, String), String>;

struct Counter {
    id: String,
    /// The value, in memory only (neither `--data-dir` nor `--store`).
    value: u64,
    /// `DIR/<id>` and its lock file `DIR/<id>.lock`.
    files: Option<(PathBuf, PathBuf)>,
    /// Whether the value is the entity's state in the replicated store (`--store`).
    store: bool,
    node: String,
}

/// How often a message waiting for a counter's lock tries again, at first and at most.
const LOCK_RETRY: (Duration, Duration) = (Duration::from_millis(2), Duration::from_millis(50));

impl Counter {
    fn new(id: &str, dir: Option<&Path>, store: bool, node: String) -> Self {
        // Ids become file names: the front lets only a safe alphabet through.
        let files = dir.map(|d| (d.join(id), d.join(format!("{id}.lock"))));
        tracing::info!(entity = %id, "entity started");
        Self { id: id.to_owned(), value: 0, files, store, node }
    }

    /// Applies `op` to the entity's state in the replicated store: the value is read when the
    /// entity starts, and an increment is answered only once the new value is durable at a
    /// quorum of its replicas.
    async fn apply_in_store(&self, op: &Op, ctx: &mut EntityContext) -> Result<u64, String> {
        let current = ctx.state::<Stored>().await.map_err(|e| e.to_string())?.clone();
        let value = match op {
            // Already counted: a retry of an increment whose answer was lost.
            Op::Add(_, Some(request)) if current.recent.contains(request) => current.value,
            Op::Add(n, request) => {
                let mut next = current;
                next.value = next.value.saturating_add(*n);
                if let Some(r) = request {
                    next.recent.push_back(r.clone());
                    if next.recent.len() > RECENT_REQUESTS {
                        next.recent.pop_front();
                    }
                }
                let value = next.value;
                ctx.persist(next).await.map_err(|e| e.to_string())?;
                value
            }
            Op::Get => current.value,
        };
        let kind = if matches!(op, Op::Add(..)) { "add" } else { "get" };
        tracing::debug!(entity = %self.id, op = kind, value, "entity handled");
        Ok(value)
    }

    /// Takes the counter's file lock (`flock`, exclusive), waiting while another process holds
    /// it. The sharding runs a counter in one process at a time, but a message that a process
    /// was handling when it froze completes when it resumes, after another process may have
    /// started the counter (docs/sharding-design.md, "Frozen hosts"): each message reads and
    /// writes the file under the lock, so such a late write can never land over a newer one.
    async fn lock(&self, path: &Path) -> Result<std::fs::File, String> {
        let why = |e: std::io::Error| format!("cannot lock counter {}: {e}", self.id);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(why)?;
        let mut wait = LOCK_RETRY.0;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(file),
                Err(std::fs::TryLockError::WouldBlock) => {
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(LOCK_RETRY.1);
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(why(e)),
            }
        }
    }

    /// The value in `file`: a missing file is 0, an unreadable one an error (never silently 0,
    /// which the next increment would write over the real value).
    async fn read(&self, file: &Path) -> Result<u64, String> {
        match tokio::fs::read_to_string(file).await {
            Ok(text) => {
                text.trim().parse().map_err(|e| format!("counter {} has a bad file: {e}", self.id))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(format!("cannot read counter {}: {e}", self.id)),
        }
    }

    async fn store(&self, file: &Path, value: u64) -> Result<(), String> {
        let tmp = file.with_extension("tmp");
        let written = async {
            tokio::fs::write(&tmp, value.to_string()).await?;
            tokio::fs::rename(&tmp, file).await
        };
        written.await.map_err(|e| format!("cannot store counter {}: {e}", self.id))
    }

    /// Applies `op` to the value in `file` under the counter's lock.
    async fn apply_stored(&self, op: &Op, file: &Path, lock: &Path) -> Result<u64, String> {
        let _held = self.lock(lock).await?;
        tracing::debug!(entity = %self.id, "entity locked");
        let current = self.read(file).await?;
        let value = match op {
            Op::Add(n, _) => {
                let value = current.saturating_add(*n);
                tracing::debug!(entity = %self.id, value, "entity storing");
                // Answered only once stored: a success reply is never lost with the process.
                self.store(file, value).await?;
                value
            }
            Op::Get => current,
        };
        // Logged while the lock is held: no other process can be handling this counter now.
        let kind = if matches!(op, Op::Add(..)) { "add" } else { "get" };
        tracing::debug!(entity = %self.id, op = kind, value, "entity handled");
        Ok(value)
    }
}

impl Entity for Counter {
    type Message = Op;
    type Reply = Answer;

    async fn handle(&mut self, op: Op, ctx: &mut EntityContext) -> Answer {
        let value = match &self.files {
            Some((file, lock)) => self.apply_stored(&op, file, lock).await?,
            None if self.store => self.apply_in_store(&op, ctx).await?,
            None => {
                if let Op::Add(n, _) = op {
                    self.value = self.value.saturating_add(n);
                }
                let kind = if matches!(op, Op::Add(..)) { "add" } else { "get" };
                tracing::debug!(entity = %self.id, op = kind, value = self.value, "entity handled");
                self.value
            }
        };
        Ok((value, self.node.clone()))
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        tracing::info!(entity = %self.id, "entity stopped");
    }
}

#[derive(Clone)]
struct Front {
    counters: EntityRef<Counter>,
}

#[derive(Serialize)]
struct Reply {
    id: String,
    value: u64,
    node: String,
}

#[derive(Deserialize)]
struct By {
    by: Option<u64>,
    /// An id for the increment (`--store`): sent again, it is counted once.
    request: Option<String>,
}

type HttpResult = Result<Json<Reply>, (StatusCode, Json<serde_json::Value>)>;

fn http_error(status: StatusCode, message: String) -> (StatusCode, Json<serde_json::Value>) {
    (status, Json(serde_json::json!({ "message": message })))
}

fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

async fn ask(front: &Front, id: String, op: Op) -> HttpResult {
    if !valid_id(&id) {
        return Err(http_error(
            StatusCode::BAD_REQUEST,
            format!("counter id {id:?}: expected 1 to 64 letters, digits, '-' or '_'"),
        ));
    }
    match front.counters.ask(&id, &op, ASK_TIMEOUT).await {
        Ok(Ok((value, node))) => Ok(Json(Reply { id, value, node })),
        Ok(Err(e)) => Err(http_error(StatusCode::INTERNAL_SERVER_ERROR, e)),
        Err(e @ ShardingError::BadMessage(_)) => {
            Err(http_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
        }
        // A full buffer, a moving shard, a timeout: the sender may try again.
        Err(e) => Err(http_error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
    }
}

async fn increment(
    State(front): State<Front>,
    UrlPath(id): UrlPath<String>,
    Query(by): Query<By>,
) -> HttpResult {
    if let Some(r) = &by.request
        && !valid_id(r)
    {
        return Err(http_error(
            StatusCode::BAD_REQUEST,
            format!("request id {r:?}: expected 1 to 64 letters, digits, '-' or '_'"),
        ));
    }
    ask(&front, id, Op::Add(by.by.unwrap_or(1), by.request)).await
}

async fn read(State(front): State<Front>, UrlPath(id): UrlPath<String>) -> HttpResult {
    ask(&front, id, Op::Get).await
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    let sources = Sources { file: args.config.as_deref(), env: true, sets: args.sets };
    let settings = match Settings::load(&sources) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("counter: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(dir) = &args.data_dir
        && let Err(e) = std::fs::create_dir_all(dir)
    {
        eprintln!("counter: cannot create --data-dir {}: {e}", dir.display());
        return ExitCode::from(2);
    }
    let http = match tokio::net::TcpListener::bind((args.http_host.as_str(), args.http_port)).await
    {
        Ok(l) => l,
        Err(e) => {
            eprintln!("counter: cannot listen on {}:{}: {e}", args.http_host, args.http_port);
            return ExitCode::from(2);
        }
    };
    let node = match Node::start(&settings).await {
        Ok(n) => n,
        Err(e) => {
            eprintln!("counter: {e}");
            return ExitCode::from(2);
        }
    };
    if args.store && !node.data().is_running() {
        eprintln!("counter: --store needs the replicated store: --set data.enabled=true");
        return ExitCode::from(2);
    }
    let (dir, me) = (args.data_dir.clone(), node.self_address().to_string());
    let store = args.store;
    let factory = move |id: &str| Counter::new(id, dir.as_deref(), store, me.clone());
    let counters = match node.sharding().start("counter", None, factory) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("counter: {e}");
            return ExitCode::FAILURE;
        }
    };
    let front = Front { counters };
    let app = axum::Router::new()
        .route("/counters/{id}/increment", post(increment))
        .route("/counters/{id}", get(read))
        .with_state(front);
    let http_addr = http.local_addr().map(|a| a.to_string()).unwrap_or_default();
    tracing::info!(http = %http_addr, "counter front listening");
    let serve = axum::serve(http, app);
    tokio::select! {
        r = serve => {
            tracing::error!(result = ?r, "the HTTP front stopped");
            ExitCode::FAILURE
        }
        signal = shutdown_signal() => {
            tracing::info!(signal, "leaving the cluster");
            tracing::info!(outcome = ?node.shutdown().await, "left");
            ExitCode::SUCCESS
        }
        t = node.terminated() => {
            tracing::error!(reason = %t, "the node stopped");
            ExitCode::FAILURE
        }
    }
}

async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}
