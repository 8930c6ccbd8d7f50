//! The state machine: [`SingletonManager`], its timers and what it knows of the other nodes.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use convoke_membership::{Member, MemberStatus, UniqueAddress};

use super::view::{self, is_candidate_status};
use super::{HandOver, LEASE_RETRY_INTERVAL, Output, Phase, SingletonConfig, SingletonStatus};

/// The local instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Instance {
    Absent,
    Running,
    Stopping(StopCause),
}

/// Why the manager stopped its instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StopCause {
    HandOver,
    LeaseLost,
    Shutdown,
    /// The node was frozen while the instance ran: the others may have removed it meanwhile.
    Frozen,
}

/// The lease, as far as this manager knows. At most one operation is outstanding: `Acquiring`
/// and `Renewing` wait for the answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lease {
    Released,
    Acquiring,
    Held,
    /// Held, and a renewal is outstanding.
    Renewing,
}

/// The manager's timers (the removal margins are computed from the suspects instead).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Timer {
    /// Re-send HandOverToMe (BecomingOldest) or TakeOverFromMe (WasOldest).
    Retry,
    /// Ask for the lease again after a refusal.
    LeaseRetry,
    /// Wake up every retry interval while the instance runs here, so that a freeze is noticed.
    Watch,
    /// Renew the held lease.
    LeaseRenew,
    /// Abort the instance asked to stop, if it has not ended by then.
    Abort,
}

impl convoke_membership::timers::Timer for Timer {
    fn index(self) -> usize {
        self as usize
    }
}

type Timers = convoke_membership::timers::Timers<Timer, 5>;

/// A node that may be running the instance, as far as this manager knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Suspect {
    /// When this node first saw it gone from the membership; `None` while it is a member.
    removed_since: Option<Instant>,
}

/// What the latest membership list said.
#[derive(Clone, Debug, Default)]
struct View {
    /// Whether this node has been in a list: from then on, missing from one means removed.
    joined: bool,
    /// This node's status in the latest list.
    self_status: Option<MemberStatus>,
    /// Whether this node may host at all (it has the role).
    may_host: bool,
    /// The oldest candidate.
    oldest: Option<UniqueAddress>,
    /// Every member's status.
    statuses: BTreeMap<UniqueAddress, MemberStatus>,
}

/// The cluster singleton manager of one node: a deterministic state machine with no IO.
///
/// # Call protocol
/// 1. Build it with [`SingletonManager::new`], passing the current time.
/// 2. Feed it inputs, each with the current time `now` (monotonic, never decreasing):
///    - [`handle_members`](Self::handle_members) with every member of the node's latest gossip,
///      whenever the membership changed (calling it with an unchanged list does nothing);
///    - [`handle_message`](Self::handle_message) for every [`HandOver`] message that arrived from
///      the manager of the same singleton on another node (the transport tells which node);
///    - [`handle_timeout`](Self::handle_timeout) whenever the deadline from
///      [`poll_timeout`](Self::poll_timeout) has passed;
///    - [`instance_stopped`](Self::instance_stopped) when the local instance has ended, asked to
///      or not;
///    - [`lease_result`](Self::lease_result) with the answer to every [`Output::AcquireLease`]
///      and [`Output::RenewLease`] (`false` when the operation failed or timed out), and with
///      `false` when the driver learns by other means that a held lease is lost;
///    - [`shutdown`](Self::shutdown) when the node goes away for good without handing over.
/// 3. After every input, drain [`poll_output`](Self::poll_output) until `None` (carry out each
///    output in order), then re-arm the timer with [`poll_timeout`](Self::poll_timeout).
///
/// [`status`](Self::status) may be read at any time.
///
/// # Guarantee
/// The manager starts the instance only when this node is the oldest candidate in its view and
/// every node it knows may be running the instance (every previous oldest, every older member seen
/// Exiting or Down, every node that offered TakeOverFromMe or was told HandOverDone) has either
/// answered HandOverDone to this node's HandOverToMe, or has been gone from the membership for the
/// removal margin. It answers HandOverDone only while no instance runs here, it is not about to
/// start one, and no node it knows of was removed less than a removal margin ago. An input that
/// arrives more than a retry interval after the deadline the manager asked for shows that the node
/// was frozen; its view may be stale (the others may have removed it meanwhile), so it starts
/// nothing until a removal margin later, and stops an instance running here when another member
/// could host it (while the instance runs, the manager asks to be woken every retry interval so
/// that a freeze is noticed).
///
/// Once this node is leaving (Leaving or Exiting in its own view), the manager hosts for at most
/// [`leave_allowance`](Self::leave_allowance) more and then shuts down: the others may remove a
/// leaving node that was cut off without downing it.
#[derive(Debug)]
pub struct SingletonManager {
    config: SingletonConfig,
    self_node: UniqueAddress,
    phase: Phase,
    since: Instant,
    view: View,
    instance: Instance,
    /// The instance ended by itself while running: the manager does not restart it.
    ended_by_itself: bool,
    lease: Lease,
    /// When the outstanding lease operation was asked for.
    lease_asked_at: Option<Instant>,
    /// Nodes that may be running the instance; cleared by their HandOverDone, or by their removal
    /// plus the margin.
    suspects: BTreeMap<UniqueAddress, Suspect>,
    /// Departing older members already made suspects, so that a HandOverDone is not undone by the
    /// next list.
    flagged: BTreeSet<UniqueAddress>,
    /// Nodes whose HandOverToMe waits for a HandOverDone.
    requests: BTreeSet<UniqueAddress>,
    /// Suspects sent HandOverToMe since this node became the oldest.
    asked: BTreeSet<UniqueAddress>,
    /// The new oldest last sent TakeOverFromMe.
    take_over_to: Option<UniqueAddress>,
    /// Unanswered HandOverToMe rounds since this node became the oldest.
    retries: u32,
    shut_down: bool,
    /// Whether this manager has told the others it is [`HandOver::Released`].
    announced_release: bool,
    /// Incarnations that announced they shut down with no instance: never suspects again.
    released: BTreeSet<UniqueAddress>,
    timers: Timers,
    outputs: VecDeque<Output>,
    /// The deadline the manager last asked to be woken at: an input long after it shows that the
    /// node was frozen (a stopped process, a long pause) and its view may be stale.
    expected: Option<Instant>,
    /// After such a freeze, nothing starts here before this instant: the node's own membership
    /// must have had a removal margin of running time to tell it whether it was downed meanwhile.
    hold_until: Option<Instant>,
    /// Set when this node first sees itself Leaving or Exiting: by then the manager shuts down (see
    /// [`SingletonManager::leave_allowance`]).
    leave_deadline: Option<Instant>,
}

impl SingletonManager {
    /// A manager for `config` on `self_node`, Idle until its first membership list.
    pub fn new(config: SingletonConfig, self_node: UniqueAddress, now: Instant) -> Self {
        Self {
            config,
            self_node,
            phase: Phase::Idle,
            since: now,
            view: View::default(),
            instance: Instance::Absent,
            ended_by_itself: false,
            lease: Lease::Released,
            lease_asked_at: None,
            suspects: BTreeMap::new(),
            flagged: BTreeSet::new(),
            requests: BTreeSet::new(),
            asked: BTreeSet::new(),
            take_over_to: None,
            retries: 0,
            shut_down: false,
            announced_release: false,
            released: BTreeSet::new(),
            timers: Timers::default(),
            outputs: VecDeque::new(),
            expected: None,
            hold_until: None,
            leave_deadline: None,
        }
    }

    // ---- inputs -------------------------------------------------------------------------------

    /// The node's current membership view: every member of its latest gossip (any status; a node
    /// missing from the list has been removed). Called whenever the view changes (may be called
    /// with an unchanged list too; must be idempotent).
    pub fn handle_members(&mut self, now: Instant, members: &[Member]) {
        self.observe(now);
        if self.shut_down {
            return;
        }
        let reading = view::read(&self.config, &self.self_node, members);
        let Some(me) = reading.me else {
            if self.view.joined {
                // Removed: this incarnation is gone from the cluster for good.
                self.view.self_status = None;
                self.shut_down = true;
            }
            self.update(now);
            return;
        };
        let leaving = matches!(me.status(), MemberStatus::Leaving | MemberStatus::Exiting);
        if leaving && self.leave_deadline.is_none() {
            // A manager that first hears of its node when it is already leaving cannot tell since
            // when: the others may be about to remove it, so it counts the allowance as spent.
            let allowance = if self.view.joined { self.leave_allowance() } else { Duration::ZERO };
            self.leave_deadline = Some(now + allowance);
        }
        let oldest = reading.oldest.map(|m| m.node().clone());
        if oldest != self.view.oldest
            && let Some(o) = &oldest
        {
            self.suspect(o, true, now);
        }
        for n in &reading.departing_elders {
            if self.flagged.insert(n.clone()) {
                self.suspect(n, true, now);
            }
        }
        self.flagged.retain(|n| reading.statuses.contains_key(n));
        for (n, s) in &mut self.suspects {
            if s.removed_since.is_none() && !reading.statuses.contains_key(n) {
                s.removed_since = Some(now);
            }
        }
        // A requester that left, is on its way out, or is not known yet will ask again if it
        // still wants the instance (it repeats its request every retry interval).
        self.requests.retain(|r| {
            reading.statuses.get(r).is_some_and(|s| is_candidate_status(*s) || s.is_joining())
        });
        self.view = View {
            joined: true,
            self_status: Some(me.status()),
            may_host: self.config.role.as_deref().is_none_or(|r| me.has_role(r)),
            oldest,
            statuses: reading.statuses,
        };
        if matches!(me.status(), MemberStatus::Down | MemberStatus::Removed) {
            self.shut_down = true;
        }
        self.update(now);
    }

    /// A hand-over message from the manager of the same singleton on `from`.
    pub fn handle_message(&mut self, now: Instant, from: &UniqueAddress, message: HandOver) {
        self.observe(now);
        if *from == self.self_node {
            return;
        }
        match message {
            HandOver::HandOverToMe => self.on_hand_over_to_me(now, from),
            HandOver::HandOverInProgress => {
                if self.phase.is_waiting_to_start() {
                    if self.suspects.contains_key(from) {
                        self.retries = 0;
                    } else {
                        self.suspect(from, self.view.statuses.contains_key(from), now);
                    }
                }
            }
            HandOver::HandOverDone => {
                // Only an answer to this node's own request counts; outside the waiting phases
                // it can only be a late copy.
                if self.phase.is_waiting_to_start() {
                    self.suspects.remove(from);
                }
            }
            HandOver::Released => {
                // Permanent for that incarnation: it runs nothing and never starts again.
                self.released.insert(from.clone());
                self.suspects.remove(from);
                self.requests.remove(from);
            }
            HandOver::TakeOverFromMe => {
                if !self.shut_down && self.phase != Phase::Running {
                    self.suspect(from, self.view.statuses.contains_key(from), now);
                    if self.phase.is_waiting_to_start() {
                        self.send(from.clone(), HandOver::HandOverToMe);
                        self.asked.insert(from.clone());
                    }
                }
            }
        }
        self.update(now);
    }

    /// Handles the timers that are due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.observe(now);
        if self.timers.take_due(Timer::Retry, now) {
            match self.phase {
                Phase::BecomingOldest => {
                    self.retries = self.retries.saturating_add(1);
                    let live: Vec<UniqueAddress> = self.live_suspects().cloned().collect();
                    for n in live {
                        self.send(n.clone(), HandOver::HandOverToMe);
                        self.asked.insert(n);
                    }
                    self.arm_retry(now);
                }
                Phase::WasOldest => {
                    if let Some(o) = self.take_over_to.clone() {
                        self.send(o, HandOver::TakeOverFromMe);
                    }
                    self.arm_retry(now);
                }
                _ => {}
            }
        }
        if self.timers.take_due(Timer::LeaseRenew, now) && self.lease == Lease::Held {
            self.lease = Lease::Renewing;
            self.lease_asked_at = Some(now);
            self.outputs.push_back(Output::RenewLease);
        }
        if self.timers.take_due(Timer::Abort, now) && matches!(self.instance, Instance::Stopping(_))
        {
            self.outputs.push_back(Output::AbortInstance);
        }
        // A refused lease is asked for again by `update`, once this timer is gone; the watch is
        // armed again there.
        self.timers.take_due(Timer::LeaseRetry, now);
        self.timers.take_due(Timer::Watch, now);
        self.update(now);
    }

    /// The local instance has ended (after StopInstance, or by itself/panic).
    pub fn instance_stopped(&mut self, now: Instant) {
        self.observe(now);
        match self.instance {
            Instance::Absent => return,
            Instance::Running => self.ended_by_itself = self.phase == Phase::Running,
            Instance::Stopping(_) => {}
        }
        self.instance = Instance::Absent;
        self.update(now);
    }

    /// The answer to AcquireLease or RenewLease: whether this node holds the lease now. Also
    /// called with `false` when a held lease is lost. A granted lease is renewed every
    /// `lease_heartbeat_interval`; a renewal that succeeds changes nothing else, and any refusal
    /// of a held lease (a renewal refused, failed or timed out) is a lost lease: the instance is
    /// stopped. A grant that comes in more than `lease_operation_timeout` after its request
    /// counts as a refusal (the node was frozen in between; the lease may have expired). An
    /// answer while no operation is outstanding and the lease is not held is ignored.
    pub fn lease_result(&mut self, now: Instant, granted: bool) {
        self.observe(now);
        let timeout = self.config.lease_operation_timeout;
        let fresh = self.lease_asked_at.take().is_none_or(|at| now <= at + timeout);
        match (self.lease, granted && fresh) {
            (Lease::Acquiring | Lease::Renewing, true) => {
                // Kept if still wanted; `update` releases an unwanted one.
                self.lease = Lease::Held;
                self.timers.set(Timer::LeaseRenew, now + self.config.lease_heartbeat_interval);
            }
            (Lease::Acquiring, false) => {
                self.lease = Lease::Released;
                self.timers.set(Timer::LeaseRetry, now + LEASE_RETRY_INTERVAL);
            }
            (Lease::Held | Lease::Renewing, false) => {
                self.lease = Lease::Released;
                if self.instance == Instance::Running {
                    self.stop_instance(StopCause::LeaseLost, now);
                }
            }
            (Lease::Held | Lease::Released, true) | (Lease::Released, false) => {}
        }
        self.update(now);
    }

    /// This node is going away for good (downed, removed, process stopping without hand-over):
    /// stop the instance, start nothing any more.
    pub fn shutdown(&mut self, now: Instant) {
        self.shut_down = true;
        self.update(now);
    }

    // ---- outputs ------------------------------------------------------------------------------

    /// The next thing the driver must do, in order.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let margin = self.config.removal_margin;
        let removals = self.suspects.values().filter_map(|s| s.removed_since).map(|t| t + margin);
        let leave = self.leave_deadline.filter(|_| !self.shut_down);
        removals.chain(self.timers.earliest()).chain(self.hold_until).chain(leave).min()
    }

    // ---- views --------------------------------------------------------------------------------

    /// What this node believes about the singleton.
    pub fn status(&self) -> SingletonStatus {
        SingletonStatus {
            name: self.config.name.clone(),
            role: self.config.role.clone(),
            phase: self.phase,
            oldest: self.view.oldest.clone(),
            running_here: self.instance != Instance::Absent,
            since: self.since,
        }
    }

    /// The settings.
    pub fn config(&self) -> &SingletonConfig {
        &self.config
    }

    /// This node's identity.
    pub fn self_node(&self) -> &UniqueAddress {
        &self.self_node
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The nodes that may still be running the instance as far as this node knows, with when each
    /// was seen removed (`None`: still a member). This node starts only once the list is empty.
    pub fn waiting_for(&self) -> impl Iterator<Item = (&UniqueAddress, Option<Instant>)> + '_ {
        self.suspects.iter().map(|(n, s)| (n, s.removed_since))
    }

    /// Whether an [`Output::AcquireLease`] or [`Output::RenewLease`] still waits for its answer. A
    /// driver that is about to exit waits for it (at most the operation timeout), so that a lease
    /// it turns out to hold is released rather than left to expire.
    pub fn lease_pending(&self) -> bool {
        matches!(self.lease, Lease::Acquiring | Lease::Renewing)
    }

    /// Whether this node, as the oldest, has asked a previous host still in the membership more
    /// than [`SingletonConfig::max_hand_over_retries`] times without an answer. It keeps asking and
    /// does not start; the driver may want to log it.
    pub fn is_stuck(&self) -> bool {
        self.phase == Phase::BecomingOldest && self.retries > self.config.max_hand_over_retries()
    }

    /// How long this node hosts (or may start) the instance once it has seen itself Leaving:
    /// half of what the removal margin leaves after the hand-over timeout. Past it the manager
    /// shuts down as if the node had gone: it stops the instance, starts nothing, and tells the
    /// others it is released.
    ///
    /// A Leaving node may be cut off right after its leave has spread. The leader then moves it to
    /// Exiting and removes it as an unreachable Exiting member, without a Down, and the new oldest
    /// starts a removal margin later; the node, hearing nothing, would still see itself Leaving
    /// and the oldest, and no resolver downs a node the others never found unreachable before it
    /// left. The leader moves a member to Exiting only on convergence, which needs every member
    /// that is neither Down nor Exiting to have seen it Leaving, this one included, so the removal
    /// comes after the moment this node saw itself Leaving: stopping by the allowance, and ending by force a hand-over timeout later,
    /// ends the instance before any other node may start, with half the margin to spare for
    /// clocks that run at slightly different rates. `docs/singleton.md` tells the whole case.
    pub fn leave_allowance(&self) -> Duration {
        self.config.removal_margin.saturating_sub(self.config.hand_over_timeout) / 2
    }

    // ---- the state machine --------------------------------------------------------------------

    /// After every input: drops suspects whose removal margin has passed, settles the phase (with
    /// what entering it takes), the lease and the waiting requests.
    fn update(&mut self, now: Instant) {
        if self.leave_deadline.is_some_and(|t| t <= now) {
            self.shut_down = true;
        }
        let margin = self.config.removal_margin;
        self.suspects.retain(|_, s| s.removed_since.is_none_or(|t| t + margin > now));
        if self.hold_until.is_some_and(|t| t <= now) {
            self.hold_until = None;
        }
        let next = self.decide(now);
        self.enter(next, now);
        if self.lease == Lease::Held
            && self.instance == Instance::Absent
            && (self.shut_down || !self.is_oldest())
        {
            self.lease = Lease::Released;
            self.outputs.push_back(Output::ReleaseLease);
        }
        if !matches!(self.lease, Lease::Held) {
            self.timers.clear(Timer::LeaseRenew);
        }
        if !matches!(self.instance, Instance::Stopping(_)) {
            self.timers.clear(Timer::Abort);
        }
        self.serve_requests(now);
        self.announce_release();
        if self.instance != Instance::Running {
            self.timers.clear(Timer::Watch);
        } else if self.timers.get(Timer::Watch).is_none() {
            self.timers.set(Timer::Watch, now + self.config.hand_over_retry_interval);
        }
        self.expected = self.poll_timeout();
    }

    /// Notes a freeze: `now` is more than a retry interval past the deadline asked for. An
    /// instance running here is stopped if another member could host it: while this node was
    /// frozen the others may have removed it and, a removal margin later, started their own.
    /// Its stop must not wait for the node's own membership to say so, which after a long
    /// freeze takes the resolver another `stable_after`.
    fn observe(&mut self, now: Instant) {
        let late = self.expected.is_some_and(|d| now > d + self.config.hand_over_retry_interval);
        if !late || self.shut_down {
            return;
        }
        self.hold_until = Some(now + self.config.removal_margin);
        let others = self.view.statuses.keys().any(|n| *n != self.self_node);
        if self.instance == Instance::Running && others {
            self.stop_instance(StopCause::Frozen, now);
        }
    }

    /// The phase the inputs so far lead to; starts or stops the instance when that is the step.
    fn decide(&mut self, now: Instant) -> Phase {
        if self.shut_down {
            if self.instance == Instance::Running {
                self.stop_instance(StopCause::Shutdown, now);
            }
            return Phase::Stopped;
        }
        let oldest = self.is_oldest();
        match self.instance {
            Instance::Running if oldest => Phase::Running,
            Instance::Running if self.requests.is_empty() => Phase::WasOldest,
            Instance::Running => {
                self.stop_instance(StopCause::HandOver, now);
                Phase::HandingOver
            }
            Instance::Stopping(StopCause::LeaseLost) if oldest => Phase::AcquiringLease,
            Instance::Stopping(StopCause::Frozen) if oldest => Phase::WaitingForRemoval,
            Instance::Stopping(StopCause::Shutdown) => Phase::Stopped,
            Instance::Stopping(_) => Phase::HandingOver,
            Instance::Absent if oldest => self.try_start(now),
            Instance::Absent => {
                let up = self
                    .view
                    .self_status
                    .is_some_and(|s| is_candidate_status(s) || s == MemberStatus::Exiting);
                if up && self.view.may_host && self.view.oldest.is_some() {
                    Phase::Younger
                } else {
                    Phase::Idle
                }
            }
        }
    }

    /// This node is the oldest and runs no instance: start it if nothing stands in the way.
    fn try_start(&mut self, now: Instant) -> Phase {
        if self.phase == Phase::Running && self.ended_by_itself {
            return Phase::Running;
        }
        if self.live_suspects().next().is_some() {
            return Phase::BecomingOldest;
        }
        if !self.suspects.is_empty() || self.hold_until.is_some() {
            return Phase::WaitingForRemoval;
        }
        if self.config.use_lease && self.lease != Lease::Held {
            if self.lease == Lease::Released && self.timers.get(Timer::LeaseRetry).is_none() {
                self.lease = Lease::Acquiring;
                self.lease_asked_at = Some(now);
                self.outputs.push_back(Output::AcquireLease);
            }
            return Phase::AcquiringLease;
        }
        self.instance = Instance::Running;
        self.ended_by_itself = false;
        self.outputs.push_back(Output::StartInstance);
        Phase::Running
    }

    /// Moves to `next`, and does what being in it takes: asking the suspects, offering the
    /// instance to the new oldest.
    fn enter(&mut self, next: Phase, now: Instant) {
        if next != self.phase {
            if next == Phase::BecomingOldest {
                self.retries = 0;
            }
            if !next.is_waiting_to_start() {
                self.asked.clear();
            }
            if next != Phase::WasOldest {
                self.take_over_to = None;
            }
            if next != Phase::Running {
                self.ended_by_itself = false;
            }
            self.phase = next;
            self.since = now;
        }
        match self.phase {
            Phase::BecomingOldest => {
                let new: Vec<UniqueAddress> =
                    self.live_suspects().filter(|n| !self.asked.contains(*n)).cloned().collect();
                for n in new {
                    self.send(n.clone(), HandOver::HandOverToMe);
                    self.asked.insert(n);
                }
                if self.timers.get(Timer::Retry).is_none() {
                    self.arm_retry(now);
                }
            }
            Phase::WasOldest => {
                if self.take_over_to != self.view.oldest {
                    self.take_over_to = self.view.oldest.clone();
                    if let Some(o) = self.take_over_to.clone() {
                        self.send(o, HandOver::TakeOverFromMe);
                    }
                }
                if self.timers.get(Timer::Retry).is_none() {
                    self.arm_retry(now);
                }
            }
            _ => self.timers.clear(Timer::Retry),
        }
    }

    fn on_hand_over_to_me(&mut self, now: Instant, from: &UniqueAddress) {
        if self.may_answer_done(now) && self.is_valid_requester(from) {
            self.answer_done(from);
            return;
        }
        self.requests.insert(from.clone());
        // The oldest disputes the request until its view agrees; everyone else tells it to wait.
        if !self.phase.claims_oldest() {
            self.send(from.clone(), HandOver::HandOverInProgress);
        }
    }

    /// Sends HandOverDone to every waiting requester, once this node may.
    fn serve_requests(&mut self, now: Instant) {
        if self.requests.is_empty() || !self.may_answer_done(now) {
            return;
        }
        let ready: Vec<UniqueAddress> =
            self.requests.iter().filter(|r| self.is_valid_requester(r)).cloned().collect();
        for r in ready {
            self.requests.remove(&r);
            self.answer_done(&r);
        }
    }

    /// Once shut down with no instance left, tells every other member so (once). Not while a node
    /// this one saw removed is within its removal margin: like HandOverDone, Released lets a new
    /// oldest start at once, and it may never have heard of that node.
    fn announce_release(&mut self) {
        if !self.shut_down
            || self.announced_release
            || self.instance != Instance::Absent
            || self.lease_pending()
            || self.suspects.values().any(|s| s.removed_since.is_some())
        {
            return;
        }
        self.announced_release = true;
        let others: Vec<UniqueAddress> =
            self.view.statuses.keys().filter(|n| **n != self.self_node).cloned().collect();
        for n in others {
            self.send(n, HandOver::Released);
        }
    }

    /// Tells `to` it may start, and from then on counts it as a possible host.
    fn answer_done(&mut self, to: &UniqueAddress) {
        self.send(to.clone(), HandOver::HandOverDone);
        self.suspects.entry(to.clone()).or_insert(Suspect { removed_since: None });
    }

    /// Whether this node may say HandOverDone: no instance here, it is not about to start one, no
    /// lease operation is outstanding (the lease is released first, once its answer is in), and
    /// no node it knows of is within its removal margin (a host cut off by a partition may still be
    /// running the instance then, and the requester may never have heard of it).
    fn may_answer_done(&self, now: Instant) -> bool {
        let margin = self.config.removal_margin;
        self.instance == Instance::Absent
            && !self.lease_pending()
            && !self.phase.claims_oldest()
            && !self.suspects.values().any(|s| s.removed_since.is_some_and(|t| t + margin > now))
    }

    /// Whether `node` is a member of this node's view that may host.
    fn is_valid_requester(&self, node: &UniqueAddress) -> bool {
        self.view.statuses.get(node).is_some_and(|s| is_candidate_status(*s))
    }

    fn is_oldest(&self) -> bool {
        !self.shut_down && self.view.oldest.as_ref() == Some(&self.self_node)
    }

    fn live_suspects(&self) -> impl Iterator<Item = &UniqueAddress> + '_ {
        self.suspects.iter().filter(|(_, s)| s.removed_since.is_none()).map(|(n, _)| n)
    }

    /// Counts `node` as a possible host; one that is not a `member` counts as removed as of now.
    fn suspect(&mut self, node: &UniqueAddress, member: bool, now: Instant) {
        if *node == self.self_node || self.released.contains(node) {
            return;
        }
        let removed_since = (!member).then_some(now);
        self.suspects.entry(node.clone()).or_insert(Suspect { removed_since });
    }

    /// Asks the running instance to stop, and to be aborted if it has not ended within the
    /// hand-over timeout.
    fn stop_instance(&mut self, cause: StopCause, now: Instant) {
        self.instance = Instance::Stopping(cause);
        self.outputs.push_back(Output::StopInstance);
        self.timers.set(Timer::Abort, now + self.config.hand_over_timeout);
    }

    fn send(&mut self, to: UniqueAddress, message: HandOver) {
        self.outputs.push_back(Output::Send { to, message });
    }

    fn arm_retry(&mut self, now: Instant) {
        self.timers.set(Timer::Retry, now + self.config.hand_over_retry_interval);
    }
}
