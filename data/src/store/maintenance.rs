//! What a replica does without being asked: anti-entropy with the other replicas of its arcs,
//! and handoff of the keys it holds but no longer replicates (`docs/data.md`).

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::time::Instant;

use convoke_membership::Address;

use super::{Flight, Handing, Origin, RINGS_REPEAT, RequestId, Store};
use crate::message::{Message, SpanDigest};
use crate::object::{Key, Object};
use crate::ring::{Arc, Ring, Span, hash};
use crate::storage::Storage;
use crate::version::ActorId;

/// A span holding at most this many keys on both sides is compared key by key; a larger one is
/// split into [`FANOUT`] finer spans first.
pub(super) const KEYS_AT_ONCE: u64 = 128;
/// How many finer spans a differing span is split into.
const FANOUT: u64 = 16;
/// Objects read per page of a scan.
const PAGE: usize = 1024;
/// The most spans of one digest message a replica looks at (a round sends a few per arc).
const MAX_SPANS: usize = 1024;
/// Handoff batches in flight at once (each of one arc, to its replicas); a batch acknowledged by
/// all of them is followed at once by the next.
const HANDOFFS_IN_FLIGHT: usize = 4;

/// The digest of one object under one key: what anti-entropy compares.
pub(super) fn digest(key: &Key, object: &Object) -> u64 {
    let mut bytes = key.as_bytes().to_vec();
    bytes.push(0);
    bytes.extend(postcard::to_stdvec(object).unwrap_or_default());
    hash(&bytes)
}

/// What a node about to leave hands over to the ring without it (see [`Store::begin_leave`]).
#[derive(Debug)]
pub(super) struct Leave {
    /// The ring of the members but this node.
    ring: Ring,
    /// Arcs of that ring whose keys held here every one of their replicas has acknowledged
    /// (or of which nothing is held here).
    done: BTreeSet<Arc>,
    /// Arcs whose batches are in flight, with how many have not been acknowledged by all.
    in_flight: BTreeMap<Arc, usize>,
    /// Whether the other members were told that every arc was acknowledged.
    announced: bool,
}

impl<S: Storage> Store<S> {
    /// Starts handing every key this node holds to its replicas on the ring without this node,
    /// ahead of a graceful leave: a node replaced by one with an empty disk (a rolling update)
    /// takes no acknowledged write with it. Each arc's keys go to all of the arc's replicas
    /// once they are all reachable; this node keeps its copies (back on its address, it owns
    /// the same arcs again). [`Store::leave_remaining`] says when every arc has been acknowledged; a change
    /// of the members starts over on the new ring. Writes this node takes after its arcs went
    /// are on a quorum of replicas without it. See docs/data.md, "Handoff".
    pub fn begin_leave(&mut self, now: Instant) {
        if self.leaving.is_none() {
            self.leaving = Some(Leave {
                ring: self.ring_without_me(),
                done: BTreeSet::new(),
                in_flight: BTreeMap::new(),
                announced: false,
            });
        }
        self.hand_off(now);
        self.announce_handed_over(now);
    }

    /// Once every arc is acknowledged, tells every other member so, once: they count this
    /// node as gone gracefully when it leaves, and a claim no longer waits for it. A node
    /// that leaves before (its handoff timed out) stays an absent holder for them
    /// (docs/data.md, "Absent holders").
    fn announce_handed_over(&mut self, now: Instant) {
        if !self.handed_over() || self.leaving.as_ref().is_none_or(|l| l.announced) {
            return;
        }
        if let Some(leave) = &mut self.leaving {
            leave.announced = true;
        }
        let message = self.rings_message(now, false);
        let others: Vec<_> =
            self.nodes.values().filter(|n| n.address != self.me.address).cloned().collect();
        for n in others {
            self.send(n, message.clone());
        }
    }

    /// After [`Store::begin_leave`]: how many arcs of the ring without this node still wait for
    /// its keys to be acknowledged (0: it may leave without taking an acknowledged write
    /// away). `None` before `begin_leave`.
    pub fn leave_remaining(&self) -> Option<usize> {
        let leave = self.leaving.as_ref()?;
        Some(leave.ring.arcs().iter().filter(|a| !leave.done.contains(a)).count())
    }

    fn ring_without_me(&self) -> Ring {
        let others = self.ring.members().iter().filter(|a| **a != self.me.address).cloned();
        Ring::new(others, self.config.vnodes)
    }

    /// The members changed: a leave under way starts over on the new ring without this node.
    pub(super) fn leave_ring_changed(&mut self) {
        let ring = self.ring_without_me();
        if let Some(leave) = &mut self.leaving
            && leave.ring.members() != ring.members()
        {
            *leave =
                Leave { ring, done: BTreeSet::new(), in_flight: BTreeMap::new(), announced: false };
        }
    }

    /// Every replica acknowledged one batch of `arc` handed over for the leave.
    pub(super) fn left_batch(&mut self, arc: Arc, now: Instant) {
        if let Some(leave) = &mut self.leaving
            && let Some(n) = leave.in_flight.get_mut(&arc)
        {
            *n -= 1;
            if *n == 0 {
                leave.in_flight.remove(&arc);
                leave.done.insert(arc);
            }
        }
        self.hand_off(now);
        self.announce_handed_over(now);
    }

    /// A batch of `arc` handed over or copied was refused or timed out. Handed over for the
    /// leave, or copied, the whole arc goes again in a later round; moved, the batch does.
    pub(super) fn handoff_failed(&mut self, arc: Arc, kind: Handing) {
        match kind {
            Handing::Leave => {
                if let Some(leave) = &mut self.leaving {
                    leave.in_flight.remove(&arc);
                }
            }
            Handing::Copy => {
                self.copied.remove(&arc);
            }
            Handing::Move => {}
        }
    }

    /// The next arcs of the ring without this node, [`HANDOFFS_IN_FLIGHT`] at once, each sent
    /// whole (in batches of [`DataConfig::handoff_batch`](crate::DataConfig)) to all its
    /// replicas once they are all reachable.
    fn hand_over_for_leave(&mut self, now: Instant) {
        let Some(leave) = &self.leaving else { return };
        let mut free = HANDOFFS_IN_FLIGHT.saturating_sub(leave.in_flight.len());
        let todo: Vec<(Arc, Vec<Address>)> = leave
            .ring
            .arcs()
            .into_iter()
            .filter(|a| !leave.done.contains(a) && !leave.in_flight.contains_key(a))
            .map(|a| {
                let replicas =
                    leave.ring.preference_list_at(a.end).take(self.config.replicas).cloned();
                (a, replicas.collect())
            })
            .collect();
        for (arc, replicas) in todo {
            if free == 0 {
                break;
            }
            let Some(held) = self.held_in_arc(arc) else { return };
            let Some(leave) = self.leaving.as_mut() else { return };
            if held.is_empty() {
                leave.done.insert(arc);
                continue;
            }
            // Absent holders are waited for too: a write held here and by one replica only,
            // handed to the present replicas, could be on no quorum of the ring without this
            // node once that replica fails (docs/data.md, "Handoff").
            if replicas.is_empty() || !replicas.iter().all(|a| self.reachable(a)) {
                continue;
            }
            free -= 1;
            let batches = self.send_whole(arc, &replicas, &held, Handing::Leave, now);
            if let Some(leave) = self.leaving.as_mut() {
                leave.in_flight.insert(arc, batches);
            }
        }
        self.arm_requests();
    }

    /// Sends `held`, the keys of `arc`, to `replicas` in batches of
    /// [`DataConfig::handoff_batch`](crate::DataConfig), each awaited as a handoff of `kind`;
    /// returns how many batches went.
    fn send_whole(
        &mut self,
        arc: Arc,
        replicas: &[Address],
        held: &[(Key, Object)],
        kind: Handing,
        now: Instant,
    ) -> usize {
        let batches = held.chunks(self.config.handoff_batch.max(1));
        let count = batches.len();
        for entries in batches.map(<[_]>::to_vec) {
            let req = self.next_number();
            for p in replicas {
                self.send_to(p, Message::Handoff { req, entries: entries.clone() });
            }
            let waiting = replicas.iter().cloned().collect();
            let flight = Flight::Handoff { arc, waiting, entries, kind };
            let pending = self.pending_for(Origin::Local(RequestId(0)), flight, now);
            self.pending.insert(req, pending);
        }
        count
    }

    /// The arcs whose replicas include this node, and those of its keys that it does not.
    fn arcs(&self) -> (Vec<Arc>, Vec<Arc>) {
        let n = self.config.replicas;
        self.ring.arcs().into_iter().partition(|a| {
            self.ring.preference_list_at(a.end).take(n).any(|m| *m == self.me.address)
        })
    }

    /// The other replicas of `arc`, and whether every one of them is reachable.
    fn peers_of(&self, arc: Arc) -> (Vec<Address>, bool) {
        let replicas: Vec<Address> = self
            .ring
            .preference_list_at(arc.end)
            .take(self.config.replicas)
            .filter(|a| **a != self.me.address)
            .cloned()
            .collect();
        let all = replicas.iter().all(|a| self.reachable(a));
        (replicas, all)
    }

    /// One maintenance round: the next [`DataConfig::arcs_per_round`](crate::DataConfig) arcs
    /// this node replicates are compared, each with one of its other replicas in turn, and a
    /// batch of keys it holds but no longer replicates is handed off.
    pub(super) fn maintain(&mut self, now: Instant) {
        self.expire_absent(now);
        let (mine, _) = self.arcs();
        let mut to_peer: BTreeMap<Address, Vec<SpanDigest>> = BTreeMap::new();
        for _ in 0..self.config.arcs_per_round.min(mine.len()) {
            self.ae_next = self.ae_next.wrapping_add(1);
            let arc = mine[self.ae_next % mine.len()];
            let peers: Vec<Address> = self
                .ring
                .preference_list_at(arc.end)
                .take(self.config.replicas)
                .filter(|a| **a != self.me.address && self.reachable(a))
                .cloned()
                .collect();
            if peers.is_empty() {
                continue;
            }
            let peer = peers[(self.ae_next / mine.len()) % peers.len()].clone();
            let spans: Vec<SpanDigest> = arc.spans().filter_map(|s| self.span_digest(s)).collect();
            to_peer.entry(peer).or_default().extend(spans);
        }
        let said = self.rings_digest();
        for (peer, spans) in to_peer {
            self.exchanged.insert(peer.clone(), now);
            self.send_to(&peer, Message::Digests { spans });
            if let Some(said) = said {
                self.tell_rings(&peer, said, now);
            }
        }
        self.hand_off(now);
    }

    /// A digest of the absent and departed members, while there are any to tell (or this node
    /// has handed its keys over on leaving); what [`Self::tell_rings`] compares.
    fn rings_digest(&self) -> Option<u64> {
        if self.absent.is_empty() && self.left.is_empty() && !self.handed_over() {
            return None;
        }
        let mut hasher = std::hash::DefaultHasher::new();
        (self.absent.keys().collect::<Vec<_>>(), self.left.keys().collect::<Vec<_>>())
            .hash(&mut hasher);
        Some(hasher.finish())
    }

    /// Tells `peer` the absent and departed members (`said` is their digest) when it was not
    /// told them yet, or not for [`RINGS_REPEAT`] rounds in case the word was lost.
    fn tell_rings(&mut self, peer: &Address, said: u64, now: Instant) {
        let again = self.config.anti_entropy_interval * RINGS_REPEAT;
        let told = self.rings_told.get(peer).is_some_and(|(digest, at)| {
            *digest == said && now.saturating_duration_since(*at) < again
        });
        if !told {
            self.rings_told.insert(peer.clone(), (said, now));
            self.send_to(peer, self.rings_message(now, false));
        }
    }

    /// Digest and count of the keys held in `span`; `None` when the storage fails.
    fn span_digest(&mut self, span: Span) -> Option<SpanDigest> {
        let (mut sum, mut count) = (0u64, 0u64);
        let mut after: Option<Key> = None;
        loop {
            let page = self.storage.scan(span, after.as_ref(), PAGE).ok()?;
            for (k, o) in &page {
                sum = sum.wrapping_add(digest(k, o));
                count += 1;
            }
            if page.len() < PAGE {
                return Some(SpanDigest { span, digest: sum, count });
            }
            after = page.last().map(|(k, _)| k.clone());
        }
    }

    /// Keys held in `arc` with their objects; `None` when the storage fails.
    fn held_in_arc(&mut self, arc: Arc) -> Option<Vec<(Key, Object)>> {
        let mut held = Vec::new();
        for span in arc.spans() {
            held.extend(self.held_in(span)?);
        }
        Some(held)
    }

    /// Keys held in `span` with their objects; `None` when the storage fails.
    fn held_in(&mut self, span: Span) -> Option<Vec<(Key, Object)>> {
        let mut all = Vec::new();
        loop {
            let page = self.storage.scan(span, all.last().map(|(k, _)| k), PAGE).ok()?;
            let full = page.len() == PAGE;
            all.extend(page);
            if !full {
                return Some(all);
            }
        }
    }

    /// A peer's digests: spans that differ are answered with finer digests, or, when small on
    /// both sides, with this node's keys.
    pub(super) fn digests_received(&mut self, from: &Address, spans: Vec<SpanDigest>) {
        let mut finer = Vec::new();
        for theirs in spans.into_iter().filter(|d| d.span.is_valid()).take(MAX_SPANS) {
            let Some(mine) = self.span_digest(theirs.span) else { continue };
            if mine.digest == theirs.digest && mine.count == theirs.count {
                continue;
            }
            let single = theirs.span.from == theirs.span.to;
            if single || (mine.count <= KEYS_AT_ONCE && theirs.count <= KEYS_AT_ONCE) {
                let Some(held) = self.held_in(theirs.span) else { continue };
                let keys = held.iter().map(|(k, o)| (k.clone(), digest(k, o))).collect();
                self.send_to(from, Message::Keys { span: theirs.span, keys });
            } else {
                finer.extend(
                    theirs.span.split(FANOUT).into_iter().filter_map(|s| self.span_digest(s)),
                );
            }
        }
        if !finer.is_empty() {
            self.send_to(from, Message::Digests { spans: finer });
        }
    }

    /// A peer's keys in a span: what it lacks or holds differently is sent to it, what this
    /// node lacks or holds differently is asked of it.
    pub(super) fn keys_received(&mut self, from: &Address, span: Span, keys: Vec<(Key, u64)>) {
        if !span.is_valid() {
            return;
        }
        let Some(held) = self.held_in(span) else { return };
        let theirs: BTreeMap<Key, u64> =
            keys.into_iter().filter(|(k, _)| span.contains(hash(k.as_bytes()))).collect();
        let mut pull = Vec::new();
        let mut mine = BTreeSet::new();
        for (k, o) in held {
            let d = digest(&k, &o);
            if theirs.get(&k) != Some(&d) {
                self.send_to(from, Message::Repair { key: k.clone(), object: o });
                if theirs.contains_key(&k) {
                    pull.push(k.clone());
                }
            }
            mine.insert(k);
        }
        pull.extend(theirs.into_keys().filter(|k| !mine.contains(k)));
        if !pull.is_empty() {
            self.send_to(from, Message::Pull { keys: pull });
        }
    }

    /// A peer asks for objects: each held one goes as a repair.
    pub(super) fn pull_received(&mut self, from: &Address, keys: Vec<Key>) {
        for k in keys {
            if let Ok(Some(o)) = self.storage.get(&k) {
                self.send_to(from, Message::Repair { key: k, object: o });
            }
        }
    }

    /// Hands off the keys held in arcs this node does not replicate, each arc's to every one of
    /// its replicas while all are reachable: batches of
    /// [`DataConfig::handoff_batch`](crate::DataConfig) keys, [`HANDOFFS_IN_FLIGHT`] at once,
    /// one arc each. While one is not, the arc is copied whole to those that are, and kept:
    /// a write acknowledged here is then on a quorum of the new replicas while one is away
    /// (docs/data.md, "Handoff").
    pub(super) fn hand_off(&mut self, now: Instant) {
        if self.leaving.is_some() {
            return self.hand_over_for_leave(now);
        }
        // A node off the ring (leaving, or restarting) keeps what it holds: back on its address
        // it owns the same arcs again; gone for good, the remaining replicas bring the new ones
        // up to date by anti-entropy.
        if !self.ring.members().contains(&self.me.address) {
            return;
        }
        let busy: BTreeSet<Arc> = self
            .pending
            .values()
            .filter_map(|p| match &p.state {
                Flight::Handoff { arc, .. } => Some(*arc),
                _ => None,
            })
            .collect();
        let (_, others) = self.arcs();
        let mut free = HANDOFFS_IN_FLIGHT.saturating_sub(busy.len());
        if !self.copied.is_empty() {
            let others: BTreeSet<&Arc> = others.iter().collect();
            self.copied.retain(|a, _| others.contains(a));
        }
        for arc in others.iter().filter(|a| !busy.contains(a)) {
            if free == 0 {
                break;
            }
            let (peers, all) = self.peers_of(*arc);
            if !all {
                let present: BTreeSet<Address> =
                    peers.into_iter().filter(|a| self.reachable(a)).collect();
                if present.is_empty() || self.copied.get(arc) == Some(&present) {
                    continue;
                }
                let Some(held) = self.held_in_arc(*arc) else { return };
                if held.is_empty() {
                    continue;
                }
                free -= 1;
                let present: Vec<Address> = present.into_iter().collect();
                self.send_whole(*arc, &present, &held, Handing::Copy, now);
                self.copied.insert(*arc, present.into_iter().collect());
                continue;
            }
            self.copied.remove(arc);
            let mut batch = Vec::new();
            for span in arc.spans() {
                let left = self.config.handoff_batch - batch.len();
                match self.storage.scan(span, None, left) {
                    Ok(page) => batch.extend(page),
                    Err(_) => return,
                }
            }
            if batch.is_empty() {
                continue;
            }
            if peers.is_empty() {
                continue;
            }
            free -= 1;
            self.send_whole(*arc, &peers, &batch, Handing::Move, now);
        }
        self.arm_requests();
    }

    /// Every replica has the handed-off keys: those not written here since are dropped, and
    /// this node takes a new actor, since it no longer holds the dots it gave them.
    pub(super) fn handed_off(&mut self, entries: Vec<(Key, Object)>, now: Instant) {
        let mut dropped = false;
        for (k, sent) in entries {
            if let Ok(Some(now)) = self.storage.get(&k)
                && now == sent
                && self.storage.remove(&k).is_ok()
            {
                dropped = true;
            }
        }
        if dropped {
            self.staged = true;
            self.epoch += 1;
            let mut bytes = self.me.uid.get().to_be_bytes().to_vec();
            bytes.extend(self.epoch.to_be_bytes());
            self.actor = ActorId(hash(&bytes));
        }
        // The next batch goes at once.
        self.hand_off(now);
    }

    /// A handoff from a node that no longer replicates these keys: merged, acknowledged after
    /// the sync.
    pub(super) fn handoff_received(
        &mut self,
        from: &convoke_membership::UniqueAddress,
        req: u64,
        entries: Vec<(Key, Object)>,
    ) {
        for (k, o) in &entries {
            if k.as_bytes().len() > self.config.max_key_bytes || !o.is_well_formed() {
                continue;
            }
            if let Err(e) = self.merge_local(k, o) {
                let result = Err(crate::message::DataError::Storage(e.to_string()));
                return self.send(from.clone(), Message::WriteAck { req, result });
            }
        }
        self.staged = true;
        self.owed.push(super::Owed::Ack { to: from.clone(), req, held: None });
    }

    fn send_to(&mut self, to: &Address, message: Message) {
        if let Some(node) = self.nodes.get(to).cloned() {
            self.send(node, message);
        }
    }
}
