//! Asking nodes for their summary of the payload: whether it shows every leaf at a
//! revision, as the node computes it or as a relay last pushed it, and waiting for the
//! root's.

use std::time::Duration;

use strata_protocol::model::Revision;
use strata_protocol::summary::Summary;
use strata_relay::tier::runtime::NodeClient;
use tokio::time::Instant;

use super::super::BenchError;

/// Which summary of the payload [`shows_all`] looks at.
#[derive(Debug, Clone, Copy)]
pub(super) enum Seen {
    /// The one the node computes over its subtree (the root's, which users ask for).
    Computed,
    /// The one a relay last pushed to its parent: the hop's end as the parent sees it,
    /// and a lookup where computing costs a seek per cluster below. Polling relays
    /// every 25 ms for computed summaries was ~3 % of the CPU of an update at 10,000
    /// leaves, taken from what it measured.
    Pushed,
}

/// Whether `node`'s summary of the payload shows `leaves` leaves available at `rev`.
pub(super) async fn shows_all(node: &NodeClient, seen: Seen, leaves: usize, rev: u64) -> bool {
    node.query(move |c| {
        let placement = c.placements().first()?;
        let key = c.log().live().find(|o| o.key().name == "payload")?.key();
        let complete = |s: &Summary| {
            s.health.available as usize == leaves && s.min_revision == Some(Revision(rev))
        };
        Some(match seen {
            Seen::Computed => complete(&c.summary(placement, key)),
            Seen::Pushed => c.pushed_summary(&placement.name, key).is_some_and(complete),
        })
    })
    .await
    .flatten()
    .unwrap_or(false)
}

/// Waits until the root's summary of `name` shows every leaf available at `rev`.
pub(super) async fn summary_complete(
    root: &NodeClient,
    leaves: usize,
    rev: u64,
    limit: Duration,
) -> Result<Instant, BenchError> {
    let start = Instant::now();
    loop {
        if shows_all(root, Seen::Computed, leaves, rev).await {
            return Ok(Instant::now());
        }
        if start.elapsed() > limit {
            return Err(BenchError::Timeout {
                what: format!("root summary at revision {rev}"),
                secs: limit.as_secs(),
                detail: "not every leaf reported".into(),
            });
        }
        tokio::time::sleep(SUMMARY_POLL).await;
    }
}

/// How often the harness asks the root for its summary (P3's resolution). Each ask
/// computes the summary over every cluster at the root: at 10,000 leaves, asking every
/// 5 ms took about a third of the CPU of the whole hierarchy during an update, slowing
/// what it measured.
pub(super) const SUMMARY_POLL: Duration = Duration::from_millis(25);
