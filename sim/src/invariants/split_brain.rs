//! The seam for the split-brain resolver's invariants: S1–S4 and S14 of reliability.md §2.1.
//!
//! None of them can be checked yet: the core has no resolver, and in the meantime the simulator's
//! [operator](crate::operator) does the downing. When the resolver lands, its issue adds one file
//! per invariant next to this one and registers the checkers in [`register`]:
//!
//! - **S1** (no two live sub-clusters after a decision) and **S14** (a downed node stops) span nodes
//!   and processes: implement [`Invariant::check_world`](super::Invariant::check_world) and return
//!   `true` from `wants_world`. The [`WorldView`](super::WorldView) gives every slot's core, whether
//!   its process has stopped, and the real link state, so "at most one side still has running Up
//!   members" and "every member the other side downed has stopped" can be read directly.
//! - **S3** (indirectly connected nodes are downed) and **S4** (down-all when unstable) judge the
//!   resolver's decisions against the reachability it was given: a checker sees every step of the
//!   node that took the decision through [`Invariant::check_step`](super::Invariant::check_step);
//!   the decision itself will reach it as a new [`Cause`](super::Cause) variant (or a field of
//!   [`Observation`](super::Observation)) carrying the resolver's inputs and output.
//! - **S2** (complementary decisions) is a property test of the pure `decide()` and lives with the
//!   resolver; a simulator checker can add the end-to-end form (each side's decision, paired).
//!
//! The chaos command then switches its downing from the operator to the resolver (see
//! `OperatorConfig`), and the liveness phase keeps demanding one converged cluster.

use super::Invariant;

/// Registers the split-brain resolver's checkers. Empty until the resolver exists.
pub fn register(checkers: &mut Vec<Box<dyn Invariant>>) {
    let _ = checkers;
}
