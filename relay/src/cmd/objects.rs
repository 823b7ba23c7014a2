//! `relay get` and `relay delete KIND NAME`, with kubectl's habits: `-n/--namespace`
//! (default `default`), `-A/--all-namespaces`, `-l/--selector`, `-o
//! name|yaml|json|wide`, kinds resolved by the root's discovery ([`crate::cmd::kinds`]).
//!
//! `-o yaml` and `-o json` print the objects as the Kubernetes API serves them (one
//! object; several as YAML documents, or a JSON `List`), without `status.strata`, so the output can be applied again with `relay apply -f` or
//! `kubectl apply -f`. The table shows each object's rollout per placement.

use hyper::{Method, StatusCode};
use serde_json::{Value, json};

use crate::client::ApiClient;
use crate::cmd::api::{ApiArgs, CallError, Output};
use crate::cmd::kinds::{self, Kind};

/// Why `relay get` or `relay delete KIND NAME` failed.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // `NotFound` names what was asked for
pub enum ObjectsError {
    /// The API could not be asked, or refused.
    #[error(transparent)]
    Call(#[from] CallError),
    /// The KIND could not be resolved.
    #[error(transparent)]
    Kind(#[from] crate::cmd::kinds::ResolveError),
    /// `relay get KIND NAME` found nothing.
    #[error("{kind} {name:?} not found in space {space:?}{}", namespace.as_ref().map(|n| format!(", namespace {n:?}")).unwrap_or_default())]
    NotFound {
        kind: String,
        name: String,
        space: String,
        namespace: Option<String>,
    },
    /// The answer could not be written as JSON.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// The answer could not be written as YAML.
    #[error(transparent)]
    Yaml(#[from] serde_saphyr::ser::Error),
}

/// Which objects `relay get` or `relay delete` is about.
#[derive(Debug, Clone)]
pub struct Selection {
    /// The KIND argument as typed.
    pub kind: String,
    /// One object, or all that match.
    pub name: Option<String>,
    /// The namespace (for namespaced kinds).
    pub namespace: String,
    /// Every namespace (`-A`).
    pub all_namespaces: bool,
    /// A label selector (`-l`).
    pub selector: Option<String>,
}

fn client(api: &ApiArgs) -> Result<ApiClient, ObjectsError> {
    api.client().map_err(ObjectsError::Call)
}

async fn resolve(client: &ApiClient, api: &ApiArgs, word: &str) -> Result<Kind, ObjectsError> {
    Ok(kinds::resolve(client, &api.space(), word).await?)
}

/// A refusal from the Kubernetes API (a `metav1.Status`) as an error.
fn refused(status: StatusCode, v: &Value) -> ObjectsError {
    ObjectsError::Call(CallError::Refused {
        status,
        message: v["message"]
            .as_str()
            .or(v["error"].as_str())
            .unwrap_or("request refused")
            .to_owned(),
        errors: Vec::new(),
    })
}

async fn ask(client: &ApiClient, method: Method, path: &str) -> Result<Value, ObjectsError> {
    let (status, v) = client
        .request(method, path, None)
        .await
        .map_err(|e| ObjectsError::Call(CallError::Request(e)))?;
    if status.is_success() {
        Ok(v)
    } else {
        Err(refused(status, &v))
    }
}

/// `relay get`.
pub async fn get(api: &ApiArgs, what: Selection, output: Output) -> Result<(), ObjectsError> {
    let client = client(api)?;
    let kind = resolve(&client, api, &what.kind).await?;
    let namespace = (kind.namespaced && !what.all_namespaces).then_some(what.namespace.as_str());
    if let Output::Table | Output::Wide | Output::Summary = output {
        return table(&client, api, &kind, &what, namespace, output).await;
    }
    let mut path = kind.path(&api.space(), namespace, what.name.as_deref());
    if let (None, Some(sel)) = (&what.name, &what.selector) {
        path.push_str(&format!("?labelSelector={}", kinds::encode(sel)));
    }
    let v = ask(&client, Method::GET, &path).await?;
    let items: Vec<Value> = if what.name.is_some() {
        vec![v]
    } else {
        v["items"].as_array().cloned().unwrap_or_default()
    };
    let document = match (&what.name, items.first()) {
        (Some(_), Some(one)) => one.clone(),
        _ => {
            json!({ "apiVersion": "v1", "kind": "List", "metadata": { "resourceVersion": "" }, "items": items })
        }
    };
    match output {
        Output::Name => {
            for item in &items {
                println!(
                    "{}/{}",
                    kind.name_prefix(),
                    item["metadata"]["name"].as_str().unwrap_or_default()
                );
            }
        }
        Output::Json => println!("{}", serde_json::to_string_pretty(&document)?),
        // Several objects as YAML documents one after another: what `relay apply -f`
        // and `kubectl apply -f` both take.
        Output::Yaml if what.name.is_none() => {
            for item in &items {
                print!("---\n{}", serde_saphyr::to_string(item)?);
            }
        }
        Output::Yaml => print!("{}", serde_saphyr::to_string(&document)?),
        Output::Table | Output::Wide | Output::Summary => {}
    }
    Ok(())
}

/// The table of objects with their rollout per placement.
async fn table(
    client: &ApiClient,
    api: &ApiArgs,
    kind: &Kind,
    what: &Selection,
    namespace: Option<&str>,
    output: Output,
) -> Result<(), ObjectsError> {
    let mut path = format!(
        "/spaces/{}/objects?kind={}&group={}",
        api.space(),
        kind.kind,
        kinds::encode(&kind.group)
    );
    if let Some(ns) = namespace {
        path.push_str(&format!("&namespace={ns}"));
    }
    if let Some(n) = &what.name {
        path.push_str(&format!("&name={n}"));
    }
    if let Some(sel) = &what.selector {
        path.push_str(&format!("&labelSelector={}", kinds::encode(sel)));
    }
    let v = ask(client, Method::GET, &path).await?;
    let items = v["items"].as_array().cloned().unwrap_or_default();
    if let (Some(name), true) = (&what.name, items.is_empty()) {
        return Err(ObjectsError::NotFound {
            kind: kind.name_prefix(),
            name: name.clone(),
            space: api.space(),
            namespace: namespace.map(str::to_owned),
        });
    }
    if let Output::Summary = output {
        println!("{}", serde_json::to_string_pretty(&items)?);
        return Ok(());
    }
    print!(
        "{}",
        crate::cmd::views::objects_table(
            &items,
            matches!(output, Output::Wide),
            strata_node::clock::Clock::start().wall().0,
        )
    );
    // A placement that rolls out: a line under it saying where its rollout stands.
    if kind.group == "strata.dev" && kind.kind == "Placement" {
        for item in &items {
            let name = item["key"]["name"].as_str().unwrap_or_default();
            let v = ask(
                client,
                Method::GET,
                &kind.path(&api.space(), None, Some(name)),
            )
            .await?;
            if v["status"]["rollout"].is_object() {
                println!(
                    "  rollout: {}",
                    crate::cmd::rollout::status_line(name, &v["status"], false)
                );
            }
        }
    }
    Ok(())
}

/// `relay delete KIND NAME`: that one object, in the given namespace only.
pub async fn delete(
    api: &ApiArgs,
    kind: &str,
    name: &str,
    namespace: &str,
) -> Result<(), ObjectsError> {
    let client = client(api)?;
    let kind = resolve(&client, api, kind).await?;
    let ns = kind.namespaced.then_some(namespace);
    ask(
        &client,
        Method::DELETE,
        &kind.path(&api.space(), ns, Some(name)),
    )
    .await?;
    match ns {
        Some(ns) => println!("deleted {}/{name} in namespace {ns}", kind.name_prefix()),
        None => println!("deleted {}/{name}", kind.name_prefix()),
    }
    Ok(())
}
