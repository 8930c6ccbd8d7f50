//! The trace hash: a fingerprint of everything that happened in a run, to prove that running the
//! same seed twice does the same thing.
//!
//! FNV-1a over the step stream (time, node, input kind, sender, emitted event types). It is
//! written here rather than taken from `std` because `DefaultHasher` does not promise the same
//! output across Rust releases, and a trace hash is only useful if it is stable.

use std::hash::Hasher;

/// A 64-bit FNV-1a hasher.
#[derive(Clone, Debug)]
pub struct TraceHash(u64);

impl TraceHash {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    /// An empty trace.
    pub fn new() -> Self {
        Self(Self::OFFSET)
    }
}

impl Default for TraceHash {
    fn default() -> Self {
        Self::new()
    }
}

impl Hasher for TraceHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_fnv1a_reference_values() {
        let mut h = TraceHash::new();
        assert_eq!(h.finish(), 0xcbf2_9ce4_8422_2325);
        h.write(b"a");
        assert_eq!(h.finish(), 0xaf63_dc4c_8601_ec8c);
    }
}
