//! `[singleton]`: the cluster singleton's hand-over timing and its proxy's buffer
//! (`docs/singleton.md`).

use std::time::Duration;

use convoke_membership::config::text;
use convoke_singleton::SingletonConfig;
use serde::{Deserialize, Serialize};

use super::SettingsError;

/// How singletons hand over and how long their proxies wait.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SingletonSettings {
    /// How often the hand-over messages are sent again until answered.
    #[serde(with = "text::duration")]
    pub hand_over_retry_interval: Duration,
    /// Retries of a hand-over request before the new host logs that it is stuck (it keeps
    /// waiting: it never starts while the previous host is a member).
    pub min_number_of_hand_over_retries: u32,
    /// How long an instance told to stop may take before it is aborted.
    #[serde(with = "text::duration")]
    pub hand_over_timeout: Duration,
    /// After the previous host is removed, how long the next oldest waits before starting, so
    /// that a host on the other side of a partition has downed itself and stopped its instance
    /// first. `"auto"`: the split-brain resolver's `stable_after` and `down_all_when_unstable`
    /// delay, plus the failure detector's `acceptable_heartbeat_pause` and three heartbeat
    /// intervals (the other side may detect the partition later), plus `hand_over_timeout` (its
    /// instance's time to stop): 51 s with the defaults. See `docs/singleton.md`.
    #[serde(with = "auto_duration")]
    pub removal_margin: Option<Duration>,
    /// Asks a proxy holds while no instance runs (more are refused at once).
    pub proxy_buffer_size: usize,
}

impl Default for SingletonSettings {
    fn default() -> Self {
        Self {
            hand_over_retry_interval: Duration::from_secs(1),
            min_number_of_hand_over_retries: 15,
            hand_over_timeout: Duration::from_secs(10),
            removal_margin: None,
            proxy_buffer_size: 1000,
        }
    }
}

impl SingletonSettings {
    /// Checks the ranges serde cannot.
    ///
    /// # Errors
    /// The first bad key.
    pub fn validate(&self) -> Result<(), SettingsError> {
        let positive = [
            ("singleton.hand_over_retry_interval", self.hand_over_retry_interval),
            ("singleton.hand_over_timeout", self.hand_over_timeout),
        ];
        for (key, d) in positive {
            if d.is_zero() {
                return Err(SettingsError::new(key, "\"0s\"", "a duration above zero like \"1s\""));
            }
        }
        if self.proxy_buffer_size > 100_000 {
            return Err(SettingsError::new(
                "singleton.proxy_buffer_size",
                self.proxy_buffer_size.to_string(),
                "a number from 0 to 100000",
            ));
        }
        Ok(())
    }

    /// The removal margin in force, given the core's settings.
    pub fn removal_margin(&self, core: &convoke_membership::config::Config) -> Duration {
        self.removal_margin
            .unwrap_or_else(|| SingletonConfig::removal_margin_for(core, self.hand_over_timeout))
    }
}

/// `"auto"` (`None`) or a duration.
mod auto_duration {
    use std::time::Duration;

    use serde::{Deserializer, Serializer};

    use super::super::keyword_duration;

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        keyword_duration::serialize(d, "auto", s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        keyword_duration::deserialize(d, "auto", "20s")
    }
}
