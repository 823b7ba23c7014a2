//! The names that mark Strata's own objects: its API group, the kinds of the root's
//! rollout records and of pinned revisions, and the labels a pin carries.

use crate::model::ObjectMeta;

/// The API group of Strata's own kinds.
pub const STRATA_GROUP: &str = "strata.dev";

/// The kind of the root's rollout records (one per placement with a `rollout`).
pub const ROLLOUT_KIND: &str = "Rollout";

/// The kind of pinned copies of a previous revision.
pub const PIN_KIND: &str = "PinnedRevision";

/// The label naming the placement a pin belongs to.
pub const PIN_PLACEMENT_LABEL: &str = "strata.dev/placement";

/// The label holding, as JSON, the `customize` rules its placement had when a pin was
/// written: the agent renders the pin with those, so a cluster outside the released
/// waves keeps the previous rules too (they are part of the template).
pub const PIN_CUSTOMIZE_LABEL: &str = "strata.dev/customize";

/// Whether an object is a pinned copy of a previous revision.
pub fn is_pin(meta: &ObjectMeta) -> bool {
    meta.key.group == STRATA_GROUP && meta.key.kind == PIN_KIND
}

/// The placement a pin belongs to.
pub fn pin_placement(meta: &ObjectMeta) -> Option<&str> {
    if !is_pin(meta) {
        return None;
    }
    meta.labels.get(PIN_PLACEMENT_LABEL).map(String::as_str)
}
