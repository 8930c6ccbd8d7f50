//! What encoding and decoding one full gossip costs, by cluster size: the work every node does
//! for each gossip it sends or receives, which bounds how many nodes a few cores can run
//! (docs/benchmarks.md, "500 nodes in one process"). Two layouts: every member on one host with
//! its own port (many nodes in one process or on one machine) and every member on its own host
//! (one node per pod). `cargo bench -p convoke-membership --bench gossip_codec` prints the median
//! of 7 runs of each figure, in microseconds per gossip.

// A benchmark reads the clock; the core itself never does.
#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeMap, BTreeSet};
use std::hint::black_box;
use std::time::Instant;

use convoke_membership::gossip::Gossip;
use convoke_membership::member::{Member, MemberStatus, UpNumber};
use convoke_membership::reachability::Reachability;
use convoke_membership::vclock::VectorClock;
use convoke_membership::version::AppVersion;
use convoke_membership::wire::{decode_gossip, encode_gossip};
use convoke_membership::{Address, Uid, UniqueAddress};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const RUNS: usize = 7;

/// `n` Up members, all in the seen set, each with a vector-clock entry: a cluster that has just
/// formed.
fn gossip(n: usize, one_host: bool) -> Gossip {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let nodes: Vec<UniqueAddress> = (0..n)
        .map(|i| {
            let (host, port) = if one_host {
                ("127.0.0.1".to_owned(), 30000 + i)
            } else {
                (format!("10.0.{}.{}", i / 250, i % 250 + 1), 25520)
            };
            let address = Address::new("convoke", host, u16::try_from(port).unwrap()).unwrap();
            UniqueAddress::new(address, Uid::new(rng.random::<u64>().max(1)).unwrap())
        })
        .collect();
    let roles = BTreeSet::from(["dc-default".to_owned()]);
    let version = AppVersion::parse("1.0.0");
    let members = nodes.iter().enumerate().map(|(i, node)| {
        let up = UpNumber(u32::try_from(i).unwrap() + 1);
        Member::from_parts(node.clone(), up, MemberStatus::Up, roles.clone(), version.clone())
    });
    let clock =
        VectorClock::from_entries(nodes.iter().map(|n| (n.clone(), rng.random_range(1..50))));
    let seen = nodes.iter().cloned().collect();
    Gossip::from_parts(members, seen, Reachability::new(), clock, BTreeMap::new())
}

/// Microseconds per call of `f`, median of [`RUNS`] runs of `reps` calls.
fn median_micros(reps: u32, mut f: impl FnMut()) -> f64 {
    let mut runs: Vec<f64> = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..reps {
                f();
            }
            start.elapsed().as_secs_f64() * 1e6 / f64::from(reps)
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[RUNS / 2]
}

fn main() {
    println!("| members | layout | compressed bytes | encode µs | decode µs |");
    println!("|--:|---|--:|--:|--:|");
    for n in [100, 500, 1000] {
        for one_host in [true, false] {
            let g = gossip(n, one_host);
            let bytes = encode_gossip(&g);
            assert_eq!(decode_gossip(&bytes).unwrap(), g, "the gossip survives the round trip");
            let reps = u32::try_from(200_000 / n).unwrap();
            let encode = median_micros(reps, || {
                black_box(encode_gossip(black_box(&g)));
            });
            let decode = median_micros(reps, || {
                black_box(decode_gossip(black_box(&bytes)).unwrap());
            });
            let layout = if one_host { "one host" } else { "a host each" };
            println!("| {n} | {layout} | {} | {encode:.0} | {decode:.0} |", bytes.len());
        }
    }
}
