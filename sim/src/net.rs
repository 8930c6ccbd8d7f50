//! The network model: per-message latency, loss, duplication and reordering, and the link state
//! that partitions and clogs change.
//!
//! Every message is delayed by `min + Exp(mean)` capped at `max`; with probability `reorder` it
//! gets an extra uniform delay of up to `reorder_delay`, which lets it overtake and be overtaken.
//! Loss and duplication are independent per message. There is no per-link FIFO: a transport may
//! reconnect and interleave, so the core must not rely on order.
//!
//! Links are directed. A *partition* is a set of blocked directed links (a message on a blocked
//! link is dropped when it arrives, so messages in flight when a partition starts are lost too).
//! Several partitions can be active at once; a link is blocked while any of them blocks it. A
//! *clogged* node (FoundationDB's swizzle-clog) loses nothing: messages to and from it are held
//! and delivered once it is unclogged.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// The quality of the network: latency distribution, loss, duplication, reordering.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NetConfig {
    /// The smallest one-way latency.
    pub latency_min: Duration,
    /// The mean of the exponential part added to `latency_min`.
    pub latency_mean: Duration,
    /// The cap on the latency (before any reordering delay).
    pub latency_max: Duration,
    /// The probability that a message is lost.
    pub loss: f64,
    /// The probability that a message is delivered twice.
    pub duplicate: f64,
    /// The probability that a message is delayed further, so that it arrives out of order.
    pub reorder: f64,
    /// The largest extra delay of a reordered message.
    pub reorder_delay: Duration,
}

impl NetConfig {
    /// A quiet LAN: 0.2 ms + Exp(0.5 ms), at most 5 ms; nothing lost, duplicated or reordered.
    pub fn lan() -> Self {
        Self {
            latency_min: Duration::from_micros(200),
            latency_mean: Duration::from_micros(500),
            latency_max: Duration::from_millis(5),
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::ZERO,
        }
    }

    /// Samples one message's delay.
    pub fn sample_delay(&self, rng: &mut ChaCha8Rng) -> Duration {
        let mut d = latency(self.latency_min, self.latency_mean, self.latency_max, rng);
        if self.reorder > 0.0 && rng.random::<f64>() < self.reorder {
            let max = u64::try_from(self.reorder_delay.as_nanos()).unwrap_or(u64::MAX);
            d += Duration::from_nanos(rng.random_range(0..=max));
        }
        d
    }

    /// How many copies of a message arrive: 0 (lost), 1, or 2 (duplicated).
    pub fn sample_copies(&self, rng: &mut ChaCha8Rng) -> usize {
        if self.loss > 0.0 && rng.random::<f64>() < self.loss {
            return 0;
        }
        if self.duplicate > 0.0 && rng.random::<f64>() < self.duplicate {
            return 2;
        }
        1
    }
}

/// The directed links between `n` nodes: which are blocked by partitions, which nodes are clogged.
#[derive(Clone, Debug)]
pub struct Links {
    n: usize,
    /// Active partitions by id: their blocked (from, to) links.
    partitions: BTreeMap<u64, Vec<(usize, usize)>>,
    /// How many active partitions block each link, `from * n + to`; empty while none is active.
    blocked: Vec<u16>,
    clogged: Vec<bool>,
}

impl Links {
    /// All links open between `n` nodes.
    pub fn new(n: usize) -> Self {
        Self { n, partitions: BTreeMap::new(), blocked: Vec::new(), clogged: vec![false; n] }
    }

    /// Whether a message from `from` to `to` gets through (clogs aside).
    pub fn is_open(&self, from: usize, to: usize) -> bool {
        self.blocked.is_empty() || self.blocked[from * self.n + to] == 0
    }

    /// Whether `node` is clogged.
    pub fn is_clogged(&self, node: usize) -> bool {
        self.clogged[node]
    }

    /// Whether any partition or clog is active.
    pub fn is_faulty(&self) -> bool {
        !self.partitions.is_empty() || self.clogged.iter().any(|c| *c)
    }

    /// Starts partition `id` blocking `links`.
    pub fn block(&mut self, id: u64, links: Vec<(usize, usize)>) {
        if self.blocked.is_empty() {
            self.blocked = vec![0; self.n * self.n];
        }
        for (a, b) in &links {
            let c = &mut self.blocked[a * self.n + b];
            *c = c.saturating_add(1);
        }
        self.partitions.insert(id, links);
    }

    /// Ends partition `id`.
    pub fn unblock(&mut self, id: u64) {
        let Some(links) = self.partitions.remove(&id) else { return };
        for (a, b) in links {
            let c = &mut self.blocked[a * self.n + b];
            *c = c.saturating_sub(1);
        }
        if self.partitions.is_empty() {
            self.blocked = Vec::new();
        }
    }

    /// Clogs or unclogs `node`.
    pub fn set_clogged(&mut self, node: usize, clogged: bool) {
        self.clogged[node] = clogged;
    }

    /// Ends every partition and clog.
    pub fn heal(&mut self) {
        self.partitions.clear();
        self.blocked = Vec::new();
        self.clogged.iter_mut().for_each(|c| *c = false);
    }

    /// The ids of the active partitions.
    pub fn partition_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.partitions.keys().copied()
    }
}

/// The shapes of partition the fault model knows (Jepsen's nemeses).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum PartitionKind {
    /// Two groups cut off from each other in both directions.
    Symmetric {
        /// One side; the other is everyone else.
        side: Vec<usize>,
    },
    /// Messages from `from` to `to` are dropped; the other direction works.
    OneWay {
        /// Senders whose messages are dropped.
        from: Vec<usize>,
        /// Receivers that do not get them.
        to: Vec<usize>,
    },
    /// One node cut off from everyone in both directions.
    IsolateOne {
        /// The isolated node.
        node: usize,
    },
    /// Two halves cut off from each other, except one node that talks to both.
    Bridge {
        /// The bridge node.
        bridge: usize,
        /// One half (without the bridge); the other half is everyone else but the bridge.
        side: Vec<usize>,
    },
    /// Nodes on a ring each reach only their neighbours, a majority that differs from node to node.
    MajoritiesRing {
        /// The ring order.
        ring: Vec<usize>,
    },
}

impl PartitionKind {
    /// A short name for reports.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Symmetric { .. } => "symmetric",
            Self::OneWay { .. } => "one-way",
            Self::IsolateOne { .. } => "isolate-one",
            Self::Bridge { .. } => "bridge",
            Self::MajoritiesRing { .. } => "majorities-ring",
        }
    }

    /// The blocked directed links among `nodes` (the slots that exist).
    pub fn blocked_links(&self, nodes: &[usize]) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let both = |out: &mut Vec<(usize, usize)>, a: usize, b: usize| {
            out.push((a, b));
            out.push((b, a));
        };
        match self {
            Self::Symmetric { side } => {
                for a in side {
                    for b in nodes.iter().filter(|b| !side.contains(b)) {
                        both(&mut out, *a, *b);
                    }
                }
            }
            Self::OneWay { from, to } => {
                for a in from {
                    for b in to.iter().filter(|b| *b != a) {
                        out.push((*a, *b));
                    }
                }
            }
            Self::IsolateOne { node } => {
                for b in nodes.iter().filter(|b| *b != node) {
                    both(&mut out, *node, *b);
                }
            }
            Self::Bridge { bridge, side } => {
                for a in side.iter().filter(|a| *a != bridge) {
                    for b in nodes.iter().filter(|b| *b != bridge && !side.contains(b)) {
                        both(&mut out, *a, *b);
                    }
                }
            }
            Self::MajoritiesRing { ring } => {
                // Each node reaches the k nodes on either side: 2k + 1 >= a majority.
                let n = ring.len();
                let majority = n / 2 + 1;
                let k = majority / 2;
                for (i, a) in ring.iter().enumerate() {
                    for (j, b) in ring.iter().enumerate() {
                        let d = i.abs_diff(j);
                        if d.min(n - d) > k {
                            out.push((*a, *b));
                        }
                    }
                }
            }
        }
        out
    }
}

/// A latency of at least `min`, `mean` longer on average (exponentially distributed), at most
/// `max`: one draw from `rng`.
pub fn latency(min: Duration, mean: Duration, max: Duration, rng: &mut ChaCha8Rng) -> Duration {
    let mean = mean.as_secs_f64();
    let extra = if mean > 0.0 {
        // Inverse-transform sampling of an exponential; 1 - u is in (0, 1].
        let u: f64 = rng.random();
        -mean * (1.0 - u).ln()
    } else {
        0.0
    };
    (min + Duration::from_secs_f64(extra)).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn delays_stay_within_the_configured_range() {
        let cfg = NetConfig {
            latency_min: Duration::from_millis(1),
            latency_mean: Duration::from_millis(10),
            latency_max: Duration::from_millis(50),
            ..NetConfig::lan()
        };
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for _ in 0..10_000 {
            let d = cfg.sample_delay(&mut rng);
            assert!(d >= cfg.latency_min && d <= cfg.latency_max);
        }
    }

    #[test]
    fn overlapping_partitions_block_until_both_end() {
        let mut l = Links::new(3);
        l.block(1, PartitionKind::IsolateOne { node: 0 }.blocked_links(&[0, 1, 2]));
        l.block(2, PartitionKind::OneWay { from: vec![0], to: vec![1] }.blocked_links(&[0, 1, 2]));
        assert!(!l.is_open(0, 1) && !l.is_open(1, 0) && l.is_open(1, 2));
        l.unblock(1);
        assert!(!l.is_open(0, 1) && l.is_open(1, 0));
        l.unblock(2);
        assert!(l.is_open(0, 1) && !l.is_faulty());
    }

    #[test]
    fn a_bridge_node_reaches_both_halves() {
        let nodes = [0, 1, 2, 3, 4];
        let blocked = PartitionKind::Bridge { bridge: 2, side: vec![0, 1] }.blocked_links(&nodes);
        assert!(blocked.contains(&(0, 3)) && blocked.contains(&(4, 1)));
        assert!(!blocked.iter().any(|(a, b)| *a == 2 || *b == 2));
    }

    #[test]
    fn in_a_majorities_ring_every_node_reaches_a_majority_but_not_everyone() {
        let ring: Vec<usize> = (0..7).collect();
        let blocked = PartitionKind::MajoritiesRing { ring: ring.clone() }.blocked_links(&ring);
        for a in &ring {
            let reach = ring.iter().filter(|b| !blocked.contains(&(*a, **b))).count();
            assert!((4..7).contains(&reach), "node {a} reaches {reach}");
        }
    }
}
