//! The replicated store in chaos runs (`chaos --data`, docs/data.md, "Simulation"): a seed at
//! three and at five nodes passes D1 to D4 with the checks having something to check, and runs
//! the same twice.

use std::time::Duration;

use convoke_sim::commands::chaos::{ChaosOptions, SeedReport, run_seed};

fn run(seed: u64, nodes: usize) -> SeedReport {
    let mut o = ChaosOptions::new(seed, nodes, Duration::from_secs(600));
    o.data = true;
    run_seed(&o)
}

#[test]
fn a_store_under_faults_loses_no_acknowledged_write_and_its_replicas_converge() {
    for (seed, nodes) in [(1, 3), (2, 5)] {
        let r = run(seed, nodes);
        assert!(
            r.pass,
            "seed {seed} at N = {nodes}: {:?}\n  reproduce: {}",
            r.violation, r.reproduce
        );
        assert!(r.reproduce.contains("--data"), "{}", r.reproduce);
        let d = r.data.expect("a --data run reports the store's figures");
        // The checks ran on a real load, not on an idle store.
        assert!(d.writes_acked > 1_000, "{d:?}");
        assert!(d.sibling_reads > 0, "concurrent writes made siblings: {d:?}");
        assert!(d.reads_checked > 0, "D2 checked reads in the calm: {d:?}");
        assert_eq!(d.keys_compared, u64::from(convoke_sim::data::KEYS), "D3 compared every key");
        // D1 ran under load and after crashes, not only at the end (once per key there).
        assert!(d.d1_checks > 10 * u64::from(convoke_sim::data::KEYS), "{d:?}");
    }
}

#[test]
fn a_store_run_is_the_same_twice() {
    let (a, b) = (run(3, 3), run(3, 3));
    assert!(a.pass, "{:?}", a.violation);
    assert_eq!(a.data_trace_hash, b.data_trace_hash);
    assert_eq!(a.trace_hash, b.trace_hash);
    assert_ne!(a.data_trace_hash, format!("{:016x}", 0), "the store layer took steps");
}
