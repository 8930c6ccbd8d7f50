//! The reachability table: which observer sees which subject as unreachable.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

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
///
/// A copy shares the table until one of them changes it, and what is computed from a table (the
/// subjects somebody flags) is computed once for all its copies: the copies of one gossip on
/// every node, and the many views each node takes of it per gossip.
#[derive(Clone, Default)]
pub struct Reachability(Arc<Table>);

type Row = BTreeMap<UniqueAddress, (ReachabilityStatus, u64)>;

#[derive(Clone, Default)]
struct Table {
    /// observer → (subject → (status, version)).
    rows: BTreeMap<UniqueAddress, Row>,
    versions: BTreeMap<UniqueAddress, u64>,
    /// Every subject some observer flags as Unreachable or Terminated, with those observers in
    /// order, computed on first use.
    flagged: OnceLock<BTreeMap<UniqueAddress, Vec<UniqueAddress>>>,
    /// The same subjects as a set, computed on first use.
    not_reachable: OnceLock<BTreeSet<UniqueAddress>>,
    /// Of those, the ones nobody flags as Terminated, computed on first use.
    unreachable: OnceLock<BTreeSet<UniqueAddress>>,
}

impl Table {
    fn shared(
        rows: BTreeMap<UniqueAddress, Row>,
        versions: BTreeMap<UniqueAddress, u64>,
    ) -> Reachability {
        Reachability(Arc::new(Self {
            rows,
            versions,
            flagged: OnceLock::new(),
            not_reachable: OnceLock::new(),
            unreachable: OnceLock::new(),
        }))
    }

    fn flagged(&self) -> &BTreeMap<UniqueAddress, Vec<UniqueAddress>> {
        self.flagged.get_or_init(|| {
            let mut out: BTreeMap<UniqueAddress, Vec<UniqueAddress>> = BTreeMap::new();
            for (o, row) in &self.rows {
                for (s, (status, _)) in row {
                    if *status != ReachabilityStatus::Reachable {
                        out.entry(s.clone()).or_default().push(o.clone());
                    }
                }
            }
            out
        })
    }
}

/// Equal when the rows and versions are (what was computed from them is not state).
impl PartialEq for Reachability {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || (self.0.rows == other.0.rows && self.0.versions == other.0.versions)
    }
}

impl Eq for Reachability {}

impl std::hash::Hash for Reachability {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.rows.hash(state);
        self.0.versions.hash(state);
    }
}

impl std::fmt::Debug for Reachability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (f.debug_struct("Reachability"))
            .field("rows", &self.0.rows)
            .field("versions", &self.0.versions)
            .finish()
    }
}

impl Reachability {
    /// The empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The table, for a change: copied first if it is shared, and what was computed from it is
    /// dropped.
    fn table_mut(&mut self) -> &mut Table {
        let t = Arc::make_mut(&mut self.0);
        t.flagged = OnceLock::new();
        t.not_reachable = OnceLock::new();
        t.unreachable = OnceLock::new();
        t
    }

    /// Builds a table from records and versions (for decoding); versions must cover every observer.
    pub fn from_parts(
        records: impl IntoIterator<Item = Record>,
        versions: impl IntoIterator<Item = (UniqueAddress, u64)>,
    ) -> Self {
        let mut rows: BTreeMap<UniqueAddress, Row> = BTreeMap::new();
        let mut versions: BTreeMap<UniqueAddress, u64> = versions.into_iter().collect();
        for rec in records {
            rows.entry(rec.observer).or_default().insert(rec.subject, (rec.status, rec.version));
        }
        for obs in rows.keys() {
            versions.entry(obs.clone()).or_insert(0);
        }
        Table::shared(rows, versions)
    }

    /// Every record, ordered by observer then subject.
    pub fn records(&self) -> impl Iterator<Item = Record> + '_ {
        self.0.rows.iter().flat_map(|(o, row)| {
            row.iter().map(move |(s, (status, version))| Record {
                observer: o.clone(),
                subject: s.clone(),
                status: *status,
                version: *version,
            })
        })
    }

    /// The subject of every record, ordered by observer then subject (a subject flagged by
    /// several observers comes once for each).
    pub fn subjects(&self) -> impl Iterator<Item = &UniqueAddress> + '_ {
        self.0.rows.values().flat_map(BTreeMap::keys)
    }

    /// The per-observer versions.
    pub fn versions(&self) -> &BTreeMap<UniqueAddress, u64> {
        &self.0.versions
    }

    /// Whether there are no records (everybody reachable).
    pub fn is_empty(&self) -> bool {
        self.0.rows.is_empty()
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
        let v = self.table_mut().versions.entry(observer.clone()).or_insert(0);
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
        let Some(row) = self.0.rows.get(observer) else {
            if status == Reachable {
                return;
            }
            let v = self.bump(observer);
            let rows = &mut self.table_mut().rows;
            rows.entry(observer.clone()).or_default().insert(subject.clone(), (status, v));
            return;
        };
        let all_others_reachable =
            row.iter().filter(|(s, _)| *s != subject).all(|(_, (st, _))| *st == Reachable);
        match row.get(subject) {
            Some((old, _)) if *old == Terminated || *old == status => {}
            None if status == Reachable && all_others_reachable => {
                self.bump(observer);
                self.table_mut().rows.remove(observer);
            }
            Some(_) if status == Reachable && all_others_reachable => {
                self.bump(observer);
                self.table_mut().rows.remove(observer);
            }
            _ => {
                let v = self.bump(observer);
                if let Some(row) = self.table_mut().rows.get_mut(observer) {
                    row.insert(subject.clone(), (status, v));
                }
            }
        }
    }

    /// Merges `other` into `self`, keeping only rows of observers in `allowed` about subjects in
    /// `allowed`: for each observer the rows of the side with the higher version win (`other` on a
    /// tie; one-sided rows only when that side's version is strictly higher).
    pub fn merge(&self, allowed: &BTreeSet<UniqueAddress>, other: &Reachability) -> Reachability {
        let (mut rows, mut versions) = (BTreeMap::new(), BTreeMap::new());
        let (this, other) = (&*self.0, &*other.0);
        // Only observers with a version or rows on either side can leave anything: the few
        // that ever flagged someone, not every allowed member.
        let observers: BTreeSet<&UniqueAddress> = (this.versions.keys())
            .chain(this.rows.keys())
            .chain(other.versions.keys())
            .chain(other.rows.keys())
            .filter(|o| allowed.contains(*o))
            .collect();
        for observer in observers {
            let v1 = this.versions.get(observer).copied();
            let v2 = other.versions.get(observer).copied();
            let r1 = this.rows.get(observer);
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
                    rows.insert(observer.clone(), kept);
                }
            }
            if let Some(v) = v1.max(v2) {
                versions.insert(observer.clone(), v);
            }
        }
        Table::shared(rows, versions)
    }

    /// Forgets `nodes` as observers and subjects, with their versions.
    pub fn remove<'a>(&mut self, nodes: impl IntoIterator<Item = &'a UniqueAddress>) {
        let mut nodes = nodes.into_iter().peekable();
        if nodes.peek().is_none() {
            return;
        }
        let t = self.table_mut();
        for n in nodes {
            t.rows.remove(n);
            t.versions.remove(n);
            for row in t.rows.values_mut() {
                row.remove(n);
            }
        }
        t.rows.retain(|_, row| !row.is_empty());
    }

    /// Forgets the rows and versions of `observers`.
    pub fn remove_observers<'a>(&mut self, observers: impl IntoIterator<Item = &'a UniqueAddress>) {
        let mut observers = observers.into_iter().peekable();
        if observers.peek().is_none() {
            return;
        }
        let t = self.table_mut();
        for n in observers {
            t.rows.remove(n);
            t.versions.remove(n);
        }
    }

    /// A copy keeping only the rows whose observer satisfies `keep`.
    pub fn filter_observers(&self, keep: impl Fn(&UniqueAddress) -> bool) -> Reachability {
        Table::shared(
            (self.0.rows.iter())
                .filter(|(o, _)| keep(o))
                .map(|(o, r)| (o.clone(), r.clone()))
                .collect(),
            (self.0.versions.iter())
                .filter(|(o, _)| keep(o))
                .map(|(o, v)| (o.clone(), *v))
                .collect(),
        )
    }

    /// A copy keeping only records whose observer and subject both satisfy `keep`.
    pub fn filter_records(&self, keep: impl Fn(&UniqueAddress) -> bool) -> Reachability {
        let mut out = self.filter_observers(&keep);
        let t = out.table_mut();
        for row in t.rows.values_mut() {
            row.retain(|s, _| keep(s));
        }
        t.rows.retain(|_, row| !row.is_empty());
        out
    }

    /// What `observer` thinks of `subject` (Reachable when it has no row).
    pub fn status_by(
        &self,
        observer: &UniqueAddress,
        subject: &UniqueAddress,
    ) -> ReachabilityStatus {
        (self.0.rows.get(observer))
            .and_then(|row| row.get(subject))
            .map_or(ReachabilityStatus::Reachable, |(s, _)| *s)
    }

    /// The aggregate verdict on `subject`: Terminated if anyone says so, else Unreachable if anyone
    /// says so, else Reachable.
    pub fn status(&self, subject: &UniqueAddress) -> ReachabilityStatus {
        (self.0.rows.values())
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

    /// Subjects somebody sees as unreachable or terminated (computed once per table).
    pub fn all_unreachable_or_terminated(&self) -> &BTreeSet<UniqueAddress> {
        self.0.not_reachable.get_or_init(|| self.0.flagged().keys().cloned().collect())
    }

    /// Subjects somebody sees as unreachable, excluding those anybody sees as terminated
    /// (computed once per table).
    pub fn all_unreachable(&self) -> &BTreeSet<UniqueAddress> {
        self.0.unreachable.get_or_init(|| {
            let terminated = |s: &UniqueAddress| {
                (self.0.rows.values()).any(|row| {
                    row.get(s).is_some_and(|(st, _)| *st == ReachabilityStatus::Terminated)
                })
            };
            (self.all_unreachable_or_terminated().iter())
                .filter(|s| !terminated(s))
                .cloned()
                .collect()
        })
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
        let (mut rows, mut versions) = (BTreeMap::new(), BTreeMap::new());
        for (o, row) in self.0.rows.iter().filter(|(o, _)| observer(o)) {
            let kept: Row = (row.iter())
                .filter(|(s, (status, _))| *status != ReachabilityStatus::Reachable && subject(s))
                .map(|(s, v)| (s.clone(), *v))
                .collect();
            if !kept.is_empty() {
                versions.insert(o.clone(), observer_version);
                rows.insert(o.clone(), kept);
            }
        }
        Table::shared(rows, versions)
    }

    /// The subjects satisfying `subject` that some observer satisfying `observer` sees as
    /// unreachable or terminated: the same as `filter_records` or `filter_observers` followed by
    /// [`Self::all_unreachable_or_terminated`], without copying the table.
    pub fn not_reachable_by(
        &self,
        observer: impl Fn(&UniqueAddress) -> bool,
        subject: impl Fn(&UniqueAddress) -> bool,
    ) -> BTreeSet<&UniqueAddress> {
        (self.0.flagged().iter())
            .filter(|(s, observers)| subject(s) && observers.iter().any(&observer))
            .map(|(s, _)| s)
            .collect()
    }

    /// Subjects that `observer` sees as unreachable or terminated.
    pub fn all_unreachable_from(&self, observer: &UniqueAddress) -> BTreeSet<UniqueAddress> {
        self.0.rows.get(observer).map_or_else(BTreeSet::new, |row| {
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
        for (o, row) in &self.0.rows {
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
        let mut out: BTreeSet<UniqueAddress> = self.0.versions.keys().cloned().collect();
        for (o, row) in &self.0.rows {
            out.insert(o.clone());
            out.extend(row.keys().cloned());
        }
        out
    }
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
        assert_eq!(*r.all_unreachable(), BTreeSet::from([n(2)]));
        assert_eq!(r.versions()[&n(1)], 1);
    }

    #[test]
    fn a_copy_shares_what_was_computed_until_one_of_them_changes() {
        let mut r = Reachability::new();
        r.unreachable(&n(1), &n(2));
        r.terminated(&n(1), &n(3));
        assert_eq!(*r.all_unreachable(), BTreeSet::from([n(2)]));
        assert_eq!(*r.all_unreachable_or_terminated(), BTreeSet::from([n(2), n(3)]));
        let mut copy = r.clone();
        assert!(std::ptr::eq(copy.all_unreachable(), r.all_unreachable()), "computed once");
        copy.reachable(&n(1), &n(2));
        copy.unreachable(&n(4), &n(1));
        assert_eq!(*copy.all_unreachable(), BTreeSet::from([n(1)]));
        assert_eq!(*copy.all_unreachable_or_terminated(), BTreeSet::from([n(1), n(3)]));
        assert_eq!(copy.not_reachable_by(|o| *o == n(4), |_| true), BTreeSet::from([&n(1)]));
        // The original keeps its table and what was computed from it.
        assert_eq!(*r.all_unreachable(), BTreeSet::from([n(2)]));
        assert_eq!(r.not_reachable_by(|o| *o == n(4), |_| true), BTreeSet::new());
        assert_ne!(r, copy);
        copy.remove([&n(4)]);
        copy.unreachable(&n(1), &n(2));
        assert_eq!(*copy.all_unreachable_or_terminated(), BTreeSet::from([n(2), n(3)]));
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
        assert_eq!(*r.all_unreachable_or_terminated(), BTreeSet::from([n(3)]));
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
        assert_eq!(*m.all_unreachable_or_terminated(), BTreeSet::from([n(2)]));
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
            let status_scan: BTreeSet<UniqueAddress> = (r.all_unreachable_or_terminated().iter())
                .filter(|s| r.status(s) == Unreachable)
                .cloned()
                .collect();
            prop_assert_eq!(r.all_unreachable(), &status_scan);
            let odd = |x: &UniqueAddress| x.uid.get() % 2 == 1;
            let below_4 = |x: &UniqueAddress| x.uid.get() < 4;
            let copied = r.filter_observers(odd).filter_records(below_4);
            let in_place: BTreeSet<UniqueAddress> =
                r.not_reachable_by(|o| odd(o) && below_4(o), below_4).into_iter().cloned().collect();
            prop_assert_eq!(&in_place, copied.all_unreachable_or_terminated());
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
