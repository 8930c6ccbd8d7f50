//! Settings of the membership core: [`Config`] and the failure detector's settings with their
//! defaults and validation. The split-brain resolver's settings are in `split_brain.rs`; how
//! values are written as text (durations, on/off switches) in `text.rs`; the keys a joiner
//! compares with the cluster in [`crate::compat`].
//!
//! Field names are the configuration keys (README, "Configuration") without their table prefix:
//! `Config::gossip_interval` is `cluster.gossip_interval`, `FailureDetectorConfig::threshold` is
//! `cluster.failure_detector.threshold`. Errors name the full dotted key so that a bad setting can
//! be found in whichever layer set it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

mod split_brain;
pub mod text;

pub(crate) use split_brain::{
    DEFAULT_HEARTBEAT_INTERVAL, DEFAULT_HEARTBEAT_TIMEOUT, DEFAULT_OPERATION_TIMEOUT,
};
pub use split_brain::{
    KeepMajorityConfig, KeepOldestConfig, LeaseMajorityConfig, SplitBrainResolverConfig,
    StaticQuorumConfig,
};
pub use text::{SwitchDuration, format_duration, parse_duration, parse_switch_duration};

/// The split-brain strategies `cluster.split_brain_resolver.active_strategy` may name.
pub const ACTIVE_STRATEGIES: [&str; 6] =
    ["keep-majority", "static-quorum", "keep-oldest", "down-all", "lease-majority", "off"];

/// What `"on"` means for `cluster.allow_weakly_up_members`, and its default.
pub const ALLOW_WEAKLY_UP_MEMBERS_ON: Duration = Duration::from_secs(7);

/// What `"on"` means for `cluster.retry_unsuccessful_join_after`, and its default.
pub const RETRY_UNSUCCESSFUL_JOIN_AFTER_ON: Duration = Duration::from_secs(10);

/// The shortest delay `"on"` means for `cluster.split_brain_resolver.down_all_when_unstable`;
/// above it, `"on"` is ¾ of `stable_after`. See
/// [`SplitBrainResolverConfig::down_all_when_unstable_after`].
pub const DOWN_ALL_WHEN_UNSTABLE_ON_AT_LEAST: Duration = Duration::from_secs(4);

/// Prefix of the role that carries a member's data center.
const DC_ROLE_PREFIX: &str = "dc-";

/// The configuration of one node's membership core.
///
/// Start from [`Config::default`], which holds the Akka defaults with convoke's own choices
/// (downing on by default), change fields, then call [`Config::validate`].
///
/// With the `serde` feature it is the `[cluster]` table of a settings file: missing keys keep
/// their defaults, durations are text, and `seed` and the two `gossip_different_view`
/// probability keys are not read. Unknown keys are *not* rejected here: the runtime reads the same
/// table into this type and into its own keys (`hostname`, `port`, ...), so it is the runtime
/// that checks for keys neither knows. The nested tables do reject unknown keys, except
/// [`LeaseMajorityConfig`], which the runtime also shares.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
#[non_exhaustive]
pub struct Config {
    /// `cluster.system_name`: the cluster's name; nodes of different systems never join. Letters,
    /// digits, `-` and `_`.
    pub system_name: String,
    /// `cluster.roles`: the user roles of this node. None may start with `dc-`: the data-center
    /// role is added from [`Config::data_center`] (see [`Config::self_roles`]).
    pub roles: BTreeSet<String>,
    /// `cluster.data_center`: this node's data center; the member carries the role `dc-<name>`.
    pub data_center: String,
    /// `cluster.app_version`: the application version carried in the join request, as text.
    pub app_version: String,
    /// `cluster.min_nr_of_members`: the leader moves no member to Up until the cluster has this
    /// many members (any status).
    pub min_nr_of_members: usize,
    /// `cluster.role_min_nr_of_members.<role>`: the same threshold per role.
    pub role_min_nr_of_members: BTreeMap<String, usize>,
    /// `cluster.seed_node_timeout`: how long to wait for seed nodes to answer before asking again
    /// (and, on the first seed, before forming a new cluster alone).
    #[cfg_attr(feature = "serde", serde(with = "text::duration"))]
    pub seed_node_timeout: Duration,
    /// `cluster.gossip_interval`: how often this node gossips to one other member.
    #[cfg_attr(feature = "serde", serde(with = "text::duration"))]
    pub gossip_interval: Duration,
    /// `cluster.gossip_time_to_live`: gossip not processed within this time of arrival is dropped.
    #[cfg_attr(feature = "serde", serde(with = "text::duration"))]
    pub gossip_time_to_live: Duration,
    /// `cluster.leader_actions_interval`: how often the leader moves members along.
    #[cfg_attr(feature = "serde", serde(with = "text::duration"))]
    pub leader_actions_interval: Duration,
    /// `cluster.unreachable_nodes_reaper_interval`: how often the failure detector's verdicts are
    /// turned into reachability records.
    #[cfg_attr(feature = "serde", serde(with = "text::duration"))]
    pub unreachable_nodes_reaper_interval: Duration,
    /// `cluster.periodic_tasks_initial_delay`: periodic tasks first run after the larger of this
    /// and their interval.
    #[cfg_attr(feature = "serde", serde(with = "text::duration"))]
    pub periodic_tasks_initial_delay: Duration,
    /// `cluster.allow_weakly_up_members`: after how long without convergence the leader moves
    /// Joining members to WeaklyUp; `None` (`"off"`) never. `"on"` is
    /// [`ALLOW_WEAKLY_UP_MEMBERS_ON`].
    #[cfg_attr(feature = "serde", serde(with = "allow_weakly_up_members"))]
    pub allow_weakly_up_members: Option<Duration>,
    /// `cluster.retry_unsuccessful_join_after`: resend an unanswered join after this long; `None`
    /// (`"off"`) never. `"on"` is [`RETRY_UNSUCCESSFUL_JOIN_AFTER_ON`].
    #[cfg_attr(feature = "serde", serde(with = "retry_unsuccessful_join_after"))]
    pub retry_unsuccessful_join_after: Option<Duration>,
    /// `cluster.shutdown_after_unsuccessful_join_seed_nodes`: give up and ask for shutdown when
    /// joining the seed nodes has not succeeded after this long; `None` (`"off"`) keeps trying.
    /// There is no `"on"`: no delay suits every deployment.
    #[cfg_attr(feature = "serde", serde(with = "text::off_or_duration"))]
    pub shutdown_after_unsuccessful_join_seed_nodes: Option<Duration>,
    /// `cluster.prune_gossip_tombstones_after`: how long the leader keeps tombstones of removed
    /// members. A partition longer than this may bring removed members back.
    #[cfg_attr(feature = "serde", serde(with = "text::duration"))]
    pub prune_gossip_tombstones_after: Duration,
    /// `cluster.gossip_different_view_probability`: with
    /// [`TargetPreference::ReducedProbability`], the probability of gossiping to a member that
    /// has not seen the current state, in clusters up to
    /// [`Config::reduce_gossip_different_view_probability`] members.
    #[cfg_attr(feature = "serde", serde(skip))]
    pub gossip_different_view_probability: f64,
    /// `cluster.reduce_gossip_different_view_probability`: the cluster size from which that
    /// probability falls, reaching a tenth of it at three times this size.
    #[cfg_attr(feature = "serde", serde(skip))]
    pub reduce_gossip_different_view_probability: usize,
    /// `cluster.gossip_target_preference`: how gossip targets are chosen.
    pub gossip_target_preference: TargetPreference,
    /// `cluster.config_compat_enforce_on_join`: refuse to join a cluster whose
    /// [compatibility keys](Config::compat_keys) differ (otherwise only warn).
    pub config_compat_enforce_on_join: bool,
    /// `cluster.seed`: the seed of the core's random number generator. The runtime picks a random
    /// one at start; tests and the simulator set it to replay a run.
    #[cfg_attr(feature = "serde", serde(skip))]
    pub seed: u64,
    /// `cluster.failure_detector`: the phi-accrual failure detector and the heartbeat ring.
    pub failure_detector: FailureDetectorConfig,
    /// `cluster.split_brain_resolver`: automatic downing.
    pub split_brain_resolver: SplitBrainResolverConfig,
    /// Settings of the layers above the core that a joiner must share with the cluster, keyed by
    /// their configuration key (the runtime adds `sharding.number_of_shards`). Sent with the join
    /// request; a key both sides send must have the same value (see [`crate::compat`]).
    #[cfg_attr(feature = "serde", serde(skip))]
    pub extra_compat_keys: BTreeMap<String, String>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            system_name: "convoke".to_owned(),
            roles: BTreeSet::new(),
            data_center: "default".to_owned(),
            app_version: "0.0.0".to_owned(),
            min_nr_of_members: 1,
            role_min_nr_of_members: BTreeMap::new(),
            seed_node_timeout: Duration::from_secs(5),
            gossip_interval: Duration::from_secs(1),
            gossip_time_to_live: Duration::from_secs(2),
            leader_actions_interval: Duration::from_secs(1),
            unreachable_nodes_reaper_interval: Duration::from_secs(1),
            periodic_tasks_initial_delay: Duration::from_secs(1),
            allow_weakly_up_members: Some(ALLOW_WEAKLY_UP_MEMBERS_ON),
            retry_unsuccessful_join_after: Some(RETRY_UNSUCCESSFUL_JOIN_AFTER_ON),
            shutdown_after_unsuccessful_join_seed_nodes: None,
            prune_gossip_tombstones_after: Duration::from_secs(24 * 60 * 60),
            gossip_different_view_probability: 0.8,
            reduce_gossip_different_view_probability: 400,
            gossip_target_preference: TargetPreference::AlwaysPreferUnseen,
            config_compat_enforce_on_join: true,
            seed: 0,
            failure_detector: FailureDetectorConfig::default(),
            split_brain_resolver: SplitBrainResolverConfig::default(),
            extra_compat_keys: BTreeMap::new(),
        }
    }
}

impl Config {
    /// Checks every setting, returning the first bad one.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the key, the bad value and what was expected.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.system_name.is_empty()
            || !self.system_name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(ConfigError::new(
                "cluster.system_name",
                format!("{:?}", self.system_name),
                "a non-empty name of letters, digits, '-' and '_'",
            ));
        }
        if let Some(role) =
            self.roles.iter().find(|r| r.is_empty() || r.starts_with(DC_ROLE_PREFIX))
        {
            return Err(ConfigError::new(
                "cluster.roles",
                format!("{role:?}"),
                "non-empty role names that do not start with \"dc-\" (the data-center role comes \
                 from cluster.data_center)",
            ));
        }
        if self.data_center.is_empty()
            || self.data_center.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(ConfigError::new(
                "cluster.data_center",
                format!("{:?}", self.data_center),
                "a non-empty name without spaces",
            ));
        }
        if self.app_version.trim().is_empty() {
            return Err(ConfigError::new(
                "cluster.app_version",
                format!("{:?}", self.app_version),
                "a non-empty version like \"1.2.3\"",
            ));
        }
        at_least_one("cluster.min_nr_of_members", self.min_nr_of_members)?;
        for (role, &n) in &self.role_min_nr_of_members {
            if role.is_empty() {
                return Err(ConfigError::new(
                    "cluster.role_min_nr_of_members",
                    format!("{role:?}"),
                    "non-empty role names",
                ));
            }
            at_least_one(&format!("cluster.role_min_nr_of_members.{role}"), n)?;
        }
        positive("cluster.seed_node_timeout", self.seed_node_timeout)?;
        positive("cluster.gossip_interval", self.gossip_interval)?;
        positive("cluster.gossip_time_to_live", self.gossip_time_to_live)?;
        positive("cluster.leader_actions_interval", self.leader_actions_interval)?;
        positive(
            "cluster.unreachable_nodes_reaper_interval",
            self.unreachable_nodes_reaper_interval,
        )?;
        // periodic_tasks_initial_delay may be zero: tasks still wait for their own interval.
        positive_or_off("cluster.allow_weakly_up_members", self.allow_weakly_up_members)?;
        positive_or_off(
            "cluster.retry_unsuccessful_join_after",
            self.retry_unsuccessful_join_after,
        )?;
        positive_or_off(
            "cluster.shutdown_after_unsuccessful_join_seed_nodes",
            self.shutdown_after_unsuccessful_join_seed_nodes,
        )?;
        // Zero would prune a tombstone as soon as it is made, letting stale gossip bring the
        // removed member back.
        positive("cluster.prune_gossip_tombstones_after", self.prune_gossip_tombstones_after)?;
        let p = self.gossip_different_view_probability;
        if !(0.0..=1.0).contains(&p) {
            return Err(ConfigError::new(
                "cluster.gossip_different_view_probability",
                p.to_string(),
                "a number from 0 to 1",
            ));
        }
        at_least_one(
            "cluster.reduce_gossip_different_view_probability",
            self.reduce_gossip_different_view_probability,
        )?;
        self.failure_detector.validate()?;
        self.split_brain_resolver.validate()
    }

    /// This node's roles as a member: the user roles plus `dc-<data_center>`.
    pub fn self_roles(&self) -> BTreeSet<String> {
        let mut roles = self.roles.clone();
        roles.insert(format!("{DC_ROLE_PREFIX}{}", self.data_center));
        roles
    }

    /// The probability of gossiping to a member that has not seen the current state, in a cluster
    /// of `members` members.
    ///
    /// With [`TargetPreference::AlwaysPreferUnseen`] it is 1. With
    /// [`TargetPreference::ReducedProbability`] it is `P` =
    /// [`gossip_different_view_probability`](Config::gossip_different_view_probability) up to
    /// `L` = [`reduce_gossip_different_view_probability`](Config::reduce_gossip_different_view_probability)
    /// members, falls linearly to `P/10` at `3L` members and stays there, so that large clusters
    /// spread gossip more randomly.
    pub fn different_view_probability(&self, members: usize) -> f64 {
        let p = self.gossip_different_view_probability;
        match self.gossip_target_preference {
            TargetPreference::AlwaysPreferUnseen => 1.0,
            TargetPreference::ReducedProbability => {
                let low = self.reduce_gossip_different_view_probability;
                let high = low.saturating_mul(3);
                if members <= low {
                    p
                } else if members >= high {
                    p / 10.0
                } else {
                    let slope = (p / 10.0 - p) / (high - low) as f64;
                    p + (members - low) as f64 * slope
                }
            }
        }
    }
}

/// Settings of the phi-accrual failure detector and of the heartbeat ring (`cluster.failure_detector`).
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct FailureDetectorConfig {
    /// `cluster.failure_detector.heartbeat_interval`: how often heartbeats are sent; also the
    /// first estimate of the interval between them.
    #[cfg_attr(feature = "serde", serde(with = "text::duration"))]
    pub heartbeat_interval: Duration,
    /// `cluster.failure_detector.threshold`: the phi above which a node is considered unreachable.
    pub threshold: f64,
    /// `cluster.failure_detector.acceptable_heartbeat_pause`: a pause in heartbeats this long is
    /// tolerated (garbage collection, network hiccups). May be zero.
    #[cfg_attr(feature = "serde", serde(with = "text::duration"))]
    pub acceptable_heartbeat_pause: Duration,
    /// `cluster.failure_detector.min_std_deviation`: the floor under the measured standard
    /// deviation, so that very regular heartbeats do not make phi jumpy.
    #[cfg_attr(feature = "serde", serde(with = "text::duration"))]
    pub min_std_deviation: Duration,
    /// `cluster.failure_detector.max_sample_size`: how many heartbeat intervals are remembered.
    pub max_sample_size: usize,
    /// `cluster.failure_detector.monitored_by_nr_of_members`: how many members heartbeat each
    /// member.
    pub monitored_by_nr_of_members: usize,
    /// `cluster.failure_detector.expected_response_after`: a node that never answers its first
    /// heartbeat starts being monitored after this long, so it is still detected.
    #[cfg_attr(feature = "serde", serde(with = "text::duration"))]
    pub expected_response_after: Duration,
}

impl Default for FailureDetectorConfig {
    fn default() -> Self {
        Self {
            heartbeat_interval: Duration::from_secs(1),
            threshold: 8.0,
            acceptable_heartbeat_pause: Duration::from_secs(3),
            min_std_deviation: Duration::from_millis(100),
            max_sample_size: 1000,
            monitored_by_nr_of_members: 9,
            expected_response_after: Duration::from_secs(1),
        }
    }
}

impl FailureDetectorConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        positive("cluster.failure_detector.heartbeat_interval", self.heartbeat_interval)?;
        if !(self.threshold.is_finite() && self.threshold > 0.0) {
            return Err(ConfigError::new(
                "cluster.failure_detector.threshold",
                self.threshold.to_string(),
                "a finite number greater than 0",
            ));
        }
        // The phi computation divides by the standard deviation.
        positive("cluster.failure_detector.min_std_deviation", self.min_std_deviation)?;
        at_least_one("cluster.failure_detector.max_sample_size", self.max_sample_size)?;
        at_least_one(
            "cluster.failure_detector.monitored_by_nr_of_members",
            self.monitored_by_nr_of_members,
        )?;
        positive("cluster.failure_detector.expected_response_after", self.expected_response_after)
    }
}

const TARGET_PREFERENCE_EXPECTED: &str = "\"always-prefer-unseen\" or \"reduced-probability\"";

/// How a node picks the member it gossips to, `cluster.gossip_target_preference`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TargetPreference {
    /// `"always-prefer-unseen"`: gossip to a member that has not seen the current state whenever
    /// there is one. This is what Akka and Pekko do in practice.
    AlwaysPreferUnseen,
    /// `"reduced-probability"`: prefer such a member only with the probability
    /// [`Config::different_view_probability`], which falls in large clusters.
    ReducedProbability,
}

impl TargetPreference {
    /// The configuration value naming this preference.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AlwaysPreferUnseen => "always-prefer-unseen",
            Self::ReducedProbability => "reduced-probability",
        }
    }

    /// Reads the value of `key`, `"always-prefer-unseen"` or `"reduced-probability"`.
    ///
    /// # Errors
    /// A [`ConfigError`] for any other text.
    pub fn parse(key: &str, text: &str) -> Result<Self, ConfigError> {
        [Self::AlwaysPreferUnseen, Self::ReducedProbability]
            .into_iter()
            .find(|p| p.as_str() == text.trim())
            .ok_or_else(|| ConfigError::new(key, format!("{text:?}"), TARGET_PREFERENCE_EXPECTED))
    }
}

impl fmt::Display for TargetPreference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Written as its [name](TargetPreference::as_str).
#[cfg(feature = "serde")]
impl serde::Serialize for TargetPreference {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Reads a name as [`TargetPreference::parse`] does.
#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for TargetPreference {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let text = text::deserialize_text(d, TARGET_PREFERENCE_EXPECTED)?;
        Self::parse("", &text).map_err(|e| D::Error::custom(text::not_valid(&text, &e.expected)))
    }
}

// The serde adapters of the `Option<Duration>` switches of `Config`: `"off"` is `None`, and what
// `"on"` means is each key's own.
#[cfg(feature = "serde")]
mod allow_weakly_up_members {
    pub(super) use super::text::serialize_switch as serialize;

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<std::time::Duration>, D::Error> {
        super::text::deserialize_switch(d, Ok(super::ALLOW_WEAKLY_UP_MEMBERS_ON))
    }
}

#[cfg(feature = "serde")]
mod retry_unsuccessful_join_after {
    pub(super) use super::text::serialize_switch as serialize;

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<std::time::Duration>, D::Error> {
        super::text::deserialize_switch(d, Ok(super::RETRY_UNSUCCESSFUL_JOIN_AFTER_ON))
    }
}

/// A configuration value that is not acceptable: which key, the value, and what was expected.
///
/// Displays as `invalid value for cluster.failure_detector.threshold: -1 (expected a finite
/// number greater than 0)`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid value for {key}: {value} (expected {expected})")]
#[non_exhaustive]
pub struct ConfigError {
    /// The dotted configuration key, e.g. `cluster.failure_detector.threshold`.
    pub key: String,
    /// The bad value as text; strings are quoted.
    pub value: String,
    /// What the key accepts.
    pub expected: String,
}

impl ConfigError {
    /// An error for `key`, whose `value` is not what was `expected`.
    pub fn new(
        key: impl Into<String>,
        value: impl Into<String>,
        expected: impl Into<String>,
    ) -> Self {
        Self { key: key.into(), value: value.into(), expected: expected.into() }
    }
}

fn positive(key: &str, d: Duration) -> Result<(), ConfigError> {
    if d.is_zero() {
        return Err(ConfigError::new(key, format_duration(d), "a duration greater than 0"));
    }
    Ok(())
}

fn positive_or_off(key: &str, d: Option<Duration>) -> Result<(), ConfigError> {
    match d {
        Some(d) if d.is_zero() => {
            Err(ConfigError::new(key, format_duration(d), "a duration greater than 0, or \"off\""))
        }
        _ => Ok(()),
    }
}

fn at_least_one(key: &str, n: usize) -> Result<(), ConfigError> {
    if n == 0 {
        return Err(ConfigError::new(key, "0", "an integer of at least 1"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn ms(m: u64) -> Duration {
        Duration::from_millis(m)
    }

    #[test]
    fn defaults_match_the_spec() {
        let c = Config::default();
        assert_eq!(c.system_name, "convoke");
        assert!(c.roles.is_empty());
        assert_eq!(c.data_center, "default");
        assert_eq!(c.app_version, "0.0.0");
        assert_eq!(c.min_nr_of_members, 1);
        assert!(c.role_min_nr_of_members.is_empty());
        assert_eq!(c.seed_node_timeout, secs(5));
        assert_eq!(c.gossip_interval, secs(1));
        assert_eq!(c.gossip_time_to_live, secs(2));
        assert_eq!(c.leader_actions_interval, secs(1));
        assert_eq!(c.unreachable_nodes_reaper_interval, secs(1));
        assert_eq!(c.periodic_tasks_initial_delay, secs(1));
        assert_eq!(c.allow_weakly_up_members, Some(secs(7)));
        assert_eq!(c.retry_unsuccessful_join_after, Some(secs(10)));
        assert_eq!(c.shutdown_after_unsuccessful_join_seed_nodes, None);
        assert_eq!(c.prune_gossip_tombstones_after, secs(24 * 3600));
        assert_eq!(c.gossip_different_view_probability, 0.8);
        assert_eq!(c.reduce_gossip_different_view_probability, 400);
        assert_eq!(c.gossip_target_preference, TargetPreference::AlwaysPreferUnseen);
        assert!(c.config_compat_enforce_on_join);
        assert_eq!(c.seed, 0);

        let fd = &c.failure_detector;
        assert_eq!(fd.heartbeat_interval, secs(1));
        assert_eq!(fd.threshold, 8.0);
        assert_eq!(fd.acceptable_heartbeat_pause, secs(3));
        assert_eq!(fd.min_std_deviation, ms(100));
        assert_eq!(fd.max_sample_size, 1000);
        assert_eq!(fd.monitored_by_nr_of_members, 9);
        assert_eq!(fd.expected_response_after, secs(1));

        let sbr = &c.split_brain_resolver;
        assert_eq!(sbr.active_strategy, "keep-majority");
        assert_eq!(sbr.stable_after, secs(20));
        assert_eq!(sbr.down_all_when_unstable, SwitchDuration::On);
        assert_eq!(sbr.keep_majority.role, "");
        assert_eq!(sbr.static_quorum.quorum_size, 0, "unset");
        assert_eq!(sbr.static_quorum.role, "");
        assert!(sbr.keep_oldest.down_if_alone);
        assert_eq!(sbr.keep_oldest.role, "");
        assert_eq!(sbr.lease_majority.lease_name, "");
        assert_eq!(sbr.lease_majority.effective_lease_name("orders"), "orders-convoke-sbr");
        assert_eq!(sbr.lease_majority.acquire_lease_delay_for_minority, secs(2));
        assert_eq!(sbr.lease_majority.release_after, secs(40));
        assert_eq!(sbr.lease_majority.role, "");
        assert!(sbr.is_active());
    }

    #[test]
    fn the_default_config_is_valid() {
        assert_eq!(Config::default().validate(), Ok(()));
    }

    #[test]
    fn zero_is_allowed_where_it_makes_sense() {
        let mut c = Config {
            periodic_tasks_initial_delay: Duration::ZERO,
            gossip_different_view_probability: 0.0,
            allow_weakly_up_members: None,
            retry_unsuccessful_join_after: None,
            shutdown_after_unsuccessful_join_seed_nodes: Some(secs(30)),
            ..Config::default()
        };
        c.failure_detector.acceptable_heartbeat_pause = Duration::ZERO;
        c.split_brain_resolver.stable_after = Duration::ZERO;
        c.split_brain_resolver.down_all_when_unstable = SwitchDuration::Off;
        c.split_brain_resolver.static_quorum.quorum_size = 3;
        c.split_brain_resolver.lease_majority.acquire_lease_delay_for_minority = Duration::ZERO;
        c.split_brain_resolver.lease_majority.release_after = Duration::ZERO;
        assert_eq!(c.validate(), Ok(()));
        for strategy in ACTIVE_STRATEGIES {
            c.split_brain_resolver.active_strategy = strategy.to_owned();
            assert_eq!(c.validate(), Ok(()), "{strategy}");
        }
    }

    #[test]
    fn each_invalid_value_is_rejected_naming_its_key() {
        type Change = fn(&mut Config);
        let cases: Vec<(&str, Change)> = vec![
            ("cluster.system_name", |c| c.system_name = String::new()),
            ("cluster.system_name", |c| c.system_name = "my cluster".into()),
            ("cluster.system_name", |c| c.system_name = "a.b".into()),
            ("cluster.roles", |c| {
                c.roles.insert(String::new());
            }),
            ("cluster.roles", |c| {
                c.roles.insert("dc-east".into());
            }),
            ("cluster.data_center", |c| c.data_center = String::new()),
            ("cluster.data_center", |c| c.data_center = "eu west".into()),
            ("cluster.app_version", |c| c.app_version = " ".into()),
            ("cluster.min_nr_of_members", |c| c.min_nr_of_members = 0),
            ("cluster.role_min_nr_of_members", |c| {
                c.role_min_nr_of_members.insert(String::new(), 2);
            }),
            ("cluster.role_min_nr_of_members.backend", |c| {
                c.role_min_nr_of_members.insert("backend".into(), 0);
            }),
            ("cluster.seed_node_timeout", |c| c.seed_node_timeout = Duration::ZERO),
            ("cluster.gossip_interval", |c| c.gossip_interval = Duration::ZERO),
            ("cluster.gossip_time_to_live", |c| c.gossip_time_to_live = Duration::ZERO),
            ("cluster.leader_actions_interval", |c| c.leader_actions_interval = Duration::ZERO),
            ("cluster.unreachable_nodes_reaper_interval", |c| {
                c.unreachable_nodes_reaper_interval = Duration::ZERO
            }),
            ("cluster.allow_weakly_up_members", |c| {
                c.allow_weakly_up_members = Some(Duration::ZERO)
            }),
            ("cluster.retry_unsuccessful_join_after", |c| {
                c.retry_unsuccessful_join_after = Some(Duration::ZERO)
            }),
            ("cluster.shutdown_after_unsuccessful_join_seed_nodes", |c| {
                c.shutdown_after_unsuccessful_join_seed_nodes = Some(Duration::ZERO)
            }),
            ("cluster.prune_gossip_tombstones_after", |c| {
                c.prune_gossip_tombstones_after = Duration::ZERO
            }),
            ("cluster.gossip_different_view_probability", |c| {
                c.gossip_different_view_probability = -0.1
            }),
            ("cluster.gossip_different_view_probability", |c| {
                c.gossip_different_view_probability = 1.5
            }),
            ("cluster.gossip_different_view_probability", |c| {
                c.gossip_different_view_probability = f64::NAN
            }),
            ("cluster.reduce_gossip_different_view_probability", |c| {
                c.reduce_gossip_different_view_probability = 0
            }),
            ("cluster.failure_detector.heartbeat_interval", |c| {
                c.failure_detector.heartbeat_interval = Duration::ZERO
            }),
            ("cluster.failure_detector.threshold", |c| c.failure_detector.threshold = 0.0),
            ("cluster.failure_detector.threshold", |c| c.failure_detector.threshold = -1.0),
            ("cluster.failure_detector.threshold", |c| c.failure_detector.threshold = f64::NAN),
            ("cluster.failure_detector.threshold", |c| {
                c.failure_detector.threshold = f64::INFINITY
            }),
            ("cluster.failure_detector.min_std_deviation", |c| {
                c.failure_detector.min_std_deviation = Duration::ZERO
            }),
            ("cluster.failure_detector.max_sample_size", |c| {
                c.failure_detector.max_sample_size = 0
            }),
            ("cluster.failure_detector.monitored_by_nr_of_members", |c| {
                c.failure_detector.monitored_by_nr_of_members = 0
            }),
            ("cluster.failure_detector.expected_response_after", |c| {
                c.failure_detector.expected_response_after = Duration::ZERO
            }),
            ("cluster.split_brain_resolver.active_strategy", |c| {
                c.split_brain_resolver.active_strategy = "keep-minority".into()
            }),
            ("cluster.split_brain_resolver.active_strategy", |c| {
                c.split_brain_resolver.active_strategy = "Keep-Majority".into()
            }),
            ("cluster.split_brain_resolver.down_all_when_unstable", |c| {
                c.split_brain_resolver.down_all_when_unstable =
                    SwitchDuration::After(Duration::ZERO)
            }),
            ("cluster.split_brain_resolver.static_quorum.quorum_size", |c| {
                c.split_brain_resolver.active_strategy = "static-quorum".into();
            }),
            ("cluster.split_brain_resolver.lease_majority.lease_name", |c| {
                c.split_brain_resolver.lease_majority.lease_name = "my lease".into();
            }),
        ];
        for (key, change) in cases {
            let mut c = Config::default();
            change(&mut c);
            let err = c.validate().expect_err(key);
            assert_eq!(err.key, key);
            let msg = err.to_string();
            assert!(msg.starts_with(&format!("invalid value for {key}: ")), "{msg}");
            assert!(msg.contains("(expected "), "{msg}");
        }
    }

    #[test]
    fn errors_show_key_value_and_expectation() {
        let mut c = Config::default();
        c.failure_detector.threshold = -1.0;
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "invalid value for cluster.failure_detector.threshold: -1 \
             (expected a finite number greater than 0)"
        );
        c = Config::default();
        c.roles.insert("dc-east".into());
        let err = c.validate().unwrap_err();
        assert_eq!(err.value, "\"dc-east\"");
        c = Config::default();
        c.gossip_interval = Duration::ZERO;
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "invalid value for cluster.gossip_interval: 0s (expected a duration greater than 0)"
        );
    }

    #[test]
    fn the_quorum_size_is_only_required_of_the_static_quorum_strategy() {
        let mut c = Config::default();
        c.split_brain_resolver.active_strategy = "static-quorum".into();
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "invalid value for cluster.split_brain_resolver.static_quorum.quorum_size: 0 \
             (expected an integer of at least 1 (the static-quorum strategy requires it))"
        );
        c.split_brain_resolver.static_quorum.quorum_size = 1;
        assert_eq!(c.validate(), Ok(()));
        c.split_brain_resolver.static_quorum.quorum_size = 0;
        c.split_brain_resolver.active_strategy = "keep-majority".into();
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn off_is_the_only_inactive_strategy() {
        let mut c = SplitBrainResolverConfig::default();
        for strategy in ACTIVE_STRATEGIES {
            c.active_strategy = strategy.to_owned();
            assert_eq!(c.is_active(), strategy != "off", "{strategy}");
        }
    }

    #[test]
    fn self_roles_are_the_user_roles_plus_the_data_center_role() {
        let mut c = Config::default();
        assert_eq!(c.self_roles(), BTreeSet::from(["dc-default".to_owned()]));
        c.roles = BTreeSet::from(["backend".to_owned(), "api".to_owned()]);
        c.data_center = "eu-west-1".into();
        let expected: BTreeSet<String> =
            ["api", "backend", "dc-eu-west-1"].into_iter().map(String::from).collect();
        assert_eq!(c.self_roles(), expected);
    }

    #[test]
    fn down_all_when_unstable_on_is_the_larger_of_4s_and_three_quarters_of_stable_after() {
        let mut sbr = SplitBrainResolverConfig::default();
        assert_eq!(sbr.down_all_when_unstable_after(), Some(secs(15)));
        sbr.stable_after = secs(2);
        assert_eq!(sbr.down_all_when_unstable_after(), Some(secs(4)));
        sbr.stable_after = secs(10);
        assert_eq!(sbr.down_all_when_unstable_after(), Some(ms(7500)));
        sbr.down_all_when_unstable = SwitchDuration::Off;
        assert_eq!(sbr.down_all_when_unstable_after(), None);
        sbr.down_all_when_unstable = SwitchDuration::After(secs(7));
        assert_eq!(sbr.down_all_when_unstable_after(), Some(secs(7)));
    }

    #[test]
    fn different_view_probability_follows_the_preference() {
        let mut c = Config::default();
        for n in [1, 400, 800, 5000] {
            assert_eq!(c.different_view_probability(n), 1.0);
        }
        c.gossip_target_preference = TargetPreference::ReducedProbability;
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        for (n, p) in [(1, 0.8), (400, 0.8), (401, 0.7991), (800, 0.44), (1200, 0.08), (5000, 0.08)]
        {
            let got = c.different_view_probability(n);
            assert!(close(got, p), "n={n}: {got} != {p}");
        }
    }

    #[test]
    fn lease_timing_is_checked_only_for_the_lease_majority_strategy() {
        type Change = fn(&mut LeaseMajorityConfig);
        let cases: [(Change, &str, &str, &str); 5] = [
            (
                |l| l.heartbeat_interval = Duration::ZERO,
                "heartbeat_interval",
                "\"0s\"",
                "a duration greater than 0",
            ),
            (
                |l| l.heartbeat_timeout = Duration::ZERO,
                "heartbeat_timeout",
                "\"0s\"",
                "a duration greater than 0",
            ),
            (
                |l| l.lease_operation_timeout = Duration::ZERO,
                "lease_operation_timeout",
                "\"0s\"",
                "a duration greater than 0",
            ),
            (
                |l| l.heartbeat_interval = secs(61),
                "heartbeat_interval",
                "\"61s\"",
                "at most half of heartbeat_timeout (2m), so that the lease is renewed at least \
                 twice before it expires",
            ),
            (
                |l| l.lease_operation_timeout = secs(120),
                "lease_operation_timeout",
                "\"2m\"",
                "less than heartbeat_timeout (2m)",
            ),
        ];
        for (change, key, value, expected) in cases {
            let mut c = Config::default();
            change(&mut c.split_brain_resolver.lease_majority);
            assert_eq!(c.validate(), Ok(()), "{key}: not checked for keep-majority");
            c.split_brain_resolver.active_strategy = "lease-majority".into();
            let err = c.validate().expect_err(key);
            assert_eq!(err.key, format!("cluster.split_brain_resolver.lease_majority.{key}"));
            assert_eq!(err.value, value);
            assert_eq!(err.expected, expected);
        }
        let mut c = Config::default();
        c.split_brain_resolver.active_strategy = "lease-majority".into();
        c.split_brain_resolver.lease_majority.heartbeat_interval = secs(60);
        c.split_brain_resolver.lease_majority.lease_operation_timeout = secs(119);
        assert_eq!(c.validate(), Ok(()), "half the timeout, and just under it, are fine");
    }

    #[test]
    fn the_on_durations_are_the_defaults() {
        let c = Config::default();
        assert_eq!(c.allow_weakly_up_members, Some(ALLOW_WEAKLY_UP_MEMBERS_ON));
        assert_eq!(c.retry_unsuccessful_join_after, Some(RETRY_UNSUCCESSFUL_JOIN_AFTER_ON));
        let mut sbr = c.split_brain_resolver;
        sbr.stable_after = Duration::ZERO;
        assert_eq!(sbr.down_all_when_unstable_after(), Some(DOWN_ALL_WHEN_UNSTABLE_ON_AT_LEAST));
    }

    #[test]
    fn target_preference_reads_its_names() {
        for p in [TargetPreference::AlwaysPreferUnseen, TargetPreference::ReducedProbability] {
            assert_eq!(TargetPreference::parse("k", &p.to_string()), Ok(p));
        }
        let err =
            TargetPreference::parse("cluster.gossip_target_preference", "random").unwrap_err();
        assert_eq!(err.key, "cluster.gossip_target_preference");
        assert_eq!(err.value, "\"random\"");
    }

    #[cfg(feature = "serde")]
    mod serde {
        use super::*;

        fn read(toml_text: &str) -> Result<Config, String> {
            toml::from_str(toml_text).map_err(|e| e.message().to_owned())
        }

        #[test]
        fn an_empty_table_is_the_default_config() {
            assert_eq!(read(""), Ok(Config::default()));
        }

        #[test]
        fn the_default_config_writes_and_reads_back() {
            let text = toml::to_string(&Config::default()).unwrap();
            assert_eq!(read(&text), Ok(Config::default()), "{text}");
            assert!(text.contains("allow_weakly_up_members = \"7s\""), "{text}");
            assert!(text.contains("shutdown_after_unsuccessful_join_seed_nodes = \"off\""));
            assert!(text.contains("down_all_when_unstable = \"on\""), "{text}");
            assert!(text.contains("gossip_target_preference = \"always-prefer-unseen\""));
            for skipped in [
                "seed",
                "gossip_different_view_probability",
                "reduce_gossip_different_view_probability",
            ] {
                let written = text.lines().any(|l| l.starts_with(&format!("{skipped} =")));
                assert!(!written, "{skipped} is not a settings key: {text}");
            }
        }

        #[test]
        fn every_key_reads_from_its_table() {
            let c = read(
                r#"
                system_name = "orders"
                roles = ["backend", "api"]
                data_center = "eu-west-1"
                app_version = "1.2.3"
                min_nr_of_members = 3
                role_min_nr_of_members = { backend = 2 }
                seed_node_timeout = "6s"
                gossip_interval = "500ms"
                gossip_time_to_live = "3s"
                leader_actions_interval = "2s"
                unreachable_nodes_reaper_interval = "1.5s"
                periodic_tasks_initial_delay = "0s"
                allow_weakly_up_members = "on"
                retry_unsuccessful_join_after = "off"
                shutdown_after_unsuccessful_join_seed_nodes = "60s"
                prune_gossip_tombstones_after = "1h"
                gossip_target_preference = "reduced-probability"
                config_compat_enforce_on_join = false
                hostname = "runtime key, ignored here"

                [failure_detector]
                heartbeat_interval = "2s"
                threshold = 10.5
                acceptable_heartbeat_pause = "4s"
                min_std_deviation = "200ms"
                max_sample_size = 100
                monitored_by_nr_of_members = 5
                expected_response_after = "3s"

                [split_brain_resolver]
                active_strategy = "lease-majority"
                stable_after = "10s"
                down_all_when_unstable = "off"
                keep_majority = { role = "a" }
                static_quorum = { quorum_size = 3, role = "b" }
                keep_oldest = { down_if_alone = false, role = "c" }

                [split_brain_resolver.lease_majority]
                lease_name = "shared"
                acquire_lease_delay_for_minority = "1s"
                release_after = "30s"
                role = "d"
                heartbeat_interval = "10s"
                heartbeat_timeout = "60s"
                lease_operation_timeout = "2s"
                kubernetes_namespace = "runtime key, ignored here"
                "#,
            )
            .unwrap();
            assert_eq!(c.system_name, "orders");
            assert_eq!(c.roles, BTreeSet::from(["api".to_owned(), "backend".to_owned()]));
            assert_eq!(c.data_center, "eu-west-1");
            assert_eq!(c.app_version, "1.2.3");
            assert_eq!(c.min_nr_of_members, 3);
            assert_eq!(c.role_min_nr_of_members, BTreeMap::from([("backend".to_owned(), 2)]));
            assert_eq!(c.seed_node_timeout, secs(6));
            assert_eq!(c.gossip_interval, ms(500));
            assert_eq!(c.gossip_time_to_live, secs(3));
            assert_eq!(c.leader_actions_interval, secs(2));
            assert_eq!(c.unreachable_nodes_reaper_interval, ms(1500));
            assert_eq!(c.periodic_tasks_initial_delay, Duration::ZERO);
            assert_eq!(c.allow_weakly_up_members, Some(ALLOW_WEAKLY_UP_MEMBERS_ON));
            assert_eq!(c.retry_unsuccessful_join_after, None);
            assert_eq!(c.shutdown_after_unsuccessful_join_seed_nodes, Some(secs(60)));
            assert_eq!(c.prune_gossip_tombstones_after, secs(3600));
            assert_eq!(c.gossip_target_preference, TargetPreference::ReducedProbability);
            assert!(!c.config_compat_enforce_on_join);
            let fd = &c.failure_detector;
            assert_eq!(fd.heartbeat_interval, secs(2));
            assert_eq!(fd.threshold, 10.5);
            assert_eq!(fd.acceptable_heartbeat_pause, secs(4));
            assert_eq!(fd.min_std_deviation, ms(200));
            assert_eq!(fd.max_sample_size, 100);
            assert_eq!(fd.monitored_by_nr_of_members, 5);
            assert_eq!(fd.expected_response_after, secs(3));
            let sbr = &c.split_brain_resolver;
            assert_eq!(sbr.active_strategy, "lease-majority");
            assert_eq!(sbr.stable_after, secs(10));
            assert_eq!(sbr.down_all_when_unstable, SwitchDuration::Off);
            assert_eq!(sbr.keep_majority.role, "a");
            assert_eq!(sbr.static_quorum.quorum_size, 3);
            assert_eq!(sbr.static_quorum.role, "b");
            assert!(!sbr.keep_oldest.down_if_alone);
            assert_eq!(sbr.keep_oldest.role, "c");
            let lease = &sbr.lease_majority;
            assert_eq!(lease.lease_name, "shared");
            assert_eq!(lease.acquire_lease_delay_for_minority, secs(1));
            assert_eq!(lease.release_after, secs(30));
            assert_eq!(lease.role, "d");
            assert_eq!(lease.heartbeat_interval, secs(10));
            assert_eq!(lease.heartbeat_timeout, secs(60));
            assert_eq!(lease.lease_operation_timeout, secs(2));
            assert_eq!(c.validate(), Ok(()));
            assert_eq!(c.seed, 0);
            assert_eq!(c.gossip_different_view_probability, 0.8);
        }

        #[test]
        fn switches_read_on_as_their_own_duration() {
            let c = read("allow_weakly_up_members = true\nretry_unsuccessful_join_after = \"on\"")
                .unwrap();
            assert_eq!(c.allow_weakly_up_members, Some(ALLOW_WEAKLY_UP_MEMBERS_ON));
            assert_eq!(c.retry_unsuccessful_join_after, Some(RETRY_UNSUCCESSFUL_JOIN_AFTER_ON));
            let c =
                read("allow_weakly_up_members = \"OFF\"\nretry_unsuccessful_join_after = \"3s\"")
                    .unwrap();
            assert_eq!(c.allow_weakly_up_members, None);
            assert_eq!(c.retry_unsuccessful_join_after, Some(secs(3)));
            assert_eq!(
                read("shutdown_after_unsuccessful_join_seed_nodes = \"on\"").unwrap_err(),
                "\"on\" is not valid: expected \"off\" or a duration like \"60s\""
            );
            let err = read("shutdown_after_unsuccessful_join_seed_nodes = \"soon\"").unwrap_err();
            assert!(
                err.starts_with("\"soon\" is not valid: expected \"on\", \"off\" or a duration"),
                "{err}"
            );
        }

        #[test]
        fn bad_values_name_the_value_and_the_expectation() {
            let cases = [
                ("gossip_interval = \"fast\"", "\"fast\" is not valid: expected a duration: "),
                (
                    "gossip_target_preference = \"random\"",
                    "\"random\" is not valid: expected \"always-prefer-unseen\" or \
                     \"reduced-probability\"",
                ),
                (
                    "[split_brain_resolver]\ndown_all_when_unstable = \"maybe\"",
                    "\"maybe\" is not valid: expected \"on\", \"off\" or a duration",
                ),
                (
                    "[split_brain_resolver.lease_majority]\nheartbeat_timeout = 5",
                    "\"5\" is not valid: expected a duration",
                ),
            ];
            for (text, want) in cases {
                let err = read(text).expect_err(text);
                assert!(err.starts_with(want), "{text}: {err}");
            }
        }

        #[test]
        fn unknown_keys_are_left_to_the_runtime_only_where_it_shares_the_table() {
            assert!(read("port = 25520").is_ok());
            assert!(
                read("[split_brain_resolver.lease_majority]\nkubernetes_api_url = \"\"").is_ok()
            );
            for text in [
                "[failure_detector]\nthreshhold = 8",
                "[split_brain_resolver]\nstrategy = \"off\"",
                "[split_brain_resolver.keep_majority]\nroles = \"a\"",
                "[split_brain_resolver.static_quorum]\nsize = 3",
                "[split_brain_resolver.keep_oldest]\ndown_if_allone = true",
            ] {
                let err = read(text).expect_err(text);
                assert!(err.starts_with("unknown field"), "{text}: {err}");
            }
        }
    }
}
