//! A few nodes' managers wired together by hand: a tiny in-test network that delivers hand-over
//! messages when told to, instances that stop when told to, and virtual time.

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use convoke_membership::member::UpNumber;
use convoke_membership::version::AppVersion;
use convoke_membership::{Address, Member, MemberStatus, Uid, UniqueAddress};
use proptest::prelude::*;

use super::*;
use MemberStatus::{Down, Exiting, Joining, Leaving, Up};

fn node(i: usize) -> UniqueAddress {
    let port = 2550 + u16::try_from(i).unwrap();
    let address = Address::new("sys", "host", port).unwrap();
    UniqueAddress::new(address, Uid::new(100 + i as u64).unwrap())
}

/// One member line: node index, status, up-number (0: unassigned), roles besides the dc role.
type Line<'a> = (usize, MemberStatus, u32, &'a [&'a str]);

fn members(lines: &[Line<'_>]) -> Vec<Member> {
    lines
        .iter()
        .map(|&(i, status, up, roles)| {
            let mut r: BTreeSet<String> = roles.iter().map(|s| (*s).to_owned()).collect();
            if !r.iter().any(|s| s.starts_with("dc-")) {
                r.insert("dc-default".to_owned());
            }
            let up = if up == 0 { UpNumber::UNASSIGNED } else { UpNumber(up) };
            Member::from_parts(node(i), up, status, r, AppVersion::default())
        })
        .collect()
}

/// `n` nodes, all with the same status, up-numbers in slot order.
fn all(n: usize, status: MemberStatus) -> Vec<Line<'static>> {
    (0..n).map(|i| (i, status, u32::try_from(i).unwrap() + 1, &[][..])).collect()
}

/// Three nodes, up-numbers in slot order: node 0 (the first host) with `status`, the others Up.
fn host_is(status: MemberStatus) -> Vec<Line<'static>> {
    vec![(0, status, 1, &[][..]), (1, Up, 2, &[]), (2, Up, 3, &[])]
}

/// Nodes 1 and 2 Up: node 0 removed.
fn host_removed() -> Vec<Line<'static>> {
    vec![(1, Up, 2, &[][..]), (2, Up, 3, &[])]
}

struct TestNode {
    m: SingletonManager,
    /// The instance exists (running, or asked to stop and not yet ended).
    instance: bool,
    stop_asked: bool,
    /// Crashed or cut off: nothing reaches it and nothing it sends gets out.
    cut: bool,
    /// Crashed: its timers no longer fire either.
    crashed: bool,
}

/// The nodes, the messages in flight and what happened, in order.
struct Net {
    now: Instant,
    nodes: Vec<TestNode>,
    mail: VecDeque<(usize, usize, HandOver)>,
    log: Vec<String>,
    /// Whether a start while another node has an instance fails the test (off when the nodes
    /// belong to different data centers, each with its own singleton).
    one_instance: bool,
}

impl Net {
    fn new(n: usize) -> Self {
        Self::with(n, |_| SingletonConfig::new("s"))
    }

    fn with(n: usize, config: impl Fn(usize) -> SingletonConfig) -> Self {
        #[allow(clippy::disallowed_methods, reason = "a base instant; only offsets matter")]
        let now = Instant::now();
        let nodes = (0..n)
            .map(|i| TestNode {
                m: SingletonManager::new(config(i), node(i), now),
                instance: false,
                stop_asked: false,
                cut: false,
                crashed: false,
            })
            .collect();
        Self { now, nodes, mail: VecDeque::new(), log: Vec::new(), one_instance: true }
    }

    fn index(&self, n: &UniqueAddress) -> usize {
        (0..self.nodes.len()).find(|i| node(*i) == *n).expect("a test node")
    }

    /// Carries out node `i`'s outputs.
    fn drain(&mut self, i: usize) {
        while let Some(o) = self.nodes[i].m.poll_output() {
            match o {
                Output::StartInstance => {
                    let others: Vec<usize> = (0..self.nodes.len())
                        .filter(|j| *j != i && self.nodes[*j].instance)
                        .collect();
                    assert!(
                        others.is_empty() || !self.one_instance,
                        "node {i} starts while {others:?} still run one"
                    );
                    assert!(!self.nodes[i].instance, "node {i} starts a second instance");
                    self.nodes[i].instance = true;
                    self.log.push(format!("start {i}"));
                }
                Output::StopInstance => {
                    assert!(self.nodes[i].instance, "node {i} stops an instance it has not");
                    self.nodes[i].stop_asked = true;
                    self.log.push(format!("stop {i}"));
                }
                Output::AbortInstance => {
                    assert!(self.nodes[i].stop_asked, "node {i} aborts an instance not stopping");
                    self.log.push(format!("abort {i}"));
                }
                Output::AcquireLease => self.log.push(format!("acquire {i}")),
                Output::RenewLease => self.log.push(format!("renew {i}")),
                Output::ReleaseLease => self.log.push(format!("release {i}")),
                Output::Send { to, message } => {
                    let to = self.index(&to);
                    self.log.push(format!("{i}->{to} {}", message.name()));
                    if !self.nodes[i].cut {
                        self.mail.push_back((i, to, message));
                    }
                }
            }
        }
    }

    /// The process of node `i` crashes: its instance is gone with it.
    fn crash(&mut self, i: usize) {
        self.nodes[i].cut = true;
        self.nodes[i].crashed = true;
        self.nodes[i].instance = false;
        self.log.push(format!("crash {i}"));
    }

    /// Node `i` sees `lines`.
    fn view(&mut self, i: usize, lines: &[Line<'_>]) {
        self.members(i, &members(lines));
    }

    /// Node `i` sees the membership list `list`.
    fn members(&mut self, i: usize, list: &[Member]) {
        let now = self.now;
        self.nodes[i].m.handle_members(now, list);
        self.drain(i);
    }

    /// Node `to` receives `message` from node `from` now.
    fn receive(&mut self, to: usize, from: usize, message: HandOver) {
        let now = self.now;
        self.nodes[to].m.handle_message(now, &node(from), message);
        self.drain(to);
    }

    /// Node `i` is told its lease was granted, or refused or lost.
    fn lease(&mut self, i: usize, granted: bool) {
        let now = self.now;
        self.nodes[i].m.lease_result(now, granted);
        self.drain(i);
    }

    /// Node `i` shuts down.
    fn shutdown(&mut self, i: usize) {
        let now = self.now;
        self.nodes[i].m.shutdown(now);
        self.drain(i);
    }

    /// Node `i`'s due timers fire.
    fn timeout(&mut self, i: usize) {
        let now = self.now;
        self.nodes[i].m.handle_timeout(now);
        self.drain(i);
    }

    /// Every node not cut off sees `lines`, in slot order.
    fn view_all(&mut self, lines: &[Line<'_>]) {
        for i in 0..self.nodes.len() {
            if !self.nodes[i].cut {
                self.view(i, lines);
            }
        }
    }

    /// Delivers everything in flight (and what that sends), in order.
    fn deliver(&mut self) {
        while let Some((from, to, message)) = self.mail.pop_front() {
            if !self.nodes[to].cut {
                self.receive(to, from, message);
            }
        }
    }

    /// The instance on node `i` ends.
    fn stopped(&mut self, i: usize) {
        assert!(self.nodes[i].instance);
        self.nodes[i].instance = false;
        self.nodes[i].stop_asked = false;
        self.log.push(format!("stopped {i}"));
        let now = self.now;
        self.nodes[i].m.instance_stopped(now);
        self.drain(i);
    }

    /// Lets `d` pass: every due timer fires (and what it sends is delivered), in time order.
    fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        loop {
            let next = (0..self.nodes.len())
                .filter(|i| !self.nodes[*i].crashed)
                .filter_map(|i| self.nodes[i].m.poll_timeout().map(|t| (t, i)))
                .filter(|(t, _)| *t <= end)
                .min();
            let Some((t, i)) = next else { break };
            self.now = self.now.max(t);
            self.timeout(i);
            self.deliver();
        }
        self.now = end;
    }

    fn phase(&self, i: usize) -> Phase {
        self.nodes[i].m.status().phase
    }

    fn running(&self) -> Vec<usize> {
        (0..self.nodes.len()).filter(|i| self.nodes[*i].instance).collect()
    }

    /// Lets `margin` pass, and asserts that node `i` starts only at its very end.
    fn starts_after(&mut self, i: usize, margin: Duration) {
        self.advance(margin - Duration::from_millis(1));
        assert!(self.running().is_empty());
        self.advance(Duration::from_millis(1));
        assert_eq!(self.running(), [i]);
    }

    fn position(&self, line: &str) -> usize {
        self.log
            .iter()
            .position(|l| l == line)
            .unwrap_or_else(|| panic!("no {line:?} in {:?}", self.log))
    }
}

/// Three nodes Up, node 0 oldest and running.
fn three_up() -> Net {
    let mut net = Net::new(3);
    net.view_all(&all(3, Up));
    net.deliver();
    assert_eq!(net.running(), [0]);
    net
}

#[test]
fn in_a_fresh_cluster_the_oldest_starts_at_once_and_the_others_are_younger() {
    let mut net = Net::new(3);
    net.view_all(&all(3, Joining).iter().map(|&(i, s, _, r)| (i, s, 0, r)).collect::<Vec<_>>());
    assert_eq!([net.phase(0), net.phase(1), net.phase(2)], [Phase::Idle; 3]);
    assert!(net.running().is_empty());
    net.view_all(&all(3, Up));
    assert_eq!(net.log, ["start 0"]);
    assert_eq!(
        [net.phase(0), net.phase(1), net.phase(2)],
        [Phase::Running, Phase::Younger, Phase::Younger]
    );
    let s = net.nodes[1].m.status();
    assert_eq!(s.oldest, Some(node(0)));
    assert!(!s.running_here);
    assert!(net.nodes[0].m.status().running_here);
}

#[test]
fn the_oldest_is_decided_by_up_number_then_address() {
    let mut net = Net::new(3);
    // Node 2 was moved Up first.
    net.view_all(&[(0, Up, 2, &[]), (1, Up, 2, &[]), (2, Up, 1, &[])]);
    assert_eq!(net.running(), [2]);
    assert_eq!(net.nodes[0].m.status().oldest, Some(node(2)));
}

#[test]
fn an_unchanged_membership_list_changes_nothing() {
    let mut net = three_up();
    let before = net.log.len();
    net.view_all(&all(3, Up));
    net.view_all(&all(3, Up));
    net.deliver();
    assert_eq!(net.log.len(), before);
    assert_eq!(net.nodes[1].m.poll_timeout(), None);
}

#[test]
fn graceful_hand_over_starts_the_new_host_only_after_the_old_one_stopped() {
    let mut net = three_up();
    // Leaving is still a candidate: nothing moves.
    let leaving = host_is(Leaving);
    net.view_all(&leaving);
    net.deliver();
    assert_eq!(net.log, ["start 0"]);
    let exiting = host_is(Exiting);
    net.view_all(&exiting);
    assert_eq!(net.phase(0), Phase::WasOldest);
    assert_eq!(net.phase(1), Phase::BecomingOldest);
    assert_eq!(net.phase(2), Phase::Younger);
    net.deliver();
    assert_eq!(net.phase(0), Phase::HandingOver);
    // However long the old instance takes to stop, the new host waits.
    net.advance(Duration::from_secs(30));
    assert_eq!(net.running(), [0]);
    assert_eq!(net.phase(1), Phase::BecomingOldest);
    net.stopped(0);
    net.deliver();
    assert_eq!(net.running(), [1]);
    assert_eq!(net.phase(1), Phase::Running);
    // Leaving for longer than its allowance, node 0's manager has shut down meanwhile.
    assert_eq!(net.phase(0), Phase::Stopped);
    let ask = net.position("1->0 HandOverToMe");
    let in_progress = net.position("0->1 HandOverInProgress");
    let stop = net.position("stop 0");
    let stopped = net.position("stopped 0");
    let done = net.position("0->1 HandOverDone");
    let start = net.position("start 1");
    assert!(ask < in_progress && in_progress < stop && stop < stopped);
    assert!(stopped < done && done < start, "{:?}", net.log);
    assert!(net.log.contains(&"0->1 TakeOverFromMe".to_owned()));
}

#[test]
fn the_old_host_offers_the_instance_with_take_over_from_me_until_asked() {
    let mut net = three_up();
    // Only the old host has seen itself Exiting so far.
    net.view(0, &host_is(Exiting));
    net.mail.clear();
    net.advance(Duration::from_millis(2_500));
    let offers = net.log.iter().filter(|l| *l == "0->1 TakeOverFromMe").count();
    assert_eq!(offers, 3, "{:?}", net.log);
    assert_eq!(net.running(), [0]);
}

#[test]
fn a_take_over_from_me_makes_a_new_oldest_ask_a_host_it_never_knew() {
    // Node 2's first view: node 0 is long gone and node 1 is Exiting.
    let mut fresh = Net::new(3);
    fresh.view(2, &[(1, Exiting, 2, &[][..]), (2, Up, 3, &[])]);
    assert_eq!(fresh.phase(2), Phase::BecomingOldest);
    fresh.mail.clear();
    // Node 0, still running somewhere, offers the instance: node 2 waits for it.
    fresh.receive(2, 0, HandOver::TakeOverFromMe);
    assert!(fresh.log.contains(&"2->0 HandOverToMe".to_owned()));
    fresh.receive(2, 1, HandOver::HandOverDone);
    assert!(fresh.running().is_empty(), "node 0 has not answered yet");
    fresh.receive(2, 0, HandOver::HandOverDone);
    assert_eq!(fresh.running(), [2]);
}

#[test]
fn a_crashed_host_is_replaced_only_after_its_removal_and_the_removal_margin() {
    let mut net = three_up();
    net.crash(0);
    let margin = net.nodes[1].m.config().removal_margin;
    // Unreachable, then Down: not enough.
    net.view_all(&host_is(Down));
    assert_eq!(net.phase(1), Phase::BecomingOldest);
    net.advance(Duration::from_secs(60));
    assert!(net.log.iter().all(|l| l != "start 1"), "{:?}", net.log);
    // Asked every second, for ever, and reported stuck past the retry budget.
    let asks = net.log.iter().filter(|l| *l == "1->0 HandOverToMe").count();
    assert_eq!(asks, 61);
    assert!(net.nodes[1].m.is_stuck());
    // Removed: the margin starts now.
    net.view_all(&host_removed());
    assert_eq!(net.phase(1), Phase::WaitingForRemoval);
    assert_eq!(net.nodes[1].m.poll_timeout(), Some(net.now + margin));
    net.advance(margin - Duration::from_millis(1));
    assert!(net.log.iter().all(|l| l != "start 1"));
    net.advance(Duration::from_millis(1));
    assert!(net.log.iter().any(|l| l == "start 1"), "{:?}", net.log);
    assert_eq!(net.phase(1), Phase::Running);
    assert_eq!(net.phase(2), Phase::Younger);
}

#[test]
fn a_new_incarnation_at_the_old_hosts_address_counts_as_its_removal() {
    let mut net = three_up();
    net.crash(0);
    let margin = net.nodes[1].m.config().removal_margin;
    let restarted = UniqueAddress::new(node(0).address, Uid::new(999).unwrap());
    let mut list = members(&host_removed());
    list.push(Member::from_parts(
        restarted,
        UpNumber::UNASSIGNED,
        Joining,
        BTreeSet::from(["dc-default".to_owned()]),
        AppVersion::default(),
    ));
    net.members(1, &list);
    assert_eq!(net.phase(1), Phase::WaitingForRemoval);
    net.starts_after(1, margin);
}

#[test]
fn a_host_cut_off_and_removed_stops_before_the_margin_lets_the_next_start() {
    // The partition scenario: the old host downs itself on its side (and stops), the other side
    // removes it and waits out the margin.
    let mut net = three_up();
    net.nodes[0].cut = true;
    net.view(0, &host_is(Down));
    assert_eq!(net.phase(0), Phase::Stopped);
    assert_eq!(net.log.last().map(String::as_str), Some("stop 0"));
    net.view(1, &host_removed());
    net.view(2, &host_removed());
    net.advance(Duration::from_secs(5));
    net.stopped(0);
    net.advance(Duration::from_secs(20));
    assert_eq!(net.running(), [1]);
}

#[test]
fn a_leaving_host_cut_off_before_it_hears_it_is_exiting_stops_within_the_margin() {
    // Node 0 runs the instance and starts to leave; right after everyone has seen it Leaving it is
    // cut off. The others move it to Exiting and remove it (an unreachable Exiting member needs no
    // Down) and node 1 starts a margin later. Node 0 hears none of it: in its own view it is still
    // Leaving and the oldest, and no resolver acts on a member no one found unreachable before.
    let mut net = three_up();
    let margin = net.nodes[1].m.config().removal_margin;
    let allowance = net.nodes[0].m.leave_allowance();
    assert_eq!(allowance, Duration::from_secs(5), "(20 s margin - 10 s hand-over timeout) / 2");
    net.view_all(&host_is(Leaving));
    net.deliver();
    assert_eq!(net.log, ["start 0"], "Leaving still hosts");
    net.nodes[0].cut = true;
    for i in [1, 2] {
        net.view(i, &host_is(Exiting));
        net.view(i, &host_removed());
    }
    net.advance(allowance - Duration::from_millis(1));
    assert_eq!(net.running(), [0]);
    assert_eq!(net.phase(0), Phase::Running);
    net.advance(Duration::from_millis(1));
    assert_eq!(net.phase(0), Phase::Stopped);
    // The instance takes the whole hand-over timeout and is aborted; it still ends in time.
    net.advance(margin - allowance - Duration::from_millis(1));
    net.stopped(0);
    net.advance(Duration::from_millis(1));
    assert_eq!(net.running(), [1]);
    let order = ["stop 0", "abort 0", "stopped 0", "start 1"].map(|l| net.position(l));
    assert!(order.is_sorted(), "{:?}", net.log);
    // It announced its release, too late to be heard, and starts nothing again.
    assert!(net.log.contains(&"0->1 Released".to_owned()), "{:?}", net.log);
    net.view(0, &host_is(Up));
    net.advance(margin * 2);
    assert_eq!(net.running(), [1]);
}

#[test]
fn a_leave_that_completes_within_the_allowance_hands_over_as_usual() {
    let mut net = three_up();
    let allowance = net.nodes[0].m.leave_allowance();
    net.view_all(&host_is(Leaving));
    net.advance(allowance - Duration::from_millis(1));
    assert_eq!(net.running(), [0]);
    net.view_all(&host_is(Exiting));
    net.deliver();
    assert_eq!(net.phase(0), Phase::HandingOver);
    net.stopped(0);
    net.deliver();
    assert_eq!(net.running(), [1]);
    assert!(net.log.iter().all(|l| !l.contains("Released")), "{:?}", net.log);
}

#[test]
fn a_manager_that_first_sees_its_node_leaving_never_hosts() {
    // It cannot tell how long ago the leave began: the others may be about to remove the node.
    let mut net = Net::new(3);
    net.view(0, &host_is(Leaving));
    assert_eq!(net.phase(0), Phase::Stopped);
    assert!(net.running().is_empty());
    net.advance(Duration::from_secs(60));
    assert!(net.running().is_empty(), "{:?}", net.log);
}

#[test]
fn a_node_frozen_past_its_deadline_waits_a_margin_of_running_time_before_starting() {
    // Node 1 waits out the crashed host's margin, and is frozen (a paused process) through it: it
    // may have been removed itself meanwhile, so it does not start on the stale view.
    let mut net = three_up();
    net.crash(0);
    let margin = net.nodes[1].m.config().removal_margin;
    net.view(1, &host_removed());
    assert_eq!(net.phase(1), Phase::WaitingForRemoval);
    net.now += margin * 3;
    let now = net.now;
    net.receive(1, 2, HandOver::HandOverDone);
    assert!(net.running().is_empty());
    assert_eq!(net.phase(1), Phase::WaitingForRemoval);
    assert_eq!(net.nodes[1].m.poll_timeout(), Some(now + margin));
    net.starts_after(1, margin);
}

#[test]
fn a_host_frozen_while_running_stops_at_once_and_starts_again_a_margin_later() {
    // While node 0 is frozen, the others may remove it and, a margin later, start their own
    // instance; its resolver would need another stable_after to tell it so.
    let mut net = three_up();
    let retry = net.nodes[0].m.config().hand_over_retry_interval;
    let margin = net.nodes[0].m.config().removal_margin;
    // On time, the watch changes nothing.
    net.advance(Duration::from_secs(30));
    assert_eq!(net.log, ["start 0"]);
    assert_eq!(net.nodes[0].m.poll_timeout(), Some(net.now + retry), "the watch is armed");

    net.now += retry * 5;
    net.timeout(0);
    assert_eq!(net.log, ["start 0", "stop 0"]);
    assert_eq!(net.phase(0), Phase::WaitingForRemoval);
    net.stopped(0);
    assert_eq!(net.phase(0), Phase::WaitingForRemoval);
    net.starts_after(0, margin);
    assert_eq!(net.phase(0), Phase::Running);
}

#[test]
fn a_host_frozen_alone_in_its_cluster_keeps_its_instance() {
    let mut net = Net::new(1);
    net.view_all(&all(1, Up));
    assert_eq!(net.running(), [0]);
    let retry = net.nodes[0].m.config().hand_over_retry_interval;
    net.now += retry * 5;
    net.timeout(0);
    assert_eq!(net.log, ["start 0"]);
    assert_eq!(net.phase(0), Phase::Running);
}

#[test]
fn the_recommended_removal_margin_covers_detection_and_stopping_on_the_other_side() {
    let cluster = convoke_membership::Config::default();
    let margin = SingletonConfig::removal_margin_for(&cluster, Duration::from_secs(2));
    // 20 s stable_after + 15 s down-all-when-unstable + 3 s acceptable pause + 3 × 1 s heartbeats
    // + 2 s to stop.
    assert_eq!(margin, Duration::from_secs(43));
}

#[test]
fn only_members_with_the_role_in_the_same_data_center_host() {
    let mut net = Net::with(4, |_| {
        let mut c = SingletonConfig::new("s");
        c.role = Some("backend".to_owned());
        c
    });
    net.one_instance = false;
    let lines = [
        (0, Up, 1, &["frontend"][..]),
        (1, Up, 2, &["backend", "dc-east"]),
        (2, Up, 3, &["backend"]),
        (3, Up, 4, &["backend"]),
    ];
    net.view_all(&lines);
    net.deliver();
    // Node 1 is in another data center: one singleton per data center.
    assert_eq!(net.running(), [1, 2]);
    assert_eq!(net.phase(0), Phase::Idle);
    assert_eq!(net.phase(3), Phase::Younger);
    assert_eq!(net.nodes[0].m.status().oldest, Some(node(2)));
    assert_eq!(net.nodes[3].m.status().oldest, Some(node(2)));
    assert_eq!(net.nodes[1].m.status().oldest, Some(node(1)));
}

#[test]
fn joining_and_weakly_up_members_are_never_the_oldest() {
    let mut net = Net::new(2);
    let lines = [(0, MemberStatus::WeaklyUp, 0, &[][..]), (1, Up, 5, &[])];
    net.view_all(&lines);
    assert_eq!(net.running(), [1]);
    assert_eq!(net.phase(0), Phase::Idle);
}

#[test]
fn a_downed_host_stops_its_instance_and_never_starts_again() {
    let mut net = three_up();
    net.view(0, &host_is(Down));
    assert_eq!(net.phase(0), Phase::Stopped);
    assert_eq!(net.log.last().map(String::as_str), Some("stop 0"));
    net.stopped(0);
    net.view(0, &all(3, Up));
    net.advance(Duration::from_secs(60));
    assert!(net.running().is_empty());
    assert_eq!(net.phase(0), Phase::Stopped);
}

#[test]
fn a_host_missing_from_its_own_view_stops_as_removed() {
    let mut net = three_up();
    net.view(0, &host_removed());
    assert_eq!(net.phase(0), Phase::Stopped);
    assert_eq!(net.log.last().map(String::as_str), Some("stop 0"));
}

#[test]
fn shutdown_stops_the_instance_and_nothing_starts_afterwards() {
    let mut net = three_up();
    net.shutdown(0);
    assert_eq!(net.phase(0), Phase::Stopped);
    assert!(net.nodes[0].stop_asked);
    net.stopped(0);
    net.view(0, &all(3, Up));
    assert!(net.running().is_empty());
}

#[test]
fn a_host_that_shut_down_before_leaving_releases_it_so_the_next_starts_without_a_margin() {
    let mut net = three_up();
    net.shutdown(0);
    net.stopped(0);
    // Announced once the instance has ended, to every other member.
    let stopped = net.position("stopped 0");
    assert!(stopped < net.position("0->1 Released"), "{:?}", net.log);
    assert!(net.log.contains(&"0->2 Released".to_owned()));
    net.deliver();
    // Node 0 then leaves and is gone before node 1's HandOverToMe could reach it.
    net.crash(0);
    let exiting = host_is(Exiting);
    net.view_all(&exiting);
    net.deliver();
    assert_eq!(net.running(), [1], "{:?}", net.log);
    assert!(!net.log.contains(&"1->0 HandOverToMe".to_owned()));
}

#[test]
fn a_younger_node_asked_to_hand_over_answers_done_at_once() {
    let mut net = three_up();
    net.receive(2, 1, HandOver::HandOverToMe);
    assert_eq!(net.log.last().map(String::as_str), Some("2->1 HandOverDone"));
}

#[test]
fn the_oldest_disputes_a_hand_over_request_until_its_own_view_agrees() {
    let mut net = three_up();
    net.receive(0, 1, HandOver::HandOverToMe);
    assert_eq!(net.log, ["start 0"]);
    // Its view catches up: it hands over to the waiting requester at once.
    net.view(0, &host_is(Exiting));
    assert_eq!(net.phase(0), Phase::HandingOver);
    assert!(net.nodes[0].stop_asked);
}

#[test]
fn a_node_that_shuts_down_within_a_removed_hosts_margin_announces_its_release_only_after_it() {
    // Released lets a new oldest start at once, like HandOverDone: node 1 must not send it while
    // host 0, which node 2 never knew, may still run behind a partition.
    let mut net = three_up();
    net.crash(0);
    let margin = net.nodes[1].m.config().removal_margin;
    net.view(1, &host_removed());
    net.advance(Duration::from_secs(5));
    net.shutdown(1);
    let exiting = [(1, Exiting, 2, &[][..]), (2, Up, 3, &[])];
    net.nodes[2].m = SingletonManager::new(SingletonConfig::new("s"), node(2), net.now);
    net.view(2, &exiting);
    net.deliver();
    assert!(net.log.iter().all(|l| l != "1->2 Released"), "{:?}", net.log);
    net.advance(margin - Duration::from_secs(5) - Duration::from_millis(1));
    assert!(net.running().is_empty(), "{:?}", net.log);
    net.advance(Duration::from_millis(1));
    assert!(net.log.contains(&"1->2 Released".to_owned()), "{:?}", net.log);
    assert_eq!(net.running(), [2]);
}

#[test]
fn a_node_that_still_waits_out_a_removed_hosts_margin_does_not_vouch_for_it() {
    // Node 1 knew host 0 and saw it removed; node 2 never knew it. Node 1 must not tell node 2
    // "done" before the margin has passed for host 0, which may still run behind a partition.
    let mut net = three_up();
    net.crash(0);
    net.view(1, &host_removed());
    assert_eq!(net.phase(1), Phase::WaitingForRemoval);
    net.advance(Duration::from_secs(5));
    // Node 1 leaves; node 2, the new oldest, asks it.
    let exiting = [(1, Exiting, 2, &[][..]), (2, Up, 3, &[])];
    net.nodes[2].m = SingletonManager::new(SingletonConfig::new("s"), node(2), net.now);
    net.view(1, &exiting);
    net.view(2, &exiting);
    net.deliver();
    assert!(net.log.contains(&"1->2 HandOverInProgress".to_owned()), "{:?}", net.log);
    net.advance(Duration::from_secs(14));
    assert!(net.running().is_empty());
    net.advance(Duration::from_secs(2));
    assert!(net.log.contains(&"1->2 HandOverDone".to_owned()), "{:?}", net.log);
    assert!(net.log.contains(&"start 2".to_owned()));
}

#[test]
fn a_hand_over_done_from_a_node_it_did_not_ask_is_ignored() {
    let mut net = three_up();
    net.crash(0);
    net.view_all(&host_is(Down));
    net.receive(1, 2, HandOver::HandOverDone);
    assert_eq!(net.phase(1), Phase::BecomingOldest);
    assert!(net.log.iter().all(|l| l != "start 1"));
}

#[test]
fn an_instance_that_ends_by_itself_is_not_restarted() {
    let mut net = three_up();
    net.stopped(0);
    assert_eq!(net.phase(0), Phase::Running);
    assert!(!net.nodes[0].m.status().running_here);
    net.view_all(&host_is(Leaving));
    net.advance(Duration::from_secs(10));
    assert!(net.running().is_empty());
    // When it is no longer the oldest it has nothing to hand over.
    net.view_all(&host_is(Exiting));
    net.deliver();
    assert_eq!(net.running(), [1]);
}

fn leased(n: usize) -> Net {
    Net::with(n, |_| {
        let mut c = SingletonConfig::new("s");
        c.use_lease = true;
        c
    })
}

#[test]
fn with_a_lease_the_instance_starts_only_once_the_lease_is_granted() {
    let mut net = leased(2);
    net.view_all(&all(2, Up));
    assert_eq!(net.log, ["acquire 0"]);
    assert_eq!(net.phase(0), Phase::AcquiringLease);
    net.lease(0, false);
    assert!(net.running().is_empty());
    assert_eq!(net.nodes[0].m.poll_timeout(), Some(net.now + LEASE_RETRY_INTERVAL));
    net.advance(LEASE_RETRY_INTERVAL);
    assert_eq!(net.log, ["acquire 0", "acquire 0"]);
    net.lease(0, true);
    assert_eq!(net.running(), [0]);
    assert_eq!(net.phase(0), Phase::Running);
}

#[test]
fn a_lost_lease_stops_the_instance_and_acquires_again_once_it_ended() {
    let mut net = leased(2);
    net.view_all(&all(2, Up));
    net.lease(0, true);
    net.lease(0, false);
    assert_eq!(net.log, ["acquire 0", "start 0", "stop 0"]);
    assert_eq!(net.phase(0), Phase::AcquiringLease);
    net.stopped(0);
    assert_eq!(net.log.last().map(String::as_str), Some("acquire 0"));
    net.lease(0, true);
    assert_eq!(net.running(), [0]);
}

#[test]
fn a_host_releases_its_lease_after_its_instance_stopped_and_before_it_says_done() {
    let mut net = leased(2);
    net.view_all(&all(2, Up));
    net.lease(0, true);
    net.view_all(&[(0, Exiting, 1, &[][..]), (1, Up, 2, &[])]);
    net.deliver();
    net.stopped(0);
    net.deliver();
    let stopped = net.position("stopped 0");
    let release = net.position("release 0");
    let done = net.position("0->1 HandOverDone");
    let acquire = net.log.iter().rposition(|l| l == "acquire 1").expect("node 1 asks");
    assert!(stopped < release && release < done && done < acquire, "{:?}", net.log);
    assert_eq!(net.phase(1), Phase::AcquiringLease);
    net.lease(1, true);
    assert_eq!(net.running(), [1]);
}

fn count(log: &[String], line: &str) -> usize {
    log.iter().filter(|l| *l == line).count()
}

/// Node 0 of three starts running, then sees itself Exiting and is asked for the instance.
fn handing_over() -> Net {
    let mut net = three_up();
    net.view_all(&host_is(Exiting));
    net.deliver();
    assert!(net.log.contains(&"stop 0".to_owned()), "{:?}", net.log);
    net
}

#[test]
fn an_instance_not_stopped_within_the_hand_over_timeout_is_aborted() {
    let timeout = SingletonConfig::new("s").hand_over_timeout;
    let mut net = handing_over();
    net.advance(timeout - Duration::from_millis(1));
    assert_eq!(count(&net.log, "abort 0"), 0, "{:?}", net.log);
    net.advance(Duration::from_millis(1));
    assert_eq!(count(&net.log, "abort 0"), 1, "{:?}", net.log);
    // Aborting is asked once; the instance still counts until the driver says it has ended.
    net.advance(timeout * 3);
    assert_eq!(count(&net.log, "abort 0"), 1, "{:?}", net.log);
    assert!(net.nodes[0].m.status().running_here);
    assert!(!net.log.contains(&"0->1 HandOverDone".to_owned()), "{:?}", net.log);
    net.stopped(0);
    net.deliver();
    assert_eq!(net.running(), [1]);
}

#[test]
fn an_instance_that_stops_in_time_is_not_aborted() {
    let timeout = SingletonConfig::new("s").hand_over_timeout;
    let mut net = handing_over();
    net.advance(timeout - Duration::from_millis(1));
    net.stopped(0);
    net.deliver();
    net.advance(timeout * 2);
    assert_eq!(count(&net.log, "abort 0"), 0, "{:?}", net.log);
    assert_eq!(net.running(), [1]);
}

#[test]
fn the_hand_over_timeout_comes_from_the_config() {
    let timeout = Duration::from_secs(3);
    let mut net = Net::with(3, |_| {
        let mut c = SingletonConfig::new("s");
        c.hand_over_timeout = timeout;
        c
    });
    net.view_all(&all(3, Up));
    net.view_all(&host_is(Exiting));
    net.deliver();
    net.advance(timeout - Duration::from_millis(1));
    assert_eq!(count(&net.log, "abort 0"), 0, "{:?}", net.log);
    net.advance(Duration::from_millis(1));
    assert_eq!(count(&net.log, "abort 0"), 1, "{:?}", net.log);
}

/// Two leased nodes Up, node 0 granted its lease and running.
fn leased_running() -> Net {
    let mut net = leased(2);
    net.view_all(&all(2, Up));
    net.lease(0, true);
    assert_eq!(net.log, ["acquire 0", "start 0"]);
    net
}

#[test]
fn a_granted_lease_is_renewed_every_heartbeat_interval() {
    let every = SingletonConfig::new("s").lease_heartbeat_interval;
    let mut net = leased_running();
    for round in 1..=3 {
        net.advance(every - Duration::from_millis(1));
        assert_eq!(count(&net.log, "renew 0"), round - 1, "{:?}", net.log);
        net.advance(Duration::from_millis(1));
        assert_eq!(count(&net.log, "renew 0"), round, "{:?}", net.log);
        // Answered a moment later: the next renewal is one interval after the answer.
        net.advance(Duration::from_millis(10));
        net.lease(0, true);
    }
    assert_eq!(count(&net.log, "renew 1"), 0);
    assert_eq!(net.running(), [0]);
}

#[test]
fn a_renewal_that_succeeds_changes_nothing() {
    let every = SingletonConfig::new("s").lease_heartbeat_interval;
    let mut net = leased_running();
    net.advance(every);
    assert_eq!(net.log, ["acquire 0", "start 0", "renew 0"]);
    net.lease(0, true);
    assert_eq!(net.log, ["acquire 0", "start 0", "renew 0"]);
    assert_eq!(net.phase(0), Phase::Running);
    assert_eq!(net.running(), [0]);
    assert!(!net.nodes[0].stop_asked);
}

#[test]
fn a_refused_renewal_stops_the_instance() {
    let every = SingletonConfig::new("s").lease_heartbeat_interval;
    let mut net = leased_running();
    net.advance(every);
    net.lease(0, false);
    assert_eq!(net.log, ["acquire 0", "start 0", "renew 0", "stop 0"]);
    assert_eq!(net.phase(0), Phase::AcquiringLease);
    // No renewal of a lease it no longer holds; it asks again once its instance has ended.
    net.advance(every * 2);
    assert_eq!(count(&net.log, "renew 0"), 1, "{:?}", net.log);
    net.stopped(0);
    assert_eq!(net.log.last().map(String::as_str), Some("acquire 0"));
}

#[test]
fn a_renewal_without_an_answer_is_not_sent_again() {
    let every = SingletonConfig::new("s").lease_heartbeat_interval;
    let mut net = leased_running();
    net.advance(every * 4);
    assert_eq!(count(&net.log, "renew 0"), 1, "{:?}", net.log);
    assert_eq!(net.running(), [0]);
}

#[test]
fn a_grant_that_comes_in_after_the_operation_timeout_counts_as_refused() {
    // Shorter than the retry interval, so that coming in late is not also a freeze.
    let timeout = Duration::from_millis(300);
    let mut net = Net::with(2, |_| {
        let mut c = SingletonConfig::new("s");
        c.use_lease = true;
        c.lease_operation_timeout = timeout;
        c
    });
    net.view_all(&all(2, Up));
    // The node was frozen between the store's grant and taking the answer in.
    net.now += timeout + Duration::from_millis(1);
    net.lease(0, true);
    assert!(net.running().is_empty(), "{:?}", net.log);
    assert_eq!(net.phase(0), Phase::AcquiringLease);
    net.advance(LEASE_RETRY_INTERVAL);
    assert_eq!(net.log.last().map(String::as_str), Some("acquire 0"));
    // In time, it counts.
    net.advance(timeout);
    net.lease(0, true);
    assert_eq!(net.running(), [0]);
    // A renewal granted too late is a lost lease.
    let every = SingletonConfig::new("s").lease_heartbeat_interval;
    net.advance(every);
    net.now += timeout + Duration::from_millis(1);
    net.lease(0, true);
    assert!(net.nodes[0].stop_asked, "{:?}", net.log);
}

#[test]
fn a_host_waits_for_its_renewal_before_it_releases_and_says_done() {
    let every = SingletonConfig::new("s").lease_heartbeat_interval;
    let mut net = leased_running();
    net.advance(every);
    net.view_all(&[(0, Exiting, 1, &[][..]), (1, Up, 2, &[])]);
    net.deliver();
    net.stopped(0);
    net.deliver();
    assert!(!net.log.contains(&"release 0".to_owned()), "{:?}", net.log);
    assert!(!net.log.contains(&"0->1 HandOverDone".to_owned()), "{:?}", net.log);
    net.lease(0, true);
    net.deliver();
    let release = net.position("release 0");
    let done = net.position("0->1 HandOverDone");
    assert!(release < done, "{:?}", net.log);
    assert_eq!(net.phase(1), Phase::AcquiringLease);
}

#[test]
fn phases_have_kebab_case_names() {
    let names: Vec<&str> = [
        Phase::Idle,
        Phase::Younger,
        Phase::BecomingOldest,
        Phase::WaitingForRemoval,
        Phase::AcquiringLease,
        Phase::Running,
        Phase::HandingOver,
        Phase::WasOldest,
        Phase::Stopped,
    ]
    .into_iter()
    .map(Phase::as_str)
    .collect();
    assert_eq!(
        names,
        [
            "idle",
            "younger",
            "becoming-oldest",
            "waiting-for-removal",
            "acquiring-lease",
            "running",
            "handing-over",
            "was-oldest",
            "stopped"
        ]
    );
}

#[test]
fn the_retry_budget_outlasts_the_removal_margin() {
    let mut c = SingletonConfig::new("s");
    assert_eq!(c.max_hand_over_retries(), 23);
    c.removal_margin = Duration::from_secs(5);
    assert_eq!(c.max_hand_over_retries(), 15);
}

#[test]
fn hand_over_messages_are_serialisable() {
    fn serde<T: serde::Serialize + serde::de::DeserializeOwned>() {}
    serde::<HandOver>();
}

/// A small random number generator for the property test's schedules (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
    }

    fn millis(&mut self, max: u64) -> Duration {
        Duration::from_millis(self.below(max + 1))
    }
}

/// One random run of a graceful leave of the host over a lossy, duplicating, reordering network:
/// node 0 leaves (Leaving, Exiting, then it exits and is removed), every node hears of each step
/// at its own time, instances take their own time to stop, and node 0 exits at a random moment
/// after it saw itself Exiting, handed over or not. Returns the log; panics at a second instance.
fn random_leave(seed: u64) -> (Net, Vec<usize>) {
    let mut rng = Rng(seed | 1);
    let mut net = three_up();
    let views: [Vec<Line<'static>>; 3] = [host_is(Leaving), host_is(Exiting), host_removed()];
    let start = net.now;
    let tick = Duration::from_millis(50);
    // When each node sees each view. The removal comes only once node 0 is gone, and node 0
    // never sees it.
    let mut seen_at = [[Duration::MAX; 3]; 3];
    for row in &mut seen_at {
        let mut t = Duration::ZERO;
        for at in row.iter_mut().take(2) {
            t += rng.millis(3_000);
            *at = t;
        }
    }
    let exit_after = rng.millis(15_000);
    let mut exit_at = Duration::MAX;
    let mut in_flight: Vec<(Duration, usize, usize, HandOver)> = Vec::new();
    let mut stop_at: [Option<Duration>; 3] = [None; 3];
    let mut elapsed = Duration::ZERO;
    while elapsed < Duration::from_secs(120) {
        elapsed += tick;
        net.now = start + elapsed;
        for (i, row) in seen_at.iter().enumerate() {
            for (k, at) in row.iter().enumerate() {
                if *at > elapsed - tick && *at <= elapsed && !net.nodes[i].cut {
                    net.view(i, &views[k]);
                    if i == 0 && k == 1 {
                        exit_at = elapsed + exit_after;
                    }
                }
            }
        }
        // The removal reaches the others only once node 0 is gone.
        if elapsed >= exit_at && !net.nodes[0].cut {
            net.crash(0);
            // Strictly after this tick, whose views have been taken in already.
            for row in seen_at.iter_mut().skip(1) {
                row[2] = row[1].max(elapsed) + Duration::from_millis(1) + rng.millis(1_999);
            }
        }
        for (i, stop) in stop_at.iter_mut().enumerate() {
            let now = net.now;
            if net.nodes[i].m.poll_timeout().is_some_and(|t| t <= now) && !net.nodes[i].cut {
                net.timeout(i);
            }
            if net.nodes[i].stop_asked && stop.is_none() {
                *stop = Some(elapsed + rng.millis(3_000));
            }
            if stop.is_some_and(|t| t <= elapsed) {
                *stop = None;
                if net.nodes[i].instance && !net.nodes[i].cut {
                    net.stopped(i);
                }
            }
        }
        for (from, to, m) in net.mail.drain(..).collect::<Vec<_>>() {
            let copies = match rng.below(20) {
                0 | 1 => 0,
                2 => 2,
                _ => 1,
            };
            for _ in 0..copies {
                in_flight.push((elapsed + rng.millis(600), from, to, m));
            }
        }
        let (due, later): (Vec<_>, Vec<_>) = in_flight.into_iter().partition(|m| m.0 <= elapsed);
        in_flight = later;
        for (_, from, to, m) in due {
            if !net.nodes[to].cut {
                net.receive(to, from, m);
            }
        }
    }
    let running = net.running();
    (net, running)
}

proptest! {
    #[test]
    fn a_graceful_leave_over_a_faulty_network_never_runs_two_instances_and_ends_with_one(
        seed in any::<u64>()
    ) {
        let (net, running) = random_leave(seed);
        prop_assert_eq!(running, vec![1], "{:?}", net.log);
    }
}

#[test]
fn a_removal_seen_right_after_the_crash_still_reaches_the_others() {
    // This seed drew a delay of 0 for the removal: the harness once scheduled it inside the tick
    // that had already passed, so that no node ever saw it.
    let (net, running) = random_leave(13_158_049_113_137_409_318);
    assert_eq!(running, vec![1], "{:?}", net.log);
}

#[test]
fn the_oldest_candidate_has_the_role_the_data_center_a_candidate_status_and_an_up_number() {
    let list = members(&[
        (0, Up, 1, &["frontend"][..]),
        (1, Up, 2, &["backend", "dc-east"]),
        (2, Exiting, 3, &["backend"]),
        (3, Leaving, 0, &["backend"]),
        (4, MemberStatus::ReadyForShutdown, 6, &["backend"]),
        (5, Leaving, 5, &["backend"]),
    ]);
    let host = |dc: &str, role: Option<&str>| oldest_candidate(&list, dc, role).map(Member::node);
    assert_eq!(host("default", Some("backend")), Some(&node(5)));
    assert_eq!(host("default", None), Some(&node(0)));
    assert_eq!(host("east", Some("backend")), Some(&node(1)));
    assert_eq!(host("east", Some("frontend")), None);
    assert_eq!(host("west", None), None);
}
