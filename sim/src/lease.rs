//! The lease a simulated singleton may run with (`chaos --singleton-lease`): a store of leases,
//! one per singleton name, shared by every process, as a Kubernetes lease or a row in a database
//! would be.
//!
//! The model:
//! - A lease is held by one owner at a time, the holder's address (`host:port`, as the runtime's
//!   lease owner name), until it expires: [`LeaseConfig::ttl`] after the holder's latest
//!   successful acquire. An acquire is granted when the lease is free, expired, or already the
//!   acquirer's (a renewal); a release frees it when the releaser holds it.
//! - An operation travels to the store and its answer back, each way after a latency drawn from
//!   `latency_min..=latency_max`. A process's operations reach the store in the order it sent
//!   them. The store applies an operation when it arrives, in global virtual time.
//! - The driver bounds every acquire by [`LeaseConfig::operation_timeout`] on the process's own
//!   clock: an acquire not answered by then answers `false` (whatever the store did with it); a
//!   later answer is dropped. Releases are not answered.
//! - While the nemesis injects faults, the store misbehaves with probabilities drawn per seed
//!   ([`LeaseFaults`]): a request or an answer is lost, the store fails an operation without
//!   applying it, or an answer is slow (past the operation timeout). After the heal it does not.
//!
//! Every draw comes from a random stream of its own, and a fixed number of draws is made per
//! operation, so that a run's membership part is the same with or without the lease.

use std::collections::BTreeMap;
use std::time::Duration;

use convoke_membership::Address;
use convoke_singleton::SingletonConfig;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// How often a held lease is renewed in the simulation.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(2);
/// How long the driver waits for the answer to an acquire.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(1);

/// The lease's timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct LeaseConfig {
    /// A lease not acquired again by its holder for this long has expired.
    pub ttl: Duration,
    /// How often the holder renews it.
    pub heartbeat_interval: Duration,
    /// How long the driver waits for an acquire's answer.
    pub operation_timeout: Duration,
    /// The shortest one-way latency to the store.
    pub latency_min: Duration,
    /// The longest one-way latency to the store while it works well.
    pub latency_max: Duration,
}

impl LeaseConfig {
    /// The lease for singleton settings `s`: renewed every [`HEARTBEAT_INTERVAL`], operations
    /// bounded by [`OPERATION_TIMEOUT`], and a TTL long enough that a holder paused for up to the
    /// removal margin (the longest pause S17 still counts) has ended its instance before the
    /// lease it held can pass to another node. Its last grant came at most one heartbeat interval
    /// and one operation timeout before the pause; after the pause it renews at once, learns of a
    /// refusal within an operation timeout and ends its instance within the hand-over timeout.
    /// Five per cent and a second more cover the nodes' clock drift.
    pub fn for_singleton(s: &SingletonConfig) -> Self {
        let hb = HEARTBEAT_INTERVAL;
        let op = OPERATION_TIMEOUT;
        let window = s.removal_margin + hb + op * 2 + s.hand_over_timeout;
        Self {
            ttl: window.mul_f64(1.05) + Duration::from_secs(1),
            heartbeat_interval: hb,
            operation_timeout: op,
            latency_min: Duration::from_millis(1),
            latency_max: Duration::from_millis(50),
        }
    }
}

/// How the store misbehaves while faults are injected: the probability, per operation, of each
/// mishap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LeaseFaults {
    /// The request never reaches the store.
    pub request_loss: f64,
    /// The answer never reaches the process.
    pub answer_loss: f64,
    /// The store fails the operation without applying it (answers `false`).
    pub error: f64,
    /// The answer comes back after the operation timeout.
    pub slow: f64,
}

/// What a process asks of the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseOp {
    /// Take the lease, or renew it.
    Acquire,
    /// Give it up.
    Release,
}

/// What becomes of one operation on its way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trip {
    /// When it reaches the store (`None`: lost on the way).
    pub arrives: Option<Duration>,
    /// Whether the store fails it.
    pub error: bool,
    /// How long its answer takes back (`None`: lost).
    pub answer_after: Option<Duration>,
}

#[derive(Clone, Debug)]
struct Holder {
    owner: Address,
    expires: Duration,
}

/// What the lease store did in a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LeaseStats {
    /// Acquires (first takes and renewals) sent.
    pub acquires: u64,
    /// Releases sent.
    pub releases: u64,
    /// Acquires the store granted.
    pub granted: u64,
    /// Acquires the store refused (held by another owner) or failed.
    pub refused: u64,
    /// Acquires the driver answered `false` on its timeout.
    pub timeouts: u64,
    /// Times a lease passed to a new owner after expiring in another's hands.
    pub taken_over_expired: u64,
}

/// The store of leases, its random stream and its counters.
#[derive(Debug)]
pub struct LeaseStore {
    config: LeaseConfig,
    faults: LeaseFaults,
    faulty: bool,
    rng: ChaCha8Rng,
    leases: BTreeMap<String, Holder>,
    /// Per slot: when its latest operation reaches the store (operations arrive in order).
    last_arrival: Vec<Duration>,
    /// What happened so far.
    pub stats: LeaseStats,
}

impl LeaseStore {
    /// A store for `n` slots with timing `config`; its fault probabilities and every latency are
    /// drawn from `rng`.
    pub fn new(n: usize, config: LeaseConfig, mut rng: ChaCha8Rng) -> Self {
        let p = |r: &mut ChaCha8Rng| [0.0, 0.02, 0.1][r.random_range(0..3)];
        let faults = LeaseFaults {
            request_loss: p(&mut rng),
            answer_loss: p(&mut rng),
            error: p(&mut rng),
            slow: p(&mut rng),
        };
        Self {
            config,
            faults,
            faulty: false,
            rng,
            leases: BTreeMap::new(),
            last_arrival: vec![Duration::ZERO; n],
            stats: LeaseStats::default(),
        }
    }

    /// The lease's timing.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// The mishaps drawn for this run.
    pub fn faults(&self) -> &LeaseFaults {
        &self.faults
    }

    /// Turns the mishaps on (while the nemesis runs) or off (after the heal).
    pub fn set_faulty(&mut self, on: bool) {
        self.faulty = on;
    }

    /// Draws the trip of an operation `slot` sends at `now`.
    pub fn send(&mut self, slot: usize, op: LeaseOp, now: Duration) -> Trip {
        match op {
            LeaseOp::Acquire => self.stats.acquires += 1,
            LeaseOp::Release => self.stats.releases += 1,
        }
        let (lo, hi) = (self.config.latency_min, self.config.latency_max);
        let there = self.latency(lo, hi);
        let back = self.latency(lo, hi);
        let slow_back =
            self.latency(self.config.operation_timeout, self.config.operation_timeout * 2);
        let draws: [f64; 4] = std::array::from_fn(|_| self.rng.random());
        let f = if self.faulty { self.faults } else { LeaseFaults::default() };
        let arrival = (now + there).max(self.last_arrival[slot]);
        self.last_arrival[slot] = arrival;
        Trip {
            arrives: (draws[0] >= f.request_loss).then_some(arrival),
            error: draws[1] < f.error,
            answer_after: (draws[2] >= f.answer_loss).then_some(if draws[3] < f.slow {
                slow_back
            } else {
                back
            }),
        }
    }

    fn latency(&mut self, lo: Duration, hi: Duration) -> Duration {
        let (lo, hi) = (lo.as_nanos() as u64, hi.as_nanos() as u64);
        Duration::from_nanos(self.rng.random_range(lo..=hi))
    }

    /// `owner` acquires lease `name` at `now`: granted when it is free, expired or already
    /// `owner`'s; it then expires a TTL from now. Returns whether `owner` holds it.
    pub fn acquire(&mut self, name: &str, owner: &Address, now: Duration) -> bool {
        let expires = now + self.config.ttl;
        let granted = match self.leases.get(name) {
            Some(h) if h.owner == *owner => true,
            Some(h) if h.expires > now => false,
            Some(_) => {
                self.stats.taken_over_expired += 1;
                true
            }
            None => true,
        };
        if granted {
            self.leases.insert(name.to_owned(), Holder { owner: owner.clone(), expires });
            self.stats.granted += 1;
        } else {
            self.stats.refused += 1;
        }
        granted
    }

    /// The store failed an acquire.
    pub fn failed(&mut self) {
        self.stats.refused += 1;
    }

    /// `owner` releases lease `name`: freed if `owner` holds it.
    pub fn release(&mut self, name: &str, owner: &Address) {
        if self.leases.get(name).is_some_and(|h| h.owner == *owner) {
            self.leases.remove(name);
        }
    }

    /// Who holds lease `name` at `now`, if anyone (an expired lease has no holder).
    pub fn holder(&self, name: &str, now: Duration) -> Option<&Address> {
        self.leases.get(name).filter(|h| h.expires > now).map(|h| &h.owner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> LeaseStore {
        let config = LeaseConfig::for_singleton(&SingletonConfig::new("s"));
        LeaseStore::new(2, config, rand::SeedableRng::seed_from_u64(1))
    }

    fn addr(port: u16) -> Address {
        Address::new("sys", "host", port).expect("an address")
    }

    #[test]
    fn a_lease_has_one_holder_until_it_expires_or_is_released() {
        let mut s = store();
        let ttl = s.config().ttl;
        let t = Duration::from_secs(1);
        assert!(s.acquire("a", &addr(1), t));
        assert!(!s.acquire("a", &addr(2), t + ttl - Duration::from_millis(1)));
        assert!(s.acquire("a", &addr(1), t + ttl / 2), "a renewal");
        assert!(!s.acquire("a", &addr(2), t + ttl), "renewed: not yet expired");
        assert_eq!(s.holder("a", t + ttl / 2 + ttl), None);
        assert!(s.acquire("a", &addr(2), t + ttl / 2 + ttl));
        assert_eq!(s.stats.taken_over_expired, 1);
        assert!(s.acquire("b", &addr(1), t), "another name is another lease");
        s.release("a", &addr(1));
        assert_eq!(s.holder("a", t + ttl * 2), Some(&addr(2)), "only its holder releases it");
        s.release("a", &addr(2));
        assert!(s.acquire("a", &addr(1), t + ttl * 2));
    }

    #[test]
    fn a_process_operations_reach_the_store_in_order_and_never_fail_without_faults() {
        let mut s = store();
        let mut last = Duration::ZERO;
        for i in 0..200 {
            let trip = s.send(0, LeaseOp::Acquire, Duration::from_millis(i));
            let at = trip.arrives.expect("not lost");
            assert!(at >= last);
            last = at;
            assert!(!trip.error);
            assert!(trip.answer_after.expect("answered") <= s.config().latency_max);
        }
    }
}
