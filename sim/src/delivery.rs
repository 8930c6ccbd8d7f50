//! Delivery: what becomes of a core's transmits on the way through the modelled network.
//!
//! A transmit is counted and sized when it is sent, then lost, sent once or duplicated, each copy
//! with its own latency ([`crate::net`]). When a copy reaches its destination's network interface
//! the link state decides: a partition drops it, a clog holds it until the clog ends. What the
//! destination's process does with it (take it in, or queue it while paused) is not decided here.
//!
//! Scheduling is left to the caller, through a callback, so that deliveries share one queue with
//! every other event and keep their place in its order.
//!
//! The cluster singleton's hand-over messages take the same network (the same quality, partitions
//! and clogs) but draw their losses and latencies from a random stream of their own, so that
//! adding them leaves every membership message's fate, and the membership trace, as it was.
//!
//! Cluster sharding's messages model the runtime's transport, a TCP connection per pair of
//! nodes: nothing lost or duplicated, and each pair's messages arrive in the order they were
//! sent, with latencies drawn from a stream of their own; partitions drop them (the connection
//! breaks), clogs hold them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use convoke_membership::message::Message;
use convoke_membership::{Address, Cluster, Uid, UniqueAddress};
use convoke_singleton::HandOver;
use rand_chacha::ChaCha8Rng;

use crate::counters::{NodeCounters, SizeMode, Sizer, kind_index};
use crate::net::{Links, NetConfig};

/// A message on the wire.
#[derive(Debug)]
pub struct InFlight {
    /// The sender's slot.
    pub from_slot: usize,
    /// The sender, as the envelope names it.
    pub from: UniqueAddress,
    /// The receiver's slot.
    pub to_slot: usize,
    /// The message.
    pub message: Message,
    /// Its size on the wire, as counted when it was sent.
    pub bytes: usize,
}

/// A message of a layer above the membership (singleton, sharding) on the wire.
#[derive(Clone, Debug)]
pub struct LayerInFlight<T> {
    /// The sender's slot.
    pub from_slot: usize,
    /// The sender.
    pub from: UniqueAddress,
    /// The receiver's slot.
    pub to_slot: usize,
    /// The message.
    pub message: T,
}

/// A hand-over message of the cluster singleton on the wire.
pub type HandOverInFlight = LayerInFlight<HandOver>;

/// A cluster sharding frame on the wire, encoded, with the incarnation it is for.
pub type ShardingInFlight = LayerInFlight<(UniqueAddress, Vec<u8>)>;

/// A replicated store message on the wire, encoded, with the incarnation it is for.
pub type DataInFlight = LayerInFlight<(UniqueAddress, Vec<u8>)>;

/// A layer that rides the runtime's TCP connections (sharding, the store): nothing lost or
/// duplicated, each pair of slots' messages in the order they were sent, latencies drawn from a
/// stream of the lane's own.
#[derive(Debug)]
struct Lane {
    rng: ChaCha8Rng,
    /// Messages that arrived at a clogged node, or from one.
    held: Vec<LayerInFlight<(UniqueAddress, Vec<u8>)>>,
    /// Per (sender, receiver) slot: when its latest message arrives; none arrives earlier than
    /// one sent before it.
    last: BTreeMap<(usize, usize), Duration>,
}

impl Lane {
    fn new(rng: ChaCha8Rng) -> Self {
        Self { rng, held: Vec::new(), last: BTreeMap::new() }
    }

    fn arrival(&mut self, net: &NetConfig, now: Duration, from: usize, to: usize) -> Duration {
        let at = now + net.sample_delay(&mut self.rng);
        let last = self.last.entry((from, to)).or_default();
        *last = at.max(*last);
        *last
    }

    /// Releases what no clog holds any more, each at a drawn arrival.
    fn release(
        &mut self,
        links: &Links,
        net: &NetConfig,
        now: Duration,
        mut schedule: impl FnMut(Duration, LayerInFlight<(UniqueAddress, Vec<u8>)>),
    ) {
        let mut released = Vec::new();
        release(links, &mut self.held, |m| released.push(m));
        for m in released {
            let at = self.arrival(net, now, m.from_slot, m.to_slot);
            schedule(at, m);
        }
    }
}

/// A message on the wire between two slots, which the links may let through, drop or hold.
trait Routed {
    /// The sender's and the receiver's slots.
    fn route(&self) -> (usize, usize);
}

impl Routed for InFlight {
    fn route(&self) -> (usize, usize) {
        (self.from_slot, self.to_slot)
    }
}

impl<T> Routed for LayerInFlight<T> {
    fn route(&self) -> (usize, usize) {
        (self.from_slot, self.to_slot)
    }
}

/// Whether a clog at either end of `m`'s route keeps it held.
fn clogged(links: &Links, m: &impl Routed) -> bool {
    let (from, to) = m.route();
    links.is_clogged(from) || links.is_clogged(to)
}

/// `m` reaching its destination's interface: returned if the links let it through now, dropped
/// if a partition blocks it, put into `held` if a clog does.
fn pass<T: Routed>(links: &Links, held: &mut Vec<T>, m: T) -> Option<T> {
    let (from, to) = m.route();
    if !links.is_open(from, to) {
        return None;
    }
    if clogged(links, &m) {
        held.push(m);
        return None;
    }
    Some(m)
}

/// Sends on, through `go` and in the order they were held, the messages of `held` that no clog
/// keeps any more; keeps the others.
fn release<T: Routed>(links: &Links, held: &mut Vec<T>, mut go: impl FnMut(T)) {
    for m in std::mem::take(held) {
        if clogged(links, &m) {
            held.push(m);
        } else {
            go(m);
        }
    }
}

/// A message copy handed to the scheduler.
#[derive(Debug)]
pub enum Wire {
    /// A membership message.
    Membership(InFlight),
    /// A singleton hand-over message.
    HandOver(HandOverInFlight),
    /// A cluster sharding message.
    Sharding(ShardingInFlight),
    /// A replicated store message.
    Data(DataInFlight),
}

/// The network between the slots: quality, link state, held messages and traffic counters.
#[derive(Debug)]
pub struct Delivery {
    net: NetConfig,
    links: Links,
    /// Messages that arrived at a clogged node, or from one.
    held: Vec<InFlight>,
    rng: ChaCha8Rng,
    counters: Vec<NodeCounters>,
    sizer: Sizer,
    /// Messages handed to cores so far.
    delivered: u64,
    /// Losses, duplicates and latencies of hand-over messages.
    hand_over_rng: ChaCha8Rng,
    /// Hand-over messages that arrived at a clogged node, or from one.
    held_hand_overs: Vec<HandOverInFlight>,
    /// Cluster sharding's messages.
    sharding: Lane,
    /// The replicated store's messages.
    data: Lane,
}

impl Delivery {
    /// `n` slots on a network of quality `net`, every link open; latencies and losses drawn from
    /// `rng`, those of hand-over messages from `hand_over_rng`, those of sharding messages from
    /// `sharding_rng`, those of the store's from `data_rng`.
    pub fn new(
        n: usize,
        net: NetConfig,
        [rng, hand_over_rng, sharding_rng, data_rng]: [ChaCha8Rng; 4],
        size_mode: SizeMode,
    ) -> Self {
        Self {
            net,
            links: Links::new(n),
            held: Vec::new(),
            rng,
            counters: vec![NodeCounters::default(); n],
            sizer: Sizer::new(n, size_mode),
            delivered: 0,
            hand_over_rng,
            held_hand_overs: Vec::new(),
            sharding: Lane::new(sharding_rng),
            data: Lane::new(data_rng),
        }
    }

    /// The current network quality.
    pub fn net(&self) -> &NetConfig {
        &self.net
    }

    /// Changes the network quality, for messages sent from now on.
    pub fn set_net(&mut self, net: NetConfig) {
        self.net = net;
    }

    /// The link state.
    pub fn links(&self) -> &Links {
        &self.links
    }

    /// Whether a message from `from` to `to` would get through now.
    pub fn link_open(&self, from: usize, to: usize) -> bool {
        self.links.is_open(from, to) && !self.links.is_clogged(from) && !self.links.is_clogged(to)
    }

    /// Per-slot traffic counters.
    pub fn counters(&self) -> &[NodeCounters] {
        &self.counters
    }

    /// Zeroes the traffic counters.
    pub fn reset_counters(&mut self) {
        self.counters.iter_mut().for_each(|c| *c = NodeCounters::default());
    }

    /// Gossip messages encoded to size them so far.
    pub fn gossips_encoded(&self) -> u64 {
        self.sizer.encoded
    }

    /// Messages handed to cores so far.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Counts `message` as sent by `from_slot` and puts its copies on the wire to `to_slot`; a
    /// message to an address outside the simulation (`None`) is counted and goes nowhere.
    pub fn send(
        &mut self,
        now: Duration,
        from_slot: usize,
        from: &UniqueAddress,
        to_slot: Option<usize>,
        message: Message,
        mut schedule: impl FnMut(Duration, Wire),
    ) {
        let kind = kind_index(&message);
        let (bytes, members) = self.sizer.size(from_slot, &message);
        self.counters[from_slot].on_sent(kind, bytes, members);
        let Some(to_slot) = to_slot else { return };
        let copies = self.net.sample_copies(&mut self.rng);
        let mut message = Some(message);
        for c in 0..copies {
            let at = now + self.net.sample_delay(&mut self.rng);
            let message = if c + 1 == copies {
                message.take().expect("last copy")
            } else {
                message.clone().expect("not yet moved")
            };
            let m = InFlight { from_slot, from: from.clone(), to_slot, message, bytes };
            schedule(at, Wire::Membership(m));
        }
    }

    /// Puts the copies of hand-over message `m` on the wire.
    pub fn send_hand_over(
        &mut self,
        now: Duration,
        m: HandOverInFlight,
        mut schedule: impl FnMut(Duration, Wire),
    ) {
        let copies = self.net.sample_copies(&mut self.hand_over_rng);
        for _ in 0..copies {
            let at = now + self.net.sample_delay(&mut self.hand_over_rng);
            schedule(at, Wire::HandOver(m.clone()));
        }
    }

    /// Puts sharding message `m` on the wire: one copy, after a drawn latency, not before the
    /// previous message between the same two slots.
    pub fn send_sharding(
        &mut self,
        now: Duration,
        m: ShardingInFlight,
        mut schedule: impl FnMut(Duration, Wire),
    ) {
        let at = self.sharding.arrival(&self.net, now, m.from_slot, m.to_slot);
        schedule(at, Wire::Sharding(m));
    }

    /// A sharding message reaches the network interface of its destination: as
    /// [`Delivery::arrive`].
    pub fn arrive_sharding(&mut self, m: ShardingInFlight) -> Option<ShardingInFlight> {
        pass(&self.links, &mut self.sharding.held, m)
    }

    /// Puts store message `m` on the wire, as [`Delivery::send_sharding`] does a sharding one.
    pub fn send_data(
        &mut self,
        now: Duration,
        m: DataInFlight,
        mut schedule: impl FnMut(Duration, Wire),
    ) {
        let at = self.data.arrival(&self.net, now, m.from_slot, m.to_slot);
        schedule(at, Wire::Data(m));
    }

    /// A store message reaches the network interface of its destination: as
    /// [`Delivery::arrive`].
    pub fn arrive_data(&mut self, m: DataInFlight) -> Option<DataInFlight> {
        pass(&self.links, &mut self.data.held, m)
    }

    /// A hand-over message reaches the network interface of its destination: as
    /// [`Delivery::arrive`].
    pub fn arrive_hand_over(&mut self, m: HandOverInFlight) -> Option<HandOverInFlight> {
        pass(&self.links, &mut self.held_hand_overs, m)
    }

    /// A message reaches the network interface of its destination: it is returned if the link
    /// lets it through now; dropped if a partition blocks it; held if a clog does.
    pub fn arrive(&mut self, m: InFlight) -> Option<InFlight> {
        pass(&self.links, &mut self.held, m)
    }

    /// Counts `m` as received by its destination's core; its message kind.
    pub fn received(&mut self, m: &InFlight) -> usize {
        let kind = kind_index(&m.message);
        self.counters[m.to_slot].on_received(kind, m.bytes);
        self.delivered += 1;
        kind
    }

    /// Starts partition `id`.
    pub fn block(&mut self, id: u64, links: Vec<(usize, usize)>) {
        self.links.block(id, links);
    }

    /// Ends partition `id`; held messages no clog keeps any more go on their way.
    pub fn unblock(&mut self, id: u64, now: Duration, schedule: impl FnMut(Duration, Wire)) {
        self.links.unblock(id);
        self.release_held(now, schedule);
    }

    /// Clogs `slot`.
    pub fn clog(&mut self, slot: usize) {
        self.links.set_clogged(slot, true);
    }

    /// Unclogs `slot`; held messages no clog keeps any more go on their way.
    pub fn unclog(&mut self, slot: usize, now: Duration, schedule: impl FnMut(Duration, Wire)) {
        self.links.set_clogged(slot, false);
        self.release_held(now, schedule);
    }

    /// Ends every partition and clog, releases what was held (at the old quality), then sets the
    /// quality to `net`.
    pub fn heal(&mut self, net: NetConfig, now: Duration, schedule: impl FnMut(Duration, Wire)) {
        self.links.heal();
        self.release_held(now, schedule);
        self.net = net;
    }

    /// Membership messages first, then hand-over messages, then sharding messages, then the
    /// store's, each at a latency drawn from its own stream.
    fn release_held(&mut self, now: Duration, mut schedule: impl FnMut(Duration, Wire)) {
        let (links, net) = (&self.links, &self.net);
        release(links, &mut self.held, |m| {
            schedule(now + net.sample_delay(&mut self.rng), Wire::Membership(m));
        });
        release(links, &mut self.held_hand_overs, |m| {
            schedule(now + net.sample_delay(&mut self.hand_over_rng), Wire::HandOver(m));
        });
        self.sharding.release(links, net, now, |at, m| schedule(at, Wire::Sharding(m)));
        self.data.release(links, net, now, |at, m| schedule(at, Wire::Data(m)));
    }

    /// Sends `core`, in `slot`, messages it must reject: a gossip for another incarnation, a
    /// gossip from a stranger, a join from another actor system (`system` is the simulated one).
    pub fn stray(
        &mut self,
        now: Duration,
        slot: usize,
        core: &Cluster,
        system: &str,
        mut schedule: impl FnMut(Duration, Wire),
    ) {
        let me = core.self_node().clone();
        let gossip = core.gossip().clone();
        let other_uid = Uid::new(me.uid.get() ^ 0x5555).expect("nonzero");
        let stranger =
            UniqueAddress::new(Address::new(system, "stranger", 1).expect("valid"), other_uid);
        let foreign = UniqueAddress::new(
            Address::new("other", me.address.host(), me.address.port()).expect("valid"),
            other_uid,
        );
        let member = gossip.members().map(|m| m.node().clone()).find(|n| *n != me);
        let mut msgs = vec![
            (
                stranger.clone(),
                Message::Gossip { from: stranger.clone(), to: me.clone(), gossip: gossip.clone() },
            ),
            (
                foreign.clone(),
                Message::Join {
                    node: foreign,
                    roles: BTreeSet::new(),
                    app_version: Default::default(),
                },
            ),
        ];
        if let Some(m) = member {
            let wrong = UniqueAddress::new(me.address.clone(), other_uid);
            msgs.push((m.clone(), Message::Gossip { from: m, to: wrong, gossip }));
        }
        for (from, message) in msgs {
            let at = now + self.net.sample_delay(&mut self.rng);
            let m = InFlight { from_slot: slot, from, to_slot: slot, message, bytes: 0 };
            schedule(at, Wire::Membership(m));
        }
    }
}
