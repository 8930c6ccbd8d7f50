//! The admin client: `convoke members|member|join|leave|down|prepare-shutdown|shards|singletons|
//! bootstrap-status` over the management API, as tables or the API's JSON, with exit statuses a
//! script can branch on ([`Failure`]).

use std::fmt::Write;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use convoke_bootstrap::StatusView;
use reqwest::{Method, StatusCode};

use convoke::management::{
    ClusterMember, ClusterMembers, ClusterShardingStats, ClusterSingletons, Message,
    ShardEntityTypeKeys, ShardRegionStats,
};

/// How to print answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Output {
    /// A human table.
    Table,
    /// The API's JSON.
    Json,
}

/// One admin command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Request {
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
    /// List the entity types sharded on the node (`GET /cluster/shards`).
    Shards,
    /// One entity type over the cluster: each member's shards and entities
    /// (`GET /cluster/shards/{name}/stats`).
    ShardStats(String),
    /// One entity type's region on the node alone, shard by shard (`GET /cluster/shards/{name}`).
    ShardRegion(String),
    /// The cluster singletons the node manages (`GET /cluster/singletons`).
    Singletons,
    /// How cluster bootstrap sees the formation (`GET /bootstrap/status`).
    BootstrapStatus,
}

/// Why an admin command failed; its exit status is the discriminant. Status 2 is left to usage
/// errors, which the argument parser reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// No answer from the node, or a failure on its side (a 5xx status, an answer that is not
    /// the API's): trying again later may succeed.
    Unavailable = 1,
    /// What was asked about does not exist (404): no such member, no such entity type.
    NotFound = 3,
    /// The node refused the request: credentials missing or refused, a read-only API, an input
    /// it does not accept (any other 4xx).
    Refused = 4,
}

impl Failure {
    /// The exit status.
    pub(crate) fn exit_code(self) -> ExitCode {
        ExitCode::from(self as u8)
    }
}

/// A failed admin command: its kind and a message for the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Error {
    /// The kind, which sets the exit status.
    pub(crate) failure: Failure,
    /// What went wrong and, where it helps, what to do.
    pub(crate) message: String,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl Error {
    pub(crate) fn unavailable(message: String) -> Self {
        Self { failure: Failure::Unavailable, message }
    }
}

/// Runs `request` against the management API at `url`; prints the answer; returns the exit code.
pub(crate) async fn run(
    url: &str,
    token: Option<&str>,
    output: Output,
    request: Request,
) -> ExitCode {
    match call(url, token, output, &request).await {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("convoke: {e}");
            e.failure.exit_code()
        }
    }
}

/// Escapes the characters that would end or split a path segment; the rest stays readable
/// (`convoke@host:port`).
pub(crate) fn segment(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '?' => "%3F".to_owned(),
            '#' => "%23".to_owned(),
            ' ' => "%20".to_owned(),
            '%' => "%25".to_owned(),
            '/' => "%2F".to_owned(),
            c => c.to_string(),
        })
        .collect()
}

fn member_path(address: &str) -> String {
    // The route takes the rest of the path as the address, so slashes need no escape here.
    let escaped: String = address.split('/').map(segment).collect::<Vec<_>>().join("/");
    format!("/cluster/members/{escaped}")
}

/// Performs the request and renders the answer.
///
/// # Errors
/// The node could not be reached, or answered with an error; [`Error::failure`] says which kind.
pub(crate) async fn call(
    url: &str,
    token: Option<&str>,
    output: Output,
    request: &Request,
) -> Result<String, Error> {
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
        Request::Shards => (Method::GET, "/cluster/shards".into(), vec![]),
        Request::ShardStats(name) => {
            (Method::GET, format!("/cluster/shards/{}/stats", segment(name)), vec![])
        }
        Request::ShardRegion(name) => {
            (Method::GET, format!("/cluster/shards/{}", segment(name)), vec![])
        }
        Request::Singletons => (Method::GET, "/cluster/singletons".into(), vec![]),
        Request::BootstrapStatus => (Method::GET, "/bootstrap/status".into(), vec![]),
    };
    let text = send(url, token, method, &path, &form).await?;
    if output == Output::Json {
        return Ok(if text.ends_with('\n') { text } else { format!("{text}\n") });
    }
    let parse_error = |e: serde_json::Error| {
        Error::unavailable(format!("unexpected answer from {url}{path}: {e}"))
    };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    Ok(match request {
        Request::Members => members_table(&serde_json::from_str(&text).map_err(parse_error)?),
        Request::Member(_) => {
            let m: ClusterMember = serde_json::from_str(&text).map_err(parse_error)?;
            format!(
                "{}  {}  uid {}  version {}  roles {}\n",
                m.node,
                m.status,
                m.node_uid,
                m.app_version,
                m.roles.join(",")
            )
        }
        Request::Shards => {
            let keys: ShardEntityTypeKeys = serde_json::from_str(&text).map_err(parse_error)?;
            entity_types_table(&keys)
        }
        Request::ShardStats(_) => {
            shard_stats_table(&serde_json::from_str(&text).map_err(parse_error)?)
        }
        Request::ShardRegion(_) => {
            shard_region_table(&serde_json::from_str(&text).map_err(parse_error)?)
        }
        Request::Singletons => {
            singletons_table(&serde_json::from_str(&text).map_err(parse_error)?, now)
        }
        Request::BootstrapStatus => {
            bootstrap_table(&serde_json::from_str(&text).map_err(parse_error)?)
        }
        Request::Join(_) | Request::Leave(_) | Request::Down(_) | Request::PrepareShutdown => {
            format!("{}\n", server_message(&text))
        }
    })
}

pub(crate) fn server_message(text: &str) -> String {
    serde_json::from_str::<Message>(text).map_or_else(|_| text.to_owned(), |m| m.message)
}

/// Sends one request and returns the body of a successful answer.
async fn send(
    url: &str,
    token: Option<&str>,
    method: Method,
    path: &str,
    form: &[(&str, &str)],
) -> Result<String, Error> {
    let full = format!("{}{path}", url.trim_end_matches('/'));
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| Error::unavailable(format!("cannot build an HTTP client: {e}")))?;
    let mut req = client.request(method, &full);
    if !form.is_empty() {
        let body = serde_urlencoded::to_string(form)
            .map_err(|e| Error { failure: Failure::Refused, message: e.to_string() })?;
        req = req
            .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body);
    }
    let resp = dispatch(req, url, token).await?;
    let status = resp.status();
    let text = resp
        .text()
        .await
        .map_err(|e| Error::unavailable(format!("reading the answer from {url}: {e}")))?;
    answer(url, token, status, text)
}

/// Sends `req` to the management API at `url`, with the bearer `token` if any.
///
/// # Errors
/// The node could not be reached.
pub(crate) async fn dispatch(
    mut req: reqwest::RequestBuilder,
    url: &str,
    token: Option<&str>,
) -> Result<reqwest::Response, Error> {
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.map_err(|e| {
        Error::unavailable(format!(
            "cannot reach the management API at {url}: {e} (is the node running, and is --url right?)"
        ))
    })
}

/// The body of a successful answer, or the failure its status means.
pub(crate) fn answer(
    url: &str,
    token: Option<&str>,
    status: StatusCode,
    text: String,
) -> Result<String, Error> {
    let refused = |message| Err(Error { failure: Failure::Refused, message });
    match status {
        s if s.is_success() => Ok(text),
        StatusCode::UNAUTHORIZED => refused(format!(
            "the management API at {url} requires credentials: pass --token (or CONVOKE_TOKEN){}",
            if token.is_some() { "; the token given was refused" } else { "" }
        )),
        StatusCode::NOT_FOUND => Err(Error {
            failure: Failure::NotFound,
            message: format!("{url} answered {status}: {}", server_message(&text)),
        }),
        StatusCode::METHOD_NOT_ALLOWED => {
            refused(format!("refused by {url}: {}", server_message(&text)))
        }
        s if s.is_client_error() => {
            refused(format!("{url} answered {s}: {}", server_message(&text)))
        }
        s => Err(Error::unavailable(format!("{url} answered {s}: {}", server_message(&text)))),
    }
}

/// The width of a column: its widest cell, or its header when that is wider.
fn column_width<'a>(header: &str, cells: impl Iterator<Item = &'a str>) -> usize {
    cells.map(str::len).max().unwrap_or(0).max(header.len())
}

/// The members as a table: status, leader and oldest marks, app version, roles, then
/// unreachable members with their observers.
pub(crate) fn members_table(m: &ClusterMembers) -> String {
    let width = column_width("ADDRESS", m.members.iter().map(|x| x.node.as_str()));
    let version = column_width("VERSION", m.members.iter().map(|x| x.app_version.as_str()));
    let mut out = format!(
        "{:<width$}  {:<20}  {:<6}  {:<6}  {:<version$}  ROLES\n",
        "ADDRESS", "STATUS", "LEADER", "OLDEST", "VERSION"
    );
    for x in &m.members {
        let leader = if m.leader.as_deref() == Some(&x.node) { "*" } else { "" };
        let oldest = if m.oldest.as_deref() == Some(&x.node) { "*" } else { "" };
        let self_mark = if x.node == m.self_node { " (this node)" } else { "" };
        let _ = writeln!(
            out,
            "{:<width$}  {:<20}  {leader:<6}  {oldest:<6}  {:<version$}  {}{self_mark}",
            x.node,
            x.status,
            x.app_version,
            x.roles.join(",")
        );
    }
    for u in &m.unreachable {
        let _ = writeln!(out, "UNREACHABLE {} (observed by {})", u.node, u.observed_by.join(", "));
    }
    out
}

/// The entity types, one per line.
pub(crate) fn entity_types_table(keys: &ShardEntityTypeKeys) -> String {
    let mut out = String::from("ENTITY TYPE\n");
    for name in &keys.entity_type_keys {
        let _ = writeln!(out, "{name}");
    }
    out
}

/// One entity type over the cluster: shards and entities per member, their total, then the
/// members that did not answer.
pub(crate) fn shard_stats_table(stats: &ClusterShardingStats) -> String {
    let width = column_width("MEMBER", stats.regions.iter().map(|r| r.address.as_str()));
    let mut out = format!("{:<width$}  {:>6}  {:>8}\n", "MEMBER", "SHARDS", "ENTITIES");
    let mut regions: Vec<_> = stats.regions.iter().collect();
    regions.sort_by(|a, b| a.address.cmp(&b.address));
    let (mut shards, mut entities) = (0, 0);
    for r in regions {
        let here: u64 = r.shards.iter().map(|s| s.num_entities).sum();
        shards += r.shards.len();
        entities += here;
        let _ = writeln!(out, "{:<width$}  {:>6}  {here:>8}", r.address, r.shards.len());
    }
    let _ = writeln!(out, "{:<width$}  {shards:>6}  {entities:>8}", "TOTAL");
    for f in &stats.failed {
        let _ = writeln!(out, "NO ANSWER {}: {}", f.address, f.error);
    }
    out
}

/// One region's shards in shard order (numeric ids by value), with their entities.
pub(crate) fn shard_region_table(stats: &ShardRegionStats) -> String {
    let mut shards: Vec<_> = stats.regions.iter().collect();
    shards.sort_by(|a, b| (a.shard_id.len(), &a.shard_id).cmp(&(b.shard_id.len(), &b.shard_id)));
    let width = column_width("SHARD", shards.iter().map(|s| s.shard_id.as_str()));
    let mut out = format!("{:<width$}  {:>8}\n", "SHARD", "ENTITIES");
    for s in shards {
        let _ = writeln!(out, "{:<width$}  {:>8}", s.shard_id, s.num_entities);
    }
    out
}

/// The singletons: where each runs, its state and since when (`now` is the time since the Unix
/// epoch, for the age).
pub(crate) fn singletons_table(list: &ClusterSingletons, now: Duration) -> String {
    let all = &list.singletons;
    let name_w = column_width("NAME", all.iter().map(|s| s.name.as_str()));
    let role_w = column_width("ROLE", all.iter().filter_map(|s| s.role.as_deref()));
    let state_w = column_width("STATE", all.iter().map(|s| s.state.as_str()));
    let host_w = column_width("HOST", all.iter().filter_map(|s| s.host.as_deref()));
    let mut out = format!(
        "{:<name_w$}  {:<role_w$}  {:<state_w$}  {:<host_w$}  HERE  SINCE\n",
        "NAME", "ROLE", "STATE", "HOST"
    );
    for s in &list.singletons {
        let since = Duration::from_millis(s.since);
        let age = if s.since == 0 { "-".to_owned() } else { ago(now.saturating_sub(since)) };
        let _ = writeln!(
            out,
            "{:<name_w$}  {:<role_w$}  {:<state_w$}  {:<host_w$}  {:<4}  {age}",
            s.name,
            s.role.as_deref().unwrap_or("-"),
            s.state,
            s.host.as_deref().unwrap_or("-"),
            if s.running_here { "yes" } else { "no" },
        );
    }
    out
}

/// An age in the largest unit that keeps two or more digits readable: `4.2 s ago`, `12 min ago`.
fn ago(age: Duration) -> String {
    let secs = age.as_secs_f64();
    if secs < 10.0 {
        format!("{secs:.1} s ago")
    } else if secs < 120.0 {
        format!("{secs:.0} s ago")
    } else if secs < 7200.0 {
        format!("{:.0} min ago", secs / 60.0)
    } else {
        format!("{:.0} h ago", secs / 3600.0)
    }
}

fn ago_ms(ms: u64) -> String {
    ago(Duration::from_millis(ms))
}

/// Bootstrap's view: phase, lookup, stability and verdict, then each contact point with its
/// last probe, then the targets not probed.
pub(crate) fn bootstrap_table(s: &StatusView) -> String {
    let phase = serde_json::to_value(s.phase)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let mut out = String::new();
    let _ = writeln!(out, "PHASE          {phase}");
    if let Some(note) = &s.note {
        let _ = writeln!(out, "NOTE           {note}");
    }
    let last = match &s.last_lookup {
        None => "none yet".to_owned(),
        Some(l) => match (&l.error, l.targets) {
            (Some(e), _) => format!("{}: failed: {e}", ago_ms(l.age_ms)),
            (None, Some(n)) => format!("{}: {n} targets", ago_ms(l.age_ms)),
            (None, None) => ago_ms(l.age_ms),
        },
    };
    let _ = writeln!(out, "LOOKUP         {} ({} lookups; last {last})", s.lookup, s.lookups);
    let _ = writeln!(out, "SELF           {}", s.self_contact_point);
    let stable = s.stable_for_ms.map_or_else(
        || "-".to_owned(),
        |ms| format!("{:.1} s", Duration::from_millis(ms).as_secs_f64()),
    );
    let _ = writeln!(out, "STABLE FOR     {stable}");
    match &s.verdict {
        None => {
            let _ = writeln!(out, "VERDICT        none yet");
        }
        Some(v) => {
            let _ =
                writeln!(out, "VERDICT        {} ({}): {}", v.decision, ago_ms(v.age_ms), v.reason);
            if let Some(seeds) = &v.seed_nodes {
                let _ = writeln!(out, "SEED NODES     {}", seeds.join(", "));
            }
            if !v.self_in_contact_points {
                let _ = writeln!(
                    out,
                    "WARNING        this node's contact point is not among the discovered ones"
                );
            }
        }
    }
    let points: Vec<String> = s
        .contact_points
        .iter()
        .map(|c| match c.port {
            Some(p) => format!("{}:{p}", c.host),
            None => c.host.clone(),
        })
        .collect();
    let width = column_width("CONTACT POINT", points.iter().map(String::as_str));
    let _ = writeln!(out, "\n{:<width$}  {:>8}  LAST PROBE", "CONTACT POINT", "FAILURES");
    for (c, point) in s.contact_points.iter().zip(&points) {
        let probe = match &c.last_probe {
            None => "none yet".to_owned(),
            Some(p) => match (&p.error, &p.self_node) {
                (Some(e), _) => format!("{}: failed: {e}", ago_ms(p.age_ms)),
                (None, Some(node)) => format!(
                    "{}: {node}, {} seed nodes",
                    ago_ms(p.age_ms),
                    p.seed_nodes.as_ref().map_or(0, Vec::len)
                ),
                (None, None) => ago_ms(p.age_ms),
            },
        };
        let gave_up =
            c.gave_up_ms_ago.map(|ms| format!(" (gave up {})", ago_ms(ms))).unwrap_or_default();
        let _ = writeln!(out, "{point:<width$}  {:>8}  {probe}{gave_up}", c.failures);
    }
    for d in &s.dropped_targets {
        let _ = writeln!(out, "NOT PROBED {d}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use convoke::management::{ClusterSingleton, FailedMember, MemberShards, ShardDetails};

    fn shard(id: &str, n: u64) -> ShardDetails {
        ShardDetails { shard_id: id.into(), num_entities: n }
    }

    #[test]
    fn the_cluster_shard_table_sums_each_member_and_names_the_silent_ones() {
        let stats = ClusterShardingStats {
            regions: vec![
                MemberShards {
                    address: "convoke@b:2".into(),
                    shards: vec![shard("1", 4), shard("7", 1)],
                },
                MemberShards { address: "convoke@a:1".into(), shards: vec![shard("2", 10)] },
            ],
            failed: vec![FailedMember { address: "convoke@c:3".into(), error: "timed out".into() }],
        };
        let table = shard_stats_table(&stats);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            ["MEMBER", "SHARDS", "ENTITIES"]
        );
        assert_eq!(lines[1].split_whitespace().collect::<Vec<_>>(), ["convoke@a:1", "1", "10"]);
        assert_eq!(lines[2].split_whitespace().collect::<Vec<_>>(), ["convoke@b:2", "2", "5"]);
        assert_eq!(lines[3].split_whitespace().collect::<Vec<_>>(), ["TOTAL", "3", "15"]);
        assert_eq!(lines[4], "NO ANSWER convoke@c:3: timed out");
        assert_eq!(lines.len(), 5);
    }

    #[test]
    fn a_region_lists_numeric_shard_ids_by_value() {
        let stats =
            ShardRegionStats { regions: vec![shard("10", 1), shard("9", 2), shard("a", 3)] };
        let ids: Vec<String> = shard_region_table(&stats)
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().next().unwrap().to_owned())
            .collect();
        assert_eq!(ids, ["9", "a", "10"]);
    }

    #[test]
    fn the_singleton_table_shows_where_each_runs_and_for_how_long() {
        let list = ClusterSingletons {
            self_node: "convoke@a:1".into(),
            singletons: vec![
                ClusterSingleton {
                    name: "lock".into(),
                    role: None,
                    host: Some("convoke@a:1".into()),
                    host_uid: Some("7".into()),
                    running_here: true,
                    state: "running".into(),
                    since: 1_000_000,
                },
                ClusterSingleton {
                    name: "scheduler".into(),
                    role: Some("backend".into()),
                    host: None,
                    host_uid: None,
                    running_here: false,
                    state: "waiting".into(),
                    since: 0,
                },
            ],
        };
        let table = singletons_table(&list, Duration::from_millis(1_000_000 + 42_000));
        let rows: Vec<Vec<&str>> = table.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(rows[0], ["NAME", "ROLE", "STATE", "HOST", "HERE", "SINCE"]);
        assert_eq!(rows[1], ["lock", "-", "running", "convoke@a:1", "yes", "42", "s", "ago"]);
        assert_eq!(rows[2], ["scheduler", "backend", "waiting", "-", "no", "-"]);
    }

    #[test]
    fn ages_read_in_a_unit_that_fits() {
        assert_eq!(ago(Duration::from_millis(4_240)), "4.2 s ago");
        assert_eq!(ago(Duration::from_secs(95)), "95 s ago");
        assert_eq!(ago(Duration::from_secs(720)), "12 min ago");
        assert_eq!(ago(Duration::from_secs(3 * 3600)), "3 h ago");
    }

    #[test]
    fn path_segments_keep_addresses_readable_and_escape_what_would_split_them() {
        assert_eq!(member_path("convoke@h:1"), "/cluster/members/convoke@h:1");
        assert_eq!(member_path("convoke://s@h:1"), "/cluster/members/convoke://s@h:1");
        assert_eq!(segment("a b/c?d#e%"), "a%20b%2Fc%3Fd%23e%25");
    }

    #[test]
    fn exit_statuses_leave_two_to_usage_errors() {
        let codes = [Failure::Unavailable, Failure::NotFound, Failure::Refused].map(|f| f as u8);
        assert_eq!(codes, [1, 3, 4]);
    }
}
