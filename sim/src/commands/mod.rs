//! The simulator's commands, as library functions returning serialisable reports: [`converge`],
//! [`detect`], [`chaos`] and [`bootstrap`]. The binary only parses flags and prints.

pub mod bootstrap;
pub mod chaos;
pub mod converge;
pub mod detect;

use std::time::Duration;

use convoke_membership::member::MemberStatus;

use crate::world::Sim;

/// The seed slots used to form a cluster: the first three.
pub fn seeds(n: usize) -> Vec<usize> {
    (0..n.min(3)).collect()
}

/// Whether every node in `slots` runs, has exactly `slots` as members (by address), all Up, and
/// reports convergence. O(n²): call it rarely.
pub fn all_up_converged(sim: &Sim, slots: &[usize]) -> bool {
    let mut listed = Vec::new();
    for &i in slots {
        if listed.len() <= i {
            listed.resize(i + 1, false);
        }
        listed[i] = true;
    }
    slots.iter().all(|i| {
        sim.is_running(*i)
            && sim.core(*i).is_some_and(|c| {
                let g = c.gossip();
                g.len() == slots.len()
                    && g.members().all(|m| {
                        m.status() == MemberStatus::Up
                            && sim
                                .slot_of(m.address())
                                .is_some_and(|s| listed.get(s) == Some(&true))
                    })
                    && c.convergence()
            })
    })
}

/// Starts every slot in `slots` now and joins it through the first three.
pub fn start_bulk(sim: &mut Sim, slots: &[usize]) {
    let seeds: Vec<usize> = slots.iter().copied().take(3).collect();
    for &i in slots {
        sim.start(i);
        sim.join_seeds(i, &seeds);
    }
}

/// Seconds as `f64`, for reports.
pub fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}
