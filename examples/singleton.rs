//! A cluster singleton and its proxy, run as several processes.
//!
//! Every process starts a node with the same settings flags as `convoke run` and starts the
//! singleton "ticker": its one instance, on the oldest member, logs `tick` every second with its
//! address and answers `ticker.where` with it. Every process also asks the instance through a
//! proxy every few seconds and logs the answer. SIGTERM or Ctrl-C hands the instance over and
//! leaves the cluster.
//!
//! ```text
//! cargo run --release --example singleton -- --set cluster.port=25520 \
//!     --set 'cluster.seed_nodes=["convoke://convoke@127.0.0.1:25520"]' --set management.port=8558
//! cargo run --release --example singleton -- --set cluster.port=25521 \
//!     --set 'cluster.seed_nodes=["convoke://convoke@127.0.0.1:25520"]' --set management.port=8559
//! curl -s localhost:8558/cluster/singletons
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use convoke::Node;
use convoke::messaging::EndpointKey;
use convoke::settings::{Settings, Sources};
use convoke::singleton::SingletonContext;

/// The instance's endpoint: who runs the ticker, and how many ticks it has logged.
const WHERE: EndpointKey<(), (String, u64)> = EndpointKey::new("ticker.where");

/// The settings flags of `convoke run`.
#[derive(Parser, Debug)]
struct Args {
    /// A TOML settings file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// `KEY=VALUE` overrides, e.g. `--set cluster.port=25521`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// How often every process asks the ticker through the proxy.
    #[arg(long, default_value = "3s", value_parser = humantime_like)]
    ask_every: Duration,
}

fn humantime_like(s: &str) -> Result<Duration, String> {
    convoke::membership::config::text::parse_duration("--ask-every", s).map_err(|e| e.to_string())
}

/// The instance: a tick a second until it is told to stop, and answers on `WHERE`.
async fn ticker(ctx: SingletonContext, me: String) {
    tracing::info!(address = %me, "ticker instance started");
    let ticks = std::sync::atomic::AtomicU64::new(0);
    let tick = async {
        let mut every = tokio::time::interval(Duration::from_secs(1));
        loop {
            every.tick().await;
            let n = ticks.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            tracing::info!(address = %me, n, "tick");
        }
    };
    let serve = ctx.serve(&WHERE, 64, |_, ()| {
        let answer = (me.clone(), ticks.load(std::sync::atomic::Ordering::Relaxed));
        async move { answer }
    });
    tokio::select! {
        () = tick => {}
        r = serve => {
            if let Err(e) = r {
                tracing::error!(error = %e, "cannot serve ticker.where");
            }
        }
    }
    tracing::info!(address = %me, "ticker instance stopped");
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
            eprintln!("singleton: {e}");
            return ExitCode::from(2);
        }
    };
    let node = match Node::start(&settings).await {
        Ok(n) => n,
        Err(e) => {
            eprintln!("singleton: {e}");
            return ExitCode::from(2);
        }
    };
    let me = node.self_address().to_string();
    let started = node.singletons().start("ticker", None, move |ctx| ticker(ctx, me.clone()));
    if let Err(e) = started {
        eprintln!("singleton: {e}");
        return ExitCode::FAILURE;
    }
    let proxy = node.singletons().proxy(None, WHERE);
    let asking = async {
        let mut every = tokio::time::interval(args.ask_every);
        loop {
            every.tick().await;
            match proxy.ask(&(), Duration::from_secs(5)).await {
                Ok((host, ticks)) => tracing::info!(%host, ticks, "the ticker answered"),
                Err(e) => tracing::warn!(error = %e, "the ticker did not answer"),
            }
        }
    };
    tokio::select! {
        () = asking => ExitCode::SUCCESS,
        signal = shutdown_signal() => {
            tracing::info!(signal, "leaving the cluster");
            tracing::info!(outcome = ?node.shutdown().await, "left");
            ExitCode::SUCCESS
        }
        t = node.terminated() => {
            tracing::error!(reason = %t, "the node stopped");
            // The instance is told to stop when the node does; let it finish before exiting.
            node.singletons().hand_over_all().await;
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
