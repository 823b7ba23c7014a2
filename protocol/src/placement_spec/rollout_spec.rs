//! A placement's `rollout` as written: its waves, the gate between them, how many
//! clusters may be unavailable at once, and what a failed gate does. The state machine
//! that drives a rollout is in [`crate::rollout`].

use serde::{Deserialize, Deserializer, Serialize};

use super::Seconds;
use crate::selector::LabelSelector;

/// A placement's `rollout`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutSpec {
    /// Ordered waves; the last also takes every cluster no earlier wave took.
    pub waves: Vec<Wave>,
    /// The gate between waves.
    #[serde(default)]
    pub gate: Gate,
    /// At most this many (or this share, rounded up) of a wave's clusters updating or
    /// unavailable at once: the root releases a wave in batches, the next when enough
    /// of the last became available (at least one cluster at a time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<Amount>,
    /// What a failed gate does.
    #[serde(default)]
    pub on_failure: OnFailure,
}

/// One wave: exactly one of `clusters`, `percent`, `selector`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Wave {
    /// A name shown in status (default: `wave-N`, from 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// This many more clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<u32>,
    /// Up to this percentage of all the placement's clusters in total (rounded up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<u32>,
    /// Every cluster left that matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// How big a wave is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaveSize<'a> {
    /// This many more clusters.
    Clusters(u32),
    /// Up to this cumulative percentage.
    Percent(u32),
    /// Every cluster left that matches.
    Selector(&'a LabelSelector),
}

impl Wave {
    /// Its size (validated specs have exactly one; `percent: 100` otherwise).
    pub fn size(&self) -> WaveSize<'_> {
        match (&self.clusters, &self.percent, &self.selector) {
            (Some(n), _, _) => WaveSize::Clusters(*n),
            (_, Some(p), _) => WaveSize::Percent(*p),
            (_, _, Some(s)) => WaveSize::Selector(s),
            _ => WaveSize::Percent(100),
        }
    }

    /// Its name in status: given, or `wave-N` (N from 1).
    pub fn display_name(&self, index: usize) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("wave-{}", index + 1))
    }
}

/// A count or a percentage: `3` or `"10%"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Amount {
    /// A number of clusters.
    Count(u32),
    /// A percentage.
    Percent(u32),
}

/// A number or a text, as a count or a percentage may be written.
#[derive(Deserialize)]
#[serde(untagged)]
enum Raw {
    N(u32),
    S(String),
}

impl<'de> Deserialize<'de> for Amount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(Amount::Count(n)),
            Raw::S(s) => parse_percent(&s)
                .map(Amount::Percent)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// A percentage written `95%` or `95`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Percent(pub u32);

impl<'de> Deserialize<'de> for Percent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let p = match Raw::deserialize(d)? {
            Raw::N(n) => n,
            Raw::S(s) => parse_percent(&s).map_err(serde::de::Error::custom)?,
        };
        if p > 100 {
            return Err(serde::de::Error::custom(format!("{p}% is more than 100%")));
        }
        Ok(Percent(p))
    }
}

fn parse_percent(text: &str) -> Result<u32, String> {
    text.trim()
        .trim_end_matches('%')
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a percentage (like 95%)"))
}

/// The gate between waves, on the health of every cluster released so far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Gate {
    /// At least this share of the released clusters available (every object).
    #[serde(default = "all")]
    pub available: Percent,
    /// At most this many released clusters failed (any object).
    #[serde(default)]
    pub max_failed: u64,
    /// Both held this long.
    #[serde(default, rename = "for")]
    pub hold: Seconds,
    /// The gate fails when it has not passed this long after its wave was released.
    #[serde(default = "default_timeout")]
    pub timeout: Seconds,
}

fn all() -> Percent {
    Percent(100)
}

fn default_timeout() -> Seconds {
    Seconds(15 * 60)
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            available: all(),
            max_failed: 0,
            hold: Seconds(0),
            timeout: default_timeout(),
        }
    }
}

/// What a failed gate does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OnFailure {
    /// Every cluster goes back to the previous revision.
    #[default]
    Rollback,
    /// The rollout stops where it is until resumed.
    Pause,
}

impl RolloutSpec {
    /// What serde cannot check: at least one wave, each of exactly one size, sizes
    /// that mean something. Errors name the field (`waves[1]`) and the fault.
    pub fn validate(&self) -> Result<(), (String, String)> {
        if self.waves.is_empty() {
            return Err(("waves".into(), "needs at least one wave".into()));
        }
        for (i, w) in self.waves.iter().enumerate() {
            let field = format!("waves[{i}]");
            let given = [
                w.clusters.is_some(),
                w.percent.is_some(),
                w.selector.is_some(),
            ]
            .iter()
            .filter(|g| **g)
            .count();
            if given != 1 {
                return Err((
                    field,
                    "needs exactly one of clusters, percent, selector".into(),
                ));
            }
            match w.size() {
                WaveSize::Clusters(0) => {
                    return Err((format!("{field}.clusters"), "must be at least 1".into()));
                }
                WaveSize::Percent(p) if p == 0 || p > 100 => {
                    return Err((format!("{field}.percent"), "must be from 1 to 100".into()));
                }
                WaveSize::Selector(s) => {
                    if let Err(errors) = s.validate() {
                        let e = &errors[0];
                        return Err((format!("{field}.selector.{}", e.field), e.reason.clone()));
                    }
                }
                _ => {}
            }
        }
        if let Some(Amount::Percent(p)) = self.max_unavailable
            && p > 100
        {
            return Err(("maxUnavailable".into(), "is more than 100%".into()));
        }
        Ok(())
    }
}
