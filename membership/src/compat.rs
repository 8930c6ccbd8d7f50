//! The join-compatibility check: the settings a joiner sends with its join request and the
//! cluster compares with its own before admitting it. The keys in [`REQUIRED_COMPAT_KEYS`] must be
//! sent by both sides and agree; any other key sent by both sides must agree too (the protocol
//! version excepted, which travels for logging); a key only one side sends is ignored, so a newer
//! node may add keys without breaking a join.

use std::collections::BTreeMap;

use crate::config::Config;

/// Compatibility key: the split-brain strategy, which must be the same on every node, or two sides
/// of a partition could both survive.
pub const COMPAT_ACTIVE_STRATEGY: &str = "cluster.split_brain_resolver.active_strategy";

/// Compatibility key: the protocol version, sent for logging only.
pub const COMPAT_PROTOCOL_VERSION: &str = "convoke.protocol_version";

/// The protocol version this build speaks, sent under [`COMPAT_PROTOCOL_VERSION`].
pub const PROTOCOL_VERSION: &str = "1";

/// Compatibility keys that must be present on both sides and equal for a join to go ahead.
pub const REQUIRED_COMPAT_KEYS: [&str; 1] = [COMPAT_ACTIVE_STRATEGY];

impl Config {
    /// The settings a joiner compares with the cluster it joins, keyed by their
    /// configuration key. Compare two sides with [`check_compat`]. The system name is not among
    /// them: addresses carry it and it is checked on its own.
    pub fn compat_keys(&self) -> BTreeMap<String, String> {
        let mut keys = self.extra_compat_keys.clone();
        keys.extend([
            (COMPAT_ACTIVE_STRATEGY.to_owned(), self.split_brain_resolver.active_strategy.clone()),
            (COMPAT_PROTOCOL_VERSION.to_owned(), PROTOCOL_VERSION.to_owned()),
        ]);
        keys
    }
}

/// Compares the [compatibility keys](Config::compat_keys) of this node (`own`) with those of the
/// cluster it joins (`theirs`).
///
/// Every key in [`REQUIRED_COMPAT_KEYS`] must be present on both sides with the same value; any
/// other key present on both sides must have the same value, except [`COMPAT_PROTOCOL_VERSION`],
/// which is informational.
///
/// # Errors
/// All problems in one message, separated by `"; "`: `"X is missing"` when the cluster does not
/// send key X, `"X is missing on this node"` when this node does not, and
/// `"X is incompatible: ours a, theirs b"`.
pub fn check_compat(
    own: &BTreeMap<String, String>,
    theirs: &BTreeMap<String, String>,
) -> Result<(), String> {
    let differ = |key: &str, ours: &String, their: &String| {
        (ours != their).then(|| format!("{key} is incompatible: ours {ours}, theirs {their}"))
    };
    let mut problems: Vec<String> = REQUIRED_COMPAT_KEYS
        .iter()
        .filter_map(|&key| match (own.get(key), theirs.get(key)) {
            (_, None) => Some(format!("{key} is missing")),
            (None, Some(_)) => Some(format!("{key} is missing on this node")),
            (Some(ours), Some(their)) => differ(key, ours, their),
        })
        .collect();
    problems.extend(
        own.iter()
            .filter(|(k, _)| {
                !REQUIRED_COMPAT_KEYS.contains(&k.as_str()) && *k != COMPAT_PROTOCOL_VERSION
            })
            .filter_map(|(k, ours)| differ(k, ours, theirs.get(k)?)),
    );
    if problems.is_empty() { Ok(()) } else { Err(problems.join("; ")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compat_keys_carry_the_strategy_and_the_protocol_version() {
        let mut c = Config::default();
        c.split_brain_resolver.active_strategy = "down-all".into();
        c.extra_compat_keys.insert("sharding.number_of_shards".into(), "100".into());
        let keys = c.compat_keys();
        assert_eq!(keys.len(), 3);
        assert_eq!(keys["sharding.number_of_shards"], "100");
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
            // A key both sides send must agree; one only one side sends is ignored.
            (
                map(&[(strategy, "keep-majority"), ("sharding.number_of_shards", "100")]),
                map(&[(strategy, "keep-majority"), ("sharding.number_of_shards", "1000")]),
                Err("sharding.number_of_shards is incompatible: ours 100, theirs 1000".to_owned()),
            ),
            (
                map(&[(strategy, "keep-majority"), ("sharding.number_of_shards", "100")]),
                map(&[(strategy, "keep-majority")]),
                Ok(()),
            ),
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
