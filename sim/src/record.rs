//! The record of one run: what the observer and the fault loop write down as the run
//! goes (the trace that is hashed, violations, convergence, figures), and what they ask
//! of each other (disks lost, hosts to restart). [`crate::run`] turns it into an
//! [`crate::run::Outcome`] at the end.

use std::time::Duration;

use crate::check::Violation;

/// What happened during one run, shared by the fault loop ([`crate::run`]) and the
/// observer task (`observe`) through an `Rc<RefCell<_>>` (one thread).
#[derive(Debug, Default)]
pub(crate) struct RunRecord {
    /// One line per fault, workload step and sample: hashed into the outcome.
    pub(crate) trace: Vec<String>,
    /// Nodes whose disk a crash lost, for the observer to forget what they held.
    pub(crate) lost_disks: Vec<String>,
    pub(crate) violation: Option<(Violation, Duration)>,
    pub(crate) converged: Option<(Duration, Duration)>,
    pub(crate) max_lag: u64,
    pub(crate) revisions: u64,
    pub(crate) resync: Option<(u64, u64)>,
    /// Hosts to restart (a node relabeled).
    pub(crate) restarts: Vec<String>,
    /// Bytes on the delta check's link when it healed.
    pub(crate) delta_start: Option<u64>,
    /// The available check: the fewest clusters the object was available on once the
    /// check was armed, and when the bound was first reached.
    pub(crate) available: Option<(usize, Duration)>,
    /// The rollout check's events and figures, one line each.
    pub(crate) rollout: Vec<String>,
    /// The `converge_by` check: when the hierarchy first converged, faults or not.
    pub(crate) converged_early: Option<Duration>,
    /// The stateful move check: the app's writes, DNS, the move's figures.
    pub(crate) app: crate::stateful_check::app_record::AppRecord,
}
