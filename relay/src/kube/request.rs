//! Parsing a request of the Kubernetes API into what it asks ([`Op`]): the path's
//! group, version, resource, namespace, name and subresource, and the query's
//! selectors, pages, validation, dry run, field manager and watch parameters.

use super::*;

impl Op {
    pub(super) fn parse(req: &Request<'_>, rest: &[&str]) -> Result<Op, Answer> {
        let get = req.method == "GET";
        let (group, version, tail): (&str, &str, &[&str]) = match rest {
            ["version"] if get => return Ok(Op::Version),
            ["api"] if get => return Ok(Op::CoreVersions),
            ["apis"] if get => return Ok(Op::Groups),
            ["apis", g] if get => return Ok(Op::Group((*g).to_owned())),
            ["api", v] if get => return Ok(Op::Resources(String::new(), (*v).to_owned())),
            ["apis", g, v] if get => return Ok(Op::Resources((*g).to_owned(), (*v).to_owned())),
            ["openapi", ..] => {
                return Err(failure(
                    404,
                    "NotFound",
                    format!("no OpenAPI document at /{}", rest.join("/")),
                    None,
                ));
            }
            ["api", v, tail @ ..] => ("", *v, tail),
            ["apis", g, v, tail @ ..] => (*g, *v, tail),
            _ => {
                return Err(failure(
                    404,
                    "NotFound",
                    format!(
                        "the server could not find the requested resource: {}",
                        rest.join("/")
                    ),
                    None,
                ));
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
            _ => {
                return Err(failure(
                    404,
                    "NotFound",
                    "no such resource path".into(),
                    None,
                ));
            }
        };
        let q = req.query;
        let labels = match param(q, "labelSelector") {
            Some(s) => LabelQuery::parse(&decode(s))
                .map_err(|e| failure(400, "BadRequest", format!("labelSelector: {e}"), None))?,
            None => LabelQuery::default(),
        };
        let fields = match param(q, "fieldSelector") {
            Some(s) => FieldQuery::parse(&decode(s))
                .map_err(|e| failure(400, "BadRequest", format!("fieldSelector: {e}"), None))?,
            None => FieldQuery::default(),
        };
        let number = |name: &str| -> Result<Option<usize>, Answer> {
            match param(q, name).filter(|v| !v.is_empty()) {
                None => Ok(None),
                Some(v) => v.parse().map(Some).map_err(|_| {
                    failure(
                        400,
                        "BadRequest",
                        format!("{name}: {v:?} is not a number"),
                        None,
                    )
                }),
            }
        };
        Ok(Op::Resource(Box::new(ResourceOp {
            method: req.method.to_owned(),
            group: group.to_owned(),
            version: version.to_owned(),
            plural: plural.to_owned(),
            namespace: namespace.map(str::to_owned),
            name: name.map(str::to_owned),
            subresource: subresource.map(str::to_owned),
            labels,
            fields,
            limit: number("limit")?.filter(|l| *l > 0),
            cont: number("continue")?,
            table: req.accept.contains("as=Table"),
            dry_run: param(q, "dryRun").is_some_and(|d| d == "All"),
            validation: FieldValidation::parse(param(q, "fieldValidation")),
            warnings: std::cell::RefCell::default(),
            content_type: req.content_type.to_owned(),
            body: req.body.to_vec(),
            field_manager: param(q, "fieldManager").map(decode),
            force: param(q, "force") == Some("true"),
            list_version: (
                number("resourceVersion")?,
                param(q, "resourceVersionMatch").map(str::to_owned),
            ),
            watch: if get
                && name.is_none()
                && param(q, "watch").is_some_and(|w| w == "true" || w == "1")
            {
                Some(WatchParams {
                    from: number("resourceVersion")?.map(|v| v as u64),
                    bookmarks: param(q, "allowWatchBookmarks") == Some("true"),
                    timeout: number("timeoutSeconds")?
                        .map(|s| std::time::Duration::from_secs(s as u64)),
                })
            } else {
                None
            },
        })))
    }
}
