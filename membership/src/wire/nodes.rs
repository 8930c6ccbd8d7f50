//! Addresses on the wire, tables of values referenced by index, and vector clocks over a node table.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::{DecodeError, pb};
use crate::address::{Address, Uid, UniqueAddress};
use crate::vclock::VectorClock;

/// Assigns each distinct value an index, in order of first use.
#[derive(Debug)]
pub(super) struct Interner<K> {
    index: BTreeMap<K, u32>,
}

impl<K: Ord> Interner<K> {
    pub(super) fn new() -> Self {
        Self { index: BTreeMap::new() }
    }

    /// The index of `key`, adding it if new.
    pub(super) fn intern<Q>(&mut self, key: &Q) -> u32
    where
        K: Borrow<Q>,
        Q: Ord + ToOwned<Owned = K> + ?Sized,
    {
        if let Some(&i) = self.index.get(key) {
            return i;
        }
        // A table of 2^32 entries would need far more memory than any gossip can hold.
        let i = u32::try_from(self.index.len()).expect("a table holds fewer than 2^32 entries");
        self.index.insert(key.to_owned(), i);
        i
    }

    /// The values, in index order.
    pub(super) fn into_items(self) -> Vec<K> {
        let mut items: Vec<(K, u32)> = self.index.into_iter().collect();
        items.sort_unstable_by_key(|(_, i)| *i);
        items.into_iter().map(|(k, _)| k).collect()
    }
}

/// The nodes one message mentions, each stored once, indexed in order of first use; system names
/// are a table of their own since a cluster usually has just one.
///
/// A gossip names its members first, in member order: while nodes come in ascending order they
/// are appended to `sorted` (index = position, found again by binary search), so the common case
/// costs one comparison per member and no tree. Nodes first named out of order go to `others`.
#[derive(Debug)]
pub(super) struct NodeTable {
    sorted: Vec<UniqueAddress>,
    others: BTreeMap<UniqueAddress, u32>,
}

impl NodeTable {
    pub(super) fn new() -> Self {
        Self { sorted: Vec::new(), others: BTreeMap::new() }
    }

    /// The index of `node`, adding it if new.
    pub(super) fn index(&mut self, node: &UniqueAddress) -> u32 {
        // A table of 2^32 entries would need far more memory than any gossip can hold.
        let next = || u32::try_from(self.sorted.len() + self.others.len());
        let next = next().expect("a table holds fewer than 2^32 entries");
        if self.others.is_empty() && self.sorted.last().is_none_or(|last| last < node) {
            self.sorted.push(node.clone());
            return next;
        }
        if let Ok(i) = self.sorted.binary_search(node) {
            return u32::try_from(i).expect("a table holds fewer than 2^32 entries");
        }
        *self.others.entry(node.clone()).or_insert(next)
    }

    /// The system-name table and the node table.
    pub(super) fn finish(self) -> (Vec<String>, Vec<pb::Node>) {
        let mut systems: Interner<String> = Interner::new();
        let mut others: Vec<(UniqueAddress, u32)> = self.others.into_iter().collect();
        others.sort_unstable_by_key(|(_, i)| *i);
        // Addresses of one system mostly share its name: the last one found is tried first, by
        // pointer (every node here stays alive until the end, so a pointer names one string),
        // before the table is searched.
        let mut last_system: Option<(*const u8, usize, u32)> = None;
        let nodes = (self.sorted.iter())
            .chain(others.iter().map(|(n, _)| n))
            .map(|n| {
                let name = n.address.system();
                let system = match last_system {
                    Some((ptr, len, i))
                        if std::ptr::eq(ptr, name.as_ptr()) && len == name.len() =>
                    {
                        i
                    }
                    _ => {
                        let i = systems.intern(name);
                        last_system = Some((name.as_ptr(), name.len(), i));
                        i
                    }
                };
                pb::Node {
                    system,
                    host: n.address.host().to_owned(),
                    port: u32::from(n.address.port()),
                    uid: n.uid.get(),
                }
            })
            .collect();
        (systems.into_items(), nodes)
    }
}

/// The entry `index` of `table`, named `what` in the error.
pub(super) fn lookup<'t, T>(
    table: &'t [T],
    index: u32,
    what: &'static str,
) -> Result<&'t T, DecodeError> {
    usize::try_from(index).ok().and_then(|i| table.get(i)).ok_or(DecodeError::IndexOutOfRange {
        table: what,
        index,
        len: table.len(),
    })
}

/// Decodes a node table; its entries must be distinct, so that distinct indices are distinct nodes.
pub(super) fn decode_node_table(
    systems: &[String],
    nodes: Vec<pb::Node>,
) -> Result<Vec<UniqueAddress>, DecodeError> {
    // Each system name is checked and allocated once, and shared by its addresses; so is a host
    // that the node before named too (a table is mostly in node order, which sorts by host).
    let systems =
        systems.iter().map(|s| Address::checked_system(s)).collect::<Result<Vec<Arc<str>>, _>>()?;
    let mut last_host: Option<(String, Arc<str>)> = None;
    let mut table = Vec::with_capacity(nodes.len());
    for n in nodes {
        let system = lookup(&systems, n.system, "all_systems")?;
        let uid = Uid::new(n.uid).ok_or(DecodeError::ZeroUid)?;
        let host = match &last_host {
            Some((raw, host)) if *raw == n.host => host.clone(),
            _ => {
                let host = Address::checked_host(&n.host)?;
                last_host = Some((n.host, host.clone()));
                host
            }
        };
        table.push(UniqueAddress::new(Address::in_system_at(system, &host, port(n.port)?), uid));
    }
    sorted_by_node(table.iter().collect(), |n: &&UniqueAddress| *n, "node in all_addresses")?;
    Ok(table)
}

/// `items` sorted by node, refusing a node twice (`what` names it in the error). Encoders write
/// them in node order, which one pass confirms, so that a map or set built from the result costs
/// no search per entry; any other order is sorted first.
pub(super) fn sorted_by_node<T>(
    mut items: Vec<T>,
    node: impl Fn(&T) -> &UniqueAddress,
    what: &'static str,
) -> Result<Vec<T>, DecodeError> {
    if !items.is_sorted_by(|a, b| node(a) < node(b)) {
        items.sort_by(|a, b| node(a).cmp(node(b)));
        if items.windows(2).any(|w| node(&w[0]) == node(&w[1])) {
            return Err(DecodeError::Duplicate(what));
        }
    }
    Ok(items)
}

fn port(port: u32) -> Result<u16, DecodeError> {
    u16::try_from(port).map_err(|_| DecodeError::PortOutOfRange(port))
}

pub(super) fn address_to_pb(a: &Address) -> pb::Address {
    pb::Address {
        system: a.system().to_owned(),
        host: a.host().to_owned(),
        port: u32::from(a.port()),
    }
}

pub(super) fn address_from_pb(
    a: Option<pb::Address>,
    field: &'static str,
) -> Result<Address, DecodeError> {
    let a = a.ok_or(DecodeError::MissingField(field))?;
    Ok(Address::new(a.system, a.host, port(a.port)?)?)
}

pub(super) fn unique_to_pb(n: &UniqueAddress) -> pb::UniqueAddress {
    pb::UniqueAddress { address: Some(address_to_pb(&n.address)), uid: n.uid.get() }
}

pub(super) fn unique_from_pb(
    n: Option<pb::UniqueAddress>,
    field: &'static str,
) -> Result<UniqueAddress, DecodeError> {
    let n = n.ok_or(DecodeError::MissingField(field))?;
    let uid = Uid::new(n.uid).ok_or(DecodeError::ZeroUid)?;
    Ok(UniqueAddress::new(address_from_pb(n.address, field)?, uid))
}

pub(super) fn vclock_to_pb(clock: &VectorClock, table: &mut NodeTable) -> Vec<pb::VersionEntry> {
    clock.entries().map(|(n, counter)| pb::VersionEntry { node: table.index(n), counter }).collect()
}

/// Decodes vector-clock entries against a node table. A zero counter is the same as no entry.
pub(super) fn vclock_from_pb(
    entries: Vec<pb::VersionEntry>,
    table: &[UniqueAddress],
) -> Result<VectorClock, DecodeError> {
    let entries = (entries.into_iter())
        .map(|e| Ok((lookup(table, e.node, "all_addresses")?.clone(), e.counter)))
        .collect::<Result<Vec<_>, DecodeError>>()?;
    let entries = sorted_by_node(entries, |(n, _)| n, "vector clock entry")?;
    Ok(VectorClock::from_entries(entries))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, uid: u64) -> UniqueAddress {
        let address: Address = format!("convoke://sys@{host}:1").parse().unwrap();
        UniqueAddress::new(address, Uid::new(uid).unwrap())
    }

    #[test]
    fn nodes_are_indexed_in_order_of_first_use_in_order_or_not() {
        let mut table = NodeTable::new();
        let (a, b, c, d) = (node("a", 1), node("b", 1), node("c", 1), node("d", 1));
        assert_eq!(table.index(&b), 0);
        assert_eq!(table.index(&d), 1);
        assert_eq!(table.index(&b), 0);
        assert_eq!(table.index(&a), 2, "out of order: a new index");
        assert_eq!(table.index(&d), 1);
        assert_eq!(table.index(&c), 3);
        assert_eq!(table.index(&a), 2);
        let (systems, nodes) = table.finish();
        assert_eq!(systems, vec!["sys".to_owned()]);
        let hosts: Vec<&str> = nodes.iter().map(|n| n.host.as_str()).collect();
        assert_eq!(hosts, ["b", "d", "a", "c"]);
        assert!(nodes.iter().all(|n| n.system == 0));
    }

    #[test]
    fn every_system_name_is_listed_once() {
        let mut table = NodeTable::new();
        for (system, host) in [("x", "a"), ("y", "b"), ("x", "c"), ("y", "d")] {
            let address: Address = format!("convoke://{system}@{host}:1").parse().unwrap();
            table.index(&UniqueAddress::new(address, Uid::new(1).unwrap()));
        }
        let (systems, nodes) = table.finish();
        assert_eq!(systems, ["x", "y"]);
        let refs: Vec<u32> = nodes.iter().map(|n| n.system).collect();
        assert_eq!(refs, [0, 1, 0, 1]);
    }
}
