//! The pod-deletion-cost annotation (`[rolling_update.kubernetes]`): each of the
//! `annotated_pods_nr` oldest Up members of this data center annotates its own pod with
//! `controller.kubernetes.io/pod-deletion-cost`, the oldest highest, and removes the annotation
//! once it is no longer among them. A ReplicaSet scaling down in a rolling update deletes the
//! pods of lowest cost first, so the oldest members, which host the singletons and the shard
//! coordinators, are replaced last and each singleton moves once. See the README, "Rolling
//! updates".
//!
//! [`deletion_cost`] decides from the membership view; [`spawn`] runs the patches: while this
//! node is Up, only when the decision changes (the first one always), one at a time, retried with a doubling backoff (logged, and counted in
//! `convoke_pod_deletion_cost_patches_total` by outcome) until the API server takes the latest.

use std::time::Duration;

use convoke_membership::{CurrentClusterState, MemberStatus};

use crate::control::Control;
use crate::metrics::Metrics;

/// The longest wait between two tries of a patch.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// This node's pod-deletion cost in `state`: `annotated` for the oldest Up member of its data
/// center, one less for each younger one, `None` (no annotation, cost 0) below the
/// `annotated` oldest or when this node is not Up.
pub(crate) fn deletion_cost(state: &CurrentClusterState, annotated: u32) -> Option<i32> {
    let me = state.self_member()?;
    if me.status() != MemberStatus::Up {
        return None;
    }
    let older = state
        .members
        .iter()
        .filter(|m| m.status() == MemberStatus::Up && m.data_center() == me.data_center())
        .filter(|m| m.is_older_than(me))
        .count();
    let rank = u32::try_from(older).ok().filter(|r| *r < annotated)?;
    i32::try_from(annotated - rank).ok()
}

/// What the annotation task needs of the node.
#[cfg(feature = "kubernetes")]
pub(crate) fn spawn(
    settings: &crate::settings::Settings,
    control: &Control,
    metrics: &Metrics,
) -> Result<(), crate::settings::SettingsError> {
    use convoke_discovery::kubernetes::PodDeletionCost;

    let s = &settings.rolling_update.kubernetes;
    if !s.enabled {
        return Ok(());
    }
    let pod_name = s.resolve_pod_name()?;
    let namespace = (!s.namespace.is_empty()).then_some(s.namespace.as_str());
    let pod = PodDeletionCost::new(&settings.discovery.kubernetes_api.api, namespace, &pod_name)
        .map_err(|e| {
            crate::settings::SettingsError::new(
                "rolling_update.kubernetes.enabled",
                "true",
                format!("an API server it can reach: {e}"),
            )
        })?;
    tracing::info!(
        pod = pod.pod_name(),
        namespace = pod.namespace(),
        annotated_pods_nr = s.annotated_pods_nr,
        "annotating this pod's deletion cost while it is among the oldest members"
    );
    tokio::spawn(run(pod, control.clone(), metrics.clone(), s.annotated_pods_nr, s.retry_backoff));
    Ok(())
}

/// Without the `kubernetes` feature there is nothing to annotate with; the settings refuse
/// `enabled = true` before this is reached.
#[cfg(not(feature = "kubernetes"))]
pub(crate) fn spawn(
    _settings: &crate::settings::Settings,
    _control: &Control,
    _metrics: &Metrics,
) -> Result<(), crate::settings::SettingsError> {
    Ok(())
}

#[cfg(feature = "kubernetes")]
async fn run(
    pod: convoke_discovery::kubernetes::PodDeletionCost,
    control: Control,
    metrics: Metrics,
    annotated: u32,
    first_backoff: Duration,
) {
    let mut snapshots = control.watch();
    // Unknown at first: a pod whose container restarted may still carry an annotation, so the
    // first decision is always written.
    let mut written: Option<Option<i32>> = None;
    let mut backoff = first_backoff;
    loop {
        let wanted = {
            let snapshot = snapshots.borrow_and_update();
            // Decided only while this node is Up: before, it is not among the oldest anyway;
            // after (leaving, downed), its pod is on its way out and the others re-rank.
            let up = snapshot.state.self_member().is_some_and(|m| m.status() == MemberStatus::Up);
            up.then(|| deletion_cost(&snapshot.state, annotated))
        };
        if let Some(cost) = wanted.filter(|c| written != Some(*c)) {
            match pod.set(cost).await {
                Ok(()) => {
                    metrics.record_deletion_cost_patch("ok");
                    tracing::info!(pod = pod.pod_name(), ?cost, "pod deletion cost written");
                    written = Some(cost);
                    backoff = first_backoff;
                }
                Err(e) => {
                    let outcome =
                        e.status.map_or_else(|| "unreachable".to_owned(), |s| s.to_string());
                    metrics.record_deletion_cost_patch(&outcome);
                    let hint = match e.status {
                        Some(403) => " (does the pod's Role grant `patch` on pods?)",
                        Some(404) => " (is rolling_update.kubernetes.pod_name this pod's name?)",
                        _ => "",
                    };
                    tracing::warn!(
                        pod = pod.pod_name(),
                        ?cost,
                        status = outcome,
                        error = %e,
                        retry_in = ?backoff,
                        "cannot write the pod deletion cost{hint}"
                    );
                    tokio::select! {
                        () = tokio::time::sleep(backoff) => {}
                        _ = control.terminated() => return,
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            }
        }
        tokio::select! {
            changed = snapshots.changed() => if changed.is_err() { return },
            _ = control.terminated() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use convoke_membership::member::UpNumber;
    use convoke_membership::version::AppVersion;
    use convoke_membership::{Address, Member, Uid, UniqueAddress};

    use super::*;

    fn member(i: u16, up: u32, status: MemberStatus, dc: &str) -> Member {
        let address = Address::new("convoke", "10.0.0.1", 25520 + i).unwrap();
        let node = UniqueAddress::new(address, Uid::new(u64::from(i) + 1).unwrap());
        let roles: BTreeSet<String> = [format!("dc-{dc}")].into();
        Member::from_parts(node, UpNumber(up), status, roles, AppVersion::default())
    }

    fn state(members: Vec<Member>, me: usize) -> CurrentClusterState {
        CurrentClusterState {
            self_node: Some(members[me].node().clone()),
            members,
            ..CurrentClusterState::default()
        }
    }

    #[test]
    fn the_oldest_up_members_of_the_data_center_get_costs_from_the_highest_down() {
        use MemberStatus::{Joining, Leaving, Up};
        let members = vec![
            member(0, 5, Up, "a"),
            member(1, 1, Leaving, "a"),
            member(2, 2, Up, "a"),
            member(3, 1, Up, "b"),
            member(4, 3, Up, "a"),
            member(5, 4, Up, "a"),
            member(6, 0, Joining, "a"),
        ];
        let costs: Vec<Option<i32>> =
            (0..members.len()).map(|i| deletion_cost(&state(members.clone(), i), 3)).collect();
        // Up members of "a" by age: 2, 4, 5, 0; the leaving oldest no longer counts; the
        // oldest of "b" is ranked in its own data center.
        assert_eq!(costs, [None, None, Some(3), Some(3), Some(2), Some(1), None]);
        assert_eq!(deletion_cost(&state(members.clone(), 0), 4), Some(1));
        assert_eq!(deletion_cost(&CurrentClusterState::default(), 3), None, "not a member");
    }
}
