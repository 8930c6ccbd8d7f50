//! Hosts of a few nodes wired together through the encoded frames they send, as the runtime and
//! the simulator carry them: asks answered across nodes, the correlation of forwarded asks,
//! messages between the machines of one node handled in place, and the coordinator's stop.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use convoke_membership::member::UpNumber;
use convoke_membership::version::AppVersion;
use convoke_membership::{Address, Member, MemberStatus, UniqueAddress};

use super::tests::{base, node};
use super::wire::{self, Frame, WireFailure};
use super::*;

fn member(id: &UniqueAddress, i: usize, status: MemberStatus) -> Member {
    let dc: BTreeSet<String> = ["dc-default".to_owned()].into();
    let up = u32::try_from(i).unwrap() + 1;
    Member::from_parts(id.clone(), UpNumber(up), status, dc, AppVersion::default())
}

/// Node `i` in its incarnation `generation` (0 is [`node`]'s): the same address, another uid.
fn incarnation(i: usize, generation: u64) -> UniqueAddress {
    let first = node(i);
    let uid = convoke_membership::Uid::new(first.uid.get() + 1000 * generation).unwrap();
    UniqueAddress::new(first.address, uid)
}

fn config() -> ShardingConfig {
    let mut c = ShardingConfig::new("counter");
    c.number_of_shards = 12;
    c.passivate_idle_after = None;
    c
}

/// Hosts on nodes 0..n, node 0 the oldest (so the coordinator's home), frames carried in order
/// as bytes, entities that answer at once with what they were sent.
struct Nodes {
    hosts: Vec<Host<u64>>,
    statuses: Vec<MemberStatus>,
    wire: VecDeque<(usize, usize, Vec<u8>)>,
    now: Instant,
    /// Answers to local asks, by ask number, with the node they came back to.
    answers: BTreeMap<u64, (usize, Reply)>,
    /// Entities running, with their node.
    running: BTreeMap<EntityId, usize>,
    /// Frames sent from one node to another (never to itself).
    frames: usize,
    /// Nodes whose frames cannot be sent (the transport refuses them).
    refused: BTreeSet<usize>,
    /// The store's remembered entities, by shard (remembered entities only).
    remembered: BTreeMap<ShardId, BTreeSet<EntityId>>,
    /// The nodes, in their current incarnations.
    ids: Vec<UniqueAddress>,
    /// The homes kept in the store (`keep_homes` only), and whether a coordinator that asks for
    /// them is answered.
    saved: Option<Vec<(ShardId, Address)>>,
    answer_loads: bool,
    /// Every list of homes given to keep, in order.
    kept: Vec<Vec<(ShardId, Address)>>,
}

impl Nodes {
    fn new(n: usize) -> Self {
        Self::with(n, config())
    }

    /// Nodes whose entity type remembers its entities, in a store that answers at once.
    fn remembering(n: usize) -> Self {
        let mut c = config();
        c.remember_entities = true;
        Self::with(n, c)
    }

    /// Nodes whose coordinator keeps its homes in a store that answers at once and holds
    /// `saved`; the nodes are in their incarnation `generation`.
    fn keeping(n: usize, generation: u64, saved: Option<Vec<(ShardId, Address)>>) -> Self {
        let mut c = config();
        c.keep_homes = true;
        Self::build(n, c, generation, saved, true)
    }

    fn with(n: usize, config: ShardingConfig) -> Self {
        Self::build(n, config, 0, None, true)
    }

    /// `answer_loads`: whether a coordinator that asks for the kept homes is answered.
    fn build(
        n: usize,
        config: ShardingConfig,
        generation: u64,
        saved: Option<Vec<(ShardId, Address)>>,
        answer_loads: bool,
    ) -> Self {
        let now = base();
        let ids: Vec<UniqueAddress> = (0..n).map(|i| incarnation(i, generation)).collect();
        let hosts = ids.iter().map(|id| Host::new(config.clone(), id.clone(), true)).collect();
        let mut nodes = Self {
            hosts,
            statuses: vec![MemberStatus::Up; n],
            wire: VecDeque::new(),
            now,
            answers: BTreeMap::new(),
            running: BTreeMap::new(),
            frames: 0,
            refused: BTreeSet::new(),
            remembered: BTreeMap::new(),
            ids,
            saved,
            answer_loads,
            kept: Vec::new(),
        };
        nodes.members_changed();
        nodes.hosts[0].coordinator_up(now);
        nodes.settle();
        nodes
    }

    fn members(&self) -> Vec<Member> {
        let statuses = self.statuses.iter().enumerate();
        (statuses.filter(|(_, s)| **s != MemberStatus::Removed))
            .map(|(i, s)| member(&self.ids[i], i, *s))
            .collect()
    }

    fn members_changed(&mut self) {
        let members = self.members();
        for i in 0..self.hosts.len() {
            if self.statuses[i] == MemberStatus::Up {
                self.hosts[i].handle_members(&members, &BTreeSet::new(), self.now);
            }
        }
    }

    /// Carries out node `i`'s outputs.
    fn outputs(&mut self, i: usize) {
        while let Some(out) = self.hosts[i].poll_output() {
            match out {
                HostOutput::Send { to, frame } => {
                    let j = self.ids.iter().position(|id| *id == to).unwrap();
                    assert_ne!(i, j, "a host sends nothing to itself: {frame:?}");
                    if self.refused.contains(&i) {
                        self.hosts[i].undeliverable(frame, "refused");
                        continue;
                    }
                    self.frames += 1;
                    self.wire.push_back((i, j, wire::to_bytes(&frame)));
                }
                HostOutput::StartEntity { entity, .. } => {
                    let other = self.running.insert(entity.clone(), i);
                    assert!(other.is_none(), "{entity} started on {i} while it runs on {other:?}");
                }
                HostOutput::DeliverToEntity { payload, reply, .. } => {
                    match answer(reply, Ok(payload)) {
                        Some(HostOutput::Send { to, frame }) => {
                            let j = self.ids.iter().position(|id| *id == to).unwrap();
                            self.frames += 1;
                            self.wire.push_back((i, j, wire::to_bytes(&frame)));
                        }
                        Some(HostOutput::Reply { to, result }) => {
                            self.answers.insert(to, (i, result));
                        }
                        _ => {}
                    }
                }
                HostOutput::StopEntity { shard, entity } => {
                    self.running.remove(&entity);
                    self.hosts[i].entity_stopped(&shard, &entity, self.now);
                }
                HostOutput::Reply { to, result } => {
                    self.answers.insert(to, (i, result));
                }
                HostOutput::LoadEntities(shard) => {
                    let ids = self.remembered.get(&shard).cloned().unwrap_or_default();
                    self.hosts[i].entities_loaded(&shard, ids, self.now);
                }
                HostOutput::Remember { shard, entity } => {
                    self.remembered.entry(shard).or_default().insert(entity);
                }
                HostOutput::Forget { shard, entity } => {
                    self.remembered.entry(shard).or_default().remove(&entity);
                }
                HostOutput::LoadHomes if self.answer_loads => {
                    let homes = self.saved.clone().unwrap_or_default();
                    self.hosts[i].homes_loaded(homes, self.now);
                }
                HostOutput::SaveHomes(homes) => {
                    self.kept.push(homes.clone());
                    self.saved = Some(homes);
                }
                _ => {}
            }
        }
    }

    /// Every entity the store remembers.
    fn remembered_entities(&self) -> BTreeSet<EntityId> {
        self.remembered.values().flatten().cloned().collect()
    }

    /// Runs until nothing moves: every output carried out, every frame taken in, the timers
    /// due by now fired. Time stands still.
    fn settle(&mut self) {
        for _ in 0..100_000 {
            for i in 0..self.hosts.len() {
                self.outputs(i);
            }
            if let Some((from, to, bytes)) = self.wire.pop_front() {
                if self.statuses[to] == MemberStatus::Up {
                    let frame: Frame = wire::from_bytes(&bytes).unwrap();
                    let from = self.ids[from].clone();
                    self.hosts[to].handle_frame(from, frame, self.now).unwrap();
                }
                continue;
            }
            let now = self.now;
            let due = (0..self.hosts.len()).find(|i| {
                self.statuses[*i] == MemberStatus::Up
                    && self.hosts[*i].poll_timeout().is_some_and(|t| t <= now)
            });
            match due {
                Some(i) => self.hosts[i].handle_timeout(now),
                None => return,
            }
        }
        panic!("the hosts never settled");
    }

    fn ask(&mut self, from: usize, entity: &str, id: u64) {
        let shard = shard_for_entity(entity, 12);
        let payload = id.to_le_bytes().to_vec();
        self.hosts[from].ask(shard, entity.into(), payload, Some(id), self.now);
        self.settle();
    }

    /// The node whose host runs `entity` once asked.
    fn host_of(&self, entity: &str) -> usize {
        self.running[entity]
    }

    /// An entity that runs on node `on`, started by asks from node 0.
    fn entity_on(&mut self, on: usize) -> String {
        let on_node = |n: &mut Self, e: &str| {
            n.ask(0, e, 1000);
            n.host_of(e) == on
        };
        (0..100).map(|i| format!("e{i}")).find(|e| on_node(self, e)).unwrap()
    }
}

#[test]
fn an_ask_from_every_node_reaches_the_one_entity_and_its_answer_comes_back_to_the_asker() {
    let mut nodes = Nodes::new(3);
    for (id, from) in [(1, 0), (2, 1), (3, 2)] {
        nodes.ask(from, "alice", id);
        let (at, result) = &nodes.answers[&id];
        assert_eq!(*at, from, "the answer to ask {id} comes back to its asker");
        assert_eq!(result, &Ok(id.to_le_bytes().to_vec()));
    }
    assert_eq!(nodes.running.len(), 1);
    for h in &nodes.hosts {
        assert_eq!(h.pending_asks(), 0, "every forwarded ask has been answered");
    }
}

#[test]
fn the_machines_of_one_node_talk_in_place_and_a_lone_node_sends_nothing() {
    let mut nodes = Nodes::new(1);
    nodes.ask(0, "bob", 7);
    assert_eq!(nodes.answers[&7].1, Ok(7u64.to_le_bytes().to_vec()));
    assert_eq!(nodes.frames, 0, "the coordinator, region and replica of one node need no frame");
}

#[test]
fn an_ask_forwarded_to_a_node_that_is_downed_fails_at_once_and_not_at_its_timeout() {
    let mut nodes = Nodes::new(3);
    // Find an entity hosted away from node 0, then freeze its node so no answer comes.
    let entity = (0..100)
        .map(|i| format!("e{i}"))
        .find(|e| {
            nodes.ask(0, e, 1000);
            nodes.host_of(e) != 0
        })
        .unwrap();
    let far = nodes.host_of(&entity);
    nodes.statuses[far] = MemberStatus::Removed;
    let members = nodes.members();
    nodes.hosts[0].ask(
        shard_for_entity(&entity, 12),
        entity.as_str().into(),
        vec![0; 8],
        Some(5),
        nodes.now,
    );
    nodes.outputs(0);
    nodes.wire.clear();
    assert_eq!(nodes.hosts[0].pending_asks(), 1);
    nodes.hosts[0].handle_members(&members, &BTreeSet::new(), nodes.now);
    nodes.outputs(0);
    let (_, result) = &nodes.answers[&5];
    assert!(
        matches!(result, Err(WireFailure::Unreachable(why)) if why.contains("left the cluster")),
        "{result:?}"
    );
    assert_eq!(nodes.hosts[0].pending_asks(), 0);
}

#[test]
fn a_frame_that_cannot_be_sent_fails_the_ask_it_carries() {
    let mut nodes = Nodes::new(2);
    let entity = nodes.entity_on(1);
    nodes.refused.insert(0);
    nodes.ask(0, &entity, 9);
    let (_, result) = &nodes.answers[&9];
    assert_eq!(result, &Err(WireFailure::Unreachable("refused".to_owned())));
    assert_eq!(nodes.hosts[0].pending_asks(), 0);
}

#[test]
fn forgotten_asks_are_no_longer_answered() {
    let mut nodes = Nodes::new(2);
    let entity = nodes.entity_on(1);
    nodes.hosts[0].ask(
        shard_for_entity(&entity, 12),
        entity.as_str().into(),
        11u64.to_le_bytes().to_vec(),
        Some(11),
        nodes.now,
    );
    nodes.outputs(0);
    nodes.hosts[0].forget_asks(|id| *id != 11);
    nodes.settle();
    assert!(!nodes.answers.contains_key(&11), "the asker gave up; its reply is dropped");
}

#[test]
fn a_coordinator_asked_to_stop_says_so_at_once_when_its_table_is_written() {
    let mut nodes = Nodes::new(3);
    nodes.ask(1, "carol", 1);
    nodes.hosts[0].coordinator_down(Duration::from_secs(8), nodes.now);
    let mut stopped = false;
    while let Some(out) = nodes.hosts[0].poll_output() {
        stopped |= matches!(out, HostOutput::CoordinatorStopped);
    }
    assert!(stopped, "nothing was left to write");
    assert!(nodes.hosts[0].coordinator().is_none());
}

#[test]
fn a_coordinator_asked_to_stop_while_writing_waits_for_the_write_or_its_budget() {
    let mut nodes = Nodes::new(3);
    // A new shard is allocated: the coordinator writes the change to the replicas.
    nodes.hosts[1].ask(shard_for_entity("dave", 12), "dave".into(), vec![0; 8], Some(2), nodes.now);
    nodes.outputs(1);
    // Deliver frames until the coordinator has a write outstanding.
    let mut writing = false;
    while let Some((from, to, bytes)) = nodes.wire.pop_front() {
        let frame = wire::from_bytes(&bytes).unwrap();
        nodes.hosts[to].handle_frame(node(from), frame, nodes.now).unwrap();
        nodes.outputs(to);
        if nodes.hosts[0].coordinator_status().is_some_and(|s| s.writing) {
            writing = true;
            break;
        }
        nodes.outputs(0);
    }
    assert!(writing, "the allocation is being written");
    nodes.wire.clear();
    let budget = Duration::from_secs(1);
    nodes.hosts[0].coordinator_down(budget, nodes.now);
    let early: Vec<_> = std::iter::from_fn(|| nodes.hosts[0].poll_output()).collect();
    assert!(!early.iter().any(|o| matches!(o, HostOutput::CoordinatorStopped)), "{early:?}");
    assert!(nodes.hosts[0].poll_timeout().is_some_and(|t| t <= nodes.now + budget));
    nodes.hosts[0].handle_timeout(nodes.now + budget);
    let late: Vec<_> = std::iter::from_fn(|| nodes.hosts[0].poll_output()).collect();
    assert!(late.iter().any(|o| matches!(o, HostOutput::CoordinatorStopped)), "{late:?}");
}

#[test]
fn a_host_found_frozen_stops_its_shards_and_says_their_entities_hold_only_stale_messages() {
    let mut nodes = Nodes::new(2);
    let entity = nodes.entity_on(1);
    let shard = shard_for_entity(&entity, 12);
    let deadline = nodes.hosts[1].poll_timeout().unwrap();
    // Node 1 runs again long after the deadline it asked for: it was frozen.
    let late = deadline + Duration::from_secs(30);
    nodes.hosts[1].handle_timeout(late);
    let outs: Vec<_> = std::iter::from_fn(|| nodes.hosts[1].poll_output()).collect();
    let frozen = outs.iter().find_map(|o| match o {
        HostOutput::ShardHandingOff { shard: s, frozen } if *s == shard => Some(*frozen),
        _ => None,
    });
    assert_eq!(frozen, Some(true), "{outs:?}");
    assert!(
        outs.iter()
            .any(|o| matches!(o, HostOutput::StopEntity { entity: e, .. } if **e == *entity)),
        "{outs:?}"
    );
}

#[test]
fn a_host_cut_off_while_leaving_stops_its_shards_after_the_leave_allowance_and_hosts_no_more() {
    // Node 1 sees itself Leaving and hears nothing more (cut off): the others may remove it
    // without a Down and give its shards away a removal margin later.
    let mut nodes = Nodes::new(2);
    let entity = nodes.entity_on(1);
    let shard = shard_for_entity(&entity, 12);
    let allowance = config().removal_margin / 2;
    let leaving =
        [member(&node(0), 0, MemberStatus::Up), member(&node(1), 1, MemberStatus::Leaving)];
    let at = nodes.now;
    nodes.hosts[1].handle_members(&leaving, &BTreeSet::new(), at);
    let quiet: Vec<_> = std::iter::from_fn(|| nodes.hosts[1].poll_output()).collect();
    assert!(quiet.iter().all(|o| !matches!(o, HostOutput::StopEntity { .. })), "{quiet:?}");
    // Woken on time, every retry interval, until the allowance is spent.
    while let Some(t) = nodes.hosts[1].poll_timeout().filter(|t| *t < at + allowance) {
        nodes.hosts[1].handle_timeout(t);
        let outs: Vec<_> = std::iter::from_fn(|| nodes.hosts[1].poll_output()).collect();
        assert!(outs.iter().all(|o| !matches!(o, HostOutput::StopEntity { .. })), "{outs:?}");
    }
    assert_eq!(nodes.hosts[1].poll_timeout(), Some(at + allowance));
    nodes.hosts[1].handle_timeout(at + allowance);
    let outs: Vec<_> = std::iter::from_fn(|| nodes.hosts[1].poll_output()).collect();
    let frozen = outs.iter().find_map(|o| match o {
        HostOutput::ShardHandingOff { shard: s, frozen } if *s == shard => Some(*frozen),
        _ => None,
    });
    assert_eq!(frozen, Some(false), "not a freeze: {outs:?}");
    assert!(
        outs.iter()
            .any(|o| matches!(o, HostOutput::StopEntity { entity: e, .. } if **e == *entity)),
        "{outs:?}"
    );
    assert!(nodes.hosts[1].region_status().shutting_down);
    // A message for the shard no longer starts it here.
    let later = at + allowance + Duration::from_secs(1);
    let ask = Frame::ToRegion((&RegionMsg::HostShard(shard.clone())).into());
    nodes.hosts[1].handle_frame(node(0), ask, later).unwrap();
    let outs: Vec<_> = std::iter::from_fn(|| nodes.hosts[1].poll_output()).collect();
    assert!(outs.iter().all(|o| !matches!(o, HostOutput::ShardStarted(_))), "{outs:?}");
}

#[test]
fn a_shard_the_coordinator_moves_hands_off_without_the_freeze_mark() {
    let mut nodes = Nodes::new(2);
    let entity = nodes.entity_on(1);
    let shard = shard_for_entity(&entity, 12);
    let hand_off = Frame::ToRegion((&RegionMsg::HandOff(shard.clone())).into());
    nodes.hosts[1].handle_frame(node(0), hand_off, nodes.now).unwrap();
    let outs: Vec<_> = std::iter::from_fn(|| nodes.hosts[1].poll_output()).collect();
    let frozen = outs.iter().find_map(|o| match o {
        HostOutput::ShardHandingOff { shard: s, frozen } if *s == shard => Some(*frozen),
        _ => None,
    });
    assert_eq!(frozen, Some(false), "{outs:?}");
}

/// Frames between the host of node 5, coordinator of a cluster that counts node 1 as Up, and
/// node 1's host, which has not been welcomed: until neither sends anything more.
fn exchange(old: &mut Host<u64>, joiner: &mut Host<u64>, now: Instant) -> usize {
    let mut answers = 0;
    loop {
        let to_joiner: Vec<Frame> = std::iter::from_fn(|| old.poll_output())
            .filter_map(|o| match o {
                HostOutput::Send { to, frame } if to == node(1) => Some(frame),
                _ => None,
            })
            .collect();
        for frame in &to_joiner {
            let frame = wire::from_bytes(&wire::to_bytes(frame)).unwrap();
            joiner.handle_frame(node(5), frame, now).unwrap();
        }
        let to_old: Vec<Frame> = std::iter::from_fn(|| joiner.poll_output())
            .filter_map(|o| match o {
                HostOutput::Send { to, frame } if to == node(5) => Some(frame),
                _ => None,
            })
            .collect();
        answers += to_old.len();
        for frame in to_old {
            let frame = wire::from_bytes(&wire::to_bytes(&frame)).unwrap();
            old.handle_frame(node(1), frame, now).unwrap();
        }
        if to_joiner.is_empty() {
            return answers;
        }
    }
}

#[test]
fn a_node_not_yet_welcomed_keeps_no_table_that_could_outrank_the_cluster_it_joins() {
    use MemberStatus::{Removed, Up};
    // Node 1 asked to join the cluster of node 5, which counts it Up, but no welcome reached it.
    // The coordinator there (its ballot outranks any of node 0's: same round, higher node)
    // reads and writes node 1's replica.
    let mut nodes = Nodes::new(2);
    let now = nodes.now;
    nodes.hosts[1] = Host::new(config(), node(1), true);
    let mut old = Host::<u64>::new(config(), node(5), true);
    old.handle_members(&[member(&node(5), 5, Up), member(&node(1), 1, Up)], &BTreeSet::new(), now);
    old.coordinator_up(now);
    assert_eq!(exchange(&mut old, &mut nodes.hosts[1], now), 0, "node 1 answered node 5");
    // That cluster is gone. Node 0 forms a cluster of its own and places entities on itself.
    nodes.statuses[1] = Removed;
    nodes.hosts[0] = Host::new(config(), node(0), true);
    nodes.members_changed();
    nodes.hosts[0].coordinator_up(now);
    nodes.settle();
    let entities: Vec<String> = (0..24).map(|i| format!("e{i}")).collect();
    for (id, e) in (1..).zip(&entities) {
        nodes.ask(0, e, id);
    }
    assert!(entities.iter().all(|e| nodes.host_of(e) == 0));
    // Node 1 joins it. Each entity runs in one place at a time (the harness fails on a second
    // start), wherever the coordinator moves its shard.
    nodes.statuses[1] = Up;
    nodes.members_changed();
    nodes.settle();
    for (id, e) in (100..).zip(&entities) {
        nodes.ask(1, e, id);
    }
    // Past every margin a coordinator may wait for before it allocates.
    for _ in 0..120 {
        nodes.now += Duration::from_secs(1);
        nodes.settle();
    }
    for (id, e) in (100..).zip(&entities) {
        assert_eq!(nodes.answers.get(&id), Some(&(1, Ok(id.to_le_bytes().to_vec()))), "{e}");
    }
}

#[test]
fn remembered_entities_start_without_a_message_where_their_shard_goes_after_their_node_is_removed()
{
    let mut nodes = Nodes::remembering(3);
    let names: BTreeSet<EntityId> = (0..40).map(|i| EntityId::from(format!("e{i}"))).collect();
    for (id, e) in (0_u64..).zip(&names) {
        nodes.ask(0, e, id);
    }
    assert_eq!(nodes.remembered_entities(), names, "every entity started is remembered");
    let on_2: Vec<EntityId> =
        nodes.running.iter().filter(|(_, n)| **n == 2).map(|(e, _)| e.clone()).collect();
    assert!(on_2.len() >= 2, "{on_2:?}");
    // One of them asks to stop: it is forgotten.
    let passivated = on_2[0].clone();
    let shard = shard_for_entity(&passivated, 12);
    nodes.hosts[2].passivate(&shard, &passivated, nodes.now);
    nodes.settle();
    assert!(!nodes.running.contains_key(&passivated));
    assert!(!nodes.remembered_entities().contains(&passivated), "a passivated entity is forgotten");
    // Node 2 crashes and is removed; its shards go elsewhere after the removal margin, and
    // their remembered entities start there with no message sent.
    let asked = nodes.answers.len();
    nodes.statuses[2] = MemberStatus::Removed;
    nodes.running.retain(|_, n| *n != 2);
    nodes.members_changed();
    nodes.settle();
    // Time passes in steps, so that no host takes itself for frozen.
    let until = nodes.now + config().removal_margin + Duration::from_secs(3);
    while nodes.now < until {
        nodes.now += Duration::from_millis(500);
        nodes.settle();
    }
    for e in &on_2[1..] {
        let at = nodes.running.get(e);
        assert!(matches!(at, Some(0 | 1)), "{e} runs on {at:?}");
    }
    assert!(!nodes.running.contains_key(&passivated), "a forgotten entity waits for a message");
    assert_eq!(nodes.running.len(), names.len() - 1);
    assert_eq!(nodes.answers.len(), asked, "no message was needed");
}

#[test]
fn entities_are_not_remembered_unless_the_type_asks_and_then_never_stop_for_being_idle() {
    let mut nodes = Nodes::new(2);
    nodes.ask(0, "a", 1);
    assert!(nodes.remembered_entities().is_empty());
    let mut c = config();
    c.passivate_idle_after = Some(Duration::from_secs(1));
    c.remember_entities = true;
    assert_eq!(c.idle_after(), None);
    c.remember_entities = false;
    assert_eq!(c.idle_after(), Some(Duration::from_secs(1)));
}

#[test]
fn a_woken_shard_starts_with_its_remembered_entities_though_no_message_came() {
    // A full-cluster restart: the store remembers entities of a shard the new coordinator's
    // empty table does not know.
    let mut nodes = Nodes::remembering(3);
    let shard = shard_for_entity("e0", 12);
    let ids: BTreeSet<EntityId> = (0..200)
        .map(|k| format!("e{k}"))
        .filter(|e| shard_for_entity(e, 12) == shard)
        .map(EntityId::from)
        .collect();
    assert!(ids.len() >= 2);
    nodes.remembered.insert(shard.clone(), ids.clone());
    nodes.hosts[1].wake([shard.clone()], nodes.now);
    nodes.settle();
    assert_eq!(nodes.running.keys().cloned().collect::<BTreeSet<_>>(), ids);
    assert!(nodes.answers.is_empty());
    // Waking it again, anywhere, changes nothing.
    for i in 0..3 {
        nodes.hosts[i].wake([shard.clone()], nodes.now);
    }
    nodes.settle();
    assert_eq!(nodes.running.len(), ids.len());
}

/// The coordinator's written table, each home by its node's address and incarnation.
fn table(nodes: &Nodes) -> BTreeMap<ShardId, UniqueAddress> {
    let c = nodes.hosts[0].coordinator().unwrap();
    c.state().allocations().map(|(s, r)| (s.clone(), r.clone())).collect()
}

fn by_address(table: &BTreeMap<ShardId, UniqueAddress>) -> Vec<(ShardId, Address)> {
    table.iter().map(|(s, r)| (s.clone(), r.address.clone())).collect()
}

#[test]
fn a_full_restart_puts_every_shard_back_on_the_node_at_its_saved_address_without_a_message() {
    let mut before = Nodes::keeping(3, 0, None);
    for k in 0..40 {
        before.ask(1, &format!("e{k}"), k);
    }
    let homes = table(&before);
    assert!(homes.len() >= 10, "{homes:?}");
    assert!(homes.values().collect::<BTreeSet<_>>().len() == 3, "{homes:?}");
    assert_eq!(before.saved.as_deref(), Some(&by_address(&homes)[..]));

    // Every process restarts with its disk: new incarnations, empty replicas, the store's copy.
    let mut after = Nodes::keeping(3, 1, before.saved.clone());
    let back = table(&after);
    assert_eq!(by_address(&back), by_address(&homes));
    assert!(back.values().all(|r| r.uid.get() > 1000), "{back:?}");
    // Each went back with no message asking for it, and at once (time stood still: no margin
    // waited).
    let regions: BTreeSet<usize> = homes
        .values()
        .map(|r| after.ids.iter().position(|id| id.address == r.address).unwrap())
        .collect();
    assert_eq!(regions.len(), 3);
    for k in 0..40 {
        let e = format!("e{k}");
        after.ask(2, &e, 100 + k);
        let home = &homes[&shard_for_entity(&e, 12)];
        assert_eq!(after.ids[after.host_of(&e)].address, home.address, "{e}");
        assert!(matches!(after.answers[&(100 + k)], (2, Ok(_))));
    }
}

#[test]
fn the_shards_of_a_node_that_does_not_come_back_are_allocated_by_the_rule_when_asked_for() {
    let mut before = Nodes::keeping(3, 0, None);
    for k in 0..40 {
        before.ask(0, &format!("e{k}"), k);
    }
    let homes = table(&before);
    let lost: BTreeSet<ShardId> = homes
        .iter()
        .filter(|(_, r)| r.address == node(2).address)
        .map(|(s, _)| s.clone())
        .collect();
    assert!(!lost.is_empty());

    // Two of the three come back.
    let mut after = Nodes::keeping(2, 1, before.saved.clone());
    let back = table(&after);
    let expected: Vec<(ShardId, Address)> =
        by_address(&homes).into_iter().filter(|(s, _)| !lost.contains(s)).collect();
    assert_eq!(by_address(&back), expected);
    // What was not placed stays kept, so that another restart still finds it.
    assert_eq!(after.saved.as_deref(), Some(&by_address(&homes)[..]));
    let e =
        (0..40).map(|k| format!("e{k}")).find(|e| lost.contains(&shard_for_entity(e, 12))).unwrap();
    after.ask(1, &e, 500);
    assert!(matches!(after.answers[&500], (_, Ok(_))));
    // Where it went is kept in place of its old home.
    let shard = shard_for_entity(&e, 12);
    let now_at = after.ids[after.host_of(&e)].address.clone();
    assert!(after.saved.as_ref().unwrap().contains(&(shard, now_at)));
}

#[test]
fn homes_read_after_every_region_registered_are_never_written_over_before_they_are_placed() {
    let mut before = Nodes::keeping(3, 0, None);
    for k in 0..40 {
        before.ask(1, &format!("e{k}"), k);
    }
    let homes = by_address(&table(&before));
    let mut c = config();
    c.keep_homes = true;
    let mut after = Nodes::build(3, c, 1, before.saved.clone(), false);
    assert!(after.kept.is_empty(), "homes kept before the kept ones were read");
    let now = after.now;
    after.hosts[0].homes_loaded(homes.clone(), now);
    after.settle();
    assert_eq!(by_address(&table(&after)), homes);
    assert!(!after.kept.is_empty());
    for kept in &after.kept {
        assert_eq!(*kept, homes, "a save dropped homes not yet written in the table");
    }
}

#[test]
fn no_shard_is_allocated_anew_while_the_saved_homes_are_read_and_at_most_for_a_removal_margin() {
    let mut nodes = Nodes::keeping(3, 0, None);
    let margin = config().removal_margin;
    // The first coordinator read the homes (none kept): allocation went ahead.
    nodes.ask(1, "e1", 1);
    assert!(matches!(nodes.answers[&1], (1, Ok(_))));
    let known = shard_for_entity("e1", 12);
    let fresh =
        (2..100).map(|k| format!("e{k}")).find(|e| shard_for_entity(e, 12) != known).unwrap();

    // The next coordinator's read of the store does not come back.
    nodes.answer_loads = false;
    let kept = vec![(ShardId::new("11"), node(2).address)];
    nodes.saved = Some(kept.clone());
    nodes.hosts[0].coordinator_down(Duration::ZERO, nodes.now);
    nodes.settle();
    nodes.hosts[0].coordinator_up(nodes.now);
    nodes.settle();
    nodes.ask(1, &fresh, 2);
    assert!(!nodes.answers.contains_key(&2), "allocated before the saved homes were read");
    nodes.ask(2, "e1", 3);
    assert!(matches!(nodes.answers[&3], (2, Ok(_))), "a shard the table places is served");
    assert_eq!(nodes.saved, Some(kept), "a table that has not read the homes replaced them");
    // Time goes on in steps (a step longer than a few seconds looks like a freeze to the
    // regions); they ask again every retry interval.
    let start = nodes.now;
    while nodes.now < start + margin {
        assert!(!nodes.answers.contains_key(&2), "allocated before the margin");
        nodes.now += Duration::from_millis(500);
        nodes.settle();
    }
    nodes.now += Duration::from_secs(2);
    nodes.settle();
    assert!(matches!(nodes.answers[&2], (1, Ok(_))));
}
