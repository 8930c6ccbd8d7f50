//! Chaos seeds that once failed, or that cover schedules worth keeping, run with small clusters.
//! Each entry says why it is here. A seed that fails prints the command that reproduces it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use convoke_sim::commands::chaos::{ChaosDowning, ChaosOptions, run_seed};
use convoke_sim::singleton::Margin;

struct Case {
    seed: u64,
    nodes: usize,
    downing: ChaosDowning,
    why: &'static str,
}

const CASES: &[Case] = &[
    Case {
        seed: 12,
        nodes: 3,
        downing: ChaosDowning::Resolver,
        why: "S18: two of three nodes downed at once took the sharding table with their replicas; \
              the survivor's new coordinator allocated the shards the survivor still hosted to \
              the restarted nodes (fixed: regions list their shards when they register)",
    },
    Case {
        seed: 31,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "S18: the same lost table with four of five nodes downed at once",
    },
    Case {
        seed: 19,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "S18 as first checked: a process paused for longer than the removal margin ran an \
              entity of a shard it hosted before the pause (exempt, as for the singleton)",
    },
    Case {
        seed: 97,
        nodes: 9,
        downing: ChaosDowning::Resolver,
        why: "S18 as first checked: a process paused for longer than the removal margin started a \
              shard from a HostShard that waited out the pause in its queue (exempt)",
    },
    Case {
        seed: 154,
        nodes: 4,
        downing: ChaosDowning::Resolver,
        why: "S18: the coordinator restarted on the node of the previous one, so no region saw a \
              new coordinator and registered again; with the table lost, a shard still hosted \
              was allocated elsewhere once the wait for registrations ran out (fixed: a new \
              coordinator asks every member to register again)",
    },
    Case {
        seed: 97,
        nodes: 4,
        downing: ChaosDowning::Resolver,
        why: "S18: a member was downed just before the new coordinator started, so the \
              coordinator never saw it go and allocated a shard the member still ran (fixed: \
              the coordinator takes in the departures its node's region saw, and a downed member \
              counts from when it was downed, not only once removed)",
    },
    Case {
        seed: 450,
        nodes: 4,
        downing: ChaosDowning::Resolver,
        why: "L10: the coordinator's node was seen unreachable by another member and then \
              reachable again, which raises no event on that node; the simulator told the \
              coordinator only of membership changes, so it held rebalancing for good (fixed: \
              the simulator, like the runtime, passes on every change of reachability)",
    },
    Case {
        seed: 2,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "113 faults; the resolvers downed every member and no process was left in a cluster: \
              it failed L1 until the operator bootstrapped a new cluster",
    },
    Case {
        seed: 11,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "a restart scheduled before the heal landed after convergence: it failed L1 until \
              the liveness phase waited for the restarted node",
    },
    Case {
        seed: 16,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "91 faults and 32 resolver decisions, the most of seeds 1-20",
    },
    Case {
        seed: 8,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "103 faults and 24 resolver decisions",
    },
    Case {
        seed: 176,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "S5: a node removed while paused before its Welcome retried its join with the same \
              uid and was admitted again (fixed in the core's join handling)",
    },
    Case {
        seed: 60,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "S5: the same removed-incarnation rejoin, late in the run (t = 580 s)",
    },
    Case {
        seed: 9,
        nodes: 3,
        downing: ChaosDowning::Resolver,
        why: "a side decided on stale reachability that the other two were indirectly connected \
              while they downed it: S2 had paired decisions taken on different information",
    },
    Case {
        seed: 41,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "S5: a partitioned node removed by the majority kept running and believing itself a \
              member (its heartbeats were answered); after the merge two incarnations of one \
              address were Up. Fixed in the core: a removed incarnation gets its tombstone back \
              and stops",
    },
    Case {
        seed: 182,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "L4: the later steps of a swizzle-clog scheduled before the heal clogged a node after \
              it (fixed in the simulator: the heal cancels pending faults)",
    },
    Case {
        seed: 1094,
        nodes: 16,
        downing: ChaosDowning::Resolver,
        why: "L1: the cluster converged 2.5 s after the heal, before the failure detectors noticed \
              a node isolated until the heal; the liveness phase now lets it converge again",
    },
    Case {
        seed: 260,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "S3 (checker): the leader moved a member to WeaklyUp in the step its resolver decided, \
              which cleared the seen set the seen-by evidence comes from; the checker judged on \
              the gossip before the step",
    },
    Case {
        seed: 346,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "S2 (checker): two decisions 10 s apart on different reachability, whose kept sides \
              overlap, were paired as a split brain",
    },
    Case {
        seed: 7,
        nodes: 7,
        downing: ChaosDowning::Resolver,
        why: "S11: a removed node's resolver downed a newcomer, stamping only its own clock entry; \
              the merge pruned that entry and left two states under one version (fixed in the \
              core: such a merge gets a version of the merging node)",
    },
    Case {
        seed: 2006,
        nodes: 25,
        downing: ChaosDowning::Resolver,
        why: "S11, the same clash with 25 nodes",
    },
    Case {
        seed: 105,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "S1: a node paused 46 s, past its removal, resumed behind a partition with a view \
              missing a member that joined meanwhile; two restarted peers' joins downed their \
              old incarnations, its keep-majority tie kept it, and it admitted a restarted node: \
              a second cluster (fixed: after a pause longer than stable_after the resolver waits \
              for word from a member and otherwise downs its own node)",
    },
    Case {
        seed: 149,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "S5: two runs of one address joined through two leaders, the merged gossip held \
              both Joining and the leader moved both Up (fixed: neither moves up while the other \
              is a member, and the live run downs the other)",
    },
    Case {
        seed: 897,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "S1: two nodes cut off from each other had each seen the three downed members \
              unreachable; each took the other for indirectly connected (it observed and was \
              observed) and kept itself (fixed: records about Down or Exiting members are no \
              evidence of indirect connection)",
    },
    Case {
        seed: 1145,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "S1 and L1: a joiner welcomed by a member that was downed before its gossip spread \
              waited 160 s in a cluster that had forgotten it, then moved itself WeaklyUp alone \
              (fixed: its gossip to a member readmits it as a joiner)",
    },
    Case {
        seed: 418,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "S11: a merge kept one side's clock and differed from it only in a removal time \
              (fixed: tombstone times count in the comparison, so the merge gets a new version)",
    },
    Case {
        seed: 43,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "S3 checker: the reaper changed reachability in the step of the decision; the \
              resolver decided on that table, without the seen-by evidence of the one before",
    },
    Case {
        seed: 767,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "S4 checker: one member healed and another became unreachable between two looks; \
              the resolver's clock started over there, the checker's must too",
    },
    Case {
        seed: 1233,
        nodes: 22,
        downing: ChaosDowning::Resolver,
        why: "S5: a stale gossip of a dead incarnation's old cluster, released by an unclog, held \
              the receiver (whose welcome there had been lost), so it was readmitted as a \
              forgotten joiner and its next gossip merged two clusters (fixed: a forgotten \
              joiner's gossip must hold only members this cluster has or has removed)",
    },
    Case {
        seed: 1203,
        nodes: 24,
        downing: ChaosDowning::Resolver,
        why: "S5: two incarnations Up after a forgotten-joiner readmission, as seed 1233",
    },
    Case {
        seed: 1194,
        nodes: 24,
        downing: ChaosDowning::Resolver,
        why: "S11: a downed node's down-all, stamped only by its own entry, merged into a gossip \
              that then learnt of its removal; pruning the entry left the clock another node \
              reached without the down-all (fixed: a merge that prunes an entry gets a version \
              of the merging node)",
    },
    Case {
        seed: 1491,
        nodes: 12,
        downing: ChaosDowning::Resolver,
        why: "S10 checker: a Leaving first member seen unreachable elected itself and exited; \
              a member that converged on the same clock through its ExitingConfirmed elected the \
              next one (the leadership passes on with the exit)",
    },
    Case {
        seed: 3049,
        nodes: 11,
        downing: ChaosDowning::Resolver,
        why: "S1: the operator downed by hand a member running behind a partition, so only one \
              side stopped counting it and both sides kept themselves (the simulated operator \
              now downs only members it reaches; the README warns against it)",
    },
    Case {
        seed: 3163,
        nodes: 21,
        downing: ChaosDowning::Resolver,
        why: "S1: a joiner unknown to the node that downed all kept the downed cluster alive \
              alone and grew a second cluster (fixed: a joiner whose cluster was downed around \
              it downs itself)",
    },
    Case {
        seed: 1073,
        nodes: 21,
        downing: ChaosDowning::Resolver,
        why: "S4 checker: the removal of unreachable members counted as a reachability change, \
              which the resolver does not count",
    },
    Case {
        seed: 503,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "S1: two leaders, each cut off from part of the others, each found everyone else \
              indirectly connected, downed them and kept itself; restarted nodes grew two \
              clusters around the two survivors (fixed: such a node downs all)",
    },
    Case {
        seed: 3232,
        nodes: 23,
        downing: ChaosDowning::Resolver,
        why: "L2: a forgotten joiner whose gossip named no gone non-joiner was never readmitted \
              and kept a crashed joiner in its gossip (fixed: any member gone here counts)",
    },
    Case {
        seed: 2010,
        nodes: 25,
        downing: ChaosDowning::Resolver,
        why: "S4 checker: the others' verdicts on this node are not a change the resolver counts",
    },
    Case {
        seed: 5912,
        nodes: 20,
        downing: ChaosDowning::Resolver,
        why: "S3 checker: a joiner moved to WeaklyUp and downed in the decision's step reset the \
              seen set",
    },
    Case {
        seed: 8019,
        nodes: 7,
        downing: ChaosDowning::Resolver,
        why: "S14 checker: a node paused right after it saw itself Down was charged for the pause",
    },
    Case {
        seed: 7722,
        nodes: 22,
        downing: ChaosDowning::Resolver,
        why: "L2: the leader had left while Joining, never Up, and its resolver never decided: a \
              crashed joiner blocked convergence for ever",
    },
    Case {
        seed: 9143,
        nodes: 22,
        downing: ChaosDowning::Resolver,
        why: "S1: a forgotten joiner asked to leave while Joining was never readmitted and ran on \
              alone as a member",
    },
    Case {
        seed: 2,
        nodes: 5,
        downing: ChaosDowning::Oracle,
        why: "the oracle downing path with the resolver off",
    },
    Case {
        seed: 69,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "S17 with a removal margin of stable_after: the host, cut off, saw the others for \
              0.3 s as a partition healed and started its resolver's wait over, while the others \
              downed it on their older verdict; it downed itself 10 s after the new host started \
              (fixed: the margin adds a failure-detection time and the stop time)",
    },
    Case {
        seed: 81,
        nodes: 3,
        downing: ChaosDowning::Resolver,
        why: "S17 with a removal margin of stable_after: both sides decided within 3 ms of each \
              other, and the new host started while the old one was still stopping",
    },
    Case {
        seed: 249,
        nodes: 3,
        downing: ChaosDowning::Resolver,
        why: "S17 with a removal margin of stable_after: the host downed itself in time and was \
              still stopping its instance when the margin ran out",
    },
    Case {
        seed: 1296,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "S17 with a removal margin of stable_after: under 23 % loss the others saw the host \
              unreachable 7 s before it saw them",
    },
    Case {
        seed: 907,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "S17 with a removal margin of stable_after: a restarted node cut off with a \
              two-member view kept itself on the tie-break and started once the margin ran out; \
              the side it downed downed itself later than that",
    },
    Case {
        seed: 1148,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "S17: a node paused for 45 s while it waited out a removal margin resumed after the \
              others had removed it and started on its stale view (fixed: a manager woken long \
              after its deadline starts nothing for a removal margin)",
    },
    Case {
        seed: 756,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "S17 checker: the resolvers left two live clusters for a while (S1's to bound), each \
              with its singleton; the checker now leaves such pairs to S1",
    },
    Case {
        seed: 775,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "S17 checker: two sides of a 2-2 split each kept themselves for a while, as seed 756",
    },
    Case {
        seed: 137,
        nodes: 4,
        downing: ChaosDowning::Resolver,
        why: "S1: a partition cut in steps let node 0's record about node 1 cross; with node 1's \
              own record about node 0 it made a cycle, node 1 took both for indirectly connected, \
              downed them and node 2, and kept node 3, while node 0 kept {0, 2}; a node now sets \
              aside the records of an observer cut off from its whole side",
    },
    Case {
        seed: 343,
        nodes: 6,
        downing: ChaosDowning::Resolver,
        why: "S1: node 3, cut off from three members that stale records showed indirectly \
              connected with each other, downed them and kept itself with a joiner, which counts \
              on no side: it now downs all, as a node that would keep itself alone does",
    },
    Case {
        seed: 1301,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "S1: node 0 downed two members as indirectly connected and two more as the minority \
              of the rest, keeping itself alone though it was cut off from one of the indirectly \
              connected itself; it now downs all",
    },
    Case {
        seed: 1451,
        nodes: 3,
        downing: ChaosDowning::Resolver,
        why: "S17 checker: the old host froze before the far side started its instance and stayed \
              frozen past the removal margin, which exempts it; the checker judged the pause by \
              its length so far and saw two counted instances until the pause reached the \
              margin (fixed: a pause is judged whole)",
    },
    Case {
        seed: 1403,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "S17 checker: as 1451, a host frozen from before the other instance started until \
              past the margin",
    },
    Case {
        seed: 802,
        nodes: 3,
        downing: ChaosDowning::Resolver,
        why: "S18 checker: the entity started elsewhere while its old host was frozen, and the \
              freeze then outlasted the removal margin, which exempts the old host; the checker \
              judged it at the start by the pause so far (fixed: judged when the pause is over)",
    },
    Case {
        seed: 613,
        nodes: 6,
        downing: ChaosDowning::Resolver,
        why: "S18 checker: as 802, a host frozen past the margin judged by its pause so far",
    },
    Case {
        seed: 613,
        nodes: 10,
        downing: ChaosDowning::Resolver,
        why: "S18 checker: as 802, at ten nodes",
    },
    Case {
        seed: 2705,
        nodes: 7,
        downing: ChaosDowning::Resolver,
        why: "S18 checker: as 802, at seven nodes",
    },
    Case {
        seed: 1665,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "S18: a host cut off from the others was paused for 14 s a second before its \
              resolver would have downed it; the others removed it meanwhile. It resumed within \
              the removal margin, still Up in its own view, and its resolver waited another \
              stable_after for word from a member before it downed itself, so its region served \
              the shards the others started once the margin ran out (fixed: a region woken more \
              than a retry interval late stops its shards at once and hosts none for a margin)",
    },
    Case {
        seed: 1603,
        nodes: 3,
        downing: ChaosDowning::Resolver,
        why: "S18: the same with a host paused for 18.7 s, 2.5 s before its own decision; after \
              the pause its region also took in the queued messages and started entities on \
              its stale view",
    },
    Case {
        seed: 2483,
        nodes: 3,
        downing: ChaosDowning::Resolver,
        why: "L10 checker: a crashed process's restart, drawn before the heal, came after the \
              shards were balanced at [15, 15]; its region was given shards three per round and \
              the check 18 s later found [10, 9, 11] (fixed: a process that starts after the \
              membership settled begins the liveness phase again)",
    },
    Case {
        seed: 832,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "L10 checker: the same late restart after a balance at [8, 8, 7, 7], one rebalance \
              round in at the check: [7, 8, 6, 3, 6]",
    },
    Case {
        seed: 1834,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "L10 checker: the same late restart, one rebalance round in at the check: \
              [7, 3, 8, 6, 6]",
    },
    Case {
        seed: 1782,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "L9 checker: a late restart just after the balance; an ask forwarded to a shard's \
              owner as BeginHandOff reached it waited in the owner's buffer and was refused with \
              HandedOff by the rebalance onto the new region (fixed: asks are judged by the phase \
              they belong to, and one unanswered when a process starts may meet its rebalance)",
    },
    Case {
        seed: 2154,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "L9 checker: the same HandedOff refusal, in the third rebalance round after a late \
              restart",
    },
    Case {
        seed: 285,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "L9 checker: as 1782, a restart after the membership settled met the rebalance it \
              caused; it showed once regions stopped their shards on a freeze, which shifted \
              the sharding messages' timing",
    },
    Case {
        seed: 1411,
        nodes: 3,
        downing: ChaosDowning::Resolver,
        why: "S1: node 0 reached both ends of a broken 1-2 link, was cut off from both just before \
              its stable deadline, downed them as indirectly connected and kept itself; it removed \
              them 0.1 s later, as only they saw each other unreachable, though its downs never \
              reached them, and they, their link healed, kept themselves as two against one (fixed: \
              a Down member is removed once a member that is not Down sees it unreachable, and one \
              removed before it took its Down in counts on the other side for the next decision)",
    },
    Case {
        seed: 5163,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "S1: a cut of {1, 4} from {2, 3} just before nodes 1 and 2 decided on the records of an \
              earlier partial cut: each downed itself and the far side and kept its neighbour \
              alone, and neither side's downs crossed; the far members were removed before they \
              took their Down in and forgotten (fixed as seed 1411: nodes 3 and 4, each alone \
              against two such members, down themselves)",
    },
    Case {
        seed: 116015,
        nodes: 3,
        downing: ChaosDowning::Resolver,
        why: "S18: the new coordinator read its own stale table and the empty answer of a \
              restarted node's replica, a majority, while the node with the newest table was cut \
              off, and started shard 3 where that node still ran it (fixed: a table read with \
              fewer replicas holding one than a majority is acted on only once every region has \
              listed its shards or had the removal margin)",
    },
    Case {
        seed: 2013787,
        nodes: 3,
        downing: ChaosDowning::Resolver,
        why: "S18: as 116015, but every region registered before the rewrite of the stale table \
              was acknowledged; the table was confirmed with shard 16 where it ran, and the \
              rewrite's commit still hosted the stale home beside it (fixed: a recovery that \
              reads an unconfirmed table queues no HostAll; the one its confirmation queues goes \
              with the next write)",
    },
    Case {
        seed: 5033523,
        nodes: 7,
        downing: ChaosDowning::Resolver,
        why: "S18 (the checker): slot 3, clogged from 255.3 s and downed by the others at 262.2 s, \
              froze at 266.9 s, before its own resolver decided, for 11.6 s, less than the \
              removal margin; the coordinator started its shard 20 on slot 5 at 277.9 s, when \
              the margin ended, and slot 3 resumed 0.6 s later and stopped the shard before \
              acting on anything. S18 judged the pair on the whole pause (shorter than the \
              margin) though the frozen host ran nothing beside the other; it now excuses the \
              pause and holds the resumed host to stopping the entity within a retry interval, \
              as S17 does the singleton (seed 4047723)",
    },
    Case {
        seed: 2401992,
        nodes: 3,
        downing: ChaosDowning::Oracle,
        why: "L9: the oracle downed a node cut off just before the heal; it shut down with an ask \
              still waiting for the coordinator, and the simulator dropped that ask with the \
              process, though at run time its stopping region answers it with RegionStopped \
              (fixed in the model: the asks a process waits for end with it, as failures)",
    },
    Case {
        seed: 116643,
        nodes: 3,
        downing: ChaosDowning::Resolver,
        why: "S18 with the fix for 116015 alone: the hosting held back for an unconfirmed table \
              went out after a rebalance had begun and started a shard again at the home it was \
              leaving (fixed: that HostAll skips shards being handed off, and no rebalance runs \
              while the table is unconfirmed)",
    },
    Case {
        seed: 126723,
        nodes: 3,
        downing: ChaosDowning::Resolver,
        why: "S18: a joiner never welcomed acknowledged the writes of the cluster that counted it \
              Up; that cluster was downed, the node joined the one slot 0 formed alone, and its \
              stale table outranked slot 0's newer one, so shard 13 went to it while slot 0 ran \
              it (fixed: a replica answers only while its node is in its own membership view, \
              with the coordinator's node)",
    },
    Case {
        seed: 141579,
        nodes: 5,
        downing: ChaosDowning::Oracle,
        why: "S1 then L1: a joiner whose welcomer had crashed downed the last Up member of its \
              view itself, removed the Down ones and moved itself Up, a cluster of one that the \
              others never heard of (fixed: the joiner rule is checked on the leader tick too)",
    },
    Case {
        seed: 140195,
        nodes: 6,
        downing: ChaosDowning::Oracle,
        why: "S1 then L1: a forgotten joiner was never readmitted, as its gossip named joiners \
              downed beside it that the cluster never heard of (fixed: an unknown Down member \
              does not make the gossip another cluster's)",
    },
    Case {
        seed: 141429,
        nodes: 6,
        downing: ChaosDowning::Oracle,
        why: "S1 then L2: a forgotten joiner's view had downed a member that is Up here, and \
              nothing in it was Down or removed here, so it was never readmitted (fixed: a \
              member Down there and a member here shows the fork too)",
    },
    Case {
        seed: 140882,
        nodes: 4,
        downing: ChaosDowning::Oracle,
        why: "S1 counted a forgotten joiner, cut off by a partition from the one member its view \
              and the cluster's share Up, as a second cluster (fixed in the checker: two views \
              that hold a common member Up are one cluster not yet merged)",
    },
    Case {
        seed: 4220224,
        nodes: 5,
        downing: ChaosDowning::Oracle,
        why: "L2: a view held a restarted node's crashed WeaklyUp incarnation beside its earlier, \
              Down one; the oracle took the first member at the address for the one `down` \
              would mark, found the Down one, and never downed the crashed one, which held \
              convergence back for good (fixed in the model: the oracle asks the core's \
              down_target)",
    },
    Case {
        seed: 2084,
        nodes: 5,
        downing: ChaosDowning::Resolver,
        why: "L9, a healthy cluster downed whole: the earlier incarnations of the four restarted \
              nodes, three of them of one address, were removed before they took their Down in \
              and counted on the other side of the leader's next decision, six against five \
              (fixed: a Down member whose address a live member holds under a new uid is not \
              counted, and of one address's Down incarnations at most one is)",
    },
    Case {
        seed: 9802537,
        nodes: 5,
        downing: ChaosDowning::Oracle,
        why: "S17 for 19.5 s: the next oldest began to leave and was cut off right after; the \
              others moved it to Exiting and removed it as an unreachable Exiting member, with \
              no Down, while it, still Leaving and the oldest in its own view, started the \
              instance; the new oldest started a removal margin later (fixed: a manager hosts \
              for at most its leave allowance, half the margin less the hand-over timeout, after \
              it saw its node Leaving, then shuts down)",
    },
    Case {
        seed: 10404635,
        nodes: 4,
        downing: ChaosDowning::Resolver,
        why: "S17 in the checker: the host, alone in its view, was paused for 60 s and kept its \
              instance on resuming (nobody else could host it); the others joined and it served \
              them for 35 s, then it was paused again, removed, and the next oldest started a \
              margin later while it was still paused. The checker held the instance to the \
              first pause's deadline (fixed in the checker: an instance whose process is paused \
              is judged by that pause, and after a resume from the latest resume)",
    },
    Case {
        seed: 20289,
        nodes: 6,
        downing: ChaosDowning::Resolver,
        why: "L10 in the checker: shard 6, to which two of the load's 300 entity ids hash, lost \
              its home with a crashed region and no ask reached it for the whole sharding \
              bound, so 29 of 30 shards had a home; a shard comes back on its next message \
              (fixed in the checker: a shard needs a home while a region hosts it or an ask \
              wants it)",
    },
    Case {
        seed: 16004871,
        nodes: 6,
        downing: ChaosDowning::Resolver,
        why: "S1 for 39.1 s: every process had been downed and restarted, and the operator's \
              bootstrap formed a cluster of slot 0; then a Welcome held up in the network for \
              25 s reached slot 1, whose join had been retried meanwhile, from slot 5's downed \
              incarnation; slot 1 took it, the restarted nodes at its members' addresses downed \
              them, and slot 1 led a second cluster (fixed: a Welcome is taken only as the \
              answer to the join outstanding)",
    },
    Case {
        seed: 41300618,
        nodes: 8,
        downing: ChaosDowning::Resolver,
        why: "S14: slot 7 was paused while still Joining; the others downed and removed it, and \
              then all of them were restarted. Cut off, slot 7 became leader of its old view, \
              moved itself to WeaklyUp, let two restarted nodes join and ran on past the bound, \
              because only a node already Up waited for word from a member after a pause \
              (fixed: a joiner waits too, and downs itself without word)",
    },
];

/// Runs the case; why it failed, with the command that reproduces it.
fn run(c: &Case) -> Result<(), String> {
    let mut o = ChaosOptions::new(c.seed, c.nodes, Duration::from_secs(600));
    o.downing = c.downing;
    let r = run_seed(&o);
    if r.pass {
        return Ok(());
    }
    Err(format!(
        "seed {} ({}) failed: {:?}\n  reproduce: {}",
        c.seed, c.why, r.violation, r.reproduce
    ))
}

/// Every case, on as many threads as there are cores (each seed is a world of its own), so the
/// table costs the test run its length divided by the cores. Reports every failing case.
#[test]
fn every_regression_seed_passes() {
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let failures: Vec<String> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut failed = Vec::new();
                    while let Some(c) = CASES.get(next.fetch_add(1, Ordering::Relaxed)) {
                        failed.extend(run(c).err());
                    }
                    failed
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("a worker panicked")).collect()
    });
    assert!(
        failures.is_empty(),
        "{} of {} seeds failed:\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n")
    );
}

/// The margin the singleton uses matters: with the resolver's `stable_after` alone, seed 105 runs
/// two instances at once for 0.7 s (S17 fires in a real run, not only on made-up worlds); with the
/// recommended margin it passes (it is in the sweeps). (Seed 149, 1.3 s, showed it until the
/// resolver kept track of downed members that had not taken their Down in, which reshaped its run.)
#[test]
fn a_removal_margin_of_stable_after_alone_lets_two_singleton_instances_overlap() {
    let mut o = ChaosOptions::new(105, 5, Duration::from_secs(600));
    o.singleton_margin = Margin::StableAfter;
    let r = run_seed(&o);
    let v = r.violation.expect("S17 fires");
    assert_eq!(v.invariant, "S17", "{v}");
    assert!(r.reproduce.contains("--singleton-margin stable-after"), "{}", r.reproduce);
}

/// With a lease the same run keeps one instance: the cut-off host still renews its lease until it
/// has downed itself and stopped, so the new oldest, whose margin was too short, cannot take it.
#[test]
fn a_lease_keeps_one_singleton_instance_where_the_margin_of_stable_after_alone_does_not() {
    let mut o = ChaosOptions::new(105, 5, Duration::from_secs(600));
    o.singleton_margin = Margin::StableAfter;
    o.singleton_lease = true;
    let r = run_seed(&o);
    assert!(r.pass, "{:?}\n  reproduce: {}", r.violation, r.reproduce);
    assert!(r.lease.is_some_and(|l| l.refused > 0), "{:?}", r.lease);
}

/// L10 once counted a coordinator that had just become active with an empty table as balanced
/// (every region at zero shards); the allocations and rebalances that followed answered asks with
/// handoff failures that L9 blamed on a balanced cluster. L10 now wants every shard to have a home.
#[test]
fn seed_1290_at_n6_with_the_lease_balances_only_once_every_shard_has_a_home() {
    let o = ChaosOptions {
        singleton_lease: true,
        ..ChaosOptions::new(1290, 6, Duration::from_secs(600))
    };
    let r = run_seed(&o);
    assert!(r.pass, "{:?}\n  reproduce: {}", r.violation, r.reproduce);
}

/// S17 with the lease: a host paused between the store's grant and taking the answer in resumed
/// 44 s later, past the lease's TTL, and started its instance on the stale grant (fixed: the
/// manager counts a grant that comes in later than the operation timeout after its request as a
/// refusal).
#[test]
fn seed_316_at_n5_with_the_lease_starts_no_instance_on_a_stale_grant() {
    let mut o = ChaosOptions::new(316, 5, Duration::from_secs(600));
    o.singleton_margin = Margin::StableAfter;
    o.singleton_lease = true;
    let r = run_seed(&o);
    assert!(r.violation.as_ref().is_none_or(|v| v.invariant != "S17"), "{:?}", r.violation);
}

/// S17 once fired at seed 4047723 (N = 7, bootstrap): the host, cut off at 107.0 s and removed by
/// the majority at 121.5 s, froze at 123.6 s, 0.4 s before its own resolver would have downed it,
/// and stayed frozen for 24.2 s, less than the 25.5 s removal margin; the new oldest started at
/// 147.0 s, when the margin ended, and the host stopped 13 ms after it resumed at 147.8 s. The
/// host could not act while frozen, and a freeze that begins after the removal can outlast what
/// is left of the margin: S17 now excuses an instance whose process is paused when the other
/// starts, for as long as the pause lasts plus its manager's check after the resume.
#[test]
fn seed_4047723_at_n7_with_bootstrap_excuses_a_host_frozen_when_the_margin_ended() {
    let o =
        ChaosOptions { bootstrap: true, ..ChaosOptions::new(4047723, 7, Duration::from_secs(600)) };
    let r = run_seed(&o);
    assert!(r.pass, "{:?}\n  reproduce: {}", r.violation, r.reproduce);
    assert!(r.reproduce.contains("--bootstrap"), "{}", r.reproduce);
}
