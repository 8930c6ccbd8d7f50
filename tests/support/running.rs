//! Which node each running entity runs on, kept by the entities themselves: an entity holds a
//! [`RunsOn`] from its start until it is dropped.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Entity id → the node it runs on.
pub type Running = Arc<Mutex<BTreeMap<String, usize>>>;

/// Says that entity `id` runs on `node` while it lives.
pub struct RunsOn {
    id: String,
    node: usize,
    running: Running,
}

impl RunsOn {
    /// Entity `id` starts on `node`; returns the node it ran on already, if any.
    pub fn start(id: &str, node: usize, running: &Running) -> (Self, Option<usize>) {
        let previous = running.lock().unwrap().insert(id.to_owned(), node);
        (Self { id: id.to_owned(), node, running: running.clone() }, previous)
    }

    /// The node it runs on.
    pub fn node(&self) -> usize {
        self.node
    }
}

impl Drop for RunsOn {
    fn drop(&mut self) {
        let mut running = self.running.lock().unwrap();
        if running.get(&self.id) == Some(&self.node) {
            running.remove(&self.id);
        }
    }
}
