//! `[sharding]`: the defaults of every sharded entity type started on the node
//! (`docs/sharding-design.md`).

use std::time::Duration;

use convoke_membership::config::text;
use convoke_sharding::ShardingConfig;
use serde::{Deserialize, Serialize};

use super::SettingsError;

/// How sharded entity types route, buffer, passivate and rebalance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShardingSettings {
    /// Shards of the default extractor; must be the same on every node (checked when a node
    /// joins). About ten times the largest expected number of nodes.
    pub number_of_shards: u32,
    /// Messages a region holds, over all shards, while their homes are unknown; one more is
    /// refused at once.
    pub buffer_size: usize,
    /// Messages an entity's mailbox holds; one more is refused at once.
    pub entity_mailbox_size: usize,
    /// Stop an entity after this long without a message; `"off"` never does.
    #[serde(with = "off_duration")]
    pub passivate_idle_after: Option<Duration>,
    /// How often registrations, home requests and coordinator state writes are sent again.
    #[serde(with = "text::duration")]
    pub retry_interval: Duration,
    /// How long a shard's move may take before it is given up (the shard stays where it was).
    #[serde(with = "text::duration")]
    pub handoff_timeout: Duration,
    /// How often the coordinator looks for shards to move.
    #[serde(with = "text::duration")]
    pub rebalance_interval: Duration,
    /// At most this many shards move in one rebalance round...
    pub rebalance_absolute_limit: u32,
    /// ... and at most this fraction of all shards.
    pub rebalance_relative_limit: f64,
    /// Keep each shard's running entities in the store and start them wherever the shard
    /// goes: `true` for every entity type, `false` for none, or a list of type names. Needs
    /// `data.enabled`.
    pub remember_entities: RememberEntities,
}

/// Which entity types remember their entities: all or none, or those named.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum RememberEntities {
    /// Every type (`true`) or none (`false`).
    All(bool),
    /// The types named.
    Types(Vec<String>),
}

impl Default for RememberEntities {
    fn default() -> Self {
        Self::All(false)
    }
}

impl<'de> Deserialize<'de> for RememberEntities {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = RememberEntities;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("true, false or a list of entity type names")
            }

            fn visit_bool<E: serde::de::Error>(self, all: bool) -> Result<Self::Value, E> {
                Ok(RememberEntities::All(all))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut types = Vec::new();
                while let Some(t) = seq.next_element::<String>()? {
                    types.push(t);
                }
                Ok(RememberEntities::Types(types))
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl RememberEntities {
    /// Whether some entity type may remember its entities.
    pub fn any(&self) -> bool {
        match self {
            Self::All(all) => *all,
            Self::Types(types) => !types.is_empty(),
        }
    }

    /// Whether entity type `type_name` remembers its entities.
    pub fn covers(&self, type_name: &str) -> bool {
        match self {
            Self::All(all) => *all,
            Self::Types(types) => types.iter().any(|t| t == type_name),
        }
    }
}

impl Default for ShardingSettings {
    fn default() -> Self {
        let c = ShardingConfig::new("default");
        Self {
            number_of_shards: c.number_of_shards,
            buffer_size: c.buffer_size,
            entity_mailbox_size: 1000,
            passivate_idle_after: c.passivate_idle_after,
            retry_interval: c.retry_interval,
            handoff_timeout: c.handoff_timeout,
            rebalance_interval: c.rebalance_interval,
            rebalance_absolute_limit: c.rebalance_absolute_limit,
            rebalance_relative_limit: c.rebalance_relative_limit,
            remember_entities: RememberEntities::default(),
        }
    }
}

impl ShardingSettings {
    /// Checks the ranges serde cannot.
    ///
    /// # Errors
    /// The first bad key.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if self.number_of_shards == 0 || i32::try_from(self.number_of_shards).is_err() {
            return Err(SettingsError::new(
                "sharding.number_of_shards",
                self.number_of_shards.to_string(),
                "a number from 1 to 2147483647",
            ));
        }
        let counts = [
            ("sharding.buffer_size", self.buffer_size),
            ("sharding.entity_mailbox_size", self.entity_mailbox_size),
        ];
        for (key, n) in counts {
            if n == 0 || n > 10_000_000 {
                return Err(SettingsError::new(key, n.to_string(), "a number from 1 to 10000000"));
            }
        }
        let positive = [
            ("sharding.retry_interval", self.retry_interval),
            ("sharding.handoff_timeout", self.handoff_timeout),
            ("sharding.rebalance_interval", self.rebalance_interval),
        ];
        for (key, d) in positive {
            if d.is_zero() {
                return Err(SettingsError::new(key, "\"0s\"", "a duration above zero like \"1s\""));
            }
        }
        if self.passivate_idle_after.is_some_and(|d| d.is_zero()) {
            return Err(SettingsError::new(
                "sharding.passivate_idle_after",
                "\"0s\"",
                "a duration above zero like \"120s\", or \"off\"",
            ));
        }
        if !(0.0..=1.0).contains(&self.rebalance_relative_limit) {
            return Err(SettingsError::new(
                "sharding.rebalance_relative_limit",
                self.rebalance_relative_limit.to_string(),
                "a fraction from 0.0 to 1.0",
            ));
        }
        Ok(())
    }

    /// The sans-IO settings of entity type `type_name` hosted by members with `role`, whose
    /// removed regions' shards wait `removal_margin` before they move.
    pub fn config_for(
        &self,
        type_name: &str,
        role: Option<&str>,
        removal_margin: Duration,
    ) -> ShardingConfig {
        let mut c = ShardingConfig::new(type_name);
        c.role = role.map(str::to_owned);
        c.number_of_shards = self.number_of_shards;
        c.buffer_size = self.buffer_size;
        c.passivate_idle_after = self.passivate_idle_after;
        c.retry_interval = self.retry_interval;
        c.handoff_timeout = self.handoff_timeout;
        c.rebalance_interval = self.rebalance_interval;
        c.rebalance_absolute_limit = self.rebalance_absolute_limit;
        c.rebalance_relative_limit = self.rebalance_relative_limit;
        c.removal_margin = removal_margin;
        c.remember_entities = self.remember_entities.covers(type_name);
        c
    }
}

/// A duration, or `"off"` for none.
mod off_duration {
    use std::time::Duration;

    use serde::{Deserializer, Serializer};

    use super::super::keyword_duration;

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        keyword_duration::serialize(d, "off", s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        keyword_duration::deserialize(d, "off", "120s")
    }
}
