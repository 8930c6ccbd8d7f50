//! The composition root: [`Node::start`] checks the settings once, builds the membership core,
//! binds and starts the transport, the lease worker and the driver, then the management server
//! and bootstrap, and hands the parts to a [`Node`]. Nothing else in the crate assembles a node,
//! and no part reaches back into the handle.

use std::net::SocketAddr;

use convoke_membership::{Address, Cluster, JoinError, Uid, UniqueAddress};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::control::JoinCommandError;
use crate::driver::{self, Network};
use crate::health::HealthChecks;
use crate::lease::LeaseRuntime;
use crate::management::{self, TlsError};
use crate::messaging::{Messaging, MessagingCounters};
use crate::metrics::Metrics;
use crate::node::{Node, NodeParts};
use crate::settings::{ManagementSettings, Settings, SettingsError};
use crate::singleton::Singletons;
use crate::transport::{Transport, TransportConfig};

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The settings are invalid.
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// The transport could not bind its listener.
    #[error("cannot bind the cluster transport to {addr}: {source}")]
    Bind {
        /// What it tried to bind.
        addr: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The configured seed nodes were refused.
    #[error(transparent)]
    Join(#[from] JoinError),
    /// The replicated store could not start.
    #[error(transparent)]
    Data(#[from] crate::data::DataStartError),
    /// The management server could not start.
    #[error("cannot start the management server on {addr}: {source}")]
    Management {
        /// What it tried to bind.
        addr: String,
        /// Why it failed.
        source: ManagementError,
    },
}

/// Why the management server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManagementError {
    /// Its TLS certificate or key could not be loaded.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// Its listener could not be bound.
    #[error(transparent)]
    Bind(#[from] std::io::Error),
}

impl Node {
    /// Binds the transport, starts the driver, the management server and bootstrap, and when
    /// `cluster.seed_nodes` is set, joins them.
    ///
    /// # Errors
    /// Invalid settings, a port that cannot be bound, or seed nodes of another system.
    pub async fn start(settings: &Settings) -> Result<Node, StartError> {
        let mut resolved = settings.clone();
        resolved.resolve_host_address()?;
        let settings = &resolved;
        settings.validate()?;
        let c = &settings.cluster;
        let bind_host = if c.bind_hostname.is_empty() { &c.hostname } else { &c.bind_hostname };
        let bind = host_port(bind_host, c.bind_port.unwrap_or(c.port));
        let listener = TcpListener::bind(&bind)
            .await
            .map_err(|source| StartError::Bind { addr: bind.clone(), source })?;
        let local =
            listener.local_addr().map_err(|source| StartError::Bind { addr: bind, source })?;
        let port = if c.port == 0 { local.port() } else { c.port };
        let address = Address::new(&c.core.system_name, &c.hostname, port).map_err(|e| {
            SettingsError::new("cluster.hostname", format!("{:?}", c.hostname), e.to_string())
        })?;
        let self_node = UniqueAddress::new(address, random_uid());
        // Checked with the rest of the settings above.
        let mut core_config = c.core.clone();
        core_config.seed = random_u64();
        // Every node must cut entity ids into the same shards.
        core_config.extra_compat_keys.insert(
            "sharding.number_of_shards".to_owned(),
            settings.sharding.number_of_shards.to_string(),
        );
        let started_at = tokio::time::Instant::now();
        let now = started_at.into_std();
        let core = Cluster::new(core_config, self_node.clone(), now, driver::wall_clock())
            .map_err(SettingsError::from)?;
        let lease = LeaseRuntime::from_settings(settings, &self_node)?;

        let transport_config = TransportConfig {
            system_name: c.core.system_name.clone(),
            settings: c.transport.clone(),
            tls: c.tls.clone(),
        };
        let (transport, inbound) = Transport::start(listener, self_node.clone(), transport_config)?;
        let messaging_counters = MessagingCounters::default();
        let metrics = Metrics::new(Some(transport.clone()), Some(messaging_counters.clone()));
        let network = Network { transport: transport.clone(), inbound };
        let control = driver::spawn(core, Some(network), lease, metrics.clone());
        crate::rolling_update::spawn(settings, &control, &metrics)?;
        let messaging = Messaging::start(
            self_node.clone(),
            transport.clone(),
            &control,
            c.transport.max_frame_size,
            messaging_counters,
        )
        .expect("a new transport's application frames are not taken yet");
        let singletons = Singletons::new(
            messaging.clone(),
            control.clone(),
            settings.singleton.clone(),
            settings.singleton.removal_margin(&c.core),
        );
        let data = crate::data::Data::start(&settings.data, &messaging, &control)?;
        let sharding = crate::sharding::Sharding::new(
            messaging.clone(),
            control.clone(),
            singletons.clone(),
            settings.sharding.clone(),
            &c.core,
            settings.singleton.removal_margin(&c.core),
            data.clone(),
        );
        tracing::info!(node = %self_node.address, uid = %self_node.uid, listen = %local, "cluster node started");

        let management = if settings.management.enabled {
            Some(bind_management(&settings.management).await?)
        } else {
            None
        };
        if !c.seed_nodes.is_empty() {
            let seeds = c.seed_nodes.iter().filter_map(|s| s.parse().ok()).collect();
            control.join_seed_nodes(seeds).await.map_err(|e| match e {
                JoinCommandError::Refused(e) => StartError::Join(e),
                JoinCommandError::Stopped(_) => StartError::Join(JoinError::NoSeedNodes),
            })?;
        }
        let management_addr = management.as_ref().map(|m| m.local);
        let bootstrap =
            crate::bootstrap::start(settings, management_addr, &self_node.address, &control)?;
        let handle = management::Handle {
            self_node,
            control: control.clone(),
            bootstrap,
            health: HealthChecks::default(),
            metrics,
            started_at,
            singletons: singletons.statuses(),
            sharding: Some(sharding.clone()),
            data: data.clone(),
        };
        let (management_stop, stopped) = watch::channel(());
        if let Some(m) = management {
            m.serve(handle.clone(), &settings.management, stopped);
        }
        Ok(Node::new(NodeParts {
            handle,
            transport,
            messaging,
            singletons,
            sharding,
            data,
            leave_timeout: c.leave_timeout,
            management_addr,
            management_stop,
        }))
    }
}

/// A bound management listener, not yet serving: bootstrap needs its address first.
struct BoundManagement {
    listener: TcpListener,
    local: SocketAddr,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

async fn bind_management(m: &ManagementSettings) -> Result<BoundManagement, StartError> {
    let host = if m.bind_hostname.is_empty() { &m.hostname } else { &m.bind_hostname };
    let bind = host_port(host, m.bind_port.unwrap_or(m.port));
    let fail = |e: ManagementError| StartError::Management { addr: bind.clone(), source: e };
    let tls = match &m.tls {
        Some(t) => Some(
            management::tls_acceptor(&t.cert_path, &t.key_path)
                .map_err(|e| fail(ManagementError::Tls(e)))?,
        ),
        None => None,
    };
    let listener = TcpListener::bind(&bind).await.map_err(|e| fail(e.into()))?;
    let local = listener.local_addr().map_err(|e| fail(e.into()))?;
    Ok(BoundManagement { listener, local, tls })
}

impl BoundManagement {
    /// Serves the routes of `handle` until the node terminates or its last handle is dropped
    /// (`stopped` closes).
    fn serve(
        self,
        handle: management::Handle,
        m: &ManagementSettings,
        mut stopped: watch::Receiver<()>,
    ) {
        let local = self.local;
        if !m.read_only && m.auth.is_none() && !local.ip().is_loopback() {
            tracing::warn!(
                %local,
                "the management API accepts write operations without authentication on a non-loopback address; \
                 set [management.auth] or management.read_only = true"
            );
        }
        let control = handle.control.clone();
        let router = management::router(handle, m);
        let shutdown = async move {
            tokio::select! {
                _ = stopped.changed() => {}
                _ = control.terminated() => {}
            }
        };
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        tokio::spawn(management::serve(
            self.listener,
            router,
            m.limits.max_connections,
            m.limits.header_read_timeout,
            self.tls,
            shutdown,
        ));
        tracing::info!(url = %format!("{scheme}://{local}{}", m.route_prefix()), "management server listening");
    }
}

fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

fn random_u64() -> u64 {
    getrandom::u64().unwrap_or_else(|_| {
        // No OS randomness: fall back to the clock, which still differs per incarnation.
        driver::wall_clock().0 ^ u64::from(std::process::id()).rotate_left(32)
    })
}

/// A positive signed 64-bit uid, so Java clients and OpenAPI `int64` readers can hold it.
fn random_uid() -> Uid {
    loop {
        if let Some(uid) = Uid::from_random_bits(random_u64()) {
            return uid;
        }
    }
}
