//! `[data]`: the replicated store (`docs/data.md`).

use std::path::PathBuf;
use std::time::Duration;

use convoke_data::{DataConfig, Level};
use convoke_membership::config::text;
use serde::{Deserialize, Serialize};

use super::SettingsError;

/// When a replica's writes reach the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SyncMode {
    /// Synced before the replica acknowledges them (writes that arrive together share a sync).
    Always,
    /// Synced every `data.sync_interval`; acknowledged before. A crash of the process or the
    /// machine loses what the last interval wrote on it.
    Interval,
}

/// The replicated store's settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataSettings {
    /// Whether the node runs the store.
    pub enabled: bool,
    /// Where this node keeps its replicas; required when the store is enabled. A node restarted
    /// with the same directory (and address) keeps its data.
    pub dir: PathBuf,
    /// When writes reach the disk: `"always"` (before they are acknowledged) or `"interval"`.
    pub sync: SyncMode,
    /// With `sync = "interval"`: how often the disk is synced, the window a crash may lose.
    #[serde(with = "text::duration")]
    pub sync_interval: Duration,
    /// Replicas per key (N).
    pub replicas: usize,
    /// Tokens per member on the ring.
    pub vnodes: u32,
    /// Only members with this role hold data; `""` for every member.
    pub role: String,
    /// The read level when a request names none: `one`, `quorum`, `all` or a count.
    pub read: Level,
    /// The write level when a request names none.
    pub write: Level,
    /// How long a request waits for the replicas it needs.
    #[serde(with = "text::duration")]
    pub request_timeout: Duration,
    /// The longest key, in bytes.
    pub max_key_bytes: usize,
    /// The largest value, in bytes.
    pub max_value_bytes: usize,
    /// The most concurrent values (siblings) a key may hold.
    pub max_siblings: usize,
    /// The most writes a node holds for unreachable replicas.
    pub max_hints: usize,
    /// How often held writes are offered to their replicas.
    #[serde(with = "text::duration")]
    pub hint_interval: Duration,
    /// How often a replica compares some of its ranges with the other replicas.
    #[serde(with = "text::duration")]
    pub anti_entropy_interval: Duration,
    /// Ranges (arcs of the ring) compared per anti-entropy round.
    pub arcs_per_round: usize,
    /// Keys per handoff message when ranges move.
    pub handoff_batch: usize,
    /// How long a member that held data and went away without leaving (crashed, downed) keeps
    /// its ranges: keys it replicated wait for its return rather than move.
    #[serde(with = "text::duration")]
    pub absent_timeout: Duration,
}

impl Default for DataSettings {
    fn default() -> Self {
        let c = DataConfig::default();
        Self {
            enabled: false,
            dir: PathBuf::new(),
            sync: SyncMode::Always,
            sync_interval: Duration::from_millis(100),
            replicas: c.replicas,
            vnodes: c.vnodes,
            role: String::new(),
            read: c.read,
            write: c.write,
            request_timeout: c.request_timeout,
            max_key_bytes: c.max_key_bytes,
            max_value_bytes: c.max_value_bytes,
            max_siblings: c.max_siblings,
            max_hints: c.max_hints,
            hint_interval: c.hint_interval,
            anti_entropy_interval: c.anti_entropy_interval,
            arcs_per_round: c.arcs_per_round,
            handoff_batch: c.handoff_batch,
            absent_timeout: c.absent_timeout,
        }
    }
}

impl DataSettings {
    /// Checks the ranges serde cannot.
    ///
    /// # Errors
    /// The first bad key.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if self.enabled && self.dir.as_os_str().is_empty() {
            return Err(SettingsError::new(
                "data.dir",
                "\"\"",
                "a directory for this node's replicas (the store is enabled)",
            ));
        }
        let counts = [
            ("data.replicas", self.replicas, 1, 64),
            ("data.vnodes", self.vnodes as usize, 1, 4096),
            ("data.max_key_bytes", self.max_key_bytes, 1, 65_536),
            ("data.max_value_bytes", self.max_value_bytes, 1, 64 << 20),
            ("data.max_siblings", self.max_siblings, 1, 1024),
            ("data.max_hints", self.max_hints, 0, 100_000_000),
            ("data.arcs_per_round", self.arcs_per_round, 1, 65_536),
            ("data.handoff_batch", self.handoff_batch, 1, 100_000),
        ];
        for (key, n, min, max) in counts {
            if !(min..=max).contains(&n) {
                return Err(SettingsError::new(
                    key,
                    n.to_string(),
                    format!("a number from {min} to {max}"),
                ));
            }
        }
        for (key, level) in [("data.read", self.read), ("data.write", self.write)] {
            if let Level::Count(c) = level
                && usize::from(c) > self.replicas
            {
                return Err(SettingsError::new(
                    key,
                    format!("\"{c}\""),
                    format!(
                        "one, quorum, all or a count of at most data.replicas ({})",
                        self.replicas
                    ),
                ));
            }
        }
        let durations = [
            ("data.sync_interval", self.sync_interval),
            ("data.request_timeout", self.request_timeout),
            ("data.hint_interval", self.hint_interval),
            ("data.anti_entropy_interval", self.anti_entropy_interval),
            ("data.absent_timeout", self.absent_timeout),
        ];
        for (key, d) in durations {
            if d.is_zero() {
                return Err(SettingsError::new(
                    key,
                    "\"0s\"",
                    "a duration above zero, like \"1s\"",
                ));
            }
        }
        Ok(())
    }

    /// The store machine's configuration.
    pub fn config(&self) -> DataConfig {
        DataConfig {
            replicas: self.replicas,
            vnodes: self.vnodes,
            role: (!self.role.is_empty()).then(|| self.role.clone()),
            read: self.read,
            write: self.write,
            request_timeout: self.request_timeout,
            max_key_bytes: self.max_key_bytes,
            max_value_bytes: self.max_value_bytes,
            max_siblings: self.max_siblings,
            max_hints: self.max_hints,
            hint_interval: self.hint_interval,
            anti_entropy_interval: self.anti_entropy_interval,
            arcs_per_round: self.arcs_per_round,
            handoff_batch: self.handoff_batch,
            absent_timeout: self.absent_timeout,
        }
    }
}
