//! The replicated store in the simulation: every process runs the runtime's sans-IO
//! [`Store`] over a modelled disk, clients read and write through random
//! processes, and what they were told is checked against what the replicas hold.
//!
//! The model:
//! - Every incarnation runs a `Store` fed the members of its core's gossip (and their
//!   reachability) whenever they change; its messages are encoded as the runtime sends them and
//!   ride the store's lane of the modelled network (a TCP connection per pair: nothing lost,
//!   in order; partitions drop, clogs hold, a paused process queues).
//! - The disk is a [`MemoryStorage`]: a write staged by an input reaches it only at the sync,
//!   which comes a drawn disk delay later; acknowledgements leave only after it. A crash loses
//!   what was staged and not synced; the next incarnation in the slot opens the same disk. A
//!   process that shuts down syncs first, as the runtime's driver does.
//! - The load: every [`OP_INTERVAL`] a running process, drawn from the layer's random stream,
//!   reads or writes (one write in five a delete) one of [`KEYS`] keys at quorum (once the
//!   cluster has settled after the heal, only the lower half of them, so that the upper half
//!   converges without a read). A write carries the context of that
//!   process's last read of the key (read-modify-write), or none; its value is the write's
//!   number, so what a read returns names the writes.
//!
//! The checks (`docs/data.md`, "Simulation"):
//! - **D4** at every read: two values returned side by side (siblings) come from writes that
//!   were concurrent: neither write's context covered what the other was acknowledged with.
//! - **D2** once the membership has settled after the heal: a read issued after a write that was
//!   issued and acknowledged in that calm (both at quorum, R + W > N) returns it or a descendant
//!   (its context covers the write's).
//! - **D1** after every crash, every [`D1_INTERVAL`] of the load and at the end: no acknowledged
//!   write is lost: for each key, the versions on the disks cover every acknowledged write's
//!   context (no fault here destroys a synced disk). Disks change by a crash or by a store's own
//!   writes; a store only drops a copy once another disk holds it, so a loss between two checks
//!   is still missing at the next one.
//! - **D3** at the end, after the load stopped: every key's replicas that run hold the same
//!   versions within the anti-entropy bound (a replica whose process is gone is an absent
//!   holder, whose copy waits for its return).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use convoke_data::version::VersionVector;
use convoke_data::{DataConfig, Key, MemoryStorage, Object, RequestId, Storage, Store, Value};
use convoke_membership::UniqueAddress;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::delivery::DataInFlight;
use crate::queue::TimerSlot;
use crate::trace::TraceHash;

/// Keys the load addresses: few, so that clients contend.
pub const KEYS: u32 = 40;
/// How often the load issues a request.
pub const OP_INTERVAL: Duration = Duration::from_millis(50);
/// How often, in virtual time, D1 is checked while the load runs (and after every crash).
pub const D1_INTERVAL: Duration = Duration::from_secs(1);
/// The longest a sync takes to reach the disk.
pub const MAX_DISK_DELAY: Duration = Duration::from_millis(5);

/// The store's settings in a simulated cluster: fewer tokens and shorter intervals than by
/// default, so that ranges are compared several times within a run.
pub fn config() -> DataConfig {
    DataConfig {
        vnodes: 16,
        request_timeout: Duration::from_secs(2),
        hint_interval: Duration::from_secs(1),
        anti_entropy_interval: Duration::from_secs(1),
        arcs_per_round: 8,
        max_siblings: 64,
        ..DataConfig::default()
    }
}

/// How long after the load stopped every key's replicas must agree: two full anti-entropy
/// cycles (a node compares each of its arcs with one peer per cycle, taking the peers in turn,
/// and an arc has N - 1 of them), the last requests' timeout, and a hint interval.
pub fn convergence_bound(c: &DataConfig) -> Duration {
    let arcs = c.replicas as u32 * c.vnodes;
    let rounds = arcs.div_ceil(c.arcs_per_round.max(1) as u32);
    c.anti_entropy_interval * (2 * rounds * (c.replicas as u32).max(2) + 2)
        + c.request_timeout
        + c.hint_interval
}

/// The store of one slot.
#[derive(Debug, Default)]
pub struct SlotData {
    /// The current incarnation, while a process runs.
    pub node: Option<UniqueAddress>,
    /// Its machine (which holds the disk).
    pub store: Option<Store<MemoryStorage>>,
    /// The disk while no process runs in the slot.
    pub disk: MemoryStorage,
    /// The machine's timer.
    pub(crate) timer: TimerSlot,
    /// The pending sync.
    pub(crate) sync: TimerSlot,
    /// Messages that arrived while the process was paused.
    pub(crate) inbox: Vec<DataInFlight>,
    /// Requests of the load in flight on this incarnation: the store's id → the op's number.
    pub(crate) requests: BTreeMap<RequestId, usize>,
    /// The context of this incarnation's last read of each key.
    pub(crate) read_contexts: BTreeMap<u32, VersionVector>,
    /// This incarnation was told to leave: its store hands its keys over first.
    pub(crate) leaving: bool,
}

/// What a client asked.
#[derive(Clone, Debug)]
pub enum OpKind {
    /// A read at quorum.
    Read,
    /// A write of value `value` (the op's number) with `context`.
    Write {
        /// The context the client passed.
        context: VersionVector,
    },
}

/// What a request came back with.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// A read: the writes whose values it returned, and its context.
    Read(Vec<u64>, VersionVector),
    /// A write: the context it was acknowledged with.
    Written(VersionVector),
    /// A failure (unavailable, timeout, refused, or the process ended).
    Failed(String),
}

/// One request of the load.
#[derive(Clone, Debug)]
pub struct Op {
    /// The key's number.
    pub key: u32,
    /// The slot it was made on.
    pub slot: usize,
    /// When it was issued.
    pub issued: Duration,
    /// What it asked.
    pub kind: OpKind,
    /// When it ended, and how.
    pub outcome: Option<(Duration, Outcome)>,
}

/// What the store layer did in a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DataStats {
    /// Reads issued.
    pub reads: u64,
    /// Writes issued.
    pub writes: u64,
    /// Writes acknowledged.
    pub writes_acked: u64,
    /// Reads answered.
    pub reads_answered: u64,
    /// Reads that returned siblings.
    pub sibling_reads: u64,
    /// Requests that failed.
    pub failed: u64,
    /// Store messages sent.
    pub messages: u64,
    /// Their encoded bytes.
    pub bytes: u64,
    /// Syncs that reached the disk.
    pub syncs: u64,
    /// Staged writes lost to crashes (their syncs had not come).
    pub crashes_with_unsynced: u64,
    /// Reads D2 checked.
    pub reads_checked: u64,
    /// Keys D3 compared at the end.
    pub keys_compared: u64,
    /// Keys D1 checked (after crashes, under load and at the end).
    pub d1_checks: u64,
}

/// Every slot's store, the load's history, the counters and the trace hash.
#[derive(Debug)]
pub struct DataLayer {
    config: DataConfig,
    slots: Vec<SlotData>,
    rng: ChaCha8Rng,
    ops: Vec<Op>,
    /// Whether the load issues requests.
    pub load: bool,
    /// From when D2 holds reads to the writes issued and acknowledged before them.
    pub calm_since: Option<Duration>,
    /// What happened so far.
    pub stats: DataStats,
    trace: TraceHash,
    /// Per key, the merge of the contexts its writes were acknowledged with (what D1 holds the
    /// disks to; a version vector covers each of them exactly when it covers their merge).
    acked: BTreeMap<u32, VersionVector>,
    /// When D1 is next checked under load.
    next_d1: Duration,
}

/// The key of number `k`.
pub fn key(k: u32) -> Key {
    Key::new(format!("k{k}"), usize::MAX).unwrap_or_else(|_| unreachable!("not empty"))
}

/// The write numbers a read's values name.
fn write_numbers(values: &[Value]) -> Vec<u64> {
    values
        .iter()
        .filter_map(|v| match v {
            Value::Bytes(b) => b.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes),
            _ => None,
        })
        .collect()
}

impl DataLayer {
    /// `n` slots with store settings `config`, the load drawn from `rng`.
    pub fn new(n: usize, config: DataConfig, rng: ChaCha8Rng) -> Self {
        Self {
            config,
            slots: (0..n).map(|_| SlotData::default()).collect(),
            rng,
            ops: Vec::new(),
            load: true,
            calm_since: None,
            stats: DataStats::default(),
            trace: TraceHash::new(),
            acked: BTreeMap::new(),
            next_d1: D1_INTERVAL,
        }
    }

    /// The settings.
    pub fn config(&self) -> &DataConfig {
        &self.config
    }

    /// One slot's store.
    pub fn slot(&self, i: usize) -> &SlotData {
        &self.slots[i]
    }

    pub(crate) fn slot_mut(&mut self, i: usize) -> &mut SlotData {
        &mut self.slots[i]
    }

    /// The load's history.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// The layer's trace hash.
    pub fn trace_hash(&self) -> u64 {
        std::hash::Hasher::finish(&self.trace)
    }

    pub(crate) fn hash(&mut self, now: Duration, slot: usize, what: &str) {
        self.trace.step(now, slot, what);
    }

    /// A disk delay for the next sync.
    pub(crate) fn disk_delay(&mut self) -> Duration {
        let max = u64::try_from(MAX_DISK_DELAY.as_micros()).unwrap_or(u64::MAX);
        Duration::from_micros(self.rng.random_range(100..=max))
    }

    /// The load's next request among `running` slots: (slot, op number, the request).
    pub(crate) fn draw_op(
        &mut self,
        running: &[usize],
        now: Duration,
    ) -> Option<(usize, usize, convoke_data::Request)> {
        if running.is_empty() || !self.load {
            return None;
        }
        let slot = running[self.rng.random_range(0..running.len())];
        // In the calm the load keeps to the lower half of the keys: the upper half, last written
        // under faults, must converge by anti-entropy and hints alone, with no read to repair it.
        let keys = if self.calm_since.is_some() { KEYS / 2 } else { KEYS };
        let k = self.rng.random_range(0..keys);
        let n = self.ops.len();
        let read = self.rng.random_bool(0.5);
        let (kind, request) = if read {
            self.stats.reads += 1;
            (
                OpKind::Read,
                convoke_data::Request::Get { key: key(k), r: convoke_data::Level::Quorum },
            )
        } else {
            self.stats.writes += 1;
            let context = self.slots[slot].read_contexts.get(&k).cloned().unwrap_or_default();
            // One write in five deletes (so that tombstones are written, read and reaped).
            let value = if self.rng.random_bool(0.2) {
                Value::Tombstone
            } else {
                Value::Bytes((n as u64).to_le_bytes().to_vec())
            };
            let request = convoke_data::Request::Put {
                key: key(k),
                value,
                context: context.clone(),
                w: convoke_data::Level::Quorum,
            };
            (OpKind::Write { context }, request)
        };
        self.ops.push(Op { key: k, slot, issued: now, kind, outcome: None });
        Some((slot, n, request))
    }

    /// Op `n` ended at `now` with `outcome`. A read's siblings are checked (D4), and its
    /// context against the writes before it (D2); a violation comes back as its message.
    pub(crate) fn ended(
        &mut self,
        n: usize,
        now: Duration,
        outcome: Outcome,
    ) -> Result<(), (&'static str, String)> {
        let Some(op) = self.ops.get(n) else { return Ok(()) };
        if op.outcome.is_some() {
            return Ok(());
        }
        match &outcome {
            Outcome::Read(values, context) => {
                self.stats.reads_answered += 1;
                self.slots[op.slot].read_contexts.insert(op.key, context.clone());
                if values.len() > 1 {
                    self.stats.sibling_reads += 1;
                }
            }
            Outcome::Written(acked) => {
                self.stats.writes_acked += 1;
                self.acked.entry(op.key).or_default().merge(acked);
            }
            Outcome::Failed(_) => self.stats.failed += 1,
        }
        let key = op.key;
        let read = match &outcome {
            Outcome::Read(values, context) => Some((values.clone(), context.clone())),
            _ => None,
        };
        self.ops[n].outcome = Some((now, outcome));
        let Some((values, context)) = read else { return Ok(()) };
        self.siblings_concurrent(key, &values)?;
        self.read_sees_calm_writes(n, &context)
    }

    /// D4: every two values a read returned come from concurrent writes.
    fn siblings_concurrent(&self, key: u32, values: &[u64]) -> Result<(), (&'static str, String)> {
        let written = |w: u64| match self.ops.get(usize::try_from(w).ok()?)? {
            Op {
                kind: OpKind::Write { context },
                outcome: Some((_, Outcome::Written(acked))),
                ..
            } => Some((context, acked)),
            _ => None,
        };
        for (i, a) in values.iter().enumerate() {
            for b in &values[i + 1..] {
                let (Some((a_ctx, a_acked)), Some((b_ctx, b_acked))) = (written(*a), written(*b))
                else {
                    continue;
                };
                if a_ctx.descends(b_acked) || b_ctx.descends(a_acked) {
                    return Err((
                        "D4",
                        format!(
                            "key k{key}: a read returned writes {a} and {b} side by side, but one \
                             was made with a context that had seen the other"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// D2: a read issued in the calm sees every write issued and acknowledged in the calm
    /// before it.
    fn read_sees_calm_writes(
        &mut self,
        n: usize,
        context: &VersionVector,
    ) -> Result<(), (&'static str, String)> {
        let Some(calm) = self.calm_since else { return Ok(()) };
        let read = &self.ops[n];
        if read.issued < calm {
            return Ok(());
        }
        self.stats.reads_checked += 1;
        for (w, op) in self.ops.iter().enumerate() {
            let (OpKind::Write { .. }, Some((acked_at, Outcome::Written(acked)))) =
                (&op.kind, &op.outcome)
            else {
                continue;
            };
            if op.key == read.key
                && op.issued >= calm
                && *acked_at <= read.issued
                && !context.descends(acked)
            {
                return Err((
                    "D2",
                    format!(
                        "key k{}: read {n} issued at {:.3}s missed write {w}, issued at {:.3}s and \
                         acknowledged at quorum at {:.3}s, in a settled cluster",
                        read.key,
                        read.issued.as_secs_f64(),
                        op.issued.as_secs_f64(),
                        acked_at.as_secs_f64()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Every request in flight on `slot`'s incarnation ended with it.
    pub(crate) fn requests_ended(&mut self, slot: usize, now: Duration) {
        let requests = std::mem::take(&mut self.slots[slot].requests);
        for (_, n) in requests {
            let _ = self.ended(n, now, Outcome::Failed("the process ended".into()));
        }
    }

    /// The versions of key `k` on the disk of `slot` (its replica and any hint held).
    pub fn on_disk(&mut self, slot: usize, k: u32) -> Option<Object> {
        let s = &mut self.slots[slot];
        let storage = match s.store.as_mut() {
            Some(store) => store.storage_mut(),
            None => &mut s.disk,
        };
        storage.get(&key(k)).ok().flatten()
    }

    /// Whether D1 is due under load at `now` (every [`D1_INTERVAL`]).
    pub(crate) fn d1_due(&mut self, now: Duration) -> bool {
        if now < self.next_d1 {
            return false;
        }
        self.next_d1 = now + D1_INTERVAL;
        true
    }

    /// D1: every acknowledged write is covered by what the disks hold of its key.
    pub fn check_no_acked_write_lost(&mut self) -> Result<(), (&'static str, String)> {
        let keys: Vec<(u32, VersionVector)> =
            self.acked.iter().map(|(k, v)| (*k, v.clone())).collect();
        for (k, acked) in keys {
            let mut held = VersionVector::new();
            for slot in 0..self.slots.len() {
                if let Some(o) = self.on_disk(slot, k) {
                    held.merge(&o.context());
                }
            }
            self.stats.d1_checks += 1;
            if held.descends(&acked) {
                continue;
            }
            let lost = self.ops.iter().enumerate().find_map(|(w, op)| match &op.outcome {
                Some((at, Outcome::Written(a))) if op.key == k && !held.descends(a) => {
                    Some((w, *at))
                }
                _ => None,
            });
            // Some write's context must be uncovered where their merge is (pointwise maximum).
            let which = lost.map_or_else(
                || "a write acknowledged at quorum".to_owned(),
                |(w, at)| format!("write {w}, acknowledged at quorum at {:.3}s,", at.as_secs_f64()),
            );
            return Err(("D1", format!("key k{k}: {which} is on no disk")));
        }
        Ok(())
    }

    /// D3: the replicas of every key (per `replicas`, slots by key) hold the same versions.
    pub fn check_replicas_agree(
        &mut self,
        replicas: impl Fn(u32) -> Vec<usize>,
    ) -> Result<(), (&'static str, String)> {
        for k in 0..KEYS {
            let holders = replicas(k);
            let versions: Vec<(usize, Option<Object>)> =
                holders.iter().map(|s| (*s, self.on_disk(*s, k))).collect();
            self.stats.keys_compared += 1;
            let differ: BTreeSet<usize> =
                versions.iter().filter(|(_, v)| *v != versions[0].1).map(|(s, _)| *s).collect();
            if !differ.is_empty() {
                return Err((
                    "D3",
                    format!(
                        "key k{k}: its replicas in slots {holders:?} do not hold the same versions \
                         (slots {differ:?} differ from slot {})",
                        versions[0].0
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The read values of a reply.
    pub(crate) fn read_outcome(values: &[Value], context: VersionVector) -> Outcome {
        Outcome::Read(write_numbers(values), context)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer() -> DataLayer {
        DataLayer::new(3, config(), crate::world::rng(1, crate::world::Stream::DataLoad))
    }

    fn vv(pairs: &[(u64, u64)]) -> VersionVector {
        pairs.iter().map(|(a, n)| (convoke_data::version::ActorId(*a), *n)).collect()
    }

    /// Records a write of key 0 with `context`, acknowledged with `acked`; its number.
    fn write(l: &mut DataLayer, context: VersionVector, acked: VersionVector, at: u64) -> usize {
        let n = l.ops.len();
        let t = Duration::from_secs(at);
        l.ops.push(Op {
            key: 0,
            slot: 0,
            issued: t,
            kind: OpKind::Write { context },
            outcome: None,
        });
        assert!(l.ended(n, t, Outcome::Written(acked)).is_ok());
        n
    }

    fn read(
        l: &mut DataLayer,
        values: Vec<u64>,
        context: VersionVector,
        at: u64,
    ) -> Result<(), (&'static str, String)> {
        let n = l.ops.len();
        let t = Duration::from_secs(at);
        l.ops.push(Op { key: 0, slot: 1, issued: t, kind: OpKind::Read, outcome: None });
        l.ended(n, t, Outcome::Read(values, context))
    }

    #[test]
    fn d4_flags_siblings_of_which_one_had_seen_the_other_and_passes_concurrent_ones() {
        let mut l = layer();
        let a = write(&mut l, vv(&[]), vv(&[(1, 1)]), 1) as u64;
        let b = write(&mut l, vv(&[]), vv(&[(2, 1)]), 2) as u64;
        assert!(read(&mut l, vec![a, b], vv(&[(1, 1), (2, 1)]), 3).is_ok(), "concurrent");
        // c was written with a context that had seen a: they cannot be siblings.
        let c = write(&mut l, vv(&[(1, 1)]), vv(&[(1, 2)]), 4) as u64;
        let err = read(&mut l, vec![a, c], vv(&[(1, 2)]), 5).unwrap_err();
        assert_eq!(err.0, "D4");
    }

    #[test]
    fn d2_holds_reads_in_the_calm_to_the_writes_acknowledged_before_them() {
        let mut l = layer();
        l.calm_since = Some(Duration::from_secs(10));
        // A write before the calm binds no read.
        write(&mut l, vv(&[]), vv(&[(1, 1)]), 5);
        assert!(read(&mut l, vec![], vv(&[]), 11).is_ok());
        let w = write(&mut l, vv(&[]), vv(&[(2, 1)]), 12) as u64;
        assert!(read(&mut l, vec![w], vv(&[(2, 1)]), 13).is_ok());
        let err = read(&mut l, vec![], vv(&[(1, 1)]), 14).unwrap_err();
        assert_eq!(err.0, "D2");
        assert_eq!(l.stats.reads_checked, 3);
    }

    #[test]
    fn d1_finds_an_acknowledged_write_that_no_disk_holds() {
        let mut l = layer();
        write(&mut l, vv(&[]), vv(&[(7, 1)]), 1);
        let err = l.check_no_acked_write_lost().unwrap_err();
        assert_eq!(err.0, "D1");
        let mut o = Object::default();
        o.write(
            convoke_data::version::ActorId(7),
            &vv(&[]),
            Value::Bytes(0u64.to_le_bytes().to_vec()),
        );
        l.slot_mut(2).disk.put(&key(0), &o).unwrap_or_else(|e| match e {});
        assert!(l.check_no_acked_write_lost().is_ok());
        // D3: the other replicas do not hold it yet.
        let err = l.check_replicas_agree(|_| vec![0, 1, 2]).unwrap_err();
        assert_eq!(err.0, "D3");
        assert!(l.check_replicas_agree(|_| vec![2]).is_ok());
    }
}
