//! The fake API server's routes: which resource a path names, discovery documents,
//! denials, and CRDs joining discovery once Established.

use std::collections::BTreeSet;

use hyper::Method;
use serde_json::{Value, json};

use super::store::Slot;
use super::{Resource, State};

/// What a path names.
#[derive(Debug)]
pub struct Target {
    pub resource: Resource,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

impl State {
    pub fn resolve(&self, path: &str) -> Option<Result<Target, String>> {
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (group, version, rest) = match segs.as_slice() {
            ["api", v, rest @ ..] if !rest.is_empty() => ("", *v, rest),
            ["apis", g, v, rest @ ..] if !rest.is_empty() => (*g, *v, rest),
            _ => return None,
        };
        let find = |plural: &str| {
            self.resources
                .iter()
                .find(|r| r.group == group && r.version == version && r.plural == plural)
                .cloned()
        };
        let (namespace, rest) = match rest {
            ["namespaces", ns, plural, more @ ..] if find(plural).is_some() => {
                (Some((*ns).to_owned()), [&[*plural][..], more].concat())
            }
            other => (None, other.to_vec()),
        };
        let Some(resource) = find(rest[0]) else {
            return Some(Err(format!(
                "the server could not find the requested resource ({group}/{version} {})",
                rest[0]
            )));
        };
        Some(Ok(Target {
            resource,
            namespace,
            name: rest.get(1).map(|s| (*s).to_owned()),
            subresource: rest.get(2).map(|s| (*s).to_owned()),
        }))
    }

    pub fn discovery(&self, path: &str) -> Option<Value> {
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        let list = |group: &str, version: &str| {
            let resources: Vec<Value> = self
                .resources
                .iter()
                .filter(|r| r.group == group && r.version == version)
                .map(|r| {
                    json!({"name": r.plural, "singularName": r.kind.to_lowercase(),
                           "namespaced": r.namespaced, "kind": r.kind,
                           "verbs": ["create","delete","get","list","patch","update","watch"]})
                })
                .collect();
            let gv = if group.is_empty() {
                version.to_owned()
            } else {
                format!("{group}/{version}")
            };
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
                   "resources": resources})
        };
        match segs.as_slice() {
            ["api"] => Some(json!({"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})),
            ["api", v] => Some(list("", v)),
            ["apis"] => {
                let mut groups: Vec<(String, String)> = self
                    .resources
                    .iter()
                    .filter(|r| !r.group.is_empty())
                    .map(|r| (r.group.clone(), r.version.clone()))
                    .collect();
                groups.dedup();
                let groups: BTreeSet<_> = groups.into_iter().collect();
                let groups: Vec<Value> = groups
                    .iter()
                    .map(|(g, v)| {
                        let gv = json!({"groupVersion": format!("{g}/{v}"), "version": v});
                        json!({"name": g, "versions": [gv.clone()], "preferredVersion": gv})
                    })
                    .collect();
                Some(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
            }
            ["apis", g, v] => Some(list(g, v)),
            _ => None,
        }
    }

    pub fn denies(&self, verb: &str, plural: &str) -> bool {
        self.denied.contains(&("*".into(), "*".into()))
            || self.denied.contains(&(verb.into(), plural.into()))
            || self.denied.contains(&(verb.into(), "*".into()))
            || self.denied.contains(&("*".into(), plural.into()))
    }

    /// A CRD that was just stored: establish it (when configured) and serve its kind.
    pub fn crd_stored(&mut self, name: &str) {
        if self.establish_crds {
            self.establish(name);
        }
    }

    pub fn establish(&mut self, name: &str) -> bool {
        let slot = Slot {
            group: "apiextensions.k8s.io".into(),
            plural: "customresourcedefinitions".into(),
            namespace: None,
            name: name.into(),
        };
        let Some(crd) = self.objects.objects.get(&slot).map(|s| s.object.clone()) else {
            return false;
        };
        let spec = &crd["spec"];
        let group = spec["group"].as_str().unwrap_or_default().to_owned();
        let namespaced = spec["scope"].as_str() != Some("Cluster");
        for v in spec["versions"].as_array().into_iter().flatten() {
            if v["served"].as_bool() == Some(false) {
                continue;
            }
            let r = Resource {
                group: group.clone(),
                version: v["name"].as_str().unwrap_or_default().into(),
                kind: spec["names"]["kind"].as_str().unwrap_or_default().into(),
                plural: spec["names"]["plural"].as_str().unwrap_or_default().into(),
                namespaced,
            };
            if !self.resources.contains(&r) {
                self.resources.push(r);
            }
        }
        let conditions = json!({"status": {"conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted"}]}});
        self.objects
            .merge_patch(&slot, &conditions, "apiextensions-controller");
        true
    }
}

pub fn verb_of(method: &Method, target: &Target, watch: bool) -> &'static str {
    match (method.as_str(), &target.name) {
        ("GET", None) if watch => "watch",
        ("GET", None) => "list",
        ("GET", Some(_)) => "get",
        ("PATCH", _) => "patch",
        ("DELETE", _) => "delete",
        ("PUT", _) => "update",
        ("POST", _) => "create",
        _ => "unknown",
    }
}
