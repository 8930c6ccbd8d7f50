//! How the nemesis and the operator act on the world: the [`Action`]s they apply or schedule, and
//! the [`Control`] interface the world implements.
//!
//! The world owns the nemesis and the operator and calls them; they see it only through this
//! interface, so that neither imports the world back.

use std::time::Duration;

use convoke_membership::{Address, UniqueAddress};

use crate::invariants::WorldView;
use crate::net::NetConfig;

/// A scheduled action on the world.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Start a new incarnation in the slot (if nothing runs there) and join through `seeds`.
    Start {
        /// The slot.
        slot: usize,
        /// Seed slots, in order; empty: do not join.
        seeds: Vec<usize>,
    },
    /// Restart the slot's process if incarnation `after` is still what stopped there: the
    /// supervisor bringing a process back. Joins through every other slot.
    Restart {
        /// The slot.
        slot: usize,
        /// The incarnation count when the restart was scheduled.
        after: u32,
    },
    /// Crash the slot's process.
    Crash(usize),
    /// Pause the slot's process.
    Pause(usize),
    /// Resume it.
    Resume(usize),
    /// Start partition `id`.
    Block {
        /// Partition id.
        id: u64,
        /// Blocked directed links.
        links: Vec<(usize, usize)>,
    },
    /// End partition `id`.
    Unblock(u64),
    /// Clog a node.
    Clog(usize),
    /// Unclog it.
    Unclog(usize),
    /// Change the network quality.
    SetNet(NetConfig),
    /// The node in `slot` leaves gracefully.
    Leave(usize),
    /// The node in `from` downs the current incarnation in slot `target`.
    Down {
        /// Who issues the command.
        from: usize,
        /// Whose current incarnation is downed.
        target: usize,
    },
    /// Deliver messages the node must reject (S13).
    Stray(usize),
}

/// What the nemesis and the operator may see of the world and do to it, besides what the
/// invariant checkers see ([`WorldView`]).
pub trait Control: WorldView {
    /// The current (or last) incarnation in `slot`.
    fn node(&self, slot: usize) -> Option<&UniqueAddress>;

    /// The slot of `address`, if it is a simulated node.
    fn slot_of(&self, address: &Address) -> Option<usize>;

    /// Slots with a running process.
    fn running(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.slots()).filter(|i| self.is_running(*i))
    }

    /// Applies `action` now.
    fn apply(&mut self, action: Action);

    /// Schedules `action` at global time `at` (not before now).
    fn schedule(&mut self, at: Duration, action: Action);

    /// Crashes the process in `slot` outright; unlike applying [`Action::Crash`], the step log
    /// shows no action.
    fn crash(&mut self, slot: usize);

    /// Joins `slot` to the node in slot `to`.
    fn join(&mut self, slot: usize, to: usize);

    /// Has the supervisor restart the process in `slot` after its restart delay.
    fn schedule_restart(&mut self, slot: usize);

    /// Incarnations that crashed since the last call, with when, oldest first.
    fn take_crashes(&mut self) -> Vec<(UniqueAddress, Duration)>;

    /// How long the operator waits, seeing an incarnation unreachable, before downing it.
    fn down_after(&self) -> Duration;

    /// Has the operator down `node`, in `slot`, which a fault cut off for good: from the others
    /// and from itself.
    fn down_isolated(&mut self, node: UniqueAddress, slot: usize);
}
