//! The store's machine on one node: the replica of the keys the ring gives it, the coordinator of
//! the requests made on it, and the keeper of writes for unreachable replicas.
//!
//! # Call protocol
//!
//! A driver (the node runtime, or the simulator) owns one [`Store`] and, for every input:
//! 1. calls one of [`Store::handle_members`], [`Store::request`], [`Store::handle_message`] or
//!    [`Store::handle_timeout`], with `now`;
//! 2. when [`Store::needs_sync`] says so, calls [`Store::sync`] (it may first take in more
//!    inputs: writes staged by many of them then reach the disk together);
//! 3. drains [`Store::poll_output`] and carries each [`Output`] out;
//! 4. arms a timer for [`Store::poll_timeout`].
//!
//! A replica acknowledges a write, and a coordinator counts its own copy, only after the sync
//! that made it durable.
//!
//! # Requests
//!
//! A request made on a node that is not one of the key's N replicas is forwarded to the first
//! reachable one, which coordinates it; when none is reachable it fails (`Unavailable`): only a
//! replica gives a write its dot, because only a replica holds the dots its actor gave before
//! (`docs/data.md`, "Actors"). The coordinator writes to the key's N replicas, standing in a
//! fallback from further along the preference list for each unreachable one (a sloppy quorum);
//! the fallback keeps the write as a hint and hands it to the replica once it is reachable.
//! A read asks the same N and returns once R have answered, merged; replicas whose versions are
//! behind the merge are repaired, including those that answer after the reply.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

use convoke_membership::timers::{Timer, Timers};
use convoke_membership::{Address, Member, MemberStatus, UniqueAddress};

use crate::config::{DataConfig, Level};
use crate::crdt::CrdtKind;
use crate::fenced::{FenceOp, Fenced};
use crate::message::{DataError, Message, Reply, Request};
use crate::object::{Key, Object, Read, Refused, Value};
use crate::ring::Ring;
use crate::storage::Storage;
use crate::version::{ActorId, VersionVector};

/// A request made on this node, by its number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// What the driver carries out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Send `message` to the store on `to`.
    Send {
        /// The node.
        to: UniqueAddress,
        /// The message.
        message: Message,
    },
    /// The request made on this node with [`Store::request`] is done.
    Reply {
        /// The request.
        id: RequestId,
        /// Its outcome.
        result: Result<Reply, DataError>,
    },
    /// The object under `key` changed on this replica (for subscriptions).
    Changed(Key),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StoreTimer {
    /// The earliest request deadline.
    Requests,
    /// Offer held writes to their replicas.
    Hints,
    /// Anti-entropy and handoff.
    Maintenance,
}

impl Timer for StoreTimer {
    fn index(self) -> usize {
        self as usize
    }
}

/// Who waits for a request's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Origin {
    /// A caller on this node.
    Local(RequestId),
    /// A node that forwarded it, under its own number.
    Remote(UniqueAddress, u64),
}

/// A request in flight on this node.
#[derive(Debug)]
struct Pending {
    origin: Origin,
    deadline: Instant,
    state: Flight,
}

#[derive(Debug)]
enum Flight {
    /// Forwarded to a replica that coordinates it.
    Forwarded,
    /// A write this node coordinates: the targets (replicas or fallbacks, this node among
    /// them) that have not answered, how many hold it, and the context to reply with; for a
    /// fenced write, the fenced values the acknowledging replicas hold, merged.
    Write {
        needed: usize,
        waiting: BTreeSet<Address>,
        acks: usize,
        context: VersionVector,
        fenced: Option<Fenced>,
    },
    /// A read this node coordinates.
    Read {
        key: Key,
        needed: usize,
        targets: BTreeSet<Address>,
        answers: BTreeMap<Address, Option<Object>>,
        merged: Object,
        replied: bool,
        /// Whether every target is one of the key's N replicas (no fallback stands in), and no
        /// answer has been behind the merge: then a merge of nothing but tombstones, once all
        /// have answered, is held by every replica and may be reaped.
        whole: bool,
    },
    /// A held write offered to its replica.
    Hint { replica: Address, key: Key },
    /// Keys of `arc`, which this node no longer replicates, sent to its replicas; those that
    /// have not acknowledged.
    Handoff {
        arc: crate::ring::Arc,
        waiting: BTreeSet<Address>,
        entries: Vec<(Key, Object)>,
        kind: Handing,
    },
}

/// Why keys go in a [`Flight::Handoff`], and what happens once every replica has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handing {
    /// To every replica of an arc this node no longer replicates: the keys are dropped here.
    Move,
    /// To the reachable replicas of such an arc while another is away: the keys are kept here
    /// until all can take them (docs/data.md, "Handoff").
    Copy,
    /// By a node about to leave, to the replicas of the ring without it (see
    /// [`Store::begin_leave`]); it keeps its copies.
    Leave,
}

/// An answer this replica owes once its staged writes are durable.
#[derive(Debug)]
enum Owed {
    /// A write's acknowledgement; with the fenced value the replica holds, for a fenced write.
    Ack {
        to: UniqueAddress,
        req: u64,
        held: Option<Fenced>,
    },
    OwnCopy {
        req: u64,
        me: Address,
        held: Option<Fenced>,
    },
}

/// The store's machine on one node (see the module docs for the call protocol).
#[derive(Debug)]
pub struct Store<S> {
    config: DataConfig,
    me: UniqueAddress,
    actor: ActorId,
    storage: S,
    ring: Ring,
    /// The current incarnation at each member address.
    nodes: BTreeMap<Address, UniqueAddress>,
    unreachable: BTreeSet<Address>,
    next_req: u64,
    pending: BTreeMap<u64, Pending>,
    /// Writes held for other replicas: replica → keys.
    hints: BTreeMap<Address, BTreeSet<Key>>,
    hint_count: usize,
    /// Answers held until the next sync.
    owed: Vec<Owed>,
    staged: bool,
    outputs: VecDeque<Output>,
    timers: Timers<StoreTimer, 3>,
    /// Anti-entropy's cursor over this node's arcs and their peers.
    ae_next: usize,
    /// Handoffs completed, each a new actor (see `maintenance::handed_off`).
    epoch: u64,
    /// When this node last exchanged anti-entropy digests with each peer.
    exchanged: BTreeMap<Address, Instant>,
    /// The rings replaced within the last [`Store::ring_memory`], with when: a claim of a
    /// fenced key also asks the key's replicas on them (docs/data.md, "Fenced values").
    past_rings: VecDeque<(Instant, Ring)>,
    /// Set by [`Store::begin_leave`]: what is handed to the ring without this node.
    leaving: Option<maintenance::Leave>,
    /// Members kept on the ring though they hold no data now, with since when: they went away
    /// without a graceful leave, or were on the ring this node's storage remembers
    /// (docs/data.md, "Absent holders").
    absent: BTreeMap<Address, Instant>,
    /// Members seen leaving gracefully, with when: another node's word that they are absent
    /// is not taken for [`DataConfig::absent_timeout`].
    left: BTreeMap<Address, Instant>,
    /// Members that said they handed every key over ahead of leaving, with when: only those
    /// count as leaving gracefully (see `maintenance::announce_handed_over`).
    handed: BTreeMap<Address, Instant>,
    /// What each peer was last told of the absent and departed members (a digest of the two
    /// lists), with when: told again only when it changed or [`RINGS_REPEAT`] rounds passed.
    rings_told: BTreeMap<Address, (u64, Instant)>,
    /// Arcs this node holds keys of but no longer replicates, copied whole to the replicas
    /// that were reachable while another was not, with those replicas: copied again only when
    /// they change.
    copied: BTreeMap<crate::ring::Arc, BTreeSet<Address>>,
    /// The word about absent holders and past rings from nodes not yet among the members, with
    /// when it came: taken once the sender is seen (docs/data.md, "Absent holders").
    early_rings: BTreeMap<Address, (Instant, RingsWord)>,
}

/// A [`Message::Rings`]: the absent holders, the past rings and the departed members, each
/// with how long ago in milliseconds.
type RingsWord = (Vec<(String, u64)>, Vec<(Vec<String>, u64)>, Vec<(String, u64)>);

/// The most absent holders a node takes from another's word.
const MAX_ABSENT: usize = 1024;

/// The most past rings kept.
const PAST_RINGS: usize = 8;

/// Maintenance rounds after which a peer is told the absent and departed members again, though
/// they did not change, in case the first word was lost.
const RINGS_REPEAT: u32 = 10;

impl<S: Storage> Store<S> {
    /// The store of node `me`, over `storage`, which may hold objects and hints from an earlier
    /// run.
    pub fn new(
        config: DataConfig,
        me: UniqueAddress,
        mut storage: S,
        now: Instant,
    ) -> Result<Self, S::Error> {
        let mut hints: BTreeMap<Address, BTreeSet<Key>> = BTreeMap::new();
        let held = storage.hints()?;
        let hint_count = held.len();
        for (replica, key) in held {
            hints.entry(replica).or_default().insert(key);
        }
        // Until they are seen Up again, the members of the ring before the restart keep their
        // places on it.
        // The rings it remembered are remembered again, as if replaced now.
        let mut remembered = storage.rings()?.into_iter();
        let current = remembered.next().unwrap_or_default();
        let ring = Ring::new(current.iter().cloned(), config.vnodes);
        let absent = current.into_iter().map(|a| (a, now)).collect();
        let newest: Vec<Vec<Address>> =
            remembered.filter(|r| !r.is_empty()).take(PAST_RINGS).collect();
        let past_rings =
            newest.into_iter().rev().map(|r| (now, Ring::new(r, config.vnodes))).collect();
        let mut timers = Timers::default();
        timers.set(StoreTimer::Hints, now + config.hint_interval);
        timers.set(StoreTimer::Maintenance, now + config.anti_entropy_interval);
        Ok(Self {
            actor: ActorId(me.uid.get()),
            config,
            me,
            storage,
            ring,
            nodes: BTreeMap::new(),
            unreachable: BTreeSet::new(),
            next_req: 0,
            pending: BTreeMap::new(),
            hints,
            hint_count,
            owed: Vec::new(),
            staged: false,
            outputs: VecDeque::new(),
            timers,
            ae_next: 0,
            epoch: 0,
            exchanged: BTreeMap::new(),
            past_rings,
            leaving: None,
            absent,
            left: BTreeMap::new(),
            handed: BTreeMap::new(),
            rings_told: BTreeMap::new(),
            copied: BTreeMap::new(),
            early_rings: BTreeMap::new(),
        })
    }

    /// The settings.
    pub fn config(&self) -> &DataConfig {
        &self.config
    }

    /// The ring as this node sees it.
    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// The storage, for the driver's reads of what it holds.
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// The storage, for the simulator's crash.
    pub fn storage_mut(&mut self) -> &mut S {
        &mut self.storage
    }

    /// The storage, the machine given up (its process ended): what a next incarnation opens.
    pub fn into_storage(self) -> S {
        self.storage
    }

    /// Writes held for unreachable replicas.
    pub fn hint_count(&self) -> usize {
        self.hint_count
    }

    /// When this node last exchanged anti-entropy digests with each peer (sent or received).
    pub fn anti_entropy_exchanges(&self) -> &BTreeMap<Address, Instant> {
        &self.exchanged
    }

    /// Requests in flight on this node (coordinated, forwarded, or hints offered).
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// The rings replaced lately that a claim also asks, oldest first (docs/data.md, "When
    /// the ring changes").
    pub fn past_rings(&self) -> impl Iterator<Item = &Ring> + '_ {
        self.past_rings.iter().map(|(_, r)| r)
    }

    /// The members kept on the ring while away, with since when (docs/data.md, "Absent
    /// holders").
    pub fn absent(&self) -> &BTreeMap<Address, Instant> {
        &self.absent
    }

    /// The members changed, or their reachability: the ring is rebuilt from the Up members with
    /// the store's role, and the absent holders: members that were on the ring and went away
    /// without a graceful leave keep their places for [`DataConfig::absent_timeout`], or
    /// until they are Up again.
    pub fn handle_members(
        &mut self,
        members: &[Member],
        unreachable: &BTreeSet<UniqueAddress>,
        now: Instant,
    ) {
        let up = Ring::of_members(members, self.config.role.as_deref(), self.config.vnodes);
        let holding: BTreeSet<&Address> = up.members().iter().collect();
        // The members that held keys on the ring so far: one that comes to hold them now (new,
        // or back from being absent) is told of the rings it may have missed.
        let held_before: BTreeSet<Address> =
            self.ring.members().iter().filter(|a| self.holds(a)).cloned().collect();
        // Leaving gracefully: Leaving or Exiting, after it said it had handed its keys over.
        // One that did not say so goes as an absent holder.
        let handed = &self.handed;
        let left = |a: &Address| {
            handed.contains_key(a)
                && members.iter().any(|m| {
                    m.address() == a
                        && matches!(m.status(), MemberStatus::Leaving | MemberStatus::Exiting)
                })
        };
        for a in self.ring.members() {
            if left(a) {
                self.left.insert(a.clone(), now);
            } else if !holding.contains(a) && !self.absent.contains_key(a) {
                self.absent.insert(a.clone(), now);
            }
        }
        // A holder back Up, or reachable again, brings its copies back: the rings kept for it
        // are kept as long again from now, for anti-entropy to copy on what only it holds.
        let unreachable_now: BTreeSet<Address> =
            unreachable.iter().map(|n| n.address.clone()).collect();
        let back: BTreeSet<&Address> = self
            .absent
            .keys()
            .filter(|a| holding.contains(a))
            .chain(self.unreachable.iter().filter(|a| !unreachable_now.contains(*a)))
            .collect();
        if !back.is_empty() {
            for (at, ring) in &mut self.past_rings {
                if ring.members().iter().any(|a| back.contains(a)) {
                    *at = now;
                }
            }
            self.past_rings.make_contiguous().sort_by_key(|(at, _)| *at);
        }
        let timeout = self.config.absent_timeout;
        self.absent.retain(|a, since| {
            !holding.contains(a) && !left(a) && now.saturating_duration_since(*since) < timeout
        });
        self.left.retain(|a, since| {
            !holding.contains(a) && now.saturating_duration_since(*since) < timeout
        });
        self.handed.retain(|_, since| now.saturating_duration_since(*since) < timeout);
        let ring = if self.absent.is_empty() {
            up
        } else {
            let all = holding.into_iter().cloned().chain(self.absent.keys().cloned());
            Ring::new(all, self.config.vnodes)
        };
        self.set_ring(ring, now);
        self.forget_past_rings(now);
        let nodes: BTreeMap<Address, UniqueAddress> =
            members.iter().map(|m| (m.address().clone(), m.node().clone())).collect();
        // Members not seen before, and members that hold keys on the ring now and did not
        // before: new on it (they were told while Joining, before the ring their arrival
        // replaced was a past one), or back from being absent (rings were made while they
        // were away).
        let newcomers: Vec<UniqueAddress> = nodes
            .iter()
            .filter(|(a, n)| {
                let seen = self.nodes.get(*a) == Some(*n);
                **a != self.me.address && (!seen || (self.holds(a) && !held_before.contains(*a)))
            })
            .map(|(_, n)| n.clone())
            .collect();
        self.nodes = nodes;
        self.rings_told.retain(|a, _| self.nodes.contains_key(a));
        self.unreachable = unreachable_now;
        self.leave_ring_changed();
        // A member this node had not seen, or new on the ring, learns at once which holders it
        // keeps and which rings it remembers.
        if !self.absent.is_empty()
            || !self.past_rings.is_empty()
            || !self.left.is_empty()
            || self.handed_over()
        {
            for n in newcomers {
                self.send(n, self.rings_message(now, true));
            }
        }
        // The word from members seen only now is taken, its ages moved on by the wait.
        self.early_rings.retain(|_, (at, _)| now.saturating_duration_since(*at) < timeout);
        let seen: Vec<Address> =
            self.early_rings.keys().filter(|a| self.nodes.contains_key(*a)).cloned().collect();
        for from in seen {
            let Some((at, (absent, past, left))) = self.early_rings.remove(&from) else {
                continue;
            };
            let wait =
                u64::try_from(now.saturating_duration_since(at).as_millis()).unwrap_or(u64::MAX);
            let later = |v: Vec<(String, u64)>| {
                v.into_iter().map(|(a, ago)| (a, ago.saturating_add(wait))).collect()
            };
            let past = past.into_iter().map(|(r, ago)| (r, ago.saturating_add(wait))).collect();
            self.rings_received(&from, later(absent), past, later(left), now);
        }
    }

    /// The absent holders, and when `past` this node's ring and the ones it remembers, as told
    /// to other nodes at `now`.
    pub(super) fn rings_message(&self, now: Instant, past: bool) -> Message {
        let ago = |since: &Instant| {
            u64::try_from(now.saturating_duration_since(*since).as_millis()).unwrap_or(u64::MAX)
        };
        let absent = self.absent.iter().map(|(a, since)| (a.to_string(), ago(since))).collect();
        let past = if past {
            // The ring this node is on goes first, for the receiver may be on another one (a
            // member restarted on the ring its disk knew), then the remembered ones, newest
            // first: the receiver takes only so many.
            let names = |r: &Ring| r.members().iter().map(ToString::to_string).collect();
            let current = (!self.ring.is_empty()).then(|| (names(&self.ring), 0));
            let remembered = self.past_rings.iter().rev().map(|(at, r)| (names(r), ago(at)));
            current.into_iter().chain(remembered).collect()
        } else {
            Vec::new()
        };
        let mut left: Vec<(String, u64)> =
            self.left.iter().map(|(a, since)| (a.to_string(), ago(since))).collect();
        if self.handed_over() {
            left.push((self.me.address.to_string(), 0));
        }
        Message::Rings { absent, past, left }
    }

    /// Member `from` is on or remembers the `past` rings and keeps `absent` holders on its ring
    /// while they are away: rings this node is not on and does not remember it remembers too,
    /// and holders it does not see Up, nor saw leave, it keeps too, each for what is left of
    /// its time.
    fn rings_received(
        &mut self,
        from: &Address,
        absent: Vec<(String, u64)>,
        past: Vec<(Vec<String>, u64)>,
        left: Vec<(String, u64)>,
        now: Instant,
    ) {
        if !self.nodes.contains_key(from) {
            // Sent on seeing this node join, possibly before this node sees the sender: kept
            // until it does, for the sender does not tell it again.
            if self.early_rings.len() < MAX_ABSENT || self.early_rings.contains_key(from) {
                self.early_rings.insert(from.clone(), (now, (absent, past, left)));
            }
            return;
        }
        // A member the sender saw leave handed its keys over first: it is not absent here
        // either, though this node saw it go without a word, or never saw it.
        let mut gone = BTreeSet::new();
        for (h, ago) in left.iter().take(MAX_ABSENT) {
            let ago = std::time::Duration::from_millis(*ago);
            let Ok(a) = h.parse::<Address>() else { continue };
            // The sender's own word that it handed every key over.
            if a == *from && self.handed.len() < MAX_ABSENT {
                self.handed.insert(a.clone(), now);
            }
            if ago >= self.config.absent_timeout || a == self.me.address || self.holds(&a) {
                continue;
            }
            if self.absent.remove(&a).is_some() {
                gone.insert(a.clone());
            }
            if self.left.len() < MAX_ABSENT {
                self.left.entry(a).or_insert(now.checked_sub(ago).unwrap_or(now));
            }
        }
        self.rebuild_ring(&gone, &[], now);
        let mut added = Vec::new();
        for (h, away) in absent.iter().take(MAX_ABSENT) {
            let away = std::time::Duration::from_millis(*away);
            let Ok(a) = h.parse::<Address>() else { continue };
            if a == self.me.address
                || self.holds(&a)
                || self.left.contains_key(&a)
                || away >= self.config.absent_timeout
            {
                continue;
            }
            if self.absent.len() < MAX_ABSENT && !self.absent.contains_key(&a) {
                self.absent.insert(a.clone(), now.checked_sub(away).unwrap_or(now));
                added.push(a);
            }
        }
        self.rebuild_ring(&BTreeSet::new(), &added, now);
        let mut learnt = false;
        // The sender's ring and the ones it remembers.
        for (names, ago) in past.into_iter().take(PAST_RINGS + 1) {
            let members: Vec<Address> =
                names.iter().take(MAX_ABSENT).filter_map(|n| n.parse().ok()).collect();
            let ring = Ring::new(members, self.config.vnodes);
            let known = ring.members() == self.ring.members()
                || self.past_rings.iter().any(|(_, r)| r.members() == ring.members());
            if ring.is_empty() || known {
                continue;
            }
            let at = now.checked_sub(std::time::Duration::from_millis(ago)).unwrap_or(now);
            let i = self.past_rings.partition_point(|(t, _)| *t <= at);
            self.past_rings.insert(i, (at, ring));
            learnt = true;
        }
        // Those older than a ring is remembered here go at once.
        self.forget_past_rings(now);
        if learnt {
            self.keep_rings();
        }
    }

    /// Makes `ring` the current one, when it differs, remembering the one it replaces.
    fn set_ring(&mut self, ring: Ring, now: Instant) {
        if ring.members() == self.ring.members() {
            return;
        }
        let old = std::mem::replace(&mut self.ring, ring);
        if !old.members().is_empty() {
            // The same ring remembered twice is remembered once, from the later time.
            self.past_rings.retain(|(_, r)| r.members() != old.members());
            self.past_rings.push_back((now, old));
        }
        self.keep_rings();
    }

    /// Stages the current ring and the remembered ones, so that a restart finds the holders it
    /// must wait for and the rings a claim must still ask. Staged: they reach the disk with
    /// the next sync, before anything the current ring places is acknowledged.
    fn keep_rings(&mut self) {
        let rings: Vec<Vec<Address>> = std::iter::once(&self.ring)
            .chain(self.past_rings.iter().rev().map(|(_, r)| r))
            .map(|r| r.members().to_vec())
            .collect();
        if self.storage.put_rings(&rings).is_ok() {
            self.staged = true;
        }
    }

    /// Forgets the rings replaced longer than [`Store::ring_memory`] ago, except those with an
    /// absent or unreachable member: anti-entropy cannot have copied what only it holds. At
    /// most [`PAST_RINGS`] are kept.
    fn forget_past_rings(&mut self, now: Instant) {
        let memory = self.ring_memory();
        let (absent, unreachable) = (&self.absent, &self.unreachable);
        let waits = |(_, ring): &(Instant, Ring)| {
            ring.members().iter().any(|a| absent.contains_key(a) || unreachable.contains(a))
        };
        self.past_rings.retain(|r| now.saturating_duration_since(r.0) <= memory || waits(r));
        // Over the cap, the oldest ring that waits for nobody goes first.
        while self.past_rings.len() > PAST_RINGS {
            let i = self.past_rings.iter().position(|r| !waits(r)).unwrap_or(0);
            self.past_rings.remove(i);
        }
    }

    /// Absent holders away longer than [`DataConfig::absent_timeout`] leave the ring: their
    /// keys move to the members that remain. Past rings are forgotten on the way.
    fn expire_absent(&mut self, now: Instant) {
        self.forget_past_rings(now);
        let timeout = self.config.absent_timeout;
        let expired: BTreeSet<Address> = self
            .absent
            .iter()
            .filter(|(_, since)| now.saturating_duration_since(**since) >= timeout)
            .map(|(a, _)| a.clone())
            .collect();
        if expired.is_empty() {
            return;
        }
        self.absent.retain(|a, _| !expired.contains(a));
        self.rebuild_ring(&expired, &[], now);
        self.forget_past_rings(now);
    }

    /// Whether this node is leaving and has handed every key over: its membership leave may
    /// go ahead (see [`Store::leave_remaining`]).
    pub fn handed_over(&self) -> bool {
        self.leave_remaining() == Some(0)
    }

    /// Whether `a` holds data on the current ring: it is on it and not absent.
    fn holds(&self, a: &Address) -> bool {
        self.ring.members().contains(a) && !self.absent.contains_key(a)
    }

    /// Makes the ring its members without `gone` and with `added`, and re-plans a leave in
    /// progress; nothing when both are empty.
    fn rebuild_ring(&mut self, gone: &BTreeSet<Address>, added: &[Address], now: Instant) {
        if gone.is_empty() && added.is_empty() {
            return;
        }
        let members = self.ring.members().iter().filter(|a| !gone.contains(*a)).chain(added);
        let ring = Ring::new(members.cloned(), self.config.vnodes);
        self.set_ring(ring, now);
        self.leave_ring_changed();
    }

    /// A caller's request, answered later by an [`Output::Reply`] with the returned id.
    pub fn request(&mut self, request: Request, now: Instant) -> RequestId {
        let id = RequestId(self.next_number());
        self.start(Origin::Local(id), request, now);
        id
    }

    /// A message from the store on `from`.
    pub fn handle_message(&mut self, from: &UniqueAddress, message: Message, now: Instant) {
        if let Some(key) = message_key(&message)
            && key.as_bytes().len() > self.config.max_key_bytes
        {
            return;
        }
        match message {
            Message::Write { req, key, object, hint } => {
                match hint.map(|h| h.parse::<Address>()).transpose() {
                    Ok(hint) => self.take_write(from, req, &key, &object, hint.as_ref()),
                    Err(e) => {
                        let result = Err(DataError::Storage(format!("a bad hint: {e}")));
                        self.send(from.clone(), Message::WriteAck { req, result });
                    }
                }
            }
            Message::WriteAck { req, result } => {
                self.write_acked(&from.address, req, result, None, now);
            }
            Message::FencedAck { req, result } => {
                let (result, held) = match result {
                    Ok(held) => (Ok(()), Some(held)),
                    Err(e) => (Err(e), None),
                };
                self.write_acked(&from.address, req, result, held, now);
            }
            Message::Read { req, key } => {
                let object = self.held(&key).unwrap_or_else(|e| {
                    // A replica that cannot read counts as one that holds nothing; the read
                    // goes on with the others.
                    drop(e);
                    None
                });
                self.send(from.clone(), Message::ReadReply { req, object });
            }
            Message::ReadReply { req, object } => self.read_answered(&from.address, req, object),
            Message::Repair { key, object } => {
                if object.is_well_formed() {
                    let _ = self.merge_local(&key, &object);
                }
            }
            Message::Digests { spans } => {
                self.exchanged.insert(from.address.clone(), now);
                self.digests_received(&from.address, spans);
            }
            Message::Keys { span, keys } => self.keys_received(&from.address, span, keys),
            Message::Pull { keys } => self.pull_received(&from.address, keys),
            Message::Handoff { req, entries } => self.handoff_received(from, req, entries),
            Message::Reap { key, digest } => self.reap(&key, digest),
            Message::Forward { req, request } => {
                self.start(Origin::Remote(from.clone(), req), request, now);
            }
            Message::Rings { absent, past, left } => {
                self.rings_received(&from.address, absent, past, left, now);
            }
            Message::ForwardReply { req, result } => {
                if let Some(p) = self.pending.remove(&req)
                    && matches!(p.state, Flight::Forwarded)
                {
                    self.finish(p.origin, result);
                }
            }
        }
    }

    /// Timers that are due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.timers.take_due(StoreTimer::Requests, now) {
            let due: Vec<u64> =
                self.pending.iter().filter(|(_, p)| p.deadline <= now).map(|(r, _)| *r).collect();
            for req in due {
                if let Some(p) = self.pending.remove(&req) {
                    self.expired(p);
                }
            }
        }
        if self.timers.take_due(StoreTimer::Hints, now) {
            self.offer_hints(now);
            self.timers.set(StoreTimer::Hints, now + self.config.hint_interval);
        }
        if self.timers.take_due(StoreTimer::Maintenance, now) {
            self.maintain(now);
            self.timers.set(StoreTimer::Maintenance, now + self.config.anti_entropy_interval);
        }
        self.arm_requests();
    }

    /// Whether writes are staged that [`Store::sync`] must make durable before answers owed for
    /// them go out.
    pub fn needs_sync(&self) -> bool {
        self.staged
    }

    /// Makes the staged writes durable, then releases the answers owed for them. On a storage
    /// failure the owed answers become failures.
    pub fn sync(&mut self, now: Instant) {
        let result = self.storage.sync().map_err(|e| DataError::Storage(e.to_string()));
        self.staged = false;
        for owed in std::mem::take(&mut self.owed) {
            match owed {
                Owed::Ack { to, req, held: None } => {
                    self.send(to, Message::WriteAck { req, result: result.clone() });
                }
                Owed::Ack { to, req, held: Some(held) } => {
                    let result = result.clone().map(|()| held);
                    self.send(to, Message::FencedAck { req, result });
                }
                Owed::OwnCopy { req, me, held } => {
                    self.write_acked(&me, req, result.clone(), held, now);
                }
            }
        }
    }

    /// The next output to carry out.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// When [`Store::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.earliest()
    }

    fn next_number(&mut self) -> u64 {
        self.next_req += 1;
        self.next_req
    }

    fn send(&mut self, to: UniqueAddress, message: Message) {
        self.outputs.push_back(Output::Send { to, message });
    }

    fn reachable(&self, a: &Address) -> bool {
        *a == self.me.address || (self.nodes.contains_key(a) && !self.unreachable.contains(a))
    }

    /// Starts `request` for `origin`: coordinated here when this node is a replica of the key,
    /// forwarded to one otherwise.
    fn start(&mut self, origin: Origin, request: Request, now: Instant) {
        if let Err(e) = self.check(&request) {
            return self.finish(origin, Err(e.into()));
        }
        let key = request.key().clone();
        let replicas: Vec<Address> =
            self.ring.replicas(key.as_bytes(), self.config.replicas).into_iter().cloned().collect();
        if replicas.contains(&self.me.address) {
            return self.coordinate(origin, request, &replicas, now);
        }
        let Some(to) = replicas.iter().find(|a| self.reachable(a)).and_then(|a| self.nodes.get(a))
        else {
            let needed = self.needed(&request);
            return self.finish(origin, Err(DataError::Unavailable { needed, reachable: 0 }));
        };
        let to = to.clone();
        let req = self.next_number();
        self.pending.insert(req, self.pending_for(origin, Flight::Forwarded, now));
        self.send(to, Message::Forward { req, request });
        self.arm_requests();
    }

    /// How long a replaced ring is remembered: the time anti-entropy takes to compare every arc
    /// of a node twice, after which the key's current replicas hold what the old ones held.
    fn ring_memory(&self) -> std::time::Duration {
        let arcs = self.config.replicas as u32 * self.config.vnodes.max(1);
        let rounds = arcs.div_ceil(self.config.arcs_per_round.max(1) as u32);
        self.config.anti_entropy_interval * (2 * rounds)
    }

    /// The targets of a claim of fenced `key`: every reachable replica of the key on the
    /// current ring and on the rings remembered, so that a write acknowledged by replicas the
    /// ring has since moved the key away from is still found.
    fn claim_targets(&self, key: &Key, replicas: &[Address]) -> Vec<(Address, Option<Address>)> {
        let mut all: BTreeSet<Address> = replicas.iter().cloned().collect();
        for (_, ring) in &self.past_rings {
            all.extend(ring.replicas(key.as_bytes(), self.config.replicas).into_iter().cloned());
        }
        all.into_iter().filter(|a| self.reachable(a)).map(|a| (a, None)).collect()
    }

    /// The reachable replicas of `key` on a remembered ring that has too few of them, if any.
    /// A claim must meet every quorum of `needed` replicas that may have acknowledged a write
    /// there, so of the ring's n replicas it must reach n − `needed` + 1. Members that left
    /// gracefully since do not count: they handed their copies to the ring without them. A ring
    /// on which the key had fewer than `needed` replicas (a cluster still forming) is passed
    /// over: no fenced write was acknowledged on it.
    fn past_quorum_missing(&self, key: &Key, needed: usize) -> Option<usize> {
        self.past_rings.iter().find_map(|(_, ring)| {
            let replicas = ring.replicas(key.as_bytes(), self.config.replicas);
            if replicas.len() < needed {
                return None;
            }
            let stayed: Vec<&Address> =
                replicas.into_iter().filter(|a| !self.left.contains_key(*a)).collect();
            let must = (stayed.len() + 1).saturating_sub(needed);
            let reachable = stayed.into_iter().filter(|a| self.reachable(a)).count();
            (reachable < must).then_some(reachable)
        })
    }

    fn pending_for(&self, origin: Origin, state: Flight, now: Instant) -> Pending {
        Pending { origin, deadline: now + self.config.request_timeout, state }
    }

    /// Limits a request must meet before anything is written.
    fn check(&self, request: &Request) -> Result<(), Refused> {
        let key = request.key();
        Key::new(key.as_str(), self.config.max_key_bytes)?;
        let bytes = match request {
            Request::Put { value, .. } => value.size(),
            Request::FencedWrite { op: FenceOp::Write { bytes, .. }, .. } => bytes.len(),
            _ => 0,
        };
        if bytes > self.config.max_value_bytes {
            return Err(Refused::ValueTooLarge { bytes, max: self.config.max_value_bytes });
        }
        let level = request.level();
        if let Level::Count(c) = level
            && usize::from(c) > self.config.replicas
        {
            return Err(Refused::Level {
                level: level.to_string(),
                needed: usize::from(c),
                replicas: self.config.replicas,
            });
        }
        Ok(())
    }

    fn needed(&self, request: &Request) -> usize {
        request.level().required(self.config.replicas)
    }

    /// The targets of a request on `replicas`: each reachable replica, and for each unreachable
    /// one the next reachable fallback, with the replica it stands in for.
    fn targets(&self, key: &Key, replicas: &[Address]) -> Vec<(Address, Option<Address>)> {
        let mut fallbacks = self
            .ring
            .preference_list(key.as_bytes())
            .skip(replicas.len())
            .filter(|a| self.reachable(a));
        replicas
            .iter()
            .filter_map(|r| {
                if self.reachable(r) {
                    Some((r.clone(), None))
                } else {
                    fallbacks.next().map(|f| (f.clone(), Some(r.clone())))
                }
            })
            .collect()
    }

    fn coordinate(&mut self, origin: Origin, request: Request, replicas: &[Address], now: Instant) {
        let mut needed = self.needed(&request);
        let key = request.key().clone();
        let targets = if request.is_fenced() {
            // Only the key's own replicas: a stand-in's answer or acknowledgement would let a
            // fenced read miss a write, or a superseded write pass (docs/data.md).
            replicas.iter().filter(|a| self.reachable(a)).map(|a| (a.clone(), None)).collect()
        } else {
            self.targets(&key, replicas)
        };
        if targets.len() < needed {
            let reachable = targets.len();
            return self.finish(origin, Err(DataError::Unavailable { needed, reachable }));
        }
        let targets = if let Request::FencedWrite { op: FenceOp::Claim(_), .. } = &request {
            // A claim needs a quorum of the key's replicas on each ring remembered too, as on
            // the current one: a write acknowledged on that ring is held by a quorum of it
            // until anti-entropy has copied it on (docs/data.md, "When the ring changes").
            if let Some(reachable) = self.past_quorum_missing(&key, needed) {
                return self.finish(origin, Err(DataError::Unavailable { needed, reachable }));
            }
            // It waits for every reachable replica of the key, past ones too: its answer
            // must hold every write acknowledged to an older writer (docs/data.md).
            let all = self.claim_targets(&key, replicas);
            needed = all.len();
            all
        } else {
            targets
        };
        match request {
            Request::Get { .. } | Request::FencedRead { .. } => {
                self.coordinate_read(origin, key, needed, &targets, now);
            }
            Request::FencedWrite { op, .. } => {
                self.coordinate_write(origin, key, needed, &targets, now, |_, object| {
                    let mut fenced = current_fenced(&object)?;
                    fenced.apply(op)?;
                    let context = object.context();
                    Ok((Value::Fenced(fenced), context, object))
                });
            }
            Request::Put { value, context, .. } => {
                self.coordinate_write(origin, key, needed, &targets, now, |_, object| {
                    Ok((value, context, object))
                });
            }
            Request::Update { op, now_ms, .. } => {
                let actor = self.actor;
                self.coordinate_write(origin, key, needed, &targets, now, |_, object| {
                    let kind = op.kind();
                    let mut crdt = current_crdt(&object, kind)?;
                    crdt.apply(actor, now_ms, op).map_err(|e| Refused::Kind(e.to_string()))?;
                    // The new state merges every current value, so it supersedes them all.
                    let context = object.context();
                    Ok((Value::Crdt(crdt), context, object))
                });
            }
        }
    }

    /// A write coordinated here: `make` turns the local object into (value, context, object to
    /// write into); the result gets this node's next dot, is staged here and sent to the other
    /// targets.
    fn coordinate_write(
        &mut self,
        origin: Origin,
        key: Key,
        needed: usize,
        targets: &[(Address, Option<Address>)],
        now: Instant,
        make: impl FnOnce(&Key, Object) -> Result<(Value, VersionVector, Object), Refused>,
    ) {
        let local = match self.storage.get(&key) {
            Ok(o) => o.unwrap_or_default(),
            Err(e) => return self.finish(origin, Err(DataError::Storage(e.to_string()))),
        };
        let (value, context, mut object) = match make(&key, local) {
            Ok(x) => x,
            Err(e) => return self.finish(origin, Err(e.into())),
        };
        let bytes = value.size();
        if bytes > self.config.max_value_bytes {
            let max = self.config.max_value_bytes;
            return self.finish(origin, Err(Refused::ValueTooLarge { bytes, max }.into()));
        }
        object.write(self.actor, &context, value);
        let siblings = object.value_count();
        if siblings > self.config.max_siblings {
            let max = self.config.max_siblings;
            return self.finish(origin, Err(Refused::TooManySiblings { siblings, max }.into()));
        }
        if let Err(e) = self.storage.put(&key, &object) {
            return self.finish(origin, Err(DataError::Storage(e.to_string())));
        }
        self.staged = true;
        self.outputs.push_back(Output::Changed(key.clone()));
        let req = self.next_number();
        let me = self.me.address.clone();
        let context = object.context();
        for (to, hint) in targets.iter().filter(|(a, _)| *a != me) {
            let Some(node) = self.nodes.get(to).cloned() else { continue };
            let message = Message::Write {
                req,
                key: key.clone(),
                object: object.clone(),
                hint: hint.as_ref().map(Address::to_string),
            };
            self.send(node, message);
        }
        let held = fenced_of(&object);
        let fenced = held.is_some().then(Fenced::default);
        self.owed.push(Owed::OwnCopy { req, me, held });
        let waiting = targets.iter().map(|(a, _)| a.clone()).collect();
        let flight = Flight::Write { needed, waiting, acks: 0, context, fenced };
        self.pending.insert(req, self.pending_for(origin, flight, now));
        self.arm_requests();
    }

    fn coordinate_read(
        &mut self,
        origin: Origin,
        key: Key,
        needed: usize,
        targets: &[(Address, Option<Address>)],
        now: Instant,
    ) {
        let req = self.next_number();
        let me = self.me.address.clone();
        let mut answers = BTreeMap::new();
        let mut merged = Object::default();
        match self.held(&key) {
            Ok(local) => {
                if let Some(o) = &local {
                    merged.merge(o);
                }
                answers.insert(me.clone(), local);
            }
            Err(e) => return self.finish(origin, Err(DataError::Storage(e.to_string()))),
        }
        for (to, _) in targets.iter().filter(|(a, _)| *a != me) {
            if let Some(node) = self.nodes.get(to).cloned() {
                self.send(node, Message::Read { req, key: key.clone() });
            }
        }
        let whole =
            targets.len() == self.config.replicas && targets.iter().all(|(_, h)| h.is_none());
        let targets = targets.iter().map(|(a, _)| a.clone()).collect();
        let flight = Flight::Read { key, needed, targets, answers, merged, replied: false, whole };
        self.pending.insert(req, self.pending_for(origin, flight, now));
        self.read_progress(req);
        self.arm_requests();
    }

    /// What this node holds under `key`: its replica and any writes it holds for others.
    fn held(&mut self, key: &Key) -> Result<Option<Object>, S::Error> {
        let mut object = self.storage.get(key)?;
        let holders: Vec<Address> = self
            .hints
            .iter()
            .filter(|(_, keys)| keys.contains(key))
            .map(|(a, _)| a.clone())
            .collect();
        for replica in holders {
            if let Some(h) = self.storage.hint(&replica, key)? {
                object.get_or_insert_with(Object::default).merge(&h);
            }
        }
        Ok(object)
    }

    /// Merges `object` into this replica's copy of `key`; whether it changed.
    fn merge_local(&mut self, key: &Key, object: &Object) -> Result<bool, S::Error> {
        let mut local = self.storage.get(key)?.unwrap_or_default();
        if local.descends(object) {
            return Ok(false);
        }
        local.merge(object);
        self.storage.put(key, &local)?;
        self.staged = true;
        self.outputs.push_back(Output::Changed(key.clone()));
        Ok(true)
    }

    /// A replica's part of a write: merged and staged (into the hints when it stands in for
    /// `hint`), acknowledged after the sync.
    fn take_write(
        &mut self,
        from: &UniqueAddress,
        req: u64,
        key: &Key,
        object: &Object,
        hint: Option<&Address>,
    ) {
        let refused = |e: DataError| Message::WriteAck { req, result: Err(e) };
        if !object.is_well_formed() {
            return self
                .send(from.clone(), refused(DataError::Storage("malformed versions".into())));
        }
        let stored = match hint {
            None => self.fence_check(key, object).and_then(|()| {
                self.merge_local(key, object)
                    .map(|_| ())
                    .map_err(|e| DataError::Storage(e.to_string()))
            }),
            Some(replica) => self.hold(replica, key, object),
        };
        // A replica of a fenced write answers with the fenced value it now holds, which is
        // what it held when it took the write in merged with it.
        let held = match (&stored, hint) {
            (Ok(()), None) => fenced_of(object)
                .and_then(|_| self.storage.get(key).ok().flatten().as_ref().and_then(fenced_of)),
            _ => None,
        };
        match stored {
            Ok(()) => {
                self.staged = true;
                self.owed.push(Owed::Ack { to: from.clone(), req, held });
            }
            Err(e) => self.send(from.clone(), refused(e)),
        }
    }

    /// Refuses a write of a fenced value made under a ballot below this replica's promise.
    fn fence_check(&mut self, key: &Key, object: &Object) -> Result<(), DataError> {
        let Some(incoming) = fenced_of(object) else { return Ok(()) };
        let local = self.storage.get(key).map_err(|e| DataError::Storage(e.to_string()))?;
        match local.as_ref().and_then(fenced_of).and_then(|held| held.refuses(&incoming)) {
            Some(refusal) => Err(DataError::Refused(refusal.into())),
            None => Ok(()),
        }
    }

    /// Keeps a write for the unreachable `replica`.
    fn hold(&mut self, replica: &Address, key: &Key, object: &Object) -> Result<(), DataError> {
        let storage = |e: S::Error| DataError::Storage(e.to_string());
        let known = self.hints.get(replica).is_some_and(|k| k.contains(key));
        if !known && self.hint_count >= self.config.max_hints {
            return Err(DataError::Storage(format!(
                "this node holds {} writes for unreachable replicas (data.max_hints)",
                self.hint_count
            )));
        }
        let mut held = self.storage.hint(replica, key).map_err(storage)?.unwrap_or_default();
        held.merge(object);
        self.storage.put_hint(replica, key, &held).map_err(storage)?;
        if !known {
            self.hints.entry(replica.clone()).or_default().insert(key.clone());
            self.hint_count += 1;
        }
        Ok(())
    }

    fn write_acked(
        &mut self,
        from: &Address,
        req: u64,
        result: Result<(), DataError>,
        held: Option<Fenced>,
        now: Instant,
    ) {
        let Some(p) = self.pending.get_mut(&req) else { return };
        let outcome = match &mut p.state {
            Flight::Write { needed, waiting, acks, context, fenced } => {
                if !waiting.remove(from) {
                    return;
                }
                *acks += usize::from(result.is_ok());
                if let (Some(merged), Some(held), true) = (fenced.as_mut(), &held, result.is_ok()) {
                    merged.merge(held);
                }
                if *acks >= *needed {
                    Some(Ok(match fenced {
                        // A fenced write answers with what its quorum holds (docs/data.md).
                        Some(f) => Reply::Read(Read {
                            values: vec![Value::Fenced(f.clone())],
                            context: context.clone(),
                        }),
                        None => Reply::Written(context.clone()),
                    }))
                } else if *acks + waiting.len() < *needed {
                    // Too few targets are left to answer for it to succeed.
                    Some(Err(result.err().unwrap_or(DataError::Unavailable {
                        needed: *needed,
                        reachable: *acks + waiting.len(),
                    })))
                } else {
                    None
                }
            }
            Flight::Hint { replica, key } => {
                let (replica, key) = (replica.clone(), key.clone());
                self.pending.remove(&req);
                if result.is_ok() && *from == replica {
                    self.hint_delivered(&replica, &key);
                }
                return;
            }
            Flight::Handoff { arc, waiting, entries, kind } => {
                if result.is_err() {
                    // Tried again in a later round.
                    let (arc, kind) = (*arc, *kind);
                    self.pending.remove(&req);
                    self.handoff_failed(arc, kind);
                    return;
                }
                waiting.remove(from);
                if waiting.is_empty() {
                    let (arc, kind) = (*arc, *kind);
                    let entries = std::mem::take(entries);
                    self.pending.remove(&req);
                    match kind {
                        Handing::Leave => self.left_batch(arc, now),
                        Handing::Move => self.handed_off(entries, now),
                        Handing::Copy => {}
                    }
                }
                return;
            }
            Flight::Forwarded | Flight::Read { .. } => return,
        };
        if let Some(result) = outcome
            && let Some(p) = self.pending.remove(&req)
        {
            self.finish(p.origin, result);
            self.arm_requests();
        }
    }

    fn read_answered(&mut self, from: &Address, req: u64, object: Option<Object>) {
        let Some(Pending { state: Flight::Read { targets, answers, merged, .. }, .. }) =
            self.pending.get_mut(&req)
        else {
            return;
        };
        if !targets.contains(from) || answers.contains_key(from) {
            return;
        }
        let object = object.filter(Object::is_well_formed);
        if let Some(o) = &object {
            merged.merge(o);
        }
        answers.insert(from.clone(), object);
        self.read_progress(req);
    }

    /// Replies once enough have answered, repairs every answer behind the merge, and ends the
    /// read when every target has answered.
    fn read_progress(&mut self, req: u64) {
        let Some(p) = self.pending.get_mut(&req) else { return };
        let Flight::Read { key, needed, targets, answers, merged, replied, whole } = &mut p.state
        else {
            return;
        };
        let reply = (!*replied && answers.len() >= *needed).then(|| Read::of(merged));
        if reply.is_some() {
            *replied = true;
        }
        let done = answers.len() >= targets.len();
        let (key, merged_now) = (key.clone(), merged.clone());
        let stale: Vec<Address> = if *replied {
            answers
                .iter()
                .filter(|(_, o)| o.as_ref().is_none_or(|o| !o.descends(merged)))
                .map(|(a, _)| a.clone())
                .collect()
        } else {
            Vec::new()
        };
        *whole &= stale.is_empty();
        // Every replica answered with the same versions, nothing but tombstones: they may go.
        let reap = (done
            && *whole
            && merged.value_count() > 0
            && merged.values().all(|(_, v)| *v == Value::Tombstone))
        .then(|| (targets.clone(), maintenance::digest(&key, merged)));
        let origin = p.origin.clone();
        if let Some(read) = reply {
            self.finish(origin, Ok(Reply::Read(read)));
        }
        if !merged_now.is_empty() {
            for a in &stale {
                self.repair(a, &key, &merged_now);
            }
        }
        if let Some(Pending { state: Flight::Read { answers, .. }, .. }) =
            self.pending.get_mut(&req)
        {
            // Repaired answers now hold the merge.
            for a in stale {
                answers.insert(a, Some(merged_now.clone()));
            }
        }
        if done {
            self.pending.remove(&req);
        }
        if let Some((targets, digest)) = reap {
            for t in &targets {
                if *t == self.me.address {
                    self.reap(&key, digest);
                } else if let Some(node) = self.nodes.get(t).cloned() {
                    self.send(node, Message::Reap { key: key.clone(), digest });
                }
            }
        }
    }

    /// Drops the tombstones of `key`'s versions, if they are still the ones whose digest is
    /// `digest`; the context stays, so no value they superseded can come back (a late hint,
    /// a stale replica's repair).
    fn reap(&mut self, key: &Key, digest: u64) {
        let Ok(Some(mut local)) = self.storage.get(key) else { return };
        if maintenance::digest(key, &local) != digest {
            return;
        }
        local.clear_values();
        if self.storage.put(key, &local).is_ok() {
            self.staged = true;
        }
    }

    fn repair(&mut self, at: &Address, key: &Key, object: &Object) {
        if *at == self.me.address {
            let _ = self.merge_local(key, object);
        } else if let Some(node) = self.nodes.get(at).cloned() {
            self.send(node, Message::Repair { key: key.clone(), object: object.clone() });
        }
    }

    fn finish(&mut self, origin: Origin, result: Result<Reply, DataError>) {
        match origin {
            Origin::Local(id) => self.outputs.push_back(Output::Reply { id, result }),
            Origin::Remote(node, req) => self.send(node, Message::ForwardReply { req, result }),
        }
    }

    fn expired(&mut self, p: Pending) {
        let result = match p.state {
            Flight::Forwarded => Err(DataError::Timeout { needed: 1, got: 0 }),
            Flight::Write { needed, acks, .. } => Err(DataError::Timeout { needed, got: acks }),
            Flight::Read { needed, answers, replied, .. } => {
                if replied {
                    return;
                }
                Err(DataError::Timeout { needed, got: answers.len() })
            }
            Flight::Handoff { arc, kind, .. } => {
                // Sent again in a later round.
                self.handoff_failed(arc, kind);
                return;
            }
            Flight::Hint { .. } => return,
        };
        self.finish(p.origin, result);
    }

    fn arm_requests(&mut self) {
        match self.pending.values().map(|p| p.deadline).min() {
            Some(at) => self.timers.set(StoreTimer::Requests, at),
            None => self.timers.clear(StoreTimer::Requests),
        }
    }

    /// Offers every held write whose replica is reachable again and not already being offered.
    fn offer_hints(&mut self, now: Instant) {
        let offered: BTreeSet<(Address, Key)> = self
            .pending
            .values()
            .filter_map(|p| match &p.state {
                Flight::Hint { replica, key } => Some((replica.clone(), key.clone())),
                _ => None,
            })
            .collect();
        let due: Vec<(Address, Key)> = self
            .hints
            .iter()
            .filter(|(replica, _)| self.reachable(replica) && **replica != self.me.address)
            .flat_map(|(replica, keys)| keys.iter().map(move |k| (replica.clone(), k.clone())))
            .filter(|x| !offered.contains(x))
            .collect();
        for (replica, key) in due {
            let Ok(Some(object)) = self.storage.hint(&replica, &key) else { continue };
            let Some(node) = self.nodes.get(&replica).cloned() else { continue };
            let req = self.next_number();
            let flight = Flight::Hint { replica, key: key.clone() };
            self.pending.insert(req, self.pending_for(Origin::Local(RequestId(0)), flight, now));
            self.send(node, Message::Write { req, key, object, hint: None });
        }
        self.arm_requests();
    }

    fn hint_delivered(&mut self, replica: &Address, key: &Key) {
        if self.storage.remove_hint(replica, key).is_err() {
            return;
        }
        self.staged = true;
        if let Some(keys) = self.hints.get_mut(replica)
            && keys.remove(key)
        {
            self.hint_count -= 1;
            if keys.is_empty() {
                self.hints.remove(replica);
            }
        }
    }
}

/// The CRDT of `kind` that `object`'s current values merge to (empty when there is none);
/// refused when a current value is anything else.
fn current_crdt(object: &Object, kind: CrdtKind) -> Result<crate::crdt::Crdt, Refused> {
    let mut crdt = kind.empty();
    for v in Read::of(object).values {
        match v {
            Value::Crdt(c) if c.kind() == kind => {
                let _ = crdt.merge(&c);
            }
            Value::Crdt(c) => {
                return Err(Refused::Kind(format!(
                    "the key holds a {}, not a {}",
                    c.kind().name(),
                    kind.name()
                )));
            }
            Value::Fenced(_) => {
                return Err(Refused::Kind(format!(
                    "the key holds a fenced value (an entity's state), not a {}",
                    kind.name()
                )));
            }
            _ => {
                return Err(Refused::Kind(format!(
                    "the key holds bytes, not a {}; delete it first",
                    kind.name()
                )));
            }
        }
    }
    Ok(crdt)
}

/// The key a message is about, when it is about one.
/// The fenced value of `object` (its fenced siblings merged), if it holds one.
fn fenced_of(object: &Object) -> Option<Fenced> {
    let mut found: Option<Fenced> = None;
    for (_, v) in object.values() {
        if let Value::Fenced(f) = v {
            match &mut found {
                Some(m) => m.merge(f),
                None => found = Some(f.clone()),
            }
        }
    }
    found
}

/// The fenced value to apply an operation to: the current one, an empty one when the key is
/// absent or deleted; refused when the key holds another kind of value.
fn current_fenced(object: &Object) -> Result<Fenced, Refused> {
    let mut fenced = Fenced::default();
    for v in Read::of(object).values {
        match v {
            Value::Fenced(f) => fenced.merge(&f),
            Value::Crdt(c) => {
                return Err(Refused::Kind(format!(
                    "the key holds a {}, not a fenced value",
                    c.kind().name()
                )));
            }
            _ => {
                return Err(Refused::Kind(
                    "the key holds bytes, not a fenced value; delete it first".to_owned(),
                ));
            }
        }
    }
    Ok(fenced)
}

fn message_key(m: &Message) -> Option<&Key> {
    match m {
        Message::Write { key, .. }
        | Message::Read { key, .. }
        | Message::Repair { key, .. }
        | Message::Reap { key, .. } => Some(key),
        Message::Forward { request, .. } => Some(request.key()),
        _ => None,
    }
}

mod maintenance;
#[cfg(test)]
mod tests;
