//! Test doubles for the tests of this crate and of the crates that use it (feature `testkit`):
//! a real DNS server on loopback and, with feature `kubernetes`, a stand-in Kubernetes API server
//! speaking TLS.
//!
//! Not for production use: they bind loopback ports, panic on bad input and keep everything in
//! memory.

mod dns_server;

pub use dns_server::{DnsRecords, TestDnsServer, UnresponsiveDnsServer};
#[cfg(feature = "kubernetes")]
mod kube_api;

#[cfg(feature = "kubernetes")]
pub use kube_api::{FakeApiServer, RecordedRequest};
