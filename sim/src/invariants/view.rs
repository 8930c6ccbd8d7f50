//! The checkers' own reading of a gossip: convergence and unreachability recomputed from their
//! definitions, without calling the core's implementation.
//!
//! The simulator runs one data center, so the definitions' data-center filters are left out.

use std::collections::BTreeSet;

use convoke_membership::UniqueAddress;
use convoke_membership::gossip::Gossip;
use convoke_membership::member::{Member, MemberStatus};
use convoke_membership::reachability::ReachabilityStatus;

/// Statuses whose members must have seen a gossip for it to converge, and that may lead.
pub fn is_leader_status(s: MemberStatus) -> bool {
    use MemberStatus::*;
    matches!(s, Up | Leaving | PreparingForShutdown | ReadyForShutdown)
}

/// Subjects that a member observer which is not Down marks Unreachable or Terminated.
pub fn unreachable_for_convergence(g: &Gossip) -> BTreeSet<UniqueAddress> {
    g.reachability()
        .records()
        .filter(|r| r.status != ReachabilityStatus::Reachable)
        .filter(|r| g.member(&r.observer).is_some_and(|m| m.status() != MemberStatus::Down))
        .map(|r| r.subject)
        .filter(|s| g.has_member(s))
        .collect()
}

/// Why `g` has not converged from `self_node`'s point of view, or `None` when it has. Members in
/// `confirmed` (their `ExitingConfirmed` arrived) count as having seen it, and their unreachability
/// is ignored.
pub fn not_converged_because(
    g: &Gossip,
    self_node: &UniqueAddress,
    confirmed: &BTreeSet<UniqueAddress>,
) -> Option<String> {
    let first_members = !g.members().any(|m| is_leader_status(m.status()));
    let must_have_seen = |s: MemberStatus| is_leader_status(s) || (first_members && s.is_joining());
    if let Some(m) = g.members().find(|m| {
        must_have_seen(m.status()) && !g.seen_by(m.node()) && !confirmed.contains(m.node())
    }) {
        return Some(format!("{} ({}) has not seen it", m.node(), m.status()));
    }
    let unreachable = unreachable_for_convergence(g);
    let blocking = unreachable
        .iter()
        .filter(|n| *n != self_node && !confirmed.contains(*n))
        .filter_map(|n| g.member(n))
        .find(|m| !matches!(m.status(), MemberStatus::Down | MemberStatus::Exiting));
    blocking.map(|m| format!("{} ({}) is unreachable", m.node(), m.status()))
}

/// Whether `g` has converged from `self_node`'s point of view (see [`not_converged_because`]).
pub fn converged(
    g: &Gossip,
    self_node: &UniqueAddress,
    confirmed: &BTreeSet<UniqueAddress>,
) -> bool {
    not_converged_because(g, self_node, confirmed).is_none()
}

/// The leader of `g` as `self_node` computes it: the first member by address among those not Down
/// and reachable (or self) with a leader status; failing that, the first by leader-status ordering
/// (other statuses, then WeaklyUp, Joining, Exiting). Unlike Akka, and like convergence, verdicts
/// of Down observers are ignored (see the core's `leader_of`).
pub fn leader<'g>(g: &'g Gossip, self_node: &UniqueAddress) -> Option<&'g UniqueAddress> {
    let unreachable = unreachable_for_convergence(g);
    let pool = g.members().filter(|m| {
        m.status() != MemberStatus::Down
            && (!unreachable.contains(m.node()) || m.node() == self_node)
    });
    if let Some(m) = pool.clone().find(|m| is_leader_status(m.status())) {
        return Some(m.node());
    }
    let rank = |s: MemberStatus| match s {
        MemberStatus::WeaklyUp => 1,
        MemberStatus::Joining => 2,
        MemberStatus::Exiting => 3,
        MemberStatus::Down => 4,
        _ => 0,
    };
    pool.min_by(|a, b| rank(a.status()).cmp(&rank(b.status())).then_with(|| a.node().cmp(b.node())))
        .map(|m| m.node())
}

/// Every member of `before` with its record in `after`, if any: both gossips walked side by side
/// in member order, without a lookup per member.
pub fn before_and_after<'g>(
    before: &'g Gossip,
    after: &'g Gossip,
) -> impl Iterator<Item = (&'g Member, Option<&'g Member>)> {
    let mut later = after.members().peekable();
    before.members().map(move |old| (old, take_key(&mut later, old.node(), |m| m.node())))
}

/// The item of `sorted` whose key (by `key_of`) is `key`, if any, having passed over the items
/// with smaller keys. Called with ascending keys, it walks a sorted sequence once for all of them
/// instead of looking each one up.
pub fn take_key<T, K: Ord + ?Sized>(
    sorted: &mut std::iter::Peekable<impl Iterator<Item = T>>,
    key: &K,
    key_of: impl Fn(&T) -> &K,
) -> Option<T> {
    while sorted.next_if(|t| key_of(t) < key).is_some() {}
    sorted.next_if(|t| key_of(t) == key)
}
