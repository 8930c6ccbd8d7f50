//! What the region task's helpers in the store have in common: the remembered sets
//! (`remember.rs`) and the coordinator's kept homes (`homes.rs`) each run as a task that takes
//! commands from the region task and keeps the store requests they started in flight at once.

use std::future::Future;
use std::pin::Pin;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::mpsc;

/// A store task's requests (claims, writes, waits) in flight, each ending in a `D`.
pub(super) type Work<D> = FuturesUnordered<Pin<Box<dyn Future<Output = D> + Send>>>;

/// A task that runs store requests for the commands of its region task.
pub(super) trait StoreTask: Send + 'static {
    /// What the region task asks.
    type Cmd: Send + 'static;
    /// What a finished request says.
    type Done: Send + 'static;

    /// Takes in a command; requests it starts go into `work`.
    fn on_cmd(&mut self, cmd: Self::Cmd, work: &mut Work<Self::Done>);

    /// Takes in a finished request; requests it starts go into `work`.
    fn on_done(&mut self, done: Self::Done, work: &mut Work<Self::Done>);
}

/// The region task's handle of a store task; the task ends when the handle is dropped.
#[derive(Debug)]
pub(super) struct Handle<C> {
    tx: mpsc::UnboundedSender<C>,
}

impl<C> Handle<C> {
    pub(super) fn send(&self, cmd: C) {
        let _ = self.tx.send(cmd);
    }
}

/// Spawns `task` and returns its handle.
pub(super) fn spawn<T: StoreTask>(mut task: T) -> Handle<T::Cmd> {
    let (tx, mut cmds) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut work = Work::new();
        loop {
            tokio::select! {
                cmd = cmds.recv() => match cmd {
                    Some(cmd) => task.on_cmd(cmd, &mut work),
                    None => break,
                },
                Some(done) = work.next(), if !work.is_empty() => task.on_done(done, &mut work),
            }
        }
    });
    Handle { tx }
}
