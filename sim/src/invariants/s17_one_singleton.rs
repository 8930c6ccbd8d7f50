//! S17: at most one cluster singleton instance at any simulated instant, among the members of one
//! cluster.
//!
//! Every instance that exists counts — running, or asked to stop and not yet ended, on a process
//! that runs, is paused, or lingers after leaving to hand its instance over — with one exception:
//! an instance whose process has been paused, since the instance started, for longer than the
//! removal margin. A pause is judged whole: an instance frozen when the other started, whose
//! pause then outlasts the margin, is exempt for the whole overlap, not only from the moment the
//! pause reached the margin. Such a process was frozen through the whole window the margin gives a host cut
//! off from the others to notice and stop, and nothing short of a lease (or fencing the instance's
//! side effects) stops an instance that does not run; the singleton does not claim it. (It stops
//! soon after it resumes: its node finds itself downed or removed, which S14 bounds.)
//!
//! An exempt instance is not free to run on: once its process resumes, its manager notices the
//! freeze within one retry interval and stops it, so it may exist beside a counted instance for
//! at most that interval plus the longest stop after the resume (`InstanceView::stale_until`).
//! (A manager alone in its view keeps the instance: nothing else could host it. If the process is
//! paused again later, that pause's rules apply, and the deadline counts from the latest resume.)
//!
//! The same holds for an instance whose process is paused, however briefly, at the moment the
//! other instance starts. The other started after the removal margin it gave this host to stop;
//! the host did not stop in it because it was frozen when the margin ended, and a freeze delays
//! the host's own decision by as long as it lasts — it may begin after the far side removed the
//! host and before the host's resolver would have downed it, so a pause shorter than the margin
//! can outlast what is left of it (docs/singleton.md, "Frozen nodes"). Such an overlap is excused
//! while the pause lasts and, after the resume, for one retry interval plus the longest stop
//! (`InstanceView::resume_grace_until`); an instance still there beside the other past that
//! breaks S17. An instance that was running when the other started is never excused by a pause
//! that begins later.
//!
//! "One cluster": the singleton promises one instance per cluster, and relies on the split-brain
//! resolver to leave one cluster. When the resolver fails and two live clusters coexist — S1's
//! definition: two processes whose own status is live, each holding the other Down or not a
//! member — each runs its own singleton, and that is S1's to bound, not S17's. Whether two
//! instances belong to two such clusters shows only as their overlap goes on (each side gives the
//! other up at its own pace), so the checker follows every pair of instances that run at once:
//! the pair breaks S17 when the overlap ends, or outlasts S1's bound, without the two hosts ever
//! having been seen in two live clusters. The hosts are looked at after every step of the
//! singleton layer and every half second of virtual time while an overlap lasts.
//!
//! With a lease the promise is stronger, and so is the check. An instance starts only while its
//! host holds the lease, by the lease store; and two instances that both started under the lease
//! may not overlap even in two live clusters: the lease, not the resolver, keeps the second from
//! starting while the first runs (the simulated lease outlives the longest pause that still counts
//! by the time a holder takes to notice its loss and end its instance, see
//! `crate::lease::LeaseConfig::for_singleton`).

use std::collections::BTreeMap;
use std::time::Duration;

use convoke_membership::{Cluster, UniqueAddress};

use super::s01_one_live_cluster::{Pace, bound, gives_up, is_live};
use super::{InstanceView, Invariant, WorldView};

/// The S17 checker.
#[derive(Debug, Default)]
pub struct OneSingleton {
    pace: Pace,
    /// Pairs of instances (by host incarnation, lower first) that run at once.
    overlaps: BTreeMap<(UniqueAddress, UniqueAddress), Overlap>,
}

#[derive(Clone, Debug)]
struct Overlap {
    /// When both were first seen running.
    since: Duration,
    /// Their slots, in the order of the key.
    slots: (usize, usize),
    /// Whether the two hosts were ever seen in two live clusters meanwhile.
    split: bool,
    /// The instance whose process was paused when the overlap began, if one was.
    frozen: Option<Frozen>,
}

/// An instance whose process was paused when the other instance of an overlap started: the far
/// side's removal margin ended while it could not act, which no margin covers. It is excused
/// while its process stays paused and, after the resume, until its manager must have noticed the
/// freeze and the instance stopped.
#[derive(Clone, Debug)]
struct Frozen {
    slot: usize,
    node: UniqueAddress,
    /// Whether the process was still paused when last looked at.
    paused: bool,
    /// The end of its grace after the last resume, as last looked at.
    grace_until: Option<Duration>,
}

impl Frozen {
    fn of(slot: usize, i: &InstanceView) -> Option<Self> {
        i.paused.then(|| Self {
            slot,
            node: i.node.clone(),
            paused: true,
            grace_until: i.resume_grace_until,
        })
    }

    /// Takes in the instance's current state, while it still exists.
    fn update(&mut self, world: &dyn WorldView) {
        if let Some(i) = world.singleton(self.slot).filter(|i| i.node == self.node) {
            self.paused = i.paused;
            self.grace_until = i.resume_grace_until;
        }
    }

    fn excused(&self, now: Duration) -> bool {
        self.paused || self.grace_until.is_some_and(|g| now <= g)
    }
}

/// Whether `i` counts: its process was never frozen for longer than the margin while it ran.
pub(crate) fn counts(i: &InstanceView) -> bool {
    i.long_pause_from.is_none()
}

/// Whether the overlap `o` of the pair `key` is exempt although it began while both counted: one
/// of the two instances still exists and no longer counts because of a pause that had begun by
/// the time the overlap did. That instance was frozen from the overlap's start until its pause
/// outlasted the margin: the pause, judged whole, exempts it, and it never ran as a counted
/// instance beside the other. (Judged by the pause so far, the overlap would seem to end, as an
/// overlap of two counted instances, the moment the pause reached the margin.)
fn frozen_through(
    world: &dyn WorldView,
    key: &(UniqueAddress, UniqueAddress),
    o: &Overlap,
) -> bool {
    [(o.slots.0, &key.0), (o.slots.1, &key.1)].into_iter().any(|(slot, node)| {
        world.singleton(slot).is_some_and(|i| {
            i.node == *node && i.long_pause_from.is_some_and(|from| from <= o.since)
        })
    })
}

/// Whether two instances' overlap may be left to S1 when their hosts are in two live clusters:
/// not when both started under a lease, which promises one instance across clusters too.
fn may_split(a: &InstanceView, b: &InstanceView) -> bool {
    a.leased.is_none() || b.leased.is_none()
}

/// An instance that started while its host did not hold the lease.
fn unleased(world: &dyn WorldView) -> Option<String> {
    (0..world.slots()).find_map(|s| {
        let i = world.singleton(s).filter(|i| i.leased == Some(false))?;
        Some(format!(
            "the singleton instance on slot {s} ({}) started at {:.3} s while its host did not \
             hold the lease",
            i.node,
            i.since.as_secs_f64()
        ))
    })
}

/// Whether the hosts in slots `a` and `b` are now in two live clusters (S1's definition).
pub(crate) fn split(world: &dyn WorldView, a: usize, b: usize) -> bool {
    let (Some(ca), Some(cb)) = (world.core(a), world.core(b)) else { return false };
    let live = |c: &Cluster| is_live(c.self_status());
    live(ca) && live(cb) && gives_up(ca, cb.self_node()) && gives_up(cb, ca.self_node())
}

/// An instance exempt for a pause that has ended, still there past its `stale_until` beside an
/// instance that counts (on another host, not in another live cluster): its host acted on its
/// stale view for longer than the manager's check after a freeze allows.
///
/// Only while its process runs, and counting from its latest resume: a process paused again is
/// judged by the rules of that pause. Its manager may have kept the instance through the earlier
/// resume (alone in its view, nobody else could host it), and the instance may then have served
/// the cluster for a long time before the second pause, during which the others removed the host
/// and started theirs once the margin ran out (seed 10404635 at N = 4).
fn stale_beside(world: &dyn WorldView, running: &[(usize, InstanceView)]) -> Option<String> {
    let now = world.now();
    (0..world.slots()).find_map(|s| {
        let i = world.singleton(s).filter(|i| !i.paused)?;
        let stale = i.stale_until?;
        let until = Some(stale.max(i.resume_grace_until.unwrap_or(stale))).filter(|u| now > *u)?;
        let (other, _) = running
            .iter()
            .find(|(o, oi)| *o != s && !(may_split(&i, oi) && split(world, s, *o)))?;
        Some(format!(
            "the singleton instance on slot {s} ({}), whose process resumed from a pause longer \
             than the removal margin, still ran at {:.3} s beside the instance on slot {other}, \
             past {:.3} s, by when its manager must have noticed the freeze and the instance \
             stopped",
            i.node,
            now.as_secs_f64(),
            until.as_secs_f64()
        ))
    })
}

impl OneSingleton {
    /// Follows the overlaps: new ones start, current ones may turn out to be a split, ended or
    /// overlong ones that never did break the invariant.
    fn look(&mut self, world: &dyn WorldView) -> Result<(), String> {
        let now = world.now();
        let running: Vec<(usize, InstanceView)> = (0..world.slots())
            .filter_map(|s| world.singleton(s).filter(counts).map(|i| (s, i)))
            .collect();
        if let Some(err) = unleased(world).or_else(|| stale_beside(world, &running)) {
            return Err(err);
        }
        let mut current = Vec::new();
        for (k, (sa, ia)) in running.iter().enumerate() {
            for (sb, ib) in &running[k + 1..] {
                let (key, slots) = if ia.node < ib.node {
                    ((ia.node.clone(), ib.node.clone()), (*sa, *sb))
                } else {
                    ((ib.node.clone(), ia.node.clone()), (*sb, *sa))
                };
                let o = self.overlaps.entry(key.clone()).or_insert_with(|| Overlap {
                    since: now,
                    slots,
                    split: false,
                    frozen: Frozen::of(*sa, ia).or_else(|| Frozen::of(*sb, ib)),
                });
                o.split |= may_split(ia, ib) && split(world, slots.0, slots.1);
                current.push(key);
            }
        }
        let limit = (0..world.slots()).find_map(|i| world.core(i)).map(|c| bound(c.config()));
        let mut broken = None;
        self.overlaps.retain(|key, o| {
            let ended = !current.contains(key);
            if let Some(f) = o.frozen.as_mut() {
                f.update(world);
            }
            let excused = o.frozen.as_ref().is_some_and(|f| f.excused(now));
            if let Some(f) = o.frozen.as_ref().filter(|_| !excused && !ended && !o.split) {
                broken.get_or_insert_with(|| describe_resumed(key, o, f, now));
                return false;
            }
            let overlong = limit.is_some_and(|l| now.saturating_sub(o.since) > l);
            if o.split || !(ended || overlong) {
                return !ended;
            }
            if ended && (excused || frozen_through(world, key, o)) {
                return false;
            }
            if overlong && excused {
                return true;
            }
            broken.get_or_insert_with(|| describe(key, o, now, ended));
            false
        });
        broken.map_or(Ok(()), Err)
    }
}

fn describe_resumed(
    key: &(UniqueAddress, UniqueAddress),
    o: &Overlap,
    f: &Frozen,
    now: Duration,
) -> String {
    let other = if f.slot == o.slots.0 { (o.slots.1, &key.1) } else { (o.slots.0, &key.0) };
    format!(
        "the singleton instance on slot {} ({}), whose process was paused when the instance on \
         slot {} ({}) started at {:.3} s, still ran beside it at {:.3} s, past {:.3} s, by when \
         its manager must have noticed the freeze and the instance stopped",
        f.slot,
        f.node,
        other.0,
        other.1,
        o.since.as_secs_f64(),
        now.as_secs_f64(),
        f.grace_until.unwrap_or_default().as_secs_f64()
    )
}

fn describe(
    key: &(UniqueAddress, UniqueAddress),
    o: &Overlap,
    now: Duration,
    ended: bool,
) -> String {
    let how = if ended { "until" } else { "and still at" };
    format!(
        "two singleton instances ran at once in one cluster, on slot {} ({}) and slot {} ({}), from \
         {:.3} s {how} {:.3} s ({:.1} s), and the two were never seen in two live clusters",
        o.slots.0,
        key.0,
        o.slots.1,
        key.1,
        o.since.as_secs_f64(),
        now.as_secs_f64(),
        now.saturating_sub(o.since).as_secs_f64()
    )
}

impl Invariant for OneSingleton {
    fn id(&self) -> &'static str {
        "S17"
    }

    fn check_singletons(&mut self, world: &dyn WorldView) -> Result<(), String> {
        self.look(world)
    }

    fn wants_world(&self) -> bool {
        true
    }

    fn check_world(&mut self, world: &dyn WorldView) -> Result<(), String> {
        if self.overlaps.is_empty() || self.pace.look(world.now()).is_none() {
            return Ok(());
        }
        self.look(world)
    }
}
