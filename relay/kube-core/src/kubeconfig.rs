//! A kubeconfig for a space: the server URL (with the space's path), the hierarchy's
//! CA inline, the name the root's certificate carries, and a bearer token.

/// Standard base64 with padding (kubeconfig's `certificate-authority-data`).
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The kubeconfig's server URL for `space` (`default` is served at the root path too);
/// `server` is `IP:PORT` (`[IPv6]:PORT`) or `host:port`.
pub fn server_url(server: &str, space: &str) -> String {
    if space == "default" {
        format!("https://{server}")
    } else {
        format!("https://{server}/spaces/{space}")
    }
}

/// What a kubeconfig for one space and one user says.
#[derive(Debug, Clone)]
pub struct KubeconfigSpec<'a> {
    /// The root's API address: `IP:PORT` (`[IPv6]:PORT`) or `host:port` (a DNS name).
    pub server: &'a str,
    /// The name to check the root's certificate against when its address is not on it
    /// (`tls-server-name`); `None` when the certificate covers the address.
    pub tls_server_name: Option<&'a str>,
    /// The hierarchy's CA (PEM).
    pub ca_pem: &'a [u8],
    /// The bearer token.
    pub token: &'a str,
    /// The space.
    pub space: &'a str,
    /// Whose token it is, when known: it names the user and the context.
    pub user: Option<&'a str>,
    /// A cluster's own API through the tiers (`https://ROOT/clusters/NAME`, the debug
    /// tunnel) instead of the space.
    pub cluster: Option<&'a str>,
}

/// A kubeconfig (YAML) whose one context reaches the space on the root: cluster
/// `strata-SPACE`, user and context `strata-SPACE-USER` (`strata-SPACE` when the user
/// is not known); with `cluster`, that cluster's own API through the tiers (cluster
/// `strata-cluster-NAME`).
pub fn kubeconfig(spec: &KubeconfigSpec<'_>) -> String {
    let (cluster, url) = match spec.cluster {
        Some(c) => (
            format!("strata-cluster-{c}"),
            format!("https://{}/clusters/{c}", spec.server),
        ),
        None => (
            format!("strata-{}", spec.space),
            server_url(spec.server, spec.space),
        ),
    };
    let name = match spec.user {
        Some(u) => format!("{cluster}-{u}"),
        None => cluster.clone(),
    };
    let tls_server_name = spec
        .tls_server_name
        .map(|n| format!("    tls-server-name: {n}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {cluster}
  cluster:
    server: {url}
{tls_server_name}    certificate-authority-data: {ca}
users:
- name: {name}
  user:
    token: {token}
contexts:
- name: {name}
  context:
    cluster: {cluster}
    user: {name}
current-context: {name}
",
        ca = base64(spec.ca_pem),
        token = spec.token,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_pads_like_the_standard() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn a_space_other_than_default_is_a_path() {
        let a = "127.0.0.1:8443";
        assert_eq!(server_url(a, "default"), "https://127.0.0.1:8443");
        assert_eq!(
            server_url(a, "team-a"),
            "https://127.0.0.1:8443/spaces/team-a"
        );
        let mut spec = KubeconfigSpec {
            server: a,
            tls_server_name: Some("center"),
            ca_pem: b"CA",
            token: "t0k",
            space: "team-a",
            user: Some("alice"),
            cluster: None,
        };
        let kc = kubeconfig(&spec);
        assert!(kc.contains("    tls-server-name: center\n"), "{kc}");
        assert!(kc.contains("certificate-authority-data: Q0E="), "{kc}");
        assert!(
            kc.contains("current-context: strata-team-a-alice\n"),
            "{kc}"
        );
        assert!(kc.contains("    cluster: strata-team-a\n"), "{kc}");
        spec.tls_server_name = None;
        spec.user = None;
        let kc = kubeconfig(&spec);
        assert!(!kc.contains("tls-server-name"), "{kc}");
        assert!(kc.contains("current-context: strata-team-a\n"), "{kc}");
        spec.cluster = Some("store-1");
        let kc = kubeconfig(&spec);
        assert!(
            kc.contains("    server: https://127.0.0.1:8443/clusters/store-1\n"),
            "{kc}"
        );
        assert!(
            kc.contains("current-context: strata-cluster-store-1\n"),
            "{kc}"
        );
    }
}
