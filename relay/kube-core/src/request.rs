//! Parsing a request of the Kubernetes API into what it asks ([`Operation`]): the path's
//! group, version, resource, namespace, name and subresource, and the query's
//! selectors, pages, validation, dry run, field manager and watch parameters.

use crate::deletion::DeleteOptions;
use crate::params::{ListParams, WatchParams, param};
use crate::schema_check::FieldValidation;
use crate::{Status, decode};

/// The parts of an HTTP request that say what it asks.
#[derive(Debug, Clone, Copy)]
pub struct ApiRequest<'a> {
    /// `GET`, `POST`, ...
    pub method: &'a str,
    /// The path's segments under the space's prefix (`["apis", "apps", "v1", ...]`).
    pub path: &'a [&'a str],
    /// Query parameters, in order.
    pub query: &'a [(String, String)],
    /// The `Accept` header.
    pub accept: &'a str,
    /// The `Content-Type` header.
    pub content_type: &'a str,
    /// The body.
    pub body: &'a [u8],
}

/// What a request asks, owned, to run inside the node's task.
#[derive(Debug)]
pub enum Operation {
    /// `GET /version`.
    Version,
    /// `GET /api`.
    CoreVersions,
    /// `GET /apis`.
    Groups,
    /// `GET /apis/{group}`.
    Group(String),
    /// `GET /api/{version}` (group `""`) or `/apis/{group}/{version}`.
    Resources(String, String),
    /// Anything on one resource type.
    Resource(Box<ResourceRequest>),
}

/// A request on one resource type: its objects, one of them, or a subresource.
#[derive(Debug, Clone)]
pub struct ResourceRequest {
    /// `GET`, `POST`, `PUT`, `PATCH`, `DELETE`.
    pub method: String,
    /// API group (`""`: core).
    pub group: String,
    /// API version.
    pub version: String,
    /// The resource's plural.
    pub plural: String,
    /// The namespace the path names.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: Option<String>,
    /// `status`, `scale`, ...
    pub subresource: Option<String>,
    /// Selectors, pages and version of a list (or a watch).
    pub list: ListParams,
    /// Whether the client asked for a table (`kubectl get`).
    pub table: bool,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `fieldValidation`.
    pub validation: FieldValidation,
    /// The `Content-Type` header.
    pub content_type: String,
    /// The body.
    pub body: Vec<u8>,
    /// A watch's parameters: `Some` for a `GET` of a collection with `watch=true`.
    pub watch: Option<WatchParams>,
    /// `fieldManager`, decoded.
    pub field_manager: Option<String>,
    /// `force=true` (server-side apply).
    pub force: bool,
    /// A delete's options (its `DeleteOptions` body and query); the default otherwise.
    pub delete: DeleteOptions,
}

fn not_found(message: String) -> Status {
    Status::failure(404, "NotFound", message, None)
}

impl Operation {
    /// Parses `req`; a path that names nothing served answers 404, a bad parameter 400.
    pub fn parse(req: &ApiRequest<'_>) -> Result<Operation, Status> {
        let rest = req.path;
        let get = req.method == "GET";
        let (group, version, tail): (&str, &str, &[&str]) = match rest {
            ["version"] if get => return Ok(Operation::Version),
            ["api"] if get => return Ok(Operation::CoreVersions),
            ["apis"] if get => return Ok(Operation::Groups),
            ["apis", g] if get => return Ok(Operation::Group((*g).to_owned())),
            ["api", v] if get => return Ok(Operation::Resources(String::new(), (*v).to_owned())),
            ["apis", g, v] if get => {
                return Ok(Operation::Resources((*g).to_owned(), (*v).to_owned()));
            }
            ["openapi", ..] => {
                return Err(not_found(format!(
                    "no OpenAPI document at /{}",
                    rest.join("/")
                )));
            }
            ["api", v, tail @ ..] => ("", *v, tail),
            ["apis", g, v, tail @ ..] => (*g, *v, tail),
            _ => {
                return Err(not_found(format!(
                    "the server could not find the requested resource: {}",
                    rest.join("/")
                )));
            }
        };
        let (namespace, plural, name, subresource) = match tail {
            ["namespaces", ns, plural, name, sub] => (Some(*ns), *plural, Some(*name), Some(*sub)),
            ["namespaces", ns, plural, name] => (Some(*ns), *plural, Some(*name), None),
            ["namespaces", ns, plural] => (Some(*ns), *plural, None, None),
            // The Namespace object itself.
            ["namespaces", name] => (None, "namespaces", Some(*name), None),
            [plural, name, sub] => (None, *plural, Some(*name), Some(*sub)),
            [plural, name] => (None, *plural, Some(*name), None),
            [plural] => (None, *plural, None, None),
            _ => return Err(not_found("no such resource path".into())),
        };
        let q = req.query;
        let list = ListParams::parse(q)?;
        if get && name.is_none() {
            crate::params::validate_list_options(q, WatchParams::asked(q))?;
        }
        let watch = if get && name.is_none() && WatchParams::asked(q) {
            Some(WatchParams::parse(q)?)
        } else {
            None
        };
        // client-go's typed clients send DeleteOptions as protobuf when they speak it.
        let delete = match req.method {
            "DELETE" if req.content_type.contains("protobuf") && !req.body.is_empty() => {
                let options = crate::protobuf::decode(req.body).map_err(|e| {
                    Status::bad_request(format!("the DeleteOptions body does not decode: {e}"))
                })?;
                if options["kind"] != "DeleteOptions" {
                    return Err(Status::bad_request(format!(
                        "a delete's body is a DeleteOptions, not a {}",
                        options["kind"].as_str().unwrap_or_default()
                    )));
                }
                DeleteOptions::from_value(q, &options)?
            }
            "DELETE" if req.content_type.contains("protobuf") => DeleteOptions::parse(q, b"")?,
            "DELETE" => DeleteOptions::parse(q, req.body)?,
            _ => DeleteOptions::default(),
        };
        Ok(Operation::Resource(Box::new(ResourceRequest {
            method: req.method.to_owned(),
            group: group.to_owned(),
            version: version.to_owned(),
            plural: plural.to_owned(),
            namespace: namespace.map(str::to_owned),
            name: name.map(str::to_owned),
            subresource: subresource.map(str::to_owned),
            list,
            table: req.accept.contains("as=Table"),
            dry_run: param(q, "dryRun").is_some_and(|d| d == "All"),
            validation: FieldValidation::parse(param(q, "fieldValidation")),
            content_type: req.content_type.to_owned(),
            body: req.body.to_vec(),
            watch,
            field_manager: param(q, "fieldManager").map(decode),
            force: param(q, "force") == Some("true"),
            delete,
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(method: &str, path: &str, query: &[(&str, &str)]) -> Result<Operation, Status> {
        let path: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let query: Vec<(String, String)> = query
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Operation::parse(&ApiRequest {
            method,
            path: &path,
            query: &query,
            accept: "application/json",
            content_type: "",
            body: b"",
        })
    }

    #[test]
    fn paths_name_the_resource() {
        let Ok(Operation::Resource(r)) = parse(
            "GET",
            "apis/apps/v1/namespaces/ns/deployments/web/scale",
            &[],
        ) else {
            panic!("a resource");
        };
        assert_eq!(
            (r.group.as_str(), r.version.as_str(), r.plural.as_str()),
            ("apps", "v1", "deployments")
        );
        assert_eq!(r.namespace.as_deref(), Some("ns"));
        assert_eq!(r.name.as_deref(), Some("web"));
        assert_eq!(r.subresource.as_deref(), Some("scale"));
        let Ok(Operation::Resource(r)) = parse("GET", "api/v1/pods", &[("watch", "true")]) else {
            panic!("a resource");
        };
        assert!(r.watch.is_some());
        assert!(matches!(parse("GET", "apis/apps", &[]), Ok(Operation::Group(g)) if g == "apps"));
        assert_eq!(
            parse("GET", "openapi/v9", &[])
                .map(|_| ())
                .unwrap_err()
                .code,
            404
        );
        assert_eq!(
            parse("GET", "api/v1/pods", &[("limit", "x")])
                .map(|_| ())
                .unwrap_err()
                .code,
            400
        );
    }

    /// A length-delimited protobuf field.
    fn field(number: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![number << 3 | 2, u8::try_from(bytes.len()).unwrap()];
        out.extend_from_slice(bytes);
        out
    }

    #[test]
    fn a_protobuf_delete_options_body_is_read() {
        // client-go's typed client deleting a Deployment: DeleteOptions in apps/v1.
        let type_meta = [field(1, b"apps/v1"), field(2, b"DeleteOptions")].concat();
        let options = [field(2, &field(2, b"7")), field(4, b"Foreground")].concat();
        let body = [b"k8s\0".to_vec(), field(1, &type_meta), field(2, &options)].concat();
        let path = [
            "apis",
            "apps",
            "v1",
            "namespaces",
            "ns",
            "deployments",
            "web",
        ];
        let delete = |body: &[u8]| {
            Operation::parse(&ApiRequest {
                method: "DELETE",
                path: &path,
                query: &[],
                accept: "application/json",
                content_type: "application/vnd.kubernetes.protobuf",
                body,
            })
        };
        let Ok(Operation::Resource(r)) = delete(&body) else {
            panic!("a delete");
        };
        assert_eq!(
            r.delete.propagation,
            crate::deletion::Propagation::Foreground
        );
        assert_eq!(r.delete.resource_version.as_deref(), Some("7"));
        let Ok(Operation::Resource(r)) = delete(b"") else {
            panic!("a delete");
        };
        assert_eq!(
            r.delete.propagation,
            crate::deletion::Propagation::Background
        );
        let refused = delete(b"k8s\0\x0a\x05").map(|_| ()).unwrap_err();
        assert_eq!(refused.code, 400, "{}", refused.message);
    }
}
