//! `convoke data get|put|delete KEY`: the replicated store over the management API
//! (`/data/keys/{key}`), with the causal context passed in and out as a token (`--context`).

use std::process::ExitCode;
use std::time::Duration;

use convoke::management::data::{CONTEXT_HEADER, Siblings, Written};
use reqwest::{Method, StatusCode};

use crate::admin::{self, Error, Failure, Output};

/// One store command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DataRequest {
    /// Read a key at level `r` (the node's default when `None`).
    Get { key: String, r: Option<String> },
    /// Write `value` under a key, superseding what `context` saw.
    Put { key: String, value: Vec<u8>, context: Option<String>, w: Option<String> },
    /// Delete a key as `context` saw it.
    Delete { key: String, context: Option<String>, w: Option<String> },
}

/// Runs `request`; prints the answer; returns the exit status (as the admin commands do, with
/// 3 for a key that holds no value).
pub(crate) async fn run(
    url: &str,
    token: Option<&str>,
    output: Output,
    request: DataRequest,
) -> ExitCode {
    match call(url, token, output, &request).await {
        Ok(out) => {
            use std::io::Write;
            let mut stdout = std::io::stdout();
            let _ = stdout.write_all(&out);
            let _ = stdout.flush();
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("convoke: {e}");
            e.failure.exit_code()
        }
    }
}

fn path(key: &str, level: Option<(&str, &str)>) -> String {
    let escaped: String = key.split('/').map(admin::segment).collect::<Vec<_>>().join("/");
    match level {
        Some((name, l)) => format!("/data/keys/{escaped}?{name}={}", admin::segment(l)),
        None => format!("/data/keys/{escaped}"),
    }
}

/// Performs the request and renders the answer: a read prints the value's bytes as they are
/// (siblings one per line as text, or the API's JSON with `-o json`) and the context token on
/// stderr; a write prints what was done and the new context.
pub(crate) async fn call(
    url: &str,
    token: Option<&str>,
    output: Output,
    request: &DataRequest,
) -> Result<Vec<u8>, Error> {
    let (method, path, body, context) = match request {
        DataRequest::Get { key, r } => {
            (Method::GET, path(key, r.as_deref().map(|l| ("r", l))), None, None)
        }
        DataRequest::Put { key, value, context, w } => (
            Method::PUT,
            path(key, w.as_deref().map(|l| ("w", l))),
            Some(value.clone()),
            context.as_deref(),
        ),
        DataRequest::Delete { key, context, w } => {
            (Method::DELETE, path(key, w.as_deref().map(|l| ("w", l))), None, context.as_deref())
        }
    };
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| Error::unavailable(format!("cannot build an HTTP client: {e}")))?;
    let mut req = client.request(method, format!("{}{path}", url.trim_end_matches('/')));
    if let Some(b) = body {
        req = req.header(reqwest::header::CONTENT_TYPE, "application/octet-stream").body(b);
    }
    if let Some(c) = context {
        req = req.header(CONTEXT_HEADER, c);
    }
    let resp = admin::dispatch(req, url, token).await?;
    let status = resp.status();
    let ctx = resp.headers().get(CONTEXT_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let bytes = resp
        .bytes()
        .await
        .map_err(|e| Error::unavailable(format!("reading the answer from {url}: {e}")))?
        .to_vec();
    if let (DataRequest::Get { key, .. }, StatusCode::NOT_FOUND) = (request, status) {
        if let Some(c) = &ctx {
            eprintln!("context: {c}");
        }
        return Err(Error {
            failure: Failure::NotFound,
            message: format!("no value under key {key:?}"),
        });
    }
    let parse = |e: serde_json::Error| {
        Error::unavailable(format!("unexpected answer from {url}{path}: {e}"))
    };
    match (request, status) {
        (DataRequest::Get { .. }, StatusCode::MULTIPLE_CHOICES) => {
            if output == Output::Json {
                return Ok(bytes);
            }
            let siblings: Siblings = serde_json::from_slice(&bytes).map_err(parse)?;
            eprintln!("context: {}", siblings.context);
            let mut out = format!("{} concurrent values:\n", siblings.siblings.len());
            for s in &siblings.siblings {
                out.push_str(s.text.as_deref().unwrap_or(&format!("(base64) {}", s.base64)));
                out.push('\n');
            }
            Ok(out.into_bytes())
        }
        (DataRequest::Get { .. }, s) if s.is_success() => {
            if let Some(c) = &ctx {
                eprintln!("context: {c}");
            }
            Ok(bytes)
        }
        (_, s) => {
            let text = admin::answer(url, token, s, String::from_utf8_lossy(&bytes).into_owned())?;
            if output == Output::Json {
                return Ok(text.into_bytes());
            }
            let written: Written = serde_json::from_str(&text).map_err(parse)?;
            Ok(format!("{} (context {})\n", written.message, written.context).into_bytes())
        }
    }
}
