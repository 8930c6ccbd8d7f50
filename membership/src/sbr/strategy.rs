//! The downing strategies and their settings, read from [`SplitBrainResolverConfig`].

use std::fmt;
use std::time::Duration;

use crate::config::SplitBrainResolverConfig;

/// A split-brain strategy with its settings. `active_strategy = "off"` has none.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Strategy {
    /// `keep-majority`: the side with more members survives; on a tie, the side holding the
    /// member with the lowest address.
    KeepMajority {
        /// Count only members with this role.
        role: Option<String>,
    },
    /// `static-quorum`: a side survives while it still has `quorum_size` members.
    StaticQuorum {
        /// The quorum, at least 1.
        quorum_size: usize,
        /// Count only members with this role.
        role: Option<String>,
    },
    /// `keep-oldest`: the side holding the oldest member survives.
    KeepOldest {
        /// The oldest downs itself when it is alone against two or more others.
        down_if_alone: bool,
        /// The oldest among members with this role decides.
        role: Option<String>,
    },
    /// `down-all`: every member is downed.
    DownAll,
    /// `lease-majority`: the side that takes the lease survives; the minority waits a little
    /// before trying, so that the majority usually wins.
    LeaseMajority {
        /// Count only members with this role when deciding which side is the minority.
        role: Option<String>,
        /// The minority's head start for the majority.
        acquire_lease_delay_for_minority: Duration,
        /// How long the winner keeps the lease after the downed nodes are removed.
        release_after: Duration,
    },
}

impl Strategy {
    /// The strategy `config` selects, `None` when downing is off. The configuration must have
    /// been validated.
    pub fn from_config(config: &SplitBrainResolverConfig) -> Option<Self> {
        let role = |r: &str| (!r.is_empty()).then(|| r.to_owned());
        Some(match config.active_strategy.as_str() {
            "keep-majority" => Self::KeepMajority { role: role(&config.keep_majority.role) },
            "static-quorum" => Self::StaticQuorum {
                quorum_size: config.static_quorum.quorum_size,
                role: role(&config.static_quorum.role),
            },
            "keep-oldest" => Self::KeepOldest {
                down_if_alone: config.keep_oldest.down_if_alone,
                role: role(&config.keep_oldest.role),
            },
            "down-all" => Self::DownAll,
            "lease-majority" => Self::LeaseMajority {
                role: role(&config.lease_majority.role),
                acquire_lease_delay_for_minority: config
                    .lease_majority
                    .acquire_lease_delay_for_minority,
                release_after: config.lease_majority.release_after,
            },
            _ => return None,
        })
    }

    /// The name `active_strategy` gives it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::KeepMajority { .. } => "keep-majority",
            Self::StaticQuorum { .. } => "static-quorum",
            Self::KeepOldest { .. } => "keep-oldest",
            Self::DownAll => "down-all",
            Self::LeaseMajority { .. } => "lease-majority",
        }
    }

    /// The role that restricts which members are counted, if any.
    pub fn role(&self) -> Option<&str> {
        match self {
            Self::KeepMajority { role }
            | Self::StaticQuorum { role, .. }
            | Self::KeepOldest { role, .. }
            | Self::LeaseMajority { role, .. } => role.as_deref(),
            Self::DownAll => None,
        }
    }

    /// Whether the strategy decides through a lease.
    pub fn uses_lease(&self) -> bool {
        matches!(self, Self::LeaseMajority { .. })
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
