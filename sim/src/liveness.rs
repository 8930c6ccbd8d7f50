//! The liveness phase: once every fault is healed, the cluster must converge within a bound derived
//! from the configuration and the cluster size.
//!
//! Checked properties:
//! - **L1** eventual convergence: every running node is a member, holds the same member set (the
//!   running incarnations, nothing else), everyone Up, everyone in the seen set, and reports
//!   convergence, and no process waits to leave (a leave drawn before the heal hands the
//!   store's keys over first, up to `LEAVE_TIMEOUT`, which the bound allows for);
//! - **L2** completeness: a crashed or stopped incarnation is gone from every live view (it became
//!   unreachable, was downed and removed);
//! - **L4** reachable again: no live view has any unreachable record left;
//! - **L6** a node that joined during the faults ends Up (a late joiner failing L1 is reported as
//!   L6);
//! - **L8** one singleton: within [`singleton_bound`] of the membership settling (L1 holding),
//!   exactly one cluster singleton instance exists, it is not stopping, and it runs on the oldest
//!   Up member (when the run has the singleton layer);
//! - **L9** every ask answered: with the membership settled, every ask the load sends is answered
//!   within [`ASK_BOUND`], by its entity once rebalancing has
//!   settled (when the run has the sharding layer);
//! - **L10** balanced shards: within [`sharding_bound`] of L8 holding, the coordinator's table
//!   places every shard that needs a home (see [`check_sharding_balance`]) on a running process,
//!   and the shard counts of any two running regions differ by at most one;
//! - **L11** remembered entities run (with `--remember-entities`): at the end of the settled
//!   window after L10 held, every shard's remembered set was read last by a running process, and
//!   every entity in it runs there, though no message was sent to it since its shard moved.
//!
//! A process that starts after the membership settled (a restart scheduled before the heal)
//! changes the membership again, and its region is rightly given shards by rebalancing: L1, L8
//! and L10 are then awaited again from its start, each within its bound, and L9 judges the asks
//! phase by phase (see [`AskPhase`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use convoke_membership::UniqueAddress;
use convoke_membership::config::{Config, RETRY_UNSUCCESSFUL_JOIN_AFTER_ON};
use convoke_membership::member::MemberStatus;

use convoke_membership::sbr::TICK_INTERVAL;
use convoke_sharding::{ShardId, ShardingConfig};
use convoke_singleton::{LEASE_RETRY_INTERVAL, SingletonConfig};

use crate::lease::LeaseConfig;
use crate::net::NetConfig;
use crate::operator::{Downing, OperatorConfig};
use crate::sharding::{ASK_BOUND, AskRecord};
use crate::singleton::MAX_STOP_DELAY;
use crate::world::Sim;

/// The first unmet liveness property: its id and what is wrong.
pub type Unmet = (&'static str, String);

/// Checks L1, L2, L4 and L6 now. `late` are the slots that joined during the faults.
///
/// # Errors
/// The first unmet property.
pub fn check(sim: &Sim, late: &BTreeSet<usize>) -> Result<(), Unmet> {
    let live: Vec<usize> = sim.running().collect();
    if live.is_empty() {
        return Err(("L1", "no node is running".to_owned()));
    }
    let expected: BTreeSet<&UniqueAddress> =
        live.iter().filter_map(|i| sim.slot(*i).node.as_ref()).collect();
    for &i in &live {
        let core = sim.core(i).expect("running");
        let g = core.gossip();
        let me = core.self_node();
        if let Some(dead) = g.members().find(|m| !expected.contains(m.node())) {
            return Err((
                "L2",
                format!("{me} still has {} ({}), which no longer runs", dead.node(), dead.status()),
            ));
        }
        if let Some(r) = g
            .reachability()
            .records()
            .find(|r| r.status != convoke_membership::reachability::ReachabilityStatus::Reachable)
        {
            return Err((
                "L4",
                format!("{me} holds {} {:?} as seen by {}", r.subject, r.status, r.observer),
            ));
        }
    }
    for &i in &live {
        let core = sim.core(i).expect("running");
        let g = core.gossip();
        let me = core.self_node();
        let id = if late.contains(&i) { "L6" } else { "L1" };
        // A leave under way changes the membership once the store has handed its keys over.
        if sim.store_leaving(i) {
            return Err(("L1", format!("{me} is leaving once its store has handed its keys over")));
        }
        if let Some(missing) = expected.iter().find(|n| !g.has_member(n)) {
            return Err((id, format!("{me} does not have {missing} as a member")));
        }
        if let Some(m) = g.members().find(|m| m.status() != MemberStatus::Up) {
            let id =
                if sim.slot_of(m.address()).is_some_and(|s| late.contains(&s)) { "L6" } else { id };
            return Err((id, format!("{me} sees {} {}", m.node(), m.status())));
        }
        if let Some(n) = expected.iter().find(|n| !g.seen_by(n)) {
            return Err(("L1", format!("{n} has not seen {me}'s gossip")));
        }
        if !core.convergence() {
            return Err(("L1", format!("{me} reports no convergence")));
        }
    }
    let first = sim.core(live[0]).expect("running").gossip();
    for &i in &live[1..] {
        let g = sim.core(i).expect("running").gossip();
        if g.version() != first.version() {
            return Err((
                "L1",
                format!("slots {} and {i} hold different gossip versions", live[0]),
            ));
        }
    }
    Ok(())
}

/// How long after the heal the liveness phase may take, derived from the configuration and the
/// cluster size `n`:
///
/// - `fd` = `acceptable_heartbeat_pause + 3 × heartbeat_interval`: a failure detector's verdict
///   (≈ 5.3 s with defaults) plus a reaper tick, to see a dead node unreachable or a healed one
///   reachable; counted twice (a restarted node's old incarnation, then anything a late heartbeat
///   upset);
/// - `down` = the time to decide (the oracle's `down_after` and tick, or the resolver's
///   `stable_after`, down-all-when-unstable and tick) + two leader ticks, to down and remove;
/// - `bootstrap` = the operator's `bootstrap_after` and tick, when every member was downed;
/// - `restart` = the longest supervisor restart delay;
/// - `join` = `seed_node_timeout + retry_unsuccessful_join_after`: a restarted node may need a
///   second attempt, after its old incarnation is removed; counted twice;
/// - `spread` = `gossip_interval × (2⌈log₂ n⌉ + 5)`: epidemic dissemination to n nodes with the
///   3× speed-up; counted three times (after the heal, after removals, after the last node is
///   moved Up);
///
/// all scaled by the largest clock drift (a slow clock stretches every interval).
pub fn bound(config: &Config, n: usize, operator: &OperatorConfig, max_drift_ppm: i32) -> Duration {
    let fd = config.failure_detector.acceptable_heartbeat_pause
        + config.failure_detector.heartbeat_interval * 3;
    let sbr = &config.split_brain_resolver;
    let decide = if operator.downing == Downing::Oracle {
        operator.down_after + operator.tick
    } else {
        sbr.stable_after + sbr.down_all_when_unstable_after().unwrap_or_default() + TICK_INTERVAL
    };
    let down = decide + config.leader_actions_interval * 2;
    let bootstrap = operator.bootstrap_after.map_or(Duration::ZERO, |b| b + operator.tick);
    let restart = operator.restart_after.map_or(Duration::ZERO, |(_, hi)| hi);
    let join = config.seed_node_timeout
        + config.retry_unsuccessful_join_after.unwrap_or(RETRY_UNSUCCESSFUL_JOIN_AFTER_ON);
    let log2 = usize::BITS - n.max(1).leading_zeros();
    let spread = config.gossip_interval * (2 * log2 + 5);
    let total = fd * 2 + down + restart + bootstrap + join * 2 + spread * 3;
    total.mul_f64(1.0 + f64::from(max_drift_ppm.unsigned_abs()) / 1e6)
}

/// Checks L8 now: exactly one singleton instance exists, it is not stopping, and it runs on the
/// oldest Up member of the first running node's view (all views are the same once L1 holds).
/// Holds trivially when the run has no singleton layer.
///
/// # Errors
/// What is wrong.
pub fn check_singleton(sim: &Sim) -> Result<(), Unmet> {
    let Some(singletons) = sim.singletons() else { return Ok(()) };
    let Some(first) = sim.running().next() else {
        return Err(("L8", "no node is running".to_owned()));
    };
    let g = sim.core(first).expect("running").gossip();
    let oldest = g
        .members()
        .filter(|m| m.status() == MemberStatus::Up)
        .min_by(|a, b| a.age_cmp(b).then_with(|| a.node().cmp(b.node())))
        .map(|m| m.node().clone());
    let Some(oldest) = oldest else { return Err(("L8", "no member is Up".to_owned())) };
    let instances: Vec<_> = singletons.instances().collect();
    match instances.as_slice() {
        [] => Err(("L8", format!("no singleton instance runs; the oldest member is {oldest}"))),
        [(_, i)] if i.node == oldest && i.stop_asked_at.is_none() => Ok(()),
        [(slot, i)] => Err((
            "L8",
            format!(
                "the only singleton instance runs in slot {slot} ({}{}), the oldest member is \
                 {oldest}",
                i.node,
                if i.stop_asked_at.is_some() { ", stopping" } else { "" }
            ),
        )),
        more => {
            let slots: Vec<usize> = more.iter().map(|(s, _)| *s).collect();
            Err(("L8", format!("{} singleton instances run, in slots {slots:?}", more.len())))
        }
    }
}

/// How long after the membership settles (L1 holds) L8 may take, for singleton settings `config`
/// on a network of quality `net`:
///
/// - the removal margin: a previous host removed before the membership settled was seen removed
///   by then, so its margin ends within one margin (a host that left lingers to hand over for
///   less than that);
/// - two hand-over rounds, each a retry interval plus the longest one-way latency: a previous host
///   may first learn that it is no longer the oldest, then be asked again;
/// - the longest an instance takes to stop, and a second of slack;
/// - with a lease, its TTL, a lease retry interval and two operation timeouts: a lease may still
///   be held when the membership settles by a node that will not release it (it crashed, or its
///   acquire timed out after the store granted it), and the new host asks again every retry
///   interval until it has expired;
///
/// all stretched by the largest clock drift (the margins and retries run on the nodes' clocks).
pub fn singleton_bound(config: &SingletonConfig, net: &NetConfig, max_drift_ppm: i32) -> Duration {
    let round = config.hand_over_retry_interval + net.latency_max + net.reorder_delay;
    let lease = config.use_lease.then(|| {
        let l = LeaseConfig::for_singleton(config);
        l.ttl + LEASE_RETRY_INTERVAL + l.operation_timeout * 2
    });
    let total = config.removal_margin
        + round * 2
        + MAX_STOP_DELAY
        + Duration::from_secs(1)
        + lease.unwrap_or_default();
    total.mul_f64(1.0 + f64::from(max_drift_ppm.unsigned_abs()) / 1e6)
}

/// Checks L10 now: a coordinator runs with its table recovered and no handoff in progress, every
/// shard it has allocated lives in the region of a running process, every shard that needs a
/// home has one, and the shard counts of any two running processes' regions (zero for one not in
/// the table) differ by at most one (what the least-shard rule settles to). Holds trivially when
/// the run has no sharding layer.
///
/// A shard comes back on its next message (a remembered one at once; L11 checks those): a shard
/// whose home went, with its region or by a rebalance, and that no ask has reached since rightly
/// has none. So a shard needs a home when a running region hosts it or when an ask was sent to it
/// between two [`ASK_BOUND`]s and one ago: the bound L9 gives an ask to be answered is the time
/// it has to bring its shard a home, and an older ask still waiting is L9's to judge. The load's
/// entity ids spread unevenly over the shards (two of the 300 hash to shard 6), so a shard can go
/// unasked for minutes. The window also keeps a coordinator whose table is still empty or
/// partial from counting as balanced: the asks of a few seconds reach most shards.
///
/// # Errors
/// What is wrong.
pub fn check_sharding_balance(sim: &Sim) -> Result<(), Unmet> {
    let Some(shardings) = sim.shardings() else { return Ok(()) };
    let Some((slot, counts)) = shardings.allocation() else {
        return Err(("L10", "no coordinator runs with its table recovered".to_owned()));
    };
    let coordinator = shardings.slot(slot).host.as_ref().and_then(|h| h.coordinator());
    if let Some(s) = coordinator.map(|c| c.status()).filter(|s| s.handoffs > 0) {
        return Err(("L10", format!("{} handoffs are still in progress", s.handoffs)));
    }
    let live: BTreeSet<UniqueAddress> =
        sim.running().filter_map(|i| shardings.slot(i).node.clone()).collect();
    if let Some((gone, n)) = counts.iter().find(|(r, n)| **n > 0 && !live.contains(*r)) {
        return Err(("L10", format!("{n} shards are still allocated to {gone}, which is gone")));
    }
    let homeless: BTreeSet<ShardId> = (0..shardings.config().number_of_shards)
        .map(|i| ShardId::new(i.to_string()))
        .filter(|s| coordinator.is_some_and(|c| c.state().home(s).is_none()))
        .collect();
    if let Some(i) = sim.running().find(|i| {
        let host = shardings.slot(*i).host.as_ref();
        host.is_some_and(|h| h.shard_counts().any(|(s, _)| homeless.contains(s)))
    }) {
        return Err(("L10", format!("slot {i} hosts a shard that the table places nowhere")));
    }
    let wanted = wanting_home(shardings.asks(), &homeless, sim.now());
    if let Some(a) = wanted {
        let (shard, at) = (&a.shard, a.sent_at.as_secs_f64());
        let why =
            format!("shard {shard} has no home, though an ask sent to it at {at:.3}s wants one");
        return Err(("L10", why));
    }
    let loads: Vec<usize> = live.iter().map(|n| counts.get(n).copied().unwrap_or(0)).collect();
    let (min, max) = (loads.iter().min().copied(), loads.iter().max().copied());
    match (min, max) {
        (Some(min), Some(max)) if max - min <= 1 => Ok(()),
        _ => Err(("L10", format!("shard counts per running region are {loads:?}"))),
    }
}

/// The ask that wants a home for one of the `homeless` shards at `now`, if any: the latest sent
/// to one of them between two [`ASK_BOUND`]s and one ago (see [`check_sharding_balance`]).
fn wanting_home<'a>(
    asks: &'a BTreeMap<u64, AskRecord>,
    homeless: &BTreeSet<ShardId>,
    now: Duration,
) -> Option<&'a AskRecord> {
    let (from, until) = (now.saturating_sub(ASK_BOUND * 2), now.saturating_sub(ASK_BOUND));
    let window = asks.values().rev().take_while(|a| a.sent_at >= from);
    window.filter(|a| a.sent_at <= until).find(|a| homeless.contains(&a.shard))
}

/// Checks L11 now: every non-empty remembered set was read last by the shard of a running
/// process, and each of its entities runs in that process. Holds trivially unless the run's
/// entity type remembers its entities.
///
/// # Errors
/// The first set or entity that is not so.
pub fn check_remembered(sim: &Sim) -> Result<(), Unmet> {
    let Some(s) = sim.shardings().filter(|s| s.config().remember_entities) else { return Ok(()) };
    for (shard, (owner, ids)) in s.remembered().iter().filter(|(_, (_, ids))| !ids.is_empty()) {
        let Some(slot) = sim.running().find(|i| s.slot(*i).node.as_ref() == Some(owner)) else {
            let n = ids.len();
            let why = format!(
                "shard {shard}'s {n} remembered entities were read last by {owner}, which no longer runs"
            );
            return Err(("L11", why));
        };
        if let Some(e) = ids.iter().find(|e| !s.slot(slot).entities.contains_key(*e)) {
            let why = format!(
                "entity {e} is remembered by shard {shard} of slot {slot}, but does not run there"
            );
            return Err(("L11", why));
        }
    }
    Ok(())
}

/// How long after the singleton settles (L8 holds) L10 may take for sharding settings `config`
/// on a network of quality `net`: the removal margin (shards of a region removed before the
/// membership settled wait that long), then one rebalance round per `limit` shards to move (at
/// most all of them), each a rebalance interval plus a handoff of a few round trips and retries,
/// stretched by the largest clock drift.
pub fn sharding_bound(config: &ShardingConfig, net: &NetConfig, max_drift_ppm: i32) -> Duration {
    let shards = config.number_of_shards;
    let limit = config.allocation().limit(shards as usize).max(1);
    let rounds = u32::try_from((shards as usize).div_ceil(limit)).unwrap_or(u32::MAX) + 2;
    let trip = net.latency_max + net.reorder_delay;
    let round = config.rebalance_interval + config.retry_interval * 4 + trip * 8;
    let total = config.removal_margin + round * rounds;
    total.mul_f64(1.0 + f64::from(max_drift_ppm.unsigned_abs()) / 1e6)
}

/// One stretch of the sharding liveness phase for L9: from the membership settling until it
/// changed again (a process started), or until the end of the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AskPhase {
    /// The membership settled (L1 held): asks sent from then on are judged.
    pub settled: Duration,
    /// Asks sent from then on must be answered within [`ASK_BOUND`].
    pub timed: Duration,
    /// The shards were balanced (L10): asks sent from then on must be answered by their entity
    /// (`Duration::MAX` when the phase ended before they were).
    pub ok_from: Duration,
    /// Asks sent from then on belong to the next phase, or are not judged yet.
    pub until: Duration,
    /// Whether this is the last phase. Otherwise `until` is when a process started and the
    /// membership changed again: its region is given shards by rebalancing, so an ask not
    /// answered by then may meet a handoff, and is not held to be answered by its entity.
    pub last: bool,
}

/// Checks L9 over the asks of each phase (see [`AskPhase`]): those sent from `settled` until
/// `until` were answered, success or failure; those sent from `timed` on within [`ASK_BOUND`];
/// those sent from `ok_from` on by their entity (before that a rebalance may answer an ask with
/// a handoff failure, and a shard whose region was removed waits for the removal margin).
/// Asks sent between two phases, while the membership settled again, are not judged. Holds
/// trivially when the run has no sharding layer.
///
/// # Errors
/// The first ask that was not, and what became of it.
pub fn check_asks(sim: &Sim, phases: &[AskPhase]) -> Result<(), Unmet> {
    let Some(shardings) = sim.shardings() else { return Ok(()) };
    for (id, a) in shardings.asks() {
        let Some(p) = phases.iter().find(|p| a.sent_at >= p.settled && a.sent_at < p.until) else {
            continue;
        };
        let late = |at: Duration| a.sent_at >= p.timed && at.saturating_sub(a.sent_at) > ASK_BOUND;
        let why = match a.answered {
            None => "was never answered".to_owned(),
            Some((at, _)) if late(at) => format!(
                "was answered after {:.3}s (bound {:.0}s)",
                secs_of(at.saturating_sub(a.sent_at)),
                ASK_BOUND.as_secs_f64()
            ),
            // An entity whose state's replicas are mostly on processes that are gone waits for
            // them (docs/data.md, "Absent holders"): its asks fail meanwhile. Judged when its
            // state failed, not now: the processes may be back since.
            Some((at, false))
                if a.sent_at >= p.ok_from
                    && (p.last || at < p.until)
                    && !shardings
                        .states()
                        .is_some_and(|s| s.was_unavailable(&a.entity, a.sent_at, at)) =>
            {
                "was answered with a failure after the shards were balanced".to_owned()
            }
            Some(_) => continue,
        };
        return Err((
            "L9",
            format!("ask {id} from slot {} sent at {:.3}s {why}", a.from_slot, secs_of(a.sent_at)),
        ));
    }
    Ok(())
}

fn secs_of(d: Duration) -> f64 {
    d.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_wants_a_home_for_an_ask_sent_between_two_ask_bounds_and_one_ago() {
        let shard = |n: u32| ShardId::new(n.to_string());
        let ask = |n: u32, secs: u64| AskRecord {
            from_slot: 0,
            incarnation: 1,
            shard: shard(n),
            entity: "e1".into(),
            sent_at: Duration::from_secs(secs),
            answered: Some((Duration::from_secs(secs), true)),
        };
        // Shard 6 asked at 100 s, shard 4 at 103 s, shard 6 again at 108 s.
        let asks: BTreeMap<u64, AskRecord> =
            [(1, ask(6, 100)), (2, ask(4, 103)), (3, ask(6, 108))].into();
        let homeless = |ns: &[u32]| ns.iter().map(|n| shard(*n)).collect::<BTreeSet<_>>();
        let at = |secs: u64| Duration::from_secs(secs);
        let wanted =
            |ns: &[u32], now: u64| wanting_home(&asks, &homeless(ns), at(now)).map(|a| a.sent_at);
        // Too recent to be held against the shard: the ask has ASK_BOUND to bring it a home.
        assert_eq!(wanted(&[6], 104), None);
        assert_eq!(wanted(&[6], 105), Some(at(100)));
        assert_eq!(wanted(&[6], 110), Some(at(100)));
        // Two bounds on, the ask of 100 s no longer counts, and the next is still too recent.
        assert_eq!(wanted(&[6], 111), None);
        assert_eq!(wanted(&[6], 113), Some(at(108)));
        // A shard with a home is not asked about; the other one is.
        assert_eq!(wanted(&[4], 110), Some(at(103)));
        assert_eq!(wanted(&[], 110), None);
        assert_eq!(wanted(&[4, 6], 113), Some(at(108)));
        // Unasked for longer than two bounds: rightly without a home.
        assert_eq!(wanted(&[4, 6], 119), None);
    }
}
