//! A kubeconfig for a space: the server URL (with the space's path), the hierarchy's
//! CA inline, the name the root's certificate carries, and a bearer token.

use std::net::SocketAddr;

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

/// The kubeconfig's server URL for `space` (`default` is served at the root path too).
pub fn server_url(server: SocketAddr, space: &str) -> String {
    if space == "default" {
        format!("https://{server}")
    } else {
        format!("https://{server}/spaces/{space}")
    }
}

/// A kubeconfig (YAML) whose one context reaches `space` on the root at `server`.
pub fn kubeconfig(
    server: SocketAddr,
    server_name: &str,
    ca_pem: &[u8],
    token: &str,
    space: &str,
) -> String {
    let name = format!("strata-{space}");
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {name}
  cluster:
    server: {url}
    tls-server-name: {server_name}
    certificate-authority-data: {ca}
users:
- name: {name}
  user:
    token: {token}
contexts:
- name: {name}
  context:
    cluster: {name}
    user: {name}
current-context: {name}
",
        url = server_url(server, space),
        ca = base64(ca_pem),
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
        let a: SocketAddr = "127.0.0.1:8443".parse().unwrap();
        assert_eq!(server_url(a, "default"), "https://127.0.0.1:8443");
        assert_eq!(
            server_url(a, "team-a"),
            "https://127.0.0.1:8443/spaces/team-a"
        );
        let kc = kubeconfig(a, "center", b"CA", "t0k", "team-a");
        assert!(kc.contains("tls-server-name: center"), "{kc}");
        assert!(kc.contains("certificate-authority-data: Q0E="), "{kc}");
    }
}
