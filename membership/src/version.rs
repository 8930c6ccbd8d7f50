//! Application versions (`app_version`), carried in Join and stored in each member.

use std::cmp::Ordering;
use std::fmt;

/// An application version such as `1.2.3`, `1.0.0-RC1` or the dynver form `1.2.3+4-abcd1234`.
///
/// Parsed into four numbers (missing ones are 0) and a rest. Numbers compare first; with equal
/// numbers a version without a rest is newer than one with (`1.0.0 > 1.0.0-RC1`), otherwise the
/// rests compare as strings. Text that does not start with a number is all zeros plus that rest.
#[derive(Clone, Debug)]
pub struct AppVersion {
    text: String,
    numbers: [u64; 4],
    rest: String,
}

impl AppVersion {
    /// Parses a version; never fails (unparsable text becomes zeros plus a rest).
    pub fn parse(text: &str) -> Self {
        let text = text.trim();
        let (main, rest) = match text.find(['-', '+']) {
            Some(i) => (&text[..i], &text[i + 1..]),
            None => (text, ""),
        };
        let segments: Vec<&str> = main.split('.').collect();
        let numeric = segments.len() <= 3
            && segments.iter().all(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()));
        if !numeric {
            return Self { text: text.to_owned(), numbers: [0; 4], rest: text.to_owned() };
        }
        let mut numbers = [0u64; 4];
        for (slot, segment) in numbers.iter_mut().zip(&segments) {
            *slot = segment.parse().unwrap_or(u64::MAX);
        }
        // dynver `+N-hash`: N is the fourth number, the hash the rest.
        let mut rest = rest.to_owned();
        if text[main.len()..].starts_with('+') {
            let (n, hash) = rest.split_once('-').unwrap_or((rest.as_str(), ""));
            if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) {
                numbers[3] = n.parse().unwrap_or(u64::MAX);
                rest = hash.to_owned();
            }
        }
        Self { text: text.to_owned(), numbers, rest }
    }

    /// The text it was parsed from.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl Default for AppVersion {
    fn default() -> Self {
        Self::parse("0.0.0")
    }
}

impl fmt::Display for AppVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Ord for AppVersion {
    fn cmp(&self, other: &Self) -> Ordering {
        self.numbers.cmp(&other.numbers).then_with(|| {
            match (self.rest.is_empty(), other.rest.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => self.rest.cmp(&other.rest),
            }
        })
    }
}

impl PartialOrd for AppVersion {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for AppVersion {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for AppVersion {}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> AppVersion {
        AppVersion::parse(s)
    }

    #[test]
    fn missing_segments_are_zero() {
        assert_eq!(v("1"), v("1.0.0"));
        assert_eq!(v("1.2"), v("1.2.0"));
    }

    #[test]
    fn numbers_compare_numerically_not_as_text() {
        assert!(v("1.10.0") > v("1.9.0"));
        assert!(v("2") > v("1.99.99"));
    }

    #[test]
    fn a_release_is_newer_than_its_qualified_pre_release() {
        assert!(v("1.0.0") > v("1.0.0-RC1"));
        assert!(v("1.0.0-RC2") > v("1.0.0-RC1"));
        assert!(v("1.0.1-M1") > v("1.0.0"));
    }

    #[test]
    fn dynver_commit_count_compares_numerically() {
        assert!(v("1.2.3+10-abcd") > v("1.2.3+9-ffff"));
        assert!(v("1.2.3+1-abcd") > v("1.2.3"));
    }

    #[test]
    fn a_non_numeric_version_is_zeros_plus_rest() {
        assert!(v("alpha") < v("0.0.1"));
        assert!(v("beta") > v("alpha"));
        assert_eq!(v("abc").to_string(), "abc");
    }
}
