//! What a cluster holds while a rollout has not released it: the pinned previous
//! revision of an object (`strata_protocol::waves`), how it is rendered (the pin's own
//! `customize` rules) and the key its status is reported under.

use strata_protocol::model::{Labels, Object, ObjectKey, ObjectMeta};
use strata_protocol::placement::Placement;
use strata_protocol::sync::ObjectLog;
use strata_protocol::waves::{pin_key, placements_for_pin};

/// What the cluster holds as `key`: the object itself, or else its pinned previous
/// revision (with the object's identity and the labels its manifest carries).
pub(super) fn held_as(log: &ObjectLog, key: &ObjectKey) -> Option<Object> {
    if let Some(o) = log.get(key) {
        return Some(o.clone());
    }
    let pin = log.get(&pin_key(key))?;
    let labels = serde_json::from_slice::<serde_json::Value>(&pin.body)
        .ok()
        .and_then(|v| serde_json::from_value::<Labels>(v.pointer("/metadata/labels")?.clone()).ok())
        .unwrap_or_default();
    Some(Object {
        meta: std::sync::Arc::new(ObjectMeta {
            key: key.clone(),
            labels,
        }),
        revision: pin.revision,
        hash: pin.hash,
        body: pin.body.clone(),
    })
}

/// The placements as they render `key` when the cluster holds its pin and the pin
/// carries its placement's previous `customize` rules; `None`: the current ones.
pub(super) fn pinned_rules(
    log: &ObjectLog,
    key: &ObjectKey,
    placements: &[Placement],
) -> Option<Vec<Placement>> {
    if log.get(key).is_some() {
        return None;
    }
    placements_for_pin(&log.get(&pin_key(key))?.meta, placements)
}

/// The key the agent reports the status of `key` under: the object's own, or its pin's
/// when the cluster holds the pinned previous revision (so that summaries of the new
/// revision count only the clusters released).
pub(super) fn report_key(log: &ObjectLog, key: &ObjectKey) -> ObjectKey {
    if log.get(key).is_none() && log.get(&pin_key(key)).is_some() {
        pin_key(key)
    } else {
        key.clone()
    }
}
