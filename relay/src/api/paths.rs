//! The object filter of the `relay` CLI's endpoints (`/spaces/{space}/objects`): a
//! kind the user typed matches an object whose kind, lowercased, is it or its plural
//! (`deployments`, `networkpolicies`, `ingresses`). The Kubernetes API's paths are
//! [`crate::kube`]'s.

use strata_protocol::model::ObjectKey;

/// Which objects of a space a request is about.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectFilter {
    /// API group (`""` is the core group); `None`: any.
    pub group: Option<String>,
    /// API version; `None`: any.
    pub version: Option<String>,
    /// Kind or resource name; `None`: any.
    pub resource: Option<String>,
    /// `None`: any namespace; `Some(None)`: cluster-scoped objects only;
    /// `Some(Some(ns))`: that namespace.
    pub namespace: Option<Option<String>>,
    /// Object name; `None`: all.
    pub name: Option<String>,
}

impl ObjectFilter {
    /// Whether `key` is one of the objects this filter names.
    pub fn matches(&self, key: &ObjectKey) -> bool {
        self.group.as_ref().is_none_or(|g| &key.group == g)
            && self.version.as_ref().is_none_or(|v| &key.version == v)
            && self
                .resource
                .as_ref()
                .is_none_or(|r| kind_matches(&key.kind, r))
            && self
                .namespace
                .as_ref()
                .is_none_or(|ns| &key.namespace == ns)
            && self.name.as_ref().is_none_or(|n| &key.name == n)
    }
}

/// Whether `wanted` names `kind`: the kind itself, or its resource name, in any case.
pub fn kind_matches(kind: &str, wanted: &str) -> bool {
    let w = wanted.to_ascii_lowercase();
    let k = kind.to_ascii_lowercase();
    w == k || w == plural(&k) || w == format!("{k}s")
}

/// The resource name Kubernetes gives a lowercased kind.
fn plural(kind: &str) -> String {
    if kind.ends_with("endpoints") {
        return kind.to_owned();
    }
    if let Some(stem) = kind.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        return format!("{stem}ies");
    }
    if kind.ends_with('s') || kind.ends_with('x') || kind.ends_with("ch") || kind.ends_with("sh") {
        return format!("{kind}es");
    }
    format!("{kind}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names_follow_kubernetes_plurals() {
        for (kind, resource) in [
            ("Deployment", "deployments"),
            ("NetworkPolicy", "networkpolicies"),
            ("Ingress", "ingresses"),
            ("Gateway", "gateways"),
            ("Endpoints", "endpoints"),
            ("ConfigMap", "configmap"),
        ] {
            assert!(kind_matches(kind, resource), "{kind} as {resource}");
        }
        assert!(!kind_matches("Deployment", "deploy"));
        assert!(!kind_matches("Pod", "pods2"));
    }
}
