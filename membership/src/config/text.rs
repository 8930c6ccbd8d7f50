//! How settings values are written as text: durations (`"500ms"`, `"5s"`, `"1.5s"`), and
//! switches that are `"on"`, `"off"` or a duration. The runtime's TOML, environment and `--set`
//! layers and the simulator's command line all read durations here, so every place accepts the
//! same forms and reports a bad one the same way.
//!
//! With the `serde` feature, the same forms are read and written by serde: `duration` and
//! `opt_port` for `#[serde(with = "...")]`, and the `Serialize`/`Deserialize` impls of
//! [`SwitchDuration`]. A value that does not read fails with the message
//! `"<value>" is not valid: expected <what the key accepts>`, which the runtime splits at
//! `" is not valid: expected "` to report the value and the expectation separately.

use std::fmt;
use std::time::Duration;

use super::ConfigError;

const DURATION_EXPECTED: &str =
    "a duration: a number and a unit (ns, us, ms, s, m, h, d), like \"500ms\", \"5s\" or \"1.5s\"";

/// A setting that is `"on"` (with a default that depends on the setting), `"off"`, or an
/// explicit duration. Read with [`parse_switch_duration`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SwitchDuration {
    /// `"on"`: the setting's default duration.
    On,
    /// `"off"`: disabled.
    Off,
    /// An explicit duration.
    After(Duration),
}

impl SwitchDuration {
    /// The effective duration, given what `On` means for this setting; `None` when off.
    pub fn resolve(self, on: Duration) -> Option<Duration> {
        match self {
            Self::On => Some(on),
            Self::Off => None,
            Self::After(d) => Some(d),
        }
    }
}

impl fmt::Display for SwitchDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::On => f.write_str("on"),
            Self::Off => f.write_str("off"),
            Self::After(d) => f.write_str(&format_duration(*d)),
        }
    }
}

/// Reads a duration such as `"500ms"`, `"5s"`, `"2m"`, `"1h"` or `"1.5s"`: a non-negative decimal
/// number and one of the units `ns`, `us`, `ms`, `s`, `m`, `h`, `d`. Zero is accepted here;
/// [`Config::validate`](super::Config::validate) decides where it is allowed.
///
/// # Errors
/// A [`ConfigError`] for `key` when the text is empty, negative, has no or an unknown unit, is
/// finer than a nanosecond or too large.
pub fn parse_duration(key: &str, text: &str) -> Result<Duration, ConfigError> {
    let bad = || ConfigError::new(key, format!("{text:?}"), DURATION_EXPECTED);
    let trimmed = text.trim();
    let split = trimmed.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
    let (number, unit) = trimmed.split_at(split);
    let unit_nanos: u128 = match unit.trim_start() {
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60 * 1_000_000_000,
        "h" => 60 * 60 * 1_000_000_000,
        "d" => 24 * 60 * 60 * 1_000_000_000,
        _ => return Err(bad()),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || (number.contains('.') && !digits(fraction)) || fraction.len() > 9 {
        return Err(bad());
    }
    let whole: u128 = whole.parse().map_err(|_| bad())?;
    let scale = 10u128.pow(fraction.len() as u32);
    let fraction: u128 =
        if fraction.is_empty() { 0 } else { fraction.parse().map_err(|_| bad())? };
    if !(fraction * unit_nanos).is_multiple_of(scale) {
        return Err(bad());
    }
    let nanos = whole
        .checked_mul(unit_nanos)
        .and_then(|n| n.checked_add(fraction * unit_nanos / scale))
        .ok_or_else(bad)?;
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| bad())?;
    Ok(Duration::new(secs, (nanos % 1_000_000_000) as u32))
}

/// Reads `"on"`, `"off"` (any case) or a duration as [`parse_duration`] does, for keys such as
/// `cluster.allow_weakly_up_members`. What `"on"` means is up to the key; see
/// [`SwitchDuration::resolve`].
///
/// # Errors
/// A [`ConfigError`] for `key` when the text is neither.
pub fn parse_switch_duration(key: &str, text: &str) -> Result<SwitchDuration, ConfigError> {
    let trimmed = text.trim();
    if trimmed.eq_ignore_ascii_case("on") {
        return Ok(SwitchDuration::On);
    }
    if trimmed.eq_ignore_ascii_case("off") {
        return Ok(SwitchDuration::Off);
    }
    parse_duration(key, text).map(SwitchDuration::After).map_err(|mut e| {
        e.expected = format!("\"on\", \"off\" or {DURATION_EXPECTED}");
        e
    })
}

/// Writes a duration in the form [`parse_duration`] reads, in the largest unit up to hours that
/// represents it exactly: `"24h"`, `"1500ms"`, `"0s"`.
pub fn format_duration(d: Duration) -> String {
    const UNITS: [(u128, &str); 6] = [
        (60 * 60 * 1_000_000_000, "h"),
        (60 * 1_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
        (1, "ns"),
    ];
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    let (size, unit) =
        UNITS.into_iter().find(|(size, _)| nanos.is_multiple_of(*size)).unwrap_or((1, "ns"));
    format!("{}{unit}", nanos / size)
}

/// Builds the message of a value that does not read, in the one form the runtime's error reporter
/// takes apart: the value, then `" is not valid: expected "`, then what the key accepts.
#[cfg(feature = "serde")]
pub(super) fn not_valid(text: &str, expected: &str) -> String {
    format!("{text:?} is not valid: expected {expected}")
}

/// Reads the text of a value written as a string or a number, so that `5` and `"5"` both reach
/// the parser; a bool reads as `"on"` or `"off"`. The argument is what serde reports as expected
/// when the value is of another type (a table, a list).
#[cfg(feature = "serde")]
pub(super) fn deserialize_text<'de, D: serde::Deserializer<'de>>(
    d: D,
    expecting: &'static str,
) -> Result<String, D::Error> {
    d.deserialize_any(TextVisitor(expecting))
}

#[cfg(feature = "serde")]
struct TextVisitor(&'static str);

#[cfg(feature = "serde")]
impl serde::de::Visitor<'_> for TextVisitor {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_owned())
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<String, E> {
        Ok(if v { "on" } else { "off" }.to_owned())
    }
}

/// A [`Duration`] written as text (`"500ms"`, `"5s"`, `"1.5s"`), for
/// `#[serde(with = "convoke_membership::config::text::duration")]`. Reads what
/// [`parse_duration`] reads, writes what [`format_duration`] writes.
#[cfg(feature = "serde")]
pub mod duration {
    use std::time::Duration;

    use serde::{Deserializer, Serializer, de::Error as _};

    use super::{deserialize_text, format_duration, not_valid, parse_duration};

    /// Writes `d` as [`format_duration`] does.
    ///
    /// # Errors
    /// Whatever the serializer reports.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(*d))
    }

    /// Reads a duration as [`parse_duration`] does, from a string or a number.
    ///
    /// # Errors
    /// `"<text>" is not valid: expected <what a duration looks like>` for text that is not a
    /// duration.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = deserialize_text(d, "a duration like \"500ms\" or \"5s\"")?;
        parse_duration("", &text).map_err(|e| D::Error::custom(not_valid(&text, &e.expected)))
    }
}

/// A port that may be left empty: `""` is `None` (for instance "the same as the advertised
/// port"), for `#[serde(with = "convoke_membership::config::text::opt_port")]` on an
/// `Option<u16>`.
#[cfg(feature = "serde")]
pub mod opt_port {
    use serde::{Deserializer, Serializer, de::Error as _};

    use super::{deserialize_text, not_valid};

    const EXPECTED: &str = "a port number from 0 to 65535, or \"\"";

    /// Writes the port as a number, `None` as `""`.
    ///
    /// # Errors
    /// Whatever the serializer reports.
    pub fn serialize<S: Serializer>(port: &Option<u16>, s: S) -> Result<S::Ok, S::Error> {
        match port {
            Some(p) => s.serialize_u16(*p),
            None => s.serialize_str(""),
        }
    }

    /// Reads a port number (as a number or a string), or `""` (blank) as `None`.
    ///
    /// # Errors
    /// `"<text>" is not valid: expected a port number from 0 to 65535, or ""` for anything else.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u16>, D::Error> {
        let text = deserialize_text(d, EXPECTED)?;
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Ok(None);
        }
        trimmed.parse::<u16>().map(Some).map_err(|_| D::Error::custom(not_valid(&text, EXPECTED)))
    }
}

/// A switch with no `"on"` (`"off"` or a duration: `None` or `Some`), for
/// `#[serde(with = "convoke_membership::config::text::off_or_duration")]`, where no delay suits
/// every deployment.
#[cfg(feature = "serde")]
pub mod off_or_duration {
    pub use super::serialize_switch as serialize;

    /// Reads `"off"` or a duration; `"on"` is refused, naming what the key accepts.
    ///
    /// # Errors
    /// When the value is neither.
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<std::time::Duration>, D::Error> {
        super::deserialize_switch(d, Err("\"off\" or a duration like \"60s\""))
    }
}

/// Writes a switch whose `"on"` has been resolved: `"off"` for `None`, else the duration.
#[cfg(feature = "serde")]
pub fn serialize_switch<S: serde::Serializer>(
    d: &Option<Duration>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_str(&format_duration(*d)),
        None => s.serialize_str("off"),
    }
}

/// Reads a switch and resolves `"on"` to `on`; where the key has no `"on"`, `on` is the
/// `Err` of what the key accepts instead.
#[cfg(feature = "serde")]
pub(super) fn deserialize_switch<'de, D: serde::Deserializer<'de>>(
    d: D,
    on: Result<Duration, &'static str>,
) -> Result<Option<Duration>, D::Error> {
    use serde::de::Error as _;
    match <SwitchDuration as serde::Deserialize>::deserialize(d)? {
        SwitchDuration::On => {
            on.map(Some).map_err(|expected| D::Error::custom(not_valid("on", expected)))
        }
        SwitchDuration::Off => Ok(None),
        SwitchDuration::After(d) => Ok(Some(d)),
    }
}

/// Written as `"on"`, `"off"` or a duration.
#[cfg(feature = "serde")]
impl serde::Serialize for SwitchDuration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Reads what [`parse_switch_duration`] reads, from a string, a number or a bool (`true` is
/// `"on"`).
#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for SwitchDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let text = deserialize_text(d, "\"on\", \"off\" or a duration like \"5s\"")?;
        parse_switch_duration("", &text)
            .map_err(|e| D::Error::custom(not_valid(&text, &e.expected)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn ms(m: u64) -> Duration {
        Duration::from_millis(m)
    }

    #[test]
    fn durations_parse_from_number_and_unit() {
        let good = [
            ("500ms", ms(500)),
            ("5s", secs(5)),
            ("2m", secs(120)),
            ("1h", secs(3600)),
            ("24h", secs(24 * 3600)),
            ("1d", secs(24 * 3600)),
            ("1.5s", ms(1500)),
            ("0.25s", ms(250)),
            ("0s", Duration::ZERO),
            ("0ms", Duration::ZERO),
            ("250us", Duration::from_micros(250)),
            ("7ns", Duration::from_nanos(7)),
            ("1.000000001s", Duration::new(1, 1)),
            (" 3s ", secs(3)),
            ("3 s", secs(3)),
            ("007s", secs(7)),
        ];
        for (text, want) in good {
            assert_eq!(parse_duration("k", text), Ok(want), "{text:?}");
        }
    }

    #[test]
    fn bad_durations_are_rejected_naming_the_key() {
        let bad = [
            "",
            " ",
            "s",
            "5",
            "-1s",
            "-0s",
            "+1s",
            "1.s",
            ".5s",
            "1..5s",
            "1.5.5s",
            "5sec",
            "5S",
            "5 parsecs",
            "1e3ms",
            "1,5s",
            "0x10s",
            "1s 2s",
            "0.5ns",
            "1.0000000001s",
            "99999999999999999999999h",
            "999999999999999999999999999999999999999999s",
            "inf s",
            "off",
        ];
        for text in bad {
            let err = parse_duration("cluster.gossip_interval", text).expect_err(text);
            assert_eq!(err.key, "cluster.gossip_interval");
            assert_eq!(err.value, format!("{text:?}"));
            assert!(err.expected.contains("\"500ms\""), "{}", err.expected);
        }
    }

    #[test]
    fn switch_durations_read_on_off_or_a_duration() {
        let key = "cluster.allow_weakly_up_members";
        assert_eq!(parse_switch_duration(key, "on"), Ok(SwitchDuration::On));
        assert_eq!(parse_switch_duration(key, "OFF"), Ok(SwitchDuration::Off));
        assert_eq!(parse_switch_duration(key, " off "), Ok(SwitchDuration::Off));
        assert_eq!(parse_switch_duration(key, "7s"), Ok(SwitchDuration::After(secs(7))));
        for bad in ["", "yes", "true", "-7s", "onn"] {
            let err = parse_switch_duration(key, bad).expect_err(bad);
            assert_eq!(err.key, key);
            assert!(err.expected.starts_with("\"on\", \"off\" or a duration"), "{}", err.expected);
        }
        assert_eq!(SwitchDuration::On.resolve(secs(7)), Some(secs(7)));
        assert_eq!(SwitchDuration::Off.resolve(secs(7)), None);
        assert_eq!(SwitchDuration::After(secs(3)).resolve(secs(7)), Some(secs(3)));
        assert_eq!(SwitchDuration::After(ms(1500)).to_string(), "1500ms");
    }

    #[test]
    fn formatted_durations_read_back_the_same() {
        let cases = [
            (Duration::ZERO, "0s"),
            (secs(24 * 3600), "24h"),
            (secs(120), "2m"),
            (secs(90), "90s"),
            (ms(1500), "1500ms"),
            (ms(100), "100ms"),
            (Duration::from_micros(3), "3us"),
            (Duration::new(1, 1), "1000000001ns"),
        ];
        for (d, text) in cases {
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration("k", text), Ok(d));
        }
    }

    #[cfg(feature = "serde")]
    mod serde {
        use std::time::Duration;

        use serde::{Deserialize, Serialize};

        use super::super::{SwitchDuration, duration, opt_port};

        #[derive(Debug, PartialEq, Serialize, Deserialize)]
        struct Values {
            #[serde(with = "duration")]
            interval: Duration,
            #[serde(with = "opt_port")]
            port: Option<u16>,
            switch: SwitchDuration,
        }

        fn read(toml_text: &str) -> Result<Values, String> {
            toml::from_str(toml_text).map_err(|e| e.message().to_owned())
        }

        #[test]
        fn values_read_from_strings_numbers_and_bools() {
            let v = read("interval = \"1.5s\"\nport = 25520\nswitch = \"on\"").unwrap();
            assert_eq!(
                v,
                Values {
                    interval: Duration::from_millis(1500),
                    port: Some(25520),
                    switch: SwitchDuration::On
                }
            );
            let v = read("interval = \"0s\"\nport = \"\"\nswitch = false").unwrap();
            assert_eq!(v.port, None);
            assert_eq!(v.switch, SwitchDuration::Off);
            let v = read("interval = \"2m\"\nport = \" 8558 \"\nswitch = \"7s\"").unwrap();
            assert_eq!(v.interval, Duration::from_secs(120));
            assert_eq!(v.port, Some(8558));
            assert_eq!(v.switch, SwitchDuration::After(Duration::from_secs(7)));
            let v: Values =
                serde_json::from_str(r#"{"interval": "5s", "port": "1", "switch": true}"#).unwrap();
            assert_eq!(v.switch, SwitchDuration::On);
        }

        #[test]
        fn values_write_as_they_read() {
            let v = Values {
                interval: Duration::from_millis(1500),
                port: None,
                switch: SwitchDuration::After(Duration::from_secs(60)),
            };
            let json = serde_json::to_string(&v).unwrap();
            assert_eq!(json, r#"{"interval":"1500ms","port":"","switch":"1m"}"#);
            assert_eq!(serde_json::from_str::<Values>(&json).unwrap(), v);
            let v = Values { port: Some(0), switch: SwitchDuration::Off, ..v };
            let text = toml::to_string(&v).unwrap();
            assert_eq!(read(&text).unwrap(), v);
            assert!(text.contains("switch = \"off\""), "{text}");
        }

        #[test]
        fn bad_values_name_the_value_and_the_expectation() {
            let ok = "interval = \"1s\"\nport = 1\nswitch = \"on\"\n";
            let cases = [
                ("interval = 5", "\"5\" is not valid: expected a duration: a number and a unit"),
                ("interval = true", "\"on\" is not valid: expected a duration: a number"),
                (
                    "port = 70000",
                    "\"70000\" is not valid: expected a port number from 0 to 65535, or \"\"",
                ),
                ("port = -1", "\"-1\" is not valid: expected a port number"),
                ("port = \"http\"", "\"http\" is not valid: expected a port number"),
                (
                    "switch = \"yes\"",
                    "\"yes\" is not valid: expected \"on\", \"off\" or a duration: a",
                ),
                ("switch = 1.5", "\"1.5\" is not valid: expected \"on\", \"off\" or a duration"),
            ];
            for (line, want) in cases {
                let key = line.split(' ').next().unwrap();
                let text: String = ok
                    .lines()
                    .map(|l| if l.starts_with(key) { line } else { l })
                    .collect::<Vec<_>>()
                    .join("\n");
                let err = read(&text).expect_err(line);
                assert!(err.starts_with(want), "{line}: {err}");
            }
            let err = read("interval = [1]\nport = 1\nswitch = \"on\"").unwrap_err();
            assert!(err.contains("a duration like \"500ms\" or \"5s\""), "{err}");
        }
    }
}
