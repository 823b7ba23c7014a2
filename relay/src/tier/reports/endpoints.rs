//! Which stored reports are endpoints, by the Service or Ingress they are about: what
//! DNS and the root's `ServiceEndpoints` look up without scanning every report.

use std::collections::BTreeSet;

use strata_protocol::model::ObjectKey;
use strata_protocol::wire::ReportKey;

use strata_node::store::ReportSlot;

/// The endpoints reports stored, by (object, cluster, reporting child).
#[derive(Debug, Default)]
pub(super) struct EndpointIndex {
    slots: BTreeSet<(ObjectKey, String, String)>,
}

impl EndpointIndex {
    /// Keeps the index in step with `slot`, now stored (`held`) or not.
    pub(super) fn index(&mut self, slot: &ReportSlot, held: bool) {
        let (from, ReportKey::Endpoints { cluster, object }) = slot else {
            return;
        };
        let entry = (object.clone(), cluster.clone(), from.clone());
        if held {
            self.slots.insert(entry);
        } else {
            self.slots.remove(&entry);
        }
    }

    /// The objects with endpoints somewhere below.
    pub(super) fn objects(&self) -> impl Iterator<Item = &ObjectKey> {
        let mut last: Option<&ObjectKey> = None;
        self.slots.iter().filter_map(move |(o, _, _)| {
            if last == Some(o) {
                return None;
            }
            last = Some(o);
            Some(o)
        })
    }

    /// The slots of `object`'s endpoints, in cluster order.
    pub(super) fn of(&self, object: &ObjectKey) -> impl Iterator<Item = ReportSlot> + '_ {
        let object = object.clone();
        self.slots
            .range((object.clone(), String::new(), String::new())..)
            .take_while(move |(o, _, _)| *o == object)
            .map(|(o, cluster, from)| {
                (
                    from.clone(),
                    ReportKey::Endpoints {
                        cluster: cluster.clone(),
                        object: o.clone(),
                    },
                )
            })
    }
}
