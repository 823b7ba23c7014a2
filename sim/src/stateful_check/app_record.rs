//! What the stateful move check writes down in the run's record: the app's
//! acknowledged writes, its pauses, DNS and the move's phase. Apart from the check, so
//! that the run's record can hold it without importing the check.

use std::collections::BTreeMap;
use std::time::Duration;

use super::dns::DnsWatch;

/// One write the simulated cluster acknowledged to the app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// Its number (the app's n-th acknowledged write).
    pub n: u64,
    /// The cluster that acknowledged it.
    pub cluster: String,
    /// Where in the claim.
    pub offset: u64,
    /// How many bytes.
    pub len: usize,
    /// When.
    pub at: Duration,
}

/// What the app task and the end check write down (in the run's record).
#[derive(Debug, Default)]
pub(crate) struct AppRecord {
    /// Every acknowledged write.
    pub(crate) writes: Vec<Write>,
    /// Writes refused, by reason (a frozen claim, one being restored).
    pub(crate) refused: BTreeMap<String, u64>,
    /// The longest stretch without an acknowledged write once the app first wrote
    /// (the write downtime as the app saw it), and when it ended.
    pub(crate) longest_pause: (Duration, Duration),
    pub(super) last_ack: Option<Duration>,
    pub(crate) dns: DnsWatch,
    /// The root's volume move as last seen, and when its phase changed.
    pub(crate) phase: Option<String>,
    /// The lines of the outcome.
    pub(crate) lines: Vec<String>,
}
