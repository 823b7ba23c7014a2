//! Lengths of time as a placement's fields write them ([`Seconds`]).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A length of time written as Kubernetes users write them: `90s`, `10m`, `1h30m`, or
/// a number of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Seconds(pub u64);

impl Seconds {
    /// Parses `10m`, `1h30m`, `45s`, `2d` or `600`.
    pub fn parse(text: &str) -> Result<Seconds, NotADuration> {
        let text = text.trim();
        if let Ok(n) = text.parse::<u64>() {
            return Ok(Seconds(n));
        }
        let mut total: u64 = 0;
        let mut digits = String::new();
        for ch in text.chars() {
            if ch.is_ascii_digit() {
                digits.push(ch);
                continue;
            }
            let unit = match ch {
                's' => 1,
                'm' => 60,
                'h' => 3600,
                'd' => 86_400,
                _ => return Err(NotADuration::new(text)),
            };
            let n: u64 = digits.parse().map_err(|_| NotADuration::new(text))?;
            total = total.saturating_add(n.saturating_mul(unit));
            digits.clear();
        }
        if !digits.is_empty() || text.is_empty() {
            return Err(NotADuration::new(text));
        }
        Ok(Seconds(total))
    }

    /// In milliseconds.
    pub fn millis(self) -> u64 {
        self.0.saturating_mul(1000)
    }
}

/// A text that [`Seconds::parse`] does not read as a length of time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a duration (like 90s, 10m, 1h30m)")]
pub struct NotADuration {
    /// The text, trimmed.
    pub text: String,
}

impl NotADuration {
    fn new(text: &str) -> Self {
        NotADuration {
            text: text.to_owned(),
        }
    }
}

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}s", self.0)
    }
}

impl Serialize for Seconds {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(Seconds(n)),
            Raw::S(s) => Seconds::parse(&s).map_err(serde::de::Error::custom),
        }
    }
}
