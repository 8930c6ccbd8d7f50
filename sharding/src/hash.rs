//! The default shard-id extractor: the shard of an entity is its id's hash modulo the number of
//! shards.
//!
//! The hash is Java's `String.hashCode` (`h = 31·h + c` over the UTF-16 code units, wrapping at
//! 32 bits), and the shard is `abs(h) % number_of_shards` with Java's `abs`, which leaves
//! `i32::MIN` negative. This is the rule Akka and Pekko use by default, kept bit for bit: it is
//! stable across platforms, releases and processes (no random seed), and an entity keeps its
//! shard number when a service moves between the two. The one oddity it inherits: an id whose
//! hash is exactly `i32::MIN` gets a negative shard number such as `"-8"`.

use super::ShardId;

/// Java's `String.hashCode` of `s`: `s[0]·31^(n-1) + … + s[n-1]` over UTF-16 code units, in
/// wrapping 32-bit arithmetic.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The shard of entity `entity_id` among `number_of_shards` shards (see the module docs).
///
/// # Panics
/// If `number_of_shards` is zero or above `i32::MAX`; [`ShardingConfig`](super::ShardingConfig)
/// is checked against both when the runtime starts a type.
pub fn shard_for_entity(entity_id: &str, number_of_shards: u32) -> ShardId {
    let n = i32::try_from(number_of_shards).expect("number_of_shards fits in an i32");
    assert!(n > 0, "number_of_shards must be positive");
    let shard = java_string_hash(entity_id).wrapping_abs() % n;
    ShardId::new(shard.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_matches_java_string_hash_code() {
        // Values of `"...".hashCode()` on the JVM.
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("hello"), 99_162_322);
        assert_eq!(java_string_hash("counter-42"), -1_029_715_985);
        assert_eq!(shard_for_entity("counter-42", 1000).as_str(), "985");
        // Non-ASCII goes by UTF-16 units: "é" is one unit (233), "😀" two (surrogates).
        assert_eq!(java_string_hash("é"), 233);
        assert_eq!(java_string_hash("😀"), 0xD83D * 31 + 0xDE00);
    }

    #[test]
    fn shard_is_the_hash_modulo_the_number_of_shards() {
        assert_eq!(shard_for_entity("hello", 1000).as_str(), "322");
        assert_eq!(shard_for_entity("a", 10).as_str(), "7");
        for i in 0..10_000 {
            let s = shard_for_entity(&format!("entity-{i}"), 100);
            let n: i32 = s.as_str().parse().unwrap();
            assert!((0..100).contains(&n), "{s:?}");
        }
    }

    #[test]
    fn an_id_hashing_to_i32_min_gets_the_negative_shard_java_gives_it() {
        // "polygenelubricants".hashCode() == Integer.MIN_VALUE on the JVM.
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        assert_eq!(shard_for_entity("polygenelubricants", 10).as_str(), "-8");
    }
}
