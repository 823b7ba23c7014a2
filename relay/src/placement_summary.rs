//! A placement's user summaries at the root (`statusSummary`): what every selected
//! cluster reported for every object of the placement, merged, as `status.summary`
//! of the Placement and in `relay get`.

use serde_json::Value;
use strata_protocol::model::ObjectKey;
use strata_protocol::overrides::is_cluster_object;
use strata_protocol::placement::Placement;
use strata_protocol::route::is_placement;
use strata_protocol::summary::Summary;
use strata_protocol::user_summary::show_all;

use crate::tier::core::NodeCore;

/// The placement's `statusSummary` values over all its objects, or `None` when it asks
/// for none.
pub fn of_placement(core: &NodeCore, placement: &Placement) -> Option<Value> {
    if placement.status_summary.is_empty() {
        return None;
    }
    let keys: Vec<ObjectKey> = core
        .log()
        .live()
        .filter(|o| {
            !is_placement(&o.meta)
                && !is_cluster_object(&o.meta)
                && placement.selects_object(&o.meta)
        })
        .map(|o| o.key().clone())
        .collect();
    let merged = keys.iter().fold(Summary::default(), |acc, key| {
        acc.merged(&core.summary(placement, key))
    });
    Some(show_all(
        &placement.status_summary,
        &placement.name,
        &merged.numbers,
    ))
}

/// The placement's `statusSummary` values for one object's summary, or `None` when it
/// asks for none.
pub fn of_object(placement: &Placement, summary: &Summary) -> Option<Value> {
    (!placement.status_summary.is_empty())
        .then(|| show_all(&placement.status_summary, &placement.name, &summary.numbers))
}
