//! Tests of the split-brain resolver: the decision table of every strategy (the partition cases
//! of the reference `SplitBrainResolverSpec`), the resolver's timing and lease handling driven
//! with virtual time, the in-memory lease, and properties over random splits.

mod decisions;
mod properties;
mod resolver;

use std::collections::BTreeSet;

use crate::address::{Address, Uid, UniqueAddress};
use crate::member::{Member, MemberStatus, UpNumber};
use crate::version::AppVersion;

/// Test member `name` (`a`..`g`) at `<name>:7355`. Up-numbers and roles follow the reference
/// test addresses: E is the oldest, then D, C, B, then A and F (A first by address), then G.
pub(super) fn member(name: char) -> Member {
    let (up, roles): (u32, &[&str]) = match name {
        'a' => (5, &["role3"]),
        'b' => (4, &["role1", "role3"]),
        'c' => (3, &["role2"]),
        'd' => (2, &["role1", "role2", "role3"]),
        'e' => (1, &[]),
        'f' => (5, &[]),
        'g' => (6, &[]),
        _ => panic!("no test member {name}"),
    };
    let mut roles: BTreeSet<String> = roles.iter().map(|r| (*r).to_owned()).collect();
    roles.insert("dc-default".to_owned());
    Member::from_parts(node(name), UpNumber(up), MemberStatus::Up, roles, AppVersion::default())
}

pub(super) fn node(name: char) -> UniqueAddress {
    let address = Address::new("sys", name.to_string(), 7355).unwrap();
    UniqueAddress::new(address, Uid::new(1).unwrap())
}

pub(super) fn with_status(m: &Member, status: MemberStatus) -> Member {
    let up = match status {
        MemberStatus::Joining | MemberStatus::WeaklyUp => UpNumber::UNASSIGNED,
        _ => m.up_number(),
    };
    Member::from_parts(m.node().clone(), up, status, m.roles().clone(), m.app_version().clone())
}

pub(super) fn joining(m: &Member) -> Member {
    with_status(m, MemberStatus::Joining)
}

pub(super) fn weakly_up(m: &Member) -> Member {
    with_status(m, MemberStatus::WeaklyUp)
}

pub(super) fn leaving(m: &Member) -> Member {
    with_status(m, MemberStatus::Leaving)
}

pub(super) fn exiting(m: &Member) -> Member {
    with_status(m, MemberStatus::Exiting)
}

pub(super) fn downed(m: &Member) -> Member {
    with_status(m, MemberStatus::Down)
}

/// Moves `m` to data center `dc`.
pub(super) fn in_dc(m: &Member, dc: &str) -> Member {
    let mut roles: BTreeSet<String> =
        m.roles().iter().filter(|r| !r.starts_with("dc-")).cloned().collect();
    roles.insert(format!("dc-{dc}"));
    Member::from_parts(m.node().clone(), m.up_number(), m.status(), roles, m.app_version().clone())
}

pub(super) fn nodes(members: &[&Member]) -> BTreeSet<UniqueAddress> {
    members.iter().map(|m| m.node().clone()).collect()
}
