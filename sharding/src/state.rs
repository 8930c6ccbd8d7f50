//! The coordinator's allocation table and how it is kept on a majority of the members.
//!
//! Only the coordinator changes the table. Each change is written as a whole new table to every
//! [`Replica`] (one per member with the role) and counts as done once a majority has accepted it;
//! only then does anyone hear of it (HostShard, ShardHome). A coordinator that starts on another
//! node first reads the replicas and takes the newest table a majority returns.
//!
//! Writes carry a [`StateVersion`]: the writing coordinator's [`Ballot`] and a sequence number.
//! A new coordinator reads with a ballot of its own; a replica that has promised a higher one
//! refuses and reports it, and the coordinator reads again with a higher round. A replica that
//! has answered a read for a ballot refuses reads and writes from lower ones. So once the new
//! coordinator has read from a majority, an old coordinator that still believes it is in charge
//! (its node cut off, or frozen) cannot get another write accepted by a majority: every majority
//! shares a member with the one that answered the read. And every write the old one did get
//! accepted by a majority reached at least one replica the new one read from, so the new table
//! includes it. This is the first phase of Paxos, with the coordinator as the single proposer.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use convoke_membership::UniqueAddress;

use super::ShardId;

/// A coordinator's claim to write: higher rounds win; the node, then the instance, break ties.
/// No two coordinators ever use the same ballot, not even two started one after the other on
/// the same node: each has an instance number of its own.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ballot {
    /// The round, raised past the promise a refusing replica reports.
    pub round: u64,
    /// The node of the coordinator that chose it.
    pub node: UniqueAddress,
    /// Which coordinator on that node (the driver numbers them).
    pub instance: u64,
}

/// The version of a written table: by ballot, then by sequence number within the ballot.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StateVersion {
    /// The ballot of the coordinator that wrote it.
    pub ballot: Ballot,
    /// Its position among that coordinator's writes, from 1.
    pub seq: u64,
}

/// Which region hosts which shard, and which regions exist.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CoordinatorState {
    shards: BTreeMap<ShardId, UniqueAddress>,
    /// Each region's shards in allocation order (the rebalance rule moves the oldest first).
    regions: BTreeMap<UniqueAddress, Vec<ShardId>>,
}

impl CoordinatorState {
    /// A table with the given regions and allocations. Allocations to regions not listed add
    /// the region; a shard listed twice keeps its last home.
    pub fn from_parts(
        regions: impl IntoIterator<Item = UniqueAddress>,
        shards: impl IntoIterator<Item = (ShardId, UniqueAddress)>,
    ) -> Self {
        let mut state = Self::default();
        for r in regions {
            state.register(r);
        }
        for (s, r) in shards {
            state.register(r.clone());
            state.deallocate(&s);
            state.allocate(s, r);
        }
        state
    }

    /// The region hosting `shard`, if any.
    pub fn home(&self, shard: &ShardId) -> Option<&UniqueAddress> {
        self.shards.get(shard)
    }

    /// Every allocated shard with its region, by shard id.
    pub fn allocations(&self) -> impl Iterator<Item = (&ShardId, &UniqueAddress)> {
        self.shards.iter()
    }

    /// Every region with its shards in allocation order.
    pub fn regions(&self) -> impl Iterator<Item = (&UniqueAddress, &[ShardId])> {
        self.regions.iter().map(|(r, s)| (r, s.as_slice()))
    }

    /// Whether `region` is in the table.
    pub fn has_region(&self, region: &UniqueAddress) -> bool {
        self.regions.contains_key(region)
    }

    /// The shards of `region`, oldest allocation first.
    pub fn shards_of(&self, region: &UniqueAddress) -> &[ShardId] {
        self.regions.get(region).map_or(&[], Vec::as_slice)
    }

    /// The number of allocated shards.
    pub fn num_shards(&self) -> usize {
        self.shards.len()
    }

    /// Adds `region` with no shards; returns whether it was new.
    pub(super) fn register(&mut self, region: UniqueAddress) -> bool {
        if self.regions.contains_key(&region) {
            return false;
        }
        self.regions.insert(region, Vec::new());
        true
    }

    /// Removes `region`; its shards become unallocated and are returned.
    pub(super) fn remove_region(&mut self, region: &UniqueAddress) -> Vec<ShardId> {
        let shards = self.regions.remove(region).unwrap_or_default();
        for s in &shards {
            self.shards.remove(s);
        }
        shards
    }

    /// Allocates an unallocated `shard` to a registered `region`.
    pub(super) fn allocate(&mut self, shard: ShardId, region: UniqueAddress) {
        debug_assert!(!self.shards.contains_key(&shard), "{shard:?} allocated twice");
        let Some(list) = self.regions.get_mut(&region) else {
            debug_assert!(false, "allocation to unregistered region {region}");
            return;
        };
        list.push(shard.clone());
        self.shards.insert(shard, region);
    }

    /// Removes `shard`'s allocation; returns the region it had.
    pub(super) fn deallocate(&mut self, shard: &ShardId) -> Option<UniqueAddress> {
        let region = self.shards.remove(shard)?;
        if let Some(list) = self.regions.get_mut(&region) {
            list.retain(|s| s != shard);
        }
        Some(region)
    }

    /// Checks that the two maps agree; for tests and debug assertions.
    pub fn is_consistent(&self) -> bool {
        let listed: usize = self.regions.values().map(Vec::len).sum();
        listed == self.shards.len()
            && self.regions.iter().all(|(r, list)| {
                let unique: BTreeSet<&ShardId> = list.iter().collect();
                unique.len() == list.len() && list.iter().all(|s| self.shards.get(s) == Some(r))
            })
    }
}

/// Messages between a coordinator and the replicas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplicaMsg {
    /// Coordinator → replica: promise to refuse writes below `ballot`, send me your table.
    Read {
        /// The reader's ballot.
        ballot: Ballot,
    },
    /// Replica → coordinator: the promise is made; here is the newest table accepted, if any.
    ReadReply {
        /// The ballot the reply answers.
        ballot: Ballot,
        /// The newest accepted table and its version.
        accepted: Option<(StateVersion, Arc<CoordinatorState>)>,
    },
    /// Coordinator → replica: accept this table.
    Write {
        /// Its version.
        version: StateVersion,
        /// The whole table.
        state: Arc<CoordinatorState>,
    },
    /// Replica → coordinator: the table of this version (or a newer one of the same ballot) is
    /// accepted.
    WriteAck {
        /// The version written.
        version: StateVersion,
    },
    /// Replica → coordinator: refused, a coordinator with a higher ballot has read or written.
    Rejected {
        /// The highest ballot the replica has promised.
        promised: Ballot,
    },
}

impl ReplicaMsg {
    /// The message's name, for logs and counters.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Read { .. } => "Read",
            Self::ReadReply { .. } => "ReadReply",
            Self::Write { .. } => "Write",
            Self::WriteAck { .. } => "WriteAck",
            Self::Rejected { .. } => "Rejected",
        }
    }
}

/// One member's copy of a coordinator table. It lives as long as the node, whatever happens to
/// the coordinator.
#[derive(Clone, Debug, Default)]
pub struct Replica {
    promised: Option<Ballot>,
    accepted: Option<(StateVersion, Arc<CoordinatorState>)>,
}

impl Replica {
    /// An empty replica that has promised nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Handles a Read or Write from a coordinator and returns the answer to send back; `None`
    /// for messages a replica does not take (replies meant for a coordinator).
    pub fn handle(&mut self, msg: ReplicaMsg) -> Option<ReplicaMsg> {
        match msg {
            ReplicaMsg::Read { ballot } => {
                if let Some(refusal) = self.refuse_below(&ballot) {
                    return Some(refusal);
                }
                self.promised = Some(ballot.clone());
                Some(ReplicaMsg::ReadReply { ballot, accepted: self.accepted.clone() })
            }
            ReplicaMsg::Write { version, state } => {
                if let Some(refusal) = self.refuse_below(&version.ballot) {
                    return Some(refusal);
                }
                self.promised = Some(version.ballot.clone());
                if self.accepted.as_ref().is_none_or(|(v, _)| *v < version) {
                    self.accepted = Some((version.clone(), state));
                }
                Some(ReplicaMsg::WriteAck { version })
            }
            ReplicaMsg::ReadReply { .. }
            | ReplicaMsg::WriteAck { .. }
            | ReplicaMsg::Rejected { .. } => None,
        }
    }

    fn refuse_below(&self, ballot: &Ballot) -> Option<ReplicaMsg> {
        let promised = self.promised.as_ref()?;
        (promised > ballot).then(|| ReplicaMsg::Rejected { promised: promised.clone() })
    }

    /// The newest accepted table and its version.
    pub fn accepted(&self) -> Option<&(StateVersion, Arc<CoordinatorState>)> {
        self.accepted.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use convoke_membership::{Address, Uid};

    use super::*;

    fn node(i: u16) -> UniqueAddress {
        let address = Address::new("sys", "host", 2550 + i).unwrap();
        UniqueAddress::new(address, Uid::new(1 + u64::from(i)).unwrap())
    }

    fn ballot(round: u64, i: u16) -> Ballot {
        Ballot { round, node: node(i), instance: 0 }
    }

    fn write(round: u64, seq: u64, shards: &[(&str, u16)]) -> ReplicaMsg {
        let state = CoordinatorState::from_parts(
            [],
            shards.iter().map(|&(s, r)| (ShardId::from(s), node(r))),
        );
        ReplicaMsg::Write {
            version: StateVersion { ballot: ballot(round, 0), seq },
            state: Arc::new(state),
        }
    }

    #[test]
    fn table_keeps_both_maps_in_step() {
        let mut t = CoordinatorState::default();
        t.register(node(1));
        t.register(node(2));
        t.allocate("a".into(), node(1));
        t.allocate("b".into(), node(1));
        t.allocate("c".into(), node(2));
        assert!(t.is_consistent());
        assert_eq!(t.deallocate(&"a".into()), Some(node(1)));
        assert_eq!(t.shards_of(&node(1)), [ShardId::from("b")]);
        assert_eq!(t.remove_region(&node(2)), [ShardId::from("c")]);
        assert_eq!(t.home(&"c".into()), None);
        assert!(t.is_consistent());
        assert_eq!(t.num_shards(), 1);
    }

    #[test]
    fn replica_keeps_the_newest_write_and_acks_older_ones_of_its_ballot() {
        let mut r = Replica::new();
        assert!(matches!(r.handle(write(1, 2, &[("a", 1)])), Some(ReplicaMsg::WriteAck { .. })));
        assert!(matches!(r.handle(write(1, 1, &[])), Some(ReplicaMsg::WriteAck { .. })));
        let (v, state) = r.accepted().unwrap();
        assert_eq!(v.seq, 2);
        assert_eq!(state.home(&"a".into()), Some(&node(1)));
    }

    #[test]
    fn after_a_read_for_a_higher_ballot_writes_of_lower_ballots_are_refused() {
        let mut r = Replica::new();
        r.handle(write(1, 1, &[("a", 1)]));
        let reply = r.handle(ReplicaMsg::Read { ballot: ballot(2, 3) }).unwrap();
        let ReplicaMsg::ReadReply { accepted: Some((v, _)), .. } = reply else {
            panic!("{reply:?}")
        };
        assert_eq!(v.ballot.round, 1);
        let refusal = r.handle(write(1, 2, &[("b", 1)])).unwrap();
        assert_eq!(refusal, ReplicaMsg::Rejected { promised: ballot(2, 3) });
        assert_eq!(r.accepted().unwrap().0.seq, 1, "the refused write changed nothing");
        let refusal = r.handle(ReplicaMsg::Read { ballot: ballot(1, 9) }).unwrap();
        assert!(matches!(refusal, ReplicaMsg::Rejected { .. }));
    }
}
