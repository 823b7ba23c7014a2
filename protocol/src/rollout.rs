//! Rollouts: a placement's `rollout` (waves, a health gate between them, what to do on
//! failure) and the pure state machine the root drives for each placement that has one.
//!
//! # The state machine
//!
//! [`RolloutState`] is the root's record of one placement's rollout, kept in its log as
//! a `Rollout` object (so a restarted root resumes where it was). Call order, at the
//! root, whenever the placement, its objects, its reports or the time change:
//! 1. [`RolloutState::handle_template`] with the template revision the placement's
//!    objects hash to now: a new one starts a rollout at wave 0;
//! 2. [`RolloutState::handle_command`] for a user's `pause`, `resume`, `abort`, `undo`;
//! 3. [`RolloutState::handle_gate`] with the health of what was released so far (only
//!    while [`Phase::Progressing`]): it holds, opens the next wave, completes, or fails;
//! 4. [`RolloutState::released`] says which clusters get the new revision;
//!    [`RolloutState::poll_timeout`] when the gate must be looked at again.
//!
//! Phases: `Progressing` (some waves released, the gate watching the last one),
//! `Paused` (by the user, or by a failed gate with `onFailure: pause`), `Complete`
//! (every cluster has the template), `RolledBack` (a failed gate with `onFailure:
//! rollback`, `abort` or `undo`: every cluster gets the previous revision).

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

pub use crate::placement_spec::{
    Amount, Gate, OnFailure, Percent, ROLLOUT_KIND, RolloutSpec, Wave, WaveSize,
};

/// The annotation on a Placement that controls its rollout: `pause`, `resume`, `abort`
/// or `undo`, optionally followed by `@` and anything (to give the same verb again).
pub const COMMAND_ANNOTATION: &str = "strata.dev/rollout";

/// Where a rollout stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Waves released, the gate watching the last one.
    Progressing,
    /// Stopped where it is until resumed.
    Paused,
    /// Every cluster has the template.
    Complete,
    /// Every cluster is back on the previous revision.
    RolledBack,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A user's command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Stop opening waves.
    Pause,
    /// Go on (a rolled-back rollout starts again from its first wave).
    Resume,
    /// Stop and send every cluster back to the previous revision.
    Abort,
    /// Send every cluster back to the previous revision, also after completion.
    Undo,
}

impl Command {
    /// Reads an annotation value: `pause`, `resume`, `abort`, `undo`, each optionally
    /// followed by `@` and anything.
    pub fn parse(value: &str) -> Result<Command, NotACommand> {
        let verb = value.split('@').next().unwrap_or("").trim();
        match verb {
            "pause" => Ok(Command::Pause),
            "resume" => Ok(Command::Resume),
            "abort" => Ok(Command::Abort),
            "undo" => Ok(Command::Undo),
            _ => Err(NotACommand {
                value: value.to_owned(),
            }),
        }
    }
}

/// A command annotation's value that names no [`Command`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not a rollout command (pause, resume, abort, undo)")]
pub struct NotACommand {
    /// The annotation's value.
    pub value: String,
}

/// The health of the clusters released so far, over the template's objects: each
/// count is the worst over the objects (fewest available, most failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GateHealth {
    /// Clusters released.
    pub released: u64,
    /// Of those, available with every object.
    pub available: u64,
    /// Of those, failed with some object.
    pub failed: u64,
    /// Of those, the root cannot reach now (counted as not available).
    pub unreachable: u64,
    /// Clusters of the last wave not released yet (`maxUnavailable` batches): the gate
    /// cannot pass before they are.
    pub pending: u64,
}

/// What the gate did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateOutcome {
    /// The wave stays as it is (its gate may have become healthy, or stopped being).
    Holding,
    /// Passed: the next wave was released.
    NextWave,
    /// Passed the last wave: complete.
    Completed,
    /// Failed, with the reason.
    Failed(String),
}

/// The root's record of one placement's rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutState {
    /// Counts rollouts of this placement (1, 2, ...): the revision users see.
    pub revision: u64,
    /// The template revision rolling out (a hash of the objects' keys and contents).
    pub template: u64,
    /// The template revision the pins hold (the one clusters go back to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<u64>,
    /// Where it stands.
    pub phase: Phase,
    /// The last wave released (index).
    pub wave: usize,
    /// When that wave was released (Unix milliseconds).
    pub wave_since: u64,
    /// Since when the gate has been healthy, if it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy_since: Option<u64>,
    /// Why it paused or rolled back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The command annotation last acted on (a command acts once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Clusters released so far (kept: a release is never taken back by a replan).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub released: BTreeSet<String>,
    /// Clusters of the last wave not released yet (`maxUnavailable` batches).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pending: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl RolloutState {
    /// The first record of a placement: its objects as they are count as rolled out.
    pub fn new(template: u64, now: u64) -> Self {
        RolloutState {
            revision: 1,
            template,
            previous: None,
            phase: Phase::Complete,
            wave: 0,
            wave_since: now,
            healthy_since: None,
            message: None,
            command: None,
            released: BTreeSet::new(),
            pending: 0,
        }
    }

    /// The placement's objects hash to `template` now. A new template starts a rollout
    /// at wave 0 (returns true); going back to the previous template completes at once
    /// (every cluster has it). `previous` is the template of the pins after this call.
    pub fn handle_template(&mut self, template: u64, previous: Option<u64>, now: u64) -> bool {
        if template == self.template {
            return false;
        }
        self.template = template;
        self.previous = previous;
        self.revision += 1;
        self.start_over(now);
        self.phase = if previous == Some(template) {
            Phase::Complete
        } else {
            Phase::Progressing
        };
        true
    }

    /// A command annotation's value (`None`: no annotation). Acts once per value; a
    /// command that does not apply to the phase is recorded and does nothing. Returns
    /// whether the value was new, or why it is refused (recorded too: refused once).
    pub fn handle_command(&mut self, value: Option<&str>, now: u64) -> Result<bool, NotACommand> {
        let Some(value) = value else {
            return Ok(false);
        };
        if self.command.as_deref() == Some(value) {
            return Ok(false);
        }
        self.command = Some(value.to_owned());
        match Command::parse(value)? {
            Command::Pause if self.phase == Phase::Progressing => {
                self.phase = Phase::Paused;
                self.message = Some("paused by the user".into());
            }
            Command::Resume if self.phase == Phase::Paused => {
                self.phase = Phase::Progressing;
                self.wave_since = now;
                self.healthy_since = None;
                self.message = None;
            }
            Command::Resume if self.phase == Phase::RolledBack && self.previous.is_some() => {
                self.phase = Phase::Progressing;
                self.start_over(now);
            }
            Command::Abort if matches!(self.phase, Phase::Progressing | Phase::Paused) => {
                self.roll_back("aborted by the user");
            }
            Command::Undo if self.previous.is_some() && self.phase != Phase::RolledBack => {
                self.roll_back("undone by the user");
            }
            _ => {}
        }
        Ok(true)
    }

    /// Back to the first wave at `now`, nothing released yet.
    fn start_over(&mut self, now: u64) {
        self.wave = 0;
        self.wave_since = now;
        self.healthy_since = None;
        self.message = None;
        self.released.clear();
        self.pending = 0;
    }

    fn roll_back(&mut self, why: &str) {
        self.phase = Phase::RolledBack;
        self.message = Some(why.to_owned());
        self.healthy_since = None;
        self.released.clear();
        self.pending = 0;
    }

    /// The amount of a wave's `size` clusters `maxUnavailable` lets update at once (at
    /// least one; every one without `maxUnavailable`).
    pub fn batch_size(spec: &RolloutSpec, size: usize) -> usize {
        let n = match spec.max_unavailable {
            None => size,
            Some(Amount::Count(n)) => n as usize,
            Some(Amount::Percent(p)) => (size * p as usize).div_ceil(100),
        };
        n.max(1)
    }

    /// The gate of the last released wave, given the health of every cluster released
    /// so far; `waves` is how many waves the spec has. Only acts while progressing.
    pub fn handle_gate(&mut self, spec: &RolloutSpec, health: GateHealth, now: u64) -> GateOutcome {
        if self.phase != Phase::Progressing {
            return GateOutcome::Holding;
        }
        let gate = &spec.gate;
        let failed = if health.failed > gate.max_failed {
            Some(format!(
                "wave {}: {} of {} clusters failed (at most {} allowed)",
                self.wave_label(spec),
                health.failed,
                health.released,
                gate.max_failed
            ))
        } else {
            None
        };
        let healthy = failed.is_none()
            && health.pending == 0
            && health.available.saturating_mul(100)
                >= u64::from(gate.available.0).saturating_mul(health.released);
        let timed_out = now >= self.wave_since.saturating_add(gate.timeout.millis());
        if let Some(why) = failed.or_else(|| {
            (timed_out && !healthy).then(|| {
                let mut why = format!(
                    "wave {}: {} of {} clusters available after {} (at least {}% needed)",
                    self.wave_label(spec),
                    health.available,
                    health.released,
                    gate.timeout,
                    gate.available.0
                );
                if health.unreachable > 0 {
                    why.push_str(&format!(", {} unreachable", health.unreachable));
                }
                if health.pending > 0 {
                    why.push_str(&format!(", {} not released yet", health.pending));
                }
                why
            })
        }) {
            match spec.on_failure {
                OnFailure::Rollback => self.roll_back(&format!("gate failed: {why}")),
                OnFailure::Pause => {
                    self.phase = Phase::Paused;
                    self.healthy_since = None;
                    self.message = Some(format!("gate failed: {why}"));
                }
            }
            return GateOutcome::Failed(why);
        }
        if !healthy {
            self.healthy_since = None;
            return GateOutcome::Holding;
        }
        let since = *self.healthy_since.get_or_insert(now);
        if now < since.saturating_add(gate.hold.millis()) {
            return GateOutcome::Holding;
        }
        if self.wave + 1 >= spec.waves.len() {
            self.phase = Phase::Complete;
            self.healthy_since = None;
            self.released.clear();
            return GateOutcome::Completed;
        }
        self.wave += 1;
        self.wave_since = now;
        self.healthy_since = None;
        GateOutcome::NextWave
    }

    /// The name of the last released wave.
    pub fn wave_label(&self, spec: &RolloutSpec) -> String {
        spec.waves.get(self.wave).map_or_else(
            || format!("wave-{}", self.wave + 1),
            |w| w.display_name(self.wave),
        )
    }

    /// Whether only some clusters get the template: `None` every cluster does
    /// (complete), `Some(true)` those released so far, `Some(false)` none (rolled back).
    pub fn gated(&self) -> Option<bool> {
        match self.phase {
            Phase::Complete => None,
            Phase::RolledBack => Some(false),
            Phase::Progressing | Phase::Paused => Some(true),
        }
    }

    /// When the gate must be looked at again without any new report: when it may pass
    /// (held long enough) or time out.
    pub fn poll_timeout(&self, spec: &RolloutSpec) -> Option<u64> {
        if self.phase != Phase::Progressing {
            return None;
        }
        let timeout = self.wave_since.saturating_add(spec.gate.timeout.millis());
        let pass = self
            .healthy_since
            .map(|s| s.saturating_add(spec.gate.hold.millis()));
        Some(pass.map_or(timeout, |p| p.min(timeout)))
    }
}

#[cfg(test)]
#[path = "rollout_tests.rs"]
mod tests;
