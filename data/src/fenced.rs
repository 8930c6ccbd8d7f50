//! Fenced values: state with one writer at a time, where a write from a writer that has been
//! superseded is refused instead of merged (see `docs/data.md`, "Fenced values").
//!
//! A writer first *claims* the key with a ballot higher than any the key has promised; from
//! then on each replica that has taken the claim in refuses the writes of lower ballots. The
//! writer then reads the key and writes its states under its ballot, each with the next
//! sequence number. Claims, reads and writes all go to a quorum of the key's own replicas (never
//! to stand-ins), so a claim and any write acknowledged before it share a replica: the
//! claimant's read finds every acknowledged write, and a write of an older ballot that reaches
//! a quorum only after the claim is refused by at least one replica and fails.
//!
//! Replicas merge fenced values like CRDTs: the highest promise and the state of the highest
//! (ballot, sequence) win, so a write refused by some replicas and taken in by others never
//! forks the key; a later writer's state supersedes it.

use serde::{Deserialize, Serialize};

/// The ballot of a writer: a round, then the writer's id to tell apart two writers that chose
/// the same round. Higher ballots supersede lower ones.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Ballot {
    /// The round; a new writer takes one more than the highest promised.
    pub round: u64,
    /// The writer's id (a node's uid at run time).
    pub holder: u64,
}

impl Ballot {
    /// The ballot after `self` for writer `holder`.
    pub fn next(self, holder: u64) -> Self {
        Self { round: self.round.saturating_add(1), holder }
    }
}

impl std::fmt::Display for Ballot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:x}", self.round, self.holder)
    }
}

/// A state written under a ballot.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Written {
    /// The ballot of its writer.
    pub ballot: Ballot,
    /// Its writer's sequence number, from 1.
    pub seq: u64,
    /// The state.
    pub bytes: Vec<u8>,
}

/// A fenced value as a replica holds it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fenced {
    /// The highest ballot claimed; writes of lower ballots are refused.
    pub promise: Ballot,
    /// The latest state, if any was written.
    pub state: Option<Written>,
}

/// What a writer does to a fenced value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FenceOp {
    /// Claims the key for `ballot`, which must be above the promise.
    Claim(Ballot),
    /// Writes `bytes` as state number `seq` of `ballot`, which must be at least the promise.
    Write {
        /// The writer's ballot.
        ballot: Ballot,
        /// Its sequence number, above the one of the writer's previous state.
        seq: u64,
        /// The state.
        bytes: Vec<u8>,
    },
}

impl FenceOp {
    /// The ballot it is made under.
    pub fn ballot(&self) -> Ballot {
        match self {
            Self::Claim(b) | Self::Write { ballot: b, .. } => *b,
        }
    }
}

/// Why a fenced operation was refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error(
    "the key is fenced: it promised ballot {promise} and this {what} is of ballot {ballot} \
     (a newer writer holds it)"
)]
pub struct FenceRefusal {
    /// The replica's promise.
    pub promise: Ballot,
    /// The operation's ballot.
    pub ballot: Ballot,
    /// "claim" or "write".
    pub what: String,
}

impl Fenced {
    /// Takes in another replica's value: the higher promise, the later state.
    pub fn merge(&mut self, other: &Self) {
        self.promise = self.promise.max(other.promise);
        if other.state > self.state {
            self.state.clone_from(&other.state);
        }
        if let Some(s) = &self.state {
            self.promise = self.promise.max(s.ballot);
        }
    }

    /// Applies `op`, or refuses it with nothing changed: a claim must be above the promise, a
    /// write at least the promise and after the state held.
    pub fn apply(&mut self, op: FenceOp) -> Result<(), FenceRefusal> {
        let refuse = |what: &str, ballot| FenceRefusal {
            promise: self.promise,
            ballot,
            what: what.to_owned(),
        };
        match op {
            FenceOp::Claim(ballot) => {
                if ballot <= self.promise {
                    return Err(refuse("claim", ballot));
                }
                self.promise = ballot;
            }
            FenceOp::Write { ballot, seq, bytes } => {
                let written = Written { ballot, seq, bytes };
                if ballot < self.promise || self.state.as_ref().is_some_and(|s| *s >= written) {
                    return Err(refuse("write", ballot));
                }
                self.promise = ballot;
                self.state = Some(written);
            }
        }
        Ok(())
    }

    /// Whether a replica holding `self` must refuse a write whose value is `incoming`: the
    /// incoming value's promise (the ballot of the operation that made it) is below this one.
    pub fn refuses(&self, incoming: &Self) -> Option<FenceRefusal> {
        (incoming.promise < self.promise).then(|| FenceRefusal {
            promise: self.promise,
            ballot: incoming.promise,
            what: "write".to_owned(),
        })
    }
}

/// A state as fenced writers that count their writes see it: (ballot, seq, count), the count
/// being one more in each write than in the state its writer started from.
pub type Counted = (Ballot, u64, u64);

/// What fenced writers of one key were told, for a checker (the store's tests and the
/// simulator keep one per key).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    /// Each answered claim: its ballot and the state it started from.
    pub claims: Vec<(Ballot, Option<Counted>)>,
    /// Each acknowledged write.
    pub acked: Vec<Counted>,
}

/// How a [`History`] is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HistoryError {
    /// A claim started from a state older than a write of a lower ballot that was acknowledged.
    #[error("an acknowledged write was lost: {0}")]
    Lost(String),
    /// Two acknowledged writes do not follow one another.
    #[error("acknowledged writes fork: {0}")]
    Fork(String),
}

impl History {
    /// Checks that no acknowledged write is lost (every claim starts from every write of a
    /// lower ballot that was acknowledged, whenever that was) and that the state never forks
    /// (in the order of (ballot, seq), each acknowledged count is above the one before).
    pub fn check(&self) -> Result<(), HistoryError> {
        for (b, held) in &self.claims {
            let start = held.map(|(hb, hs, _)| (hb, hs));
            for (wb, ws, count) in &self.acked {
                if wb < b && start < Some((*wb, *ws)) {
                    return Err(HistoryError::Lost(format!(
                        "claim {b} started from {held:?}, before write {wb} #{ws} (count {count})"
                    )));
                }
            }
        }
        let mut acked = self.acked.clone();
        acked.sort();
        for pair in acked.windows(2) {
            if pair[1].2 <= pair[0].2 {
                return Err(HistoryError::Fork(format!("{:?} then {:?}", pair[0], pair[1])));
            }
        }
        Ok(())
    }
}

/// One writer of a fenced key, without I/O: the operations it makes and what it concludes from
/// their answers, whoever carries them (the node's store client, or the simulator).
///
/// It claims the key above the promise each refusal reports, at most [`Writer::CLAIM_ATTEMPTS`]
/// times; once claimed, each write takes the next sequence number, never one used before (a
/// write that failed may still reach a replica, and a later state must supersede it).
///
/// A write refused means a newer ballot has been claimed since. That need not be a writer that
/// took over: a claim that reached a single replica and then failed leaves its promise there,
/// and merging spreads it to the others. So the writer claims again, above the promise the
/// refusal names, and carries on only if the state that claim reads is still one it knows —
/// the state its first claim read, or one of its own writes (its ballots carry its id, which no
/// other writer has). Any other state is a newer writer's: the writer is then *fenced* and makes
/// no more operations, and so it is after [`Writer::RECLAIMS`] claims made again, or when a
/// claim is outbid on every try.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Writer {
    holder: u64,
    /// The ballot of the last claim made, or of the claim that succeeded.
    ballot: Ballot,
    /// Claims made so far for the current ballot.
    attempts: u32,
    claimed: bool,
    /// The (ballot, seq) of the state the first claim read: `Some(None)` for a key never
    /// written, `None` before that claim is answered.
    first_read: Option<Option<(Ballot, u64)>>,
    /// Claims made again after a refused write.
    reclaims: u32,
    /// The sequence number of the last write made.
    seq: u64,
    fenced: bool,
}

impl Writer {
    /// How many claims a writer makes, each above the promise that refused the one before.
    pub const CLAIM_ATTEMPTS: u32 = 5;

    /// How many times a writer claims the key again after a refused write before it gives up.
    /// Two writers that both believe they hold the key fence each other at most this often.
    pub const RECLAIMS: u32 = 3;

    /// The id of writer number `n` of the node with uid `node`. Every writer of a key needs an
    /// id no other writer ever had, not even an earlier one on the same node: replicas take in
    /// a value whose promise equals their own, so two writers claiming one ballot would both
    /// have their writes acknowledged, and one would overwrite the other. The driver numbers its
    /// writers; the id mixes the number into the node's uid (a bijection of the number, so the
    /// ids of one node never repeat).
    pub fn holder(node: u64, n: u64) -> u64 {
        // splitmix64's finaliser: consecutive numbers differ in about half of the bits.
        let mut z = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        node ^ z ^ (z >> 31)
    }

    /// A writer with id `holder` (see [`Writer::holder`]) that has claimed nothing yet.
    pub fn new(holder: u64) -> Self {
        Self {
            holder,
            ballot: Ballot::default().next(holder),
            attempts: 0,
            claimed: false,
            first_read: None,
            reclaims: 0,
            seq: 0,
            fenced: false,
        }
    }

    /// The claim to make: the first one, again after a claim that failed without an answer, or
    /// the one [`write_refused`](Self::write_refused) asks for.
    pub fn claim(&mut self) -> FenceOp {
        self.attempts = 1;
        FenceOp::Claim(self.ballot)
    }

    /// The claim was answered with `read`, the state the key's replicas held, which includes
    /// every write acknowledged to an older writer. Returns the ballot this writer writes under,
    /// or `None` when it is fenced: it claimed again after a refused write and found a state it
    /// does not know, a newer writer's.
    pub fn claimed(&mut self, read: Option<&Written>) -> Option<Ballot> {
        let read = read.map(|w| (w.ballot, w.seq));
        match self.first_read {
            None => self.first_read = Some(read),
            Some(first) => {
                let own = read.is_some_and(|(b, _)| b.holder == self.holder);
                if read != first && !own {
                    self.fenced = true;
                    return None;
                }
            }
        }
        self.claimed = true;
        Some(self.ballot)
    }

    /// Whether a claim has been answered and no write refused since.
    pub fn is_claimed(&self) -> bool {
        self.claimed && !self.fenced
    }

    /// The claim was refused by `refusal`: the next claim, above the promise it reports, or
    /// `None` once outbid [`Writer::CLAIM_ATTEMPTS`] times (the writer is then fenced).
    pub fn claim_refused(&mut self, refusal: &FenceRefusal) -> Option<FenceOp> {
        if self.attempts >= Self::CLAIM_ATTEMPTS {
            self.fenced = true;
            return None;
        }
        self.attempts += 1;
        self.ballot = refusal.promise.next(self.holder);
        Some(FenceOp::Claim(self.ballot))
    }

    /// The write of `bytes` as the next state; `None` before the claim is answered and once
    /// fenced.
    pub fn write(&mut self, bytes: Vec<u8>) -> Option<FenceOp> {
        if !self.claimed || self.fenced {
            return None;
        }
        self.seq += 1;
        Some(FenceOp::Write { ballot: self.ballot, seq: self.seq, bytes })
    }

    /// A write was refused by `refusal`: a newer ballot has been claimed. Returns whether to
    /// claim again ([`claim`](Self::claim) gives the claim, above the refusal's promise, and
    /// [`claimed`](Self::claimed) whether the writer may carry on); `false` once it has done so
    /// [`Writer::RECLAIMS`] times, and the writer is then fenced.
    pub fn write_refused(&mut self, refusal: &FenceRefusal) -> bool {
        self.claimed = false;
        if self.reclaims >= Self::RECLAIMS || self.first_read.is_none() {
            self.fenced = true;
            return false;
        }
        self.reclaims += 1;
        self.ballot = refusal.promise.max(self.ballot).next(self.holder);
        true
    }

    /// The ballot it writes under, once claimed.
    pub fn ballot(&self) -> Option<Ballot> {
        self.claimed.then_some(self.ballot)
    }

    /// The sequence number of the last write made (0 before the first).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Whether a newer writer holds the key.
    pub fn is_fenced(&self) -> bool {
        self.fenced
    }
}

#[cfg(test)]
mod tests;
