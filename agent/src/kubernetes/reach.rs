//! Whether the cluster's API server answers: asked every few seconds (`GET /api`), so
//! that the agent reports its cluster unreachable, with the cause, as soon as the API
//! server goes, and reachable again when it is back (see
//! [`ClusterBackend::poll_reach`](crate::backend::ClusterBackend::poll_reach)).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, watch};

use crate::backend::Reach;

/// How often the API server is asked.
pub const PROBE_EVERY: Duration = Duration::from_secs(2);
/// How long one probe may take before the API server counts as unreachable.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest cause reported (kube's errors can be long; the rest is in the log).
const MAX_REASON: usize = 400;

/// Probes until the task is aborted; sends every change of reach and wakes the agent.
pub(super) async fn run(
    client: kube::Client,
    server: String,
    every: Duration,
    reach: watch::Sender<Reach>,
    wake: Arc<Notify>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = match tokio::time::timeout(PROBE_TIMEOUT, super::probe(&client, &server)).await {
            Ok(Ok(())) => Reach::Reached,
            Ok(Err(e)) => Reach::Unreachable(shorten(e.to_string())),
            Err(_) => Reach::Unreachable(format!(
                "the Kubernetes API server at {server} did not answer within {}s",
                PROBE_TIMEOUT.as_secs()
            )),
        };
        let changed = reach.send_if_modified(|held| {
            if *held == now {
                return false;
            }
            match &now {
                Reach::Reached => tracing::info!(%server, "the Kubernetes API server answers again"),
                Reach::Unreachable(why) => tracing::warn!(%server, error = %why, "the Kubernetes API server is unreachable"),
            }
            *held = now;
            true
        });
        if changed {
            wake.notify_one();
        }
    }
}

/// At most [`MAX_REASON`] bytes, cut at a character boundary.
fn shorten(mut why: String) -> String {
    if why.len() > MAX_REASON {
        let mut cut = MAX_REASON;
        while !why.is_char_boundary(cut) {
            cut -= 1;
        }
        why.truncate(cut);
        why.push_str("...");
    }
    why
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_causes_are_cut_at_a_character_boundary() {
        assert_eq!(shorten("short".into()), "short");
        let long = "é".repeat(300);
        let cut = shorten(long);
        assert!(cut.len() <= MAX_REASON + 3 && cut.ends_with("..."), "{cut}");
    }
}
