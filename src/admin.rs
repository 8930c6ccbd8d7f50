//! The admin client: `convoke members|member|join|leave|down|prepare-shutdown` over the
//! management API.

use std::fmt::Write;
use std::process::ExitCode;

use reqwest::{Method, StatusCode};

use crate::management::{ClusterMember, ClusterMembers, Message};

/// How to print answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// A human table.
    Table,
    /// The API's JSON.
    Json,
}

/// One admin command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// List the members.
    Members,
    /// Show one member.
    Member(String),
    /// Make the node join the cluster of this address.
    Join(String),
    /// Make a member leave.
    Leave(String),
    /// Down a member.
    Down(String),
    /// Prepare the cluster for a full shutdown.
    PrepareShutdown,
}

/// Runs `request` against the management API at `url`; prints the answer; returns the exit code.
pub async fn run(url: &str, token: Option<&str>, output: Output, request: Request) -> ExitCode {
    match call(url, token, output, &request).await {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("convoke: {e}");
            ExitCode::from(1)
        }
    }
}

fn member_path(address: &str) -> String {
    // Keep the address readable in the path; only characters that break a path are escaped.
    let escaped: String = address
        .chars()
        .map(|c| match c {
            '?' => "%3F".to_owned(),
            '#' => "%23".to_owned(),
            ' ' => "%20".to_owned(),
            c => c.to_string(),
        })
        .collect();
    format!("/cluster/members/{escaped}")
}

/// Performs the request and renders the answer.
///
/// # Errors
/// A message for the user: the node could not be reached, or answered with an error.
pub async fn call(
    url: &str,
    token: Option<&str>,
    output: Output,
    request: &Request,
) -> Result<String, String> {
    let (method, path, form): (Method, String, Vec<(&str, &str)>) = match request {
        Request::Members => (Method::GET, "/cluster/members".into(), vec![]),
        Request::Member(a) => (Method::GET, member_path(a), vec![]),
        Request::Join(a) => {
            (Method::POST, "/cluster/members".into(), vec![("address", a.as_str())])
        }
        Request::Leave(a) => (Method::DELETE, member_path(a), vec![]),
        Request::Down(a) => (Method::PUT, member_path(a), vec![("operation", "down")]),
        Request::PrepareShutdown => {
            (Method::PUT, "/cluster".into(), vec![("operation", "prepare-for-full-shutdown")])
        }
    };
    let full = format!("{}{path}", url.trim_end_matches('/'));
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
    let mut req = client.request(method, &full);
    if !form.is_empty() {
        let body = serde_urlencoded::to_string(&form).map_err(|e| e.to_string())?;
        req = req
            .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body);
    }
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.map_err(|e| {
        format!("cannot reach the management API at {url}: {e} (is the node running, and is --url right?)")
    })?;
    let status = resp.status();
    let text = resp.text().await.map_err(|e| format!("reading the answer from {url}: {e}"))?;
    let server_message = || {
        serde_json::from_str::<Message>(&text).map(|m| m.message).unwrap_or_else(|_| text.clone())
    };
    match status {
        StatusCode::UNAUTHORIZED => {
            return Err(format!(
                "the management API at {url} requires credentials: pass --token (or CONVOKE_TOKEN){}",
                if token.is_some() { "; the token given was refused" } else { "" }
            ));
        }
        StatusCode::METHOD_NOT_ALLOWED => {
            return Err(format!("refused by {url}: {}", server_message()));
        }
        s if !s.is_success() => return Err(format!("{url} answered {s}: {}", server_message())),
        _ => {}
    }
    if output == Output::Json {
        return Ok(if text.ends_with('\n') { text } else { format!("{text}\n") });
    }
    match request {
        Request::Members => {
            let m: ClusterMembers = serde_json::from_str(&text)
                .map_err(|e| format!("unexpected answer from {url}: {e}"))?;
            Ok(members_table(&m))
        }
        Request::Member(_) => {
            let m: ClusterMember = serde_json::from_str(&text)
                .map_err(|e| format!("unexpected answer from {url}: {e}"))?;
            Ok(format!(
                "{}  {}  uid {}  roles {}\n",
                m.node,
                m.status,
                m.node_uid,
                m.roles.join(",")
            ))
        }
        _ => Ok(format!("{}\n", server_message())),
    }
}

/// The members as a table: status, roles, leader and oldest marks, then unreachable members with
/// their observers.
pub fn members_table(m: &ClusterMembers) -> String {
    let width = m.members.iter().map(|x| x.node.len()).max().unwrap_or(7).max(7);
    let mut out = format!(
        "{:<width$}  {:<20}  {:<6}  {:<6}  ROLES\n",
        "ADDRESS", "STATUS", "LEADER", "OLDEST"
    );
    for x in &m.members {
        let leader = if m.leader.as_deref() == Some(&x.node) { "*" } else { "" };
        let oldest = if m.oldest.as_deref() == Some(&x.node) { "*" } else { "" };
        let self_mark = if x.node == m.self_node { " (this node)" } else { "" };
        let _ = writeln!(
            out,
            "{:<width$}  {:<20}  {leader:<6}  {oldest:<6}  {}{self_mark}",
            x.node,
            x.status,
            x.roles.join(",")
        );
    }
    for u in &m.unreachable {
        let _ = writeln!(out, "UNREACHABLE {} (observed by {})", u.node, u.observed_by.join(", "));
    }
    out
}
