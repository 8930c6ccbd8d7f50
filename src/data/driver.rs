//! The store's driver: a thread of its own (the storage calls block on the disk) running one
//! [`Store`] over fjall, fed by the callers' commands, the `convoke.data` endpoint, the
//! membership snapshots and its timer.
//!
//! Each turn takes one input, then whatever else is ready without waiting (up to [`BATCH`]
//! inputs), then syncs the disk once for all of them (a group commit), then carries out the
//! outputs: acknowledgements leave only after the sync that made their writes durable.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use convoke_data::{Key, Message, Output, Reply, RequestId, Store};
use convoke_membership::UniqueAddress;
use futures::FutureExt;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::Instant;

use super::storage::FjallStorage;
use super::{Command, DataStartError, DataStats};
use crate::control::{Control, Snapshot};
use crate::messaging::{Endpoint, EndpointKey, Messaging};
use crate::settings::{DataSettings, SyncMode};

/// Inputs taken in one turn before the disk is synced.
const BATCH: usize = 256;

/// The store's messaging endpoint.
pub(super) fn key() -> EndpointKey<Message, ()> {
    EndpointKey::named("convoke.data")
}

type Replier = oneshot::Sender<Result<Reply, convoke_data::DataError>>;

struct Driver {
    store: Store<FjallStorage>,
    /// The membership as requests see it: taken in before each one (see [`Driver::command`]).
    latest: watch::Receiver<Arc<Snapshot>>,
    messaging: Messaging,
    key: EndpointKey<Message, ()>,
    waiting: HashMap<RequestId, Replier>,
    changes: broadcast::Sender<Key>,
    /// Callers of [`Command::BeginLeave`] waiting for every arc to be acknowledged.
    leaving: Vec<oneshot::Sender<()>>,
}

/// What a started driver hands its callers.
pub(super) struct Started {
    /// The callers' requests.
    pub(super) commands: mpsc::Sender<Command>,
    /// Keys that changed on this node's replica.
    pub(super) changes: broadcast::Sender<Key>,
    /// Turns true once the driver has stopped and released the directory.
    pub(super) stopped: watch::Receiver<bool>,
}

/// Opens the disk and starts the driver's thread.
pub(super) fn start(
    settings: &DataSettings,
    messaging: &Messaging,
    control: &Control,
) -> Result<Started, DataStartError> {
    let dir = settings.dir.display().to_string();
    let storage = FjallStorage::open(&settings.dir, settings.sync == SyncMode::Always)
        .map_err(|source| DataStartError::Disk { dir: dir.clone(), source })?;
    let self_node = messaging.self_node().clone();
    let store = Store::new(settings.config(), self_node, storage, Instant::now().into_std())
        .map_err(|source| DataStartError::Disk { dir, source })?;
    let endpoint = messaging.endpoint(&key(), 8192)?;
    let (commands, commands_rx) = mpsc::channel(4096);
    let (changes, _) = broadcast::channel(1024);
    let driver = Driver {
        store,
        latest: control.watch(),
        messaging: messaging.clone(),
        key: key(),
        waiting: HashMap::new(),
        leaving: Vec::new(),
        changes: changes.clone(),
    };
    let sync_interval = (settings.sync == SyncMode::Interval).then_some(settings.sync_interval);
    let snapshots = control.watch();
    let control = control.clone();
    let (stopped_tx, stopped) = watch::channel(false);
    std::thread::Builder::new()
        .name("convoke-data".to_owned())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
            match runtime {
                Ok(rt) => rt.block_on(driver.run(
                    commands_rx,
                    endpoint,
                    snapshots,
                    control,
                    sync_interval,
                )),
                Err(e) => {
                    tracing::error!(error = %e, "the replicated store cannot start its runtime")
                }
            }
            // The driver and its storage are dropped: the directory is free again.
            let _ = stopped_tx.send(true);
        })
        .map_err(DataStartError::Thread)?;
    Ok(Started { commands, changes, stopped })
}

fn now() -> std::time::Instant {
    Instant::now().into_std()
}

impl Driver {
    async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        mut endpoint: Endpoint<Message, ()>,
        mut snapshots: watch::Receiver<Arc<Snapshot>>,
        control: Control,
        sync_interval: Option<Duration>,
    ) {
        self.members(&snapshots.borrow_and_update());
        let mut sync_timer = sync_interval.map(tokio::time::interval);
        loop {
            let deadline = self.store.poll_timeout().map(Instant::from_std);
            let timer = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let sync_tick = async {
                match sync_timer.as_mut() {
                    Some(t) => drop(t.tick().await),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                command = commands.recv() => match command {
                    Some(c) => self.command(c),
                    None => break,
                },
                request = endpoint.recv() => match request {
                    Some(r) => self.message(r),
                    None => break,
                },
                changed = snapshots.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    self.members(&snapshots.borrow_and_update());
                }
                () = timer => self.store.handle_timeout(now()),
                () = sync_tick => {
                    if let Err(e) = self.store.storage().sync_now() {
                        tracing::error!(error = %e, "the replicated store cannot sync its disk");
                    }
                }
                _ = control.terminated() => break,
            }
            // What else is ready goes into the same sync.
            for _ in 0..BATCH {
                if let Some(Some(c)) = commands.recv().now_or_never() {
                    self.command(c);
                } else if let Some(Some(r)) = endpoint.recv().now_or_never() {
                    self.message(r);
                } else {
                    break;
                }
            }
            if self.store.needs_sync() {
                self.store.sync(now());
            }
            self.outputs();
        }
        // Whatever is staged reaches the disk before the thread ends.
        if let Err(e) = self.store.storage().sync_now() {
            tracing::error!(error = %e, "the replicated store cannot sync its disk at stop");
        }
    }

    fn members(&mut self, snapshot: &Snapshot) {
        let unreachable: BTreeSet<UniqueAddress> =
            snapshot.state.unreachable.iter().map(|(m, _)| m.node().clone()).collect();
        self.store.handle_members(&snapshot.state.members, &unreachable, now());
    }

    fn command(&mut self, command: Command) {
        // A caller that saw the cluster change (in the same snapshots) finds the ring changed.
        if self.latest.has_changed().unwrap_or(false) {
            let snapshot = self.latest.borrow_and_update().clone();
            self.members(&snapshot);
        }
        match command {
            Command::Request(request, reply) => {
                let id = self.store.request(request, now());
                self.waiting.insert(id, reply);
            }
            Command::Stats(reply) => {
                let _ = reply.send(self.stats());
            }
            Command::BeginLeave(done) => {
                self.store.begin_leave(now());
                self.leaving.push(done);
            }
        }
    }

    fn message(&mut self, request: crate::messaging::Request<Message, ()>) {
        let (from, message, _) = request.into_parts();
        self.store.handle_message(&from, message, now());
    }

    fn outputs(&mut self) {
        if !self.leaving.is_empty() && self.store.handed_over() {
            for done in self.leaving.drain(..) {
                let _ = done.send(());
            }
        }
        while let Some(out) = self.store.poll_output() {
            match out {
                Output::Send { to, message } => {
                    if let Err(e) = self.messaging.tell(&to, &self.key, &message) {
                        // The request that sent it times out, or anti-entropy tries again.
                        tracing::debug!(%to, error = %e, message = message.name(), "cannot send a store message");
                    }
                }
                Output::Reply { id, result } => {
                    if let Some(reply) = self.waiting.remove(&id) {
                        let _ = reply.send(result);
                    }
                }
                Output::Changed(key) => {
                    let _ = self.changes.send(key);
                }
            }
        }
    }

    fn stats(&self) -> DataStats {
        let (keys, bytes) = self.store.storage().stats();
        let at = now();
        DataStats {
            keys,
            bytes_on_disk: bytes,
            hinted_handoffs_pending: self.store.hint_count() as u64,
            requests_in_flight: self.store.in_flight() as u64,
            ring_members: self.store.ring().members().len() as u64,
            absent_holders: self
                .store
                .absent()
                .iter()
                .map(|(a, t)| (a.to_string(), at.saturating_duration_since(*t).as_secs_f64()))
                .collect(),
            last_anti_entropy: self
                .store
                .anti_entropy_exchanges()
                .iter()
                .map(|(peer, t)| (peer.to_string(), at.saturating_duration_since(*t).as_secs_f64()))
                .collect(),
        }
    }
}
