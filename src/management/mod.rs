//! The management HTTP server: cluster routes compatible with Akka Management, health checks,
//! server-sent cluster events, Prometheus metrics, authentication and TLS.
//!
//! [`router`] builds the routes for a [`Handle`] — the few things of a node the routes need — so
//! a service can mount them on its own axum server ([`Node::management_handle`]) and tests can
//! build one in memory; [`serve`] runs convoke's own server with the limits of
//! `[management.limits]`.
//!
//! Layout: `cluster.rs` (members routes and JSON), `form.rs` (urlencoded and multipart form
//! bodies), `bootstrap.rs` (`/bootstrap/seed-nodes`, `/bootstrap/status`), `health.rs` (`/ready`,
//! `/alive`, `/startup`), `singletons.rs`, `shards.rs` (`/cluster/shards...`), `events.rs`
//! (SSE), `metrics.rs`, `dashboard.rs` (the operator's page, from `dashboard/`), `auth.rs`,
//! `server.rs` (accept loop, TLS), `error.rs`.
//!
//! [`Node::management_handle`]: crate::Node::management_handle

mod auth;
mod bootstrap;
mod cluster;
mod dashboard;
pub mod data;
mod error;
mod events;
mod form;
mod health;
mod metrics;
mod server;
mod shards;
mod singletons;

use std::sync::Arc;

use axum::Router;
use axum::http::{Method, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{MethodRouter, get};
use tokio::sync::Semaphore;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

pub use bootstrap::seed_nodes;
pub use cluster::{ClusterMember, ClusterMembers, ClusterUnreachableMember};
pub use dashboard::SIZE as DASHBOARD_SIZE;
pub use error::{ApiError, Message};
pub use events::event_json;
pub use server::{TlsError, serve, tls_acceptor};
pub use shards::{
    ClusterShardingStats, FailedMember, MemberShards, ShardDetails, ShardEntityTypeKeys,
    ShardRegionStats,
};
pub use singletons::{ClusterSingleton, ClusterSingletons};
// The parsers of a member address in a route and of a form body, public only for the fuzz target
// in `fuzz/` (`fuzz/fuzz_targets/management_parse.rs`); not part of the API.
#[doc(hidden)]
pub use cluster::find as find_member;
#[doc(hidden)]
pub use form::Form;

use convoke_bootstrap::BootstrapStatus;
use convoke_membership::UniqueAddress;
use tokio::sync::watch;

use crate::control::Control;
use crate::health::HealthChecks;
use crate::metrics::Metrics;
use crate::settings::{ManagementSettings, route_path};

/// The operations the management API serves, as (method, path template). The OpenAPI document
/// (`openapi/openapi.yaml`) is checked against this list and this list against the router.
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/cluster/members"),
    ("POST", "/cluster/members"),
    ("GET", "/cluster/members/{address}"),
    ("PUT", "/cluster/members/{address}"),
    ("DELETE", "/cluster/members/{address}"),
    ("GET", "/cluster/singletons"),
    ("GET", "/cluster/shards"),
    ("GET", "/cluster/shards/{name}"),
    ("GET", "/cluster/shards/{name}/stats"),
    ("PUT", "/cluster"),
    ("GET", "/cluster/domain-events"),
    ("GET", "/ready"),
    ("GET", "/alive"),
    ("GET", "/startup"),
    ("GET", "/bootstrap/seed-nodes"),
    ("GET", "/bootstrap/status"),
    ("GET", "/metrics"),
    ("GET", "/openapi.yaml"),
    ("GET", "/dashboard"),
    ("GET", "/dashboard/app.js"),
    ("GET", "/dashboard/app.css"),
    ("GET", "/data/keys/{key}"),
    ("PUT", "/data/keys/{key}"),
    ("DELETE", "/data/keys/{key}"),
    ("GET", "/data/stats"),
];

/// The OpenAPI document, served at `/openapi.yaml`.
pub const OPENAPI: &str = include_str!("../../openapi/openapi.yaml");

/// What the routes need of a node: its identity, the driver's control (snapshots and commands),
/// bootstrap's status, the user's health checks and the metrics. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Handle {
    /// The node's identity.
    pub self_node: UniqueAddress,
    /// The driver's commands, snapshots and termination.
    pub control: Control,
    /// What bootstrap is doing and why.
    pub bootstrap: watch::Receiver<BootstrapStatus>,
    /// The user's readiness and liveness checks.
    pub health: HealthChecks,
    /// The metrics served at `/metrics`.
    pub metrics: Metrics,
    /// When the node started: `/alive` fails once the node has been in no cluster for longer
    /// than `management.health_checks.join_deadline` after it.
    pub started_at: tokio::time::Instant,
    /// The singletons started on this node (`/cluster/singletons`).
    pub singletons: crate::singleton::Statuses,
    /// The node's sharded entity types (`/cluster/shards`); `None` serves none.
    pub sharding: Option<crate::sharding::Sharding>,
    /// The replicated store (`/data/...`).
    pub data: crate::data::Data,
}

/// What every handler sees. axum clones it for each request that extracts it: one shared
/// allocation keeps that clone at one reference count rather than a copy of the node's handle.
#[derive(Clone, Debug)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The contents of [`AppState`].
#[derive(Debug)]
pub struct Shared {
    node: Handle,
    settings: Arc<ManagementSettings>,
    event_clients: Arc<Semaphore>,
    /// The paths served without credentials ([`auth::open_paths`]).
    open_paths: Arc<std::collections::BTreeSet<String>>,
    /// Set once `/alive` has logged that the join deadline passed, so it logs that once.
    join_deadline_logged: Arc<std::sync::atomic::AtomicBool>,
    /// The `/cluster/members` body of the latest snapshot served.
    members_body: Arc<cluster::BodyCache>,
}

fn with_405(route: MethodRouter<AppState>) -> MethodRouter<AppState> {
    route.fallback(|| async { ApiError::method_not_allowed() })
}

/// The management routes for `node`, under `settings.base_path`, with authentication, the body
/// limit and the request timeout (event streams excepted).
pub fn router(node: Handle, settings: &ManagementSettings) -> Router {
    let state = AppState(Arc::new(Shared {
        node,
        event_clients: Arc::new(Semaphore::new(settings.limits.max_event_clients)),
        settings: Arc::new(settings.clone()),
        open_paths: Arc::new(auth::open_paths(settings.auth.as_ref())),
        join_deadline_logged: Arc::default(),
        members_body: Arc::default(),
    }));
    let hc = &settings.health_checks;
    let timed = Router::new()
        .route("/cluster/members", with_405(get(cluster::get_members).post(cluster::post_members)))
        .route("/cluster/members/", with_405(get(cluster::get_members).post(cluster::post_members)))
        .route(
            "/cluster/members/{*address}",
            with_405(
                get(cluster::get_member).put(cluster::put_member).delete(cluster::delete_member),
            ),
        )
        .route("/cluster/singletons", with_405(get(singletons::get_singletons)))
        .route("/cluster/shards", with_405(get(shards::get_shards)))
        .route("/cluster/shards/{name}", with_405(get(shards::get_region)))
        .route("/cluster/shards/{name}/stats", with_405(get(shards::get_cluster_stats)))
        .route("/cluster", with_405(axum::routing::put(cluster::put_cluster)))
        .route("/cluster/", with_405(axum::routing::put(cluster::put_cluster)))
        .route(&route_path(&hc.readiness_path), with_405(get(health::ready)))
        .route(&route_path(&hc.liveness_path), with_405(get(health::alive)))
        .route(&route_path(&hc.startup_path), with_405(get(health::startup)))
        .route("/bootstrap/seed-nodes", with_405(get(bootstrap::get_seed_nodes)))
        .route("/bootstrap/status", with_405(get(bootstrap::get_status)))
        .route("/metrics", with_405(get(metrics::metrics)))
        .route("/openapi.yaml", with_405(get(openapi)))
        .route("/dashboard", with_405(get(dashboard::page)))
        .route("/dashboard/app.js", with_405(get(dashboard::script)))
        .route("/dashboard/app.css", with_405(get(dashboard::style)))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            settings.limits.request_timeout,
        ));
    let streaming =
        Router::new().route("/cluster/domain-events", with_405(get(events::domain_events)));
    // A value may be larger than any other body: the store's own limit, and the store's own
    // refusal (naming data.max_value_bytes) for what passes it.
    let value_limit = state.node.data.max_value_bytes().max(settings.limits.body_limit) + 1;
    let data = Router::new()
        .route(
            "/data/keys/{*key}",
            with_405(get(data::get_key).put(data::put_key).delete(data::delete_key)),
        )
        .route("/data/stats", with_405(get(data::get_stats)))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            settings.limits.request_timeout,
        ))
        .layer(RequestBodyLimitLayer::new(value_limit));
    let routes = timed
        .merge(streaming)
        .layer(RequestBodyLimitLayer::new(settings.limits.body_limit))
        .merge(data)
        .fallback(|| async { ApiError::no_route() });
    // Without credentials configured every request passes: no layer to go through.
    let routes = if settings.auth.is_some() {
        routes.layer(axum::middleware::from_fn_with_state(state.clone(), auth::require))
    } else {
        routes
    };
    let routes = routes.with_state(state);
    let base = settings.route_prefix();
    if base.is_empty() {
        routes
    } else {
        Router::new().nest(&base, routes).fallback(|| async { ApiError::no_route() })
    }
}

async fn openapi() -> impl IntoResponse {
    ([(axum::http::header::CONTENT_TYPE, "application/yaml")], OPENAPI)
}

/// Whether `method` names one of the HTTP methods [`ROUTES`] uses.
pub fn parse_method(method: &str) -> Option<Method> {
    method.parse().ok()
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod compat_tests;
