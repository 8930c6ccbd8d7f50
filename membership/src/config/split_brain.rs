//! Settings of the split-brain resolver (`[cluster.split_brain_resolver]`): the active strategy,
//! the timing all strategies share, and one sub-table per strategy, with the lease-majority
//! strategy's lease timing.

use std::time::Duration;

use super::format_duration;
#[cfg(feature = "serde")]
use super::text;
use super::{ACTIVE_STRATEGIES, ConfigError, DOWN_ALL_WHEN_UNSTABLE_ON_AT_LEAST, SwitchDuration};

/// How often a held lease is renewed unless configured otherwise (also
/// [`LeaseSettings::new`](crate::sbr::LeaseSettings::new)'s, so the two cannot drift).
pub(crate) const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(12);
/// After how long an unrenewed lease expires unless configured otherwise.
pub(crate) const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(120);
/// After how long a lease operation fails unless configured otherwise.
pub(crate) const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(5);

/// Settings of the split-brain resolver (`cluster.split_brain_resolver`): the active strategy,
/// the timing shared by all strategies, and one sub-table of settings per strategy.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct SplitBrainResolverConfig {
    /// `cluster.split_brain_resolver.active_strategy`: one of [`ACTIVE_STRATEGIES`]; `"off"`
    /// downs nothing automatically.
    pub active_strategy: String,
    /// `cluster.split_brain_resolver.stable_after`: how long membership and reachability must be
    /// unchanged before the resolver acts. May be zero.
    #[cfg_attr(feature = "serde", serde(with = "text::duration"))]
    pub stable_after: Duration,
    /// `cluster.split_brain_resolver.down_all_when_unstable`: down every node when reachability
    /// keeps changing for this long after `stable_after`. [`SwitchDuration::On`] means the larger
    /// of [`DOWN_ALL_WHEN_UNSTABLE_ON_AT_LEAST`] and ¾ of `stable_after`; see
    /// [`down_all_when_unstable_after`](SplitBrainResolverConfig::down_all_when_unstable_after).
    pub down_all_when_unstable: SwitchDuration,
    /// `cluster.split_brain_resolver.keep_majority`: settings of the keep-majority strategy.
    pub keep_majority: KeepMajorityConfig,
    /// `cluster.split_brain_resolver.static_quorum`: settings of the static-quorum strategy.
    pub static_quorum: StaticQuorumConfig,
    /// `cluster.split_brain_resolver.keep_oldest`: settings of the keep-oldest strategy.
    pub keep_oldest: KeepOldestConfig,
    /// `cluster.split_brain_resolver.lease_majority`: settings of the lease-majority strategy.
    pub lease_majority: LeaseMajorityConfig,
}

impl Default for SplitBrainResolverConfig {
    fn default() -> Self {
        Self {
            active_strategy: "keep-majority".to_owned(),
            stable_after: Duration::from_secs(20),
            down_all_when_unstable: SwitchDuration::On,
            keep_majority: KeepMajorityConfig::default(),
            static_quorum: StaticQuorumConfig::default(),
            keep_oldest: KeepOldestConfig::default(),
            lease_majority: LeaseMajorityConfig::default(),
        }
    }
}

impl SplitBrainResolverConfig {
    /// The effective `down_all_when_unstable` delay, `None` when it is off.
    pub fn down_all_when_unstable_after(&self) -> Option<Duration> {
        let on = (self.stable_after * 3 / 4).max(DOWN_ALL_WHEN_UNSTABLE_ON_AT_LEAST);
        self.down_all_when_unstable.resolve(on)
    }

    /// Whether automatic downing is on (`active_strategy` is not `"off"`).
    pub fn is_active(&self) -> bool {
        self.active_strategy != "off"
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !ACTIVE_STRATEGIES.contains(&self.active_strategy.as_str()) {
            return Err(ConfigError::new(
                "cluster.split_brain_resolver.active_strategy",
                format!("{:?}", self.active_strategy),
                format!("one of {}", ACTIVE_STRATEGIES.join(", ")),
            ));
        }
        if self.down_all_when_unstable == SwitchDuration::After(Duration::ZERO) {
            return Err(ConfigError::new(
                "cluster.split_brain_resolver.down_all_when_unstable",
                format_duration(Duration::ZERO),
                "\"on\", \"off\" or a duration greater than 0",
            ));
        }
        // The quorum size has no sensible default, so it is only required of the strategy that
        // uses it; a node configured for another strategy may leave it unset.
        if self.active_strategy == "static-quorum" && self.static_quorum.quorum_size == 0 {
            return Err(ConfigError::new(
                "cluster.split_brain_resolver.static_quorum.quorum_size",
                self.static_quorum.quorum_size.to_string(),
                "an integer of at least 1 (the static-quorum strategy requires it)",
            ));
        }
        let lease = &self.lease_majority;
        if lease.lease_name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(ConfigError::new(
                "cluster.split_brain_resolver.lease_majority.lease_name",
                format!("{:?}", lease.lease_name),
                "a name without spaces, or \"\" for \"<system_name>-convoke-sbr\"",
            ));
        }
        // The lease's timing matters only to the strategy that takes it; a node configured for
        // another strategy may leave it inconsistent.
        if self.active_strategy == "lease-majority" {
            lease.validate_timing()?;
        }
        Ok(())
    }
}

/// Settings of the keep-majority strategy (`cluster.split_brain_resolver.keep_majority`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct KeepMajorityConfig {
    /// `cluster.split_brain_resolver.keep_majority.role`: count only members with this role;
    /// `""` (the default) counts all.
    pub role: String,
}

/// Settings of the static-quorum strategy (`cluster.split_brain_resolver.static_quorum`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct StaticQuorumConfig {
    /// `cluster.split_brain_resolver.static_quorum.quorum_size`: the side that still has at least
    /// this many members survives. Required (at least 1) when the strategy is active; `0`, the
    /// default, means unset. A cluster must not grow beyond `2 · quorum_size − 1` members, or both
    /// sides of a split could survive: the strategy downs all nodes in that case.
    pub quorum_size: usize,
    /// `cluster.split_brain_resolver.static_quorum.role`: count only members with this role;
    /// `""` (the default) counts all.
    pub role: String,
}

/// Settings of the keep-oldest strategy (`cluster.split_brain_resolver.keep_oldest`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct KeepOldestConfig {
    /// `cluster.split_brain_resolver.keep_oldest.down_if_alone`: when the oldest member is cut off
    /// alone from two or more others, it downs itself and the others survive. Default `true`.
    pub down_if_alone: bool,
    /// `cluster.split_brain_resolver.keep_oldest.role`: the oldest among members with this role
    /// decides; `""` (the default) considers all.
    pub role: String,
}

impl Default for KeepOldestConfig {
    fn default() -> Self {
        Self { down_if_alone: true, role: String::new() }
    }
}

/// Settings of the lease-majority strategy (`cluster.split_brain_resolver.lease_majority`): how it
/// decides, and the timing of its lease ([`LeaseSettings::for_node`](crate::sbr::LeaseSettings::for_node)).
///
/// With the `serde` feature, unknown keys of the table are *not* rejected here: the runtime keeps
/// where its lease store is (the `kubernetes_*` keys) in the same table, reads it into this type
/// and into its own keys, and checks for keys neither knows.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
#[non_exhaustive]
pub struct LeaseMajorityConfig {
    /// `cluster.split_brain_resolver.lease_majority.lease_name`: the lease both sides contend
    /// for; `""` (the default) is `"<system_name>-convoke-sbr"`. See
    /// [`effective_lease_name`](LeaseMajorityConfig::effective_lease_name).
    pub lease_name: String,
    /// `cluster.split_brain_resolver.lease_majority.acquire_lease_delay_for_minority`: how long
    /// the minority side waits before it tries to take the lease, so that the majority usually
    /// wins. Default 2 s.
    #[cfg_attr(feature = "serde", serde(with = "text::duration"))]
    pub acquire_lease_delay_for_minority: Duration,
    /// `cluster.split_brain_resolver.lease_majority.release_after`: after the downed nodes are
    /// removed, the winner keeps the lease this much longer before releasing it. Default 40 s.
    #[cfg_attr(feature = "serde", serde(with = "text::duration"))]
    pub release_after: Duration,
    /// `cluster.split_brain_resolver.lease_majority.role`: count only members with this role
    /// when deciding which side is the minority; `""` (the default) counts all.
    pub role: String,
    /// `cluster.split_brain_resolver.lease_majority.heartbeat_interval`: how often the holder
    /// renews the lease. At most half of `heartbeat_timeout`. Default 12 s.
    #[cfg_attr(feature = "serde", serde(with = "text::duration"))]
    pub heartbeat_interval: Duration,
    /// `cluster.split_brain_resolver.lease_majority.heartbeat_timeout`: a lease not renewed for
    /// this long has expired and may be taken by the other side. Default 120 s.
    #[cfg_attr(feature = "serde", serde(with = "text::duration"))]
    pub heartbeat_timeout: Duration,
    /// `cluster.split_brain_resolver.lease_majority.lease_operation_timeout`: a lease operation
    /// taking longer has failed, and the lease counts as not taken. Less than
    /// `heartbeat_timeout`. Default 5 s.
    #[cfg_attr(feature = "serde", serde(with = "text::duration"))]
    pub lease_operation_timeout: Duration,
}

impl Default for LeaseMajorityConfig {
    fn default() -> Self {
        Self {
            lease_name: String::new(),
            acquire_lease_delay_for_minority: Duration::from_secs(2),
            release_after: Duration::from_secs(40),
            role: String::new(),
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            heartbeat_timeout: DEFAULT_HEARTBEAT_TIMEOUT,
            lease_operation_timeout: DEFAULT_OPERATION_TIMEOUT,
        }
    }
}

impl LeaseMajorityConfig {
    /// The lease name: the configured one, or `"<system_name>-convoke-sbr"` when it is empty.
    pub fn effective_lease_name(&self, system_name: &str) -> String {
        if self.lease_name.is_empty() {
            format!("{system_name}-convoke-sbr")
        } else {
            self.lease_name.clone()
        }
    }

    /// Checks the lease timing: every duration positive, and renewals at least twice within a
    /// `heartbeat_timeout`, so that one slow or failed renewal does not lose the lease.
    pub(super) fn validate_timing(&self) -> Result<(), ConfigError> {
        let key = |k: &str| format!("cluster.split_brain_resolver.lease_majority.{k}");
        for (k, d) in [
            ("heartbeat_interval", self.heartbeat_interval),
            ("heartbeat_timeout", self.heartbeat_timeout),
            ("lease_operation_timeout", self.lease_operation_timeout),
        ] {
            if d.is_zero() {
                return Err(ConfigError::new(key(k), "\"0s\"", "a duration greater than 0"));
            }
        }
        if self.heartbeat_interval * 2 > self.heartbeat_timeout {
            return Err(ConfigError::new(
                key("heartbeat_interval"),
                format!("{:?}", format_duration(self.heartbeat_interval)),
                format!(
                    "at most half of heartbeat_timeout ({}), so that the lease is renewed at \
                     least twice before it expires",
                    format_duration(self.heartbeat_timeout)
                ),
            ));
        }
        if self.lease_operation_timeout >= self.heartbeat_timeout {
            return Err(ConfigError::new(
                key("lease_operation_timeout"),
                format!("{:?}", format_duration(self.lease_operation_timeout)),
                format!(
                    "less than heartbeat_timeout ({})",
                    format_duration(self.heartbeat_timeout)
                ),
            ));
        }
        Ok(())
    }
}
