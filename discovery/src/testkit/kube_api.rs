//! A stand-in Kubernetes API server: HTTPS on 127.0.0.1 with a throwaway CA, bearer-token check,
//! `PodList`s per namespace and label selector, and Lease objects with resourceVersion checks.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::extract::{Path as UrlPath, RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::{self, pki_types};

use crate::kubernetes::ApiServerSettings;

/// One request the server answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRequest {
    /// The method.
    pub method: String,
    /// The path and query.
    pub uri: String,
    /// The bearer token sent, if any.
    pub token: Option<String>,
    /// The status answered.
    pub status: u16,
}

impl RecordedRequest {
    /// The RBAC resource and verb this request needs, as Kubernetes authorizes it: `GET` on a
    /// collection is `list` (`watch` with `watch=true`), on one object `get`; `POST` is `create`,
    /// `PUT` `update`, `PATCH` `patch`, `DELETE` `delete`.
    pub fn rbac(&self) -> (String, String) {
        let (path, query) = self.uri.split_once('?').unwrap_or((&self.uri, ""));
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        // /api/v1/namespaces/NS/RESOURCE[/NAME] or /apis/GROUP/VERSION/namespaces/NS/RESOURCE[/NAME]
        let after_namespace = segments
            .iter()
            .position(|s| *s == "namespaces")
            .map_or(&segments[..], |i| &segments[(i + 2).min(segments.len())..]);
        let resource = after_namespace.first().copied().unwrap_or_default().to_owned();
        let named = after_namespace.len() > 1;
        let verb = match (self.method.as_str(), named) {
            ("GET", false) if query.split('&').any(|q| q == "watch=true") => "watch",
            ("GET", false) => "list",
            ("GET", true) => "get",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", _) => "delete",
            (other, _) => other,
        };
        (resource, verb.to_owned())
    }
}

type LeaseHook = Box<dyn FnMut(&mut Value) + Send>;

#[derive(Default)]
struct ApiState {
    tokens: Vec<String>,
    pods: BTreeMap<(String, String), Value>,
    forbidden: Vec<String>,
    leases: BTreeMap<(String, String), Value>,
    resource_version: u64,
    requests: Vec<RecordedRequest>,
    /// Pod patches taken in, in order: namespace, pod name, the patch.
    pod_patches: Vec<(String, String, Value)>,
    /// Each patched pod's annotations, the patches applied.
    pod_annotations: BTreeMap<(String, String), serde_json::Map<String, Value>>,
    /// Statuses to answer the next pod patches with, instead of taking them in.
    failing_patches: std::collections::VecDeque<u16>,
    interleaved_writes: Option<(usize, LeaseHook)>,
}

#[derive(Clone, Default)]
struct Shared(Arc<Mutex<ApiState>>);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, ApiState> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A stand-in Kubernetes API server on `https://127.0.0.1:<ephemeral>`; it stops when dropped.
///
/// It answers:
/// - `GET /api/v1/namespaces/{ns}/pods?labelSelector=...` with the `PodList` set for that
///   namespace and selector ([`set_pods`](Self::set_pods)), an empty list otherwise, or 403 for
///   a [`forbid`](Self::forbid)den namespace;
/// - `GET`, `PUT /apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}` and `POST .../leases`
///   on Lease objects kept in memory: 404 when absent, 409 on create of an existing one or on a
///   replace whose `metadata.resourceVersion` is not the current one;
/// - `PATCH /api/v1/namespaces/{ns}/pods/{name}` with a JSON merge patch, recorded
///   ([`pod_patches`](Self::pod_patches)) unless told to fail it
///   ([`fail_pod_patches`](Self::fail_pod_patches));
/// - 401 to a request without one of the accepted bearer tokens.
pub struct FakeApiServer {
    shared: Shared,
    addr: SocketAddr,
    ca_pem: String,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for FakeApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeApiServer").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeApiServer {
    /// Starts a server accepting the bearer token `token`. Must be called inside a tokio runtime.
    pub async fn start(token: &str) -> std::io::Result<Self> {
        let (ca_pem, tls) = tls_config().map_err(std::io::Error::other)?;
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Shared::default();
        shared.lock().tokens = vec![token.to_owned()];
        let task =
            tokio::spawn(serve(listener, TlsAcceptor::from(Arc::new(tls)), router(shared.clone())));
        Ok(Self { shared, addr, ca_pem, task })
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The PEM of the CA that signed the server's certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Writes `ca.crt`, `token` (holding `token`) and `namespace` (holding `namespace`) into
    /// `dir`, like a service-account mount, and returns settings that reach this server with
    /// them (namespace taken from the file).
    pub fn client_settings(
        &self,
        dir: &Path,
        token: &str,
        namespace: &str,
    ) -> std::io::Result<ApiServerSettings> {
        std::fs::write(dir.join("ca.crt"), &self.ca_pem)?;
        std::fs::write(dir.join("token"), token)?;
        std::fs::write(dir.join("namespace"), namespace)?;
        Ok(ApiServerSettings::default()
            .with_api_url(self.url())
            .with_api_ca_path(Some(dir.join("ca.crt")))
            .with_api_token_path(Some(dir.join("token")))
            .with_namespace_path(dir.join("namespace")))
    }

    /// Replaces the accepted bearer tokens.
    pub fn set_tokens(&self, tokens: &[&str]) {
        self.shared.lock().tokens = tokens.iter().map(|t| (*t).to_owned()).collect();
    }

    /// Serves `pod_list` (a `PodList` JSON document) for pods in `namespace` listed with
    /// `label_selector`.
    pub fn set_pods(&self, namespace: &str, label_selector: &str, pod_list: Value) {
        let key = (namespace.to_owned(), label_selector.to_owned());
        self.shared.lock().pods.insert(key, pod_list);
    }

    /// Answers 403 to listing pods in `namespace`.
    pub fn forbid(&self, namespace: &str) {
        self.shared.lock().forbidden.push(namespace.to_owned());
    }

    /// The stored Lease object, if any.
    pub fn lease(&self, namespace: &str, name: &str) -> Option<Value> {
        self.shared.lock().leases.get(&(namespace.to_owned(), name.to_owned())).cloned()
    }

    /// After each of the next `times` reads of a Lease, changes the stored Lease with `change`
    /// and gives it a new resourceVersion, as a competing writer would between the reader's GET
    /// and its PUT (so that PUT gets 409).
    pub fn interleave_lease_writes(
        &self,
        times: usize,
        change: impl FnMut(&mut Value) + Send + 'static,
    ) {
        self.shared.lock().interleaved_writes = Some((times, Box::new(change)));
    }

    /// Every pod patch taken in so far, in order: namespace, pod name, the JSON merge patch.
    pub fn pod_patches(&self) -> Vec<(String, String, Value)> {
        self.shared.lock().pod_patches.clone()
    }

    /// Answers the next pod patches with these statuses (403, 404, 409, 500 ...), one each,
    /// without taking them in.
    pub fn fail_pod_patches(&self, statuses: &[u16]) {
        self.shared.lock().failing_patches.extend(statuses);
    }

    /// Every request answered so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }
}

async fn serve(listener: TcpListener, acceptor: TlsAcceptor, router: Router) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else { continue };
        let (acceptor, router) = (acceptor.clone(), router.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else { return };
            let service = TowerToHyperService::new(router);
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}

fn tls_config() -> Result<(String, rustls::ServerConfig), Box<dyn std::error::Error + Send + Sync>>
{
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
    let key = KeyPair::generate()?;
    let cert = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])?
        .signed_by(&key, &ca)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )?;
    Ok((ca.pem(), config))
}

fn router(shared: Shared) -> Router {
    const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases";
    Router::new()
        .route("/api/v1/namespaces/{ns}/pods", get(list_pods))
        .route("/api/v1/namespaces/{ns}/pods/{name}", axum::routing::patch(patch_pod))
        .route(LEASES, axum::routing::post(create_lease))
        .route(&format!("{LEASES}/{{name}}"), get(get_lease).put(replace_lease))
        .layer(middleware::from_fn_with_state(shared.clone(), authenticate_and_record))
        .with_state(shared)
}

async fn authenticate_and_record(
    State(shared): State<Shared>,
    request: Request,
    next: Next,
) -> Response {
    let token = bearer(request.headers());
    let method = request.method().clone();
    let uri = request.uri().to_string();
    let accepted = token.as_ref().is_some_and(|t| shared.lock().tokens.contains(t));
    let response = if accepted {
        next.run(request).await
    } else {
        status(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized")
    };
    let status = response.status().as_u16();
    shared.lock().requests.push(RecordedRequest { method: method.to_string(), uri, token, status });
    response
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    value.strip_prefix("Bearer ").map(str::to_owned)
}

/// A `Status` object, as the API server sends with every error.
fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    (code, axum::Json(body)).into_response()
}

async fn list_pods(
    State(shared): State<Shared>,
    UrlPath(ns): UrlPath<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let state = shared.lock();
    if state.forbidden.contains(&ns) {
        let message = format!(
            "pods is forbidden: User \"system:serviceaccount:{ns}:default\" cannot list resource \
             \"pods\" in API group \"\" in the namespace \"{ns}\""
        );
        return status(StatusCode::FORBIDDEN, "Forbidden", &message);
    }
    let selector = query
        .as_deref()
        .and_then(|q| serde_urlencoded::from_str::<Vec<(String, String)>>(q).ok())
        .and_then(|pairs| pairs.into_iter().find(|(k, _)| k == "labelSelector"))
        .map(|(_, v)| v)
        .unwrap_or_default();
    let list = state.pods.get(&(ns, selector)).cloned().unwrap_or_else(|| {
        json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": []})
    });
    axum::Json(list).into_response()
}

async fn patch_pod(
    State(shared): State<Shared>,
    UrlPath((ns, name)): UrlPath<(String, String)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let merge = headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == b"application/merge-patch+json");
    if !merge {
        return status(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            "this stand-in takes only application/merge-patch+json",
        );
    }
    let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "the patch is not JSON");
    };
    let mut state = shared.lock();
    if let Some(code) = state.failing_patches.pop_front() {
        let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let reason = code.canonical_reason().unwrap_or("Failure").replace(' ', "");
        let message = format!("pods \"{name}\" is {}", reason.to_lowercase());
        return status(code, &reason, &message);
    }
    state.pod_patches.push((ns.clone(), name.clone(), patch.clone()));
    // A JSON merge patch of the annotations: a null removes one, as the API server does.
    let annotations = state.pod_annotations.entry((ns.clone(), name.clone())).or_default();
    if let Some(changes) = patch["metadata"]["annotations"].as_object() {
        for (key, value) in changes {
            if value.is_null() {
                annotations.remove(key);
            } else {
                annotations.insert(key.clone(), value.clone());
            }
        }
    }
    let pod = json!({
        "kind": "Pod", "apiVersion": "v1",
        "metadata": { "name": name, "namespace": ns, "annotations": annotations.clone() },
    });
    axum::Json(pod).into_response()
}

fn not_found(name: &str) -> Response {
    let message = format!("leases.coordination.k8s.io \"{name}\" not found");
    status(StatusCode::NOT_FOUND, "NotFound", &message)
}

async fn get_lease(
    State(shared): State<Shared>,
    UrlPath((ns, name)): UrlPath<(String, String)>,
) -> Response {
    let mut state = shared.lock();
    let key = (ns, name.clone());
    let Some(lease) = state.leases.get(&key).cloned() else { return not_found(&name) };
    // A competing writer changes the lease after this reader got it.
    if let Some((remaining, mut change)) = state.interleaved_writes.take() {
        state.resource_version += 1;
        let version = state.resource_version.to_string();
        if let Some(stored) = state.leases.get_mut(&key) {
            change(stored);
            stored["metadata"]["resourceVersion"] = json!(version);
        }
        if remaining > 1 {
            state.interleaved_writes = Some((remaining - 1, change));
        }
    }
    axum::Json(lease).into_response()
}

async fn create_lease(
    State(shared): State<Shared>,
    UrlPath(ns): UrlPath<String>,
    axum::Json(mut lease): axum::Json<Value>,
) -> Response {
    let Some(name) = lease["metadata"]["name"].as_str().map(str::to_owned) else {
        return status(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            "metadata.name: Required value",
        );
    };
    let mut state = shared.lock();
    let key = (ns.clone(), name.clone());
    if state.leases.contains_key(&key) {
        let message = format!("leases.coordination.k8s.io \"{name}\" already exists");
        return status(StatusCode::CONFLICT, "AlreadyExists", &message);
    }
    state.resource_version += 1;
    let metadata = &mut lease["metadata"];
    metadata["namespace"] = json!(ns);
    metadata["resourceVersion"] = json!(state.resource_version.to_string());
    metadata["uid"] = json!(format!("00000000-0000-0000-0000-{:012}", state.resource_version));
    metadata["creationTimestamp"] = json!("2025-01-01T00:00:00Z");
    lease["kind"] = json!("Lease");
    lease["apiVersion"] = json!("coordination.k8s.io/v1");
    state.leases.insert(key, lease.clone());
    (StatusCode::CREATED, axum::Json(lease)).into_response()
}

async fn replace_lease(
    State(shared): State<Shared>,
    UrlPath((ns, name)): UrlPath<(String, String)>,
    axum::Json(mut lease): axum::Json<Value>,
) -> Response {
    let mut state = shared.lock();
    let key = (ns, name.clone());
    let Some(stored) = state.leases.get(&key) else { return not_found(&name) };
    let current = stored["metadata"]["resourceVersion"].clone();
    let sent = &lease["metadata"]["resourceVersion"];
    if !sent.is_null() && *sent != current {
        let message = format!(
            "Operation cannot be fulfilled on leases.coordination.k8s.io \"{name}\": the object \
             has been modified; please apply your changes to the latest version and try again"
        );
        return status(StatusCode::CONFLICT, "Conflict", &message);
    }
    state.resource_version += 1;
    lease["metadata"]["resourceVersion"] = json!(state.resource_version.to_string());
    state.leases.insert(key, lease.clone());
    axum::Json(lease).into_response()
}
