//! The summary algebra: a mergeable aggregate of many clusters' statuses for one object.
//!
//! Every tier merges its children's summaries and forwards one value upward, so
//! [`Summary::merge`] is associative and commutative with [`Summary::default`] as its
//! identity, and merging the summaries of disjoint sets of clusters equals the summary
//! of their union. That is what lets the hierarchy group clusters however it likes.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::{Health, Revision, Status};
use crate::time::UnixMillis;

/// How many error samples a summary keeps.
pub const ERROR_SAMPLES: usize = 5;

/// Aggregate of the statuses of one object on many clusters.
///
/// Laws (checked by property tests): `a.merged(b) == b.merged(a)`,
/// `a.merged(b).merged(c) == a.merged(b.merged(c))`,
/// `a.merged(Summary::default()) == a`, and for disjoint cluster sets,
/// `summary(A).merged(summary(B)) == summary(A ∪ B)`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Summary {
    /// Clusters the placement selects (each tier adds its subtree's count).
    pub expected: u64,
    /// Clusters that reported a status.
    pub reporting: u64,
    /// Reporting clusters per health state.
    pub health: HealthCounts,
    /// Per numeric status field (e.g. `readyReplicas`): min, max, sum and count.
    pub numbers: BTreeMap<String, NumberStats>,
    /// Degraded or failed reports that carried a message.
    pub errors: u64,
    /// Up to [`ERROR_SAMPLES`] of them: the most recent first, ties broken by cluster
    /// name then message.
    pub error_samples: Vec<ErrorSample>,
    /// The oldest report time: how stale the summary may be.
    pub oldest_report: Option<UnixMillis>,
    /// The newest report time.
    pub newest_report: Option<UnixMillis>,
    /// The lowest revision any cluster reported.
    pub min_revision: Option<Revision>,
    /// The highest revision any cluster reported.
    pub max_revision: Option<Revision>,
    /// When exactly one cluster is expected and it reported: its name and exact
    /// status, so that a placement resolving to one cluster shows that cluster's
    /// `.status` at the root. Always `None` when `expected != 1`.
    pub exact: Option<ExactStatus>,
}

/// One cluster's status, carried whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExactStatus {
    /// The cluster.
    pub cluster: String,
    /// Its status of the object.
    pub status: Status,
}

/// Count of reports per [`Health`] state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct HealthCounts {
    /// Applied, nothing more known.
    pub applied: u64,
    /// Converging.
    pub progressing: u64,
    /// Doing what it should.
    pub available: u64,
    /// Running below what was asked.
    pub degraded: u64,
    /// Failed.
    pub failed: u64,
}

impl HealthCounts {
    /// The count for one state.
    pub fn get(&self, health: Health) -> u64 {
        match health {
            Health::Applied => self.applied,
            Health::Progressing => self.progressing,
            Health::Available => self.available,
            Health::Degraded => self.degraded,
            Health::Failed => self.failed,
        }
    }

    fn slot(&mut self, health: Health) -> &mut u64 {
        match health {
            Health::Applied => &mut self.applied,
            Health::Progressing => &mut self.progressing,
            Health::Available => &mut self.available,
            Health::Degraded => &mut self.degraded,
            Health::Failed => &mut self.failed,
        }
    }

    /// The sum over all states.
    pub fn total(&self) -> u64 {
        Health::ALL.iter().map(|h| self.get(*h)).sum()
    }
}

/// Statistics of one numeric field over the clusters that reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumberStats {
    /// Smallest value.
    pub min: i64,
    /// Largest value.
    pub max: i64,
    /// Sum (wide enough never to overflow from i64 inputs).
    pub sum: i128,
    /// Clusters that reported the field.
    pub count: u64,
}

impl NumberStats {
    fn of(value: i64) -> Self {
        NumberStats {
            min: value,
            max: value,
            sum: i128::from(value),
            count: 1,
        }
    }

    fn merge(&mut self, other: &NumberStats) {
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum = self.sum.saturating_add(other.sum);
        self.count += other.count;
    }
}

/// One cluster's error, kept as a sample.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorSample {
    /// The cluster.
    pub cluster: String,
    /// Degraded or failed.
    pub health: Health,
    /// What went wrong.
    pub message: String,
    /// When the cluster observed it.
    pub observed_at: UnixMillis,
}

impl ErrorSample {
    /// The total order samples are kept in: most recent first, then cluster, then message.
    pub fn order(&self, other: &ErrorSample) -> Ordering {
        other
            .observed_at
            .cmp(&self.observed_at)
            .then_with(|| self.cluster.cmp(&other.cluster))
            .then_with(|| self.message.cmp(&other.message))
            .then_with(|| self.health.cmp(&other.health))
    }
}

fn min_opt<T: Ord + Copy>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    }
}

fn max_opt<T: Ord + Copy>(a: Option<T>, b: Option<T>) -> Option<T> {
    a.max(b)
}

impl Summary {
    /// A summary of no reports for a subtree where the placement selects `n` clusters.
    pub fn expected(n: u64) -> Summary {
        Summary {
            expected: n,
            ..Summary::default()
        }
    }

    /// The summary of one cluster's report. The cluster counts as expected: a status
    /// only exists for an object placed on the cluster.
    pub fn of_status(cluster: &str, status: &Status) -> Summary {
        let mut s = Summary::default();
        s.add_status(cluster, status);
        s
    }

    /// Merges `other` into `self`.
    pub fn merge(&mut self, other: &Summary) {
        // The exact status survives only while one cluster is expected in all: then
        // exactly one side expects it, and that side's exact status (if any) stands.
        self.exact = if self.expected + other.expected == 1 {
            if self.expected == 1 {
                self.exact.take()
            } else {
                other.exact.clone()
            }
        } else {
            None
        };
        self.expected += other.expected;
        self.reporting += other.reporting;
        for h in Health::ALL {
            *self.health.slot(h) += other.health.get(h);
        }
        for (field, stats) in &other.numbers {
            self.numbers
                .entry(field.clone())
                .and_modify(|s| s.merge(stats))
                .or_insert(*stats);
        }
        self.errors += other.errors;
        self.error_samples
            .extend(other.error_samples.iter().cloned());
        self.error_samples.sort_by(ErrorSample::order);
        self.error_samples.dedup();
        self.error_samples.truncate(ERROR_SAMPLES);
        self.oldest_report = min_opt(self.oldest_report, other.oldest_report);
        self.newest_report = max_opt(self.newest_report, other.newest_report);
        self.min_revision = min_opt(self.min_revision, other.min_revision);
        self.max_revision = max_opt(self.max_revision, other.max_revision);
    }

    /// Adds one cluster's report: the same as merging [`Summary::of_status`] of it, without
    /// building that summary (a tier summarizes thousands of statuses per object, and the
    /// one-cluster summary clones the whole status for its exact status).
    pub fn add_status(&mut self, cluster: &str, status: &Status) {
        self.exact = (self.expected == 0).then(|| ExactStatus {
            cluster: cluster.to_owned(),
            status: status.clone(),
        });
        self.expected += 1;
        self.reporting += 1;
        *self.health.slot(status.health) += 1;
        for (field, value) in &status.numbers {
            let one = NumberStats::of(*value);
            match self.numbers.get_mut(field) {
                Some(stats) => stats.merge(&one),
                None => {
                    self.numbers.insert(field.clone(), one);
                }
            }
        }
        if matches!(status.health, Health::Degraded | Health::Failed)
            && let Some(message) = &status.message
        {
            self.errors += 1;
            let sample = ErrorSample {
                cluster: cluster.to_owned(),
                health: status.health,
                message: message.clone(),
                observed_at: status.observed_at,
            };
            // Kept only if it is among the most recent: the samples are sorted.
            let full = self.error_samples.len() >= ERROR_SAMPLES;
            if !full
                || self
                    .error_samples
                    .last()
                    .is_some_and(|l| sample.order(l).is_lt())
            {
                self.error_samples.push(sample);
                self.error_samples.sort_by(ErrorSample::order);
                self.error_samples.dedup();
                self.error_samples.truncate(ERROR_SAMPLES);
            }
        }
        let at = Some(status.observed_at);
        self.oldest_report = min_opt(self.oldest_report, at);
        self.newest_report = max_opt(self.newest_report, at);
        self.min_revision = min_opt(self.min_revision, Some(status.revision));
        self.max_revision = max_opt(self.max_revision, Some(status.revision));
    }

    /// `self` merged with `other`.
    pub fn merged(mut self, other: &Summary) -> Summary {
        self.merge(other);
        self
    }

    /// Clusters expected but not reporting: unreachable, or not applied yet.
    pub fn silent(&self) -> u64 {
        self.expected.saturating_sub(self.reporting)
    }

    /// Whether a single cluster stands behind this summary (exact status applies).
    pub fn is_singleton(&self) -> bool {
        self.expected == 1
    }

    /// Whether nothing here is on its way: every expected cluster reported, all at one
    /// revision, none of them only applied or still progressing.
    pub fn is_settled(&self) -> bool {
        self.reporting == self.expected
            && self.min_revision == self.max_revision
            && self.health.applied == 0
            && self.health.progressing == 0
    }

    /// Whether the change from `before` to this summary is news that should not wait
    /// behind a rollout's progress: it settled, the clusters expected changed, fewer
    /// report, or more are degraded, failed or erroring. Anything else is progress on
    /// the way to settling, leaving a settled state included: a change's start says
    /// nothing its end will not say, and an update that settles soon needs no push
    /// before the one that says so.
    pub fn is_news_after(&self, before: &Summary) -> bool {
        self.is_settled()
            || self.expected != before.expected
            || self.reporting < before.reporting
            || self.health.degraded > before.health.degraded
            || self.health.failed > before.health.failed
            || self.errors > before.errors
    }
}

impl<'a> FromIterator<&'a Summary> for Summary {
    fn from_iter<I: IntoIterator<Item = &'a Summary>>(iter: I) -> Summary {
        iter.into_iter()
            .fold(Summary::default(), |acc, s| acc.merged(s))
    }
}
