//! `[runtime]`: the threads `convoke run` runs its node on. An application that embeds the node
//! runs it on its own tokio runtime and does not read this table.

use serde::{Deserialize, Serialize};

use super::SettingsError;

/// The most worker threads accepted: far more than any node has cores for.
const MAX_WORKER_THREADS: usize = 1024;

/// The process's task scheduler.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeSettings {
    /// Threads that run the node's tasks: transport, gossip and failure detection, the management
    /// server, bootstrap. One keeps up with a node's work; each more adds its stack and its own
    /// malloc arena, about half a megabyte resident (docs/benchmarks.md, "Memory of a node
    /// process").
    pub worker_threads: usize,
}

impl Default for RuntimeSettings {
    fn default() -> Self {
        Self { worker_threads: 1 }
    }
}

impl RuntimeSettings {
    /// Checks the range serde cannot.
    ///
    /// # Errors
    /// `runtime.worker_threads` is 0 or above 1024.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if !(1..=MAX_WORKER_THREADS).contains(&self.worker_threads) {
            return Err(SettingsError::new(
                "runtime.worker_threads",
                self.worker_threads.to_string(),
                format!("a number from 1 to {MAX_WORKER_THREADS}"),
            ));
        }
        Ok(())
    }
}
