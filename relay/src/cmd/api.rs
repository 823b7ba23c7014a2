//! How the `relay` commands reach the root's API: the connection's arguments, the
//! output formats, and why a call or the manifests it would send failed. Below the
//! command line (`cmd`) and the commands that call the API (`objects`).

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use hyper::StatusCode;
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

/// How to reach the root's API.
#[derive(Debug, Args)]
pub struct ApiArgs {
    /// The API's address.
    #[arg(long, env = "STRATA_SERVER", default_value = "127.0.0.1:8443")]
    pub server: SocketAddr,
    /// The root's node name, which its certificate must carry.
    #[arg(long, env = "STRATA_SERVER_NAME", default_value = "center")]
    pub server_name: String,
    /// The hierarchy's CA certificate.
    #[arg(long, env = "STRATA_CA", value_name = "FILE")]
    pub ca: PathBuf,
    /// A bearer token from the root's tokens file.
    #[arg(long, env = "STRATA_TOKEN", hide_env_values = true)]
    pub token: String,
    /// The space.
    #[arg(long, env = "STRATA_SPACE", default_value = "default")]
    pub space: String,
}

impl ApiArgs {
    /// The API client these arguments describe.
    pub fn client(&self) -> Result<ApiClient, TlsError> {
        ApiClient::new(self.server, &self.server_name, &self.ca, &self.token)
    }
}

/// Why a call to the API failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The CA file is unusable.
    #[error(transparent)]
    Client(#[from] TlsError),
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
