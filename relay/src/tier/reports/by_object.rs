//! The clusters' statuses stored, by object: what a summary of a few objects walks.
//!
//! The reports are kept by the child that sent them, so a summary over them sought
//! each selected cluster's statuses and walked all of them between the first and the
//! last object summarized. A relay summarizes the objects whose statuses changed at
//! every tick; while many objects settle on many clusters (a hundred objects created
//! at once, a storm of reconnecting agents) those few changed objects lie spread over
//! every cluster's statuses, and that walk was a third of the whole tree's CPU at
//! 10,000 clusters. Here an object's statuses are one map, in the order of the
//! selections' records (child, then cluster), so its summary is one merge of the two.

use std::collections::BTreeMap;

use strata_protocol::model::{ObjectKey, Status};
use strata_protocol::wire::{ReportKey, ReportValue};

use strata_node::store::ReportSlot;

/// One object's statuses: by (reporting child, cluster).
pub(super) type ObjectStatuses = BTreeMap<(String, String), Status>;

/// The statuses stored, by object. Each is kept without its `.status` document, which
/// only a summary of a single cluster carries (its exact status) and which is looked
/// up in the reports for that one ([`StatusesByObject::index`] keeps the rest in step).
#[derive(Debug, Default)]
pub(super) struct StatusesByObject {
    by_object: BTreeMap<ObjectKey, ObjectStatuses>,
}

impl StatusesByObject {
    /// Keeps the index in step with `slot`, now holding `value` (`None`: dropped).
    pub(super) fn index(&mut self, slot: &ReportSlot, value: Option<&ReportValue>) {
        let (from, ReportKey::Status { cluster, object }) = slot else {
            return;
        };
        match value {
            Some(ReportValue::Status(status)) => {
                let counted = Status {
                    health: status.health,
                    revision: status.revision,
                    observed_generation: status.observed_generation,
                    message: status.message.clone(),
                    numbers: status.numbers.clone(),
                    status: Vec::new(),
                    observed_at: status.observed_at,
                };
                self.by_object
                    .entry(object.clone())
                    .or_default()
                    .insert((from.clone(), cluster.clone()), counted);
            }
            _ => {
                if let Some(statuses) = self.by_object.get_mut(object) {
                    statuses.remove(&(from.clone(), cluster.clone()));
                    if statuses.is_empty() {
                        self.by_object.remove(object);
                    }
                }
            }
        }
    }

    /// `object`'s statuses (none reported: empty).
    pub(super) fn of(&self, object: &ObjectKey) -> impl Iterator<Item = (&str, &str, &Status)> {
        self.by_object
            .get(object)
            .into_iter()
            .flatten()
            .map(|((from, cluster), status)| (from.as_str(), cluster.as_str(), status))
    }
}
