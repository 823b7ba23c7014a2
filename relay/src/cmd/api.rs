//! How the `relay` commands reach the root's API: the connection's arguments, the
//! output formats, and why a call or the manifests it would send failed. Below the
//! command line (`cmd`) and the commands that call the API (`objects`).

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use hyper::{Method, StatusCode};
use serde_json::Value;
use strata_node::dial::ParentAddress;
use strata_node::tls::TlsError;

use crate::client::{ApiClient, RequestError};

/// Output formats of `get`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Output {
    /// A table.
    Table,
    /// The table with error samples and versions.
    Wide,
    /// YAML.
    Yaml,
    /// JSON.
    Json,
    /// `kind.group/name`, one a line.
    Name,
    /// Strata's own view as JSON: each object with its rollout and status summary per
    /// placement (what the table shows, in full; one cluster's exact status).
    Summary,
}

/// How to reach the root's API: each of `--server`, `--server-name`, `--ca`, `--token`
/// and `--space` (or its `STRATA_*` variable) when given, else what the kubeconfig's
/// context says (`--kubeconfig`, `KUBECONFIG`, `~/.kube/config`; `--context`, else its
/// current context; see [`super::kube_context`]), else the defaults. With both
/// `STRATA_CA` and `STRATA_TOKEN` set, no kubeconfig is read.
#[derive(Debug, Args)]
pub struct ApiArgs {
    /// The API's address: `IP:PORT`, or `host:port` (a DNS name, e.g. a load
    /// balancer's, resolved at every connect) [default: the kubeconfig's server, else
    /// 127.0.0.1:8443]
    #[arg(long, env = "STRATA_SERVER")]
    pub server: Option<ParentAddress>,
    /// The name the API's certificate must carry [default: the kubeconfig's
    /// tls-server-name or server host, else center, the root's node name]
    #[arg(long, env = "STRATA_SERVER_NAME")]
    pub server_name: Option<String>,
    /// The hierarchy's CA certificate [default: the kubeconfig's]
    #[arg(long, env = "STRATA_CA", value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// A bearer token from the root's tokens file [default: the kubeconfig user's]
    #[arg(long, env = "STRATA_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The space [default: the kubeconfig server's /spaces/NAME, else default]
    #[arg(long, env = "STRATA_SPACE")]
    pub space: Option<String>,
    /// A kubeconfig to read the rest from (as kubectl: else KUBECONFIG, else
    /// ~/.kube/config), e.g. one `relay kubeconfig` wrote
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig's context [default: its current-context]
    #[arg(long)]
    pub context: Option<String>,
    /// The kubeconfig's context, read once.
    #[arg(skip)]
    read: std::sync::OnceLock<Result<super::kube_context::Context, String>>,
}

impl ApiArgs {
    /// Whether the kubeconfig is needed: some of the CA and token are not given.
    fn needs_kubeconfig(&self) -> bool {
        self.ca.is_none() || self.token.is_none()
    }

    /// The kubeconfig's context, when needed (read once).
    fn context(&self) -> Option<Result<&super::kube_context::Context, &str>> {
        if !self.needs_kubeconfig() {
            return None;
        }
        let read = self.read.get_or_init(|| {
            super::kube_context::read(self.kubeconfig.as_deref(), self.context.as_deref())
                .map_err(|e| e.to_string())
        });
        Some(read.as_ref().map_err(String::as_str))
    }

    /// The space: `--space` / `STRATA_SPACE`, else the kubeconfig server's, else
    /// `default`.
    pub fn space(&self) -> String {
        if let Some(s) = &self.space {
            return s.clone();
        }
        self.context()
            .and_then(|c| c.ok()?.space.clone())
            .unwrap_or_else(|| "default".to_owned())
    }

    /// The API client these arguments describe.
    pub fn client(&self) -> Result<ApiClient, CallError> {
        use super::kube_context::Ca;
        let context = match self.context() {
            None => None,
            Some(Ok(c)) => Some(c),
            Some(Err(e)) => return Err(CallError::Kubeconfig(e.to_owned())),
        };
        let server = self
            .server
            .clone()
            .or_else(|| context.map(|c| c.server.clone()))
            .unwrap_or_else(|| {
                ParentAddress::from(std::net::SocketAddr::from(([127, 0, 0, 1], 8443)))
            });
        let server_name = self
            .server_name
            .clone()
            .or_else(|| context.map(|c| c.server_name.clone()))
            .unwrap_or_else(|| "center".to_owned());
        let token = match (&self.token, context) {
            (Some(t), _) => t.clone(),
            (None, Some(c)) => c.token.clone(),
            (None, None) => String::new(),
        };
        // A kubeconfig user with a client certificate and no token (and no --token).
        if let (None, Some(c)) = (&self.token, context)
            && let Some((cert, key)) = &c.client_certificate
        {
            let ca = match (&self.ca, &c.ca) {
                (Some(f), _) | (None, Ca::File(f)) => std::fs::read(f)
                    .map_err(|e| CallError::Kubeconfig(format!("{}: {e}", f.display())))?,
                (None, Ca::Pem(pem)) => pem.clone(),
                (None, Ca::None) => {
                    return Err(CallError::Kubeconfig(format!(
                        "{}: the context's cluster has no certificate-authority(-data): give --ca",
                        c.file.display()
                    )));
                }
            };
            return Ok(ApiClient::at_with_certificate(
                server,
                &server_name,
                &ca,
                (cert, key),
                &c.file,
            )?);
        }
        Ok(match (&self.ca, context) {
            (Some(ca), _) => ApiClient::at(server, &server_name, ca, &token)?,
            (None, Some(c)) => match &c.ca {
                Ca::File(f) => ApiClient::at(server, &server_name, f, &token)?,
                Ca::Pem(pem) => {
                    ApiClient::at_with_ca_pem(server, &server_name, pem, &c.file, &token)?
                }
                Ca::None => {
                    return Err(CallError::Kubeconfig(format!(
                        "{}: the context's cluster has no certificate-authority(-data): give --ca",
                        c.file.display()
                    )));
                }
            },
            // Without --ca the kubeconfig is read: not reached.
            (None, None) => return Err(CallError::Kubeconfig("give --ca".to_owned())),
        })
    }
}

/// Why a call to the API failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The CA file is unusable.
    #[error(transparent)]
    Client(#[from] TlsError),
    /// No kubeconfig context gives what the flags and `STRATA_*` variables did not.
    #[error("{0}")]
    Kubeconfig(String),
    /// No answer.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// The API answered with an error status.
    #[error("{status}: {message}{}", Indented(errors))]
    Refused {
        /// The answer's status.
        status: StatusCode,
        /// The answer's `error`.
        message: String,
        /// The answer's `errors`, each fault of a refused request.
        errors: Vec<String>,
    },
}

/// The root refused what a command asked (`relay cordon`, `relay rollout pause`, ...).
#[derive(Debug, thiserror::Error)]
#[error("{what}: the root answered {status}: {message}")]
pub struct Refused {
    /// What was asked.
    pub what: String,
    /// The HTTP status.
    pub status: StatusCode,
    /// The Status message.
    pub message: String,
}

impl Refused {
    /// `what` refused with `status`, saying what the answer's `message` (or `error`) says.
    pub fn answer(what: String, status: StatusCode, v: &Value) -> Self {
        let message = v["message"].as_str().or_else(|| v["error"].as_str());
        Refused {
            what,
            status,
            message: message.unwrap_or("refused").to_owned(),
        }
    }
}

/// Why manifests were not sent: nothing is sent unless every document is valid.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // each variant names the file or directory as given, and the cause
pub enum ManifestError {
    /// Standard input could not be read.
    #[error("reading standard input")]
    Stdin(#[source] std::io::Error),
    /// The directory given could not be listed.
    #[error("{dir}: cannot list")]
    List { dir: String, source: std::io::Error },
    /// A file could not be read.
    #[error("{file}: cannot read")]
    Read {
        file: String,
        source: std::io::Error,
    },
    /// Some documents are invalid.
    #[error("nothing was sent:{}", Indented(faults))]
    Invalid {
        /// Each fault, naming the file, the document and the field.
        faults: Vec<String>,
    },
}

/// Each line on a line of its own, indented under the message.
struct Indented<'a>(&'a [String]);

impl fmt::Display for Indented<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|line| write!(f, "\n  {line}"))
    }
}
pub(crate) async fn call(
    api: &ApiArgs,
    method: Method,
    path: &str,
    body: Option<Vec<u8>>,
) -> Result<Value, CallError> {
    let (status, v) = api.client()?.request(method, path, body).await?;
    if status == StatusCode::OK {
        return Ok(v);
    }
    Err(CallError::Refused {
        status,
        message: v["error"]
            .as_str()
            .or(v["message"].as_str())
            .unwrap_or("request refused")
            .to_owned(),
        errors: v["errors"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| e.as_str().unwrap_or_default().to_owned())
            .collect(),
    })
}

/// Reads a file, every *.yaml / *.yml of a directory (sorted), or standard input, and
/// checks every document before anything is sent, naming the file, the document and
/// the field of each fault. The root checks again; this is for the user's sake.
pub(crate) fn read_manifests(source: &str, space: &str) -> Result<Vec<u8>, ManifestError> {
    let mut files: Vec<(String, String)> = Vec::new();
    if source == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(ManifestError::Stdin)?;
        files.push(("<stdin>".into(), s));
    } else if Path::new(source).is_dir() {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(source)
            .map_err(|e| ManifestError::List {
                dir: source.to_owned(),
                source: e,
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
            .collect();
        paths.sort();
        for p in paths {
            let file = p.display().to_string();
            match std::fs::read_to_string(&p) {
                Ok(text) => files.push((file, text)),
                Err(source) => return Err(ManifestError::Read { file, source }),
            }
        }
    } else {
        let text = std::fs::read_to_string(source).map_err(|e| ManifestError::Read {
            file: source.to_owned(),
            source: e,
        })?;
        files.push((source.to_owned(), text));
    }
    let space = strata_protocol::model::Space(space.to_owned());
    let mut faults = Vec::new();
    for (name, text) in &files {
        if let Err(errors) = strata_node::objects::parse_manifests(text, &space) {
            faults.extend(errors.iter().map(|e| format!("{name}: {e}")));
        }
    }
    if !faults.is_empty() {
        return Err(ManifestError::Invalid { faults });
    }
    let mut body = String::new();
    for (_, text) in files {
        body.push_str("---\n");
        body.push_str(&text);
        body.push('\n');
    }
    Ok(body.into_bytes())
}
