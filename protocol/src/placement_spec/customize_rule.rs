//! A placement's `customize` rules as written, and which objects and clusters a rule
//! applies to. Rendering them is in [`crate::customize`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ObjectSelector;
use crate::model::{Labels, ObjectMeta};
use crate::selector::LabelSelector;

/// One customization rule of a placement.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CustomizeRule {
    /// Only clusters these labels select; absent: every cluster the placement chose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<LabelSelector>,
    /// Only objects this selects; absent: every object of the placement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objects: Option<ObjectSelector>,
    /// A JSON merge patch (RFC 7386), applied first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge_patch: Option<Value>,
    /// A JSON patch (RFC 6902), applied after the merge patch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub json_patch: Vec<PatchOp>,
}

/// One operation of a JSON patch (RFC 6902).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
pub enum PatchOp {
    /// Adds `value` at `path` (an array index inserts; `-` appends).
    Add {
        /// A JSON pointer.
        path: String,
        /// What to add.
        value: Value,
    },
    /// Removes the value at `path`, which must exist.
    Remove {
        /// A JSON pointer.
        path: String,
    },
    /// Replaces the value at `path`, which must exist.
    Replace {
        /// A JSON pointer.
        path: String,
        /// The new value.
        value: Value,
    },
    /// Moves the value at `from` to `path`.
    Move {
        /// Where the value is.
        from: String,
        /// Where it goes.
        path: String,
    },
    /// Copies the value at `from` to `path`.
    Copy {
        /// Where the value is.
        from: String,
        /// Where the copy goes.
        path: String,
    },
    /// Fails the patch unless the value at `path` equals `value`.
    Test {
        /// A JSON pointer.
        path: String,
        /// The expected value.
        value: Value,
    },
}

impl CustomizeRule {
    /// Whether the rule applies to this object on a cluster with these labels.
    pub fn applies(&self, meta: &ObjectMeta, cluster_labels: &Labels) -> bool {
        self.clusters
            .as_ref()
            .is_none_or(|s| s.matches(cluster_labels))
            && self.objects.as_ref().is_none_or(|o| o.selects(meta))
    }
}
