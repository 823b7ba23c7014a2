//! Applies seen by the harness at the leaves, and waiting until every leaf applied a
//! revision.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::super::BenchError;
use super::super::tree::Applied;

/// How often [`Arrivals::wait`] looks for applies.
const ARRIVALS_POLL: Duration = Duration::from_millis(10);
/// How often a long wait says how far it got.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// Applies seen by the harness, per leaf.
pub(crate) struct Arrivals {
    rx: mpsc::UnboundedReceiver<Applied>,
}

impl Arrivals {
    pub(crate) fn new(rx: mpsc::UnboundedReceiver<Applied>) -> Self {
        Arrivals { rx }
    }

    /// Waits until every leaf in `leaves` applied revision `rev` or later; returns each
    /// leaf's first such apply, as time since `start`.
    pub(crate) async fn wait(
        &mut self,
        leaves: std::ops::Range<usize>,
        rev: u64,
        start: Instant,
        limit: Duration,
    ) -> Result<Vec<(usize, Duration)>, BenchError> {
        let total = leaves.len();
        let (got, missing) = self.wait_partial(leaves, rev, start, limit).await;
        if missing > 0 {
            return Err(BenchError::Timeout {
                what: format!("revision {rev} at every leaf"),
                secs: limit.as_secs(),
                detail: format!("{missing} of {total} leaves never applied it"),
            });
        }
        Ok(got)
    }

    /// Like [`Arrivals::wait`], but gives up at the limit with what arrived and how
    /// many leaves are missing.
    pub(super) async fn wait_partial(
        &mut self,
        leaves: std::ops::Range<usize>,
        rev: u64,
        start: Instant,
        limit: Duration,
    ) -> (Vec<(usize, Duration)>, usize) {
        let mut seen: Vec<Option<Duration>> = vec![None; leaves.len()];
        let mut missing = leaves.len();
        let deadline = start + limit;
        let mut next_progress = Instant::now() + PROGRESS_EVERY;
        while missing > 0 {
            // Polled, not awaited: a task waiting on the channel is woken by every
            // apply, a cross-thread wake-up from the agents' runtime each (20,000 per
            // two updates at 10,000 leaves), a cost taken from what is measured. Each
            // apply carries its own time, so polling late changes no figure.
            let a = match self.rx.try_recv() {
                Ok(a) => a,
                Err(mpsc::error::TryRecvError::Empty) => {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    if now >= next_progress {
                        // A long wait says how far it got, so a slow phase is told from
                        // a stuck one while it runs.
                        eprintln!(
                            "bench: waiting for revision {rev}: {} of {} leaves have it after {:.0} s",
                            leaves.len() - missing,
                            leaves.len(),
                            now.saturating_duration_since(start).as_secs_f64()
                        );
                        next_progress = now + PROGRESS_EVERY;
                    }
                    tokio::time::sleep(ARRIVALS_POLL.min(deadline - now)).await;
                    continue;
                }
                Err(mpsc::error::TryRecvError::Disconnected) => break,
            };
            let leaf = a.leaf as usize;
            if a.revision >= rev && leaves.contains(&leaf) {
                let slot = &mut seen[leaf - leaves.start];
                if slot.is_none() {
                    *slot = Some(a.at.saturating_duration_since(start));
                    missing -= 1;
                }
            }
        }
        let got = seen
            .into_iter()
            .enumerate()
            .filter_map(|(i, d)| d.map(|d| (i + leaves.start, d)))
            .collect();
        (got, missing)
    }

    /// Forgets applies reported so far.
    pub(crate) fn drain(&mut self) {
        while self.rx.try_recv().is_ok() {}
    }

    /// The next apply reported before `until`.
    pub(crate) async fn next_until(
        &mut self,
        until: Instant,
    ) -> Result<Option<Applied>, tokio::time::error::Elapsed> {
        tokio::time::timeout_at(until, self.rx.recv()).await
    }
}
