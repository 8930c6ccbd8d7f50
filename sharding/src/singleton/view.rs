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

/// Whether `m` may ever host this singleton as seen from data center `dc`.
fn may_host(config: &SingletonConfig, dc: &str, m: &Member) -> bool {
    m.data_center() == dc && config.role.as_deref().is_none_or(|r| m.has_role(r))
}

/// Oldest first by up-number and address; the uid breaks the (never expected) remaining tie so the
/// order is total.
fn age(a: &Member, b: &Member) -> Ordering {
    a.age_cmp(b).then_with(|| a.node().cmp(b.node()))
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
    let mut oldest: Option<&Member> = None;
    let mut departing_elders = Vec::new();
    for m in members.iter().filter(|m| may_host(config, dc, m)) {
        if m.up_number() == UpNumber::UNASSIGNED {
            continue;
        }
        if is_candidate_status(m.status()) {
            if oldest.is_none_or(|o| age(m, o) == Ordering::Less) {
                oldest = Some(m);
            }
        } else if matches!(m.status(), MemberStatus::Exiting | MemberStatus::Down)
            && m.node() != self_node
            && age(m, me) == Ordering::Less
        {
            departing_elders.push(m.node().clone());
        }
    }
    Reading { me: Some(me), oldest, statuses, departing_elders }
}
