//! Lengths of time as scenario files write them: `250ms`, `3s`, `2m` ([`parse_duration`]),
//! and the serde adapters of the scenario's fields.

use std::time::Duration;

/// Why a scenario's duration does not parse ([`parse_duration`]); each names the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Digits only.
    #[error("{text:?}: a duration needs a unit (ms, s, m)")]
    NoUnit {
        /// The text, trimmed.
        text: String,
    },
    /// The part before the unit is not a number.
    #[error("{text:?}: not a number of {unit}")]
    NotANumber {
        /// The text, trimmed.
        text: String,
        /// The unit.
        unit: String,
    },
    /// A unit other than `ms`, `s` and `m`.
    #[error("{text:?}: unknown unit {unit:?} (ms, s, m)")]
    UnknownUnit {
        /// The text, trimmed.
        text: String,
        /// The unit.
        unit: String,
    },
}

/// Parses `250ms`, `3s`, `2m`.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map(|i| s.split_at(i))
        .ok_or_else(|| DurationError::NoUnit { text: s.to_owned() })?;
    let n: f64 = num.parse().map_err(|_| DurationError::NotANumber {
        text: s.to_owned(),
        unit: unit.to_owned(),
    })?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => {
            return Err(DurationError::UnknownUnit {
                text: s.to_owned(),
                unit: unit.to_owned(),
            });
        }
    };
    Ok(Duration::from_secs_f64(secs))
}

/// `#[serde(with = "duration")]`: a [`Duration`] written `250ms`, `3s`, `2m`.
pub(crate) mod duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        super::parse_duration(&s).map_err(serde::de::Error::custom)
    }
}

/// `#[serde(with = "opt_duration")]`: an optional [`Duration`], written as for
/// [`duration`].
pub(super) mod opt_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub(in crate::scenario) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        let s = Option::<String>::deserialize(d)?;
        s.map(|s| super::parse_duration(&s).map_err(serde::de::Error::custom))
            .transpose()
    }
}
