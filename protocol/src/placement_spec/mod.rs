//! The placement spec: what a user writes in a Placement, and the names that mark
//! Strata's own objects. Types, constants and the checks on them that need nothing
//! else; the algorithms that read them ([`crate::choice`], [`crate::route`],
//! [`crate::rollout`], [`crate::waves`], [`crate::customize`], [`crate::overrides`])
//! stand on this module and never the other way round.
//!
//! # Layout
//!
//! * `placement`: [`Placement`] and its object, cluster and upsync selectors and move
//!   policy;
//! * `seconds`: [`Seconds`], lengths of time as the fields write them;
//! * `taints`: [`Taint`] and [`Toleration`];
//! * `rollout_spec`: [`RolloutSpec`], a placement's waves and gate;
//! * `customize_rule`: [`CustomizeRule`], a placement's per-cluster patches;
//! * `volumes`: [`MoveVolume`] and [`VolumeClaim`], the claims whose data follows a move
//!   (`spec.moveVolumes`), and their checks;
//! * `names`: [`STRATA_GROUP`], [`ROLLOUT_KIND`] and the pins' kind and labels.
//!
//! A placement's `statusSummary` entries ([`crate::user_summary::SummarySpec`]) live
//! with their evaluation, which needs nothing of this module.

mod customize_rule;
mod names;
mod placement;
mod rollout_spec;
mod seconds;
mod taints;
mod volumes;

pub use customize_rule::{CustomizeRule, PatchOp};
pub use names::{
    PIN_CUSTOMIZE_LABEL, PIN_KIND, PIN_PLACEMENT_LABEL, ROLLOUT_KIND, STRATA_GROUP, is_pin,
    pin_placement,
};
pub use placement::{
    ClusterSelector, DEFAULT_MOVE_TIMEOUT, MovePolicy, MoveStrategy, ObjectSelector, Placement,
    UpsyncSelector,
};
pub use rollout_spec::{Amount, Gate, OnFailure, Percent, RolloutSpec, Wave, WaveSize};
pub use seconds::{NotADuration, Seconds};
pub use taints::{Taint, TaintEffect, Toleration, TolerationError, TolerationOperator};
pub use volumes::{
    CLAIM_KIND, DEFAULT_MAX_LAG_SECONDS, MAX_MOVE_VOLUMES, MoveVolume, MoveVolumeSpec, VolumeClaim,
    validate_volumes,
};
