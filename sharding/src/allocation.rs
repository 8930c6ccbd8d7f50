//! Least-shard allocation: a new shard goes to the region with the fewest shards; a rebalance
//! round moves shards from regions above the mean to the others, a bounded number at a time.
//!
//! The rebalance rule is the one Akka introduced in 2.6.10 with an absolute and a relative limit
//! (Akka's default still moves one shard per round unless the limits are set; convoke sets them
//! by default). With `N` shards over `R` regions and `optimal = ceil(N / R)`:
//! 1. every region above `optimal` gives up its oldest surplus shards; at most `limit(N)` move;
//! 2. if none is above but some region is below `optimal - 1`, each region at `optimal` gives up
//!    one shard, at most as many as the shortfall and `limit(N)`.
//!
//! `limit(N) = max(1, min(floor(relative_limit · N), absolute_limit))`. A round starts only when
//! the previous one has finished (and, in the coordinator, only while every region runs the same
//! application version: during a rolling update shards move only as old nodes leave). After rounds settle, the shard counts of any two regions
//! differ by at most one (two regions at `optimal - 1` and `optimal + 0` differ by one; a region
//! below `optimal - 1` triggers step 2).

use std::cmp::Reverse;

use convoke_membership::UniqueAddress;
use convoke_membership::version::AppVersion;

use super::ShardId;

/// One region as the allocation rule sees it.
#[derive(Clone, Copy, Debug)]
pub struct RegionLoad<'a> {
    /// The node of the region.
    pub region: &'a UniqueAddress,
    /// Its shards, oldest allocation first.
    pub shards: &'a [ShardId],
    /// Its member is leaving (or otherwise on its way out): it is the last choice.
    pub leaving: bool,
    /// Its member's `cluster.app_version`.
    pub version: &'a AppVersion,
}

impl<'a> RegionLoad<'a> {
    /// Smaller is better: a member that stays, then the newest application version (a rolling
    /// update sends new shards to the nodes that replace the old ones), then fewer shards, then
    /// the address (so the choice does not depend on the order the regions came in).
    fn suitability(&self) -> (bool, Reverse<&'a AppVersion>, usize, &'a UniqueAddress) {
        (self.leaving, Reverse(self.version), self.shards.len(), self.region)
    }
}

/// The least-shard allocation rule with its rebalance limits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LeastShardAllocation {
    absolute_limit: u32,
    relative_limit: f64,
}

impl LeastShardAllocation {
    /// A rule moving at most `absolute_limit` shards, and at most `relative_limit` of all
    /// shards, per round (always at least one).
    pub fn new(absolute_limit: u32, relative_limit: f64) -> Self {
        Self { absolute_limit, relative_limit }
    }

    /// Where a new shard goes: the most suitable of `regions` (see [`RegionLoad`]). `None` when
    /// `regions` is empty. The requester plays no part: a region that asks often does not end up
    /// with more shards.
    pub fn allocate<'a>(&self, regions: &[RegionLoad<'a>]) -> Option<&'a UniqueAddress> {
        regions.iter().min_by(|a, b| a.suitability().cmp(&b.suitability())).map(|r| r.region)
    }

    /// How many shards one round may move when there are `total` shards.
    pub fn limit(&self, total: usize) -> usize {
        // The relative limit is a fraction of a count: truncation is what "floor" asks for.
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let relative = (self.relative_limit * total as f64).floor().max(0.0) as usize;
        let absolute = usize::try_from(self.absolute_limit).unwrap_or(usize::MAX);
        relative.min(absolute).max(1)
    }

    /// The shards to move in this round, given every registered region and its shards. Empty
    /// when the counts are as even as they can be. The caller starts a round only when no shard
    /// is moving and the membership is calm (nobody unreachable or joining).
    pub fn rebalance(&self, regions: &[RegionLoad<'_>]) -> Vec<ShardId> {
        let total: usize = regions.iter().map(|r| r.shards.len()).sum();
        if total == 0 || regions.is_empty() {
            return Vec::new();
        }
        let mut sorted: Vec<&RegionLoad<'_>> = regions.iter().collect();
        sorted.sort_by(|a, b| a.suitability().cmp(&b.suitability()));
        let optimal = total.div_ceil(regions.len());
        let limit = self.limit(total);
        let surplus: Vec<ShardId> = sorted
            .iter()
            .filter(|r| r.shards.len() > optimal)
            .flat_map(|r| r.shards[..r.shards.len() - optimal].iter().cloned())
            .take(limit)
            .collect();
        if !surplus.is_empty() {
            return surplus;
        }
        let below: usize =
            sorted.iter().map(|r| (optimal - 1).saturating_sub(r.shards.len())).sum();
        if below == 0 {
            return Vec::new();
        }
        sorted
            .iter()
            .filter(|r| r.shards.len() >= optimal)
            .filter_map(|r| r.shards.first().cloned())
            .take(below.min(limit))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use convoke_membership::{Address, Uid};
    use proptest::prelude::*;

    use super::*;

    fn node(i: usize) -> UniqueAddress {
        let address = Address::new("sys", "host", 2550 + u16::try_from(i).unwrap()).unwrap();
        UniqueAddress::new(address, Uid::new(1 + i as u64).unwrap())
    }

    /// Regions 0..n with the given shard counts; shard names are unique across regions.
    fn table(counts: &[usize]) -> Vec<(UniqueAddress, Vec<ShardId>)> {
        let mut next = 0;
        counts
            .iter()
            .enumerate()
            .map(|(i, &c)| {
                let shards = (0..c)
                    .map(|_| {
                        next += 1;
                        ShardId::new(format!("{next}"))
                    })
                    .collect();
                (node(i), shards)
            })
            .collect()
    }

    fn loads(t: &[(UniqueAddress, Vec<ShardId>)]) -> Vec<RegionLoad<'_>> {
        static VERSION: std::sync::LazyLock<AppVersion> =
            std::sync::LazyLock::new(AppVersion::default);
        t.iter()
            .map(|(r, s)| RegionLoad { region: r, shards: s, leaving: false, version: &VERSION })
            .collect()
    }

    /// Runs one round: removes the chosen shards and gives each to the least loaded region.
    fn apply(rule: &LeastShardAllocation, t: &mut [(UniqueAddress, Vec<ShardId>)]) -> usize {
        let moving = rule.rebalance(&loads(t));
        for (_, shards) in t.iter_mut() {
            shards.retain(|s| !moving.contains(s));
        }
        for s in &moving {
            let to = rule.allocate(&loads(t)).unwrap().clone();
            t.iter_mut().find(|(r, _)| *r == to).unwrap().1.push(s.clone());
        }
        moving.len()
    }

    fn counts(t: &[(UniqueAddress, Vec<ShardId>)]) -> Vec<usize> {
        t.iter().map(|(_, s)| s.len()).collect()
    }

    #[test]
    fn a_new_shard_goes_to_the_region_with_fewest_shards_that_is_not_leaving() {
        let rule = LeastShardAllocation::new(20, 0.1);
        let t = table(&[3, 1, 2]);
        assert_eq!(rule.allocate(&loads(&t)), Some(&node(1)));
        let mut l = loads(&t);
        l[1].leaving = true;
        assert_eq!(rule.allocate(&l), Some(&node(2)));
        assert_eq!(rule.allocate(&[]), None);
    }

    #[test]
    fn a_new_shard_goes_to_the_newest_app_version_before_the_fewest_shards() {
        let rule = LeastShardAllocation::new(20, 0.1);
        let t = table(&[3, 1, 2]);
        let (old, new, rc) = (
            AppVersion::parse("1.2.3"),
            AppVersion::parse("1.10.0"),
            AppVersion::parse("1.10.0-RC1"),
        );
        let mut l = loads(&t);
        l[0].version = &new;
        l[1].version = &old;
        l[2].version = &rc;
        assert_eq!(rule.allocate(&l), Some(&node(0)), "1.10.0 is newer than 1.10.0-RC1 and 1.2.3");
        l[2].version = &new;
        assert_eq!(rule.allocate(&l), Some(&node(2)), "the fewer shards among the newest");
        l[0].leaving = true;
        l[2].leaving = true;
        assert_eq!(
            rule.allocate(&l),
            Some(&node(1)),
            "an old node that stays before new ones leaving"
        );
    }

    #[test]
    fn rebalance_moves_the_surplus_of_regions_above_the_mean() {
        let rule = LeastShardAllocation::new(1000, 1.0);
        let mut t = table(&[1, 2, 0]);
        assert_eq!(apply(&rule, &mut t), 1);
        assert_eq!(counts(&t), [1, 1, 1]);

        let mut t = table(&[4, 4, 0]);
        assert_eq!(apply(&rule, &mut t), 2);
        assert_eq!(counts(&t), [3, 3, 2]);
        assert_eq!(apply(&rule, &mut t), 0);
    }

    #[test]
    fn rebalance_takes_one_from_full_regions_when_one_is_two_below() {
        let rule = LeastShardAllocation::new(1000, 1.0);
        let mut t = table(&[4, 4, 2]);
        // optimal 4: nobody above it, region 2 is one below optimal - 1.
        assert_eq!(apply(&rule, &mut t), 1);
        assert_eq!(counts(&t), [3, 4, 3]);
    }

    #[test]
    fn one_round_moves_no_more_than_the_limits() {
        let rule = LeastShardAllocation::new(20, 0.1);
        assert_eq!(rule.limit(100), 10);
        assert_eq!(rule.limit(1000), 20);
        assert_eq!(rule.limit(3), 1);
        let mut t = table(&[50, 50, 0]);
        assert_eq!(apply(&rule, &mut t), 10);
        let rule = LeastShardAllocation::new(100, 1.0);
        let mut t = table(&[50, 50, 0]);
        assert_eq!(apply(&rule, &mut t), 32);
        assert_eq!(counts(&t), [34, 34, 32]);
    }

    proptest! {
        /// Rounds end, and when they do the counts of any two regions differ by at most one.
        #[test]
        fn rounds_settle_with_counts_at_most_one_apart(
            counts_in in proptest::collection::vec(0usize..60, 1..8),
            absolute in 1u32..30,
            relative in 0.0f64..1.0,
        ) {
            let rule = LeastShardAllocation::new(absolute, relative);
            let mut t = table(&counts_in);
            let total: usize = counts_in.iter().sum();
            let mut rounds = 0;
            while apply(&rule, &mut t) > 0 {
                rounds += 1;
                prop_assert!(rounds <= total + 1, "no end after {rounds} rounds");
            }
            let c = counts(&t);
            prop_assert_eq!(c.iter().sum::<usize>(), total);
            let (min, max) = (c.iter().min().unwrap(), c.iter().max().unwrap());
            prop_assert!(max - min <= 1, "counts {c:?}");
        }
    }
}
