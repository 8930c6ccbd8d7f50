//! Reading one membership list: which members may host the singleton, which of them is the
//! oldest, and which older members are on their way out.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use convoke_membership::member::UpNumber;
use convoke_membership::{Member, MemberStatus, UniqueAddress};

use super::SingletonConfig;

/// Statuses of a member that may host the instance: it was moved Up and has not been moved to
/// Exiting or Down. A member preparing for a full cluster shutdown keeps what it hosts: moving the
/// instance while the whole cluster stops would only add a gap.
pub(super) fn is_candidate_status(s: MemberStatus) -> bool {
    use MemberStatus::*;
    matches!(s, Up | Leaving | PreparingForShutdown | ReadyForShutdown)
}

/// What one membership list says, from this node's side.
#[derive(Debug)]
pub(super) struct Reading<'a> {
    /// This node's own entry.
    pub(super) me: Option<&'a Member>,
    /// The oldest candidate: same data center as this node, with the role, Up or Leaving (or
    /// preparing for shutdown), with an up-number.
    pub(super) oldest: Option<&'a Member>,
    /// Every member's status.
    pub(super) statuses: BTreeMap<UniqueAddress, MemberStatus>,
    /// Members that could host (role, data center), are older than this node and are Exiting or
    /// Down: one of them may be running the instance right now.
    pub(super) departing_elders: Vec<UniqueAddress>,
}

/// Whether `m` may ever host a singleton for `role` as seen from data center `dc`.
fn may_host(role: Option<&str>, dc: &str, m: &Member) -> bool {
    m.data_center() == dc && role.is_none_or(|r| m.has_role(r))
}

/// Whether `m` has been moved Up at least once (a member that never was has no age).
fn has_up_number(m: &Member) -> bool {
    m.up_number() != UpNumber::UNASSIGNED
}

/// Oldest first by up-number and address; the uid breaks the (never expected) remaining tie so the
/// order is total.
fn age(a: &Member, b: &Member) -> Ordering {
    a.age_cmp(b).then_with(|| a.node().cmp(b.node()))
}

/// The member that hosts the singleton as seen from data center `self_dc`: of the members in
/// `self_dc` that have `role` (any member when `None`), are Up, Leaving, PreparingForShutdown or
/// ReadyForShutdown and have been assigned an up-number, the oldest by [`Member::age_cmp`] (the
/// uid breaks a remaining tie). `None` when no member qualifies. O(members).
///
/// The managers decide with this rule; a driver that must find the host (to send the instance
/// a message) uses it too, so that both agree on it.
pub fn oldest_candidate<'a>(
    members: &'a [Member],
    self_dc: &str,
    role: Option<&str>,
) -> Option<&'a Member> {
    members
        .iter()
        .filter(|m| {
            may_host(role, self_dc, m) && is_candidate_status(m.status()) && has_up_number(m)
        })
        .min_by(|a, b| age(a, b))
}

/// Reads `members` for `self_node`. O(members).
pub(super) fn read<'a>(
    config: &SingletonConfig,
    self_node: &UniqueAddress,
    members: &'a [Member],
) -> Reading<'a> {
    let me = members.iter().find(|m| m.node() == self_node);
    let statuses = members.iter().map(|m| (m.node().clone(), m.status())).collect();
    let Some(me) = me else {
        return Reading { me, oldest: None, statuses, departing_elders: Vec::new() };
    };
    let dc = me.data_center();
    let role = config.role.as_deref();
    let departing_elders = members
        .iter()
        .filter(|m| may_host(role, dc, m) && has_up_number(m))
        .filter(|m| matches!(m.status(), MemberStatus::Exiting | MemberStatus::Down))
        .filter(|m| m.node() != self_node && age(m, me) == Ordering::Less)
        .map(|m| m.node().clone())
        .collect();
    Reading {
        me: Some(me),
        oldest: oldest_candidate(members, dc, role),
        statuses,
        departing_elders,
    }
}
