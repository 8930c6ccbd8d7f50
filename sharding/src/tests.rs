//! Coordinator, replicas, regions and shards of a few nodes wired together by hand: a tiny
//! in-test network that delivers in order, entities that stop at once when asked, a check on
//! every entity start that no other node runs it, and virtual time.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use convoke_membership::member::UpNumber;
use convoke_membership::version::AppVersion;
use convoke_membership::{Address, Member, MemberStatus, Uid, UniqueAddress};

use super::*;
use convoke_singleton::oldest_candidate;

const SHARDS: u32 = 12;

/// A base instant; only offsets from it matter.
pub(super) fn base() -> Instant {
    #[allow(clippy::disallowed_methods, reason = "a base instant; only offsets matter")]
    Instant::now()
}

pub(super) fn node(i: usize) -> UniqueAddress {
    let address = Address::new("sys", "host", 2550 + u16::try_from(i).unwrap()).unwrap();
    UniqueAddress::new(address, Uid::new(100 + i as u64).unwrap())
}

fn config() -> ShardingConfig {
    let mut c = ShardingConfig::new("counter");
    c.number_of_shards = SHARDS;
    c.removal_margin = Duration::from_secs(20);
    c.passivate_idle_after = None;
    c
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Msg {
    entity: EntityId,
    id: u64,
}

#[derive(Debug)]
enum Envelope {
    ToRegion(usize, usize, RegionMsg),
    ToCoordinator(usize, usize, CoordinatorMsg),
    ToReplica(usize, usize, ReplicaMsg),
    ReplicaReply(usize, usize, ReplicaMsg),
    Forward(usize, usize, ShardId, Msg),
}

struct TestNode {
    alive: bool,
    status: MemberStatus,
    up: u32,
    version: AppVersion,
    replica: Replica,
    region: Region<Msg>,
    shards: BTreeMap<ShardId, Shard<Msg>>,
    coordinator: Option<Coordinator>,
    delivered: Vec<u64>,
    dropped: Vec<(u64, DropReason)>,
    stopped: bool,
    /// Cut off from the others, who removed it; it stops (downs itself) at this time.
    dies_at: Option<Instant>,
    /// Frozen (its process does not run) until this time: no timer fires, no message is taken
    /// in; they wait for it.
    frozen_until: Option<Instant>,
}

struct Net {
    config: ShardingConfig,
    nodes: Vec<TestNode>,
    queue: VecDeque<Envelope>,
    now: Instant,
    /// Which node runs each entity.
    active: BTreeMap<EntityId, usize>,
    /// Replica traffic to and from these nodes is lost.
    replica_cut: BTreeSet<usize>,
    next_id: u64,
    /// Coordinators started so far.
    instances: u64,
    /// Messages for frozen nodes, taken in when they resume.
    held: Vec<Envelope>,
}

impl Net {
    fn new(n: usize) -> Self {
        let mut net = Self {
            config: config(),
            nodes: Vec::new(),
            queue: VecDeque::new(),
            now: base(),
            active: BTreeMap::new(),
            replica_cut: BTreeSet::new(),
            next_id: 0,
            instances: 0,
            held: Vec::new(),
        };
        for _ in 0..n {
            net.add_node();
        }
        net.membership_changed();
        net
    }

    fn add_node(&mut self) -> usize {
        let i = self.nodes.len();
        let up = u32::try_from(i).unwrap() + 1;
        self.nodes.push(TestNode {
            alive: true,
            status: MemberStatus::Up,
            up,
            version: AppVersion::default(),
            replica: Replica::new(),
            region: Region::new(self.config.clone(), node(i), true),
            shards: BTreeMap::new(),
            coordinator: None,
            delivered: Vec::new(),
            dropped: Vec::new(),
            stopped: false,
            dies_at: None,
            frozen_until: None,
        });
        i
    }

    fn members(&self) -> Vec<Member> {
        let dc: BTreeSet<String> = ["dc-default".to_owned()].into();
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.status != MemberStatus::Removed)
            .map(|(i, n)| {
                Member::from_parts(node(i), UpNumber(n.up), n.status, dc.clone(), n.version.clone())
            })
            .collect()
    }

    /// Tells every live node the membership and starts the coordinator on the oldest (the
    /// singleton's rule); the coordinator on any other node stops.
    fn membership_changed(&mut self) {
        let members = self.members();
        let oldest = oldest_candidate(&members, "default", None).map(|m| m.node().clone());
        let none = BTreeSet::new();
        for i in 0..self.nodes.len() {
            if !self.nodes[i].alive || self.nodes[i].dies_at.is_some() {
                continue;
            }
            let here = oldest.as_ref() == Some(&node(i));
            let n = &mut self.nodes[i];
            if here && n.coordinator.is_none() {
                self.instances += 1;
                let instance = self.instances;
                let mut c = Coordinator::new(
                    self.config.clone(),
                    node(i),
                    instance,
                    &members,
                    &none,
                    self.now,
                );
                c.note_departures(n.region.departures());
                n.coordinator = Some(c);
            } else if !here {
                n.coordinator = None;
            }
            if let Some(c) = &mut n.coordinator {
                c.handle_members(&members, &none, self.now);
            }
            n.region.handle_members(&members, self.now);
        }
        self.pump();
    }

    fn index(a: &UniqueAddress) -> usize {
        usize::from(a.address.port() - 2550)
    }

    /// Sends a message for `entity` from node `from`; returns its id.
    fn tell(&mut self, from: usize, entity: &str) -> u64 {
        self.next_id += 1;
        let msg = Msg { entity: entity.into(), id: self.next_id };
        let shard = shard_for_entity(entity, SHARDS);
        self.nodes[from].region.route(shard, msg, self.now);
        self.pump();
        self.next_id
    }

    fn delivered(&self, id: u64) -> bool {
        self.nodes.iter().any(|n| n.delivered.contains(&id))
    }

    /// Runs every machine's outputs and the network until nothing moves.
    fn pump(&mut self) {
        for _ in 0..100_000 {
            let mut moved = false;
            for i in 0..self.nodes.len() {
                moved |= self.drain(i);
            }
            if let Some(e) = self.queue.pop_front() {
                self.deliver(e);
                moved = true;
            }
            if !moved {
                return;
            }
        }
        panic!("the network never went quiet");
    }

    fn drain(&mut self, i: usize) -> bool {
        if !self.nodes[i].alive {
            return false;
        }
        let mut moved = false;
        while let Some(out) = self.nodes[i].coordinator.as_mut().and_then(Coordinator::poll_output)
        {
            moved = true;
            match out {
                CoordinatorOutput::ToRegion { to, msg } => {
                    self.queue.push_back(Envelope::ToRegion(i, Self::index(&to), msg));
                }
                CoordinatorOutput::ToReplica { to, msg } => {
                    self.queue.push_back(Envelope::ToReplica(i, Self::index(&to), msg));
                }
            }
        }
        while let Some(out) = self.nodes[i].region.poll_output() {
            moved = true;
            let now = self.now;
            match out {
                RegionOutput::ToCoordinator { to, msg } => {
                    self.queue.push_back(Envelope::ToCoordinator(i, Self::index(&to), msg));
                }
                RegionOutput::Forward { to, shard, msg } => {
                    self.queue.push_back(Envelope::Forward(i, Self::index(&to), shard, msg));
                }
                RegionOutput::Deliver { shard, msg } => {
                    let s =
                        self.nodes[i].shards.get_mut(&shard).expect("delivered to a started shard");
                    s.deliver(msg.entity.clone(), msg, now);
                }
                RegionOutput::StartShard(shard) => {
                    let s = Shard::new(shard.clone(), &self.config);
                    assert!(self.nodes[i].shards.insert(shard, s).is_none(), "shard started twice");
                }
                RegionOutput::HandOffShard(shard) => {
                    self.nodes[i].shards.get_mut(&shard).unwrap().hand_off();
                }
                RegionOutput::Dropped { msg, reason } => {
                    self.nodes[i].dropped.push((msg.id, reason))
                }
                RegionOutput::Stopped => self.nodes[i].stopped = true,
            }
        }
        let ids: Vec<ShardId> = self.nodes[i].shards.keys().cloned().collect();
        for id in ids {
            while let Some(out) = self.nodes[i].shards.get_mut(&id).and_then(Shard::poll_output) {
                moved = true;
                match out {
                    ShardOutput::StartEntity(e) => {
                        if let Some(other) = self.active.insert(e.clone(), i) {
                            panic!("entity {e} started on node {i} while active on node {other}");
                        }
                    }
                    ShardOutput::Deliver { msg, .. } => self.nodes[i].delivered.push(msg.id),
                    ShardOutput::StopEntity(e) => {
                        self.active.remove(&e);
                        let now = self.now;
                        self.nodes[i].shards.get_mut(&id).unwrap().entity_stopped(&e, now);
                    }
                    ShardOutput::Dropped { msg, reason } => {
                        self.nodes[i].dropped.push((msg.id, reason))
                    }
                    ShardOutput::Stopped => {
                        self.nodes[i].shards.remove(&id);
                        self.nodes[i].region.shard_stopped(id.clone());
                    }
                    // This model does not remember entities.
                    ShardOutput::Remember(_) | ShardOutput::Forget(_) => {}
                }
            }
        }
        moved
    }

    fn addressee(e: &Envelope) -> usize {
        match e {
            Envelope::ToRegion(_, t, _)
            | Envelope::ToCoordinator(_, t, _)
            | Envelope::ToReplica(_, t, _)
            | Envelope::ReplicaReply(_, t, _)
            | Envelope::Forward(_, t, _, _) => *t,
        }
    }

    fn deliver(&mut self, e: Envelope) {
        let now = self.now;
        let (from, to) = match &e {
            Envelope::ToRegion(f, t, _)
            | Envelope::ToCoordinator(f, t, _)
            | Envelope::ToReplica(f, t, _)
            | Envelope::ReplicaReply(f, t, _)
            | Envelope::Forward(f, t, _, _) => (*f, *t),
        };
        let (f, t) = (&self.nodes[from], &self.nodes[to]);
        if !t.alive || !f.alive || f.dies_at.is_some() != t.dies_at.is_some() {
            return;
        }
        if t.frozen_until.is_some() {
            self.held.push(e);
            return;
        }
        let replica_traffic = matches!(e, Envelope::ToReplica(..) | Envelope::ReplicaReply(..));
        if replica_traffic && (self.replica_cut.contains(&from) || self.replica_cut.contains(&to)) {
            return;
        }
        let n = &mut self.nodes[to];
        match e {
            Envelope::ToRegion(_, _, msg) => n.region.handle_message(node(from), msg, now),
            Envelope::ToCoordinator(_, _, msg) => {
                if let Some(c) = &mut n.coordinator {
                    c.handle_region_msg(node(from), msg, now);
                }
            }
            Envelope::ToReplica(_, _, msg) => {
                if let Some(reply) = n.replica.handle(msg) {
                    self.queue.push_back(Envelope::ReplicaReply(to, from, reply));
                }
            }
            Envelope::ReplicaReply(_, _, msg) => {
                if let Some(c) = &mut n.coordinator {
                    c.handle_replica_msg(node(from), msg, now);
                }
            }
            Envelope::Forward(_, _, shard, msg) => n.region.route(shard, msg, now),
        }
    }

    /// Moves virtual time forward by `d`, firing every deadline on the way.
    fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        loop {
            let next = self
                .nodes
                .iter()
                .filter(|n| n.alive)
                .flat_map(|n| {
                    if n.frozen_until.is_some() {
                        return [n.frozen_until, None, None, n.dies_at];
                    }
                    let c = n.coordinator.as_ref().and_then(Coordinator::poll_timeout);
                    let s = n.shards.values().filter_map(Shard::poll_timeout).min();
                    [c, n.region.poll_timeout(), s, n.dies_at]
                })
                .flatten()
                .min();
            let Some(at) = next.filter(|at| *at <= end) else { break };
            self.now = self.now.max(at);
            let now = self.now;
            for i in 0..self.nodes.len() {
                if self.nodes[i].alive && self.nodes[i].dies_at.is_some_and(|t| t <= now) {
                    self.nodes[i].alive = false;
                    self.active.retain(|_, n| *n != i);
                }
                if self.nodes[i].frozen_until.is_some_and(|t| t <= now) {
                    self.nodes[i].frozen_until = None;
                    let (waiting, others) = std::mem::take(&mut self.held)
                        .into_iter()
                        .partition(|e| Self::addressee(e) == i);
                    self.held = others;
                    self.queue.extend(waiting);
                }
            }
            for n in self.nodes.iter_mut().filter(|n| n.alive && n.frozen_until.is_none()) {
                if let Some(c) = &mut n.coordinator
                    && c.poll_timeout().is_some_and(|t| t <= now)
                {
                    c.handle_timeout(now);
                }
                if n.region.poll_timeout().is_some_and(|t| t <= now) {
                    n.region.handle_timeout(now);
                }
                for s in n.shards.values_mut() {
                    if s.poll_timeout().is_some_and(|t| t <= now) {
                        s.handle_timeout(now);
                    }
                }
            }
            self.pump();
        }
        self.now = end;
    }

    /// Node `i` crashes: its entities die with it; the others remove it from the membership.
    fn crash(&mut self, i: usize) {
        self.nodes[i].alive = false;
        self.active.retain(|_, n| *n != i);
        self.nodes[i].status = MemberStatus::Removed;
        self.membership_changed();
    }

    /// Node `i` is cut off: the others remove it at once; it goes on running its entities for
    /// `lives_on` (the time it takes to down itself) and then stops.
    fn cut(&mut self, i: usize, lives_on: Duration) {
        self.nodes[i].dies_at = Some(self.now + lives_on);
        self.nodes[i].status = MemberStatus::Removed;
        self.membership_changed();
    }

    /// Every replica loses the table, as when most of them restart at once.
    fn lose_table(&mut self) {
        for n in &mut self.nodes {
            n.replica = Replica::new();
        }
    }

    /// The singleton restarts on node 0, where it ran (as after a freeze): a new coordinator
    /// there, which regions cannot tell from the membership.
    fn restart_coordinator_on_node_0(&mut self) {
        self.instances += 1;
        let members = self.members();
        let (config, instance, now) = (self.config.clone(), self.instances, self.now);
        let c = Coordinator::new(config, node(0), instance, &members, &BTreeSet::new(), now);
        self.nodes[0].coordinator = Some(c);
        self.pump();
    }

    /// An entity whose shard lives on a node that `host` accepts, found by sending to entities
    /// from node 0.
    fn entity_hosted(&mut self, host: impl Fn(usize) -> bool) -> String {
        entities(50)
            .into_iter()
            .find(|e| {
                self.tell(0, e);
                self.home_of(e).is_some_and(&host)
            })
            .unwrap()
    }

    fn coordinator(&self) -> Option<&Coordinator> {
        self.nodes
            .iter()
            .filter(|n| n.alive && n.dies_at.is_none())
            .find_map(|n| n.coordinator.as_ref())
    }

    /// Live members that host shards and are not shutting down.
    fn serving(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| {
                let n = &self.nodes[i];
                n.alive
                    && n.dies_at.is_none()
                    && !n.region.status().shutting_down
                    && n.status == MemberStatus::Up
            })
            .collect()
    }

    /// Shards hosted by each live node.
    fn counts(&self) -> Vec<usize> {
        self.serving().into_iter().map(|i| self.nodes[i].shards.len()).collect()
    }

    fn home_of(&self, entity: &str) -> Option<usize> {
        self.active.get(entity).copied()
    }
}

fn entities(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("e-{i}")).collect()
}

#[test]
fn the_first_message_to_a_new_shard_allocates_it_and_reaches_its_entity() {
    let mut net = Net::new(3);
    net.advance(Duration::from_secs(1));
    let id = net.tell(2, "alice");
    assert!(net.delivered(id));
    let home = net.home_of("alice").expect("alice runs somewhere");
    let shard = shard_for_entity("alice", SHARDS);
    let c = net.coordinator().unwrap();
    assert_eq!(c.state().home(&shard), Some(&node(home)));
    assert_eq!(c.status().phase, "active");
    // Every region that asked caches the home; the next message goes straight there.
    assert_eq!(net.nodes[2].region.home(&shard), Some(&node(home)));
    let id = net.tell(1, "alice");
    assert!(net.delivered(id));
}

#[test]
fn every_message_is_delivered_and_shards_spread_evenly() {
    let mut net = Net::new(3);
    net.advance(Duration::from_secs(1));
    let mut ids = Vec::new();
    for (k, e) in entities(200).iter().enumerate() {
        ids.push(net.tell(k % 3, e));
    }
    assert!(ids.iter().all(|id| net.delivered(*id)));
    let counts = net.counts();
    assert_eq!(counts.iter().sum::<usize>(), SHARDS as usize);
    assert!(counts.iter().all(|&c| c == 4), "{counts:?}");
}

#[test]
fn no_region_hears_of_an_allocation_before_a_majority_has_written_it() {
    let mut net = Net::new(3);
    net.advance(Duration::from_secs(1));
    net.replica_cut = [1, 2].into();
    let id = net.tell(1, "bob");
    net.advance(Duration::from_secs(10));
    assert!(!net.delivered(id), "delivered with only the coordinator's own replica written");
    assert!(net.nodes.iter().all(|n| n.shards.is_empty()));
    net.replica_cut.clear();
    net.advance(Duration::from_secs(3));
    assert!(net.delivered(id));
}

#[test]
fn a_new_coordinator_recovers_the_table_and_moves_no_shard_with_a_live_home() {
    let mut net = Net::new(4);
    net.advance(Duration::from_secs(1));
    for (k, e) in entities(100).iter().enumerate() {
        net.tell(k % 4, e);
    }
    let before: BTreeMap<ShardId, UniqueAddress> = net
        .coordinator()
        .unwrap()
        .state()
        .allocations()
        .map(|(s, r)| (s.clone(), r.clone()))
        .collect();
    assert_eq!(before.len(), SHARDS as usize);
    assert!(net.nodes[0].coordinator.is_some());
    net.crash(0);
    assert!(net.nodes[1].coordinator.is_some(), "the next oldest runs the coordinator");

    // Shards with a live home keep answering, through the homes the regions already know.
    for (k, e) in entities(100).iter().enumerate() {
        let shard = shard_for_entity(e, SHARDS);
        if before[&shard] != node(0) {
            let id = net.tell(1 + k % 3, e);
            assert!(net.delivered(id), "{e} on a live node did not answer");
        }
    }
    // The new coordinator starts from the written table, not from nothing.
    net.advance(Duration::from_secs(3));
    let after = net.coordinator().unwrap().state();
    for (s, r) in &before {
        if *r != node(0) {
            assert_eq!(after.home(s), Some(r), "{s:?} moved");
        }
    }
    // The crashed node's shards come back on the survivors once the removal margin is over.
    let lost: Vec<String> = entities(100)
        .into_iter()
        .filter(|e| before[&shard_for_entity(e, SHARDS)] == node(0))
        .collect();
    assert!(!lost.is_empty());
    let ids: Vec<u64> = lost.iter().map(|e| net.tell(1, e)).collect();
    net.advance(Duration::from_secs(10));
    assert!(ids.iter().all(|id| !net.delivered(*id)), "moved before the removal margin");
    net.advance(Duration::from_secs(15));
    assert!(ids.iter().all(|id| net.delivered(*id)), "not moved after the removal margin");
    let after = net.coordinator().unwrap().state();
    for (s, r) in &before {
        if *r != node(0) {
            assert_eq!(after.home(s), Some(r), "{s:?} moved");
        }
    }
    assert!(after.is_consistent());
}

/// Hands every message from `c` to the replicas of `net` and `c` the answers, until quiet.
fn exchange_with_replicas(net: &mut Net, c: &mut Coordinator) {
    while let Some(out) = c.poll_output() {
        if let CoordinatorOutput::ToReplica { to, msg } = out {
            let i = Net::index(&to);
            if let Some(reply) = net.nodes[i].replica.handle(msg) {
                c.handle_replica_msg(node(i), reply, net.now);
            }
        }
    }
}

#[test]
fn a_coordinator_superseded_by_a_newer_one_reads_the_replicas_again_before_it_acts() {
    let mut net = Net::new(3);
    net.advance(Duration::from_secs(1));
    net.tell(1, "carol");
    // A second coordinator (as if node 0 were frozen and node 1 took over) reads the replicas
    // and writes the table again under its ballot.
    let members = net.members();
    let mut rival =
        Coordinator::new(net.config.clone(), node(1), 99, &members, &BTreeSet::new(), net.now);
    exchange_with_replicas(&mut net, &mut rival);
    assert_eq!(rival.status().phase, "active");
    assert_eq!(rival.state().num_shards(), 1, "the rival recovered carol's shard");

    // The old coordinator's next allocation is refused; it reads again, finds carol's shard
    // where it was, and only then allocates dave's.
    assert_ne!(shard_for_entity("dave", SHARDS), shard_for_entity("carol", SHARDS));
    let carol_home = net.home_of("carol").unwrap();
    let id = net.tell(2, "dave");
    net.advance(Duration::from_secs(5));
    let c = net.coordinator().unwrap();
    assert_eq!(c.status().superseded, 1);
    assert_eq!(c.status().phase, "active");
    assert!(net.delivered(id));
    assert_eq!(net.home_of("carol"), Some(carol_home));

    // Now the rival is the stale one: its next write is refused in turn.
    for i in 0..3 {
        let hosted = net.nodes[i].shards.keys().cloned().collect();
        rival.handle_region_msg(node(i), CoordinatorMsg::Register { hosted }, net.now);
    }
    rival.handle_region_msg(node(1), CoordinatorMsg::GetShardHome("x".into()), net.now);
    exchange_with_replicas(&mut net, &mut rival);
    assert_eq!(rival.status().superseded, 1);
    assert!(rival.state().home(&"x".into()).is_none());
}

#[test]
fn a_coordinator_whose_table_lost_a_shard_takes_it_back_from_the_region_that_hosts_it() {
    let mut net = Net::new(3);
    net.advance(Duration::from_secs(1));
    let name = net.entity_hosted(|h| h != 0);
    let host = net.home_of(&name).unwrap();
    // Every replica loses the table (the host's too, as if the write had reached only the
    // others), then the two other nodes crash: the host's new coordinator starts empty.
    net.lose_table();
    for i in (0..3).filter(|i| *i != host) {
        net.nodes[i].alive = false;
        net.nodes[i].status = MemberStatus::Removed;
    }
    net.membership_changed();
    for _ in 0..2 {
        net.add_node();
    }
    net.membership_changed();
    net.advance(Duration::from_secs(5));
    // The host listed the shard when it registered: the table has it back.
    let shard = shard_for_entity(&name, SHARDS);
    let c = net.coordinator().unwrap();
    assert_eq!(c.status().phase, "active");
    assert_eq!(c.state().home(&shard), Some(&node(host)));
    // A new node asks for the entity: it is still served by the host, and nothing started it
    // elsewhere (the harness fails on a second start).
    let id = net.tell(4, &name);
    net.advance(Duration::from_secs(5));
    assert!(net.delivered(id));
    assert_eq!(net.home_of(&name), Some(host));
}

#[test]
fn a_coordinator_restarted_on_the_same_node_has_every_region_register_again() {
    let mut net = Net::new(3);
    net.advance(Duration::from_secs(1));
    let name = net.entity_hosted(|h| h != 0);
    let host = net.home_of(&name).unwrap();
    // The table is lost and the singleton restarts on the same node: the regions see no change
    // of coordinator in the membership, yet the new one must hear what they host.
    net.lose_table();
    net.restart_coordinator_on_node_0();
    // Well within the removal margin, after which a silent region no longer holds allocation.
    net.advance(Duration::from_secs(5));
    let shard = shard_for_entity(&name, SHARDS);
    assert_eq!(net.coordinator().unwrap().state().home(&shard), Some(&node(host)));
    let id = net.tell(0, &name);
    net.advance(Duration::from_secs(1));
    assert!(net.delivered(id));
    assert_eq!(net.home_of(&name), Some(host));
}

/// Node 2 hosts an entity and goes without handing off (cut off and removed, or first downed
/// and removed `removed_after` later); it stops its entities only 19 s after it was cut off.
/// Node 0 then leaves gracefully, and the table is lost just before the coordinator moves to
/// node 1, whose region saw node 2 go. A message sent through node 1 reaches the entity only
/// once the removal margin since node 2's removal has passed, and then on node 1.
fn lost_shard_after_a_departure(net: &mut Net, removed_after: Option<Duration>) {
    net.advance(Duration::from_secs(1));
    let name = net.entity_hosted(|h| h == 2);
    let cut_at = net.now;
    net.nodes[2].dies_at = Some(cut_at + Duration::from_secs(19));
    net.nodes[2].status =
        if removed_after.is_some() { MemberStatus::Down } else { MemberStatus::Removed };
    net.membership_changed();
    let mut margin_from = cut_at;
    if let Some(after) = removed_after {
        net.advance(after);
        net.nodes[2].status = MemberStatus::Removed;
        net.membership_changed();
        margin_from = net.now;
    }
    let now = net.now;
    net.nodes[0].region.graceful_shutdown(now);
    net.pump();
    net.advance(Duration::from_secs(2));
    assert!(net.nodes[0].region.status().stopped);
    net.lose_table();
    net.nodes[0].status = MemberStatus::Exiting;
    net.membership_changed();
    net.nodes[0].status = MemberStatus::Removed;
    net.nodes[0].alive = false;
    net.membership_changed();
    assert!(net.nodes[1].coordinator.is_some());
    let id = net.tell(1, &name);
    // The harness panics if the entity starts on node 1 while node 2 still runs it.
    net.advance(margin_from + Duration::from_millis(18_500) - net.now);
    assert!(!net.delivered(id), "allocated within the removal margin of node 2's removal");
    // Once the margin since the removal has passed, the shard is allocated to node 1.
    net.advance(Duration::from_secs(3));
    assert!(net.delivered(id));
    assert_eq!(net.home_of(&name), Some(1));
}

/// The host of a shard is cut off and frozen shortly before it would have downed itself; the
/// others remove it at once. It resumes after 15 s, less than the 20 s removal margin, still
/// seeing itself Up, and its resolver, which waits `stable_after` for word from a member after a
/// long pause, downs it only 10 s later: past the margin, when the others already host its
/// shard. Its region must stop the shard when it resumes, not when the node goes.
#[test]
fn a_region_frozen_for_less_than_the_margin_stops_its_shards_as_it_resumes() {
    let mut net = Net::new(3);
    net.advance(Duration::from_secs(1));
    let name = net.entity_hosted(|h| h == 2);
    let frozen = Duration::from_secs(15);
    net.nodes[2].frozen_until = Some(net.now + frozen);
    net.cut(2, frozen + Duration::from_secs(10));
    let id = net.tell(1, &name);
    // The harness panics if the entity starts on node 0 or 1 while node 2 still runs it.
    net.advance(frozen + Duration::from_secs(10));
    assert!(net.delivered(id));
    assert!(matches!(net.home_of(&name), Some(0 | 1)));
}

/// A member frozen for a moment, and not removed meanwhile, cannot tell that from a long freeze:
/// it stops its shards as it resumes and hosts them again once a removal margin has passed;
/// messages for them wait in its region until then.
#[test]
fn a_region_hosts_again_a_removal_margin_after_a_freeze() {
    let mut net = Net::new(3);
    net.advance(Duration::from_secs(1));
    let name = net.entity_hosted(|h| h == 2);
    let retry = net.config.retry_interval;
    net.nodes[2].frozen_until = Some(net.now + retry * 3);
    net.advance(retry * 3);
    assert_eq!(net.home_of(&name), None, "stopped as it resumed");
    let id = net.tell(0, &name);
    net.advance(net.config.removal_margin - Duration::from_secs(1));
    assert!(!net.delivered(id), "no shard starts within a removal margin of the freeze");
    net.advance(retry * 2);
    assert!(net.delivered(id));
    assert_eq!(net.home_of(&name), Some(2));
}

#[test]
fn a_region_that_missed_the_request_to_register_again_is_asked_again() {
    let mut net = Net::new(3);
    net.advance(Duration::from_secs(1));
    let name = net.entity_hosted(|h| h == 2);
    // The table is lost and the coordinator restarts on the same node while everything sent to
    // node 2 is lost (node 2 stays a member and keeps its entities).
    net.lose_table();
    net.nodes[2].alive = false;
    net.restart_coordinator_on_node_0();
    net.advance(Duration::from_millis(500));
    assert_eq!(net.coordinator().unwrap().status().phase, "active");
    net.nodes[2].alive = true;
    // Past the removal margin, after which a silent member no longer holds allocation up: node
    // 2 has registered again in the meantime and its shard stayed there.
    net.advance(Duration::from_secs(25));
    let shard = shard_for_entity(&name, SHARDS);
    assert_eq!(net.coordinator().unwrap().state().home(&shard), Some(&node(2)));
    let id = net.tell(0, &name);
    net.advance(Duration::from_secs(1));
    assert!(net.delivered(id));
    assert_eq!(net.home_of(&name), Some(2));
}

#[test]
fn a_coordinator_says_whether_changes_wait_to_be_written() {
    let mut net = Net::new(3);
    net.advance(Duration::from_secs(1));
    assert!(!net.coordinator().unwrap().has_unwritten_changes());
    // Two of three replicas out of reach: an allocation cannot reach a majority.
    net.replica_cut.extend([1, 2]);
    let id = net.tell(0, &entities(1)[0]);
    assert!(net.coordinator().unwrap().has_unwritten_changes());
    assert!(!net.delivered(id));
    net.replica_cut.clear();
    net.advance(Duration::from_secs(3));
    assert!(net.delivered(id));
    assert!(!net.coordinator().unwrap().has_unwritten_changes());
}

#[test]
fn a_stopping_coordinator_finishes_its_write_and_takes_on_nothing_new() {
    let mut net = Net::new(3);
    net.advance(Duration::from_secs(1));
    let names = entities(50);
    let first = names[0].clone();
    let shard = |e: &String| shard_for_entity(e, SHARDS);
    let second = names.iter().find(|e| shard(e) != shard(&first)).unwrap().clone();
    // The first allocation waits for a majority when the singleton asks the coordinator to
    // stop; a message for another new shard comes after.
    net.replica_cut.extend([1, 2]);
    let a = net.tell(0, &first);
    net.nodes[0].coordinator.as_mut().unwrap().begin_stop();
    let b = net.tell(0, &second);
    assert!(net.coordinator().unwrap().has_unwritten_changes());
    net.replica_cut.clear();
    net.advance(Duration::from_secs(30));
    let c = net.coordinator().unwrap();
    assert!(!c.has_unwritten_changes());
    assert!(net.delivered(a));
    assert!(!net.delivered(b));
    assert!(c.state().home(&shard(&second)).is_none());
}

#[test]
fn a_coordinator_started_after_a_removal_waits_the_margin_before_allocating_a_lost_shard() {
    let mut net = Net::new(3);
    lost_shard_after_a_departure(&mut net, None);
}

#[test]
fn a_downed_member_holds_allocation_until_a_margin_after_its_removal() {
    let mut net = Net::new(3);
    // Node 2 is downed 5 s before its removal: a margin from the down is not enough.
    lost_shard_after_a_departure(&mut net, Some(Duration::from_secs(5)));
}

#[test]
fn a_region_that_has_stopped_does_not_hold_up_a_restarted_coordinator() {
    let mut net = Net::new(3);
    net.advance(Duration::from_secs(1));
    for e in entities(5) {
        net.tell(0, &e);
    }
    // Node 2 is leaving and its region has stopped.
    let now = net.now;
    net.nodes[2].region.graceful_shutdown(now);
    net.pump();
    net.advance(Duration::from_secs(2));
    assert!(net.nodes[2].region.status().stopped);
    net.nodes[2].status = MemberStatus::Leaving;
    net.membership_changed();
    // The coordinator restarts on the same node; an entity of a shard never allocated.
    net.restart_coordinator_on_node_0();
    let table = net.coordinator().unwrap().state().clone();
    let name = entities(200)
        .into_iter()
        .find(|e| table.home(&shard_for_entity(e, SHARDS)).is_none())
        .unwrap();
    let id = net.tell(1, &name);
    // Well within the removal margin, which is how long a silent leaving member would hold it.
    net.advance(Duration::from_secs(2));
    assert!(net.delivered(id));
}

#[test]
fn a_joining_node_gets_shards_by_rebalancing_and_counts_even_out() {
    let mut net = Net::new(2);
    net.advance(Duration::from_secs(1));
    let names = entities(300);
    for (k, e) in names.iter().enumerate() {
        net.tell(k % 2, e);
    }
    assert_eq!(net.counts(), [6, 6]);
    net.add_node();
    net.membership_changed();
    net.advance(Duration::from_secs(60));
    let counts = net.counts();
    assert_eq!(counts, [4, 4, 4]);
    // Every entity still answers, from wherever its shard went.
    let ids: Vec<u64> = names.iter().enumerate().map(|(k, e)| net.tell(k % 3, e)).collect();
    assert!(ids.iter().all(|id| net.delivered(*id)));
}

#[test]
fn a_region_shutting_down_hands_every_shard_off_and_then_stops() {
    let mut net = Net::new(3);
    net.advance(Duration::from_secs(1));
    let names = entities(100);
    for (k, e) in names.iter().enumerate() {
        net.tell(k % 3, e);
    }
    let now = net.now;
    net.nodes[2].region.graceful_shutdown(now);
    net.pump();
    net.advance(Duration::from_secs(5));
    assert!(net.nodes[2].stopped, "{:?}", net.nodes[2].region.status());
    assert_eq!(net.counts().iter().sum::<usize>(), SHARDS as usize);
    assert!(net.active.values().all(|&n| n != 2));
    let ids: Vec<u64> = names.iter().enumerate().map(|(k, e)| net.tell(k % 2, e)).collect();
    assert!(ids.iter().all(|id| net.delivered(*id)));
}

#[test]
fn a_full_buffer_refuses_the_next_message_with_a_typed_reason() {
    let mut net = Net::new(1);
    net.config.buffer_size = 3;
    net.nodes[0].region = Region::new(net.config.clone(), node(0), true);
    // No membership yet: no coordinator, every message waits.
    let mut r: Region<u32> = Region::new(net.config.clone(), node(0), true);
    for k in 0..4 {
        r.route(ShardId::from("1"), k, net.now);
    }
    let outs: Vec<RegionOutput<u32>> = std::iter::from_fn(|| r.poll_output()).collect();
    assert_eq!(outs, [RegionOutput::Dropped { msg: 3, reason: DropReason::BufferFull }]);
    assert_eq!(r.status().buffered, 3);
}

#[test]
fn an_idle_entity_is_passivated_and_starts_again_on_its_next_message() {
    let mut c = config();
    c.passivate_idle_after = Some(Duration::from_secs(120));
    let mut s: Shard<u32> = Shard::new("1".into(), &c);
    let t0 = base();
    let e: EntityId = Arc::from("x");
    s.deliver(e.clone(), 1, t0);
    let outs: Vec<_> = std::iter::from_fn(|| s.poll_output()).collect();
    assert_eq!(
        outs,
        [ShardOutput::StartEntity(e.clone()), ShardOutput::Deliver { entity: e.clone(), msg: 1 }]
    );
    s.handle_timeout(t0 + Duration::from_secs(60));
    assert_eq!(s.poll_output(), None, "not idle long enough yet");
    s.handle_timeout(t0 + Duration::from_secs(120));
    assert_eq!(s.poll_output(), Some(ShardOutput::StopEntity(e.clone())));
    // A message while it stops waits, and starts it again once it has stopped.
    s.deliver(e.clone(), 2, t0 + Duration::from_secs(121));
    assert_eq!(s.poll_output(), None);
    s.entity_stopped(&e, t0 + Duration::from_secs(122));
    let outs: Vec<_> = std::iter::from_fn(|| s.poll_output()).collect();
    assert_eq!(
        outs,
        [ShardOutput::StartEntity(e.clone()), ShardOutput::Deliver { entity: e, msg: 2 }]
    );
}

#[test]
fn an_entity_that_passivates_itself_stops_and_the_handoff_waits_for_every_entity() {
    let c = config();
    let mut s: Shard<u32> = Shard::new("1".into(), &c);
    let t0 = base();
    let (a, b): (EntityId, EntityId) = (Arc::from("a"), Arc::from("b"));
    s.deliver(a.clone(), 1, t0);
    s.deliver(b.clone(), 2, t0);
    while s.poll_output().is_some() {}
    s.passivate(&a);
    assert_eq!(s.poll_output(), Some(ShardOutput::StopEntity(a.clone())));
    s.hand_off();
    assert_eq!(s.poll_output(), Some(ShardOutput::StopEntity(b.clone())));
    s.deliver(a.clone(), 3, t0);
    assert_eq!(
        s.poll_output(),
        Some(ShardOutput::Dropped { msg: 3, reason: DropReason::HandedOff })
    );
    s.entity_stopped(&a, t0);
    assert_eq!(s.poll_output(), None, "b still runs");
    s.entity_stopped(&b, t0);
    assert_eq!(s.poll_output(), Some(ShardOutput::Stopped));
    assert!(s.is_stopped());
}

fn remembering_shard() -> Shard<u32> {
    let mut c = config();
    c.remember_entities = true;
    c.passivate_idle_after = Some(Duration::from_secs(1));
    Shard::new("1".into(), &c)
}

fn drain(s: &mut Shard<u32>) -> Vec<ShardOutput<u32>> {
    std::iter::from_fn(|| s.poll_output()).collect()
}

#[test]
fn a_remembering_shard_remembers_started_entities_forgets_passivated_ones_and_keeps_handed_off_ones()
 {
    let mut s = remembering_shard();
    let t0 = base();
    let (a, b, c): (EntityId, EntityId, EntityId) = ("a".into(), "b".into(), "c".into());
    s.start_remembered([a.clone()], t0);
    assert_eq!(drain(&mut s), [ShardOutput::StartEntity(a.clone())], "started, no message");
    s.deliver(b.clone(), 1, t0);
    s.deliver(c.clone(), 2, t0);
    let outs = drain(&mut s);
    assert_eq!(outs[0], ShardOutput::Remember(b.clone()));
    assert!(outs.contains(&ShardOutput::Remember(c.clone())));
    assert!(!outs.contains(&ShardOutput::Remember(a.clone())), "a is remembered already");
    // Never idle-passivated.
    s.handle_timeout(t0 + Duration::from_secs(3600));
    assert_eq!(drain(&mut s), []);
    // b passivates, but a message waits for it: it starts again and stays remembered.
    s.passivate(&b);
    s.deliver(b.clone(), 3, t0);
    s.entity_stopped(&b, t0);
    assert_eq!(
        drain(&mut s),
        [
            ShardOutput::StopEntity(b.clone()),
            ShardOutput::StartEntity(b.clone()),
            ShardOutput::Deliver { entity: b.clone(), msg: 3 }
        ]
    );
    // c passivates with nothing waiting: forgotten.
    s.passivate(&c);
    s.entity_stopped(&c, t0);
    assert_eq!(drain(&mut s), [ShardOutput::StopEntity(c.clone()), ShardOutput::Forget(c)]);
    // A handoff stops a and b without forgetting them.
    s.hand_off();
    s.entity_stopped(&a, t0);
    s.entity_stopped(&b, t0);
    let outs = drain(&mut s);
    assert!(outs.iter().all(|o| !matches!(o, ShardOutput::Forget(_))), "{outs:?}");
    assert_eq!(outs.last(), Some(&ShardOutput::Stopped));
    let left: Vec<&EntityId> = s.remembered().collect();
    assert_eq!(left, [&a, &b]);
}

#[test]
fn a_remembering_shard_forgets_an_entity_that_fails_and_skips_what_it_forgot_before_the_set_came() {
    let mut s = remembering_shard();
    let t0 = base();
    let (a, b): (EntityId, EntityId) = ("a".into(), "b".into());
    // a starts on a message before the remembered set is read, then passivates.
    s.deliver(a.clone(), 1, t0);
    s.passivate(&a);
    s.entity_stopped(&a, t0);
    assert_eq!(drain(&mut s).last(), Some(&ShardOutput::Forget(a.clone())));
    // The set read before that forget still lists a: it is not started again.
    s.start_remembered([a.clone(), b.clone()], t0);
    assert_eq!(drain(&mut s), [ShardOutput::StartEntity(b.clone())]);
    // A second answer to the read changes nothing.
    s.start_remembered([a.clone()], t0);
    assert_eq!(drain(&mut s), []);
    // b ends on its own (it failed): it no longer runs, so it is forgotten.
    s.entity_stopped(&b, t0);
    assert_eq!(drain(&mut s), [ShardOutput::Forget(b)]);
    assert!(s.is_loaded());
}

#[derive(Clone, Debug)]
enum Op {
    Tell { from: usize, entity: u8 },
    Advance { secs: u8 },
    Join,
    Shutdown { who: usize },
    Crash { who: usize },
    Cut { who: usize },
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        6 => (0usize..8, 0u8..60).prop_map(|(from, entity)| Op::Tell { from, entity }),
        4 => (1u8..30).prop_map(|secs| Op::Advance { secs }),
        1 => Just(Op::Join),
        1 => (0usize..8).prop_map(|who| Op::Shutdown { who }),
        1 => (0usize..8).prop_map(|who| Op::Crash { who }),
        1 => (0usize..8).prop_map(|who| Op::Cut { who }),
    ]
}

/// Runs `ops` from three nodes, then a calm phase; `Err` names the broken promise.
fn run(ops: Vec<Op>) -> Result<Net, String> {
    let mut net = Net::new(3);
    net.advance(Duration::from_secs(1));
    for op in ops {
        let serving = net.serving();
        match op {
            Op::Tell { from, entity } => {
                let from = serving[from % serving.len()];
                net.tell(from, &format!("e-{entity}"));
            }
            Op::Advance { secs } => net.advance(Duration::from_secs(secs.into())),
            Op::Join => {
                if net.nodes.len() < 7 {
                    net.add_node();
                    net.membership_changed();
                }
            }
            Op::Shutdown { who } if serving.len() > 2 => {
                let who = serving[who % serving.len()];
                let now = net.now;
                net.nodes[who].region.graceful_shutdown(now);
                net.pump();
            }
            Op::Crash { who } if serving.len() > 2 => net.crash(serving[who % serving.len()]),
            Op::Cut { who } if serving.len() > 2 => {
                net.cut(serving[who % serving.len()], Duration::from_secs(15));
            }
            Op::Shutdown { .. } | Op::Crash { .. } | Op::Cut { .. } => {}
        }
        // A region that has handed everything off leaves the cluster.
        let done: Vec<usize> =
            (0..net.nodes.len()).filter(|&i| net.nodes[i].stopped && net.nodes[i].alive).collect();
        for i in done {
            net.nodes[i].alive = false;
            net.nodes[i].status = MemberStatus::Removed;
            net.membership_changed();
        }
    }
    // Calm: no more faults; the removal margin and a few rebalance rounds pass.
    net.advance(Duration::from_secs(120));
    let serving = net.serving();
    let ids: Vec<u64> = (0..60u8)
        .map(|e| net.tell(serving[usize::from(e) % serving.len()], &format!("e-{e}")))
        .collect();
    net.advance(Duration::from_secs(10));
    for id in ids {
        if !net.delivered(id) {
            return Err(format!("message {id} was not delivered"));
        }
    }
    net.advance(Duration::from_secs(120));
    let counts = net.counts();
    let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
    if max - min > 1 {
        return Err(format!("shard counts {counts:?}"));
    }
    if !net.coordinator().unwrap().state().is_consistent() {
        return Err("the coordinator's table is inconsistent".to_owned());
    }
    Ok(net)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Through joins, graceful shutdowns, crashes and partitions (the cut-off node runs on for
    /// less than the removal margin), no entity ever runs on two nodes at once (the harness
    /// panics on the second start); once the membership is calm again every message is
    /// delivered and the shard counts of any two regions differ by at most one.
    #[test]
    fn entities_run_once_and_everything_answers_once_calm(
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        if let Err(e) = run(ops) {
            proptest::prop_assert!(false, "{}", e);
        }
    }
}

/// A region shut down while its shard was allocated to it but not yet started, and stopped while
/// the coordinator (moved by a partition) was still reading the replicas: its RegionStopped went
/// unheard, and regions kept forwarding that shard's messages to it.
#[test]
fn a_region_that_stopped_unheard_is_forgotten_and_its_shards_go_elsewhere() {
    use Op::*;
    let t = |from, entity| Tell { from, entity };
    let ops = vec![
        t(0, 10),
        Shutdown { who: 1 },
        Advance { secs: 1 },
        t(0, 4),
        t(0, 0),
        Join,
        Join,
        Shutdown { who: 1 },
        t(0, 9),
        t(0, 22),
        Join,
        t(0, 0),
        t(0, 28),
        Cut { who: 0 },
        Shutdown { who: 2 },
        Shutdown { who: 0 },
        t(1, 6),
        t(0, 7),
        t(6, 1),
        t(0, 14),
        t(0, 3),
        t(0, 2),
    ];
    if let Err(e) = run(ops) {
        panic!("{e}");
    }
}

#[test]
fn a_coordinator_restarted_on_the_same_node_writes_tables_the_replicas_keep() {
    let mut net = Net::new(3);
    net.advance(Duration::from_secs(1));
    for e in entities(40) {
        net.tell(1, &e);
    }
    // The singleton restarts on the same node (as after a freeze).
    net.restart_coordinator_on_node_0();
    net.advance(Duration::from_secs(3));
    let now = net.now;
    net.nodes[2].region.graceful_shutdown(now);
    net.pump();
    net.advance(Duration::from_secs(5));
    let committed = net.coordinator().unwrap().state().clone();
    let holding = (0..3)
        .filter(|&i| net.nodes[i].replica.accepted().is_some_and(|(_, t)| **t == committed))
        .count();
    assert!(holding >= 2, "only {holding} replicas hold the table the coordinator acts on");
}

#[test]
fn a_home_on_a_node_already_removed_here_is_not_taken_from_a_coordinator_that_lags() {
    let mut net = Net::new(3);
    net.advance(Duration::from_secs(1));
    for e in entities(60) {
        net.tell(0, &e);
    }
    let e = entities(60).into_iter().find(|e| net.home_of(e) == Some(2)).unwrap();
    let shard = shard_for_entity(&e, SHARDS);
    // Node 2 crashes; node 1 sees the removal before the coordinator on node 0 does.
    net.nodes[2].alive = false;
    net.active.retain(|_, n| *n != 2);
    net.nodes[2].status = MemberStatus::Removed;
    let (members, now) = (net.members(), net.now);
    net.nodes[1].region.handle_members(&members, now);
    net.tell(1, &e);
    assert_eq!(net.nodes[1].region.home(&shard), None, "took a home on a removed node");
    net.membership_changed();
    net.advance(Duration::from_secs(30));
    let id = net.tell(1, &e);
    net.advance(Duration::from_secs(5));
    assert!(net.delivered(id), "the message to {e} was lost");
}

#[test]
fn the_last_region_shutting_down_gives_back_what_no_region_can_take_and_stops() {
    let mut net = Net::new(1);
    net.advance(Duration::from_secs(1));
    net.tell(0, "a");
    let now = net.now;
    net.nodes[0].region.graceful_shutdown(now);
    let shard = shard_for_entity("zzz", SHARDS);
    net.nodes[0].region.route(shard, Msg { entity: "zzz".into(), id: 999 }, now);
    net.pump();
    net.advance(net.config.handoff_timeout + Duration::from_secs(5));
    assert!(net.nodes[0].stopped, "{:?}", net.nodes[0].region.status());
    assert!(net.nodes[0].dropped.contains(&(999, DropReason::RegionStopped)));
}

#[test]
fn a_leaving_member_takes_no_part_in_rebalancing() {
    let mut net = Net::new(2);
    net.advance(Duration::from_secs(1));
    for e in entities(300) {
        net.tell(0, &e);
    }
    let i = net.add_node();
    net.nodes[i].status = MemberStatus::Leaving;
    net.membership_changed();
    net.advance(Duration::from_secs(2));
    let before = net.coordinator().unwrap().status().version.unwrap().seq;
    let counts = net.counts();
    net.advance(Duration::from_secs(120));
    let after = net.coordinator().unwrap().status().version.unwrap().seq;
    assert_eq!(after, before, "the table was rewritten {} times", after - before);
    assert_eq!(net.counts(), counts);
}

/// Node `i`'s entities by shard, one entity for each of `shards`.
fn entity_per_shard(shards: impl IntoIterator<Item = u32>) -> Vec<String> {
    let all = entities(1000);
    shards
        .into_iter()
        .map(|k| {
            let shard = ShardId::new(k.to_string());
            all.iter().find(|e| shard_for_entity(e, SHARDS) == shard).unwrap().clone()
        })
        .collect()
}

#[test]
fn during_a_rolling_update_new_shards_go_to_the_new_version_and_nothing_is_rebalanced() {
    let mut net = Net::new(3);
    net.advance(Duration::from_secs(1));
    for e in entity_per_shard(0..6) {
        net.tell(0, &e);
    }
    assert_eq!(net.counts(), [2, 2, 2]);
    let new = net.add_node();
    net.nodes[new].version = AppVersion::parse("2.0.0");
    net.membership_changed();
    // A node of the same version would get shards by rebalancing within this time (see
    // a_joining_node_gets_shards_by_rebalancing_and_counts_even_out).
    net.advance(Duration::from_secs(60));
    assert_eq!(net.counts(), [2, 2, 2, 0], "nothing moves while versions differ");
    for (k, e) in entity_per_shard(6..12).iter().enumerate() {
        net.tell(k % 3, e);
    }
    assert_eq!(net.counts(), [2, 2, 2, 6], "every new shard goes to the new version");
    // An old node leaves: its shards drain to the new one, not to the other old ones.
    let now = net.now;
    net.nodes[0].region.graceful_shutdown(now);
    net.pump();
    net.advance(Duration::from_secs(5));
    assert!(net.nodes[0].stopped);
    assert_eq!(net.counts(), [2, 2, 8]);
}

#[test]
fn a_new_shard_waits_for_the_region_of_a_newer_member_at_most_a_removal_margin() {
    let mut net = Net::new(2);
    net.advance(Duration::from_secs(1));
    let [first, second] = entity_per_shard([0, 1]).try_into().unwrap();
    // Up with a newer version, its region not started yet.
    let new = net.add_node();
    net.nodes[new].version = AppVersion::parse("1.0.1");
    net.nodes[new].alive = false;
    net.membership_changed();
    let id = net.tell(0, &first);
    net.advance(Duration::from_secs(5));
    assert!(!net.delivered(id), "allocated to an old node while the new one starts");
    net.nodes[new].alive = true;
    net.membership_changed();
    net.advance(Duration::from_secs(5));
    assert!(net.delivered(id));
    assert_eq!(net.home_of(&first), Some(new));

    // A newer member whose region never registers holds allocation up for the margin only.
    let silent = net.add_node();
    net.nodes[silent].version = AppVersion::parse("1.0.2");
    net.nodes[silent].alive = false;
    net.membership_changed();
    let id = net.tell(0, &second);
    net.advance(Duration::from_secs(10));
    assert!(!net.delivered(id));
    net.advance(net.config.removal_margin);
    assert!(net.delivered(id));
    assert_eq!(net.home_of(&second), Some(new), "then the newest that registered");
}

fn member(i: usize, status: MemberStatus) -> Member {
    let dc: BTreeSet<String> = ["dc-default".to_owned()].into();
    Member::from_parts(node(i), UpNumber(1), status, dc, AppVersion::default())
}

fn departed(d: &Departures) -> Vec<(UniqueAddress, Instant)> {
    d.iter().map(|(m, at)| (m.node().clone(), at)).collect()
}

#[test]
fn downed_and_vanished_members_are_departures_and_those_that_left_gracefully_are_not() {
    use MemberStatus::*;
    let margin = Duration::from_secs(20);
    let b = base();
    let t = |s: u64| b + Duration::from_secs(s);
    let mut d = Departures::default();
    let all = [member(0, Up), member(1, Up), member(2, Exiting), member(3, Up), member(4, Leaving)];
    d.update(&all, t(0), margin);
    assert!(departed(&d).is_empty());
    // 0 is downed, 1 vanishes while Up, 2 and 4 are removed after their graceful leave (the
    // Exiting step of 4 unseen).
    d.update(&[member(0, Down), member(3, Up)], t(1), margin);
    assert_eq!(departed(&d), [(node(0), t(1)), (node(1), t(1))]);
    // A downed member counts from when it was first seen down, is kept (not counted again)
    // while it stays down past the margin, and counts again from its removal.
    d.update(&[member(0, Down), member(3, Up)], t(6), margin);
    assert_eq!(departed(&d), [(node(0), t(1)), (node(1), t(1))]);
    d.update(&[member(0, Down), member(3, Up)], t(25), margin);
    assert_eq!(departed(&d), [(node(0), t(1))]);
    d.update(&[member(3, Up)], t(26), margin);
    assert_eq!(departed(&d), [(node(0), t(26))]);
    d.update(&[member(3, Up)], t(46), margin);
    assert!(departed(&d).is_empty());
}

#[test]
fn a_coordinator_takes_in_what_its_region_saw_go_before_it_started() {
    use MemberStatus::*;
    let margin = Duration::from_secs(20);
    let b = base();
    let t = |s: u64| b + Duration::from_secs(s);
    let all = [member(0, Up), member(1, Up), member(2, Up), member(3, Up), member(4, Up)];
    let mut region = Departures::default();
    region.update(&all, t(0), margin);
    // The region saw 1 removed and 3 and 4 downed at 1 s, 4 removed at 2 s, and has not yet
    // seen 2 go.
    let now_down = [member(0, Up), member(2, Up), member(3, Down), member(4, Down)];
    region.update(&now_down, t(1), margin);
    region.update(&[member(0, Up), member(2, Up), member(3, Down)], t(2), margin);
    // The coordinator starts at 3 s: 3 still down counts from when the region first saw it
    // down; 4 was downed and then removed before the coordinator started (it saw it down) and
    // counts from the removal.
    let mut coordinator = Departures::default();
    coordinator.update(&[member(0, Up), member(3, Down), member(4, Down)], t(3), margin);
    coordinator.update(&[member(0, Up), member(3, Down)], t(4), margin);
    coordinator.merge(&region, t(4));
    let expected = [(node(1), t(1)), (node(2), t(4)), (node(3), t(1)), (node(4), t(4))];
    assert_eq!(departed(&coordinator), expected);
}

#[test]
fn shards_handed_off_as_the_coordinator_is_asked_to_stop_get_a_home_in_the_table() {
    let mut net = Net::new(3);
    net.advance(Duration::from_secs(1));
    let name = net.entity_hosted(|h| h == 2);
    let shard = shard_for_entity(&name, SHARDS);
    // Node 2's region shuts down while the table cannot reach a majority; the singleton asks
    // the coordinator to stop before the shards it let go are written with new homes.
    net.replica_cut.extend([1, 2]);
    let now = net.now;
    net.nodes[2].region.graceful_shutdown(now);
    net.pump();
    assert!(net.nodes[2].region.status().stopped);
    net.nodes[0].coordinator.as_mut().unwrap().begin_stop();
    net.replica_cut.clear();
    net.advance(Duration::from_secs(10));
    let c = net.coordinator().unwrap();
    assert!(!c.has_unwritten_changes());
    let home = c.state().home(&shard).cloned();
    assert!(home.as_ref().is_some_and(|h| *h != node(2)), "{shard:?} has no home: {home:?}");
    assert!(!c.state().has_region(&node(2)));
}

/// The Region messages `c` sends until quiet, its writes acknowledged by the replicas on
/// `ackers`.
fn pump(c: &mut Coordinator, ackers: &[usize], now: Instant) -> Vec<(UniqueAddress, RegionMsg)> {
    let mut sent = Vec::new();
    while let Some(out) = c.poll_output() {
        match out {
            CoordinatorOutput::ToReplica { to, msg: ReplicaMsg::Write { version, .. } }
                if ackers.contains(&Net::index(&to)) =>
            {
                c.handle_replica_msg(to, ReplicaMsg::WriteAck { version }, now);
            }
            CoordinatorOutput::ToRegion { to, msg } => sent.push((to, msg)),
            _ => {}
        }
    }
    sent
}

/// The coordinator on node 2 of three, active after reading its own stale table (shard 3 on
/// node 2, written at seq 30 by an older coordinator) and the empty answer of node 0's new
/// incarnation: a majority in which fewer than a majority hold a table. Returns it, shard 3 and
/// the time.
fn recovered_beside_an_empty_successor(
    unreachable: &BTreeSet<UniqueAddress>,
) -> (Coordinator, ShardId, Instant) {
    let t = base();
    let shard = ShardId::new("3");
    let mut stale = CoordinatorState::default();
    stale.register(node(1));
    stale.register(node(2));
    stale.allocate(shard.clone(), node(2));
    let old = Ballot { round: 1, node: node(0), instance: 1 };
    let members: Vec<Member> = (0..3).map(|i| member(i, MemberStatus::Up)).collect();
    let mut c = Coordinator::new(config(), node(2), 1, &members, unreachable, t);
    let mut ballot = None;
    while let Some(out) = c.poll_output() {
        if let CoordinatorOutput::ToReplica { msg: ReplicaMsg::Read { ballot: b }, .. } = out {
            ballot = Some(b);
        }
    }
    let ballot = ballot.expect("the coordinator reads the replicas");
    let version = StateVersion { ballot: old, seq: 30 };
    let replies = [(2, Some((version, Arc::new(stale)))), (0, None)];
    for (i, accepted) in replies {
        let reply = ReplicaMsg::ReadReply { ballot: ballot.clone(), accepted };
        c.handle_replica_msg(node(i), reply, t);
    }
    assert_eq!(c.status().phase, "active");
    (c, shard, t)
}

#[test]
fn a_stale_table_rewritten_after_recovery_is_not_hosted_once_the_regions_have_listed_their_shards()
{
    // Chaos seed 2013787 (N=3): as above, the next coordinator read its own stale table (shard 3
    // on its node) and an empty successor's answer, so the table was unconfirmed, and it wrote
    // that table again under its ballot. Before that write was acknowledged every region
    // registered, the one running shard 3 listing it: shard 3's home became that region and the
    // table confirmed. The write then committed, and the HostAll queued with it at recovery
    // hosted the stale table it carried: shard 3 started on the coordinator's node too.
    let (mut c, shard, t) = recovered_beside_an_empty_successor(&BTreeSet::new());
    // The stale table goes out again; its acknowledgements are held back.
    let mut rewrite = None;
    let mut sent = Vec::new();
    while let Some(out) = c.poll_output() {
        match out {
            CoordinatorOutput::ToReplica { msg: ReplicaMsg::Write { version, .. }, .. } => {
                rewrite = Some(version);
            }
            CoordinatorOutput::ToRegion { to, msg } => sent.push((to, msg)),
            _ => {}
        }
    }
    let rewrite = rewrite.expect("the table read is written again");
    c.handle_region_msg(node(1), CoordinatorMsg::Register { hosted: vec![shard.clone()] }, t);
    c.handle_region_msg(node(0), CoordinatorMsg::Register { hosted: Vec::new() }, t);
    c.handle_region_msg(node(2), CoordinatorMsg::Register { hosted: Vec::new() }, t);
    sent.extend(pump(&mut c, &[], t));
    for i in [0, 2] {
        c.handle_replica_msg(node(i), ReplicaMsg::WriteAck { version: rewrite.clone() }, t);
    }
    sent.extend(pump(&mut c, &[0, 2], t));
    assert_eq!(c.state().home(&shard), Some(&node(1)));
    let elsewhere: Vec<_> = sent
        .iter()
        .filter(|(to, m)| matches!(m, RegionMsg::HostShard(s) if *s == shard) && *to != node(1))
        .collect();
    assert!(elsewhere.is_empty(), "hosted the stale home: {elsewhere:?}");
}

#[test]
fn a_table_read_beside_an_empty_successor_is_not_acted_on_until_the_regions_list_their_shards() {
    // Chaos seed 116015 (N=3): the previous coordinator's last writes moved shard 3 to node 1 and
    // reached node 1 and node 0, which then crashed; its new incarnation has no table. The next
    // coordinator, on node 2, read its own stale table (shard 3 on node 2) and node 0's empty
    // answer, a majority, while node 1 was cut off: it started shard 3 on node 2 while node 1
    // still ran it.
    let (mut c, shard, t) = recovered_beside_an_empty_successor(&BTreeSet::from([node(1)]));
    let sent = pump(&mut c, &[0, 2], t);
    c.handle_region_msg(node(0), CoordinatorMsg::Register { hosted: Vec::new() }, t);
    c.handle_region_msg(node(2), CoordinatorMsg::Register { hosted: Vec::new() }, t);
    c.handle_region_msg(node(2), CoordinatorMsg::GetShardHome(shard.clone()), t);
    let mut sent_later = pump(&mut c, &[0, 2], t);
    sent_later.extend(sent);
    let hosted_or_given = |sent: &[(UniqueAddress, RegionMsg)]| {
        sent.iter().any(|(_, m)| match m {
            RegionMsg::HostShard(s) => *s == shard,
            RegionMsg::ShardHome { shard: s, .. } => *s == shard,
            _ => false,
        })
    };
    assert!(!hosted_or_given(&sent_later), "acted on a stale home: {sent_later:?}");

    // Node 1 lists the shard when it registers: it is the shard's home.
    let hosted = vec![shard.clone()];
    c.handle_region_msg(node(1), CoordinatorMsg::Register { hosted }, t);
    let sent = pump(&mut c, &[0, 2], t);
    assert_eq!(c.state().home(&shard), Some(&node(1)));
    assert!(
        sent.iter()
            .all(|(to, m)| !matches!(m, RegionMsg::HostShard(s) if *s == shard) || *to == node(1)),
        "{sent:?}"
    );
}
