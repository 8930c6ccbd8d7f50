//! `GET /dashboard`: the operator's page, built into the binary (`dashboard/`: one HTML file, one
//! script, one style sheet; no build step, nothing fetched from elsewhere). The page is a shell
//! that holds no cluster data, so it is served without credentials; everything it shows comes
//! from the other routes, with the bearer token the operator enters (kept in the tab's session
//! storage). Served with an ETag (`If-None-Match` answers 304) and a Content-Security-Policy that
//! allows scripts, styles and requests to this node only.

use std::sync::LazyLock;

use axum::body::Bytes;
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

/// One file as served: its body, content type and ETag, computed once.
struct Asset {
    content_type: &'static str,
    body: Bytes,
    etag: HeaderValue,
}

impl Asset {
    fn new(content_type: &'static str, body: String) -> Self {
        // FNV-1a of the body: changes with every build that changes the file.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in body.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        let etag =
            HeaderValue::from_str(&format!("\"{hash:016x}\"")).expect("hex is a header value");
        Self { content_type, body: Bytes::from(body), etag }
    }

    fn serve(&self, request: &HeaderMap) -> Response {
        let fresh = request.get(IF_NONE_MATCH).and_then(|v| v.to_str().ok()).is_some_and(|tags| {
            tags.split(',').any(|t| t.trim().as_bytes() == self.etag.as_bytes() || t.trim() == "*")
        });
        let mut response = if fresh {
            StatusCode::NOT_MODIFIED.into_response()
        } else {
            self.body.clone().into_response()
        };
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(self.content_type));
        // Cached, but checked with the node on every use (a 304 when unchanged), so an upgraded
        // node never serves a stale page.
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        headers.insert(ETAG, self.etag.clone());
        headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
        headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
        headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
        headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
        response
    }
}

/// The page as served with `management.read_only` on and off.
fn page_asset(read_only: bool) -> &'static Asset {
    static PAGES: LazyLock<[Asset; 2]> = LazyLock::new(|| {
        [false, true].map(|read_only| {
            let page = HTML.replace("{{READ_ONLY}}", if read_only { "true" } else { "false" });
            Asset::new("text/html; charset=utf-8", page)
        })
    });
    &PAGES[usize::from(read_only)]
}

static SCRIPT_ASSET: LazyLock<Asset> =
    LazyLock::new(|| Asset::new("text/javascript; charset=utf-8", SCRIPT.to_owned()));
static STYLE_ASSET: LazyLock<Asset> =
    LazyLock::new(|| Asset::new("text/css; charset=utf-8", STYLE.to_owned()));

pub(super) async fn page(State(app): State<AppState>, request: HeaderMap) -> Response {
    page_asset(app.settings.read_only).serve(&request)
}

pub(super) async fn script(request: HeaderMap) -> Response {
    SCRIPT_ASSET.serve(&request)
}

pub(super) async fn style(request: HeaderMap) -> Response {
    STYLE_ASSET.serve(&request)
}

/// The page's size in bytes, uncompressed: HTML, script and style sheet.
pub const SIZE: usize = HTML.len() + SCRIPT.len() + STYLE.len();

// The page stays small: a build with a larger one fails.
const _: () = assert!(SIZE <= 60 * 1024, "the dashboard must stay under 60 KB");
