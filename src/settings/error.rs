//! [`SettingsError`]: one bad setting, named by its dotted key, with the value and what would
//! be accepted; and the translation of figment's and serde's errors into it.

use convoke_membership::config::ConfigError;

/// A setting that cannot be used: which key, the value, what was expected, and where it came from.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: {key} = {value}: expected {expected}{origin}")]
pub struct SettingsError {
    /// The dotted key (`cluster.port`).
    pub key: String,
    /// The offending value, as given.
    pub value: String,
    /// What would be accepted.
    pub expected: String,
    /// `" (from ...)"` naming the layer the value came from, or empty.
    pub origin: String,
}

impl SettingsError {
    /// An error for `key`, whose `value` is not what was `expected`.
    pub fn new(
        key: impl Into<String>,
        value: impl Into<String>,
        expected: impl Into<String>,
    ) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
            expected: expected.into(),
            origin: String::new(),
        }
    }
}

impl From<ConfigError> for SettingsError {
    fn from(e: ConfigError) -> Self {
        Self::new(e.key, e.value, e.expected)
    }
}

/// The error of extracting the table at `prefix` (`""` for the whole file).
pub(super) fn from_figment(prefix: &str, e: figment::Error) -> SettingsError {
    use figment::error::Kind;
    let key = prefix
        .split('.')
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .chain(e.path.iter().filter(|p| p.as_str() != "default").cloned())
        .collect::<Vec<_>>()
        .join(".");
    let origin = origin(e.metadata.as_ref());
    let (key, value, expected) = match &e.kind {
        Kind::UnknownField(field, expected) => {
            return unknown_key(join_key(&key, field), expected, origin);
        }
        Kind::InvalidType(actual, expected) => (key, actual.to_string(), expected.clone()),
        Kind::InvalidValue(actual, expected) => (key, actual.to_string(), expected.clone()),
        Kind::InvalidLength(len, expected) => (key, format!("{len} elements"), expected.clone()),
        Kind::UnknownVariant(v, expected) => {
            (key, format!("{v:?}"), format!("one of {}", expected.join(", ")))
        }
        Kind::Message(msg) => match msg.split_once(" is not valid: expected ") {
            Some((value, expected)) => (key, value.to_owned(), expected.to_owned()),
            None => (key, String::new(), msg.clone()),
        },
        other => (key, String::new(), other.to_string()),
    };
    SettingsError { key, value, expected: plain_expected(&expected), origin }
}

/// `" (from ...)"` naming the layer a value came from, as [`SettingsError::origin`] shows it.
pub(super) fn origin(metadata: Option<&figment::Metadata>) -> String {
    metadata
        .map(|m| match m.source.as_ref() {
            Some(figment::Source::File(path)) => format!(" (from {})", path.display()),
            _ if m.name.contains("environment") => " (from the CONVOKE_* environment)".to_owned(),
            _ if m.name.contains("string") => " (from --set)".to_owned(),
            _ => String::new(),
        })
        .unwrap_or_default()
}

/// A key no table has, among the `known` keys of its table.
pub(super) fn unknown_key(key: String, known: &[&str], origin: String) -> SettingsError {
    SettingsError {
        key,
        value: "(unknown key)".to_owned(),
        expected: format!("one of the known keys: {}", known.join(", ")),
        origin,
    }
}

/// serde names Rust types ("u16"); say what a user may write instead.
fn plain_expected(expected: &str) -> String {
    match expected {
        "u16" => "a whole number from 0 to 65535".to_owned(),
        "usize" | "u64" | "u32" => "a whole number of 0 or more".to_owned(),
        "f64" | "f32" => "a number".to_owned(),
        "a boolean" | "bool" => "true or false".to_owned(),
        "a sequence" => "a list, like [\"a\", \"b\"]".to_owned(),
        "a string" => "a quoted string".to_owned(),
        other => other.to_owned(),
    }
}

fn join_key(prefix: &str, field: &str) -> String {
    if prefix.is_empty() {
        field.to_owned()
    } else if prefix == field || prefix.ends_with(&format!(".{field}")) {
        prefix.to_owned()
    } else {
        format!("{prefix}.{field}")
    }
}
