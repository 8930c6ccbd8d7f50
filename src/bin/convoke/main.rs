//! The `convoke` binary: `convoke run` runs one node, `convoke demo` a small cluster in one process.

mod admin;
mod data;
mod demo;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use convoke::node::{Node, ShutdownOutcome};
use convoke::settings::{Settings, Sources};
use convoke::{Termination, membership::ShutdownReason};
use tracing_subscriber::EnvFilter;

use admin::{Output, Request};

/// Exit code for bad configuration or usage.
const EXIT_CONFIG: u8 = 2;
/// Exit code for anything else that ends a node abnormally (downed, join gave up, fatal error).
const EXIT_FAILURE: u8 = 1;

#[derive(Parser, Debug)]
#[command(
    name = "convoke",
    version,
    about = "Cluster membership, management and bootstrap for Rust services",
    after_help = "Admin commands exit with 0 on success, 1 when the node cannot be reached or \
                  fails on its side (worth a retry), 2 on a usage error, 3 when what was asked \
                  about does not exist, 4 when the node refuses the request (credentials, \
                  read-only, bad input)."
)]
struct Cli {
    /// Log format on stderr; the level comes from RUST_LOG (default info).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// The management API the admin commands talk to.
    #[arg(long, global = true, env = "CONVOKE_URL", default_value = "http://127.0.0.1:8558")]
    url: String,
    /// A bearer token for the management API.
    #[arg(long, global = true, env = "CONVOKE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Output of the admin commands.
    #[arg(short = 'o', long = "output", global = true, value_enum, default_value_t = Output::Table)]
    output: Output,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one node until SIGTERM or SIGINT, which leave the cluster gracefully.
    Run {
        /// A TOML settings file.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Override one key: `--set cluster.port=25521`, `--set 'cluster.seed_nodes=["convoke://convoke@10.0.0.1:25520"]'`.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        /// Print the effective settings (file, then CONVOKE_* environment, then --set) and exit.
        #[arg(long)]
        print_config: bool,
    },
    /// List the members (admin).
    Members,
    /// Show one member (admin): its full address or system@host:port.
    Member {
        /// The member's address.
        address: String,
    },
    /// Make the node at --url join the cluster of ADDRESS (admin).
    Join {
        /// A member of the cluster to join.
        address: String,
    },
    /// Make a member leave gracefully (admin).
    Leave {
        /// The member's address.
        address: String,
    },
    /// Mark a member Down (admin).
    Down {
        /// The member's address.
        address: String,
    },
    /// Prepare the whole cluster for a full shutdown (admin).
    PrepareShutdown,
    /// List the entity types sharded on the node; with NAME, each member's shards and entities
    /// of that type (admin).
    Shards {
        /// An entity type.
        name: Option<String>,
        /// With NAME: only the node's own region, shard by shard.
        #[arg(long, requires = "name")]
        local: bool,
    },
    /// List the cluster singletons: where each runs, its state and since when (admin).
    Singletons,
    /// Show how cluster bootstrap sees the formation: lookup, contact points and their probes,
    /// the verdict and its reason (admin).
    BootstrapStatus,
    /// Read, write or delete a key of the replicated store (admin; `docs/data.md`).
    Data {
        #[command(subcommand)]
        command: DataCommand,
    },
    /// Start a cluster of N nodes on 127.0.0.1 in this process and show it forming.
    Demo {
        /// How many nodes.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=64))]
        nodes: u16,
    },
}

#[derive(Subcommand, Debug)]
enum DataCommand {
    /// Print the value under KEY (its bytes; siblings one per line); the context token goes to
    /// stderr. Exit status 3 when it holds no value.
    Get {
        /// The key.
        key: String,
        /// How many replicas must answer: one, quorum, all or a count (default: data.read).
        #[arg(long)]
        r: Option<String>,
    },
    /// Write VALUE (or standard input, for `-`) under KEY.
    Put {
        /// The key.
        key: String,
        /// The value; `-` reads it from standard input.
        value: String,
        /// The context token of the read this write supersedes.
        #[arg(long)]
        context: Option<String>,
        /// How many replicas must hold it: one, quorum, all or a count (default: data.write).
        #[arg(long)]
        w: Option<String>,
    },
    /// Delete KEY as the context saw it.
    Delete {
        /// The key.
        key: String,
        /// The context token of the read this delete supersedes.
        #[arg(long)]
        context: Option<String>,
        /// How many replicas must hold the delete (default: data.write).
        #[arg(long)]
        w: Option<String>,
    },
}

fn init_logging(format: LogFormat, default_level: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    // Colours only on a terminal: container and service logs get plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run { config, sets, print_config } => {
            let sources = Sources { file: config.as_deref(), env: true, sets };
            let settings = match Settings::load(&sources) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("convoke: {e}");
                    return ExitCode::from(EXIT_CONFIG);
                }
            };
            if print_config {
                print!("{}", settings.to_toml());
                return ExitCode::SUCCESS;
            }
            init_logging(cli.log_format, "info");
            runtime(Some(settings.runtime.worker_threads)).block_on(run(settings))
        }
        Command::Members => {
            admin_call(&cli.url, cli.token.as_deref(), cli.output, Request::Members)
        }
        Command::Member { address } => {
            admin_call(&cli.url, cli.token.as_deref(), cli.output, Request::Member(address))
        }
        Command::Join { address } => {
            admin_call(&cli.url, cli.token.as_deref(), cli.output, Request::Join(address))
        }
        Command::Leave { address } => {
            admin_call(&cli.url, cli.token.as_deref(), cli.output, Request::Leave(address))
        }
        Command::Down { address } => {
            admin_call(&cli.url, cli.token.as_deref(), cli.output, Request::Down(address))
        }
        Command::PrepareShutdown => {
            admin_call(&cli.url, cli.token.as_deref(), cli.output, Request::PrepareShutdown)
        }
        Command::Shards { name, local } => {
            let request = match name {
                None => Request::Shards,
                Some(name) if local => Request::ShardRegion(name),
                Some(name) => Request::ShardStats(name),
            };
            admin_call(&cli.url, cli.token.as_deref(), cli.output, request)
        }
        Command::Singletons => {
            admin_call(&cli.url, cli.token.as_deref(), cli.output, Request::Singletons)
        }
        Command::BootstrapStatus => {
            admin_call(&cli.url, cli.token.as_deref(), cli.output, Request::BootstrapStatus)
        }
        Command::Data { command } => {
            let request = match command {
                DataCommand::Get { key, r } => data::DataRequest::Get { key, r },
                DataCommand::Put { key, value, context, w } => {
                    let value = if value == "-" {
                        let mut bytes = Vec::new();
                        if let Err(e) =
                            std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)
                        {
                            eprintln!("convoke: cannot read the value from standard input: {e}");
                            return ExitCode::from(EXIT_CONFIG);
                        }
                        bytes
                    } else {
                        value.into_bytes()
                    };
                    data::DataRequest::Put { key, value, context, w }
                }
                DataCommand::Delete { key, context, w } => {
                    data::DataRequest::Delete { key, context, w }
                }
            };
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("tokio runtime")
                .block_on(data::run(&cli.url, cli.token.as_deref(), cli.output, request))
        }
        Command::Demo { nodes } => {
            // The demo prints the membership itself; logs only report errors unless RUST_LOG says.
            init_logging(cli.log_format, "error");
            runtime(None).block_on(demo::run(usize::from(nodes)))
        }
    }
}

fn admin_call(url: &str, token: Option<&str>, output: Output, request: Request) -> ExitCode {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(admin::run(url, token, output, request))
}

/// A multi-threaded runtime with `worker_threads` workers (tokio's default, one per core, for
/// `None`) beside the main thread, which waits for the node or the demo to stop.
fn runtime(worker_threads: Option<usize>) -> tokio::runtime::Runtime {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = worker_threads {
        builder.worker_threads(n);
    }
    builder.enable_all().build().expect("tokio runtime")
}

async fn run(settings: Settings) -> ExitCode {
    let node = match Node::start(&settings).await {
        Ok(n) => n,
        Err(e) => {
            tracing::error!("cannot start: {e}");
            eprintln!("convoke: {e}");
            return ExitCode::from(match e {
                convoke::StartError::Settings(_) | convoke::StartError::Join(_) => EXIT_CONFIG,
                _ => EXIT_FAILURE,
            });
        }
    };
    tokio::select! {
        signal = shutdown_signal() => {
            tracing::info!(%signal, "leaving the cluster");
            match node.shutdown().await {
                ShutdownOutcome::Left => ExitCode::SUCCESS,
                ShutdownOutcome::TimedOut => {
                    tracing::warn!("the graceful leave did not complete within cluster.leave_timeout");
                    ExitCode::SUCCESS
                }
                ShutdownOutcome::AlreadyTerminated(t) => exit_code(&t),
            }
        }
        t = node.terminated() => exit_code(&t),
    }
}

fn exit_code(t: &Termination) -> ExitCode {
    match t {
        Termination::Core(ShutdownReason::Left) | Termination::Stopped => ExitCode::SUCCESS,
        Termination::Core(reason) => {
            eprintln!("convoke: {reason}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

async fn shutdown_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => "SIGINT",
            _ = term.recv() => "SIGTERM",
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    }
}
