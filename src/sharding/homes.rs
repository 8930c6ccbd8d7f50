//! The coordinator's homes kept in the store (`docs/sharding-design.md`, "Homes kept in the
//! store").
//!
//! The host decides when the homes are read ([`HostOutput::LoadHomes`], as the coordinator
//! starts on this node) and what is kept ([`HostOutput::SaveHomes`], after the written table's
//! homes changed). This task claims the fenced key `coordinator/<type>` for each coordinator that
//! starts here, which fences the writer of every earlier coordinator, hands the homes the claim
//! read to the region task, and then writes the homes it is given under its claim, one write at
//! a time: homes given during a write replace each other, and the latest goes next.
//!
//! [`HostOutput::LoadHomes`]: convoke_sharding::HostOutput::LoadHomes
//! [`HostOutput::SaveHomes`]: convoke_sharding::HostOutput::SaveHomes

use std::collections::BTreeMap;
use std::time::Duration;

use convoke_membership::Address;
use convoke_sharding::ShardId;
use tokio::sync::mpsc;

use super::region::Event;
use super::state::{StateStore, claim};
use super::store_task::{self, Handle, StoreTask};
use crate::data::{DataError, Fenced, Writer};

/// Homes by shard, as the host gives and takes them.
type HomeList = Vec<(ShardId, Address)>;

/// What the region task asks of the kept homes.
#[derive(Debug)]
pub(super) enum Cmd {
    /// A coordinator starts here: claim the key and read the homes kept.
    Load,
    /// Keep these homes in place of those kept before.
    Save(HomeList),
    /// The coordinator has stopped here: what was begun for it is dropped.
    Stop,
}

/// The region task's handle of its type's kept homes.
pub(super) type Homes = Handle<Cmd>;

/// Starts the task of type `store.type_name`'s homes; what it reads goes to `events`.
pub(super) fn start(
    store: StateStore,
    retry: Duration,
    events: mpsc::UnboundedSender<Event>,
) -> Homes {
    let key = key(&store.type_name, &store.data_center);
    store_task::spawn(Task {
        store,
        key,
        retry,
        events,
        generation: 0,
        loads: 0,
        active: false,
        read: false,
        writer: None,
        pending: None,
        busy: false,
    })
}

/// The key of the homes of type `type_name` in data center `dc` (each has its coordinator).
fn key(type_name: &str, dc: &str) -> String {
    format!("coordinator/{type_name}/{dc}")
}

/// What a finished claim, write or wait says; `generation` tells the coordinator it was for.
enum Done {
    Claimed { generation: u64, result: Result<Option<(Writer, Fenced)>, DataError> },
    Written { generation: u64, result: Result<(), DataError>, homes: HomeList },
    Retry { generation: u64 },
}

type Work = store_task::Work<Done>;

struct Task {
    store: StateStore,
    key: String,
    retry: Duration,
    events: mpsc::UnboundedSender<Event>,
    /// Counts the coordinators started and stopped here: answers for an earlier one are ignored.
    generation: u64,
    /// Counts the reads asked for ([`Cmd::Load`]), which the region task counts too.
    loads: u64,
    /// A coordinator runs here.
    active: bool,
    /// Its homes were read and handed on.
    read: bool,
    /// The current coordinator's writer, once its claim is answered.
    writer: Option<Writer>,
    /// Homes to write once the claim is answered or the write under way has finished.
    pending: Option<HomeList>,
    /// A claim, a write or the wait before a retry is under way.
    busy: bool,
}

impl StoreTask for Task {
    type Cmd = Cmd;
    type Done = Done;

    fn on_cmd(&mut self, cmd: Cmd, work: &mut Work) {
        match cmd {
            Cmd::Load => {
                self.generation += 1;
                self.loads += 1;
                self.active = true;
                self.read = false;
                self.writer = None;
                self.pending = None;
                self.busy = true;
                self.claim(work);
            }
            Cmd::Save(homes) if self.active => {
                self.pending = Some(homes);
                self.maybe_write(work);
            }
            Cmd::Save(_) => {}
            Cmd::Stop => {
                self.generation += 1;
                self.active = false;
                self.writer = None;
                self.pending = None;
                self.busy = false;
            }
        }
    }

    fn on_done(&mut self, done: Done, work: &mut Work) {
        let type_name = &self.store.type_name;
        match done {
            Done::Claimed { generation, .. }
            | Done::Written { generation, .. }
            | Done::Retry { generation }
                if generation != self.generation => {}
            Done::Claimed { result: Ok(Some((writer, current))), .. } => {
                let ballot = writer.ballot().unwrap_or_default();
                if !std::mem::replace(&mut self.read, true) {
                    let homes = decode(&current, type_name);
                    tracing::debug!(entity_type = %type_name, %ballot, shards = homes.len(), "the shard homes kept in the store are read");
                    // Homes given to keep before the read came back (the coordinator waited no
                    // longer) do not hold these yet: what they lack is kept too.
                    if let Some(pending) = &mut self.pending {
                        let known: std::collections::BTreeSet<ShardId> =
                            pending.iter().map(|(s, _)| s.clone()).collect();
                        pending.extend(homes.iter().filter(|(s, _)| !known.contains(s)).cloned());
                    }
                    let _ = self.events.send(Event::Homes(self.loads, homes));
                }
                self.writer = Some(writer);
                self.busy = false;
                self.maybe_write(work);
            }
            Done::Claimed { result, .. } => {
                let why = result
                    .err()
                    .map_or_else(|| "outbid on every try".to_owned(), |e| e.to_string());
                tracing::debug!(entity_type = %type_name, %why, "cannot read the shard homes kept in the store yet");
                self.wait(work);
            }
            Done::Written { result: Ok(()), .. } => {
                self.busy = false;
                self.maybe_write(work);
            }
            Done::Written { result: Err(e), homes, .. } if e.fence_refusal().is_some() => {
                // Claimed since by another writer: an earlier coordinator's claim that came
                // late, or one that runs elsewhere at the same time (a partition). The
                // coordinator that runs here claims again, after the retry interval.
                tracing::debug!(entity_type = %type_name, "the shard homes were claimed by another writer; claiming them again");
                self.writer = None;
                self.pending.get_or_insert(homes);
                self.wait(work);
            }
            Done::Written { result: Err(e), homes, .. } => {
                tracing::debug!(entity_type = %type_name, error = %e, "cannot keep the shard homes in the store yet");
                self.pending.get_or_insert(homes);
                self.wait(work);
            }
            Done::Retry { .. } if self.writer.is_none() => self.claim(work),
            Done::Retry { .. } => {
                self.busy = false;
                self.maybe_write(work);
            }
        }
    }
}

impl Task {
    fn claim(&self, work: &mut Work) {
        let (data, key, holder) = (self.store.data.clone(), self.key.clone(), self.store.holder);
        let generation = self.generation;
        work.push(Box::pin(async move {
            let result = claim(&data, &key, holder).await;
            Done::Claimed { generation, result }
        }));
    }

    /// Tries again after the retry interval.
    fn wait(&mut self, work: &mut Work) {
        self.busy = true;
        let (generation, retry) = (self.generation, self.retry);
        work.push(Box::pin(async move {
            tokio::time::sleep(retry).await;
            Done::Retry { generation }
        }));
    }

    /// Writes the pending homes if nothing else is under way.
    fn maybe_write(&mut self, work: &mut Work) {
        if self.busy {
            return;
        }
        let Some(writer) = self.writer.as_mut() else { return };
        let Some(homes) = self.pending.take() else { return };
        let Some(op) = writer.write(encode(&homes)) else { return };
        self.busy = true;
        let (data, key, generation) = (self.store.data.clone(), self.key.clone(), self.generation);
        work.push(Box::pin(async move {
            let result = data.fenced_write(&key, op).await.map(drop);
            Done::Written { generation, result, homes }
        }));
    }
}

/// A JSON object from shard id to the address of its node.
fn encode(homes: &[(ShardId, Address)]) -> Vec<u8> {
    let map: BTreeMap<&str, String> =
        homes.iter().map(|(s, a)| (s.as_str(), a.to_string())).collect();
    serde_json::to_vec(&map).unwrap_or_default()
}

/// The homes a claim found (none when nothing was written, or what was is not homes).
fn decode(current: &Fenced, type_name: &str) -> HomeList {
    let Some(written) = &current.state else { return Vec::new() };
    let map: BTreeMap<String, String> = match serde_json::from_slice(&written.bytes) {
        Ok(map) => map,
        Err(e) => {
            tracing::error!(entity_type = %type_name, error = %e, "the shard homes kept in the store are not a JSON object of addresses; ignoring them");
            return Vec::new();
        }
    };
    let mut homes = Vec::with_capacity(map.len());
    for (shard, address) in map {
        match address.parse::<Address>() {
            Ok(a) => homes.push((ShardId::new(shard), a)),
            Err(e) => {
                tracing::error!(entity_type = %type_name, %shard, %address, error = %e, "a shard home kept in the store is not a node address; ignoring it");
            }
        }
    }
    homes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{Ballot, Written};

    #[test]
    fn homes_come_back_as_they_were_kept() {
        let homes: HomeList = vec![
            (ShardId::new("1"), "convoke://convoke@10.0.0.1:25520".parse().unwrap()),
            (ShardId::new("a \"b\"\n"), "convoke://convoke@[::1]:25521".parse().unwrap()),
        ];
        let current = Fenced {
            state: Some(Written { ballot: Ballot::default(), seq: 1, bytes: encode(&homes) }),
            ..Fenced::default()
        };
        let mut back = decode(&current, "t");
        back.sort();
        let mut homes = homes;
        homes.sort();
        assert_eq!(back, homes);
    }

    #[test]
    fn homes_that_do_not_decode_are_ignored_not_half_taken() {
        let written = |bytes: &[u8]| Fenced {
            state: Some(Written { ballot: Ballot::default(), seq: 1, bytes: bytes.to_vec() }),
            ..Fenced::default()
        };
        assert!(decode(&written(b"[1,2]"), "t").is_empty());
        let one = decode(&written(br#"{"1":"convoke://c@h:1","2":"nowhere"}"#), "t");
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].0, ShardId::new("1"));
    }
}
