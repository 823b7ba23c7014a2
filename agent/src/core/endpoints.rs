//! The endpoints the agent reports: worked out again whenever a status changed, sent
//! when they changed ([`crate::endpoints`] reads them off each object).

use std::collections::BTreeMap;

use strata_protocol::model::{Health, ObjectKey};
use strata_protocol::time::Instant;
use strata_protocol::wire::{Report, ReportKey, ReportValue, ServiceEndpoints};

use super::AgentCore;
use crate::endpoints::{endpoints_of, may_have_endpoints};

impl AgentCore {
    /// Works out every Service's and Ingress's endpoints from the statuses last
    /// reported, and reports those that changed (and removes those that went).
    ///
    /// An app is Available on this cluster when its Service (or Ingress) and every
    /// other object this agent holds in the same namespace report `Available`.
    pub(super) fn refresh_endpoints(&mut self, now: Instant) {
        let nodes = self.nodes.clone();
        // Per (space, namespace): whether everything there is available.
        let mut ready: BTreeMap<(&str, Option<&str>), bool> = BTreeMap::new();
        for (k, s) in &self.statuses {
            let all = ready
                .entry((k.space.0.as_str(), k.namespace.as_deref()))
                .or_insert(true);
            *all &= s.health == Health::Available;
        }
        let mut fresh: BTreeMap<ObjectKey, ServiceEndpoints> = BTreeMap::new();
        for (k, s) in self.statuses.iter().filter(|(k, _)| may_have_endpoints(k)) {
            let Some(Ok(object)) = self.desired(k) else {
                continue;
            };
            let Ok(manifest) = serde_json::from_slice::<serde_json::Value>(&object.body) else {
                continue;
            };
            let status = serde_json::from_slice::<serde_json::Value>(&s.status).unwrap_or_default();
            if let Some(addresses) = endpoints_of(k, &manifest, &status, &nodes) {
                let available = ready
                    .get(&(k.space.0.as_str(), k.namespace.as_deref()))
                    .copied()
                    .unwrap_or(false);
                fresh.insert(
                    k.clone(),
                    ServiceEndpoints {
                        available,
                        addresses,
                    },
                );
            }
        }
        let gone: Vec<ObjectKey> = self
            .endpoints
            .keys()
            .filter(|k| !fresh.contains_key(*k))
            .cloned()
            .collect();
        for k in gone {
            self.push_endpoints(now, k, None);
        }
        for (k, e) in fresh {
            if self.endpoints.get(&k) != Some(&e) {
                self.push_endpoints(now, k, Some(e));
            }
        }
    }

    /// Reports one object's endpoints (`None`: it has none any more).
    pub(super) fn push_endpoints(
        &mut self,
        now: Instant,
        key: ObjectKey,
        endpoints: Option<ServiceEndpoints>,
    ) {
        let value = match endpoints {
            Some(e) => {
                self.endpoints.insert(key.clone(), e.clone());
                ReportValue::Endpoints(e)
            }
            None => {
                self.endpoints.remove(&key);
                ReportValue::Removed
            }
        };
        self.parent.push_report(
            now,
            Report {
                key: ReportKey::Endpoints {
                    cluster: self.cluster.name.clone(),
                    object: key,
                },
                value,
            },
        );
    }
}
