//! Message-level tests of the core: one or two [`Cluster`]s driven directly with hand-made
//! messages and timeouts, asserting on what they send, publish and hold.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::compat::COMPAT_ACTIVE_STRATEGY;
use crate::config::TargetPreference;
use crate::member::tests::node;
use crate::member::{Member, UpNumber};
use crate::message::ConfigCheck;
use crate::reachability::ReachabilityStatus;
use crate::vclock::VectorClock;
use MemberStatus::*;

const WALL: WallMillis = WallMillis(1_700_000_000_000);

#[allow(clippy::disallowed_methods, reason = "tests need a base instant; only offsets matter")]
fn t0() -> Instant {
    Instant::now()
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Node `i` at `h<i>:2552` with uid `i`; addresses order as the indices do (for `i` < 10).
fn n(i: u64) -> UniqueAddress {
    node(&format!("h{i}:2552"), i)
}

fn a(i: u64) -> Address {
    n(i).address
}

/// The configuration of these tests: automatic downing is off, so that the core's own rules are
/// tested alone (the split-brain resolver has its own tests).
fn cfg() -> Config {
    let mut c = Config { system_name: "sys".to_owned(), ..Config::default() };
    c.split_brain_resolver.active_strategy = "off".to_owned();
    c
}

/// A configuration whose reaper never runs within a test, so that peers that never answer
/// heartbeats are not marked unreachable behind the test's back.
fn no_reaper() -> Config {
    Config { unreachable_nodes_reaper_interval: secs(3600), ..cfg() }
}

fn dc_roles() -> BTreeSet<String> {
    BTreeSet::from(["dc-default".to_owned()])
}

fn member(i: u64, status: MemberStatus, up: u32) -> Member {
    Member::from_parts(n(i), UpNumber(up), status, dc_roles(), AppVersion::default())
}

fn up(i: u64, up: u32) -> Member {
    member(i, Up, up)
}

fn joining(i: u64) -> Member {
    Member::joining(n(i), dc_roles(), AppVersion::default())
}

fn with_role(m: Member, role: &str) -> Member {
    let mut roles = m.roles().clone();
    roles.insert(role.to_owned());
    Member::from_parts(m.node().clone(), m.up_number(), m.status(), roles, m.app_version().clone())
}

/// A gossip with these members, seen by `seen`, at version {n1: 1}.
fn gossip(members: impl IntoIterator<Item = Member>, seen: &[u64]) -> Gossip {
    let mut g = Gossip::with_members(members);
    g.increment_version(&n(1));
    for i in seen {
        g.add_seen(&n(*i));
    }
    g
}

/// `g` changed by node `i`: its clock entry bumped, seen only by `seen`.
fn bumped(g: &Gossip, i: u64, seen: &[u64]) -> Gossip {
    let mut g = g.clone();
    g.increment_version(&n(i));
    g.clear_seen();
    for s in seen {
        g.add_seen(&n(*s));
    }
    g
}

fn status_of(c: &Cluster, i: u64) -> Option<MemberStatus> {
    c.gossip().member(&n(i)).map(Member::status)
}

fn up_number_of(c: &Cluster, i: u64) -> Option<u32> {
    c.gossip().member(&n(i)).map(|m| m.up_number().0)
}

fn new_core(i: u64, config: Config, now: Instant) -> Cluster {
    Cluster::new(config, n(i), now, WALL).unwrap()
}

/// Node `i` as a member holding `g`, installed the way a joiner gets it: a Welcome from `from`.
/// Everything the installation sent and published is drained.
fn member_core(i: u64, config: Config, now: Instant, from: u64, g: Gossip) -> Cluster {
    let mut c = new_core(i, config, now);
    c.join(now, a(from)).unwrap();
    c.handle_message(now, n(from), Message::Welcome { from: n(from), gossip: Arc::new(g) });
    assert!(c.is_initialized(), "the Welcome was not accepted");
    drain(&mut c);
    c
}

/// Node 1 after joining itself: a singleton cluster, Up.
fn first_node(config: Config, now: Instant) -> Cluster {
    let mut c = new_core(1, config, now);
    c.join(now, a(1)).unwrap();
    drain(&mut c);
    c
}

fn transmits(c: &mut Cluster) -> Vec<Transmit> {
    std::iter::from_fn(|| c.poll_transmit()).collect()
}

fn events(c: &mut Cluster) -> Vec<ClusterEvent> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

fn drain(c: &mut Cluster) {
    transmits(c);
    events(c);
}

/// Fires every timer due up to and including `until`, in time order, returning what was sent and
/// when. Events are left for the caller.
fn run_until(c: &mut Cluster, until: Instant) -> Vec<(Instant, Transmit)> {
    let mut out = Vec::new();
    let mut steps = 0;
    while let Some(at) = c.poll_timeout().filter(|at| *at <= until) {
        steps += 1;
        assert!(steps < 100_000, "the timers do not advance");
        c.handle_timeout(at);
        out.extend(std::iter::from_fn(|| c.poll_transmit()).map(|t| (at, t)));
    }
    out
}

/// Only the messages of one kind, with their destination.
fn of_kind<'t>(ts: impl IntoIterator<Item = &'t Transmit>, kind: &str) -> Vec<&'t Transmit> {
    ts.into_iter().filter(|t| t.message.kind() == kind).collect()
}

fn is_gossip(t: &Transmit) -> bool {
    matches!(t.message, Message::Gossip { .. } | Message::GossipStatus { .. })
}

fn gossip_msg(from: u64, to: UniqueAddress, g: &Gossip) -> Message {
    Message::Gossip { from: n(from), to, gossip: Arc::new(g.clone()) }
}

fn join_msg(node: UniqueAddress) -> Message {
    Message::Join { node, roles: dc_roles(), app_version: AppVersion::default() }
}

fn init_join(config: &Config) -> Message {
    Message::InitJoin { config: config.compat_keys() }
}

fn event_names(es: &[ClusterEvent]) -> Vec<&'static str> {
    es.iter().map(ClusterEvent::type_name).collect()
}

fn welcome_gossip(t: &Transmit) -> &Gossip {
    match &t.message {
        Message::Welcome { gossip, .. } => gossip,
        other => panic!("expected a Welcome, got {other:?}"),
    }
}

fn sent_gossip(t: &Transmit) -> &Gossip {
    match &t.message {
        Message::Gossip { gossip, .. } => gossip,
        other => panic!("expected a Gossip, got {other:?}"),
    }
}

// ---- join handshake -----------------------------------------------------------------------------

#[test]
fn init_join_is_answered_with_nack_while_not_initialized() {
    let t = t0();
    let mut c = new_core(1, cfg(), t);
    c.handle_message(t, n(2), init_join(&cfg()));
    let nack = Message::InitJoinNack { address: a(1) };
    assert_eq!(transmits(&mut c), [Transmit { to: a(2), message: nack.clone() }]);

    // Still so while trying to join.
    c.join(t, a(3)).unwrap();
    drain(&mut c);
    c.handle_message(t, n(2), init_join(&cfg()));
    assert_eq!(transmits(&mut c), [Transmit { to: a(2), message: nack }]);
}

#[test]
fn init_join_is_acked_as_compatible_by_a_member() {
    let t = t0();
    let mut c = first_node(cfg(), t);
    c.handle_message(t, n(2), init_join(&cfg()));
    let ack = Message::InitJoinAck {
        address: a(1),
        config_check: ConfigCheck::Compatible(cfg().compat_keys()),
    };
    assert_eq!(transmits(&mut c), [Transmit { to: a(2), message: ack }]);

    // A joiner that sends no configuration gets the "unsupported" answer.
    c.handle_message(t, n(2), Message::InitJoin { config: Default::default() });
    let ack =
        Message::InitJoinAck { address: a(1), config_check: ConfigCheck::UnsupportedByJoiningNode };
    assert_eq!(transmits(&mut c), [Transmit { to: a(2), message: ack }]);
}

#[test]
fn init_join_is_acked_as_incompatible_when_the_split_brain_strategy_differs() {
    let t = t0();
    let mut c = first_node(cfg(), t);
    let mut theirs = cfg();
    theirs.split_brain_resolver.active_strategy = "keep-oldest".to_owned();
    assert_ne!(theirs.compat_keys(), cfg().compat_keys());
    c.handle_message(t, n(2), init_join(&theirs));
    let ack = Message::InitJoinAck { address: a(1), config_check: ConfigCheck::Incompatible };
    assert_eq!(transmits(&mut c), [Transmit { to: a(2), message: ack }]);
}

#[test]
fn init_join_is_answered_with_nack_when_this_node_is_down_or_exiting() {
    let t = t0();
    let nack = Message::InitJoinNack { address: a(1) };

    let mut c = first_node(cfg(), t);
    c.down(t, &a(1));
    assert_eq!(c.self_status(), Down);
    drain(&mut c);
    c.handle_message(t, n(2), init_join(&cfg()));
    assert_eq!(transmits(&mut c), [Transmit { to: a(2), message: nack.clone() }]);

    let g = gossip([member(1, Exiting, 1), up(2, 2)], &[2]);
    let mut c = member_core(1, cfg(), t, 2, g);
    c.handle_message(t, n(3), init_join(&cfg()));
    assert_eq!(transmits(&mut c), [Transmit { to: a(3), message: nack }]);
}

#[test]
fn first_seed_resends_init_join_every_second_and_joins_itself_after_the_seed_node_timeout() {
    let t = t0();
    let mut c = new_core(1, cfg(), t);
    c.join_seed_nodes(t, vec![a(1), a(2), a(3)]).unwrap();
    let first = transmits(&mut c);
    assert_eq!(first.iter().map(|t| &t.to).collect::<Vec<_>>(), [&a(2), &a(3)]);
    assert!(first.iter().all(|t| t.message == init_join(&cfg())));

    let sent = run_until(&mut c, t + ms(4_999));
    let init_joins = of_kind(sent.iter().map(|(_, tr)| tr), "InitJoin");
    assert_eq!(init_joins.len(), 8, "four more rounds to both other seeds: {sent:?}");
    let rounds: BTreeSet<Duration> = sent.iter().map(|(at, _)| *at - t).collect();
    assert_eq!(rounds, BTreeSet::from([secs(1), secs(2), secs(3), secs(4)]));
    assert_eq!(c.self_status(), Removed, "not a member before the timeout");

    let sent = run_until(&mut c, t + secs(5));
    assert!(of_kind(sent.iter().map(|(_, tr)| tr), "InitJoin").is_empty());
    assert_eq!(c.self_status(), Up, "formed a cluster alone at the seed-node timeout");
    assert_eq!(up_number_of(&c, 1), Some(1));

    // The process has stopped.
    let sent = run_until(&mut c, t + secs(10));
    assert!(of_kind(sent.iter().map(|(_, tr)| tr), "InitJoin").is_empty());
}

#[test]
fn first_seed_joins_itself_as_soon_as_every_other_seed_nacks() {
    let t = t0();
    let mut c = new_core(1, cfg(), t);
    c.join_seed_nodes(t, vec![a(1), a(2), a(3)]).unwrap();
    drain(&mut c);
    c.handle_message(t + ms(10), n(2), Message::InitJoinNack { address: a(2) });
    assert_eq!(c.self_status(), Removed);
    let resent = run_until(&mut c, t + secs(1));
    let to: Vec<&Address> = resent.iter().map(|(_, tr)| &tr.to).collect();
    assert_eq!(to, [&a(3)], "only the seeds that have not answered are asked again");
    c.handle_message(t + ms(1_020), n(3), Message::InitJoinNack { address: a(3) });
    assert_eq!(c.self_status(), Up);
    assert_eq!(up_number_of(&c, 1), Some(1));
    assert!(transmits(&mut c).is_empty());
}

#[test]
fn a_non_first_seed_resends_init_join_every_seed_node_timeout_and_ignores_nacks() {
    let t = t0();
    let mut c = new_core(2, cfg(), t);
    c.join_seed_nodes(t, vec![a(1), a(2), a(3)]).unwrap();
    let first = transmits(&mut c);
    assert_eq!(first.iter().map(|t| &t.to).collect::<Vec<_>>(), [&a(1), &a(3)]);

    c.handle_message(t, n(1), Message::InitJoinNack { address: a(1) });
    c.handle_message(t, n(3), Message::InitJoinNack { address: a(3) });
    assert!(transmits(&mut c).is_empty());
    assert_eq!(c.self_status(), Removed, "a Nack never makes a non-first seed form a cluster");

    let sent = run_until(&mut c, t + secs(16));
    let init_joins: Vec<(Duration, &Address)> = sent
        .iter()
        .filter(|(_, tr)| tr.message.kind() == "InitJoin")
        .map(|(at, tr)| (*at - t, &tr.to))
        .collect();
    assert_eq!(
        init_joins,
        [
            (secs(5), &a(1)),
            (secs(5), &a(3)),
            (secs(10), &a(1)),
            (secs(10), &a(3)),
            (secs(15), &a(1)),
            (secs(15), &a(3))
        ]
    );
    assert_eq!(c.self_status(), Removed);
}

#[test]
fn an_init_join_ack_makes_the_joiner_send_join_to_that_seed() {
    let t = t0();
    let mut c = new_core(2, cfg(), t);
    c.join_seed_nodes(t, vec![a(1), a(3)]).unwrap();
    drain(&mut c);
    let ack = |i| Message::InitJoinAck {
        address: a(i),
        config_check: ConfigCheck::Compatible(cfg().compat_keys()),
    };
    c.handle_message(t + ms(10), n(3), ack(3));
    let join = Message::Join {
        node: n(2),
        roles: dc_roles(),
        app_version: AppVersion::parse(&cfg().app_version),
    };
    assert_eq!(transmits(&mut c), [Transmit { to: a(3), message: join }]);

    // Later acks are ignored and the seed process has stopped.
    c.handle_message(t + ms(20), n(1), ack(1));
    assert!(transmits(&mut c).is_empty());
    let sent = run_until(&mut c, t + ms(9_999));
    assert!(sent.is_empty(), "{sent:?}");
}

#[test]
fn an_incompatible_ack_shuts_the_joiner_down_when_enforce_on_join_is_on() {
    let t = t0();
    let mut c = new_core(2, cfg(), t);
    c.join_seed_nodes(t, vec![a(1)]).unwrap();
    drain(&mut c);
    c.handle_message(
        t,
        n(1),
        Message::InitJoinAck { address: a(1), config_check: ConfigCheck::Incompatible },
    );
    assert!(matches!(c.shutdown_reason(), Some(ShutdownReason::IncompatibleConfig(_))));
    assert!(transmits(&mut c).is_empty(), "no Join is sent");
    assert_eq!(c.poll_timeout(), None);

    // The joiner also checks the values a seed reports as compatible.
    let mut c = new_core(2, cfg(), t);
    c.join_seed_nodes(t, vec![a(1)]).unwrap();
    drain(&mut c);
    let mut theirs = cfg().compat_keys();
    theirs.insert(COMPAT_ACTIVE_STRATEGY.to_owned(), "down-all".to_owned());
    let check = ConfigCheck::Compatible(theirs);
    c.handle_message(t, n(1), Message::InitJoinAck { address: a(1), config_check: check });
    assert!(matches!(c.shutdown_reason(), Some(ShutdownReason::IncompatibleConfig(_))));
}

#[test]
fn an_incompatible_ack_is_joined_anyway_when_enforce_on_join_is_off() {
    let t = t0();
    let mut c = new_core(2, Config { config_compat_enforce_on_join: false, ..cfg() }, t);
    c.join_seed_nodes(t, vec![a(1)]).unwrap();
    drain(&mut c);
    c.handle_message(
        t,
        n(1),
        Message::InitJoinAck { address: a(1), config_check: ConfigCheck::Incompatible },
    );
    assert_eq!(c.shutdown_reason(), None);
    assert_eq!(of_kind(&transmits(&mut c), "Join").len(), 1);
}

#[test]
fn join_to_an_address_of_another_system_is_refused() {
    let t = t0();
    let mut c = new_core(1, cfg(), t);
    let other = Address::new("other", "h2", 2552).unwrap();
    assert!(matches!(c.join(t, other.clone()), Err(JoinError::SystemMismatch { .. })));
    assert!(matches!(
        c.join_seed_nodes(t, vec![a(1), other]),
        Err(JoinError::SystemMismatch { .. })
    ));
    assert!(transmits(&mut c).is_empty());
    assert!(!c.is_initialized());
}

#[test]
fn join_after_becoming_a_member_is_refused() {
    let t = t0();
    let mut c = first_node(cfg(), t);
    assert_eq!(c.join(t, a(2)), Err(JoinError::AlreadyMember { address: a(2) }));
    assert_eq!(c.join_seed_nodes(t, vec![a(2)]), Err(JoinError::AlreadyMember { address: a(2) }));
    assert!(transmits(&mut c).is_empty());
}

#[test]
fn a_member_answers_join_from_a_new_node_with_welcome_holding_it_as_joining() {
    let t = t0();
    let mut c = first_node(cfg(), t);
    c.handle_message(t, n(2), join_msg(n(2)));
    let sent = transmits(&mut c);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].to, a(2));
    let Message::Welcome { from, gossip } = &sent[0].message else { panic!("{sent:?}") };
    assert_eq!(*from, n(1));
    assert_eq!(gossip.member(&n(2)).map(Member::status), Some(Joining));
    assert_eq!(gossip.member(&n(1)).map(Member::status), Some(Up));
    assert_eq!(**gossip, **c.gossip(), "the Welcome carries the current gossip");
    assert_eq!(event_names(&events(&mut c)), ["MemberJoined"]);
}

#[test]
fn a_duplicate_join_is_answered_with_welcome_again_and_changes_nothing() {
    let t = t0();
    let mut c = first_node(cfg(), t);
    c.handle_message(t, n(2), join_msg(n(2)));
    let first = transmits(&mut c);
    drain(&mut c);
    let before = c.gossip().clone();

    c.handle_message(t + ms(100), n(2), join_msg(n(2)));
    let again = transmits(&mut c);
    assert_eq!(again.len(), 1);
    assert_eq!(welcome_gossip(&again[0]), welcome_gossip(&first[0]));
    assert!(events(&mut c).is_empty());
    assert_eq!(**c.gossip(), *before);
}

#[test]
fn join_from_a_new_incarnation_terminates_and_downs_the_old_one_without_adding_the_new_one() {
    let t = t0();
    let g = gossip([up(1, 1), up(2, 2), up(3, 3)], &[2, 3]);
    let mut c = member_core(1, cfg(), t, 2, g);
    let restarted = node("h2:2552", 99);
    c.handle_message(t, restarted.clone(), join_msg(restarted.clone()));

    let g = c.gossip();
    assert_eq!(g.reachability().status_by(&n(1), &n(2)), ReachabilityStatus::Terminated);
    assert_eq!(status_of(&c, 2), Some(Down));
    assert!(!c.gossip().has_member(&restarted));
    let sent = transmits(&mut c);
    assert!(of_kind(&sent, "Welcome").is_empty(), "{sent:?}");
    let names = event_names(&events(&mut c));
    assert!(names.contains(&"MemberDowned") && names.contains(&"UnreachableMember"), "{names:?}");
}

#[test]
fn join_from_a_removed_incarnation_is_ignored() {
    // Found by the simulator (chaos seed 176, 5 nodes): a node removed while it was paused before
    // its Welcome arrived retried its join with the same uid, and was admitted again.
    let t = t0();
    let mut g = gossip([up(1, 1), up(2, 2), up(3, 3)], &[2, 3]);
    g.remove(&n(3), WALL);
    let mut c = member_core(1, cfg(), t, 2, g);
    let before = c.gossip().clone();
    c.handle_message(t, n(3), join_msg(n(3)));
    assert!(!c.gossip().has_member(&n(3)));
    assert!(Arc::ptr_eq(c.gossip(), &before), "the gossip changed");
    assert!(of_kind(&transmits(&mut c), "Welcome").is_empty());
    assert!(c.gossip().check_invariants().is_ok());
}

#[test]
fn join_is_ignored_while_preparing_for_full_shutdown() {
    let t = t0();
    let g = gossip([up(1, 1), up(2, 2)], &[2]);
    let mut c = member_core(1, cfg(), t, 2, g);
    c.prepare_for_full_shutdown(t);
    drain(&mut c);
    let before = c.gossip().clone();
    c.handle_message(t, n(3), join_msg(n(3)));
    assert!(transmits(&mut c).is_empty());
    assert!(events(&mut c).is_empty());
    assert_eq!(**c.gossip(), *before);
}

#[test]
fn join_is_ignored_by_a_node_that_is_not_initialized() {
    let t = t0();
    let mut c = new_core(1, cfg(), t);
    c.handle_message(t, n(2), join_msg(n(2)));
    assert!(transmits(&mut c).is_empty());
    assert!(c.gossip().is_empty());

    c.join(t, a(3)).unwrap();
    drain(&mut c);
    c.handle_message(t, n(2), join_msg(n(2)));
    assert!(transmits(&mut c).is_empty());
    assert!(c.gossip().is_empty());
}

#[test]
fn welcome_is_accepted_only_from_the_address_being_joined() {
    let t = t0();
    let mut c = new_core(2, cfg(), t);
    c.join(t, a(1)).unwrap();
    drain(&mut c);
    let g = gossip([up(1, 1), up(3, 2), joining(2)], &[1]);

    c.handle_message(t, n(3), Message::Welcome { from: n(3), gossip: Arc::new(g.clone()) });
    assert!(!c.is_initialized());
    assert!(c.gossip().is_empty());
    assert!(transmits(&mut c).is_empty());

    c.handle_message(t, n(1), Message::Welcome { from: n(1), gossip: Arc::new(g.clone()) });
    assert!(c.is_initialized());
    assert_eq!(c.self_status(), Joining);
    assert_eq!(c.gossip().seen(), &BTreeSet::from([n(1), n(2)]), "adopted and marked seen");
    assert_eq!(c.gossip().version(), g.version(), "not a local change");
    let sent = transmits(&mut c);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].to, a(1));
    assert_eq!(sent_gossip(&sent[0]), &**c.gossip(), "the joiner gossips back to its host");

    // A second Welcome is ignored once initialized.
    let other = bumped(&g, 3, &[3]);
    c.handle_message(t, n(1), Message::Welcome { from: n(1), gossip: Arc::new(other) });
    assert_eq!(c.gossip().version(), g.version());
}

#[test]
fn a_welcome_is_taken_only_as_the_answer_to_the_join_outstanding() {
    // Chaos seed 16004871 (N = 6): a joiner took a Welcome that had been held up in the network
    // for 25 s, long after its join had been retried, from a node that had been downed since
    // with every member the Welcome listed; once the restarted nodes at those addresses downed
    // them, it was the only live member of that cluster and led a second one.
    let t = t0();
    let mut c = new_core(2, cfg(), t);
    let g = Arc::new(gossip([up(1, 1), up(3, 2), joining(2)], &[1]));
    let welcome = |from: u64| Message::Welcome { from: n(from), gossip: g.clone() };
    let ack = |i: u64| Message::InitJoinAck { address: a(i), config_check: ConfigCheck::Unchecked };
    // Before any join, a Welcome answers nothing.
    c.handle_message(t, n(3), welcome(3));
    assert!(!c.is_initialized());

    // Node 1 acks, the Join goes to it and stays unanswered; the retry starts a new round.
    c.join_seed_nodes(t, vec![a(1), a(3)]).unwrap();
    c.handle_message(t + ms(10), n(1), ack(1));
    let sent = transmits(&mut c);
    assert!(sent.iter().any(|tr| tr.message.kind() == "Join" && tr.to == a(1)), "{sent:?}");
    let retried = run_until(&mut c, t + secs(11));
    assert!(retried.iter().any(|(_, tr)| tr.message.kind() == "InitJoin"), "{retried:?}");
    // Node 1's answer to the first Join arrives now: stale, not taken.
    c.handle_message(t + secs(11), n(1), welcome(1));
    assert!(!c.is_initialized(), "a Welcome to a join that was retried was taken");

    // The new round: node 3 acks, and its answer to the new Join is taken.
    c.handle_message(t + secs(12), n(3), ack(3));
    c.handle_message(t + secs(12), n(1), welcome(1));
    assert!(!c.is_initialized(), "a Welcome from a node other than the one asked was taken");
    c.handle_message(t + secs(12), n(3), welcome(3));
    assert!(c.is_initialized());
    assert_eq!(c.self_status(), Joining);
}

#[test]
fn a_joiner_whose_welcome_was_lost_takes_gossip_from_its_host_that_holds_it() {
    let t = t0();
    let mut c = new_core(2, cfg(), t);
    c.join(t, a(1)).unwrap();
    drain(&mut c);
    let g = gossip([up(1, 1), up(3, 2), joining(2)], &[1, 3]);
    c.handle_message(t + ms(50), n(1), gossip_msg(1, n(2), &g));
    assert!(c.is_initialized());
    assert_eq!(c.self_status(), Joining);
    assert_eq!(c.gossip().version(), g.version(), "not a local change");
    assert!(c.gossip().seen_by(&n(2)));
    let sent = transmits(&mut c);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].to, a(1));
    assert_eq!(sent_gossip(&sent[0]), &**c.gossip(), "the joiner gossips back to its host");
    let later = run_until(&mut c, t + secs(25));
    assert!(later.iter().all(|(_, tr)| tr.message.kind() != "Join"), "the join retry is off");
}

#[test]
fn gossip_to_a_joiner_is_taken_only_from_its_host_and_only_when_it_holds_this_incarnation() {
    let t = t0();
    let g = gossip([up(1, 1), up(3, 2), joining(2)], &[1, 3]);
    // Never asked to join: gossip does not make a member.
    let mut c = new_core(2, cfg(), t);
    c.handle_message(t, n(1), gossip_msg(1, n(2), &g));
    assert!(!c.is_initialized());

    c.join(t, a(1)).unwrap();
    drain(&mut c);
    // From a member other than the node asked.
    c.handle_message(t, n(3), gossip_msg(3, n(2), &g));
    assert!(!c.is_initialized());
    // Holding another incarnation at this address.
    let earlier = Member::joining(node("h2:2552", 77), dc_roles(), AppVersion::default());
    let other = gossip([up(1, 1), up(3, 2), earlier], &[1, 3]);
    c.handle_message(t, n(1), gossip_msg(1, n(2), &other));
    assert!(!c.is_initialized());
    // Addressed to someone else.
    c.handle_message(t, n(1), gossip_msg(1, n(3), &g));
    assert!(!c.is_initialized());
    assert!(c.gossip().is_empty());
    assert!(transmits(&mut c).iter().all(|tr| !is_gossip(tr)));
}

#[test]
fn join_is_resent_after_retry_unsuccessful_join_after() {
    let t = t0();
    let mut c = new_core(2, cfg(), t);
    c.join(t, a(1)).unwrap();
    assert_eq!(of_kind(&transmits(&mut c), "Join").len(), 1);
    let sent = run_until(&mut c, t + secs(25));
    let joins: Vec<(Duration, &Address)> = sent
        .iter()
        .filter(|(_, tr)| tr.message.kind() == "Join")
        .map(|(at, tr)| (*at - t, &tr.to))
        .collect();
    assert_eq!(joins, [(secs(10), &a(1)), (secs(20), &a(1))]);
    assert_eq!(sent.len(), joins.len(), "nothing else is sent: {sent:?}");
}

#[test]
fn a_join_through_seed_nodes_restarts_the_seed_process_after_retry_unsuccessful_join_after() {
    let t = t0();
    let mut c = new_core(2, cfg(), t);
    c.join_seed_nodes(t, vec![a(1), a(3)]).unwrap();
    drain(&mut c);
    let ack = ConfigCheck::Compatible(cfg().compat_keys());
    c.handle_message(t, n(1), Message::InitJoinAck { address: a(1), config_check: ack });
    drain(&mut c);
    let sent = run_until(&mut c, t + secs(10));
    let init_joins: Vec<&Address> = sent
        .iter()
        .filter(|(_, tr)| tr.message.kind() == "InitJoin")
        .map(|(_, tr)| &tr.to)
        .collect();
    assert_eq!(init_joins, [&a(1), &a(3)]);
    assert!(sent.iter().all(|(at, _)| *at == t + secs(10)));
}

#[test]
fn the_joiner_gives_up_after_shutdown_after_unsuccessful_join_seed_nodes() {
    let t = t0();
    let config = Config { shutdown_after_unsuccessful_join_seed_nodes: Some(secs(30)), ..cfg() };
    let mut c = new_core(2, config.clone(), t);
    c.join_seed_nodes(t, vec![a(1), a(3)]).unwrap();
    run_until(&mut c, t + ms(29_999));
    assert_eq!(c.shutdown_reason(), None);
    run_until(&mut c, t + secs(30));
    assert_eq!(c.shutdown_reason(), Some(&ShutdownReason::JoinUnsuccessful));
    assert_eq!(c.poll_timeout(), None);

    // Not once it has joined.
    let mut c = new_core(2, config, t);
    c.join_seed_nodes(t, vec![a(1), a(3)]).unwrap();
    let ack = Message::InitJoinAck { address: a(1), config_check: ConfigCheck::Unchecked };
    c.handle_message(t + ms(500), n(1), ack);
    let g = gossip([up(1, 1), joining(2)], &[1]);
    c.handle_message(t + secs(1), n(1), Message::Welcome { from: n(1), gossip: Arc::new(g) });
    run_until(&mut c, t + secs(40));
    assert_eq!(c.shutdown_reason(), None);
}

#[test]
fn join_is_ignored_by_a_member_that_is_down_and_from_another_system() {
    let t = t0();
    let mut c = first_node(cfg(), t);
    let other = UniqueAddress::new(Address::new("other", "h2", 2552).unwrap(), n(2).uid);
    c.handle_message(t, other.clone(), join_msg(other));
    assert!(transmits(&mut c).is_empty());
    assert_eq!(c.gossip().len(), 1);

    c.down(t, &a(1));
    drain(&mut c);
    c.handle_message(t, n(2), join_msg(n(2)));
    assert!(transmits(&mut c).is_empty());
    assert!(!c.gossip().has_member(&n(2)));
}

#[test]
fn join_from_a_new_incarnation_changes_nothing_while_the_old_one_is_already_down() {
    let t = t0();
    let g = gossip([up(1, 1), member(2, Down, 2), up(3, 3)], &[3]);
    let mut c = member_core(1, cfg(), t, 3, g);
    let before = Gossip::clone(c.gossip());
    let restarted = node("h2:2552", 99);
    c.handle_message(t, restarted.clone(), join_msg(restarted));
    assert_ignored(&mut c, &before);
}

#[test]
fn first_seed_joins_the_seed_that_acks() {
    let t = t0();
    let mut c = new_core(1, cfg(), t);
    c.join_seed_nodes(t, vec![a(1), a(2), a(3)]).unwrap();
    drain(&mut c);
    let ack = ConfigCheck::Compatible(cfg().compat_keys());
    c.handle_message(t + ms(10), n(3), Message::InitJoinAck { address: a(3), config_check: ack });
    let sent = transmits(&mut c);
    assert_eq!(sent.len(), 1);
    assert_eq!((sent[0].message.kind(), &sent[0].to), ("Join", &a(3)));
    let sent = run_until(&mut c, t + secs(6));
    assert!(sent.is_empty(), "no more InitJoin: {sent:?}");
    assert_eq!(c.self_status(), Removed, "does not form a cluster alone");
}

#[test]
fn a_manual_join_stops_the_seed_node_process() {
    let t = t0();
    let mut c = new_core(2, cfg(), t);
    c.join_seed_nodes(t, vec![a(1), a(3)]).unwrap();
    drain(&mut c);
    c.join(t + ms(10), a(1)).unwrap();
    assert_eq!(of_kind(&transmits(&mut c), "Join").len(), 1);
    let sent = run_until(&mut c, t + ms(10_009));
    assert!(sent.is_empty(), "{sent:?}");
}

#[test]
fn join_is_not_resent_when_retry_unsuccessful_join_after_is_off() {
    let t = t0();
    let mut c = new_core(2, Config { retry_unsuccessful_join_after: None, ..cfg() }, t);
    c.join(t, a(1)).unwrap();
    drain(&mut c);
    assert!(run_until(&mut c, t + secs(60)).is_empty());
}

/// Delivers everything the two cores send each other, at `now`, until they are quiet.
fn exchange(now: Instant, x: &mut Cluster, y: &mut Cluster) {
    for _ in 0..100 {
        let from_x = transmits(x);
        let from_y = transmits(y);
        if from_x.is_empty() && from_y.is_empty() {
            return;
        }
        let (x_node, y_node) = (x.self_node().clone(), y.self_node().clone());
        for tr in from_x.into_iter().filter(|tr| tr.to == y_node.address) {
            y.handle_message(now, x_node.clone(), tr.message);
        }
        for tr in from_y.into_iter().filter(|tr| tr.to == x_node.address) {
            x.handle_message(now, y_node.clone(), tr.message);
        }
    }
    panic!("the cores keep talking");
}

#[test]
fn a_joiner_handshakes_with_a_member_and_is_moved_up_by_the_leader() {
    let t = t0();
    let mut c1 = first_node(no_reaper(), t);
    let mut c2 = new_core(2, no_reaper(), t);
    c2.join_seed_nodes(t, vec![a(1)]).unwrap();
    // InitJoin -> InitJoinAck -> Join -> Welcome -> gossip back.
    exchange(t, &mut c2, &mut c1);
    assert_eq!(c1.gossip().version(), c2.gossip().version());
    assert_eq!(status_of(&c2, 2), Some(Joining));
    assert!(c1.gossip().seen_by(&n(2)), "the joiner's gossip back tells the member it has seen");
    assert!(c1.convergence());

    run_until(&mut c1, t + secs(1));
    assert_eq!((status_of(&c1, 2), up_number_of(&c1, 2)), (Some(Up), Some(2)));
    // The next gossip tick brings the news to the joiner.
    for (at, tr) in run_until(&mut c1, t + secs(2)) {
        if tr.to == a(2) && is_gossip(&tr) {
            c2.handle_message(at, n(1), tr.message);
        }
    }
    let events2 = events(&mut c2);
    assert!(events2.iter().any(|e| matches!(e, ClusterEvent::MemberUp(m) if m.node() == &n(2))));
}

// ---- self-join ----------------------------------------------------------------------------------

#[test]
fn the_first_node_is_up_with_up_number_1_immediately_after_joining_itself() {
    let t = t0();
    let mut c = new_core(1, cfg(), t);
    c.join(t, a(1)).unwrap();
    assert_eq!(c.self_status(), Up);
    assert_eq!(up_number_of(&c, 1), Some(1));
    assert!(transmits(&mut c).is_empty());
    let es = events(&mut c);
    assert!(es.iter().any(|e| matches!(e, ClusterEvent::MemberUp(m) if m.node() == &n(1))));
    assert!(es.contains(&ClusterEvent::LeaderChanged(Some(a(1)))));
}

// ---- receiving gossip ---------------------------------------------------------------------------

/// Node 1 holding {1, 2, 3} all Up, seen by 1 and 2.
fn three_up(config: Config, t: Instant) -> (Cluster, Gossip) {
    let g = gossip([up(1, 1), up(2, 2), up(3, 3)], &[2]);
    let c = member_core(1, config, t, 2, g);
    let g = Gossip::clone(c.gossip());
    assert_eq!(g.seen(), &BTreeSet::from([n(1), n(2)]));
    (c, g)
}

fn assert_ignored(c: &mut Cluster, before: &Gossip) {
    assert_eq!(**c.gossip(), *before, "the gossip was not ignored");
    assert!(transmits(c).is_empty());
    assert!(events(c).is_empty());
}

#[test]
fn a_merge_with_the_local_clock_but_another_state_gets_a_version_of_this_node() {
    let t = t0();
    let base = gossip([up(1, 1), up(2, 2), member(3, Down, 3), up(4, 4)], &[2]);
    // Here node 3 was removed (its clock entry pruned with it) after node 2's change.
    let mut local = bumped(&base, 2, &[2]);
    local.remove(&n(3), WALL);
    // Concurrently, node 3 itself downed a newcomer, 5, stamping only its own entry.
    let mut remote = bumped(&base, 3, &[3]);
    remote.update([member(5, Down, 0)]);
    let mut c = member_core(1, no_reaper(), t, 2, local.clone());
    let local = Gossip::clone(c.gossip());

    c.handle_message(t, n(2), gossip_msg(2, n(1), &remote));
    let merged = c.gossip();
    assert_eq!(status_of(&c, 5), Some(Down), "the one-sided Down is kept");
    assert!(!merged.has_member(&n(3)), "the tombstone wins");
    // Pruning node 3's entry leaves the clock of `local`; the state is not `local`'s.
    assert!(!merged.same_state_as(&local));
    assert_ne!(merged.version(), local.version(), "two states under one version");
    assert_eq!(merged.version().counter(&n(1)), local.version().counter(&n(1)) + 1);
}

#[test]
fn a_merge_that_prunes_a_removed_nodes_entry_gets_a_version_of_this_node() {
    let t = t0();
    let base = gossip([up(1, 1), up(2, 2), up(3, 3), up(4, 4), up(5, 5)], &[1]);
    // Node 5 made a change that node 1 and a third node have seen.
    let seen_by_all = bumped(&base, 5, &[1]);
    // Node 3, cut off, downed node 4, stamping only its own entry; node 1 took that in.
    let mut local = bumped(&seen_by_all, 3, &[1]);
    local.update([member(4, Down, 4)]);
    // Meanwhile node 2 downed and removed node 3, without node 5's change.
    let mut remote = base.clone();
    remote.update([member(3, Down, 3)]);
    remote.increment_version(&n(2));
    remote.remove(&n(3), WALL);
    let mut c = member_core(1, no_reaper(), t, 2, local);
    c.handle_message(t, n(2), gossip_msg(2, n(1), &remote));
    let merged = c.gossip();
    assert_eq!(status_of(&c, 4), Some(Down));
    // Another node merging the gossip without node 3's change reaches the clock the merge would
    // have after pruning node 3's entry, with node 4 Up.
    let elsewhere = seen_by_all.merge(&remote);
    assert_eq!(elsewhere.member(&n(4)).map(Member::status), Some(Up));
    assert_ne!(merged.version(), elsewhere.version(), "two states under one version");
    assert!(merged.version().counter(&n(1)) > 0, "the merge is stamped by this node");
}

#[test]
fn gossips_that_differ_only_in_a_removal_time_are_not_the_same_state() {
    let base = gossip([up(1, 1), up(2, 2), member(3, Down, 3)], &[1]);
    let (mut early, mut late) = (base.clone(), base);
    early.remove(&n(3), WALL);
    late.remove(&n(3), WallMillis(WALL.0 + 1_000));
    assert!(early.same_state_as(&early.clone()));
    assert!(!early.same_state_as(&late), "a merge keeping one side's clock must get a new version");
}

#[test]
fn gossip_addressed_to_another_incarnation_is_ignored() {
    let t = t0();
    let (mut c, local) = three_up(cfg(), t);
    let newer = bumped(&local, 2, &[2]);
    c.handle_message(t, n(2), gossip_msg(2, node("h1:2552", 77), &newer));
    assert_ignored(&mut c, &local);
}

#[test]
fn a_message_naming_another_sender_than_its_connection_is_dropped() {
    let t = t0();
    let (mut c, local) = three_up(cfg(), t);
    let newer = bumped(&local, 2, &[2]);
    // Node 3's connection carries gossip that claims to come from node 2.
    c.handle_message(t, n(3), gossip_msg(2, n(1), &newer));
    assert_ignored(&mut c, &local);
    // The same gossip over node 2's own connection is taken.
    c.handle_message(t, n(2), gossip_msg(2, n(1), &newer));
    assert_eq!(c.gossip().version(), newer.version());
    // A heartbeat response that speaks for another node is ignored too.
    let rsp = Message::HeartbeatRsp { from: n(2), sequence_nr: 1 };
    c.handle_message(t, n(3), rsp.clone());
    let nack = Message::InitJoinNack { address: a(2) };
    assert_eq!(nack.claimed_address(), Some(&a(2)));
    assert_eq!(rsp.claimed_sender(), Some(&n(2)));
}

#[test]
fn gossip_from_an_unknown_sender_is_ignored() {
    let t = t0();
    let (mut c, local) = three_up(cfg(), t);
    let mut newer = bumped(&local, 2, &[2]);
    newer.update([joining(4)]);
    // (A sender that is Joining in its own gossip is a forgotten joiner: see below.)
    c.handle_message(t, n(5), gossip_msg(5, n(1), &newer));
    assert_ignored(&mut c, &local);
}

#[test]
fn gossip_from_a_sender_this_node_marks_unreachable_is_ignored() {
    let t = t0();
    let mut g = gossip([up(1, 1), up(2, 2), up(3, 3)], &[2]);
    g.reachability_mut().unreachable(&n(1), &n(2));
    let mut c = member_core(1, no_reaper(), t, 3, g);
    let local = Gossip::clone(c.gossip());
    let newer = bumped(&local, 2, &[2]);
    c.handle_message(t, n(2), gossip_msg(2, n(1), &newer));
    assert_ignored(&mut c, &local);

    // The same gossip from a reachable sender is taken.
    c.handle_message(t, n(3), gossip_msg(3, n(1), &newer));
    assert_eq!(c.gossip().version(), newer.version());
}

#[test]
fn gossip_that_does_not_contain_this_node_is_ignored() {
    let t = t0();
    let (mut c, local) = three_up(cfg(), t);
    let mut newer = bumped(&local, 2, &[2]);
    newer.remove(&n(1), WALL);
    c.handle_message(t, n(2), gossip_msg(2, n(1), &newer));
    assert_ignored(&mut c, &local);
}

#[test]
fn gossip_of_the_same_version_unions_the_seen_sets_and_talks_back_only_if_the_sender_has_not_seen_this_node()
 {
    let t = t0();
    let (mut c, local) = three_up(cfg(), t);

    let mut same = local.clone();
    same.clear_seen();
    same.add_seen(&n(3));
    c.handle_message(t, n(3), gossip_msg(3, n(1), &same));
    assert_eq!(c.gossip().seen(), &BTreeSet::from([n(1), n(2), n(3)]));
    assert_eq!(c.gossip().version(), local.version(), "receiving never bumps the clock");
    let sent = transmits(&mut c);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].to, a(3));
    assert_eq!(sent_gossip(&sent[0]), &**c.gossip());

    same.add_seen(&n(1));
    c.handle_message(t, n(3), gossip_msg(3, n(1), &same));
    assert!(transmits(&mut c).is_empty(), "the sender has seen this node already");
}

#[test]
fn older_gossip_keeps_the_local_state_and_talks_back() {
    let t = t0();
    let base = gossip([up(1, 1), up(2, 2), up(3, 3)], &[3]);
    let local = bumped(&base, 2, &[2]);
    let mut c = member_core(1, cfg(), t, 2, local);
    let before = Gossip::clone(c.gossip());

    c.handle_message(t, n(3), gossip_msg(3, n(1), &base));
    assert_eq!(**c.gossip(), before);
    let sent = transmits(&mut c);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].to, a(3));
    assert_eq!(sent_gossip(&sent[0]), &before);
    assert!(events(&mut c).is_empty());
}

#[test]
fn newer_gossip_is_adopted_and_marked_seen_by_this_node() {
    let t = t0();
    let (mut c, local) = three_up(cfg(), t);
    let mut newer = bumped(&local, 3, &[3]);
    newer.update([member(3, Leaving, 3)]);

    c.handle_message(t, n(3), gossip_msg(3, n(1), &newer));
    assert_eq!(status_of(&c, 3), Some(Leaving));
    assert_eq!(c.gossip().version(), newer.version(), "receiving never bumps the clock");
    assert_eq!(c.gossip().seen(), &BTreeSet::from([n(1), n(3)]));
    let sent = transmits(&mut c);
    assert_eq!(sent.len(), 1, "talks back: the sender has not seen this node");
    assert_eq!(sent[0].to, a(3));
    assert_eq!(event_names(&events(&mut c)), ["MemberLeft"]);

    // Newer gossip that this node has already seen needs no answer.
    let mut newest = bumped(&newer, 2, &[2, 1]);
    newest.update([member(2, Leaving, 2)]);
    c.handle_message(t, n(2), gossip_msg(2, n(1), &newest));
    assert_eq!(status_of(&c, 2), Some(Leaving));
    assert!(transmits(&mut c).is_empty());
}

#[test]
fn concurrent_gossip_is_merged_and_talked_back() {
    let t = t0();
    let base = gossip([up(1, 1), up(2, 2), up(3, 3)], &[]);
    let mut local = bumped(&base, 1, &[1]);
    local.update([member(3, Leaving, 3)]);
    let mut c = member_core(1, cfg(), t, 2, local.clone());

    let mut remote = bumped(&base, 2, &[2]);
    remote.update([joining(4)]);
    c.handle_message(t, n(2), gossip_msg(2, n(1), &remote));

    let g = c.gossip();
    assert_eq!(status_of(&c, 3), Some(Leaving));
    assert_eq!(status_of(&c, 4), Some(Joining));
    assert_eq!(*g.version(), local.version().merge(remote.version()), "merged, not bumped");
    assert_eq!(g.seen(), &BTreeSet::from([n(1)]));
    let sent = transmits(&mut c);
    assert!(sent.iter().all(|s| sent_gossip(s) == &**c.gossip()), "{sent:?}");
    // Talks back to the sender; and, as the leader taking in news of a joiner, passes it on to
    // the members that have not seen it.
    let to: BTreeSet<Address> = sent.iter().map(|s| s.to.clone()).collect();
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert_eq!(to, BTreeSet::from([a(2), a(3), a(4)]));
}

/// Who of `sent` got a full gossip.
fn gossip_targets(sent: &[Transmit]) -> BTreeSet<Address> {
    sent.iter()
        .filter(|s| matches!(s.message, Message::Gossip { .. }))
        .map(|s| s.to.clone())
        .collect()
}

#[test]
fn a_member_that_admits_a_joiner_passes_the_news_to_members_that_have_not_seen_it() {
    let t = t0();
    let g = gossip((1..=8).map(|i| up(i, u32::try_from(i).unwrap())), &[2]);
    let mut c = member_core(1, cfg(), t, 2, g);
    c.handle_message(t, n(9), join_msg(n(9)));
    let sent = transmits(&mut c);
    assert_eq!(of_kind(&sent, "Welcome").len(), 1, "{sent:?}");
    // Five of the seven other members, none of them the joiner, which has its Welcome.
    let to = gossip_targets(&sent);
    assert_eq!(to.len(), 5, "{sent:?}");
    assert!(to.iter().all(|t| (2..=8).map(a).any(|m| m == *t)), "{to:?}");
    assert!(sent.iter().all(|s| s.message.kind() != "Gossip" || sent_gossip(s).has_member(&n(9))));
}

#[test]
fn a_leader_passes_news_of_a_joiner_to_five_members_that_have_not_seen_it() {
    let t = t0();
    let base = gossip((1..=8).map(|i| up(i, u32::try_from(i).unwrap())), &[1, 2]);
    let mut remote = bumped(&base, 2, &[2]);
    remote.update([joining(9)]);

    // Node 1 is the leader: it talks back to the sender and tells five of the others.
    let mut leader = member_core(1, cfg(), t, 2, base.clone());
    leader.handle_message(t, n(2), gossip_msg(2, n(1), &remote));
    let to = gossip_targets(&transmits(&mut leader));
    assert_eq!(to.len(), 6, "{to:?}");
    assert!(to.contains(&a(2)));

    // Node 3 is not: it only talks back.
    let mut other = member_core(3, cfg(), t, 2, base);
    other.handle_message(t, n(2), gossip_msg(2, n(3), &remote));
    assert_eq!(gossip_targets(&transmits(&mut other)), BTreeSet::from([a(2)]));

    // The same version again, now seen by the leader, is no news.
    let mut again = Gossip::clone(leader.gossip());
    again.add_seen(&n(4));
    leader.handle_message(t, n(4), gossip_msg(4, n(1), &again));
    assert!(gossip_targets(&transmits(&mut leader)).is_empty());
}

#[test]
fn a_leader_that_moves_members_up_sends_the_result_to_five_members_at_once() {
    let t = t0();
    let mut g = gossip((1..=8).map(|i| up(i, u32::try_from(i).unwrap())), &[]);
    g.update([joining(9)]);
    for i in 1..=9 {
        g.add_seen(&n(i));
    }
    let mut c = member_core(1, no_reaper(), t, 2, g);
    assert!(c.convergence());
    let sent: Vec<Transmit> = run_until(&mut c, t + secs(1)).into_iter().map(|(_, s)| s).collect();
    assert_eq!(status_of(&c, 9), Some(Up));
    let moved: Vec<&Transmit> = sent
        .iter()
        .filter(|s| {
            matches!(s.message, Message::Gossip { .. })
                && sent_gossip(s).member(&n(9)).map(Member::status) == Some(Up)
        })
        .collect();
    // Five at once, besides whatever the gossip tick sends.
    assert!(moved.len() >= 5, "{sent:?}");
}

#[test]
fn concurrent_gossip_keeps_a_down_member_the_other_side_no_longer_has() {
    let t = t0();
    let mut base = gossip([up(1, 1), up(2, 2), member(3, Down, 3)], &[]);
    base.increment_version(&n(3));
    let local = bumped(&base, 1, &[1]);
    let mut c = member_core(1, no_reaper(), t, 2, local.clone());

    // Node 2 no longer has node 3 and changed concurrently. Without a tombstone there is no telling
    // whether it removed node 3 or never heard of it, so the Down is kept (and node 3's clock
    // entry with it); the leader removes node 3 again once it is unreachable.
    let mut remote = gossip([up(1, 1), up(2, 2)], &[2]);
    remote.set_version(base.version().clone());
    remote.prune_version(&n(3));
    remote.increment_version(&n(2));
    c.handle_message(t, n(2), gossip_msg(2, n(1), &remote));

    assert_eq!(c.gossip().member(&n(3)).map(|m| m.status()), Some(Down));
    assert_eq!(*c.gossip().version(), local.version().merge(remote.version()));
}

#[test]
fn gossip_that_waited_longer_than_gossip_time_to_live_is_dropped() {
    let t = t0();
    let (mut c, local) = three_up(cfg(), t);
    let newer = bumped(&local, 2, &[2]);
    c.handle_queued_message(t + ms(2_001), t, n(2), gossip_msg(2, n(1), &newer));
    assert_ignored(&mut c, &local);

    c.handle_queued_message(t + ms(2_001), t + ms(500), n(2), gossip_msg(2, n(1), &newer));
    assert_eq!(c.gossip().version(), newer.version());
}

// ---- gossip status ------------------------------------------------------------------------------

fn status_msg(from: u64, version: &VectorClock, digest: Vec<u8>) -> Message {
    Message::GossipStatus { from: n(from), version: version.clone(), seen_digest: digest }
}

#[test]
fn gossip_status_with_another_seen_digest_is_answered_with_full_gossip() {
    let t = t0();
    let (mut c, local) = three_up(cfg(), t);
    let mut other = local.clone();
    other.add_seen(&n(3));
    c.handle_message(t, n(2), status_msg(2, local.version(), other.seen_digest().to_vec()));
    let sent = transmits(&mut c);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].to, a(2));
    assert_eq!(sent_gossip(&sent[0]), &local);
}

#[test]
fn gossip_status_with_the_same_digest_and_version_is_not_answered() {
    let t = t0();
    let (mut c, local) = three_up(cfg(), t);
    c.handle_message(t, n(2), status_msg(2, local.version(), local.seen_digest().to_vec()));
    assert!(transmits(&mut c).is_empty());
    // An empty digest counts as the same.
    c.handle_message(t, n(2), status_msg(2, local.version(), Vec::new()));
    assert!(transmits(&mut c).is_empty());
}

#[test]
fn gossip_status_with_a_newer_version_is_answered_with_own_status() {
    let t = t0();
    let (mut c, local) = three_up(cfg(), t);
    let mut newer = local.version().clone();
    newer.increment(&n(2));
    c.handle_message(t, n(2), status_msg(2, &newer, local.seen_digest().to_vec()));
    let mine = status_msg(1, local.version(), local.seen_digest().to_vec());
    assert_eq!(transmits(&mut c), [Transmit { to: a(2), message: mine }]);
}

#[test]
fn gossip_status_with_an_older_or_concurrent_version_is_answered_with_full_gossip() {
    let t = t0();
    let base = gossip([up(1, 1), up(2, 2), up(3, 3)], &[]);
    let local = bumped(&base, 2, &[2]);
    let mut c = member_core(1, cfg(), t, 2, local);
    let local = Gossip::clone(c.gossip());
    let digest = local.seen_digest().to_vec();

    c.handle_message(t, n(2), status_msg(2, base.version(), digest.clone()));
    let sent = transmits(&mut c);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent_gossip(&sent[0]), &local);

    let mut concurrent = base.version().clone();
    concurrent.increment(&n(3));
    c.handle_message(t, n(2), status_msg(2, &concurrent, digest));
    let sent = transmits(&mut c);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent_gossip(&sent[0]), &local);
}

#[test]
fn gossip_status_from_an_unknown_or_unreachable_sender_is_ignored() {
    let t = t0();
    let mut g = gossip([up(1, 1), up(2, 2), up(3, 3)], &[2]);
    g.reachability_mut().unreachable(&n(1), &n(3));
    let mut c = member_core(1, no_reaper(), t, 2, g);
    let v = VectorClock::new();
    c.handle_message(t, n(3), status_msg(3, &v, Vec::new()));
    c.handle_message(t, n(4), status_msg(4, &v, Vec::new()));
    assert!(transmits(&mut c).is_empty());
}

// ---- periodic gossip ----------------------------------------------------------------------------

fn gossip_sent(sent: &[(Instant, Transmit)]) -> Vec<(Instant, &Transmit)> {
    sent.iter().filter(|(_, tr)| is_gossip(tr)).map(|(at, tr)| (*at, tr)).collect()
}

#[test]
fn a_singleton_cluster_sends_no_gossip() {
    let t = t0();
    let mut c = first_node(cfg(), t);
    let sent = run_until(&mut c, t + secs(10));
    assert!(sent.is_empty(), "{sent:?}");
}

#[test]
fn the_gossip_tick_sends_status_to_a_target_that_has_seen_and_full_gossip_to_one_that_has_not() {
    let t = t0();
    let mut c = member_core(1, no_reaper(), t, 2, gossip([up(1, 1), up(2, 2)], &[2]));
    let sent = run_until(&mut c, t + secs(1));
    let g = gossip_sent(&sent);
    assert_eq!(g.len(), 1, "{sent:?}");
    assert_eq!(g[0].1.to, a(2));
    assert_eq!(g[0].1.message.kind(), "GossipStatus");

    let mut c = member_core(1, no_reaper(), t, 2, gossip([up(1, 1), up(2, 2)], &[]));
    let sent = run_until(&mut c, t + secs(1));
    let g = gossip_sent(&sent);
    assert_eq!(g.len(), 1, "{sent:?}");
    assert_eq!(g[0].1.to, a(2));
    assert_eq!(g[0].1.message, gossip_msg(1, n(2), c.gossip()));
}

#[test]
fn always_prefer_unseen_gossips_to_a_member_that_has_not_seen_whenever_there_is_one() {
    let t = t0();
    let config =
        Config { gossip_target_preference: TargetPreference::AlwaysPreferUnseen, ..no_reaper() };
    let g = gossip((1..=6).map(|i| up(i, i as u32)), &[2, 3]);
    let mut c = member_core(1, config, t, 2, g);
    let sent = run_until(&mut c, t + secs(60));
    let targets: Vec<Address> = gossip_sent(&sent).iter().map(|(_, tr)| tr.to.clone()).collect();
    assert_eq!(targets.len(), 60, "one gossip per tick and no speed-up");
    let unseen = BTreeSet::from([a(4), a(5), a(6)]);
    assert!(targets.iter().all(|to| unseen.contains(to)), "{targets:?}");
    assert_eq!(targets.iter().cloned().collect::<BTreeSet<_>>(), unseen, "chosen at random");
    assert!(gossip_sent(&sent).iter().all(|(_, tr)| tr.message.kind() == "Gossip"));
}

#[test]
fn once_all_have_seen_the_gossip_every_other_member_is_a_target_and_this_node_never_is() {
    // All seen, one data center, nobody flagged: the steady state, where the target is drawn
    // among the other members without listing the candidates first. Only a status goes out.
    let t = t0();
    let g = gossip((1..=6).map(|i| up(i, i as u32)), &[1, 2, 3, 4, 5, 6]);
    let mut c = member_core(1, no_reaper(), t, 2, g);
    let sent = run_until(&mut c, t + secs(60));
    let gossip = gossip_sent(&sent);
    assert_eq!(gossip.len(), 60, "one gossip per tick and no speed-up");
    assert!(gossip.iter().all(|(_, tr)| tr.message.kind() == "GossipStatus"), "{gossip:?}");
    let mut times_chosen: BTreeMap<Address, usize> = BTreeMap::new();
    for (_, tr) in &gossip {
        *times_chosen.entry(tr.to.clone()).or_default() += 1;
    }
    let others: BTreeSet<Address> = (2..=6).map(a).collect();
    assert_eq!(times_chosen.keys().cloned().collect::<BTreeSet<_>>(), others, "{times_chosen:?}");
    assert!(times_chosen.values().all(|&k| k >= 4), "about a fifth each: {times_chosen:?}");
}

#[test]
fn gossip_speeds_up_to_three_rounds_per_interval_while_fewer_than_half_have_seen() {
    let t = t0();
    let g = gossip((1..=6).map(|i| up(i, i as u32)), &[]);
    let mut c = member_core(1, no_reaper(), t, 2, g);
    let sent = run_until(&mut c, t + ms(1_999));
    let times: Vec<Duration> = gossip_sent(&sent).iter().map(|(at, _)| *at - t).collect();
    let third = secs(1) / 3;
    assert_eq!(times, [secs(1), secs(1) + third, secs(1) + third * 2]);
}

#[test]
fn gossip_speeds_up_while_a_member_is_down() {
    let t = t0();
    let g = gossip([up(1, 1), up(2, 2), up(3, 3), member(4, Down, 4)], &[2, 3]);
    let mut c = member_core(1, no_reaper(), t, 2, g);
    let sent = run_until(&mut c, t + ms(1_999));
    assert_eq!(gossip_sent(&sent).len(), 3, "{sent:?}");
}

#[test]
fn the_extra_gossip_rounds_are_skipped_once_half_have_seen() {
    let t = t0();
    let g = gossip((1..=6).map(|i| up(i, i as u32)), &[]);
    let mut c = member_core(1, no_reaper(), t, 2, g);
    assert_eq!(gossip_sent(&run_until(&mut c, t + secs(1))).len(), 1);
    let mut same = Gossip::clone(c.gossip());
    same.clear_seen();
    same.add_seen(&n(2));
    same.add_seen(&n(3));
    c.handle_message(t + ms(100), n(2), gossip_msg(2, n(1), &same));
    drain(&mut c);
    let sent = run_until(&mut c, t + ms(1_999));
    assert!(gossip_sent(&sent).is_empty(), "{sent:?}");
}

#[test]
fn gossip_does_not_speed_up_once_half_have_seen() {
    let t = t0();
    for seen in [&[2, 3][..], &[2, 3, 4, 5, 6]] {
        let g = gossip((1..=6).map(|i| up(i, i as u32)), seen);
        let mut c = member_core(1, no_reaper(), t, 2, g);
        let sent = run_until(&mut c, t + ms(2_999));
        let times: Vec<Duration> = gossip_sent(&sent).iter().map(|(at, _)| *at - t).collect();
        assert_eq!(times, [secs(1), secs(2)], "seen by {seen:?}");
    }
}

// ---- leader actions -----------------------------------------------------------------------------

/// Fires the timers up to `t + s` seconds, dropping what is sent.
fn tick_until(c: &mut Cluster, t: Instant, s: u64) {
    run_until(c, t + secs(s));
}

#[test]
fn the_leader_moves_joining_to_up_only_on_convergence_in_address_order() {
    let t = t0();
    let g = gossip([up(1, 1), up(2, 2), joining(4), joining(3)], &[]);
    let mut c = member_core(1, no_reaper(), t, 2, g);
    tick_until(&mut c, t, 3);
    assert_eq!(status_of(&c, 3), Some(Joining), "no convergence: node 2 has not seen");
    assert_eq!(status_of(&c, 4), Some(Joining));
    drain(&mut c);

    // Node 2 reports it has seen this version: convergence.
    let mut same = Gossip::clone(c.gossip());
    same.clear_seen();
    same.add_seen(&n(2));
    c.handle_message(t + ms(3_500), n(2), gossip_msg(2, n(1), &same));
    assert!(c.convergence());
    tick_until(&mut c, t, 4);
    assert_eq!((status_of(&c, 3), up_number_of(&c, 3)), (Some(Up), Some(3)));
    assert_eq!((status_of(&c, 4), up_number_of(&c, 4)), (Some(Up), Some(4)));
    let ups: Vec<UniqueAddress> = events(&mut c)
        .into_iter()
        .filter_map(|e| match e {
            ClusterEvent::MemberUp(m) => Some(m.node().clone()),
            _ => None,
        })
        .collect();
    assert_eq!(ups, [n(3), n(4)]);
}

#[test]
fn min_nr_of_members_holds_joining_members_back() {
    let t = t0();
    let config = Config { min_nr_of_members: 3, ..no_reaper() };
    let mut c = member_core(1, config.clone(), t, 2, gossip([up(1, 1), joining(2)], &[]));
    tick_until(&mut c, t, 3);
    assert!(c.convergence());
    assert_eq!(status_of(&c, 2), Some(Joining));

    c.handle_message(t + ms(3_500), n(3), join_msg(n(3)));
    tick_until(&mut c, t, 4);
    assert_eq!(status_of(&c, 2), Some(Up));
    assert_eq!(status_of(&c, 3), Some(Up));

    // Nor does the first node go Up alone.
    let c = first_node(config, t);
    assert_eq!(c.self_status(), Joining);
}

#[test]
fn role_min_nr_of_members_holds_joining_members_back() {
    let t = t0();
    let mut config = no_reaper();
    config.role_min_nr_of_members.insert("backend".to_owned(), 2);
    let g = gossip([up(1, 1), with_role(joining(2), "backend"), joining(3)], &[]);
    let mut c = member_core(1, config, t, 2, g);
    tick_until(&mut c, t, 3);
    assert!(c.convergence());
    assert_eq!(status_of(&c, 2), Some(Joining));
    assert_eq!(status_of(&c, 3), Some(Joining));

    let roles = BTreeSet::from(["dc-default".to_owned(), "backend".to_owned()]);
    let join = Message::Join { node: n(4), roles, app_version: AppVersion::default() };
    c.handle_message(t + ms(3_500), n(4), join);
    tick_until(&mut c, t, 4);
    assert_eq!([2, 3, 4].map(|i| status_of(&c, i)), [Some(Up); 3]);
}

/// Node 1 leading {1 Up, 2 Up, 3 Joining}, without convergence because node 2 has not seen.
fn leader_without_convergence(config: Config, t: Instant) -> Cluster {
    let c = member_core(1, config, t, 2, gossip([up(1, 1), up(2, 2), joining(3)], &[]));
    assert!(!c.convergence());
    c
}

#[test]
fn the_leader_moves_a_reachable_joining_member_to_weakly_up_after_allow_weakly_up_members() {
    let t = t0();
    let mut c = leader_without_convergence(no_reaper(), t);
    tick_until(&mut c, t, 6);
    assert_eq!(status_of(&c, 3), Some(Joining), "6 ticks of 1 s are less than 7 s");
    drain(&mut c);
    tick_until(&mut c, t, 7);
    assert_eq!(status_of(&c, 3), Some(WeaklyUp));
    assert_eq!(event_names(&events(&mut c)), ["MemberWeaklyUp"]);

    // Once convergence comes, WeaklyUp goes on to Up.
    let mut same = Gossip::clone(c.gossip());
    same.add_seen(&n(2));
    c.handle_message(t + ms(7_500), n(2), gossip_msg(2, n(1), &same));
    tick_until(&mut c, t, 8);
    assert_eq!((status_of(&c, 3), up_number_of(&c, 3)), (Some(Up), Some(3)));
}

#[test]
fn an_unreachable_joining_member_is_not_moved_to_weakly_up() {
    let t = t0();
    let mut g = gossip([up(1, 1), up(2, 2), joining(3)], &[2]);
    g.reachability_mut().unreachable(&n(2), &n(3));
    let mut c = member_core(1, no_reaper(), t, 2, g);
    assert!(!c.convergence(), "an unreachable Joining member blocks convergence");
    tick_until(&mut c, t, 20);
    assert_eq!(status_of(&c, 3), Some(Joining));
}

#[test]
fn no_member_is_moved_to_weakly_up_when_allow_weakly_up_members_is_off() {
    let t = t0();
    let config = Config { allow_weakly_up_members: None, ..no_reaper() };
    let mut c = leader_without_convergence(config, t);
    tick_until(&mut c, t, 20);
    assert_eq!(status_of(&c, 3), Some(Joining));
}

#[test]
fn the_leader_moves_leaving_to_exiting_on_convergence_and_tells_the_oldest_at_once() {
    let t = t0();
    let g = gossip([up(1, 1), up(2, 2), member(3, Leaving, 3)], &[]);
    let mut c = member_core(1, no_reaper(), t, 3, g);
    tick_until(&mut c, t, 2);
    assert_eq!(status_of(&c, 3), Some(Leaving), "no convergence: nodes 2 and 3 have not seen");

    let mut same = Gossip::clone(c.gossip());
    same.add_seen(&n(2));
    same.add_seen(&n(3));
    c.handle_message(t + ms(2_500), n(2), gossip_msg(2, n(1), &same));
    drain(&mut c);
    let sent = run_until(&mut c, t + secs(3));
    assert_eq!(status_of(&c, 3), Some(Exiting));
    assert_eq!(event_names(&events(&mut c)), ["MemberExited"]);
    // The exiting fast path: the oldest other member hears it right away, before the gossip tick.
    let at_once: Vec<&Transmit> = sent
        .iter()
        .filter(|(_, tr)| tr.message.kind() == "Gossip" && tr.to == a(2))
        .map(|(_, tr)| tr)
        .filter(|tr| sent_gossip(tr).member(&n(3)).map(Member::status) == Some(Exiting))
        .collect();
    assert!(!at_once.is_empty(), "{sent:?}");
}

#[test]
fn the_leader_removes_a_down_unreachable_member_leaving_a_tombstone() {
    let t = t0();
    let mut g = gossip([up(1, 1), up(2, 2), member(3, Down, 3)], &[2]);
    g.reachability_mut().unreachable(&n(2), &n(3));
    g.increment_version(&n(3));
    let mut c = member_core(1, no_reaper(), t, 2, g);
    assert!(c.convergence());
    tick_until(&mut c, t, 1);

    let g = c.gossip();
    assert!(!g.has_member(&n(3)));
    assert_eq!(
        g.tombstones().get(&n(3)),
        Some(&WallMillis(WALL.0 + 1_000)),
        "stamped with the wall clock"
    );
    assert!(!g.reachability().nodes().contains(&n(3)));
    assert_eq!(g.version().counter(&n(3)), 0, "its clock entry is pruned");
    let removed: Vec<_> = events(&mut c)
        .into_iter()
        .filter_map(|e| match e {
            ClusterEvent::MemberRemoved { member, previous_status } => {
                Some((member.node().clone(), previous_status))
            }
            _ => None,
        })
        .collect();
    assert_eq!(removed, [(n(3), Down)]);
}

/// Node 1 of {1, 2} Up that removed node 3 (a tombstone).
fn removed_three(t: Instant) -> Cluster {
    let mut g = gossip([up(1, 1), up(2, 2), member(3, Down, 3)], &[2]);
    g.reachability_mut().unreachable(&n(2), &n(3));
    g.increment_version(&n(3));
    let mut c = member_core(1, no_reaper(), t, 2, g);
    tick_until(&mut c, t, 1);
    assert!(c.gossip().tombstones().contains_key(&n(3)));
    drain(&mut c);
    c
}

#[test]
fn a_removed_incarnation_gets_no_heartbeat_answer_but_the_gossip_that_holds_its_tombstone() {
    let t = t0();
    let mut c = removed_three(t);
    let before = Gossip::clone(c.gossip());
    let heartbeat = Message::Heartbeat { from: n(3), sequence_nr: 1 };
    c.handle_message(t + secs(2), n(3), heartbeat);
    let sent = transmits(&mut c);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].to, a(3));
    assert!(sent_gossip(&sent[0]).tombstones().contains_key(&n(3)));
    assert!(matches!(&sent[0].message, Message::Gossip { to, .. } if *to == n(3)));

    // Its gossip (which still lists every member Up) changes nothing here.
    let stale = gossip([up(1, 1), up(2, 2), up(3, 3)], &[3]);
    c.handle_message(t + secs(2), n(3), gossip_msg(3, n(1), &bumped(&stale, 3, &[3])));
    assert_eq!(**c.gossip(), before);
    assert_eq!(of_kind(&transmits(&mut c), "Gossip").len(), 1, "answered with the tombstone");
    // A heartbeat response from it feeds no failure detector and is not answered.
    let rsp = Message::HeartbeatRsp { from: n(3), sequence_nr: 1 };
    c.handle_message(t + secs(2), n(3), rsp);
    assert!(transmits(&mut c).is_empty());
    // A new incarnation on the same address is another node and is answered as usual.
    let fresh = node("h3:2552", 33);
    let heartbeat = Message::Heartbeat { from: fresh.clone(), sequence_nr: 1 };
    c.handle_message(t + secs(2), fresh, heartbeat);
    assert_eq!(of_kind(&transmits(&mut c), "HeartbeatRsp").len(), 1);
}

#[test]
fn a_node_that_finds_its_own_tombstone_in_a_members_gossip_stops_as_downed() {
    let t = t0();
    let mut answering = removed_three(t);
    // Node 3 was paused through its removal: it still holds {1, 2, 3} all Up.
    let mut paused =
        member_core(3, no_reaper(), t, 2, gossip([up(1, 1), up(2, 2), up(3, 3)], &[2]));
    let heartbeat = Message::Heartbeat { from: n(3), sequence_nr: 1 };
    answering.handle_message(t + secs(30), n(3), heartbeat);
    let notice = transmits(&mut answering).remove(0);

    // The same gossip from a stranger is ignored.
    paused.handle_message(
        t + secs(30),
        n(4),
        Message::Gossip { from: n(4), to: n(3), gossip: Arc::new(sent_gossip(&notice).clone()) },
    );
    assert_eq!(paused.shutdown_reason(), None);

    paused.handle_message(t + secs(30), n(1), notice.message);
    assert_eq!(paused.shutdown_reason(), Some(&ShutdownReason::Downed));
}

#[test]
fn a_joiner_whose_cluster_was_downed_around_it_downs_itself() {
    let t = t0();
    let g = gossip([up(1, 1), up(2, 2), joining(3)], &[1]);
    let mut joiner = member_core(3, no_reaper(), t, 1, g.clone());
    // Node 2 downed every member it knew of; it had not heard of node 3.
    let mut all_down = bumped(&g, 2, &[2]);
    all_down.update([member(1, Down, 1), member(2, Down, 2)]);
    joiner.handle_message(t, n(2), gossip_msg(2, n(3), &all_down));
    assert_eq!(status_of(&joiner, 3), Some(Down));
    assert!(!of_kind(&transmits(&mut joiner), "Gossip").is_empty(), "others hear of it");

    // With a member of the cluster still standing, the joiner waits to be moved up.
    let mut waiting = member_core(3, no_reaper(), t, 1, g.clone());
    let mut one_down = bumped(&g, 2, &[2]);
    one_down.update([member(1, Down, 1)]);
    waiting.handle_message(t, n(2), gossip_msg(2, n(3), &one_down));
    assert_eq!(status_of(&waiting, 3), Some(Joining));
}

#[test]
fn a_joiner_stays_when_the_only_down_member_was_replaced_by_a_new_incarnation() {
    // The founder, node 1, crashed before it moved its joiners up, and its restart asked node 2
    // to join: node 2 marked the old incarnation terminated and downed it, to admit the new one
    // once it is removed (bootstrap seeds 662 and 342). That Down is no decision about the
    // cluster.
    let t = t0();
    let g = gossip([up(1, 1), joining(2), joining(3)], &[1]);
    let mut replaced = bumped(&g, 2, &[2]);
    replaced.reachability_mut().terminated(&n(2), &n(1));
    replaced.update([member(1, Down, 1)]);
    let mut joiner = member_core(3, no_reaper(), t, 1, g.clone());
    joiner.handle_message(t, n(2), gossip_msg(2, n(3), &replaced));
    assert_eq!(status_of(&joiner, 3), Some(Joining));
    assert_eq!(joiner.shutdown_reason(), None);

    // So is a Down member whose address a new incarnation holds.
    let restarted = Member::joining(node("h1:2552", 11), dc_roles(), AppVersion::default());
    let mut admitted = bumped(&g, 2, &[2]);
    admitted.update([member(1, Down, 1), restarted.clone()]);
    let mut joiner = member_core(3, no_reaper(), t, 1, g.clone());
    joiner.handle_message(t, n(2), gossip_msg(2, n(3), &admitted));
    assert_eq!(status_of(&joiner, 3), Some(Joining));

    // Downed itself as well, the new incarnation no longer stands for the cluster.
    let mut both = bumped(&g, 2, &[2]);
    both.update([member(1, Down, 1), restarted.with_status(Down).unwrap()]);
    let mut joiner = member_core(3, no_reaper(), t, 1, g.clone());
    joiner.handle_message(t, n(2), gossip_msg(2, n(3), &both));
    assert_eq!(status_of(&joiner, 3), Some(Down));
}

#[test]
fn a_joiner_that_downed_the_last_other_member_itself_downs_itself_at_its_next_tick() {
    // Oracle seed 141579 (N=5): a joiner whose welcomer had crashed downed the last Up member
    // of its view itself; with only Down members left it removed them all and moved itself Up,
    // a cluster of one beside the one the others had formed.
    let t = t0();
    let g = gossip([up(1, 1), up(2, 2), joining(3)], &[1]);
    let mut joiner = member_core(3, no_reaper(), t, 1, g);
    joiner.down(t, &a(1));
    joiner.down(t, &a(2));
    run_until(&mut joiner, t + secs(5));
    assert_eq!(status_of(&joiner, 3), Some(Down));
    assert_eq!(joiner.shutdown_reason(), Some(&ShutdownReason::Downed));

    // With a member still standing, it waits to be moved up.
    let g = gossip([up(1, 1), up(2, 2), joining(3)], &[1]);
    let mut joiner = member_core(3, no_reaper(), t, 1, g);
    joiner.down(t, &a(1));
    run_until(&mut joiner, t + secs(5));
    assert_eq!(status_of(&joiner, 3), Some(Joining));
    assert_eq!(joiner.shutdown_reason(), None);
}

#[test]
fn the_leader_does_not_remove_a_down_member_that_is_still_reachable() {
    let t = t0();
    let g = gossip([up(1, 1), up(2, 2), member(3, Down, 3)], &[2]);
    let mut c = member_core(1, no_reaper(), t, 2, g);
    assert!(c.convergence());
    tick_until(&mut c, t, 5);
    assert_eq!(status_of(&c, 3), Some(Down));
}

#[test]
fn the_leader_removes_a_down_member_only_once_a_member_that_is_not_down_sees_it_unreachable() {
    // Nodes 2 and 3, both ends of a broken link, were downed as indirectly connected: only they
    // see each other unreachable. Node 1 still reaches them, so they stay until they have taken
    // their Down in and stopped, or node 1 sees them unreachable (chaos seed 1411 at N = 3).
    let t = t0();
    let mut g = gossip([up(1, 1), member(2, Down, 2), member(3, Down, 3)], &[1]);
    g.reachability_mut().unreachable(&n(2), &n(3));
    g.reachability_mut().unreachable(&n(3), &n(2));
    g.increment_version(&n(2));
    let mut c = member_core(1, no_reaper(), t, 2, g);
    assert!(c.convergence());
    tick_until(&mut c, t, 3);
    assert_eq!(status_of(&c, 2), Some(Down));
    assert_eq!(status_of(&c, 3), Some(Down));

    let mut g = Gossip::clone(c.gossip());
    g.reachability_mut().unreachable(&n(1), &n(2));
    let mut c = member_core(1, no_reaper(), t, 2, g);
    tick_until(&mut c, t, 1);
    assert!(!c.gossip().has_member(&n(2)), "seen unreachable by node 1: removed");
    assert_eq!(status_of(&c, 3), Some(Down));
}

#[test]
fn the_leader_removes_an_exiting_member_that_confirmed_its_exit() {
    let t = t0();
    let g = gossip([up(1, 1), up(2, 2), member(3, Exiting, 3)], &[2]);
    let mut c = member_core(1, no_reaper(), t, 2, g);
    tick_until(&mut c, t, 3);
    assert_eq!(status_of(&c, 3), Some(Exiting), "a reachable Exiting member waits");

    c.handle_message(t + ms(3_500), n(3), Message::ExitingConfirmed { node: n(3) });
    tick_until(&mut c, t, 4);
    assert!(!c.gossip().has_member(&n(3)));
    assert!(c.gossip().tombstones().contains_key(&n(3)));
}

#[test]
fn the_leader_prunes_tombstones_older_than_prune_gossip_tombstones_after() {
    let t = t0();
    let day = 24 * 60 * 60 * 1_000;
    let g = Gossip::from_parts(
        [up(1, 1), up(2, 2)],
        BTreeSet::from([n(2)]),
        Default::default(),
        VectorClock::from_entries([(n(1), 1)]),
        [(n(8), WallMillis(WALL.0 - day)), (n(9), WallMillis(WALL.0 + 2_000 - day))]
            .into_iter()
            .collect(),
    );
    let mut c = member_core(1, no_reaper(), t, 2, g);
    let before = c.gossip().version().clone();
    tick_until(&mut c, t, 1);
    let g = c.gossip();
    assert_eq!(g.tombstones().keys().collect::<Vec<_>>(), [&n(9)]);
    assert_eq!(g.version().counter(&n(1)), before.counter(&n(1)) + 1, "a local change");
}

#[test]
fn the_leader_moves_preparing_for_shutdown_to_ready_for_shutdown_but_not_joining_to_up() {
    let t = t0();
    let g = gossip(
        [member(1, PreparingForShutdown, 1), member(2, PreparingForShutdown, 2), joining(3)],
        &[2],
    );
    let mut c = member_core(1, no_reaper(), t, 2, g);
    assert!(c.convergence());
    tick_until(&mut c, t, 1);
    assert_eq!(status_of(&c, 1), Some(ReadyForShutdown));
    assert_eq!(status_of(&c, 2), Some(ReadyForShutdown));
    assert_eq!(status_of(&c, 3), Some(Joining));
}

#[test]
fn only_the_leader_performs_leader_actions() {
    let t = t0();
    let g = gossip([up(1, 1), up(2, 2), joining(3), member(4, Leaving, 4)], &[1, 4]);
    let mut c = member_core(2, no_reaper(), t, 1, g);
    assert!(c.convergence());
    assert_eq!(c.membership().leader(), Some(&n(1)));
    let before = c.gossip().version().clone();
    tick_until(&mut c, t, 10);
    assert_eq!(status_of(&c, 3), Some(Joining));
    assert_eq!(status_of(&c, 4), Some(Leaving));
    assert_eq!(*c.gossip().version(), before);
}

#[test]
fn the_leader_removes_an_exiting_member_once_it_is_unreachable() {
    let t = t0();
    let mut g = gossip([up(1, 1), up(2, 2), member(3, Exiting, 3)], &[2]);
    g.reachability_mut().unreachable(&n(2), &n(3));
    let mut c = member_core(1, no_reaper(), t, 2, g);
    assert!(c.convergence(), "an unreachable Exiting member does not block convergence");
    tick_until(&mut c, t, 1);
    assert!(!c.gossip().has_member(&n(3)));
    let removed = events(&mut c).into_iter().find_map(|e| match e {
        ClusterEvent::MemberRemoved { previous_status, .. } => Some(previous_status),
        _ => None,
    });
    assert_eq!(removed, Some(Exiting));
}

#[test]
fn tombstones_are_not_pruned_without_convergence() {
    let t = t0();
    let day = 24 * 60 * 60 * 1_000;
    let g = Gossip::from_parts(
        [up(1, 1), up(2, 2)],
        BTreeSet::new(),
        Default::default(),
        VectorClock::from_entries([(n(1), 1)]),
        [(n(8), WallMillis(WALL.0 - day))].into_iter().collect(),
    );
    let mut c = member_core(1, no_reaper(), t, 2, g);
    assert!(!c.convergence());
    tick_until(&mut c, t, 3);
    assert!(c.gossip().tombstones().contains_key(&n(8)));
}

#[test]
fn no_member_is_moved_to_weakly_up_while_preparing_for_full_shutdown() {
    let t = t0();
    let g = gossip(
        [member(1, PreparingForShutdown, 1), member(2, PreparingForShutdown, 2), joining(3)],
        &[],
    );
    let mut c = member_core(1, no_reaper(), t, 2, g);
    assert!(!c.convergence());
    tick_until(&mut c, t, 10);
    assert_eq!(status_of(&c, 3), Some(Joining));
}

#[test]
fn a_leader_that_leaves_moves_itself_to_exiting_confirms_to_the_next_leaders_and_shuts_down() {
    let t = t0();
    let (mut c, _) = three_up(no_reaper(), t);
    c.leave(t, &a(1));
    drain(&mut c);
    let mut same = Gossip::clone(c.gossip());
    same.add_seen(&n(2));
    same.add_seen(&n(3));
    c.handle_message(t + ms(500), n(2), gossip_msg(2, n(1), &same));
    assert!(c.convergence());
    drain(&mut c);

    let sent = run_until(&mut c, t + secs(1));
    assert_eq!(c.shutdown_reason(), Some(&ShutdownReason::Left));
    let confirmed: Vec<&Address> = sent
        .iter()
        .filter(|(_, tr)| tr.message == Message::ExitingConfirmed { node: n(1) })
        .map(|(_, tr)| &tr.to)
        .collect();
    assert_eq!(confirmed, [&a(2), &a(3)]);
    let told_exiting = sent.iter().any(|(_, tr)| {
        tr.message.kind() == "Gossip"
            && sent_gossip(tr).member(&n(1)).map(Member::status) == Some(Exiting)
    });
    assert!(told_exiting, "{sent:?}");
}

// ---- commands -----------------------------------------------------------------------------------

#[test]
fn leave_marks_the_member_leaving_and_gossips_at_once() {
    let t = t0();
    let (mut c, local) = three_up(cfg(), t);
    c.leave(t, &a(1));
    assert_eq!(c.self_status(), Leaving);
    assert_eq!(c.gossip().version().counter(&n(1)), local.version().counter(&n(1)) + 1);
    assert_eq!(c.gossip().seen(), &BTreeSet::from([n(1)]));
    let sent = transmits(&mut c);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent_gossip(&sent[0]), &**c.gossip());
    assert_eq!(event_names(&events(&mut c)), ["MemberLeft"]);
}

#[test]
fn down_of_another_member_marks_it_down_sends_it_the_full_gossip_and_spreads_it_at_once() {
    let t = t0();
    let (mut c, _) = three_up(cfg(), t);
    c.down(t, &a(2));
    assert_eq!(status_of(&c, 2), Some(Down));
    assert!(!c.gossip().seen_by(&n(2)));
    let sent = transmits(&mut c);
    assert_eq!(sent[0], Transmit { to: a(2), message: gossip_msg(1, n(2), c.gossip()) });
    // The other member hears of it now, not in a later gossip round.
    assert!(
        sent[1..].contains(&Transmit { to: a(3), message: gossip_msg(1, n(3), c.gossip()) }),
        "{sent:?}"
    );
    assert_eq!(event_names(&events(&mut c)), ["MemberDowned"]);
}

#[test]
fn down_of_an_unknown_address_is_ignored() {
    let t = t0();
    let (mut c, local) = three_up(cfg(), t);
    c.down(t, &a(9));
    assert_ignored(&mut c, &local);
}

#[test]
fn leave_is_ignored_for_a_member_that_is_down_or_exiting() {
    let t = t0();
    let g = gossip([up(1, 1), up(2, 2), member(3, Down, 3), member(4, Exiting, 4)], &[2]);
    let mut c = member_core(1, no_reaper(), t, 2, g);
    let before = Gossip::clone(c.gossip());
    c.leave(t, &a(3));
    c.leave(t, &a(4));
    c.leave(t, &a(9));
    assert_ignored(&mut c, &before);
}

#[test]
fn down_of_this_node_gossips_to_five_random_members_and_shuts_down_on_the_next_leader_tick() {
    let t = t0();
    let g = gossip((1..=7).map(|i| up(i, i as u32)), &[2]);
    let mut c = member_core(1, no_reaper(), t, 2, g);
    c.down(t, &a(1));
    assert_eq!(c.self_status(), Down);
    let sent = transmits(&mut c);
    let targets: BTreeSet<&Address> = of_kind(&sent, "Gossip").iter().map(|tr| &tr.to).collect();
    assert_eq!((sent.len(), targets.len()), (5, 5), "{sent:?}");
    assert!(!targets.contains(&a(1)));
    assert_eq!(c.shutdown_reason(), None);
    tick_until(&mut c, t, 1);
    assert_eq!(c.shutdown_reason(), Some(&ShutdownReason::Downed));
}

#[test]
fn a_node_that_sees_itself_down_shuts_down_at_once_when_the_down_has_spread() {
    let t = t0();
    let g = gossip([up(1, 1), up(2, 2), up(3, 3)], &[1]);
    let mut c = member_core(2, no_reaper(), t, 1, g);
    let mut downed = bumped(c.gossip(), 1, &[1]);
    assert!(downed.mark_as_down(&n(2)));
    c.handle_message(t, n(1), gossip_msg(1, n(2), &downed));
    assert_eq!(c.shutdown_reason(), Some(&ShutdownReason::Downed));
    let sent = transmits(&mut c);
    assert!(!sent.is_empty() && sent.iter().all(|tr| tr.message.kind() == "Gossip"), "{sent:?}");
}

#[test]
fn a_node_that_sees_itself_down_waits_four_leader_ticks_for_the_down_to_reach_other_downed_nodes() {
    let t = t0();
    let g = gossip([up(1, 1), up(2, 2), up(3, 3)], &[1]);
    let mut c = member_core(2, no_reaper(), t, 1, g);
    let mut downed = bumped(c.gossip(), 1, &[1]);
    assert!(downed.mark_as_down(&n(2)));
    assert!(downed.mark_as_down(&n(3)));
    c.handle_message(t + ms(500), n(1), gossip_msg(1, n(2), &downed));
    assert_eq!(c.shutdown_reason(), None, "node 3 is Down too, reachable, and has not seen");
    tick_until(&mut c, t, 3);
    assert_eq!(c.shutdown_reason(), None);
    tick_until(&mut c, t, 4);
    assert_eq!(c.shutdown_reason(), Some(&ShutdownReason::Downed));

    // Once the other downed node has seen it, no waiting.
    let mut c = member_core(2, no_reaper(), t, 1, gossip([up(1, 1), up(2, 2), up(3, 3)], &[1]));
    downed.add_seen(&n(3));
    c.handle_message(t, n(1), gossip_msg(1, n(2), &downed));
    assert_eq!(c.shutdown_reason(), Some(&ShutdownReason::Downed));
}

#[test]
fn a_node_that_sees_itself_exiting_confirms_to_the_next_leaders_and_shuts_down_as_left() {
    let t = t0();
    let g = gossip([up(1, 1), up(2, 2), member(3, Leaving, 3)], &[1]);
    let mut c = member_core(3, no_reaper(), t, 1, g);
    let mut exiting = bumped(c.gossip(), 1, &[1]);
    exiting.update([member(3, Exiting, 3)]);
    c.handle_message(t, n(1), gossip_msg(1, n(3), &exiting));
    assert_eq!(c.shutdown_reason(), Some(&ShutdownReason::Left));
    let sent = transmits(&mut c);
    let confirmed: Vec<&Address> =
        of_kind(&sent, "ExitingConfirmed").iter().map(|tr| &tr.to).collect();
    assert_eq!(confirmed, [&a(1), &a(2)]);
    assert!(
        of_kind(&sent, "ExitingConfirmed")
            .iter()
            .all(|tr| tr.message == Message::ExitingConfirmed { node: n(3) })
    );
}

#[test]
fn prepare_for_full_shutdown_moves_up_members_to_preparing_and_others_follow_on_their_leader_tick()
{
    let t = t0();
    let g = gossip([up(1, 1), up(2, 2), joining(3)], &[2]);
    let mut c = member_core(1, no_reaper(), t, 2, g);
    c.prepare_for_full_shutdown(t);
    assert_eq!(status_of(&c, 1), Some(PreparingForShutdown));
    assert_eq!(status_of(&c, 2), Some(PreparingForShutdown));
    assert_eq!(status_of(&c, 3), Some(Joining));
    let sent = transmits(&mut c);
    assert_eq!(of_kind(&sent, "Gossip").len(), 1, "gossiped at once: {sent:?}");

    // A member that sees another preparing follows on its next leader tick.
    let g = gossip([member(1, PreparingForShutdown, 1), up(2, 2)], &[1]);
    let mut c = member_core(2, no_reaper(), t, 1, g);
    assert_eq!(c.self_status(), Up);
    tick_until(&mut c, t, 1);
    assert_eq!(c.self_status(), PreparingForShutdown);
}

// ---- heartbeats and the reaper ------------------------------------------------------------------

#[test]
fn any_core_answers_a_heartbeat_echoing_its_sequence_number() {
    let t = t0();
    let mut c = new_core(1, cfg(), t);
    let hb = Message::Heartbeat { from: n(2), sequence_nr: 7 };
    c.handle_message(t, n(2), hb);
    let rsp = Message::HeartbeatRsp { from: n(1), sequence_nr: 7 };
    assert_eq!(transmits(&mut c), [Transmit { to: a(2), message: rsp }]);
}

#[test]
fn heartbeat_ticks_send_heartbeats_to_the_ring_receivers_once_joined() {
    let t = t0();
    let mut c = new_core(1, cfg(), t);
    assert!(run_until(&mut c, t + secs(5)).is_empty(), "no heartbeats before joining");

    let g = gossip([up(1, 1), up(2, 2), up(3, 3)], &[2]);
    let mut c = member_core(1, no_reaper(), t, 2, g);
    let sent = run_until(&mut c, t + secs(2));
    let hbs: Vec<(Duration, &Address, u64)> = sent
        .iter()
        .filter_map(|(at, tr)| match tr.message {
            Message::Heartbeat { ref from, sequence_nr, .. } if *from == n(1) => {
                Some((*at - t, &tr.to, sequence_nr))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        hbs,
        [(secs(1), &a(2), 1), (secs(1), &a(3), 1), (secs(2), &a(2), 2), (secs(2), &a(3), 2)]
    );
}

#[test]
fn the_reaper_marks_a_silent_node_unreachable_and_reachable_again_when_heartbeats_resume() {
    let t = t0();
    let mut c = member_core(1, cfg(), t, 2, gossip([up(1, 1), up(2, 2)], &[2]));
    // First heartbeat at 1 s; monitoring starts expected_response_after later, at 2 s; with the
    // bootstrap statistics φ reaches 8 about 5.31 s after that.
    run_until(&mut c, t + ms(7_300));
    assert!(c.gossip().reachability().is_reachable_by(&n(1), &n(2)));
    drain(&mut c);
    run_until(&mut c, t + secs(8));
    assert_eq!(c.gossip().reachability().status_by(&n(1), &n(2)), ReachabilityStatus::Unreachable);
    assert_eq!(event_names(&events(&mut c)), ["UnreachableMember"]);

    let rsp = Message::HeartbeatRsp { from: n(2), sequence_nr: 9 };
    c.handle_message(t + ms(9_500), n(2), rsp);
    run_until(&mut c, t + secs(10));
    assert!(c.gossip().reachability().is_reachable_by(&n(1), &n(2)));
    assert_eq!(event_names(&events(&mut c)), ["ReachableMember"]);
}

// ---- determinism --------------------------------------------------------------------------------

/// A scripted run of node 1 with RNG seed `seed`: everything it sent and published, in order.
fn scripted_run(seed: u64) -> (Vec<(Duration, Transmit)>, Vec<ClusterEvent>) {
    let t = t0();
    let mut c = new_core(1, Config { seed, ..cfg() }, t);
    let mut sent = Vec::new();
    let mut published = Vec::new();
    let mut collect = |c: &mut Cluster, at: Instant, extra: Vec<(Instant, Transmit)>| {
        sent.extend(extra.into_iter().map(|(when, tr)| (when - t, tr)));
        sent.extend(transmits(c).into_iter().map(|tr| (at - t, tr)));
        published.extend(events(c));
    };
    c.join(t, a(1)).unwrap();
    collect(&mut c, t, Vec::new());
    for i in 2..=7 {
        let at = t + ms(100 * i);
        c.handle_message(at, n(i), join_msg(n(i)));
        collect(&mut c, at, Vec::new());
    }
    for s in 1..=20 {
        let at = t + secs(s);
        let ticks = run_until(&mut c, at);
        collect(&mut c, at, ticks);
        if s % 3 == 0 {
            for i in [2, 4, 6] {
                let rsp = Message::HeartbeatRsp { from: n(i), sequence_nr: s };
                c.handle_message(at, n(i), rsp);
            }
        }
        if s == 5 {
            c.leave(at, &a(3));
        }
        if s == 8 {
            c.down(at, &a(5));
        }
        collect(&mut c, at, Vec::new());
    }
    (sent, published)
}

#[test]
fn two_cores_with_the_same_seed_and_inputs_produce_identical_outputs() {
    let (sent, published) = scripted_run(42);
    assert!(sent.len() > 50 && published.len() > 10, "the script exercises the core");
    assert_eq!(scripted_run(42), (sent.clone(), published));
    // And the seed matters: another seed picks other gossip targets.
    let (other, _) = scripted_run(43);
    assert_ne!(other, sent);
}

// ---- two incarnations of one address (S5) -----------------------------------------------------

#[test]
fn two_incarnations_of_one_address_admitted_by_two_sides_are_not_moved_up() {
    let t = t0();
    // Node 1 is the leader; h2 joined twice, once on each side of a partition that healed.
    let g = gossip(
        [
            up(1, 1),
            up(3, 3),
            joining(2),
            Member::joining(node("h2:2552", 99), dc_roles(), AppVersion::default()),
        ],
        &[1, 3],
    );
    let mut c = member_core(1, no_reaper(), t, 3, g);
    run_until(&mut c, t + secs(10));
    assert_eq!(status_of(&c, 2), Some(Joining));
    assert_eq!(c.gossip().member(&node("h2:2552", 99)).map(Member::status), Some(Joining));
}

#[test]
fn a_joining_member_is_moved_up_once_its_other_incarnation_is_removed() {
    let t = t0();
    let old = member(2, Down, 2);
    let new = Member::joining(node("h2:2552", 99), dc_roles(), AppVersion::default());
    let mut g = gossip([up(1, 1), up(3, 3), old, new.clone()], &[1, 3]);
    g.reachability_mut().terminated(&n(1), &n(2));
    let mut c = member_core(1, no_reaper(), t, 3, g);
    run_until(&mut c, t + secs(1));
    assert!(!c.gossip().has_member(&n(2)), "the Down incarnation is removed first");
    assert_eq!(c.gossip().member(new.node()).map(Member::status), Some(Joining));
    // The removal needs every member to see it before the next convergence.
    let seen = bumped(c.gossip(), 3, &[1, 3]);
    c.handle_message(t + secs(1), n(3), gossip_msg(3, n(1), &seen));
    run_until(&mut c, t + secs(3));
    assert_eq!(c.gossip().member(new.node()).map(Member::status), Some(Up));
}

#[test]
fn a_node_downs_another_incarnation_of_itself_that_it_finds_in_the_gossip() {
    let t = t0();
    let earlier = node("h2:2552", 99);
    let g = gossip([up(1, 1), up(3, 3), joining(2)], &[1, 3]);
    let mut c = member_core(2, no_reaper(), t, 1, g.clone());
    // The other side admitted an earlier run of h2 before it crashed.
    let mut theirs = g;
    theirs.update([Member::joining(earlier.clone(), dc_roles(), AppVersion::default())]);
    let theirs = bumped(&theirs, 3, &[3]);
    c.handle_message(t, n(3), gossip_msg(3, n(2), &theirs));
    assert_eq!(c.gossip().member(&earlier).map(Member::status), Some(Down));
    assert_eq!(
        c.gossip().reachability().status_by(&n(2), &earlier),
        ReachabilityStatus::Terminated
    );
    assert_eq!(status_of(&c, 2), Some(Joining), "this incarnation is untouched");
    assert!(c.shutdown_reason().is_none());
}

#[test]
fn down_by_address_picks_the_incarnation_not_yet_down() {
    let t = t0();
    let restarted = node("h2:2552", 99);
    let g = gossip(
        [
            up(1, 1),
            up(3, 3),
            member(2, Down, 2),
            Member::joining(restarted.clone(), dc_roles(), AppVersion::default()),
        ],
        &[1, 3],
    );
    let mut c = member_core(1, no_reaper(), t, 3, g);
    // What the simulator's oracle asks before it downs a crashed incarnation by address: the
    // first member at the address is the earlier, Down incarnation, not the one `down` marks.
    assert_eq!(c.gossip().members().find(|m| m.address() == &a(2)).map(Member::node), Some(&n(2)));
    assert_eq!(c.down_target(&a(2)), Some(&restarted));
    c.down(t, &a(2));
    assert_eq!(c.gossip().member(&restarted).map(Member::status), Some(Down));
    assert_eq!(c.down_target(&a(2)), Some(&n(2)), "both Down: the first");
}

// ---- a long pause (the split-brain resolver's view may be out of date) ------------------------

/// Keep-majority with `stable_after` 5 s; node 1 the leader of {1, 2, 3}, all Up, after 3 s.
fn member_about_to_pause() -> (Cluster, Instant) {
    let t = t0();
    let mut config = no_reaper();
    config.split_brain_resolver.active_strategy = "keep-majority".to_owned();
    config.split_brain_resolver.stable_after = secs(5);
    let g = gossip([up(1, 1), up(2, 2), up(3, 3)], &[1, 2, 3]);
    let mut c = member_core(1, config, t, 2, g);
    run_until(&mut c, t + secs(3));
    drain(&mut c);
    (c, t + secs(3))
}

fn heartbeat_rsp(from: u64, sequence_nr: u64) -> Message {
    Message::HeartbeatRsp { from: n(from), sequence_nr }
}

/// Runs `c` for a second from `resumed` and answers, a second after `resumed`, the first heartbeat
/// it sent node 2 in that time.
fn answer_next_heartbeat_to_2(c: &mut Cluster, resumed: Instant) {
    let sent = run_until(c, resumed + secs(1));
    let seq = sent
        .iter()
        .find_map(|(_, t)| match &t.message {
            Message::Heartbeat { sequence_nr, .. } if t.to == a(2) => Some(*sequence_nr),
            _ => None,
        })
        .expect("a heartbeat to node 2 after the pause");
    c.handle_message(resumed + secs(1), n(2), heartbeat_rsp(2, seq));
}

#[test]
fn a_node_that_hears_from_no_member_within_stable_after_of_a_long_pause_downs_itself() {
    let (mut c, t) = member_about_to_pause();
    let before_pause = c.heartbeat.sequence_nr();
    // The process ran nothing for 30 s; the overdue timers are its first input after the pause.
    let resumed = t + secs(30);
    c.handle_timeout(resumed);
    let sbr = c.split_brain_resolver().expect("keep-majority");
    assert_eq!(sbr.contact_deadline(), Some(resumed + secs(5)));
    // An answer to a heartbeat sent before the pause says nothing about now.
    c.handle_message(resumed, n(2), heartbeat_rsp(2, before_pause));
    run_until(&mut c, resumed + secs(4));
    assert_eq!(status_of(&c, 1), Some(Up));
    run_until(&mut c, resumed + secs(15));
    assert_eq!(status_of(&c, 1), Some(Down));
    assert_eq!(c.shutdown_reason(), Some(&ShutdownReason::Downed));
    let decision = c.poll_downing_decision().expect("a decision");
    assert_eq!(decision.decision, crate::sbr::Decision::DownSelfAfterPause);
    assert_eq!(decision.nodes, BTreeSet::from([n(1)]));
}

#[test]
fn an_answer_to_a_heartbeat_sent_after_a_long_pause_is_word_from_a_member() {
    let (mut c, t) = member_about_to_pause();
    let resumed = t + secs(30);
    c.handle_timeout(resumed);
    answer_next_heartbeat_to_2(&mut c, resumed);
    assert_eq!(c.split_brain_resolver().unwrap().contact_deadline(), None);
    run_until(&mut c, resumed + secs(15));
    assert_eq!(status_of(&c, 1), Some(Up));
    assert!(c.shutdown_reason().is_none());
    assert_eq!(c.poll_downing_decision(), None);
}

#[test]
fn a_gossip_read_after_a_long_pause_is_not_word_from_a_member() {
    // The gossip may have waited in the socket while the process was stopped, sent before the
    // pause by a member that has died since (seen live: a SIGSTOPped node read its killed peer's
    // last gossip on SIGCONT and then kept a cluster of its own by keep-majority's tie).
    let (mut c, t) = member_about_to_pause();
    let earlier = c.gossip().clone();
    let resumed = t + secs(30);
    c.handle_timeout(resumed);
    c.handle_message(resumed, n(2), gossip_msg(2, n(1), &bumped(&earlier, 2, &[2])));
    assert_eq!(c.split_brain_resolver().unwrap().contact_deadline(), Some(resumed + secs(5)));
    run_until(&mut c, resumed + secs(15));
    assert_eq!(status_of(&c, 1), Some(Down));
    let decision = c.poll_downing_decision().expect("a decision");
    assert_eq!(decision.decision, crate::sbr::Decision::DownSelfAfterPause);
}

#[test]
fn a_gap_shorter_than_stable_after_is_no_pause() {
    let (mut c, t) = member_about_to_pause();
    c.handle_timeout(t + secs(4));
    assert_eq!(c.split_brain_resolver().unwrap().contact_deadline(), None);
}

#[test]
fn after_a_long_pause_a_member_sends_no_one_to_join_it_until_it_hears_from_a_member() {
    let (mut c, t) = member_about_to_pause();
    let resumed = t + secs(30);
    c.handle_timeout(resumed);
    drain(&mut c);
    // Perhaps the others removed it meanwhile: it must not become a second cluster's seed.
    c.handle_message(resumed, n(7), init_join(&c.config().clone()));
    assert_eq!(of_kind(&transmits(&mut c), "InitJoinNack").len(), 1);
    c.handle_message(resumed, n(7), join_msg(n(7)));
    assert_eq!(status_of(&c, 7), None);
    assert!(of_kind(&transmits(&mut c), "Welcome").is_empty());

    answer_next_heartbeat_to_2(&mut c, resumed);
    drain(&mut c);
    c.handle_message(resumed + secs(1), n(7), init_join(&c.config().clone()));
    assert_eq!(of_kind(&transmits(&mut c), "InitJoinAck").len(), 1);
    c.handle_message(resumed + secs(1), n(7), join_msg(n(7)));
    assert_eq!(status_of(&c, 7), Some(Joining));
    assert_eq!(of_kind(&transmits(&mut c), "Welcome").len(), 1);
}

/// Node 2, not yet a member, with `stable_after` 5 s.
fn not_yet_member_with_stable_after_5s(t: Instant) -> Cluster {
    let mut config = cfg();
    config.split_brain_resolver.stable_after = secs(5);
    new_core(2, config, t)
}

#[test]
fn a_node_that_asked_to_join_and_pauses_longer_than_stable_after_before_its_welcome_gives_up() {
    let t = t0();
    let mut c = not_yet_member_with_stable_after_5s(t);
    c.join(t, a(1)).unwrap();
    assert_eq!(of_kind(&transmits(&mut c), "Join").len(), 1);
    run_until(&mut c, t + secs(3));
    assert!(c.shutdown_reason().is_none());
    // Its Join may have been taken, and the cluster may have downed and removed it since.
    c.handle_timeout(t + secs(30));
    assert_eq!(c.shutdown_reason(), Some(&ShutdownReason::PausedWhileJoining));
    assert!(ShutdownReason::PausedWhileJoining.to_string().contains("stable_after"));
}

#[test]
fn a_node_that_never_asked_to_join_is_not_stopped_by_a_pause() {
    let t = t0();
    let mut c = not_yet_member_with_stable_after_5s(t);
    run_until(&mut c, t + secs(3));
    c.handle_timeout(t + secs(30));
    assert!(c.shutdown_reason().is_none());
    // Nor is a node that joined itself.
    let mut first = first_node(cfg(), t);
    run_until(&mut first, t + secs(3));
    first.handle_timeout(t + secs(300));
    assert!(first.shutdown_reason().is_none());
}

// ---- a joiner the cluster forgot -------------------------------------------------------------

/// Node 1 of a cluster of 1 and 3 that removed node 5.
fn core_that_removed_node_5(t: Instant) -> Cluster {
    let mut g = gossip([up(1, 1), up(3, 3), up(5, 5)], &[1, 3]);
    g.remove(&n(5), WALL);
    member_core(1, no_reaper(), t, 3, g)
}

#[test]
fn gossip_from_a_forgotten_joiner_readmits_it_and_takes_in_nothing_else() {
    let t = t0();
    let mut c = core_that_removed_node_5(t);
    // Node 4 was welcomed by node 5, which was downed and removed before its gossip about 4
    // (and about another joiner, 6) spread.
    let theirs = gossip([up(1, 1), up(3, 3), up(5, 5), joining(4), joining(6)], &[4]);
    c.handle_message(t, n(4), gossip_msg(4, n(1), &theirs));
    assert_eq!(status_of(&c, 4), Some(Joining));
    assert_eq!(status_of(&c, 5), None, "the rest of that gossip is not taken in");
    assert_eq!(status_of(&c, 6), None);
    assert_eq!(of_kind(&transmits(&mut c), "Welcome").len(), 1);
}

#[test]
fn a_forgotten_joiner_that_was_asked_to_leave_is_readmitted() {
    let t = t0();
    let mut c = core_that_removed_node_5(t);
    // Node 4 was welcomed by node 5, which was removed before its gossip about 4 spread; then
    // node 4 was asked to leave while still Joining.
    let left =
        Member::from_parts(n(4), UpNumber::UNASSIGNED, Leaving, dc_roles(), Default::default());
    let theirs = gossip([up(1, 1), up(3, 3), up(5, 5), left], &[4]);
    c.handle_message(t, n(4), gossip_msg(4, n(1), &theirs));
    assert_eq!(status_of(&c, 4), Some(Joining));
    assert_eq!(status_of(&c, 5), None, "the rest of that gossip is not taken in");
    // An Up member that left is not a forgotten joiner.
    let mut c = core_that_removed_node_5(t);
    let theirs = gossip([up(1, 1), up(3, 3), up(5, 5), member(4, Leaving, 4)], &[4]);
    c.handle_message(t, n(4), gossip_msg(4, n(1), &theirs));
    assert_eq!(status_of(&c, 4), None);
}

#[test]
fn a_forgotten_joiner_whose_gossip_holds_a_downed_joiner_unknown_here_is_readmitted() {
    // Oracle seed 140195 (N=6): joiners admitted beside the forgotten one, downed since, were
    // never heard of here; that they are Down says nothing against the gossip being of this
    // cluster.
    let t = t0();
    let mut c = core_that_removed_node_5(t);
    let downed_joiner =
        Member::from_parts(n(6), UpNumber::UNASSIGNED, Down, dc_roles(), Default::default());
    let theirs = gossip([up(1, 1), up(3, 3), up(5, 5), joining(4), downed_joiner], &[4]);
    c.handle_message(t, n(4), gossip_msg(4, n(1), &theirs));
    assert_eq!(status_of(&c, 4), Some(Joining));
    assert_eq!(status_of(&c, 6), None, "the rest of that gossip is not taken in");
}

#[test]
fn a_forgotten_joiner_whose_view_downed_a_member_that_is_up_here_is_readmitted() {
    // Oracle seed 141429 (N=6): the two views forked; the joiner's holds node 3 Down, this one
    // holds it Up, and nothing is Down or removed here. Left out, the joiner would wait for a
    // convergence that never comes, as node 3 ignores it too.
    let t = t0();
    let g = gossip([up(1, 1), up(3, 3)], &[1, 3]);
    let mut c = member_core(1, no_reaper(), t, 3, g);
    let theirs = gossip([up(1, 1), member(3, Down, 3), joining(4)], &[4]);
    c.handle_message(t, n(4), gossip_msg(4, n(1), &theirs));
    assert_eq!(status_of(&c, 4), Some(Joining));
    assert_eq!(status_of(&c, 3), Some(Up), "the rest of that gossip is not taken in");
}

#[test]
fn gossip_from_a_joiner_whose_welcome_has_not_reached_this_node_yet_is_ignored() {
    let t = t0();
    let g = gossip([up(1, 1), up(3, 3)], &[1, 3]);
    let mut c = member_core(1, no_reaper(), t, 3, g);
    // Node 3 welcomed node 4 a moment ago; node 4 gossips to node 1 before node 3 does.
    let theirs = gossip([up(1, 1), up(3, 3), joining(4)], &[4]);
    c.handle_message(t, n(4), gossip_msg(4, n(1), &theirs));
    assert_eq!(c.gossip().members().count(), 2);
    assert!(transmits(&mut c).is_empty());
}

#[test]
fn gossip_from_a_joiner_of_another_cluster_that_once_held_this_node_is_ignored() {
    let t = t0();
    let g = gossip([up(1, 1), up(3, 3)], &[1, 3]);
    let mut c = member_core(1, no_reaper(), t, 3, g);
    // Node 1 once joined a cluster of node 5 (its welcome was lost); a late gossip of that
    // cluster from its joiner 4 names node 5, which this cluster never had.
    let theirs = gossip([up(1, 1), up(5, 5), joining(4)], &[4]);
    c.handle_message(t, n(4), gossip_msg(4, n(1), &theirs));
    assert_eq!(c.gossip().members().count(), 2);
    assert!(transmits(&mut c).is_empty());
}

#[test]
fn gossip_from_a_non_member_that_is_up_or_does_not_hold_this_node_is_ignored() {
    let t = t0();
    let g = gossip([up(1, 1), up(3, 3)], &[1, 3]);
    let mut c = member_core(1, no_reaper(), t, 3, g);
    let other_cluster = gossip([up(1, 1), up(4, 4)], &[4]);
    c.handle_message(t, n(4), gossip_msg(4, n(1), &other_cluster));
    let without_me = gossip([up(3, 3), joining(5)], &[5]);
    c.handle_message(t, n(5), gossip_msg(5, n(1), &without_me));
    assert_eq!(c.gossip().members().count(), 2);
    assert!(transmits(&mut c).is_empty());
}
