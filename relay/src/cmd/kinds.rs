//! What the `relay` CLI's KIND argument names, resolved as kubectl resolves it: a kind,
//! its plural, its singular or a short name (`deploy`, `cm`, `svc`, `ns`), any case,
//! optionally with its group (`deployments.apps`, `menus.example.com`). The types are
//! the root's own discovery documents for the space (so CRDs applied to it count), not a
//! second list kept here.

use hyper::Method;
use serde_json::Value;

use crate::client::{ApiClient, RequestError};

/// A resource type of a space, as discovery describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kind {
    /// API group (`""`: core).
    pub group: String,
    /// The group's preferred version.
    pub version: String,
    /// `Deployment`.
    pub kind: String,
    /// `deployments`.
    pub plural: String,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
}

/// Why a KIND could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// No type of the space has that name.
    #[error("the server doesn't have a resource type {kind:?} (space {space:?})")]
    Unknown {
        /// What the user typed.
        kind: String,
        /// The space asked.
        space: String,
    },
    /// Discovery did not answer.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// Discovery answered with an error.
    #[error("discovery at {path} answered {status}: {message}")]
    Refused {
        /// The discovery path.
        path: String,
        /// The answer's status.
        status: hyper::StatusCode,
        /// What it said.
        message: String,
    },
}

impl Kind {
    /// `apps/v1`, or `v1` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// How kubectl names objects of this type with `-o name`: `deployment.apps`,
    /// `configmap`.
    pub fn name_prefix(&self) -> String {
        let kind = self.kind.to_ascii_lowercase();
        if self.group.is_empty() {
            kind
        } else {
            format!("{kind}.{}", self.group)
        }
    }

    /// The API path of the collection (in `namespace` when the type is namespaced and
    /// one is given) or of the object `name`, in `space`.
    pub fn path(&self, space: &str, namespace: Option<&str>, name: Option<&str>) -> String {
        let mut p = format!("/spaces/{space}");
        if self.group.is_empty() {
            p.push_str(&format!("/api/{}", self.version));
        } else {
            p.push_str(&format!("/apis/{}/{}", self.group, self.version));
        }
        if let (true, Some(ns)) = (self.namespaced, namespace) {
            p.push_str(&format!("/namespaces/{ns}"));
        }
        p.push('/');
        p.push_str(&self.plural);
        if let Some(n) = name {
            p.push('/');
            p.push_str(n);
        }
        p
    }
}

/// Percent-encoding of a query value (selectors carry `=`, `,`, `!`, spaces, parentheses).
pub fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Whether `word` (lowercased, without group) names the discovery entry `r`.
fn names(r: &Value, word: &str) -> bool {
    let text = |f: &str| r[f].as_str().unwrap_or_default().to_ascii_lowercase();
    text("name") == word
        || text("singularName") == word
        || text("kind") == word
        || r["shortNames"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| s.as_str().is_some_and(|s| s.eq_ignore_ascii_case(word)))
}

/// The type of `group`/`version` that `word` names in a discovery resource list.
fn find(list: &Value, group: &str, version: &str, word: &str) -> Option<Kind> {
    list["resources"]
        .as_array()?
        .iter()
        .filter(|r| !r["name"].as_str().unwrap_or("/").contains('/'))
        .find(|r| names(r, word))
        .map(|r| Kind {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: r["kind"].as_str().unwrap_or_default().to_owned(),
            plural: r["name"].as_str().unwrap_or_default().to_owned(),
            namespaced: r["namespaced"].as_bool().unwrap_or(true),
        })
}

async fn discovery(client: &ApiClient, path: &str) -> Result<Value, ResolveError> {
    let (status, v) = client.request(Method::GET, path, None).await?;
    if status.is_success() {
        return Ok(v);
    }
    Err(ResolveError::Refused {
        path: path.to_owned(),
        status,
        message: v["message"].as_str().unwrap_or_default().to_owned(),
    })
}

/// Resolves `word` against the space's discovery: the core group first, then every
/// other group in discovery's order at its preferred version, as kubectl does.
pub async fn resolve(client: &ApiClient, space: &str, word: &str) -> Result<Kind, ResolveError> {
    let lower = word.to_ascii_lowercase();
    let (name, group) = match lower.split_once('.') {
        Some((n, g)) => (n, Some(g)),
        None => (lower.as_str(), None),
    };
    let unknown = || ResolveError::Unknown {
        kind: word.to_owned(),
        space: space.to_owned(),
    };
    if name.is_empty() {
        return Err(unknown());
    }
    if group.is_none_or(|g| g.is_empty() || g == "core") {
        let core = discovery(client, &format!("/spaces/{space}/api/v1")).await?;
        if let Some(k) = find(&core, "", "v1", name) {
            return Ok(k);
        }
    }
    let groups = discovery(client, &format!("/spaces/{space}/apis")).await?;
    for g in groups["groups"].as_array().into_iter().flatten() {
        let gname = g["name"].as_str().unwrap_or_default();
        if group.is_some_and(|want| want != gname) {
            continue;
        }
        let Some(version) = g["preferredVersion"]["version"].as_str() else {
            continue;
        };
        let list = discovery(client, &format!("/spaces/{space}/apis/{gname}/{version}")).await?;
        if let Some(k) = find(&list, gname, version, name) {
            return Ok(k);
        }
    }
    Err(unknown())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn short_names_plurals_and_kinds_resolve_and_paths_follow_scope() {
        let list = json!({ "resources": [
            { "name": "deployments", "singularName": "deployment", "kind": "Deployment",
              "namespaced": true, "shortNames": ["deploy"] },
            { "name": "deployments/scale", "kind": "Scale", "namespaced": true },
        ]});
        for word in ["deploy", "deployments", "deployment"] {
            let k = find(&list, "apps", "v1", word).unwrap();
            assert_eq!(k.plural, "deployments");
        }
        assert!(find(&list, "apps", "v1", "scale").is_none());
        let k = find(&list, "apps", "v1", "deploy").unwrap();
        assert_eq!(
            k.path("default", Some("shop"), Some("web")),
            "/spaces/default/apis/apps/v1/namespaces/shop/deployments/web"
        );
        assert_eq!(k.name_prefix(), "deployment.apps");
        let ns = Kind {
            group: String::new(),
            version: "v1".into(),
            kind: "Namespace".into(),
            plural: "namespaces".into(),
            namespaced: false,
        };
        assert_eq!(ns.path("a", Some("x"), None), "/spaces/a/api/v1/namespaces");
        assert_eq!(encode("app in (a,b)"), "app%20in%20%28a%2Cb%29");
    }
}
