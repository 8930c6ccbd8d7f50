//! Value types of the settings file: durations and switches written as strings.

use std::fmt;
use std::time::Duration;

use convoke_membership::config::{
    SwitchDuration, format_duration, parse_duration, parse_switch_duration,
};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// A duration written as `"500ms"`, `"5s"`, `"2m"`, `"1.5s"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = d.deserialize_any(TextVisitor("a duration like \"500ms\" or \"5s\""))?;
        parse_duration("", &text)
            .map(Dur)
            .map_err(|e| de::Error::custom(reason(&text, &e.expected)))
    }
}

/// A duration that may be switched off: `"off"` or a duration (and `"on"` for the setting's
/// default where it has one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Switch(pub SwitchDuration);

impl Switch {
    /// The duration, or `None` when off; `on` resolves to `default_on`.
    pub fn resolve(self, default_on: Duration) -> Option<Duration> {
        self.0.resolve(default_on)
    }

    /// Off.
    pub const OFF: Switch = Switch(SwitchDuration::Off);

    /// A fixed duration.
    pub fn after(d: Duration) -> Switch {
        Switch(SwitchDuration::After(d))
    }
}

impl Serialize for Switch {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0.to_string())
    }
}

impl<'de> Deserialize<'de> for Switch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = d.deserialize_any(TextVisitor("\"on\", \"off\" or a duration like \"5s\""))?;
        parse_switch_duration("", &text)
            .map(Switch)
            .map_err(|e| de::Error::custom(reason(&text, &e.expected)))
    }
}

/// A port that may be left empty (`""`) to mean "the same as the advertised port".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct OptPort(pub Option<u16>);

impl Serialize for OptPort {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Some(p) => s.serialize_u16(p),
            None => s.serialize_str(""),
        }
    }
}

impl<'de> Deserialize<'de> for OptPort {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = d.deserialize_any(TextVisitor("a port number from 0 to 65535, or \"\""))?;
        if text.trim().is_empty() {
            return Ok(OptPort(None));
        }
        text.trim()
            .parse::<u16>()
            .map(|p| OptPort(Some(p)))
            .map_err(|_| de::Error::custom(reason(&text, "a port number from 0 to 65535, or \"\"")))
    }
}

fn reason(text: &str, expected: &str) -> String {
    format!("{text:?} is not valid: expected {expected}")
}

/// Accepts a string or a number and yields its text, so `5` and `"5"` both reach the parser.
struct TextVisitor(&'static str);

impl Visitor<'_> for TextVisitor {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_owned())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<String, E> {
        Ok(if v { "on" } else { "off" }.to_owned())
    }
}
