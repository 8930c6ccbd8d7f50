//! Settings of the membership core: [`Config`] with the defaults of the spec (§10), its validation,
//! the keys a joiner compares with the cluster (§5.5), and the duration parsers the runtime reuses
//! when it reads the TOML file, the environment and `--set`.
//!
//! Field names are the configuration keys of ARCHITECTURE.md without their table prefix:
//! `Config::gossip_interval` is `cluster.gossip_interval`, `FailureDetectorConfig::threshold` is
//! `cluster.failure_detector.threshold`. Errors name the full dotted key so that a bad setting can
//! be found in whichever layer set it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

/// The split-brain strategies `cluster.split_brain_resolver.active_strategy` may name.
pub const ACTIVE_STRATEGIES: [&str; 6] =
    ["keep-majority", "static-quorum", "keep-oldest", "down-all", "lease-majority", "off"];

/// Compatibility key: the split-brain strategy, which must be the same on every node, or two sides
/// of a partition could both survive.
pub const COMPAT_ACTIVE_STRATEGY: &str = "cluster.split_brain_resolver.active_strategy";

/// Compatibility key: the protocol version, sent for logging only.
pub const COMPAT_PROTOCOL_VERSION: &str = "convoke.protocol_version";

/// The protocol version this build speaks, sent under [`COMPAT_PROTOCOL_VERSION`].
pub const PROTOCOL_VERSION: &str = "1";

/// Compatibility keys that must be present on both sides and equal for a join to go ahead.
pub const REQUIRED_COMPAT_KEYS: [&str; 1] = [COMPAT_ACTIVE_STRATEGY];

/// Prefix of the role that carries a member's data center.
const DC_ROLE_PREFIX: &str = "dc-";

const DURATION_EXPECTED: &str =
    "a duration: a number and a unit (ns, us, ms, s, m, h, d), like \"500ms\", \"5s\" or \"1.5s\"";

/// The configuration of one node's membership core.
///
/// Start from [`Config::default`], which holds the defaults of the spec (§10) with convoke's own
/// choices (downing on by default), change fields, then call [`Config::validate`].
#[derive(Clone, Debug, PartialEq)]
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
    pub seed_node_timeout: Duration,
    /// `cluster.gossip_interval`: how often this node gossips to one other member.
    pub gossip_interval: Duration,
    /// `cluster.gossip_time_to_live`: gossip not processed within this time of arrival is dropped.
    pub gossip_time_to_live: Duration,
    /// `cluster.leader_actions_interval`: how often the leader moves members along.
    pub leader_actions_interval: Duration,
    /// `cluster.unreachable_nodes_reaper_interval`: how often the failure detector's verdicts are
    /// turned into reachability records.
    pub unreachable_nodes_reaper_interval: Duration,
    /// `cluster.periodic_tasks_initial_delay`: periodic tasks first run after the larger of this
    /// and their interval.
    pub periodic_tasks_initial_delay: Duration,
    /// `cluster.allow_weakly_up_members`: after how long without convergence the leader moves
    /// Joining members to WeaklyUp; `None` (`"off"`) never.
    pub allow_weakly_up_members: Option<Duration>,
    /// `cluster.retry_unsuccessful_join_after`: resend an unanswered join after this long; `None`
    /// (`"off"`) never.
    pub retry_unsuccessful_join_after: Option<Duration>,
    /// `cluster.shutdown_after_unsuccessful_join_seed_nodes`: give up and ask for shutdown when
    /// joining the seed nodes has not succeeded after this long; `None` (`"off"`) keeps trying.
    pub shutdown_after_unsuccessful_join_seed_nodes: Option<Duration>,
    /// `cluster.prune_gossip_tombstones_after`: how long the leader keeps tombstones of removed
    /// members. A partition longer than this may bring removed members back.
    pub prune_gossip_tombstones_after: Duration,
    /// `cluster.gossip_different_view_probability`: with
    /// [`TargetPreference::ReducedProbability`], the probability of gossiping to a member that
    /// has not seen the current state, in clusters up to
    /// [`Config::reduce_gossip_different_view_probability`] members.
    pub gossip_different_view_probability: f64,
    /// `cluster.reduce_gossip_different_view_probability`: the cluster size from which that
    /// probability falls, reaching a tenth of it at three times this size.
    pub reduce_gossip_different_view_probability: usize,
    /// `cluster.gossip_target_preference`: how gossip targets are chosen (spec §2.8).
    pub gossip_target_preference: TargetPreference,
    /// `cluster.config_compat_enforce_on_join`: refuse to join a cluster whose
    /// [compatibility keys](Config::compat_keys) differ (otherwise only warn).
    pub config_compat_enforce_on_join: bool,
    /// `cluster.seed`: the seed of the core's random number generator. The runtime picks a random
    /// one at start; tests and the simulator set it to replay a run.
    pub seed: u64,
    /// `cluster.failure_detector`: the phi-accrual failure detector and the heartbeat ring.
    pub failure_detector: FailureDetectorConfig,
    /// `cluster.split_brain_resolver`: automatic downing.
    pub split_brain_resolver: SplitBrainResolverConfig,
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
            allow_weakly_up_members: Some(Duration::from_secs(7)),
            retry_unsuccessful_join_after: Some(Duration::from_secs(10)),
            shutdown_after_unsuccessful_join_seed_nodes: None,
            prune_gossip_tombstones_after: Duration::from_secs(24 * 60 * 60),
            gossip_different_view_probability: 0.8,
            reduce_gossip_different_view_probability: 400,
            gossip_target_preference: TargetPreference::AlwaysPreferUnseen,
            config_compat_enforce_on_join: true,
            seed: 0,
            failure_detector: FailureDetectorConfig::default(),
            split_brain_resolver: SplitBrainResolverConfig::default(),
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

    /// The settings a joiner compares with the cluster it joins (spec §5.5), keyed by their
    /// configuration key. Compare two sides with [`check_compat`]. The system name is not among
    /// them: addresses carry it and it is checked on its own.
    pub fn compat_keys(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (COMPAT_ACTIVE_STRATEGY.to_owned(), self.split_brain_resolver.active_strategy.clone()),
            (COMPAT_PROTOCOL_VERSION.to_owned(), PROTOCOL_VERSION.to_owned()),
        ])
    }

    /// The probability of gossiping to a member that has not seen the current state, in a cluster
    /// of `members` members (spec §2.8).
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
#[non_exhaustive]
pub struct FailureDetectorConfig {
    /// `cluster.failure_detector.heartbeat_interval`: how often heartbeats are sent; also the
    /// first estimate of the interval between them.
    pub heartbeat_interval: Duration,
    /// `cluster.failure_detector.threshold`: the phi above which a node is considered unreachable.
    pub threshold: f64,
    /// `cluster.failure_detector.acceptable_heartbeat_pause`: a pause in heartbeats this long is
    /// tolerated (garbage collection, network hiccups). May be zero.
    pub acceptable_heartbeat_pause: Duration,
    /// `cluster.failure_detector.min_std_deviation`: the floor under the measured standard
    /// deviation, so that very regular heartbeats do not make phi jumpy.
    pub min_std_deviation: Duration,
    /// `cluster.failure_detector.max_sample_size`: how many heartbeat intervals are remembered.
    pub max_sample_size: usize,
    /// `cluster.failure_detector.monitored_by_nr_of_members`: how many members heartbeat each
    /// member.
    pub monitored_by_nr_of_members: usize,
    /// `cluster.failure_detector.expected_response_after`: a node that never answers its first
    /// heartbeat starts being monitored after this long, so it is still detected.
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

/// Settings of the split-brain resolver (`cluster.split_brain_resolver`): the active strategy,
/// the timing shared by all strategies, and one sub-table of settings per strategy.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SplitBrainResolverConfig {
    /// `cluster.split_brain_resolver.active_strategy`: one of [`ACTIVE_STRATEGIES`]; `"off"`
    /// downs nothing automatically.
    pub active_strategy: String,
    /// `cluster.split_brain_resolver.stable_after`: how long membership and reachability must be
    /// unchanged before the resolver acts. May be zero.
    pub stable_after: Duration,
    /// `cluster.split_brain_resolver.down_all_when_unstable`: down every node when reachability
    /// keeps changing for this long after `stable_after`. [`SwitchDuration::On`] means the larger
    /// of 4 s and ¾ of `stable_after`; see
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
        let on = (self.stable_after * 3 / 4).max(Duration::from_secs(4));
        self.down_all_when_unstable.resolve(on)
    }

    /// Whether automatic downing is on (`active_strategy` is not `"off"`).
    pub fn is_active(&self) -> bool {
        self.active_strategy != "off"
    }

    fn validate(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }
}

/// Settings of the keep-majority strategy (`cluster.split_brain_resolver.keep_majority`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeepMajorityConfig {
    /// `cluster.split_brain_resolver.keep_majority.role`: count only members with this role;
    /// `""` (the default) counts all.
    pub role: String,
}

/// Settings of the static-quorum strategy (`cluster.split_brain_resolver.static_quorum`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
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

/// Settings of the lease-majority strategy (`cluster.split_brain_resolver.lease_majority`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseMajorityConfig {
    /// `cluster.split_brain_resolver.lease_majority.lease_name`: the lease both sides contend
    /// for; `""` (the default) is `"<system_name>-convoke-sbr"`. See
    /// [`effective_lease_name`](LeaseMajorityConfig::effective_lease_name).
    pub lease_name: String,
    /// `cluster.split_brain_resolver.lease_majority.acquire_lease_delay_for_minority`: how long
    /// the minority side waits before it tries to take the lease, so that the majority usually
    /// wins. Default 2 s.
    pub acquire_lease_delay_for_minority: Duration,
    /// `cluster.split_brain_resolver.lease_majority.release_after`: after the downed nodes are
    /// removed, the winner keeps the lease this much longer before releasing it. Default 40 s.
    pub release_after: Duration,
    /// `cluster.split_brain_resolver.lease_majority.role`: count only members with this role
    /// when deciding which side is the minority; `""` (the default) counts all.
    pub role: String,
}

impl Default for LeaseMajorityConfig {
    fn default() -> Self {
        Self {
            lease_name: String::new(),
            acquire_lease_delay_for_minority: Duration::from_secs(2),
            release_after: Duration::from_secs(40),
            role: String::new(),
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
}

/// How a node picks the member it gossips to (spec §2.8), `cluster.gossip_target_preference`.
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
            .ok_or_else(|| {
                ConfigError::new(
                    key,
                    format!("{text:?}"),
                    "\"always-prefer-unseen\" or \"reduced-probability\"",
                )
            })
    }
}

impl fmt::Display for TargetPreference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A setting that is `"on"` (with a default that depends on the setting), `"off"`, or an
/// explicit duration. Read with [`parse_switch_duration`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SwitchDuration {
    /// `"on"`: the setting's default duration.
    On,
    /// `"off"`: disabled.
    Off,
    /// An explicit duration.
    After(Duration),
}

impl SwitchDuration {
    /// The effective duration, given what `On` means for this setting; `None` when off.
    pub fn resolve(self, on: Duration) -> Option<Duration> {
        match self {
            Self::On => Some(on),
            Self::Off => None,
            Self::After(d) => Some(d),
        }
    }
}

impl fmt::Display for SwitchDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::On => f.write_str("on"),
            Self::Off => f.write_str("off"),
            Self::After(d) => f.write_str(&format_duration(*d)),
        }
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

/// Compares the [compatibility keys](Config::compat_keys) of this node (`own`) with those of the
/// cluster it joins (`theirs`).
///
/// Every key in [`REQUIRED_COMPAT_KEYS`] must be present on both sides with the same value; other
/// keys, such as [`COMPAT_PROTOCOL_VERSION`], are informational and ignored here.
///
/// # Errors
/// All problems in one message, separated by `"; "`: `"X is missing"` when the cluster does not
/// send key X, `"X is missing on this node"` when this node does not, and
/// `"X is incompatible: ours a, theirs b"`.
pub fn check_compat(
    own: &BTreeMap<String, String>,
    theirs: &BTreeMap<String, String>,
) -> Result<(), String> {
    let problems: Vec<String> = REQUIRED_COMPAT_KEYS
        .iter()
        .filter_map(|&key| match (own.get(key), theirs.get(key)) {
            (_, None) => Some(format!("{key} is missing")),
            (None, Some(_)) => Some(format!("{key} is missing on this node")),
            (Some(ours), Some(their)) if ours != their => {
                Some(format!("{key} is incompatible: ours {ours}, theirs {their}"))
            }
            _ => None,
        })
        .collect();
    if problems.is_empty() { Ok(()) } else { Err(problems.join("; ")) }
}

/// Reads a duration such as `"500ms"`, `"5s"`, `"2m"`, `"1h"` or `"1.5s"`: a non-negative decimal
/// number and one of the units `ns`, `us`, `ms`, `s`, `m`, `h`, `d`. Zero is accepted here;
/// [`Config::validate`] decides where it is allowed.
///
/// # Errors
/// A [`ConfigError`] for `key` when the text is empty, negative, has no or an unknown unit, is
/// finer than a nanosecond or too large.
pub fn parse_duration(key: &str, text: &str) -> Result<Duration, ConfigError> {
    let bad = || ConfigError::new(key, format!("{text:?}"), DURATION_EXPECTED);
    let trimmed = text.trim();
    let split = trimmed.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
    let (number, unit) = trimmed.split_at(split);
    let unit_nanos: u128 = match unit.trim_start() {
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60 * 1_000_000_000,
        "h" => 60 * 60 * 1_000_000_000,
        "d" => 24 * 60 * 60 * 1_000_000_000,
        _ => return Err(bad()),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || (number.contains('.') && !digits(fraction)) || fraction.len() > 9 {
        return Err(bad());
    }
    let whole: u128 = whole.parse().map_err(|_| bad())?;
    let scale = 10u128.pow(fraction.len() as u32);
    let fraction: u128 =
        if fraction.is_empty() { 0 } else { fraction.parse().map_err(|_| bad())? };
    if !(fraction * unit_nanos).is_multiple_of(scale) {
        return Err(bad());
    }
    let nanos = whole
        .checked_mul(unit_nanos)
        .and_then(|n| n.checked_add(fraction * unit_nanos / scale))
        .ok_or_else(bad)?;
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| bad())?;
    Ok(Duration::new(secs, (nanos % 1_000_000_000) as u32))
}

/// Reads `"on"`, `"off"` (any case) or a duration as [`parse_duration`] does, for keys such as
/// `cluster.allow_weakly_up_members`. What `"on"` means is up to the key; see
/// [`SwitchDuration::resolve`].
///
/// # Errors
/// A [`ConfigError`] for `key` when the text is neither.
pub fn parse_switch_duration(key: &str, text: &str) -> Result<SwitchDuration, ConfigError> {
    let trimmed = text.trim();
    if trimmed.eq_ignore_ascii_case("on") {
        return Ok(SwitchDuration::On);
    }
    if trimmed.eq_ignore_ascii_case("off") {
        return Ok(SwitchDuration::Off);
    }
    parse_duration(key, text).map(SwitchDuration::After).map_err(|mut e| {
        e.expected = format!("\"on\", \"off\" or {DURATION_EXPECTED}");
        e
    })
}

/// Writes a duration in the form [`parse_duration`] reads, in the largest unit up to hours that
/// represents it exactly: `"24h"`, `"1500ms"`, `"0s"`.
pub fn format_duration(d: Duration) -> String {
    const UNITS: [(u128, &str); 6] = [
        (60 * 60 * 1_000_000_000, "h"),
        (60 * 1_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
        (1, "ns"),
    ];
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    let (size, unit) =
        UNITS.into_iter().find(|(size, _)| nanos.is_multiple_of(*size)).unwrap_or((1, "ns"));
    format!("{}{unit}", nanos / size)
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
    fn target_preference_reads_its_names() {
        for p in [TargetPreference::AlwaysPreferUnseen, TargetPreference::ReducedProbability] {
            assert_eq!(TargetPreference::parse("k", &p.to_string()), Ok(p));
        }
        let err =
            TargetPreference::parse("cluster.gossip_target_preference", "random").unwrap_err();
        assert_eq!(err.key, "cluster.gossip_target_preference");
        assert_eq!(err.value, "\"random\"");
    }

    #[test]
    fn durations_parse_from_number_and_unit() {
        let good = [
            ("500ms", ms(500)),
            ("5s", secs(5)),
            ("2m", secs(120)),
            ("1h", secs(3600)),
            ("24h", secs(24 * 3600)),
            ("1d", secs(24 * 3600)),
            ("1.5s", ms(1500)),
            ("0.25s", ms(250)),
            ("0s", Duration::ZERO),
            ("0ms", Duration::ZERO),
            ("250us", Duration::from_micros(250)),
            ("7ns", Duration::from_nanos(7)),
            ("1.000000001s", Duration::new(1, 1)),
            (" 3s ", secs(3)),
            ("3 s", secs(3)),
            ("007s", secs(7)),
        ];
        for (text, want) in good {
            assert_eq!(parse_duration("k", text), Ok(want), "{text:?}");
        }
    }

    #[test]
    fn bad_durations_are_rejected_naming_the_key() {
        let bad = [
            "",
            " ",
            "s",
            "5",
            "-1s",
            "-0s",
            "+1s",
            "1.s",
            ".5s",
            "1..5s",
            "1.5.5s",
            "5sec",
            "5S",
            "5 parsecs",
            "1e3ms",
            "1,5s",
            "0x10s",
            "1s 2s",
            "0.5ns",
            "1.0000000001s",
            "99999999999999999999999h",
            "999999999999999999999999999999999999999999s",
            "inf s",
            "off",
        ];
        for text in bad {
            let err = parse_duration("cluster.gossip_interval", text).expect_err(text);
            assert_eq!(err.key, "cluster.gossip_interval");
            assert_eq!(err.value, format!("{text:?}"));
            assert!(err.expected.contains("\"500ms\""), "{}", err.expected);
        }
    }

    #[test]
    fn switch_durations_read_on_off_or_a_duration() {
        let key = "cluster.allow_weakly_up_members";
        assert_eq!(parse_switch_duration(key, "on"), Ok(SwitchDuration::On));
        assert_eq!(parse_switch_duration(key, "OFF"), Ok(SwitchDuration::Off));
        assert_eq!(parse_switch_duration(key, " off "), Ok(SwitchDuration::Off));
        assert_eq!(parse_switch_duration(key, "7s"), Ok(SwitchDuration::After(secs(7))));
        for bad in ["", "yes", "true", "-7s", "onn"] {
            let err = parse_switch_duration(key, bad).expect_err(bad);
            assert_eq!(err.key, key);
            assert!(err.expected.starts_with("\"on\", \"off\" or a duration"), "{}", err.expected);
        }
        assert_eq!(SwitchDuration::On.resolve(secs(7)), Some(secs(7)));
        assert_eq!(SwitchDuration::Off.resolve(secs(7)), None);
        assert_eq!(SwitchDuration::After(secs(3)).resolve(secs(7)), Some(secs(3)));
        assert_eq!(SwitchDuration::After(ms(1500)).to_string(), "1500ms");
    }

    #[test]
    fn formatted_durations_read_back_the_same() {
        let cases = [
            (Duration::ZERO, "0s"),
            (secs(24 * 3600), "24h"),
            (secs(120), "2m"),
            (secs(90), "90s"),
            (ms(1500), "1500ms"),
            (ms(100), "100ms"),
            (Duration::from_micros(3), "3us"),
            (Duration::new(1, 1), "1000000001ns"),
        ];
        for (d, text) in cases {
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration("k", text), Ok(d));
        }
    }

    #[test]
    fn compat_keys_carry_the_strategy_and_the_protocol_version() {
        let mut c = Config::default();
        c.split_brain_resolver.active_strategy = "down-all".into();
        let keys = c.compat_keys();
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[COMPAT_ACTIVE_STRATEGY], "down-all");
        assert_eq!(keys[COMPAT_PROTOCOL_VERSION], PROTOCOL_VERSION);
    }

    #[test]
    fn compat_check_requires_equal_strategies_on_both_sides() {
        type Map = BTreeMap<String, String>;
        fn map(pairs: &[(&str, &str)]) -> Map {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        }
        let strategy = COMPAT_ACTIVE_STRATEGY;
        let version = COMPAT_PROTOCOL_VERSION;
        let ours = map(&[(strategy, "keep-majority"), (version, "1")]);
        let cases: Vec<(Map, Map, Result<(), String>)> = vec![
            (ours.clone(), ours.clone(), Ok(())),
            // The protocol version is informational: different or absent is fine.
            (ours.clone(), map(&[(strategy, "keep-majority"), (version, "2")]), Ok(())),
            (ours.clone(), map(&[(strategy, "keep-majority")]), Ok(())),
            // Unknown keys from newer nodes are ignored.
            (ours.clone(), map(&[(strategy, "keep-majority"), ("cluster.future", "x")]), Ok(())),
            (
                ours.clone(),
                map(&[(strategy, "down-all"), (version, "1")]),
                Err(format!("{strategy} is incompatible: ours keep-majority, theirs down-all")),
            ),
            (ours.clone(), map(&[(version, "1")]), Err(format!("{strategy} is missing"))),
            (ours.clone(), BTreeMap::new(), Err(format!("{strategy} is missing"))),
            (
                map(&[(version, "1")]),
                ours.clone(),
                Err(format!("{strategy} is missing on this node")),
            ),
            (BTreeMap::new(), BTreeMap::new(), Err(format!("{strategy} is missing"))),
        ];
        for (own, theirs, want) in cases {
            assert_eq!(check_compat(&own, &theirs), want, "{own:?} vs {theirs:?}");
        }
    }

    #[test]
    fn default_configs_are_compatible_with_each_other() {
        let c = Config::default();
        assert_eq!(check_compat(&c.compat_keys(), &c.compat_keys()), Ok(()));
    }
}
