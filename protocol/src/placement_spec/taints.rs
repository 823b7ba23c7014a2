//! Taints on clusters and a placement's tolerations of them, with Kubernetes'
//! semantics.

use serde::{Deserialize, Serialize};

/// What a taint does to placements that do not tolerate it (Kubernetes' effects).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TaintEffect {
    /// Not chosen anew; clusters already chosen stay.
    NoSchedule,
    /// Chosen only when no other cluster will do.
    PreferNoSchedule,
    /// Not chosen, and moved off (after `tolerationSeconds` for placements that
    /// tolerate it for a while).
    NoExecute,
}

/// A taint on a cluster, set at the root (`relay cordon`, `relay drain`, or the
/// Cluster's `spec.taints`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Taint {
    /// The taint's key.
    pub key: String,
    /// Its value (may be empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// What it does.
    pub effect: TaintEffect,
    /// When it was added (Unix milliseconds; the root stamps it): `tolerationSeconds`
    /// counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_added: Option<u64>,
}

/// How a toleration compares values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum TolerationOperator {
    /// Key and value equal.
    #[default]
    Equal,
    /// Key equal (or the toleration's key empty: every key), any value.
    Exists,
}

/// A placement's toleration of taints, with Kubernetes' semantics.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Toleration {
    /// The taint key; empty with `Exists` tolerates every taint.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    /// `Equal` (default) or `Exists`.
    #[serde(default)]
    pub operator: TolerationOperator,
    /// The value `Equal` compares with.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// The effect tolerated; absent: every effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,
    /// For `NoExecute`: how long after the taint was added the placement stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
}

impl Toleration {
    /// Whether this toleration matches `taint` (Kubernetes' `ToleratesTaint`).
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => self.key.is_empty() || self.key == taint.key,
            TolerationOperator::Equal => self.key == taint.key && self.value == taint.value,
        }
    }

    /// Checks what Kubernetes' validation checks: an empty key needs `Exists`, `Exists`
    /// takes no value, `tolerationSeconds` only with `NoExecute` (or any effect).
    pub fn validate(&self) -> Result<(), TolerationError> {
        if self.key.is_empty() && self.operator != TolerationOperator::Exists {
            return Err(TolerationError::EmptyKeyNeedsExists);
        }
        if self.operator == TolerationOperator::Exists && !self.value.is_empty() {
            return Err(TolerationError::ExistsTakesNoValue);
        }
        if self.toleration_seconds.is_some()
            && self.effect.is_some_and(|e| e != TaintEffect::NoExecute)
        {
            return Err(TolerationError::SecondsOnlyForNoExecute);
        }
        Ok(())
    }
}

/// Why a [`Toleration`] is invalid ([`Toleration::validate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TolerationError {
    /// An empty key with `Equal`.
    #[error("operator must be Exists when key is empty")]
    EmptyKeyNeedsExists,
    /// `Exists` with a value.
    #[error("value must be empty when operator is Exists")]
    ExistsTakesNoValue,
    /// `tolerationSeconds` with an effect other than `NoExecute`.
    #[error("tolerationSeconds is only for the NoExecute effect")]
    SecondsOnlyForNoExecute,
}
