//! Members, their statuses and the allowed transitions between them.

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use crate::address::{Address, UniqueAddress};
use crate::version::AppVersion;

/// The prefix of the role that names a member's data center.
pub const DC_ROLE_PREFIX: &str = "dc-";

/// A member's lifecycle status. Transitions are checked by [`MemberStatus::can_move_to`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemberStatus {
    /// Asked to join; not yet moved Up by the leader.
    Joining,
    /// Promoted without convergence (during a partition) after `allow_weakly_up_members`.
    WeaklyUp,
    /// A full member.
    Up,
    /// Asked to leave gracefully.
    Leaving,
    /// Moved by the leader after Leaving; about to be removed.
    Exiting,
    /// Marked as down; will be removed once unreachable.
    Down,
    /// Gone; never stored in a gossip, only reported in events.
    Removed,
    /// The cluster is preparing for a full shutdown.
    PreparingForShutdown,
    /// Ready for a full shutdown.
    ReadyForShutdown,
}

impl MemberStatus {
    /// Every status, in wire-number order.
    pub const ALL: [MemberStatus; 9] = [
        Self::Joining,
        Self::Up,
        Self::Leaving,
        Self::Exiting,
        Self::Down,
        Self::Removed,
        Self::WeaklyUp,
        Self::PreparingForShutdown,
        Self::ReadyForShutdown,
    ];

    /// Whether a member may move from `self` to `to` (a move to the same status is always allowed).
    pub fn can_move_to(self, to: MemberStatus) -> bool {
        use MemberStatus::*;
        if self == to {
            return true;
        }
        match self {
            Joining => matches!(to, WeaklyUp | Up | Leaving | Down | Removed),
            WeaklyUp => matches!(to, Up | Leaving | Down | Removed),
            Up => matches!(to, Leaving | Down | Removed | PreparingForShutdown),
            Leaving => matches!(to, Exiting | Down | Removed),
            Exiting => matches!(to, Removed | Down),
            Down => matches!(to, Removed),
            PreparingForShutdown => matches!(to, ReadyForShutdown | Removed | Leaving | Down),
            ReadyForShutdown => matches!(to, Removed | Leaving | Down),
            Removed => false,
        }
    }

    /// The protobuf enum number.
    pub fn wire_number(self) -> i32 {
        match self {
            Self::Joining => 0,
            Self::Up => 1,
            Self::Leaving => 2,
            Self::Exiting => 3,
            Self::Down => 4,
            Self::Removed => 5,
            Self::WeaklyUp => 6,
            Self::PreparingForShutdown => 7,
            Self::ReadyForShutdown => 8,
        }
    }

    /// The status with this protobuf enum number.
    pub fn from_wire_number(n: i32) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.wire_number() == n)
    }

    /// Statuses a leader may have, and that must have seen a gossip for convergence.
    pub fn is_leader_eligible(self) -> bool {
        matches!(
            self,
            Self::Up | Self::Leaving | Self::PreparingForShutdown | Self::ReadyForShutdown
        )
    }

    /// Down or Exiting: such members may be removed when unreachable and do not block convergence.
    pub fn is_down_or_exiting(self) -> bool {
        matches!(self, Self::Down | Self::Exiting)
    }

    /// Joining or WeaklyUp: admitted, not yet moved Up.
    pub fn is_joining(self) -> bool {
        matches!(self, Self::Joining | Self::WeaklyUp)
    }

    /// PreparingForShutdown or ReadyForShutdown.
    pub fn is_shutdown_preparation(self) -> bool {
        matches!(self, Self::PreparingForShutdown | Self::ReadyForShutdown)
    }

    /// Whether a member may get from `self` to `to` in any number of allowed transitions.
    pub fn can_reach(self, to: MemberStatus) -> bool {
        let mut seen = vec![self];
        let mut i = 0;
        while i < seen.len() {
            let from = seen[i];
            for next in Self::ALL {
                if from.can_move_to(next) && !seen.contains(&next) {
                    seen.push(next);
                }
            }
            i += 1;
        }
        seen.contains(&to)
    }

    /// The rank in a gossip merge: the higher one wins.
    ///
    /// This order is a linear extension of the transition graph, so the winner of a merge is
    /// always reachable from both versions. Akka ranks ReadyForShutdown above Down and both shutdown
    /// statuses below Leaving differently (`Removed > ReadyForShutdown > Down > Exiting > Leaving >
    /// PreparingForShutdown`), which lets a merge move a Down member back to ReadyForShutdown and
    /// loses a Leaving that raced with ReadyForShutdown, so members that all leave at once after a
    /// full-shutdown preparation never get out. We rank the shutdown statuses below Leaving instead.
    fn merge_rank(self) -> u8 {
        match self {
            Self::Joining => 0,
            Self::WeaklyUp => 1,
            Self::Up => 2,
            Self::PreparingForShutdown => 3,
            Self::ReadyForShutdown => 4,
            Self::Leaving => 5,
            Self::Exiting => 6,
            Self::Down => 7,
            Self::Removed => 8,
        }
    }

    /// The name used in events and the management API (`Up`, `WeaklyUp`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::Joining => "Joining",
            Self::WeaklyUp => "WeaklyUp",
            Self::Up => "Up",
            Self::Leaving => "Leaving",
            Self::Exiting => "Exiting",
            Self::Down => "Down",
            Self::Removed => "Removed",
            Self::PreparingForShutdown => "PreparingForShutdown",
            Self::ReadyForShutdown => "ReadyForShutdown",
        }
    }
}

impl fmt::Display for MemberStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The order in which the leader moves members Up; smaller is older. Joining and WeaklyUp members
/// have [`UpNumber::UNASSIGNED`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UpNumber(pub u32);

impl UpNumber {
    /// The up-number of a member that has not been moved Up yet.
    pub const UNASSIGNED: UpNumber = UpNumber(u32::MAX);
}

/// An attempt to move a member along a transition outside the allowed graph.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("member {node} cannot move from {from} to {to}")]
pub struct InvalidTransition {
    /// The member.
    pub node: UniqueAddress,
    /// Its current status.
    pub from: MemberStatus,
    /// The requested status.
    pub to: MemberStatus,
}

/// One member of the cluster. Equality and ordering are those of its [`UniqueAddress`] alone.
///
/// A member is one pointer to its fields, which a change (of status, of up-number) copies: every
/// node of a process holds every member in its gossip and in its resolver's table, and a copy in
/// a table is 8 bytes shared with the other tables that hold the same version of the member.
/// Roles and app version never change for a member and are shared between all its versions.
#[derive(Clone)]
pub struct Member(Arc<MemberParts>);

#[derive(Clone, Debug)]
struct MemberParts {
    node: UniqueAddress,
    up_number: UpNumber,
    status: MemberStatus,
    roles: Arc<BTreeSet<String>>,
    /// The suffix of the `dc-` role, read off `roles` once: every view filters by it.
    data_center: Arc<str>,
    app_version: Arc<AppVersion>,
}

impl fmt::Debug for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &*self.0;
        f.debug_struct("Member")
            .field("node", &p.node)
            .field("up_number", &p.up_number)
            .field("status", &p.status)
            .field("roles", &p.roles)
            .field("data_center", &p.data_center)
            .field("app_version", &p.app_version)
            .finish()
    }
}

/// The data center `roles` names (the suffix of its `dc-` role, else `default`).
pub(crate) fn data_center_of(roles: &BTreeSet<String>) -> Arc<str> {
    // Most clusters have one data center, the default one: its members share one name, which
    // the views that filter every member by it then find in cache.
    static DEFAULT: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| "default".into());
    match roles.iter().find_map(|r| r.strip_prefix(DC_ROLE_PREFIX)).unwrap_or("default") {
        "default" => DEFAULT.clone(),
        dc => dc.into(),
    }
}

impl Member {
    /// A new Joining member. `roles` should contain its `dc-` role.
    pub fn joining(node: UniqueAddress, roles: BTreeSet<String>, app_version: AppVersion) -> Self {
        Self(Arc::new(MemberParts {
            node,
            up_number: UpNumber::UNASSIGNED,
            status: MemberStatus::Joining,
            data_center: data_center_of(&roles),
            roles: Arc::new(roles),
            app_version: Arc::new(app_version),
        }))
    }

    /// A member with every field given (for decoding and tests); checks nothing.
    pub fn from_parts(
        node: UniqueAddress,
        up_number: UpNumber,
        status: MemberStatus,
        roles: BTreeSet<String>,
        app_version: AppVersion,
    ) -> Self {
        let data_center = data_center_of(&roles);
        let (roles, app_version) = (Arc::new(roles), Arc::new(app_version));
        Self::from_shared_parts(node, up_number, status, roles, data_center, app_version)
    }

    /// A member whose roles, data center and version are shared with others (decoding a gossip,
    /// where many members have the same ones); `data_center` must be the one `roles` names.
    pub(crate) fn from_shared_parts(
        node: UniqueAddress,
        up_number: UpNumber,
        status: MemberStatus,
        roles: Arc<BTreeSet<String>>,
        data_center: Arc<str>,
        app_version: Arc<AppVersion>,
    ) -> Self {
        debug_assert_eq!(data_center, data_center_of(&roles));
        Self(Arc::new(MemberParts { node, up_number, status, roles, data_center, app_version }))
    }

    /// The synthetic Removed member reported for a node no longer in the gossip.
    pub fn removed(node: UniqueAddress) -> Self {
        Self(Arc::new(MemberParts {
            node,
            up_number: UpNumber::UNASSIGNED,
            status: MemberStatus::Removed,
            roles: Arc::new(BTreeSet::from([format!("{DC_ROLE_PREFIX}N/A")])),
            data_center: "N/A".into(),
            app_version: Arc::default(),
        }))
    }

    /// A copy with status Removed and everything else kept, for the event reporting its removal.
    pub(crate) fn as_removed(&self) -> Member {
        Member(Arc::new(MemberParts { status: MemberStatus::Removed, ..(*self.0).clone() }))
    }

    /// Its identity.
    pub fn node(&self) -> &UniqueAddress {
        &self.0.node
    }

    /// Its address.
    pub fn address(&self) -> &Address {
        &self.0.node.address
    }

    /// Its status.
    pub fn status(&self) -> MemberStatus {
        self.0.status
    }

    /// Its up-number.
    pub fn up_number(&self) -> UpNumber {
        self.0.up_number
    }

    /// Leaving without an up number: it was asked to leave while still Joining or WeaklyUp.
    pub fn left_while_joining(&self) -> bool {
        self.0.status == MemberStatus::Leaving && self.0.up_number == UpNumber::UNASSIGNED
    }

    /// Its roles, including the `dc-` role.
    pub fn roles(&self) -> &BTreeSet<String> {
        &self.0.roles
    }

    /// Whether it has `role`.
    pub fn has_role(&self, role: &str) -> bool {
        self.0.roles.contains(role)
    }

    /// Its data center: the suffix of its `dc-` role, `"default"` if it has none.
    pub fn data_center(&self) -> &str {
        &self.0.data_center
    }

    /// Its application version.
    pub fn app_version(&self) -> &AppVersion {
        &self.0.app_version
    }

    /// A copy with a new status.
    ///
    /// # Errors
    /// When the transition is outside the allowed graph.
    pub fn with_status(&self, to: MemberStatus) -> Result<Member, InvalidTransition> {
        if !self.0.status.can_move_to(to) {
            return Err(InvalidTransition { node: self.0.node.clone(), from: self.0.status, to });
        }
        Ok(Member(Arc::new(MemberParts { status: to, ..(*self.0).clone() })))
    }

    /// A copy moved Up (or WeaklyUp promoted to Up) with an up-number.
    ///
    /// # Errors
    /// When the member may not move Up.
    pub fn with_up(&self, up_number: UpNumber) -> Result<Member, InvalidTransition> {
        let mut m = self.with_status(MemberStatus::Up)?;
        Arc::make_mut(&mut m.0).up_number = up_number;
        Ok(m)
    }

    /// Whether `self` joined before `other`: smaller up-number, ties broken by the smaller address
    /// (uid ignored). Only meaningful within one data center.
    pub fn is_older_than(&self, other: &Member) -> bool {
        self.age_cmp(other) == Ordering::Less
    }

    /// Age ordering: oldest first.
    pub fn age_cmp(&self, other: &Member) -> Ordering {
        self.0.up_number.cmp(&other.0.up_number).then_with(|| self.address().cmp(other.address()))
    }

    /// Of two versions of the same node, the one that wins a gossip merge: the higher status rank
    /// (see `merge_rank`, which ranks the shutdown statuses below Leaving); with equal statuses the
    /// older one; identical ones keep `b`.
    pub fn highest_priority_of<'a>(a: &'a Member, b: &'a Member) -> &'a Member {
        match a.0.status.merge_rank().cmp(&b.0.status.merge_rank()) {
            Ordering::Greater => a,
            Ordering::Less => b,
            Ordering::Equal if a.is_older_than(b) => a,
            Ordering::Equal => b,
        }
    }

    /// Whether `other` is this very version of the member (one a copy of the other), which then
    /// has the same state; false says nothing.
    pub fn is_same_version(&self, other: &Member) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Whether every field, not just the identity, is the same.
    pub fn same_state(&self, other: &Member) -> bool {
        self.is_same_version(other)
            || self.0.node == other.0.node
                && self.0.status == other.0.status
                && self.0.up_number == other.0.up_number
                && self.0.roles == other.0.roles
                && self.0.app_version == other.0.app_version
    }
}

impl PartialEq for Member {
    fn eq(&self, other: &Self) -> bool {
        self.0.node == other.0.node
    }
}

impl Eq for Member {}

impl PartialOrd for Member {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Member {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.node.cmp(&other.0.node)
    }
}

impl std::hash::Hash for Member {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.node.hash(state);
    }
}

impl fmt::Display for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Member({}, {})", self.0.node, self.0.status)
    }
}

/// Orders candidates for leadership when none has a leader-eligible status: any other
/// status first, then WeaklyUp, Joining, Exiting, Down; within one status by member ordering.
pub fn leader_status_cmp(a: &Member, b: &Member) -> Ordering {
    fn rank(s: MemberStatus) -> u8 {
        match s {
            MemberStatus::WeaklyUp => 1,
            MemberStatus::Joining => 2,
            MemberStatus::Exiting => 3,
            MemberStatus::Down => 4,
            _ => 0,
        }
    }
    rank(a.0.status).cmp(&rank(b.0.status)).then_with(|| a.cmp(b))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::address::Uid;
    use MemberStatus::*;

    pub(crate) fn node(host_port: &str, uid: u64) -> UniqueAddress {
        let address: Address = format!("convoke://sys@{host_port}").parse().unwrap();
        UniqueAddress::new(address, Uid::new(uid).unwrap())
    }

    pub(crate) fn member(host_port: &str, status: MemberStatus) -> Member {
        member_up(host_port, status, UpNumber::UNASSIGNED)
    }

    pub(crate) fn member_up(host_port: &str, status: MemberStatus, up: UpNumber) -> Member {
        Member::from_parts(
            node(host_port, 1),
            up,
            status,
            BTreeSet::from(["dc-default".to_owned()]),
            AppVersion::default(),
        )
    }

    #[test]
    fn allowed_transitions_follow_the_spec_table() {
        let allowed: &[(MemberStatus, &[MemberStatus])] = &[
            (Joining, &[WeaklyUp, Up, Leaving, Down, Removed]),
            (WeaklyUp, &[Up, Leaving, Down, Removed]),
            (Up, &[Leaving, Down, Removed, PreparingForShutdown]),
            (Leaving, &[Exiting, Down, Removed]),
            (Exiting, &[Removed, Down]),
            (Down, &[Removed]),
            (PreparingForShutdown, &[ReadyForShutdown, Removed, Leaving, Down]),
            (ReadyForShutdown, &[Removed, Leaving, Down]),
            (Removed, &[]),
        ];
        for (from, tos) in allowed {
            for to in MemberStatus::ALL {
                let expected = *from == to || tos.contains(&to);
                assert_eq!(from.can_move_to(to), expected, "{from} -> {to}");
            }
        }
    }

    #[test]
    fn an_invalid_transition_is_an_error_naming_both_statuses() {
        let m = member("a:1", Down);
        let err = m.with_status(Up).unwrap_err();
        assert_eq!((err.from, err.to), (Down, Up));
        assert!(err.to_string().contains("Down") && err.to_string().contains("Up"));
    }

    #[test]
    fn wire_numbers_round_trip() {
        for s in MemberStatus::ALL {
            assert_eq!(MemberStatus::from_wire_number(s.wire_number()), Some(s));
        }
        assert_eq!(MemberStatus::from_wire_number(9), None);
        assert_eq!(Up.wire_number(), 1);
        assert_eq!(ReadyForShutdown.wire_number(), 8);
    }

    #[test]
    fn merge_precedence_prefers_the_later_lifecycle_status() {
        let order = [
            Joining,
            WeaklyUp,
            Up,
            PreparingForShutdown,
            ReadyForShutdown,
            Leaving,
            Exiting,
            Down,
            Removed,
        ];
        for (i, lo) in order.iter().enumerate() {
            for hi in &order[i + 1..] {
                let a = member("a:1", *lo);
                let b = member("a:1", *hi);
                assert_eq!(Member::highest_priority_of(&a, &b).status(), *hi);
                assert_eq!(Member::highest_priority_of(&b, &a).status(), *hi);
            }
        }
    }

    #[test]
    fn the_merge_winner_is_reachable_from_both_versions() {
        for a in MemberStatus::ALL {
            for b in MemberStatus::ALL {
                let w = Member::highest_priority_of(&member("a:1", a), &member("a:1", b)).status();
                assert!(a.can_reach(w) && b.can_reach(w), "{a} + {b} -> {w}");
            }
        }
    }

    #[test]
    fn reachability_in_the_transition_graph_is_transitive() {
        assert!(Joining.can_reach(ReadyForShutdown));
        assert!(WeaklyUp.can_reach(Exiting));
        assert!(!Down.can_reach(Up));
        assert!(!Exiting.can_reach(Leaving));
        assert!(!ReadyForShutdown.can_reach(Up));
        assert!(Removed.can_reach(Removed) && !Removed.can_reach(Down));
    }

    #[test]
    fn merge_precedence_with_equal_status_keeps_the_older() {
        let a = member_up("a:1", Up, UpNumber(3));
        let b = member_up("a:1", Up, UpNumber(1));
        assert_eq!(Member::highest_priority_of(&a, &b).up_number(), UpNumber(1));
        assert_eq!(Member::highest_priority_of(&b, &a).up_number(), UpNumber(1));
    }

    #[test]
    fn members_compare_by_unique_address_only() {
        let a = member("a:1", Up);
        let b = member("a:1", Down);
        assert_eq!(a, b);
        assert!(member("a:1", Up) < member("a:2", Joining));
    }

    #[test]
    fn age_ordering_is_up_number_then_address() {
        let a = member_up("b:1", Up, UpNumber(1));
        let b = member_up("a:1", Up, UpNumber(2));
        let c = member_up("a:2", Up, UpNumber(2));
        assert!(a.is_older_than(&b));
        assert!(b.is_older_than(&c));
        assert!(!c.is_older_than(&c));
        let joining = member("0:1", Joining);
        assert!(c.is_older_than(&joining));
    }

    #[test]
    fn leader_status_ordering_puts_weakly_up_before_joining_before_exiting_before_down() {
        let mut v = [
            member("a:1", Down),
            member("b:1", Exiting),
            member("c:1", Joining),
            member("d:1", WeaklyUp),
            member("e:1", Leaving),
        ];
        v.sort_by(leader_status_cmp);
        let statuses: Vec<_> = v.iter().map(Member::status).collect();
        assert_eq!(statuses, [Leaving, WeaklyUp, Joining, Exiting, Down]);
    }

    #[test]
    fn data_center_comes_from_the_dc_role() {
        let mut roles = BTreeSet::from(["backend".to_owned(), "dc-east".to_owned()]);
        let m = Member::joining(node("a:1", 1), roles.clone(), AppVersion::default());
        assert_eq!(m.data_center(), "east");
        roles.remove("dc-east");
        let m = Member::joining(node("a:1", 1), roles, AppVersion::default());
        assert_eq!(m.data_center(), "default");
        assert_eq!(Member::removed(node("a:1", 1)).status(), Removed);
    }
}
