//! `relay kubeconfig`: a kubeconfig for a space (or, with `--cluster`, a cluster's own
//! API through the tiers) and a user, whose `server:` the root's
//! API certificate covers when it can (then without `tls-server-name`).

use std::path::{Path, PathBuf};
use strata_node::dial::ParentAddress;

use clap::Args;
use rustls_pki_types::ServerName;
use tokio_rustls::TlsConnector;

use crate::kube::kubeconfig::{KubeconfigSpec, kubeconfig};

/// How to reach the API, and whose token a kubeconfig carries.
#[derive(Debug, Args)]
pub struct KubeconfigArgs {
    /// The API's address: `IP:PORT`, or `host:port` (a DNS name, written as it is into
    /// the kubeconfig's server)
    #[arg(long, env = "STRATA_SERVER", default_value = "127.0.0.1:8443")]
    pub server: ParentAddress,
    /// The root's node name, which its certificate carries (`tls-server-name` when the
    /// certificate does not cover the address).
    #[arg(long, env = "STRATA_SERVER_NAME", default_value = "center")]
    pub server_name: String,
    /// The hierarchy's CA certificate.
    #[arg(long, env = "STRATA_CA", value_name = "FILE")]
    pub ca: PathBuf,
    /// The bearer token to put in (not needed with `--user`).
    #[arg(
        long,
        env = "STRATA_TOKEN",
        hide_env_values = true,
        required_unless_present = "user"
    )]
    pub token: Option<String>,
    /// The space.
    #[arg(long, env = "STRATA_SPACE", default_value = "default")]
    pub space: String,
    /// A cluster's own Kubernetes API through the tiers instead of a space (the debug
    /// tunnel, `https://ROOT/clusters/NAME`; the token needs `debug`).
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,
    /// Use this user's token: the line `TOKEN user=U ...` of the tokens file.
    #[arg(long, value_name = "U", requires = "tokens")]
    pub user: Option<String>,
    /// The root's tokens file (`api.tokens` in the directory `relay topology certs` or
    /// `relay up --data` wrote): where `--user` is looked up, and what names the user
    /// of `--token`.
    #[arg(long, env = "STRATA_TOKENS", value_name = "FILE")]
    pub tokens: Option<PathBuf>,
}

/// Why no kubeconfig was printed.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // each names the file and the cause
pub enum KubeconfigError {
    /// The CA could not be read.
    #[error("cannot read the CA {path}")]
    ReadCa {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The tokens file could not be read.
    #[error("cannot read the tokens file {path}")]
    ReadTokens {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The tokens file does not parse.
    #[error("{path}: {reason}")]
    BadTokens { path: PathBuf, reason: String },
    /// No line of the tokens file is that user's.
    #[error("{path}: no token of user {user:?} (users there: {known})")]
    NoSuchUser {
        path: PathBuf,
        user: String,
        known: String,
    },
}

/// The token and user name the arguments ask for.
fn credentials(args: &KubeconfigArgs) -> Result<(String, Option<String>), KubeconfigError> {
    let grants = match &args.tokens {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|source| KubeconfigError::ReadTokens {
                    path: path.clone(),
                    source,
                })?;
            crate::api::auth::parse_tokens(&text).map_err(|reason| KubeconfigError::BadTokens {
                path: path.clone(),
                reason: reason.to_string(),
            })?
        }
        None => Vec::new(),
    };
    if let (Some(user), Some(path)) = (&args.user, &args.tokens) {
        return match grants.iter().find(|g| &g.user == user) {
            Some(g) => Ok((g.token.clone(), Some(user.clone()))),
            None => {
                let mut known: Vec<&str> = grants.iter().map(|g| g.user.as_str()).collect();
                known.dedup();
                Err(KubeconfigError::NoSuchUser {
                    path: path.clone(),
                    user: user.clone(),
                    known: known.join(", "),
                })
            }
        };
    }
    let token = args.token.clone().unwrap_or_default();
    let user = grants
        .iter()
        .find(|g| g.token == token)
        .map(|g| g.user.clone());
    Ok((token, user))
}

/// Whether the root's API certificate at `server` is valid for its IP address or DNS
/// name: a TLS handshake naming it, checked against the CA.
pub async fn covers_address(server: &ParentAddress, ca: &Path) -> bool {
    let Ok(config) = strata_node::tls::api_client_config(ca) else {
        return false;
    };
    let Ok(tcp) = strata_node::dial::tcp_happy_eyeballs(&server.to_string()).await else {
        return false;
    };
    let Ok(name) = ServerName::try_from(server.host()) else {
        return false;
    };
    TlsConnector::from(config).connect(name, tcp).await.is_ok()
}

/// The kubeconfig `args` describe.
pub async fn run(args: &KubeconfigArgs) -> Result<String, KubeconfigError> {
    let ca = std::fs::read(&args.ca).map_err(|source| KubeconfigError::ReadCa {
        path: args.ca.clone(),
        source,
    })?;
    let (token, user) = credentials(args)?;
    let covered = covers_address(&args.server, &args.ca).await;
    let server = args.server.to_string();
    Ok(kubeconfig(&KubeconfigSpec {
        server: &server,
        tls_server_name: (!covered).then_some(args.server_name.as_str()),
        ca_pem: &ca,
        token: &token,
        space: &args.space,
        user: user.as_deref(),
        cluster: args.cluster.as_deref(),
    }))
}
