//! Node identity: [`Address`] (`convoke://system@host:port`) and [`UniqueAddress`] (address + uid).

use std::cmp::Ordering;
use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;
use std::sync::Arc;

/// The URI scheme of every convoke address.
pub const SCHEME: &str = "convoke";

/// Where a node's cluster transport listens: `convoke://<system>@<host>:<port>`.
///
/// Addresses order by host (compared as bytes, so `"10.0.0.10" < "10.0.0.9"` exactly as the strings
/// do on every node), then port, then system name. The order decides the leader, the up-number
/// assignment order and split-brain tie-breaks, so it must be the same on every node: it depends on
/// nothing but the three fields.
///
/// An address is one pointer to shared parts: every node holds every member's address in several
/// tables (its gossip's seen set and clock, the resolver's and heartbeat sender's tables), so a
/// clone is one reference count and a copy in a table is 8 bytes. Two addresses equal when their
/// parts do; clones of one address compare without looking at the strings.
#[derive(Clone)]
pub struct Address(Arc<Parts>);

/// What an [`Address`] points to. The strings are shared with the addresses made from this one by
/// [`Address::with_port`], and the system name with the others decoded from the same message.
struct Parts {
    system: Arc<str>,
    host: Arc<str>,
    port: u16,
    /// The host's first 16 bytes, zero-padded, as a big-endian number: ordering two hosts by it
    /// orders them as their bytes do up to there, which decides most comparisons (an IPv4 host
    /// fits whole) without reading the strings.
    host_prefix: u128,
}

impl Parts {
    fn new(system: Arc<str>, host: Arc<str>, port: u16) -> Self {
        let mut prefix = [0u8; 16];
        let n = host.len().min(16);
        prefix[..n].copy_from_slice(&host.as_bytes()[..n]);
        Self { system, host, port, host_prefix: u128::from_be_bytes(prefix) }
    }

    /// The hosts' byte order. Equal prefixes of hosts no longer than the prefix differ only in
    /// length, and then the shorter is a prefix of the longer (the rest of the longer is zeros),
    /// so it sorts first.
    #[inline]
    fn cmp_host(&self, other: &Self) -> Ordering {
        self.host_prefix.cmp(&other.host_prefix).then_with(|| {
            if self.host.len() <= 16 && other.host.len() <= 16 {
                self.host.len().cmp(&other.host.len())
            } else {
                self.host.as_bytes().cmp(other.host.as_bytes())
            }
        })
    }
}

impl PartialEq for Parts {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.port == other.port
            && self.host_prefix == other.host_prefix
            && self.host == other.host
            && self.system == other.system
    }
}

impl std::hash::Hash for Parts {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (&self.system, &self.host, self.port).hash(state);
    }
}

impl Address {
    /// Builds an address; `host` is stored without IPv6 brackets.
    ///
    /// # Errors
    /// When the system or host is empty or holds characters that cannot appear in an address.
    pub fn new(
        system: impl Into<String>,
        host: impl Into<String>,
        port: u16,
    ) -> Result<Self, AddressError> {
        let system = system.into();
        validate_system(&system)?;
        Ok(Self::in_system_at(&system.into(), &Self::checked_host(&host.into())?, port))
    }

    /// An address in `system` on `host`, sharing both strings; each was checked once by
    /// [`checked_system`](Self::checked_system) and [`checked_host`](Self::checked_host).
    pub(crate) fn in_system_at(system: &Arc<str>, host: &Arc<str>, port: u16) -> Self {
        Self(Arc::new(Parts::new(system.clone(), host.clone(), port)))
    }

    /// Checks a host as [`new`](Self::new) does (brackets around an IPv6 address are dropped),
    /// for [`in_system_at`](Self::in_system_at).
    pub(crate) fn checked_host(host: &str) -> Result<Arc<str>, AddressError> {
        let host = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            Some(inner) if !inner.is_empty() => inner,
            _ => host,
        };
        validate_host(host)?;
        Ok(host.into())
    }

    /// Checks a system name as [`new`](Self::new) does, for [`in_system_at`](Self::in_system_at).
    pub(crate) fn checked_system(system: &str) -> Result<Arc<str>, AddressError> {
        validate_system(system)?;
        Ok(system.into())
    }

    /// The same system and host on another port, sharing their strings.
    pub fn with_port(&self, port: u16) -> Self {
        Self(Arc::new(Parts::new(self.0.system.clone(), self.0.host.clone(), port)))
    }

    /// The actor-system-like cluster name; nodes of different systems never join.
    pub fn system(&self) -> &str {
        &self.0.system
    }

    /// The host, without brackets for IPv6.
    pub fn host(&self) -> &str {
        &self.0.host
    }

    /// The transport port.
    pub fn port(&self) -> u16 {
        self.0.port
    }

    /// `host:port`, with brackets around an IPv6 host.
    pub fn host_port(&self) -> String {
        let Parts { host, port, .. } = &*self.0;
        if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
    }
}

fn validate_system(system: &str) -> Result<(), AddressError> {
    if system.is_empty() {
        return Err(AddressError::EmptySystem);
    }
    if let Some(c) = system.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return Err(AddressError::BadSystem { system: system.to_owned(), bad: c });
    }
    Ok(())
}

fn validate_host(host: &str) -> Result<(), AddressError> {
    if host.is_empty() {
        return Err(AddressError::EmptyHost);
    }
    if let Some(c) = host.chars().find(|c| c.is_whitespace() || matches!(c, '/' | '@' | '[' | ']'))
    {
        return Err(AddressError::BadHost { host: host.to_owned(), bad: c });
    }
    Ok(())
}

impl PartialEq for Address {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || *self.0 == *other.0
    }
}

impl Eq for Address {}

impl std::hash::Hash for Address {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl Ord for Address {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        if Arc::ptr_eq(&self.0, &other.0) {
            return Ordering::Equal;
        }
        let (a, b) = (&*self.0, &*other.0);
        let system = || {
            if Arc::ptr_eq(&a.system, &b.system) {
                Ordering::Equal
            } else {
                a.system.as_bytes().cmp(b.system.as_bytes())
            }
        };
        a.cmp_host(b).then(a.port.cmp(&b.port)).then_with(system)
    }
}

impl fmt::Debug for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Address")
            .field("system", &self.system())
            .field("host", &self.host())
            .field("port", &self.port())
            .finish()
    }
}

impl PartialOrd for Address {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}://{}@{}", self.system(), self.host_port())
    }
}

impl FromStr for Address {
    type Err = AddressError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let rest = s
            .strip_prefix(SCHEME)
            .and_then(|r| r.strip_prefix("://"))
            .ok_or_else(|| AddressError::Malformed { input: s.to_owned(), why: "scheme" })?;
        let (system, host_port) = rest
            .split_once('@')
            .ok_or_else(|| AddressError::Malformed { input: s.to_owned(), why: "'@'" })?;
        let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
            let (host, after) = v6.split_once(']').ok_or_else(|| AddressError::Malformed {
                input: s.to_owned(),
                why: "closing ']'",
            })?;
            let port = after
                .strip_prefix(':')
                .ok_or_else(|| AddressError::Malformed { input: s.to_owned(), why: "':port'" })?;
            (host, port)
        } else {
            host_port
                .rsplit_once(':')
                .ok_or_else(|| AddressError::Malformed { input: s.to_owned(), why: "':port'" })?
        };
        let port = port
            .parse::<u16>()
            .map_err(|_| AddressError::BadPort { input: s.to_owned(), port: port.to_owned() })?;
        if host.contains(':') && !host_port.starts_with('[') {
            return Err(AddressError::Malformed {
                input: s.to_owned(),
                why: "brackets around IPv6",
            });
        }
        Address::new(system, host, port)
    }
}

/// Why text is not an [`Address`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AddressError {
    /// The text lacks a required part.
    #[error(
        "invalid address {input:?}: missing {why}; expected convoke://<system>@<host>:<port> \
         (IPv6 hosts in brackets)"
    )]
    Malformed {
        /// The text given.
        input: String,
        /// The part that is missing.
        why: &'static str,
    },
    /// The port is not a number in 0..=65535.
    #[error("invalid address {input:?}: port {port:?} is not a number from 0 to 65535")]
    BadPort {
        /// The text given.
        input: String,
        /// The port text.
        port: String,
    },
    /// The system name is empty.
    #[error("invalid address: the system name is empty")]
    EmptySystem,
    /// The system name holds a character outside `[A-Za-z0-9_-]`.
    #[error(
        "invalid system name {system:?}: {bad:?} is not allowed (use letters, digits, '-', '_')"
    )]
    BadSystem {
        /// The system name.
        system: String,
        /// The first offending character.
        bad: char,
    },
    /// The host is empty.
    #[error("invalid address: the host is empty")]
    EmptyHost,
    /// The host holds a character that cannot appear in a host.
    #[error("invalid host {host:?}: {bad:?} is not allowed")]
    BadHost {
        /// The host.
        host: String,
        /// The first offending character.
        bad: char,
    },
}

/// The random, non-zero identifier of one incarnation of a node.
///
/// Held as 64 bits and shown everywhere (JSON, logs, `Display`) as a *signed* 64-bit number, the
/// type Java and Scala clients and OpenAPI's `int64` read. Uids this crate makes
/// ([`Uid::from_random_bits`]) are positive, so they read the same either way; a uid with the top
/// bit set (from a peer that drew all 64 bits, as Akka and Pekko nodes do) shows as negative.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Uid(NonZeroU64);

impl Uid {
    /// Wraps a non-zero value; `None` for zero.
    pub fn new(value: u64) -> Option<Self> {
        NonZeroU64::new(value).map(Self)
    }

    /// A uid from random bits: their low 63 bits, a positive signed 64-bit number; `None` when
    /// those are all zero.
    pub fn from_random_bits(bits: u64) -> Option<Self> {
        Self::new(bits & i64::MAX.unsigned_abs())
    }

    /// The uid a signed 64-bit number names (the same 64 bits); `None` for zero.
    pub fn from_signed(value: i64) -> Option<Self> {
        Self::new(u64::from_ne_bytes(value.to_ne_bytes()))
    }

    /// The raw value.
    pub fn get(self) -> u64 {
        self.0.get()
    }

    /// The uid as a signed 64-bit number (the same 64 bits): the form every output uses.
    pub fn signed(self) -> i64 {
        i64::from_ne_bytes(self.get().to_ne_bytes())
    }
}

impl fmt::Display for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.signed().fmt(f)
    }
}

/// One incarnation of a node: its [`Address`] plus a [`Uid`]. A restart on the same host:port is a
/// new `UniqueAddress`. Ordered by address, then uid.
#[derive(Clone, Debug, Eq, PartialOrd, Ord)]
pub struct UniqueAddress {
    /// Where the node listens.
    pub address: Address,
    /// Which incarnation.
    pub uid: Uid,
}

/// Equal when both parts are. The uid, held inline, is compared first: two nodes almost always
/// differ in it, and then the address behind its pointer is not read.
impl PartialEq for UniqueAddress {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.uid == other.uid && self.address == other.address
    }
}

impl std::hash::Hash for UniqueAddress {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.address.hash(state);
        self.uid.hash(state);
    }
}

impl UniqueAddress {
    /// Pairs an address with a uid.
    pub fn new(address: Address, uid: Uid) -> Self {
        Self { address, uid }
    }
}

impl fmt::Display for UniqueAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.address, self.uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> Address {
        s.parse().unwrap()
    }

    #[test]
    fn addresses_order_by_host_bytes_then_port_then_system() {
        let hosts = [
            "10.0.0.10",
            "10.0.0.9",
            "10.0.0.1",
            "10.0.0.1x",
            "a",
            "ab",
            "abcdefghijklmnop",
            "abcdefghijklmnopq",
            "abcdefghijklmnopa",
            "abcdefghijklmnop-long.example",
            "abcdefghijklmno",
        ];
        let mut all = Vec::new();
        for host in hosts {
            for port in [1, 2] {
                for system in ["a", "b"] {
                    all.push(Address::new(system, host, port).unwrap());
                }
            }
        }
        let key = |a: &Address| (a.host().as_bytes().to_vec(), a.port(), a.system().to_owned());
        for a in &all {
            for b in &all {
                assert_eq!(a.cmp(b), key(a).cmp(&key(b)), "{a} vs {b}");
                assert_eq!(a == b, key(a) == key(b), "{a} vs {b}");
                // A copy built from scratch equals the original and orders with it.
                let copy: Address = a.to_string().parse().unwrap();
                assert_eq!(copy.cmp(b), a.cmp(b), "{copy} vs {b}");
            }
        }
    }

    #[test]
    fn parses_and_displays_the_canonical_form() {
        let a = addr("convoke://orders@10.0.0.7:25520");
        assert_eq!(a.system(), "orders");
        assert_eq!(a.host(), "10.0.0.7");
        assert_eq!(a.port(), 25520);
        assert_eq!(a.to_string(), "convoke://orders@10.0.0.7:25520");
    }

    #[test]
    fn ipv6_hosts_are_bracketed_in_text_and_bare_inside() {
        let a = addr("convoke://convoke@[::1]:25520");
        assert_eq!(a.host(), "::1");
        assert_eq!(a.host_port(), "[::1]:25520");
        assert_eq!(a.to_string(), "convoke://convoke@[::1]:25520");
        assert_eq!(Address::new("convoke", "[fe80::1]", 1).unwrap().host(), "fe80::1");
    }

    #[test]
    fn malformed_text_is_rejected_with_a_message_naming_input_and_format() {
        for bad in [
            "",
            "convoke:/x@h:1",
            "pekko://x@h:1",
            "convoke://h:1",
            "convoke://x@h",
            "convoke://x@h:99999",
            "convoke://x@h:port",
            "convoke://x@::1:5",
            "convoke://x@[::1:5",
            "convoke://@h:1",
            "convoke://x@:1",
            "convoke://a b@h:1",
        ] {
            let err = bad.parse::<Address>().unwrap_err();
            let msg = err.to_string();
            assert!(!msg.is_empty(), "{bad}");
            if let AddressError::Malformed { input, .. } | AddressError::BadPort { input, .. } =
                &err
            {
                assert_eq!(input, bad);
                assert!(msg.contains("convoke://") || msg.contains("port"), "{msg}");
            }
        }
    }

    #[test]
    fn addresses_order_by_host_bytes_then_port() {
        let mut v = [
            addr("convoke://s@b:1"),
            addr("convoke://s@a:2"),
            addr("convoke://s@a:10"),
            addr("convoke://s@10.0.0.9:1"),
            addr("convoke://s@10.0.0.10:1"),
        ];
        v.sort();
        let hosts: Vec<String> = v.iter().map(Address::host_port).collect();
        assert_eq!(hosts, ["10.0.0.10:1", "10.0.0.9:1", "a:2", "a:10", "b:1"]);
    }

    #[test]
    fn unique_addresses_order_by_address_then_uid() {
        let a = UniqueAddress::new(addr("convoke://s@a:1"), Uid::new(9).unwrap());
        let b = UniqueAddress::new(addr("convoke://s@a:1"), Uid::new(u64::MAX).unwrap());
        let c = UniqueAddress::new(addr("convoke://s@a:2"), Uid::new(1).unwrap());
        assert!(a < b && b < c);
        assert_ne!(a, b);
    }

    #[test]
    fn uid_is_never_zero() {
        assert!(Uid::new(0).is_none());
        assert_eq!(Uid::new(7).unwrap().get(), 7);
    }

    #[test]
    fn uids_are_made_positive_and_shown_signed() {
        for bits in [u64::MAX, 1 << 63 | 5, 0x8000_0000_0000_0001, 42] {
            let uid = Uid::from_random_bits(bits).unwrap();
            assert!(uid.signed() > 0, "{bits:#x} gave {uid}");
            assert_eq!(uid.to_string(), uid.get().to_string());
        }
        assert!(Uid::from_random_bits(1 << 63).is_none());
        let pekko = Uid::from_signed(-7_013_413_219_127_341_522).unwrap();
        assert_eq!(pekko.signed(), -7_013_413_219_127_341_522);
        assert_eq!(pekko.to_string(), "-7013413219127341522");
        assert_eq!(Uid::from_signed(pekko.signed()), Some(pekko));
        assert!(Uid::from_signed(0).is_none());
    }
}
