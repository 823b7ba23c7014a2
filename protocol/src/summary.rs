//! The summary algebra: a mergeable aggregate of many clusters' statuses for one object.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::Revision;
use crate::time::UnixMillis;

/// Aggregate of the statuses of one object on many clusters.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Summary {
    /// Clusters the placement selects.
    pub expected: u64,
    /// Clusters that reported.
    pub reporting: u64,
    /// Count per health state, indexed like [`crate::model::Health::ALL`].
    pub health: [u64; 5],
    /// Per numeric field: (min, max, sum).
    pub numbers: BTreeMap<String, (i64, i64, i128)>,
    /// Oldest report time.
    pub oldest_report: Option<UnixMillis>,
    /// Lowest revision reported.
    pub min_revision: Option<Revision>,
}
