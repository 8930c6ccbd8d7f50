//! What bootstrap needs to know about this node that is not in the `[bootstrap]` table:
//! facts from other tables or known only once the node runs.

use crate::contact_point::SelfContactPoint;

/// This node, as bootstrap sees it. Passed to [`Coordinator::new`](crate::Coordinator::new)
/// (and [`BootstrapMachine::new`](crate::BootstrapMachine::new)) next to the
/// [`BootstrapSettings`](crate::BootstrapSettings).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalNode {
    /// The cluster's system name; the service looked up when `bootstrap.service_name` is `""`.
    pub system_name: String,
    /// This node's contact point: the management server's advertised host and bound port. Its
    /// port is also the fallback port when `bootstrap.contact_point.fallback_port` is unset.
    pub contact_point: SelfContactPoint,
    /// This node's cluster transport `host:port`; a discovered target equal to it is a
    /// misconfiguration (a remoting port probed as a management port) and is not probed.
    pub transport: (String, u16),
    /// Whether the management servers serve HTTPS, so probes use `https://` URLs.
    pub https: bool,
    /// The management base path (`""` or `/something`) that probe URLs start with.
    pub base_path: String,
    /// Seed of the jitter; `None` makes the coordinator draw one from the OS. (The machine takes
    /// its seed as an argument and does not read this.)
    pub seed: Option<u64>,
}

impl LocalNode {
    /// A node of cluster `system_name` whose management server is `contact_point` and whose
    /// cluster transport listens on `transport`; probed over plain HTTP at the root path, with an
    /// OS-drawn jitter seed.
    pub fn new(
        system_name: impl Into<String>,
        contact_point: SelfContactPoint,
        transport: (String, u16),
    ) -> Self {
        Self {
            system_name: system_name.into(),
            contact_point,
            transport,
            https: false,
            base_path: String::new(),
            seed: None,
        }
    }

    /// The scheme of probe URLs: `http` or `https`.
    pub fn scheme(&self) -> &'static str {
        if self.https { "https" } else { "http" }
    }
}
