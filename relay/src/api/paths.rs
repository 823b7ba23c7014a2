//! Kubernetes-shaped resource paths under a space, and the object filter they name.
//!
//! ```text
//! /spaces/{space}/api/v1/{resource}[/{name}]                            core group
//! /spaces/{space}/api/v1/namespaces/{ns}/{resource}[/{name}]
//! /spaces/{space}/apis/{group}/{version}/{resource}[/{name}]            named groups
//! /spaces/{space}/apis/{group}/{version}/namespaces/{ns}/{resource}[/{name}]
//! ```
//!
//! As in Kubernetes, `/api/v1/namespaces/{name}` is the Namespace object itself. The
//! root keeps no discovery document of its own: a resource matches an object whose kind,
//! lowercased, is the resource or its plural (`deployments`, `networkpolicies`,
//! `ingresses`).

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

/// Parses the segments after `/spaces/{space}/`; `None` when they are not a resource
/// path.
pub fn parse(segments: &[&str]) -> Option<ObjectFilter> {
    let (group, version, rest) = match segments {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let mut f = ObjectFilter {
        group: Some(group.to_owned()),
        version: Some(version.to_owned()),
        ..ObjectFilter::default()
    };
    match rest {
        // The Namespace object itself (core group only).
        ["namespaces", name] if group.is_empty() => {
            f.resource = Some("namespaces".into());
            f.namespace = Some(None);
            f.name = Some((*name).to_owned());
        }
        ["namespaces", ns, resource] => {
            f.resource = Some((*resource).to_owned());
            f.namespace = Some(Some((*ns).to_owned()));
        }
        ["namespaces", ns, resource, name] => {
            f.resource = Some((*resource).to_owned());
            f.namespace = Some(Some((*ns).to_owned()));
            f.name = Some((*name).to_owned());
        }
        [resource] => f.resource = Some((*resource).to_owned()),
        // A name without a namespace names a cluster-scoped object.
        [resource, name] => {
            f.resource = Some((*resource).to_owned());
            f.namespace = Some(None);
            f.name = Some((*name).to_owned());
        }
        _ => return None,
    }
    Some(f)
}

#[cfg(test)]
mod tests {
    use strata_protocol::model::Space;

    use super::*;

    fn key(group: &str, version: &str, kind: &str, ns: Option<&str>, name: &str) -> ObjectKey {
        ObjectKey {
            space: Space::default_space(),
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            namespace: ns.map(str::to_owned),
            name: name.into(),
        }
    }

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

    #[test]
    fn namespaced_paths_name_one_object_or_a_list() {
        let f = parse(&[
            "apis",
            "apps",
            "v1",
            "namespaces",
            "shop",
            "deployments",
            "web",
        ])
        .expect("a resource path");
        assert!(f.matches(&key("apps", "v1", "Deployment", Some("shop"), "web")));
        assert!(!f.matches(&key("apps", "v1", "Deployment", Some("other"), "web")));
        assert!(!f.matches(&key("apps", "v1", "Deployment", Some("shop"), "api")));
        assert!(!f.matches(&key("", "v1", "Deployment", Some("shop"), "web")));
        let list = parse(&["api", "v1", "namespaces", "shop", "configmaps"]).expect("a list");
        assert!(list.matches(&key("", "v1", "ConfigMap", Some("shop"), "a")));
        assert!(!list.matches(&key("", "v1", "Secret", Some("shop"), "a")));
    }

    #[test]
    fn core_namespace_path_is_the_namespace_itself() {
        let f = parse(&["api", "v1", "namespaces", "shop"]).expect("a resource path");
        assert!(f.matches(&key("", "v1", "Namespace", None, "shop")));
        assert!(!f.matches(&key("", "v1", "ConfigMap", Some("shop"), "x")));
    }

    #[test]
    fn cluster_scoped_and_all_namespace_paths() {
        let all = parse(&["apis", "apps", "v1", "deployments"]).expect("a list");
        assert!(all.matches(&key("apps", "v1", "Deployment", Some("a"), "x")));
        assert!(all.matches(&key("apps", "v1", "Deployment", Some("b"), "y")));
        let crd = parse(&[
            "apis",
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "widgets.example.com",
        ])
        .expect("a resource path");
        assert!(crd.matches(&key(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            None,
            "widgets.example.com"
        )));
        assert_eq!(parse(&["apis", "apps"]), None);
        assert_eq!(parse(&["objects"]), None);
        assert_eq!(parse(&["api", "v1", "a", "b", "c"]), None);
    }
}
