//! `/data/keys/{key}` (GET, PUT, DELETE) and `/data/stats`: the replicated store over HTTP
//! (`docs/data.md`, "Over HTTP").
//!
//! A value travels as the body's bytes. A read's causal context travels in the
//! `X-Convoke-Context` header, an opaque token (base64url of the encoded version vector): a client
//! passes back the token of its last read with its next write, which then supersedes what that
//! read returned. Without one, a write supersedes nothing, and concurrent writes come back as
//! siblings (300) until a write with the context of a read that saw them all.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use convoke_data::crdt::Crdt;
use convoke_data::fenced::Fenced;
use serde::{Deserialize, Serialize};

use super::{ApiError, AppState};
use crate::data::{DataError, DataStats, Level, Read, Value, VersionVector};

/// The header that carries a causal context.
pub const CONTEXT_HEADER: &str = "x-convoke-context";

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// The token of `context`.
pub fn context_token(context: &VersionVector) -> String {
    B64.encode(postcard::to_stdvec(context).unwrap_or_default())
}

/// The context a token names.
///
/// # Errors
/// The token is not one this API gave.
pub fn parse_context(token: &str) -> Result<VersionVector, String> {
    let bytes = B64.decode(token.trim()).map_err(|e| e.to_string())?;
    postcard::from_bytes(&bytes).map_err(|e| e.to_string())
}

/// One of several concurrent values (a `300` answer).
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Sibling {
    /// The value's bytes, base64.
    pub base64: String,
    /// The value as text, when it is UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// The body of a `300`: the concurrent values and the context that resolves them.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Siblings {
    /// Every current value.
    pub siblings: Vec<Sibling>,
    /// The context token to write with (also in `X-Convoke-Context`).
    pub context: String,
}

/// The body of a write's `200`.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Written {
    /// What was done.
    pub message: String,
    /// The written version's context token (also in `X-Convoke-Context`).
    pub context: String,
}

/// The level in the query parameter `name` (`?r=` of a read, `?w=` of a write), if given.
fn level(query: Option<&str>, name: &str) -> Result<Option<Level>, ApiError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query.unwrap_or_default())
        .map_err(|e| ApiError::bad_request(format!("the query string: {e}")))?;
    let mut given = pairs.iter().filter(|(k, _)| k == name).map(|(_, v)| v);
    let Some(l) = given.next() else { return Ok(None) };
    if given.next().is_some() {
        return Err(ApiError::bad_request(format!("{name} is given more than once")));
    }
    l.parse::<Level>().map(Some).map_err(|e| ApiError::bad_request(format!("{name}: {e}")))
}

fn context_of(headers: &HeaderMap) -> Result<VersionVector, ApiError> {
    match headers.get(CONTEXT_HEADER) {
        None => Ok(VersionVector::new()),
        Some(v) => {
            let text =
                v.to_str().map_err(|_| ApiError::bad_request("X-Convoke-Context: not text"))?;
            parse_context(text).map_err(|e| {
                ApiError::bad_request(format!(
                    "X-Convoke-Context: {e}; expected the token of an earlier read or write"
                ))
            })
        }
    }
}

fn error(e: DataError) -> ApiError {
    use convoke_data::{DataError as Store, Refused};
    let text = e.to_string();
    match e {
        DataError::NotRunning => ApiError::unavailable(text),
        DataError::Key(_) | DataError::Json(_) => ApiError::bad_request(text),
        DataError::Store(Store::Refused(Refused::ValueTooLarge { .. })) => {
            ApiError::with_status(StatusCode::PAYLOAD_TOO_LARGE, text)
        }
        DataError::Store(Store::Refused(Refused::TooManySiblings { .. })) => {
            ApiError::with_status(StatusCode::CONFLICT, text)
        }
        DataError::Store(Store::Refused(_)) => ApiError::bad_request(text),
        DataError::Store(_) => ApiError::unavailable(text),
    }
}

fn with_context(mut response: Response, context: &VersionVector) -> Response {
    if let Ok(v) = HeaderValue::from_str(&context_token(context)) {
        response.headers_mut().insert(CONTEXT_HEADER, v);
    }
    response
}

/// A CRDT as JSON: `{"type": kind, "value": ...}`.
fn crdt_json(c: &Crdt) -> serde_json::Value {
    let value = match c {
        Crdt::GCounter(g) => serde_json::json!(g.value()),
        Crdt::PNCounter(p) => serde_json::json!(p.value()),
        Crdt::Flag(f) => serde_json::json!(f.enabled()),
        Crdt::LwwRegister(r) => serde_json::json!(sibling(r.value())),
        Crdt::OrSet(s) => serde_json::json!(s.elements().collect::<Vec<_>>()),
        Crdt::OrMap(m) => serde_json::Value::Object(
            m.iter().map(|(k, v)| (k.to_owned(), crdt_json(&v))).collect(),
        ),
    };
    serde_json::json!({ "type": c.kind().name(), "value": value })
}

/// A fenced value (an entity's state) as JSON: `{"type": "fenced", "value": {"promise",
/// "ballot", "seq", "state"}}`, the state a `Sibling`, null when none was written.
fn fenced_json(f: &Fenced) -> serde_json::Value {
    let state = f.state.as_ref();
    serde_json::json!({
        "type": "fenced",
        "value": {
            "promise": f.promise.to_string(),
            "ballot": state.map(|w| w.ballot.to_string()),
            "seq": state.map(|w| w.seq),
            "state": state.map(|w| sibling(&w.bytes)),
        }
    })
}

fn sibling(bytes: &[u8]) -> Sibling {
    Sibling {
        base64: base64::engine::general_purpose::STANDARD.encode(bytes),
        text: std::str::from_utf8(bytes).ok().map(str::to_owned),
    }
}

/// `GET /data/keys/{key}?r=`: 200 with the value (its bytes, or a CRDT as JSON), 300 with the
/// siblings, 404 when absent or deleted; the context in `X-Convoke-Context` every time.
pub(super) async fn get_key(
    State(app): State<AppState>,
    Path(key): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let data = &app.node.data;
    let read: Read = match level(query.as_deref(), "r")? {
        Some(r) => data.get_with(&key, r).await,
        None => data.get(&key).await,
    }
    .map_err(error)?;
    let response = match read.values.as_slice() {
        [] => ApiError::not_found(format!("No value under key {key:?}")).into_response(),
        [Value::Bytes(b)] => {
            ([(header::CONTENT_TYPE, "application/octet-stream")], b.clone()).into_response()
        }
        [Value::Crdt(c)] => Json(crdt_json(c)).into_response(),
        [Value::Fenced(f)] => Json(fenced_json(f)).into_response(),
        many => {
            let siblings = many
                .iter()
                .map(|v| match v {
                    Value::Bytes(b) => sibling(b),
                    Value::Crdt(c) => sibling(crdt_json(c).to_string().as_bytes()),
                    Value::Tombstone => sibling(&[]),
                    Value::Fenced(f) => sibling(fenced_json(f).to_string().as_bytes()),
                })
                .collect();
            let body = Siblings { siblings, context: context_token(&read.context) };
            (StatusCode::MULTIPLE_CHOICES, Json(body)).into_response()
        }
    };
    Ok(with_context(response, &read.context))
}

/// `PUT /data/keys/{key}?w=`: the body is the value; `X-Convoke-Context` the context of the read
/// it supersedes.
pub(super) async fn put_key(
    State(app): State<AppState>,
    Path(key): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    write(&app, &key, query.as_deref(), &headers, Value::Bytes(body.to_vec()), "Written").await
}

/// `DELETE /data/keys/{key}?w=`: a tombstone superseding what `X-Convoke-Context` saw.
pub(super) async fn delete_key(
    State(app): State<AppState>,
    Path(key): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    write(&app, &key, query.as_deref(), &headers, Value::Tombstone, "Deleted").await
}

async fn write(
    app: &AppState,
    key: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    value: Value,
    done: &str,
) -> Result<Response, ApiError> {
    app.writable()?;
    let context = context_of(headers)?;
    let data = &app.node.data;
    let w = level(query, "w")?.unwrap_or_else(|| data.write_level());
    let written = data.put_with(key, value, &context, w).await.map_err(error)?;
    let body = Written { message: format!("{done} {key:?}"), context: context_token(&written) };
    Ok(with_context(Json(body).into_response(), &written))
}

/// `GET /data/stats`.
pub(super) async fn get_stats(State(app): State<AppState>) -> Result<Json<DataStats>, ApiError> {
    app.node.data.stats().await.map(Json).map_err(error)
}
