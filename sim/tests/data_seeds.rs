//! The replicated store in chaos runs (`chaos --data`, docs/data.md, "Simulation"): a seed at
//! three and at five nodes passes D1 to D4 with the checks having something to check, and runs
//! the same twice. Entities that keep a state in it (`chaos --entity-state`,
//! docs/sharding-design.md, "Simulation"): S19 (acknowledged states never fork) and S20 (no
//! acknowledged state lost).

use std::time::Duration;

use convoke_sim::commands::chaos::{ChaosDowning, ChaosOptions, SeedReport, run_seed};

/// Seed `seed` at `nodes` nodes with the store, and with entities that keep a state in it when
/// `entity_state`.
fn run(seed: u64, nodes: usize, entity_state: bool) -> SeedReport {
    let mut o = ChaosOptions::new(seed, nodes, Duration::from_secs(600));
    o.data = true;
    o.entity_state = entity_state;
    run_seed(&o)
}

/// Seed `seed` at `nodes` nodes with entities that keep a state in the store: it passes, and
/// its checks ran on real writers (many claims).
fn entity_state_seed(seed: u64, nodes: usize) -> SeedReport {
    let r = run(seed, nodes, true);
    assert_passed(&r, "--entity-state");
    assert!(r.sharding.state_claims > 100, "{:?}", r.sharding);
    r
}

fn assert_passed(r: &SeedReport, flag: &str) {
    assert!(
        r.pass,
        "seed {} at N = {}: {:?}\n  reproduce: {}",
        r.seed, r.nodes, r.violation, r.reproduce
    );
    assert!(r.reproduce.contains(flag), "{}", r.reproduce);
}

#[test]
fn a_store_under_faults_loses_no_acknowledged_write_and_its_replicas_converge() {
    for (seed, nodes) in [(1, 3), (2, 5)] {
        let r = run(seed, nodes, false);
        assert_passed(&r, "--data");
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
    let (a, b) = (run(3, 3, false), run(3, 3, false));
    assert!(a.pass, "{:?}", a.violation);
    assert_eq!(a.data_trace_hash, b.data_trace_hash);
    assert_eq!(a.trace_hash, b.trace_hash);
    assert_ne!(a.data_trace_hash, format!("{:016x}", 0), "the store layer took steps");
}

/// Seeds at four nodes where two incarnations of an entity on one node claimed its state with
/// the same ballot (their writer id was the node's uid) and both had their writes acknowledged:
/// S19 broke. Every writer now has an id of its own (`Writer::holder`). At three nodes, where
/// every member is a replica of every key, both invariants hold.
#[test]
fn entity_states_under_faults_never_fork_nor_lose_a_write_where_the_replicas_stay() {
    for (seed, nodes) in [(103, 4), (111, 4), (7, 3)] {
        let r = run(seed, nodes, true);
        assert_passed(&r, "--entity-state");
        let s = r.sharding;
        // The checks ran on real writers: many writes, claims by many incarnations.
        assert!(s.state_writes > 1_000, "{s:?}");
        assert!(s.state_claims > 100, "{s:?}");
    }
}

/// S20 at four and five nodes, where a key has three replicas among more members. Seed 109 at
/// four nodes: every process was downed and restarted, and the first two back formed a
/// cluster whose ring held only them; a claim there started from nothing, without a write that
/// two of the three processes not yet back had acknowledged. Seed 60300032 at five nodes: a
/// process that joined after two members were removed never knew them, and its claim missed
/// the write they held. Members that went away without leaving now keep their places on the
/// ring (absent holders, docs/data.md), restarted nodes read the ring from their disks, and
/// nodes tell newcomers of both: each claim waits until those holders are back. Seed 60300221
/// at seven nodes: a process left while its store was still handing its keys over, and a claim
/// on the ring without it missed a write only it and an absent holder had; the simulated leave
/// now waits for the handoff, as the runtime's does.
#[test]
fn a_claim_waits_for_the_replicas_that_took_a_write_in_after_they_went_down_or_were_forgotten() {
    for (seed, nodes) in [(109, 4), (60_300_032, 5), (60_300_221, 7)] {
        entity_state_seed(seed, nodes);
    }
}

/// S20 at 24 nodes, seed 62000031: a write of entity e270 was held by two of its three
/// replicas, one of which then went away; members joined and the key's replicas moved, and the
/// process that coordinated the next claim restarted before anything was copied on. It had kept
/// only its current ring on disk, so its claim asked the new replicas alone and read nothing.
/// The rings a node remembers are now kept on its disk too.
#[test]
fn a_restarted_coordinator_still_asks_the_replicas_of_the_rings_it_remembered() {
    entity_state_seed(62_000_031, 24);
}

/// L9 at 25 nodes, seed 62000420: entity e22's key had moved off a ring on which two of its
/// three replicas were gone (one crashed for good, one downed and not yet back), so its claim
/// at 670 s failed, as it must, and so did the ask it was for. The liveness check judged whether
/// the replicas were gone at the end of the run, when the second was back. It now judges it when
/// the claim fails.
#[test]
fn an_ask_that_failed_while_its_states_replicas_were_gone_is_not_held_against_liveness() {
    let r = entity_state_seed(62_000_420, 25);
    assert!(r.sharding.state_unavailable > 0, "{:?}", r.sharding);
}

/// S20 at nine nodes, seed 63001413: after every process was downed and restarted, a write was
/// held by two of its three replicas; one of them left gracefully while the key's third
/// replica on the ring without it was still absent, and handed the key to the present replicas
/// only. The write was then on one replica of that ring; it crashed, and a claim answered by the
/// other two read the state before the write. A leave now waits for absent replicas too.
#[test]
fn a_leave_hands_its_keys_to_absent_replicas_too() {
    entity_state_seed(63_001_413, 9);
}

/// L9 at 19 nodes, seed 63000123: a leave drawn just before the heal waited 15 s for its
/// store's handoff (an absent replica), and the membership counted as settled meanwhile; when
/// the leave went ahead, an ask to an entity on the leaving process failed. The membership now
/// settles only once no process waits to leave.
#[test]
fn the_membership_settles_only_once_a_leave_waiting_for_its_handoff_has_gone_ahead() {
    entity_state_seed(63_000_123, 19);
}

/// S20 with the oracle's downing. Seed 62100257 at seven nodes: a write taken while the cluster
/// was forming was held by replicas the key moved away from when more members came Up; one of
/// them was unreachable, so nothing was copied on, and the ring was forgotten by time all the
/// same. A ring with an unreachable member is now kept, as one with an absent holder is. Seed
/// 62100229 at five nodes: a process left after its handoff had timed out, and the others no
/// longer counted it although a write was on it and on a replica that had crashed. A member
/// now counts as gone gracefully only after it said its handoff was done.
#[test]
fn a_claim_waits_for_holders_that_were_unreachable_or_left_before_their_handoff_was_done() {
    for (seed, nodes) in [(62_100_257, 7), (62_100_229, 5)] {
        let mut o = ChaosOptions::new(seed, nodes, Duration::from_secs(600));
        o.data = true;
        o.entity_state = true;
        o.downing = ChaosDowning::Oracle;
        let r = run_seed(&o);
        assert_passed(&r, "--downing oracle");
        assert!(r.sharding.state_claims > 100, "{:?}", r.sharding);
    }
}

/// L9 at three nodes with remembered entities: a claim of entity e190's state at 521 s reached
/// only its own node's replica and timed out. Merging spread its promise, which is above the
/// ballot of the incarnation that claimed the key at 591 s, so that incarnation's write at 650 s
/// was refused, it was fenced and an ask failed after the shards were balanced. A writer refused
/// now claims again and carries on when the state it reads is still its own.
#[test]
fn a_promise_left_by_a_claim_that_came_to_nothing_does_not_fence_the_writer_for_good() {
    let mut o = ChaosOptions::new(29_040_107, 3, Duration::from_secs(600));
    o.remember_entities = true;
    o.entity_state = true;
    let r = run_seed(&o);
    assert_passed(&r, "--remember-entities");
    assert!(
        r.sharding.state_reclaims > 0,
        "a write was refused and claimed again: {:?}",
        r.sharding
    );
}

/// S20 at 14 nodes, seed 63001649: a write taken while the cluster was forming was held by the
/// two members of the ring then. When the others came Up, the key's replicas were three of
/// them, one of which had crashed; the two holders waited for it before handing the key off,
/// and the ring they had written on was forgotten meanwhile. A claim coordinated by a new
/// replica, answered by the two present ones, started from nothing. A node now copies such
/// keys to the replicas that are present while one is away.
#[test]
fn keys_moved_off_a_node_reach_the_present_replicas_while_one_is_away() {
    entity_state_seed(63_001_649, 14);
}

/// S20 at 14 nodes, seed 63000760: after the resolver downed the whole cluster, a process that
/// had crashed before it ever joined formed the new cluster with one that remembered the other
/// twelve as absent holders. That one told the newcomer at once, and the word reached it before
/// its own view listed the teller, so it was dropped and never sent again; the newcomer then
/// claimed an entity on a ring of two and started from nothing. A newcomer now keeps such a
/// word until it sees the teller.
#[test]
fn a_newcomer_takes_the_absent_holders_it_was_told_of_before_it_saw_the_teller() {
    entity_state_seed(63_000_760, 14);
}

/// S20 at 9 nodes, seed 63001104: a member left gracefully and a write was acknowledged on the
/// ring without it; then every process was restarted. The others put the returning member on
/// their rings as an absent holder before they saw it Up, so when it came Up it was not new on
/// their rings and nobody told it of the ring without it, now a past one; its claim missed the
/// write. A member that comes to hold keys (new on the ring, or back from being absent) is now
/// told of the rings remembered.
#[test]
fn a_holder_back_from_being_absent_is_told_the_rings_made_while_it_was_away() {
    entity_state_seed(63_001_104, 9);
}

/// S20 at 8 nodes, seed 63000261: a member left gracefully and a write was acknowledged on the
/// ring without it. The member restarted on the ring its disk knew and, still Joining,
/// coordinated a claim of the key; it had been told the rings the others remembered but not the
/// one they were on, and its claim missed the write. The word about rings given to a newcomer
/// now carries the teller's current ring too.
#[test]
fn a_restarted_member_learns_the_ring_the_others_are_on() {
    entity_state_seed(63_000_261, 8);
}
