//! A run is a pure function of its seed and options: the same seed gives the same trace hash, and
//! another seed another one.

use std::time::Duration;

use convoke_sim::commands::chaos::{ChaosOptions, run_seed};
use convoke_sim::commands::converge::{self, ConvergeOptions};
use convoke_sim::commands::start_bulk;
use convoke_sim::singleton::{self, Margin};
use convoke_sim::world::{Action, Sim, SimOptions};

#[test]
fn a_chaos_seed_run_twice_gives_the_same_trace_hash() {
    let o = ChaosOptions::new(3, 7, Duration::from_secs(120));
    let (first, second) = (run_seed(&o), run_seed(&o));
    assert!(first.pass, "{:?}", first.violation);
    assert!(first.faults > 0, "the run injected no faults, so it proves little");
    assert_eq!(first.trace_hash, second.trace_hash);
    assert_eq!(first.singleton_trace_hash, second.singleton_trace_hash);
    assert!(first.singleton.starts > 0, "the singleton never started: {:?}", first.singleton);
    assert_eq!(first.sharding_trace_hash, second.sharding_trace_hash);
    assert_eq!(first.sharding, second.sharding);
    assert!(first.sharding.entity_starts > 0, "no entity ever started: {:?}", first.sharding);
    assert_eq!(first.steps, second.steps);
    assert_eq!(first.fault_log.len(), second.fault_log.len());
}

#[test]
fn a_chaos_seed_with_the_lease_is_the_same_twice_and_leaves_the_membership_run_as_it_was() {
    let plain = ChaosOptions::new(3, 7, Duration::from_secs(120));
    let leased = ChaosOptions { singleton_lease: true, ..plain.clone() };
    let (without, first, second) = (run_seed(&plain), run_seed(&leased), run_seed(&leased));
    assert!(first.pass, "{:?}", first.violation);
    assert!(first.reproduce.ends_with(" --singleton-lease"), "{}", first.reproduce);
    // The lease store draws on a stream of its own: the membership part is the same.
    assert_eq!(first.trace_hash, without.trace_hash);
    assert_eq!(first.singleton_trace_hash, second.singleton_trace_hash);
    assert_ne!(first.singleton_trace_hash, without.singleton_trace_hash);
    assert_eq!(first.lease, second.lease);
    let lease = first.lease.expect("the run had a lease");
    assert!(lease.granted > 0 && lease.acquires > lease.granted, "{lease:?}");
    assert!(first.singleton.starts > 0, "{:?}", first.singleton);
    assert!(without.lease.is_none());
}

#[test]
fn different_chaos_seeds_give_different_trace_hashes() {
    let hashes: Vec<String> = (10..14)
        .map(|seed| run_seed(&ChaosOptions::new(seed, 5, Duration::from_secs(60))).trace_hash)
        .collect();
    for (i, h) in hashes.iter().enumerate() {
        assert!(!hashes[i + 1..].contains(h), "seed {} repeats a hash: {hashes:?}", 10 + i);
    }
}

#[test]
fn a_converge_run_is_the_same_twice_and_differs_by_seed() {
    let run = |seed| converge::run(&ConvergeOptions::new(20, seed));
    let (a, b, c) = (run(1), run(1), run(2));
    assert_eq!(a.trace_hash, b.trace_hash);
    assert_eq!(a.all_up_s, b.all_up_s);
    assert_eq!(a.steady_bytes_per_node_per_s, b.steady_bytes_per_node_per_s);
    assert_ne!(a.trace_hash, c.trace_hash);
}

#[test]
fn switching_the_checkers_off_does_not_change_the_run() {
    let mut o = ConvergeOptions::new(12, 5);
    let checked = converge::run(&o);
    o.check_invariants = false;
    let unchecked = converge::run(&o);
    assert!(checked.violation.is_none());
    assert_eq!(checked.trace_hash, unchecked.trace_hash);
}

#[test]
fn the_singleton_and_sharding_layers_leave_the_membership_run_as_it_was() {
    // The managers, instances, hand-over messages, regions, shards and the load draw on random
    // streams of their own and are hashed apart, so a run's membership trace is the same with or
    // without them.
    let run = |singleton: bool, sharding: bool| {
        let mut opts = SimOptions::new(5, 5);
        opts.net.loss = 0.05;
        let config = singleton::config(&opts.config, Margin::Recommended);
        // Detection, the resolver's decision and the removal, then the margin.
        let replaced_within = Duration::from_secs(32) + config.removal_margin;
        if sharding {
            opts.sharding = Some(convoke_sim::sharding::config(&config));
        }
        if singleton {
            opts.singleton = Some(config);
        }
        let mut sim = Sim::new(opts);
        start_bulk(&mut sim, &[0, 1, 2, 3, 4]);
        sim.run_for(Duration::from_secs(20));
        sim.apply(Action::Crash(0));
        sim.run_for(replaced_within);
        sim.apply(Action::Leave(1));
        sim.run_for(Duration::from_secs(30));
        let starts = sim.singletons().map_or(0, |s| s.stats.starts);
        let entities = sim.shardings().map_or(0, |s| s.stats.entity_starts);
        (sim.trace_hash(), sim.violation().cloned(), starts, entities)
    };
    let (without, _, _, _) = run(false, false);
    let (with, violation, starts, _) = run(true, false);
    assert_eq!(violation, None);
    assert_eq!(starts, 3, "node 0 from the start, then node 1, then node 2");
    assert_eq!(without, with);
    let (with_sharding, violation, starts, entities) = run(true, true);
    assert_eq!(violation, None);
    assert_eq!(starts, 3);
    assert!(entities > 0);
    assert_eq!(without, with_sharding);
}
