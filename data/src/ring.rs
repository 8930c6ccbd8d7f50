//! Placement: a consistent-hash ring over the members that hold data, and each key's preference
//! list on it.
//!
//! Every member with the store's role that is Up owns `vnodes` points (tokens) on a 64-bit ring,
//! placed by the hash of its address and the point's index; a key sits at the hash of its bytes.
//! Its *preference list* is the members met walking clockwise from the key, each once: the first
//! N hold its replicas, the rest are fallbacks in order, for writes while a replica is
//! unreachable. The ring is a function of the member list alone, so every node with the same
//! view computes the same one.
//!
//! Tokens come from the node's address, not its incarnation: a process restarted on the same
//! address with its data directory owns the same ranges and keeps its replicas. The hash is fixed
//! here (FNV-1a with a 64-bit finaliser), not taken from a crate whose output might change
//! between versions: it decides where data lives on disk.

use std::collections::BTreeSet;

use convoke_membership::{Address, Member, MemberStatus};

/// The hash that places keys and tokens. Part of the store's format: changing it moves data.
pub fn hash(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(PRIME);
    }
    // FNV's low bits mix poorly for similar inputs; the finaliser of MurmurHash3 spreads them.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The consistent-hash ring of the members that hold data.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ring {
    /// Members, in address order.
    members: Vec<Address>,
    /// (token, index into `members`), by token.
    tokens: Vec<(u64, usize)>,
}

impl Ring {
    /// The ring of `members`, each with `vnodes` tokens (at least one).
    pub fn new(members: impl IntoIterator<Item = Address>, vnodes: u32) -> Self {
        let members: Vec<Address> =
            members.into_iter().collect::<BTreeSet<_>>().into_iter().collect();
        let mut tokens = Vec::with_capacity(members.len() * vnodes.max(1) as usize);
        for (i, m) in members.iter().enumerate() {
            let name = m.to_string();
            for v in 0..vnodes.max(1) {
                let mut bytes = name.clone().into_bytes();
                bytes.push(b'#');
                bytes.extend_from_slice(&v.to_be_bytes());
                tokens.push((hash(&bytes), i));
            }
        }
        tokens.sort_unstable();
        Self { members, tokens }
    }

    /// The ring of the members that hold data: those with `role` (every member when `None`)
    /// that are Up, or preparing for a full shutdown (which stops nothing; the store serves
    /// until the processes stop).
    pub fn of_members<'a>(
        members: impl IntoIterator<Item = &'a Member>,
        role: Option<&str>,
        vnodes: u32,
    ) -> Self {
        let holding = |s: MemberStatus| {
            matches!(
                s,
                MemberStatus::Up
                    | MemberStatus::PreparingForShutdown
                    | MemberStatus::ReadyForShutdown
            )
        };
        let holders = members
            .into_iter()
            .filter(|m| holding(m.status()))
            .filter(|m| role.is_none_or(|r| m.has_role(r)))
            .map(|m| m.address().clone());
        Self::new(holders, vnodes)
    }

    /// The members on the ring, in address order.
    pub fn members(&self) -> &[Address] {
        &self.members
    }

    /// Whether no member holds data.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The preference list of `key`: every member once, clockwise from the key's hash. The
    /// first N hold its replicas; the rest are its fallbacks, in order.
    pub fn preference_list(&self, key: &[u8]) -> PreferenceList<'_> {
        self.preference_list_at(hash(key))
    }

    /// The preference list of the keys whose hash is `at`.
    pub fn preference_list_at(&self, at: u64) -> PreferenceList<'_> {
        let start = self.tokens.partition_point(|(t, _)| *t < at);
        PreferenceList { ring: self, next: start, walked: 0, seen: vec![false; self.members.len()] }
    }

    /// The arcs between consecutive tokens, clockwise from the lowest: every key of an arc has
    /// the same preference list. An empty ring has none; a ring of one token, one arc that is
    /// the whole ring.
    pub fn arcs(&self) -> Vec<Arc> {
        let n = self.tokens.len();
        (0..n)
            .filter_map(|i| {
                let end = self.tokens[i].0;
                let after = self.tokens[(i + n - 1) % n].0;
                // Tokens that collide leave an empty arc between them.
                (i == 0 || after != end).then_some(Arc { after, end })
            })
            .collect()
    }

    /// The `n` members that hold `key`'s replicas (fewer when the ring has fewer).
    pub fn replicas(&self, key: &[u8], n: usize) -> Vec<&Address> {
        self.preference_list(key).take(n).collect()
    }
}

/// The keys between two consecutive tokens: hashes after `after`, up to and including `end`,
/// clockwise (wrapping past `u64::MAX` when `end` is not above `after`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Arc {
    /// The token before the arc (excluded).
    pub after: u64,
    /// The arc's own token (included): the start of its preference list.
    pub end: u64,
}

impl Arc {
    /// The arc as at most two inclusive ranges of hashes, in ascending order of their starts.
    pub fn spans(self) -> impl Iterator<Item = Span> {
        let (low, high) = if self.after < self.end {
            (None, Some(Span { from: self.after + 1, to: self.end }))
        } else {
            // Wraps: from 0 to its token, and from after the previous token to the top.
            let top = (self.after < u64::MAX).then(|| Span { from: self.after + 1, to: u64::MAX });
            (Some(Span { from: 0, to: self.end }), top)
        };
        low.into_iter().chain(high)
    }

    /// Whether `h` is in it.
    pub fn contains(self, h: u64) -> bool {
        self.spans().any(|s| s.contains(h))
    }
}

/// An inclusive range of key hashes.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Span {
    /// The lowest hash.
    pub from: u64,
    /// The highest hash.
    pub to: u64,
}

impl Span {
    /// Every hash.
    pub const ALL: Span = Span { from: 0, to: u64::MAX };

    /// Whether `h` is in it.
    pub fn contains(self, h: u64) -> bool {
        (self.from..=self.to).contains(&h)
    }

    /// Whether it holds any hash (`from` not above `to`); a span off the wire is checked with it
    /// before anything else reads it.
    pub fn is_valid(self) -> bool {
        self.from <= self.to
    }

    /// Cut into at most `parts` spans of about equal width, in order (none for an invalid span).
    pub fn split(self, parts: u64) -> Vec<Span> {
        if !self.is_valid() {
            return Vec::new();
        }
        let width = u128::from(self.to - self.from) + 1;
        let parts = u128::from(parts.max(1)).min(width);
        (0..parts)
            .map(|i| {
                let lo = u128::from(self.from) + width * i / parts;
                let hi = u128::from(self.from) + width * (i + 1) / parts - 1;
                Span { from: lo as u64, to: hi as u64 }
            })
            .collect()
    }
}

/// The members of a key's preference list, in order (see [`Ring::preference_list`]).
#[derive(Debug)]
pub struct PreferenceList<'a> {
    ring: &'a Ring,
    next: usize,
    walked: usize,
    seen: Vec<bool>,
}

impl<'a> Iterator for PreferenceList<'a> {
    type Item = &'a Address;

    fn next(&mut self) -> Option<&'a Address> {
        let tokens = &self.ring.tokens;
        while self.walked < tokens.len() {
            let (_, member) = tokens[self.next % tokens.len()];
            self.next += 1;
            self.walked += 1;
            if !std::mem::replace(&mut self.seen[member], true) {
                return Some(&self.ring.members[member]);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests;
