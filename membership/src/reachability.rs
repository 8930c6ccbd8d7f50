//! The reachability table: which observer sees which subject as unreachable.

use std::collections::{BTreeMap, BTreeSet};

use crate::address::UniqueAddress;

/// What one observer thinks of one subject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReachabilityStatus {
    /// Heartbeats arrive.
    Reachable,
    /// The failure detector gave up on it.
    Unreachable,
    /// Known dead (a new incarnation joined); sticky until the subject is removed.
    Terminated,
}

/// One observer's verdict on one subject, stamped with the observer's version at the change.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Record {
    /// Who observed.
    pub observer: UniqueAddress,
    /// Who is observed.
    pub subject: UniqueAddress,
    /// The verdict.
    pub status: ReachabilityStatus,
    /// The observer's version when it last changed this row.
    pub version: u64,
}

/// Reachability as seen by every observer. Only an observer changes its own rows; an observer that
/// sees everybody reachable keeps no rows at all, so an empty table means "all reachable".
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Reachability {
    /// observer → (subject → (status, version)).
    rows: BTreeMap<UniqueAddress, BTreeMap<UniqueAddress, (ReachabilityStatus, u64)>>,
    versions: BTreeMap<UniqueAddress, u64>,
}

impl Reachability {
    /// The empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a table from records and versions (for decoding); versions must cover every observer.
    pub fn from_parts(
        records: impl IntoIterator<Item = Record>,
        versions: impl IntoIterator<Item = (UniqueAddress, u64)>,
    ) -> Self {
        let mut r = Self { rows: BTreeMap::new(), versions: versions.into_iter().collect() };
        for rec in records {
            r.rows.entry(rec.observer).or_default().insert(rec.subject, (rec.status, rec.version));
        }
        for obs in r.rows.keys() {
            r.versions.entry(obs.clone()).or_insert(0);
        }
        r
    }

    /// Every record, ordered by observer then subject.
    pub fn records(&self) -> impl Iterator<Item = Record> + '_ {
        self.rows.iter().flat_map(|(o, row)| {
            row.iter().map(move |(s, (status, version))| Record {
                observer: o.clone(),
                subject: s.clone(),
                status: *status,
                version: *version,
            })
        })
    }

    /// The per-observer versions.
    pub fn versions(&self) -> &BTreeMap<UniqueAddress, u64> {
        &self.versions
    }

    /// Whether there are no records (everybody reachable).
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// `observer` now sees `subject` as unreachable.
    pub fn unreachable(&mut self, observer: &UniqueAddress, subject: &UniqueAddress) {
        self.change(observer, subject, ReachabilityStatus::Unreachable);
    }

    /// `observer` now sees `subject` as reachable again.
    pub fn reachable(&mut self, observer: &UniqueAddress, subject: &UniqueAddress) {
        self.change(observer, subject, ReachabilityStatus::Reachable);
    }

    /// `observer` knows `subject` is dead.
    pub fn terminated(&mut self, observer: &UniqueAddress, subject: &UniqueAddress) {
        self.change(observer, subject, ReachabilityStatus::Terminated);
    }

    fn bump(&mut self, observer: &UniqueAddress) -> u64 {
        let v = self.versions.entry(observer.clone()).or_insert(0);
        *v += 1;
        *v
    }

    fn change(
        &mut self,
        observer: &UniqueAddress,
        subject: &UniqueAddress,
        status: ReachabilityStatus,
    ) {
        use ReachabilityStatus::*;
        let Some(row) = self.rows.get(observer) else {
            if status == Reachable {
                return;
            }
            let v = self.bump(observer);
            self.rows.entry(observer.clone()).or_default().insert(subject.clone(), (status, v));
            return;
        };
        let all_others_reachable =
            row.iter().filter(|(s, _)| *s != subject).all(|(_, (st, _))| *st == Reachable);
        match row.get(subject) {
            Some((old, _)) if *old == Terminated || *old == status => {}
            None if status == Reachable && all_others_reachable => {
                self.bump(observer);
                self.rows.remove(observer);
            }
            Some(_) if status == Reachable && all_others_reachable => {
                self.bump(observer);
                self.rows.remove(observer);
            }
            _ => {
                let v = self.bump(observer);
                if let Some(row) = self.rows.get_mut(observer) {
                    row.insert(subject.clone(), (status, v));
                }
            }
        }
    }

    /// Merges `other` into `self`, keeping only rows of observers in `allowed` about subjects in
    /// `allowed`: for each observer the rows of the side with the higher version win (`other` on a
    /// tie; one-sided rows only when that side's version is strictly higher).
    pub fn merge(&self, allowed: &BTreeSet<UniqueAddress>, other: &Reachability) -> Reachability {
        let mut out = Reachability::new();
        // Only observers with a version or rows on either side can leave anything: the few
        // that ever flagged someone, not every allowed member.
        let observers: BTreeSet<&UniqueAddress> = (self.versions.keys())
            .chain(self.rows.keys())
            .chain(other.versions.keys())
            .chain(other.rows.keys())
            .filter(|o| allowed.contains(*o))
            .collect();
        for observer in observers {
            let v1 = self.versions.get(observer).copied();
            let v2 = other.versions.get(observer).copied();
            let r1 = self.rows.get(observer);
            let r2 = other.rows.get(observer);
            let chosen = match (r1, r2) {
                (Some(_), Some(_)) => {
                    if v1.unwrap_or(0) > v2.unwrap_or(0) {
                        r1
                    } else {
                        r2
                    }
                }
                (Some(_), None) if v1.unwrap_or(0) > v2.unwrap_or(0) => r1,
                (None, Some(_)) if v2.unwrap_or(0) > v1.unwrap_or(0) => r2,
                _ => None,
            };
            if let Some(row) = chosen {
                let kept: BTreeMap<_, _> = row
                    .iter()
                    .filter(|(s, _)| allowed.contains(*s))
                    .map(|(s, r)| (s.clone(), *r))
                    .collect();
                if !kept.is_empty() {
                    out.rows.insert(observer.clone(), kept);
                }
            }
            if let Some(v) = v1.max(v2) {
                out.versions.insert(observer.clone(), v);
            }
        }
        out
    }

    /// Forgets `nodes` as observers and subjects, with their versions.
    pub fn remove<'a>(&mut self, nodes: impl IntoIterator<Item = &'a UniqueAddress>) {
        for n in nodes {
            self.rows.remove(n);
            self.versions.remove(n);
            for row in self.rows.values_mut() {
                row.remove(n);
            }
        }
        self.rows.retain(|_, row| !row.is_empty());
    }

    /// Forgets the rows and versions of `observers`.
    pub fn remove_observers<'a>(&mut self, observers: impl IntoIterator<Item = &'a UniqueAddress>) {
        for n in observers {
            self.rows.remove(n);
            self.versions.remove(n);
        }
    }

    /// A copy keeping only the rows whose observer satisfies `keep`.
    pub fn filter_observers(&self, keep: impl Fn(&UniqueAddress) -> bool) -> Reachability {
        Reachability {
            rows: self
                .rows
                .iter()
                .filter(|(o, _)| keep(o))
                .map(|(o, r)| (o.clone(), r.clone()))
                .collect(),
            versions: self
                .versions
                .iter()
                .filter(|(o, _)| keep(o))
                .map(|(o, v)| (o.clone(), *v))
                .collect(),
        }
    }

    /// A copy keeping only records whose observer and subject both satisfy `keep`.
    pub fn filter_records(&self, keep: impl Fn(&UniqueAddress) -> bool) -> Reachability {
        let mut out = self.filter_observers(&keep);
        for row in out.rows.values_mut() {
            row.retain(|s, _| keep(s));
        }
        out.rows.retain(|_, row| !row.is_empty());
        out
    }

    /// What `observer` thinks of `subject` (Reachable when it has no row).
    pub fn status_by(
        &self,
        observer: &UniqueAddress,
        subject: &UniqueAddress,
    ) -> ReachabilityStatus {
        self.rows
            .get(observer)
            .and_then(|row| row.get(subject))
            .map_or(ReachabilityStatus::Reachable, |(s, _)| *s)
    }

    /// The aggregate verdict on `subject`: Terminated if anyone says so, else Unreachable if anyone
    /// says so, else Reachable.
    pub fn status(&self, subject: &UniqueAddress) -> ReachabilityStatus {
        self.rows
            .values()
            .filter_map(|row| row.get(subject).map(|(s, _)| *s))
            .max()
            .unwrap_or(ReachabilityStatus::Reachable)
    }

    /// Whether nobody sees `subject` as unreachable or terminated.
    pub fn is_reachable(&self, subject: &UniqueAddress) -> bool {
        self.status(subject) == ReachabilityStatus::Reachable
    }

    /// Whether `observer` sees `subject` as reachable.
    pub fn is_reachable_by(&self, observer: &UniqueAddress, subject: &UniqueAddress) -> bool {
        self.status_by(observer, subject) == ReachabilityStatus::Reachable
    }

    /// Subjects somebody sees as unreachable or terminated.
    pub fn all_unreachable_or_terminated(&self) -> BTreeSet<UniqueAddress> {
        not_reachable_subjects(self.rows.values()).into_iter().cloned().collect()
    }

    /// Subjects somebody sees as unreachable, excluding those anybody sees as terminated.
    pub fn all_unreachable(&self) -> BTreeSet<UniqueAddress> {
        // One pass, the worst verdict per subject (as `status` gives it), not a `status` scan of
        // every row for each subject.
        let mut worst: BTreeMap<&UniqueAddress, ReachabilityStatus> = BTreeMap::new();
        for (subject, (status, _)) in self.rows.values().flat_map(|row| row.iter()) {
            if *status != ReachabilityStatus::Reachable {
                let w = worst.entry(subject).or_insert(*status);
                *w = (*w).max(*status);
            }
        }
        (worst.into_iter())
            .filter(|(_, status)| *status == ReachabilityStatus::Unreachable)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// A table of the records that are not Reachable and whose observer satisfies `observer` and
    /// subject `subject`, each with its version, and `observer_version` for every observer that
    /// keeps one: what `from_parts` builds from those records, without making a record of every
    /// row.
    pub fn unreachable_records_where(
        &self,
        observer: impl Fn(&UniqueAddress) -> bool,
        subject: impl Fn(&UniqueAddress) -> bool,
        observer_version: u64,
    ) -> Reachability {
        let mut out = Reachability::new();
        for (o, row) in self.rows.iter().filter(|(o, _)| observer(o)) {
            let kept: BTreeMap<UniqueAddress, (ReachabilityStatus, u64)> = (row.iter())
                .filter(|(s, (status, _))| *status != ReachabilityStatus::Reachable && subject(s))
                .map(|(s, v)| (s.clone(), *v))
                .collect();
            if !kept.is_empty() {
                out.versions.insert(o.clone(), observer_version);
                out.rows.insert(o.clone(), kept);
            }
        }
        out
    }

    /// The subjects satisfying `subject` that some observer satisfying `observer` sees as
    /// unreachable or terminated: the same as `filter_records` or `filter_observers` followed by
    /// [`Self::all_unreachable_or_terminated`], without copying the table.
    pub fn not_reachable_by(
        &self,
        observer: impl Fn(&UniqueAddress) -> bool,
        subject: impl Fn(&UniqueAddress) -> bool,
    ) -> BTreeSet<&UniqueAddress> {
        let rows = self.rows.iter().filter(|(o, _)| observer(o)).map(|(_, row)| row);
        let mut subjects = not_reachable_subjects(rows);
        subjects.retain(|s| subject(s));
        subjects
    }

    /// Subjects that `observer` sees as unreachable or terminated.
    pub fn all_unreachable_from(&self, observer: &UniqueAddress) -> BTreeSet<UniqueAddress> {
        self.rows.get(observer).map_or_else(BTreeSet::new, |row| {
            row.iter()
                .filter(|(_, (s, _))| *s != ReachabilityStatus::Reachable)
                .map(|(n, _)| n.clone())
                .collect()
        })
    }

    /// For each unreachable subject, the observers that flag it.
    pub fn observers_grouped_by_unreachable(
        &self,
    ) -> BTreeMap<UniqueAddress, BTreeSet<UniqueAddress>> {
        let mut out: BTreeMap<UniqueAddress, BTreeSet<UniqueAddress>> = BTreeMap::new();
        for (o, row) in &self.rows {
            for (s, (st, _)) in row {
                if *st != ReachabilityStatus::Reachable {
                    out.entry(s.clone()).or_default().insert(o.clone());
                }
            }
        }
        out
    }

    /// Every node that appears as an observer or subject, or has a version.
    pub fn nodes(&self) -> BTreeSet<UniqueAddress> {
        let mut out: BTreeSet<UniqueAddress> = self.versions.keys().cloned().collect();
        for (o, row) in &self.rows {
            out.insert(o.clone());
            out.extend(row.keys().cloned());
        }
        out
    }
}

/// The distinct subjects of the records in `rows` that are not Reachable. Each is inserted once as
/// it is found: the many observers that flag one subject cost a look-up each, where collecting
/// every record and sorting them all cost most of a busy cluster's gossip handling.
fn not_reachable_subjects<'a>(
    rows: impl Iterator<Item = &'a BTreeMap<UniqueAddress, (ReachabilityStatus, u64)>>,
) -> BTreeSet<&'a UniqueAddress> {
    let mut subjects = BTreeSet::new();
    for row in rows {
        for (subject, (status, _)) in row {
            if *status != ReachabilityStatus::Reachable {
                subjects.insert(subject);
            }
        }
    }
    subjects
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member::tests::node;
    use ReachabilityStatus::*;
    use proptest::prelude::*;

    fn n(i: u64) -> UniqueAddress {
        node(&format!("h{i}:1"), i)
    }

    #[test]
    fn an_empty_table_is_all_reachable() {
        let r = Reachability::new();
        assert!(r.is_reachable(&n(1)));
        assert!(r.is_empty());
        assert!(r.all_unreachable_or_terminated().is_empty());
    }

    #[test]
    fn marking_reachable_with_no_rows_changes_nothing() {
        let mut r = Reachability::new();
        r.reachable(&n(1), &n(2));
        assert_eq!(r, Reachability::new());
    }

    #[test]
    fn an_unreachable_record_is_seen_in_every_view() {
        let mut r = Reachability::new();
        r.unreachable(&n(1), &n(2));
        assert!(!r.is_reachable(&n(2)));
        assert!(!r.is_reachable_by(&n(1), &n(2)));
        assert!(r.is_reachable_by(&n(3), &n(2)));
        assert_eq!(r.status(&n(2)), Unreachable);
        assert_eq!(r.all_unreachable(), BTreeSet::from([n(2)]));
        assert_eq!(r.versions()[&n(1)], 1);
    }

    #[test]
    fn becoming_reachable_again_drops_the_observers_rows_and_bumps_its_version() {
        let mut r = Reachability::new();
        r.unreachable(&n(1), &n(2));
        r.reachable(&n(1), &n(2));
        assert!(r.is_empty());
        assert_eq!(r.versions()[&n(1)], 2);
    }

    #[test]
    fn reachable_again_keeps_rows_while_the_observer_flags_others() {
        let mut r = Reachability::new();
        r.unreachable(&n(1), &n(2));
        r.unreachable(&n(1), &n(3));
        r.reachable(&n(1), &n(2));
        assert!(r.is_reachable(&n(2)));
        assert!(!r.is_reachable(&n(3)));
        assert_eq!(r.status_by(&n(1), &n(2)), Reachable);
        r.reachable(&n(1), &n(3));
        assert!(r.is_empty());
    }

    #[test]
    fn terminated_is_sticky_and_beats_unreachable() {
        let mut r = Reachability::new();
        r.unreachable(&n(1), &n(3));
        r.terminated(&n(2), &n(3));
        assert_eq!(r.status(&n(3)), Terminated);
        r.reachable(&n(2), &n(3));
        r.unreachable(&n(2), &n(3));
        assert_eq!(r.status_by(&n(2), &n(3)), Terminated);
        assert!(r.all_unreachable().is_empty());
        assert_eq!(r.all_unreachable_or_terminated(), BTreeSet::from([n(3)]));
    }

    #[test]
    fn merge_takes_each_observers_newest_rows() {
        let allowed: BTreeSet<_> = (1..=4).map(n).collect();
        let mut a = Reachability::new();
        a.unreachable(&n(1), &n(2));
        let mut b = a.clone();
        b.reachable(&n(1), &n(2)); // version 2, no rows
        b.unreachable(&n(3), &n(4));
        let m = a.merge(&allowed, &b);
        assert!(m.is_reachable(&n(2)), "b's newer empty row set wins over a's record");
        assert!(!m.is_reachable(&n(4)));
        assert_eq!(m.versions()[&n(1)], 2);
        assert_eq!(m, b.merge(&allowed, &a));
    }

    #[test]
    fn merge_drops_rows_outside_the_allowed_members() {
        let mut a = Reachability::new();
        a.unreachable(&n(1), &n(2));
        a.unreachable(&n(1), &n(3));
        a.unreachable(&n(4), &n(1));
        let allowed = BTreeSet::from([n(1), n(2)]);
        let m = a.merge(&allowed, &Reachability::new());
        assert_eq!(m.all_unreachable_or_terminated(), BTreeSet::from([n(2)]));
        assert!(!m.versions().contains_key(&n(4)));
    }

    #[test]
    fn remove_forgets_nodes_as_observers_and_subjects() {
        let mut r = Reachability::new();
        r.unreachable(&n(1), &n(2));
        r.unreachable(&n(3), &n(1));
        r.remove([&n(1)]);
        assert!(r.is_empty());
        assert!(!r.versions().contains_key(&n(1)));
    }

    #[test]
    fn observers_are_grouped_by_subject() {
        let mut r = Reachability::new();
        r.unreachable(&n(1), &n(3));
        r.unreachable(&n(2), &n(3));
        r.terminated(&n(2), &n(4));
        let g = r.observers_grouped_by_unreachable();
        assert_eq!(g[&n(3)], BTreeSet::from([n(1), n(2)]));
        assert_eq!(g[&n(4)], BTreeSet::from([n(2)]));
    }

    fn arb_ops() -> impl Strategy<Value = Vec<(u64, u64, u8)>> {
        prop::collection::vec((1u64..5, 1u64..5, 0u8..3), 0..20)
    }

    fn apply(r: &mut Reachability, ops: &[(u64, u64, u8)]) {
        for (o, s, k) in ops {
            match k {
                0 => r.reachable(&n(*o), &n(*s)),
                1 => r.unreachable(&n(*o), &n(*s)),
                _ => r.terminated(&n(*o), &n(*s)),
            }
        }
    }

    proptest! {
        #[test]
        fn an_observer_with_only_reachable_verdicts_keeps_no_rows(ops in arb_ops()) {
            let mut r = Reachability::new();
            apply(&mut r, &ops);
            for rec in r.records() {
                let row: Vec<_> = r.records().filter(|x| x.observer == rec.observer).collect();
                prop_assert!(row.iter().any(|x| x.status != Reachable));
            }
        }

        #[test]
        fn merge_is_commutative_and_idempotent(a in arb_ops(), b in arb_ops()) {
            let allowed: BTreeSet<_> = (1..5).map(n).collect();
            let base = Reachability::new();
            // b's changes are made by different observers, as in a real cluster.
            let mut rb = base.clone();
            let b: Vec<_> = b.into_iter().map(|(o, s, k)| ((o % 2) + 3, s, k)).collect();
            let a: Vec<_> = a.into_iter().map(|(o, s, k)| ((o % 2) + 1, s, k)).collect();
            let mut ra2 = base.clone();
            apply(&mut ra2, &a);
            apply(&mut rb, &b);
            let m1 = ra2.merge(&allowed, &rb);
            let m2 = rb.merge(&allowed, &ra2);
            prop_assert_eq!(&m1, &m2);
            prop_assert_eq!(m1.merge(&allowed, &m1), m1.clone());
        }

        /// The in-place reads give what copying the table and asking the copy gives.
        #[test]
        fn in_place_reads_match_the_copies_they_replace(ops in arb_ops()) {
            let mut r = Reachability::new();
            apply(&mut r, &ops);
            let status_scan: BTreeSet<_> = (r.all_unreachable_or_terminated().into_iter())
                .filter(|s| r.status(s) == Unreachable)
                .collect();
            prop_assert_eq!(r.all_unreachable(), status_scan);
            let odd = |x: &UniqueAddress| x.uid.get() % 2 == 1;
            let below_4 = |x: &UniqueAddress| x.uid.get() < 4;
            let copied = r.filter_observers(odd).filter_records(below_4);
            let in_place: BTreeSet<UniqueAddress> =
                r.not_reachable_by(|o| odd(o) && below_4(o), below_4).into_iter().cloned().collect();
            prop_assert_eq!(in_place, copied.all_unreachable_or_terminated());
            let records: Vec<_> = (r.records())
                .filter(|x| x.status != Reachable && odd(&x.observer) && below_4(&x.subject))
                .collect();
            let versions: Vec<_> = records.iter().map(|x| (x.observer.clone(), 1)).collect();
            prop_assert_eq!(
                r.unreachable_records_where(odd, below_4, 1),
                Reachability::from_parts(records, versions)
            );
        }
    }
}
