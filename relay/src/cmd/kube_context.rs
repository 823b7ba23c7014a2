//! Where the root's API is and how to prove who we are, from a kubeconfig, as kubectl
//! reads one: `--kubeconfig FILE`, else `KUBECONFIG` (a list of files, merged: the
//! first file naming a context, cluster or user wins, and the first `current-context`),
//! else `~/.kube/config`; the context `--context` names, else the current one. From it:
//! the cluster's `server` (`https://HOST:PORT/spaces/NAME`, what `relay kubeconfig`
//! writes: the space is the path's), `certificate-authority-data` or
//! `certificate-authority`, `tls-server-name`, and the user's `token` or `tokenFile`.
//! A user with a client certificate and no token presents the certificate (for a root
//! whose `api.client_certificates` trusts its CA).

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;
use strata_node::dial::ParentAddress;

/// What a kubeconfig context says about the root's API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    /// The file the context came from.
    pub file: PathBuf,
    /// The server's `host:port`.
    pub server: ParentAddress,
    /// The name its certificate is checked against: `tls-server-name`, else the host.
    pub server_name: String,
    /// The CA: PEM from `certificate-authority-data`, or a file.
    pub ca: Ca,
    /// The bearer token (empty for a user with a client certificate only).
    pub token: String,
    /// The user's client certificate and key, PEM, when it has no token
    /// (`client-certificate(-data)`, `client-key(-data)`).
    pub client_certificate: Option<(Vec<u8>, Vec<u8>)>,
    /// The space the server's path names (`/spaces/NAME`), if any.
    pub space: Option<String>,
}

/// Where the CA comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ca {
    /// `certificate-authority-data`, decoded.
    Pem(Vec<u8>),
    /// `certificate-authority`, a file.
    File(PathBuf),
    /// Neither: the system's roots are not used by the root's API client.
    None,
}

/// Why no usable context was found; each names the file and the entry.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // each variant names the file and what is wrong
pub enum ContextError {
    #[error(
        "no kubeconfig: give --kubeconfig, KUBECONFIG or ~/.kube/config, or the STRATA_* variables"
    )]
    NoFile,
    #[error("{path}: cannot read the kubeconfig: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a kubeconfig: {detail}")]
    Parse { path: PathBuf, detail: String },
    #[error("{files}: no context {name:?}")]
    NoContext { files: String, name: String },
    #[error("{files}: no current-context (give --context)")]
    NoCurrent { files: String },
    #[error("{path}: context {context:?}: {detail}")]
    Bad {
        path: PathBuf,
        context: String,
        detail: String,
    },
}

#[derive(Debug, Default, Deserialize)]
struct Raw {
    #[serde(default)]
    clusters: Vec<NamedCluster>,
    #[serde(default)]
    users: Vec<NamedUser>,
    #[serde(default)]
    contexts: Vec<NamedContext>,
    #[serde(default, rename = "current-context")]
    current_context: Option<String>,
}

#[derive(Debug, Deserialize)]
struct NamedCluster {
    name: String,
    cluster: RawCluster,
}

#[derive(Debug, Deserialize)]
struct RawCluster {
    server: String,
    #[serde(default, rename = "certificate-authority-data")]
    ca_data: Option<String>,
    #[serde(default, rename = "certificate-authority")]
    ca_file: Option<PathBuf>,
    #[serde(default, rename = "tls-server-name")]
    tls_server_name: Option<String>,
}

#[derive(Debug, Deserialize)]
struct NamedUser {
    name: String,
    #[serde(default)]
    user: RawUser,
}

#[derive(Debug, Default, Deserialize)]
struct RawUser {
    #[serde(default)]
    token: Option<String>,
    #[serde(default, rename = "tokenFile")]
    token_file: Option<PathBuf>,
    #[serde(default, rename = "client-certificate")]
    client_certificate: Option<PathBuf>,
    #[serde(default, rename = "client-certificate-data")]
    client_certificate_data: Option<String>,
    #[serde(default, rename = "client-key")]
    client_key: Option<PathBuf>,
    #[serde(default, rename = "client-key-data")]
    client_key_data: Option<String>,
}

#[derive(Debug, Deserialize)]
struct NamedContext {
    name: String,
    context: RawContext,
}

#[derive(Debug, Deserialize)]
struct RawContext {
    cluster: String,
    #[serde(default)]
    user: Option<String>,
}

/// The kubeconfig files, as kubectl looks for them.
fn files(explicit: Option<&Path>) -> Vec<PathBuf> {
    if let Some(p) = explicit {
        return vec![p.to_owned()];
    }
    if let Some(list) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
        return std::env::split_paths(&list)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
    }
    std::env::var_os("HOME")
        .map(|h| vec![PathBuf::from(h).join(".kube/config")])
        .unwrap_or_default()
}

/// Reads the context `context` (else the current one) of the kubeconfig `explicit`
/// (else `KUBECONFIG`, else `~/.kube/config`).
pub fn read(explicit: Option<&Path>, context: Option<&str>) -> Result<Context, ContextError> {
    let mut loaded: Vec<(PathBuf, Raw)> = Vec::new();
    for path in files(explicit) {
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            // In a KUBECONFIG list, a missing file is skipped, as kubectl does; a file
            // named with --kubeconfig must exist.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && explicit.is_none() => {
                continue;
            }
            Err(source) => return Err(ContextError::Read { path, source }),
        };
        let raw: Raw = serde_saphyr::from_str(&text).map_err(|e| ContextError::Parse {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        loaded.push((path, raw));
    }
    if loaded.is_empty() {
        return Err(ContextError::NoFile);
    }
    let names = || {
        loaded
            .iter()
            .map(|(p, _)| p.display().to_string())
            .collect::<Vec<_>>()
            .join(":")
    };
    let wanted = match context {
        Some(c) => c.to_owned(),
        None => loaded
            .iter()
            .find_map(|(_, r)| r.current_context.clone().filter(|c| !c.is_empty()))
            .ok_or_else(|| ContextError::NoCurrent { files: names() })?,
    };
    let (path, ctx) = loaded
        .iter()
        .find_map(|(p, r)| r.contexts.iter().find(|c| c.name == wanted).map(|c| (p, c)))
        .ok_or_else(|| ContextError::NoContext {
            files: names(),
            name: wanted.clone(),
        })?;
    let bad = |detail: String| ContextError::Bad {
        path: path.clone(),
        context: wanted.clone(),
        detail,
    };
    let cluster = loaded
        .iter()
        .find_map(|(_, r)| r.clusters.iter().find(|c| c.name == ctx.context.cluster))
        .ok_or_else(|| bad(format!("no cluster {:?}", ctx.context.cluster)))?;
    let user = match &ctx.context.user {
        Some(u) => Some(
            loaded
                .iter()
                .find_map(|(_, r)| r.users.iter().find(|x| &x.name == u))
                .ok_or_else(|| bad(format!("no user {u:?}")))?,
        ),
        None => None,
    };
    // Relative files are relative to the kubeconfig that names them, as kubectl reads.
    let base = path.parent().unwrap_or(Path::new("."));
    let (server, host, space) = parse_server(&cluster.cluster.server).map_err(bad)?;
    let ca = match (&cluster.cluster.ca_data, &cluster.cluster.ca_file) {
        (Some(data), _) => Ca::Pem(
            base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .map_err(|e| bad(format!("certificate-authority-data: not base64: {e}")))?,
        ),
        (None, Some(f)) => Ca::File(base.join(f)),
        (None, None) => Ca::None,
    };
    // `X-data` (base64) or the file `X`, relative to the kubeconfig.
    let data_or_file =
        |what: &str, data: &Option<String>, file: &Option<PathBuf>| match (data, file) {
            (Some(d), _) => base64::engine::general_purpose::STANDARD
                .decode(d.trim())
                .map(Some)
                .map_err(|e| bad(format!("{what}-data: not base64: {e}"))),
            (None, Some(f)) => std::fs::read(base.join(f))
                .map(Some)
                .map_err(|e| bad(format!("{what} {}: {e}", base.join(f).display()))),
            (None, None) => Ok(None),
        };
    let mut client_certificate = None;
    let token = match user.map(|u| &u.user) {
        Some(RawUser { token: Some(t), .. }) => t.trim().to_owned(),
        Some(RawUser {
            token_file: Some(f),
            ..
        }) => {
            let f = base.join(f);
            std::fs::read_to_string(&f)
                .map_err(|e| bad(format!("tokenFile {}: {e}", f.display())))?
                .trim()
                .to_owned()
        }
        Some(u) if u.client_certificate.is_some() || u.client_certificate_data.is_some() => {
            let cert = data_or_file(
                "client-certificate",
                &u.client_certificate_data,
                &u.client_certificate,
            )?;
            let key = data_or_file("client-key", &u.client_key_data, &u.client_key)?;
            match (cert, key) {
                (Some(c), Some(k)) => client_certificate = Some((c, k)),
                _ => {
                    return Err(bad(
                        "its user has a client certificate and no client-key(-data)".into(),
                    ));
                }
            }
            String::new()
        }
        _ => return Err(bad("its user has no token".into())),
    };
    Ok(Context {
        file: path.clone(),
        server,
        server_name: cluster.cluster.tls_server_name.clone().unwrap_or(host),
        ca,
        token,
        client_certificate,
        space,
    })
}

/// `https://HOST[:PORT][/spaces/NAME]`: the address (port 443 when absent), the host,
/// and the space.
fn parse_server(url: &str) -> Result<(ParentAddress, String, Option<String>), String> {
    let rest = url
        .strip_prefix("https://")
        .ok_or_else(|| format!("server {url:?}: the root's API is https://"))?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let has_port = match hostport.rfind(']') {
        Some(close) => hostport[close..].contains(':'),
        None => hostport.contains(':'),
    };
    let hostport = if has_port {
        hostport.to_owned()
    } else {
        format!("{hostport}:443")
    };
    let server: ParentAddress = hostport
        .parse()
        .map_err(|e| format!("server {url:?}: {e}"))?;
    let host = server.host();
    let path = path.trim_end_matches('/');
    let space = match path.strip_prefix("/spaces/") {
        Some(s) if !s.is_empty() && !s.contains('/') => Some(s.to_owned()),
        _ if path.is_empty() => None,
        _ => {
            return Err(format!(
                "server {url:?}: the relay commands talk to https://HOST:PORT or https://HOST:PORT/spaces/NAME (a cluster's kubeconfig is for kubectl)"
            ));
        }
    };
    Ok((server, host, space))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    const TWO: &str = "apiVersion: v1\nkind: Config\n\
clusters:\n- name: prod\n  cluster:\n    server: https://strata.example.com:8443/spaces/team-a\n    certificate-authority-data: LS0tLQ==\n    tls-server-name: center\n\
- name: lab\n  cluster:\n    server: https://localhost:9443\n    certificate-authority: ca.crt\n\
users:\n- name: alice\n  user:\n    token: t0k\n- name: bob\n  user:\n    tokenFile: bob.token\n- name: carol\n  user:\n    client-certificate: c.crt\n    client-key-data: S0VZ\n\
contexts:\n- name: prod\n  context: { cluster: prod, user: alice }\n- name: lab\n  context: { cluster: lab, user: bob }\n- name: certs\n  context: { cluster: lab, user: carol }\n\
current-context: prod\n";

    #[test]
    fn a_context_gives_the_server_name_ca_token_and_space() {
        let dir = tempfile::tempdir().unwrap();
        let kc = write(dir.path(), "config", TWO);
        write(dir.path(), "bob.token", "b0b\n");
        let prod = read(Some(&kc), None).unwrap();
        assert_eq!(prod.server.to_string(), "strata.example.com:8443");
        assert_eq!(prod.server_name, "center");
        assert_eq!(prod.ca, Ca::Pem(b"----".to_vec()));
        assert_eq!(prod.token, "t0k");
        assert_eq!(prod.space.as_deref(), Some("team-a"));
        let lab = read(Some(&kc), Some("lab")).unwrap();
        assert_eq!(lab.server.to_string(), "localhost:9443");
        assert_eq!(lab.server_name, "localhost");
        assert_eq!(lab.ca, Ca::File(dir.path().join("ca.crt")));
        assert_eq!(lab.token, "b0b");
        assert_eq!(lab.space, None);
        // A client certificate instead of a token: a file relative to the kubeconfig,
        // and data.
        let e = read(Some(&kc), Some("certs")).unwrap_err().to_string();
        assert!(e.contains("context \"certs\": client-certificate "), "{e}");
        write(dir.path(), "c.crt", "CERT");
        let certs = read(Some(&kc), Some("certs")).unwrap();
        assert_eq!(certs.token, "");
        assert_eq!(
            certs.client_certificate,
            Some((b"CERT".to_vec(), b"KEY".to_vec()))
        );
        let e = read(Some(&kc), Some("nope")).unwrap_err().to_string();
        assert!(e.ends_with("no context \"nope\""), "{e}");
    }

    #[test]
    fn servers_are_https_with_a_port_or_443_and_at_most_a_space() {
        let (a, h, s) = parse_server("https://[::1]:7443/spaces/x/").unwrap();
        assert_eq!(
            (a.to_string().as_str(), h.as_str(), s.as_deref()),
            ("[::1]:7443", "::1", Some("x"))
        );
        let (a, _, s) = parse_server("https://root.example.com").unwrap();
        assert_eq!((a.to_string().as_str(), s), ("root.example.com:443", None));
        assert!(parse_server("http://x:1").unwrap_err().contains("https://"));
        assert!(
            parse_server("https://x:1/clusters/c1")
                .unwrap_err()
                .contains("a cluster's kubeconfig is for kubectl")
        );
    }
}
