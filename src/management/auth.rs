//! Bearer-token and basic authentication for the management routes, with exempt paths so that
//! probes and bootstrap keep working (where Akka's basic auth breaks bootstrap).

use std::collections::BTreeSet;

use axum::extract::{Request, State};
use axum::http::Method;
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;

use super::AppState;
use super::error::ApiError;
use crate::settings::{AuthSettings, route_path};

/// The paths read without credentials, as the middleware compares them (one leading `/`, none
/// trailing): the configured `exempt_paths`, and the dashboard's files, which hold no cluster
/// data (the page must load to ask for a token). Only reads (GET, HEAD) of them are exempt.
pub(super) fn open_paths(auth: Option<&AuthSettings>) -> BTreeSet<String> {
    let exempt = auth.map(|a| a.exempt_paths.as_slice()).unwrap_or_default();
    exempt.iter().map(|p| route_path(p)).chain(super::dashboard::PATHS.map(String::from)).collect()
}

/// Compares without an early exit, so the time taken does not tell how much of a secret matched.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn authorized(auth: &AuthSettings, header: Option<&str>) -> bool {
    let Some(header) = header else { return false };
    if let Some(token) = header.strip_prefix("Bearer ").map(str::trim) {
        if auth.bearer_tokens.iter().any(|t| same(t.as_bytes(), token.as_bytes())) {
            return true;
        }
        // Token files are read on every request, so a rotated token takes effect at once.
        return auth.bearer_token_files.iter().any(|f| {
            std::fs::read_to_string(f).is_ok_and(|t| same(t.trim().as_bytes(), token.as_bytes()))
        });
    }
    if let Some(encoded) = header.strip_prefix("Basic ").map(str::trim) {
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded) else {
            return false;
        };
        return auth.basic.iter().any(|b| same(b.as_bytes(), &decoded));
    }
    false
}

/// The middleware: reads of exempt paths pass; everything else needs valid credentials, or gets
/// 401.
pub(super) async fn require(State(app): State<AppState>, request: Request, next: Next) -> Response {
    let Some(auth) = &app.settings.auth else { return next.run(request).await };
    // An exemption is for probes, bootstrap and the dashboard's files, which only read: exempting
    // a path never opens a write on it (`/cluster/members` exempted for monitoring must not let
    // anyone POST a join to it).
    let read = matches!(*request.method(), Method::GET | Method::HEAD);
    // Under a base path the routes are nested, and a nested router sees the path without it.
    if read && app.open_paths.contains(request.uri().path().trim_end_matches('/')) {
        return next.run(request).await;
    }
    let header = request.headers().get(AUTHORIZATION).and_then(|v| v.to_str().ok());
    if authorized(auth, header) {
        next.run(request).await
    } else {
        let mut response = ApiError::unauthorized().into_response();
        response.headers_mut().insert(
            axum::http::header::WWW_AUTHENTICATE,
            axum::http::HeaderValue::from_static("Bearer, Basic realm=\"convoke\""),
        );
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_basic_credentials_are_checked() {
        let auth = AuthSettings {
            bearer_tokens: vec!["s3cret".into()],
            basic: vec!["ops:pw".into()],
            ..AuthSettings::default()
        };
        assert!(authorized(&auth, Some("Bearer s3cret")));
        assert!(!authorized(&auth, Some("Bearer s3cre")));
        assert!(!authorized(&auth, Some("Bearer s3crett")));
        let basic = base64::engine::general_purpose::STANDARD.encode("ops:pw");
        assert!(authorized(&auth, Some(&format!("Basic {basic}"))));
        assert!(!authorized(&auth, Some("Basic b3BzOnd4")));
        assert!(!authorized(&auth, None));
    }
}
