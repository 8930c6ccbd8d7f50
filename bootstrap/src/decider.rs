//! The lowest-address join decider: a pure function of (now, observations, settings, this node's
//! contact point), deciding in this order:
//!
//! 1. A contact point reports an existing cluster: join its seed nodes.
//! 2. Fewer contact points answered than required: keep probing.
//! 3. The discovered set changed within the stable margin: keep probing.
//! 4. Some discovered contact point has not answered (when all must): keep probing.
//! 5. This node is the lowest answering contact point and may form a cluster: join self.
//! 6. Otherwise keep probing, expecting the lowest to form it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use crate::contact_point::{ContactPoint, SelfContactPoint};
use crate::settings::BootstrapSettings;

/// How many seed nodes are joined at most, as Akka does.
pub const MAX_SEED_NODES: usize = 5;

/// What one probe of a contact point learned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    /// When the answer arrived.
    pub observed_at: Instant,
    /// The node that answered (its cluster address).
    pub self_node: String,
    /// The seed nodes it advertised; empty when it is not in a cluster.
    pub seed_nodes: BTreeSet<String>,
}

/// The decider's input.
#[derive(Clone, Debug)]
pub struct SeedNodesInformation<'a> {
    /// The current time.
    pub now: Instant,
    /// When the discovered set last changed.
    pub contact_points_changed_at: Instant,
    /// The discovered (and selected) contact points.
    pub contact_points: &'a BTreeSet<ContactPoint>,
    /// The recent observations (no older than the probing failure timeout) per contact point.
    pub observations: &'a BTreeMap<ContactPoint, Observation>,
}

/// What to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Keep looking up and probing.
    KeepProbing,
    /// Join these seed nodes (cluster addresses) of an existing cluster.
    JoinOthers(Vec<String>),
    /// Form a new cluster by joining this node itself.
    JoinSelf,
}

impl Decision {
    /// A short name: `KeepProbing`, `JoinOthers` or `JoinSelf`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::KeepProbing => "KeepProbing",
            Self::JoinOthers(_) => "JoinOthers",
            Self::JoinSelf => "JoinSelf",
        }
    }
}

/// A decision with the reason for it, in words an operator can act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// What to do.
    pub decision: Decision,
    /// Why.
    pub reason: String,
    /// Whether this node's contact point is among the discovered ones.
    pub self_in_contact_points: bool,
    /// The contact point expected to form the cluster (rule 6): its prober asks more often, so
    /// that this node joins soon after it formed.
    pub expecting: Option<ContactPoint>,
}

/// Decides, in the order of the module documentation. Of the settings it reads
/// `required_contact_point_nr`, `stable_margin`, `contact_with_all_contact_points` and
/// `new_cluster_enabled`; `me` is this node's own contact point.
pub fn decide(
    info: &SeedNodesInformation<'_>,
    settings: &BootstrapSettings,
    me: &SelfContactPoint,
) -> Verdict {
    let self_in_contact_points = info.contact_points.iter().any(|t| me.matches(t));
    let verdict = |decision, reason: String| Verdict {
        decision,
        reason,
        self_in_contact_points,
        expecting: None,
    };
    let not_found = || {
        if self_in_contact_points {
            String::new()
        } else {
            format!(
                "; WARNING: self contact point {me} not found among the discovered targets [{}] \
                 (management.hostname/port must match what discovery returns)",
                list(info.contact_points.iter())
            )
        }
    };

    // 1. An existing cluster wins over everything else.
    let existing: BTreeSet<&String> =
        info.observations.values().flat_map(|o| &o.seed_nodes).collect();
    if !existing.is_empty() {
        let seeds: Vec<String> = existing.into_iter().take(MAX_SEED_NODES).cloned().collect();
        let reporters = info.observations.iter().filter(|(_, o)| !o.seed_nodes.is_empty());
        return verdict(
            Decision::JoinOthers(seeds.clone()),
            format!(
                "contact points [{}] report an existing cluster; joining its seed nodes [{}]",
                list(reporters.map(|(t, _)| t)),
                seeds.join(", ")
            ),
        );
    }

    // 2. Enough answering contact points.
    let confirmed = info.observations.len();
    if confirmed < settings.required_contact_point_nr {
        return verdict(
            Decision::KeepProbing,
            format!(
                "discovered {} contact points, confirmed {confirmed}, which is less than the required {}{}",
                info.contact_points.len(),
                settings.required_contact_point_nr,
                not_found()
            ),
        );
    }

    // 3. A stable discovered set.
    let stable_for = info.now.saturating_duration_since(info.contact_points_changed_at);
    if stable_for < settings.stable_margin {
        return verdict(
            Decision::KeepProbing,
            format!(
                "the discovered contact points have been stable for {} ms, less than the stable margin of {} ms{}",
                stable_for.as_millis(),
                settings.stable_margin.as_millis(),
                not_found()
            ),
        );
    }

    // 4. Every contact point answered, when required.
    if settings.contact_with_all_contact_points {
        let missing: Vec<&ContactPoint> =
            info.contact_points.iter().filter(|t| !info.observations.contains_key(*t)).collect();
        if !missing.is_empty() {
            return verdict(
                Decision::KeepProbing,
                format!(
                    "past the stable margin but missing seed-node information from contact points [{}]{}",
                    list(missing.into_iter()),
                    not_found()
                ),
            );
        }
    }

    // 5–6. The lowest answering contact point forms the cluster.
    let Some(lowest) = info.observations.keys().min() else {
        return verdict(Decision::KeepProbing, "no contact point has answered".into());
    };
    if !me.matches(lowest) {
        return Verdict {
            expecting: Some(lowest.clone()),
            ..verdict(
                Decision::KeepProbing,
                format!(
                    "this node ({me}) is not the lowest-address contact point; expecting {lowest} to form the cluster{}",
                    not_found()
                ),
            )
        };
    }
    if !settings.new_cluster_enabled {
        return verdict(
            Decision::KeepProbing,
            format!(
                "this node ({me}) is the lowest-address contact point, but bootstrap.new_cluster_enabled = false; \
                 waiting for an existing cluster to appear"
            ),
        );
    }
    verdict(
        Decision::JoinSelf,
        format!(
            "this node ({me}) is the lowest-address contact point of {confirmed} answering, stable for {} ms; \
             forming a new cluster",
            stable_for.as_millis()
        ),
    )
}

fn list<'a>(targets: impl Iterator<Item = &'a ContactPoint>) -> String {
    targets.map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MARGIN: Duration = Duration::from_secs(5);

    #[allow(clippy::disallowed_methods, reason = "the base instant; only offsets from it matter")]
    fn t0() -> Instant {
        Instant::now()
    }

    fn cp(host: &str) -> ContactPoint {
        ContactPoint::new(host, Some(8558), Some(host.parse().unwrap()))
    }

    /// The settings of the node whose management host is `me`, requiring 3 contact points.
    struct Settings {
        bootstrap: BootstrapSettings,
        self_contact_point: SelfContactPoint,
    }

    fn settings(me: &str) -> Settings {
        let bootstrap = BootstrapSettings {
            required_contact_point_nr: 3,
            stable_margin: MARGIN,
            contact_with_all_contact_points: true,
            new_cluster_enabled: true,
            ..BootstrapSettings::default()
        };
        Settings { bootstrap, self_contact_point: SelfContactPoint::new(me, 8558) }
    }

    struct Case {
        start: Instant,
        contact_points: BTreeSet<ContactPoint>,
        observations: BTreeMap<ContactPoint, Observation>,
    }

    impl Case {
        fn new(hosts: &[&str]) -> Self {
            Self {
                start: t0(),
                contact_points: hosts.iter().map(|h| cp(h)).collect(),
                observations: BTreeMap::new(),
            }
        }

        fn answered(mut self, host: &str, seeds: &[&str]) -> Self {
            self.observations.insert(
                cp(host),
                Observation {
                    observed_at: self.start,
                    self_node: format!("convoke://convoke@{host}:25520"),
                    seed_nodes: seeds.iter().map(|s| (*s).to_owned()).collect(),
                },
            );
            self
        }

        fn decide_after(&self, stable_for: Duration, settings: &Settings) -> Verdict {
            decide(
                &SeedNodesInformation {
                    now: self.start + stable_for,
                    contact_points_changed_at: self.start,
                    contact_points: &self.contact_points,
                    observations: &self.observations,
                },
                &settings.bootstrap,
                &settings.self_contact_point,
            )
        }
    }

    const HOSTS: [&str; 3] = ["10.0.0.1", "10.0.0.2", "10.0.0.3"];

    #[test]
    fn joins_an_existing_cluster_immediately() {
        let case = Case::new(&HOSTS).answered("10.0.0.2", &["convoke://convoke@10.0.0.9:25520"]);
        // Within the stable margin, with too few answers, and with new clusters disabled.
        let mut s = settings("10.0.0.1");
        s.bootstrap.new_cluster_enabled = false;
        let v = case.decide_after(Duration::ZERO, &s);
        assert_eq!(
            v.decision,
            Decision::JoinOthers(vec!["convoke://convoke@10.0.0.9:25520".into()])
        );
        assert!(v.reason.contains("existing cluster"), "{}", v.reason);
    }

    #[test]
    fn at_most_five_seed_nodes_are_joined() {
        let seeds: Vec<String> =
            (1..=8).map(|i| format!("convoke://convoke@10.0.1.{i}:25520")).collect();
        let refs: Vec<&str> = seeds.iter().map(String::as_str).collect();
        let case = Case::new(&HOSTS).answered("10.0.0.2", &refs);
        let Decision::JoinOthers(joined) =
            case.decide_after(MARGIN, &settings("10.0.0.1")).decision
        else {
            panic!("expected JoinOthers");
        };
        assert_eq!(joined.len(), MAX_SEED_NODES);
    }

    #[test]
    fn waits_when_there_are_not_enough_contact_points() {
        let case = Case::new(&HOSTS).answered("10.0.0.1", &[]).answered("10.0.0.2", &[]);
        let v = case.decide_after(MARGIN * 2, &settings("10.0.0.1"));
        assert_eq!(v.decision, Decision::KeepProbing);
        assert!(
            v.reason.contains("confirmed 2, which is less than the required 3"),
            "{}",
            v.reason
        );
    }

    #[test]
    fn waits_while_within_the_stable_margin() {
        let case = Case::new(&HOSTS)
            .answered("10.0.0.1", &[])
            .answered("10.0.0.2", &[])
            .answered("10.0.0.3", &[]);
        let s = settings("10.0.0.1");
        let v = case.decide_after(MARGIN - Duration::from_millis(1), &s);
        assert_eq!(v.decision, Decision::KeepProbing);
        assert!(v.reason.contains("stable margin"), "{}", v.reason);
        // Six seconds stable is past a five-second margin.
        assert_eq!(case.decide_after(Duration::from_secs(6), &s).decision, Decision::JoinSelf);
    }

    #[test]
    fn waits_while_answers_are_missing() {
        let mut s = settings("10.0.0.1");
        s.bootstrap.required_contact_point_nr = 2;
        let case = Case::new(&HOSTS).answered("10.0.0.1", &[]).answered("10.0.0.2", &[]);
        let v = case.decide_after(MARGIN, &s);
        assert_eq!(v.decision, Decision::KeepProbing);
        assert!(
            v.reason.contains("missing seed-node information from contact points [10.0.0.3:8558]"),
            "{}",
            v.reason
        );
        // Without the all-contact-points requirement the two answers suffice.
        s.bootstrap.contact_with_all_contact_points = false;
        assert_eq!(case.decide_after(MARGIN, &s).decision, Decision::JoinSelf);
    }

    #[test]
    fn the_lowest_address_self_joins() {
        let case = Case::new(&HOSTS)
            .answered("10.0.0.3", &[])
            .answered("10.0.0.2", &[])
            .answered("10.0.0.1", &[]);
        let v = case.decide_after(MARGIN, &settings("10.0.0.1"));
        assert_eq!(v.decision, Decision::JoinSelf);
        assert!(v.self_in_contact_points);
    }

    #[test]
    fn a_node_that_is_not_the_lowest_waits() {
        let case = Case::new(&HOSTS)
            .answered("10.0.0.3", &[])
            .answered("10.0.0.2", &[])
            .answered("10.0.0.1", &[]);
        let v = case.decide_after(MARGIN, &settings("10.0.0.2"));
        assert_eq!(v.decision, Decision::KeepProbing);
        assert!(v.reason.contains("expecting 10.0.0.1:8558 to form the cluster"), "{}", v.reason);
        assert!(!v.reason.contains("WARNING"), "{}", v.reason);
        assert_eq!(v.expecting.map(|t| t.host), Some("10.0.0.1".to_owned()));
        let lowest = case.decide_after(MARGIN, &settings("10.0.0.1"));
        assert_eq!(lowest.expecting, None, "the node forming the cluster expects no one");
    }

    #[test]
    fn a_node_missing_from_the_targets_waits_and_says_so() {
        let case = Case::new(&HOSTS)
            .answered("10.0.0.3", &[])
            .answered("10.0.0.2", &[])
            .answered("10.0.0.1", &[]);
        let v = case.decide_after(MARGIN, &settings("10.0.0.7"));
        assert_eq!(v.decision, Decision::KeepProbing);
        assert!(!v.self_in_contact_points);
        assert!(v.reason.contains("self contact point 10.0.0.7:8558 not found"), "{}", v.reason);
    }

    #[test]
    fn no_self_join_when_new_clusters_are_disabled() {
        let case = Case::new(&HOSTS)
            .answered("10.0.0.3", &[])
            .answered("10.0.0.2", &[])
            .answered("10.0.0.1", &[]);
        let mut s = settings("10.0.0.1");
        s.bootstrap.new_cluster_enabled = false;
        let v = case.decide_after(MARGIN * 10, &s);
        assert_eq!(v.decision, Decision::KeepProbing);
        assert!(v.reason.contains("new_cluster_enabled = false"), "{}", v.reason);
    }

    #[test]
    fn ipv6_self_match_lets_the_lowest_ipv6_node_self_join() {
        let hosts = ["240b:c0e0:202:5e2b:b424:2:0:450", "240b:c0e0:202:5e2b:b424:2:0:451"];
        let case = Case::new(&hosts).answered(hosts[0], &[]).answered(hosts[1], &[]);
        let mut s = settings("[240b:c0e0:202:5e2b:b424:2:0:450]");
        s.bootstrap.required_contact_point_nr = 2;
        let v = case.decide_after(MARGIN, &s);
        assert_eq!(v.decision, Decision::JoinSelf, "{}", v.reason);
        assert!(v.self_in_contact_points);
        s.self_contact_point = SelfContactPoint::new("[240b:c0e0:202:5e2b:b424:2:0:451]", 8558);
        assert_eq!(case.decide_after(MARGIN, &s).decision, Decision::KeepProbing);
    }
}
