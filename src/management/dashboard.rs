//! `GET /dashboard`: the operator's page, built into the binary (`dashboard/`: one HTML file, one
//! script, one style sheet; no build step, nothing fetched from elsewhere). The page is a shell
//! that holds no cluster data, so it is served without credentials; everything it shows comes
//! from the other routes, with the bearer token the operator enters (kept in the tab's session
//! storage). Served with an ETag (`If-None-Match` answers 304) and a Content-Security-Policy that
//! allows scripts, styles and requests to this node only.

use axum::extract::State;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, ETAG, IF_NONE_MATCH, REFERRER_POLICY,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::AppState;

const HTML: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/app.js");
const STYLE: &str = include_str!("dashboard/app.css");

/// The relative paths of the page and its two files; served without credentials.
pub(super) const PATHS: [&str; 3] = ["/dashboard", "/dashboard/app.js", "/dashboard/app.css"];

/// Scripts, styles and requests from this node only; no inline script or style, no frames.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// FNV-1a of `parts`, for the ETag.
fn fingerprint(parts: &[&[u8]]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in parts.iter().flat_map(|p| p.iter()) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("\"{hash:016x}\"")
}

fn serve(request: &HeaderMap, content_type: &'static str, body: String) -> Response {
    let etag = fingerprint(&[content_type.as_bytes(), body.as_bytes()]);
    let fresh = request
        .get(IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut response =
        if fresh { StatusCode::NOT_MODIFIED.into_response() } else { body.into_response() };
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Cached, but checked with the node on every use (a 304 when unchanged), so an upgraded node
    // never serves a stale page.
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(&etag) {
        headers.insert(ETAG, v);
    }
    headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

pub(super) async fn page(State(app): State<AppState>, request: HeaderMap) -> Response {
    let read_only = if app.settings.read_only { "true" } else { "false" };
    serve(&request, "text/html; charset=utf-8", HTML.replace("{{READ_ONLY}}", read_only))
}

pub(super) async fn script(request: HeaderMap) -> Response {
    serve(&request, "text/javascript; charset=utf-8", SCRIPT.to_owned())
}

pub(super) async fn style(request: HeaderMap) -> Response {
    serve(&request, "text/css; charset=utf-8", STYLE.to_owned())
}

/// The page's size in bytes, uncompressed: HTML, script and style sheet.
pub const SIZE: usize = HTML.len() + SCRIPT.len() + STYLE.len();

// The page stays small: a build with a larger one fails.
const _: () = assert!(SIZE <= 60 * 1024, "the dashboard must stay under 60 KB");
