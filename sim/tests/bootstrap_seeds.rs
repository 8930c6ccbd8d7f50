//! Bootstrap runs worth keeping (`convoke-sim bootstrap`): each case says why it is here. A seed
//! that fails prints the command that reproduces it. The seeds with `--random-faults` name the
//! faults drawn by this version of the simulator; a change to what is drawn moves them.

use convoke_sim::commands::bootstrap::{BootstrapOptions, run_seed};

struct Case {
    seed: u64,
    nodes: usize,
    why: &'static str,
}

/// Seeds whose random faults made formation hard.
const CASES: &[Case] = &[
    Case {
        seed: 684,
        nodes: 4,
        why: "the founder restarted after the others joined it and before they were Up: its new \
              incarnation is admitted through them (every joiner once downed itself, taking the \
              old incarnation's Down for its cluster downed around it)",
    },
    Case {
        seed: 123,
        nodes: 5,
        why: "the founder crashed before anyone joined it: its restart formed the cluster again",
    },
    Case { seed: 198, nodes: 5, why: "a restart and failing lookups mid-formation" },
    Case { seed: 17, nodes: 6, why: "lost probes, partial answers and a restart" },
    Case {
        seed: 662,
        nodes: 3,
        why: "the restarted founder, as 684: both joiners once downed themselves and the cluster \
              formed after 80 s, past B1's bound",
    },
    Case {
        seed: 342,
        nodes: 10,
        why: "the restarted founder, as 684: all nine joiners once downed themselves and the \
              cluster formed after 81 s",
    },
];

fn run(cases: &[Case]) -> Vec<String> {
    cases
        .iter()
        .filter_map(|c| {
            let o =
                BootstrapOptions { random_faults: true, ..BootstrapOptions::new(c.seed, c.nodes) };
            let r = run_seed(&o);
            (!r.pass).then(|| format!("{} ({}): {:?}", r.reproduce, c.why, r.violation))
        })
        .collect()
}

#[test]
fn bootstrap_seeds_that_once_were_hard_form_one_cluster_within_the_bound() {
    let failed = run(CASES);
    assert!(failed.is_empty(), "{failed:#?}");
}

#[test]
fn a_hundred_seeds_with_random_faults_form_one_cluster_at_each_size() {
    for nodes in [3, 5, 7] {
        let failed: Vec<String> = (1000..1100)
            .filter_map(|seed| {
                let o =
                    BootstrapOptions { random_faults: true, ..BootstrapOptions::new(seed, nodes) };
                let r = run_seed(&o);
                (!r.pass).then(|| format!("{}: {:?}", r.reproduce, r.violation))
            })
            .collect();
        assert!(failed.is_empty(), "N={nodes}: {failed:#?}");
    }
}
