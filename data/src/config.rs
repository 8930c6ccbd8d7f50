//! The store's settings and consistency levels.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How many replicas must answer a read (R) or accept a write (W). Written as `one`, `quorum`,
/// `all` or a count (`"2"`), in settings, URLs and on the wire alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Level {
    /// One replica.
    One,
    /// A majority of the N replicas: N / 2 + 1.
    Quorum,
    /// All N replicas.
    All,
    /// This many replicas (1 to N).
    Count(u8),
}

impl Level {
    /// How many of `n` replicas this level needs (at least 1, at most `n`).
    pub fn required(self, n: usize) -> usize {
        let r = match self {
            Self::One => 1,
            Self::Quorum => n / 2 + 1,
            Self::All => n,
            Self::Count(c) => usize::from(c),
        };
        r.clamp(1, n.max(1))
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::One => f.write_str("one"),
            Self::Quorum => f.write_str("quorum"),
            Self::All => f.write_str("all"),
            Self::Count(c) => write!(f, "{c}"),
        }
    }
}

impl From<Level> for String {
    fn from(l: Level) -> String {
        l.to_string()
    }
}

impl TryFrom<String> for Level {
    type Error = BadLevel;

    fn try_from(s: String) -> Result<Self, BadLevel> {
        s.parse()
    }
}

/// A level that is neither a name nor a count from 1 to 255.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("consistency level {0:?}: expected one, quorum, all or a count of replicas from 1")]
pub struct BadLevel(pub String);

impl FromStr for Level {
    type Err = BadLevel;

    fn from_str(s: &str) -> Result<Self, BadLevel> {
        match s {
            "one" => Ok(Self::One),
            "quorum" => Ok(Self::Quorum),
            "all" => Ok(Self::All),
            n => match n.parse::<u8>() {
                Ok(c) if c > 0 => Ok(Self::Count(c)),
                _ => Err(BadLevel(s.to_owned())),
            },
        }
    }
}

/// The store's settings (`[data]` in the node's configuration).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataConfig {
    /// Replicas per key (N).
    pub replicas: usize,
    /// Tokens per member on the ring.
    pub vnodes: u32,
    /// Only members with this role hold data (every member when `None`).
    pub role: Option<String>,
    /// The read level when a request names none.
    pub read: Level,
    /// The write level when a request names none.
    pub write: Level,
    /// How long a coordinator waits for the answers a request needs.
    pub request_timeout: Duration,
    /// The longest key, in bytes.
    pub max_key_bytes: usize,
    /// The largest value, in bytes (a CRDT's encoded size counts).
    pub max_value_bytes: usize,
    /// The most current values (siblings) a key may hold; a write that would add one more is
    /// refused until a write with a context resolves them.
    pub max_siblings: usize,
    /// The most writes a node holds for unreachable replicas (hinted handoff).
    pub max_hints: usize,
    /// How often a node offers its hinted writes to their replicas.
    pub hint_interval: Duration,
    /// How often a replica compares some of its arcs with their other replicas, and hands off
    /// a batch of keys it no longer replicates.
    pub anti_entropy_interval: Duration,
    /// Arcs compared per anti-entropy round: every arc a node replicates is compared once in
    /// (its arcs / this) rounds.
    pub arcs_per_round: usize,
    /// Keys per handoff message.
    pub handoff_batch: usize,
    /// How long a member that held data and went away without a graceful leave (it crashed,
    /// or was downed) keeps its place on the ring, so that the keys it replicated wait for its
    /// copies rather than move to members that never held them (docs/data.md, "Absent
    /// holders").
    pub absent_timeout: Duration,
}

impl Default for DataConfig {
    fn default() -> Self {
        Self {
            replicas: 3,
            vnodes: 64,
            role: None,
            read: Level::Quorum,
            write: Level::Quorum,
            request_timeout: Duration::from_secs(5),
            max_key_bytes: 1024,
            max_value_bytes: 1 << 20,
            max_siblings: 32,
            max_hints: 100_000,
            hint_interval: Duration::from_secs(1),
            anti_entropy_interval: Duration::from_secs(1),
            arcs_per_round: 4,
            handoff_batch: 1000,
            absent_timeout: Duration::from_secs(600),
        }
    }
}
