//! HTTP CONNECT proxies: `http://[user:pass@]host:port` from a node's configuration or
//! from `HTTPS_PROXY` / `https_proxy` (with `NO_PROXY` / `no_proxy`), and the tunnel
//! through one. The TLS session runs end to end inside the tunnel: the proxy sees
//! ciphertext only and, lacking the hierarchy's CA, cannot impersonate the parent.

use std::fmt;

use base64::Engine as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::resolve;

/// The largest proxy response header read.
const MAX_RESPONSE: usize = 16 * 1024;

/// An HTTP proxy that tunnels with CONNECT.
#[derive(Clone, PartialEq, Eq)]
pub struct Proxy {
    /// `host:port` of the proxy.
    pub address: String,
    /// Basic credentials, if any (`user`, `password`).
    pub credentials: Option<(String, String)>,
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

/// The proxy's URL without its password, for logs and errors.
impl fmt::Display for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.credentials {
            Some((user, _)) => write!(f, "http://{user}:***@{}", self.address),
            None => write!(f, "http://{}", self.address),
        }
    }
}

/// Why a proxy could not be used.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // each variant names the proxy and the cause
pub enum ProxyError {
    /// The proxy URL is not `http://[user:pass@]host:port`.
    #[error("proxy {url:?}: {reason}")]
    Url { url: String, reason: String },
    /// The proxy could not be reached.
    #[error("cannot reach the proxy {proxy}: {detail}")]
    Unreachable { proxy: String, detail: String },
    /// The proxy wants (other) credentials.
    #[error(
        "the proxy {proxy} refused to tunnel to {target}: 407 Proxy Authentication Required (check the user and password in the proxy URL)"
    )]
    AuthRequired { proxy: String, target: String },
    /// The proxy forbids this destination.
    #[error("the proxy {proxy} refused to tunnel to {target}: 403 Forbidden ({reason})")]
    Forbidden {
        proxy: String,
        target: String,
        reason: String,
    },
    /// The proxy could not reach the destination.
    #[error(
        "the proxy {proxy} could not reach {target}: 502 Bad Gateway ({reason}); the proxy itself answered"
    )]
    BadGateway {
        proxy: String,
        target: String,
        reason: String,
    },
    /// Any other refusal.
    #[error("the proxy {proxy} refused to tunnel to {target}: {status} {reason}")]
    Refused {
        proxy: String,
        target: String,
        status: u16,
        reason: String,
    },
    /// The proxy answered something that is not HTTP.
    #[error(
        "the proxy {proxy} answered CONNECT {target} with something that is not HTTP: {detail}"
    )]
    Garbled {
        proxy: String,
        target: String,
        detail: String,
    },
}

impl Proxy {
    /// Parses `http://[user:pass@]host:port` (the port defaults to 3128 when absent,
    /// 80 is never assumed for a proxy).
    pub fn parse(url: &str) -> Result<Proxy, ProxyError> {
        let err = |reason: &str| ProxyError::Url {
            url: redact(url),
            reason: reason.to_owned(),
        };
        let rest = if let Some(r) = url.strip_prefix("http://") {
            r
        } else if url.starts_with("https://") {
            return Err(err(
                "TLS to the proxy itself is not supported: use an http:// proxy (the link inside the tunnel is TLS end to end)",
            ));
        } else if url.contains("://") {
            return Err(err("only http:// proxies are supported"));
        } else {
            url
        };
        let rest = rest.trim_end_matches('/');
        let (userinfo, hostport) = match rest.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, rest),
        };
        if hostport.is_empty() || hostport.contains('/') {
            return Err(err("expected http://[user:pass@]host:port"));
        }
        let address = if has_port(hostport) {
            hostport.to_owned()
        } else {
            format!("{hostport}:3128")
        };
        let credentials = userinfo.map(|u| {
            let (user, pass) = u.split_once(':').unwrap_or((u, ""));
            (percent_decode(user), percent_decode(pass))
        });
        Ok(Proxy {
            address,
            credentials,
        })
    }

    /// The proxy the environment names for reaching `host` (`HTTPS_PROXY`, then
    /// `https_proxy`), unless `NO_PROXY` / `no_proxy` exempts it. An unusable URL in the
    /// environment is an error, not a silent direct connection.
    pub fn from_env(host: &str) -> Result<Option<Proxy>, ProxyError> {
        let get = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let Some(url) = get("HTTPS_PROXY").or_else(|| get("https_proxy")) else {
            return Ok(None);
        };
        let no_proxy = get("NO_PROXY")
            .or_else(|| get("no_proxy"))
            .unwrap_or_default();
        if bypass(&no_proxy, host) {
            return Ok(None);
        }
        Proxy::parse(url.trim()).map(Some)
    }

    /// Opens a tunnel through the proxy to `target` (`host:port`, resolved by the
    /// proxy): the TCP stream, ready for TLS.
    pub async fn tunnel(&self, target: &str) -> Result<TcpStream, ProxyError> {
        let proxy = self.to_string();
        let mut stream = resolve::tcp_happy_eyeballs(&self.address)
            .await
            .map_err(|e| ProxyError::Unreachable {
                proxy: proxy.clone(),
                detail: e.to_string(),
            })?;
        let mut request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
        if let Some((user, pass)) = &self.credentials {
            let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
            request.push_str(&format!("Proxy-Authorization: Basic {token}\r\n"));
        }
        request.push_str("\r\n");
        let garbled = |detail: String| ProxyError::Garbled {
            proxy: proxy.clone(),
            target: target.to_owned(),
            detail,
        };
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| ProxyError::Unreachable {
                proxy: proxy.clone(),
                detail: e.to_string(),
            })?;
        // Read byte by byte up to the blank line, so that nothing of the tunnel's
        // first bytes (the parent's TLS) is consumed here.
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            if head.len() >= MAX_RESPONSE {
                return Err(garbled("a response header over 16 KiB".into()));
            }
            let mut b = [0u8; 1];
            match stream.read(&mut b).await {
                Ok(0) => return Err(garbled("it closed the connection".into())),
                Ok(_) => head.push(b[0]),
                Err(e) => return Err(garbled(e.to_string())),
            }
        }
        let text = String::from_utf8_lossy(&head);
        let status_line = text.lines().next().unwrap_or_default();
        let mut parts = status_line.splitn(3, ' ');
        let (version, status, reason) = (parts.next(), parts.next(), parts.next());
        let status: u16 = match (version, status) {
            (Some(v), Some(s)) if v.starts_with("HTTP/") => s
                .parse()
                .map_err(|_| garbled(format!("status line {status_line:?}")))?,
            _ => return Err(garbled(format!("status line {status_line:?}"))),
        };
        let reason = reason.unwrap_or_default().trim().to_owned();
        let target = target.to_owned();
        match status {
            200..=299 => Ok(stream),
            407 => Err(ProxyError::AuthRequired { proxy, target }),
            403 => Err(ProxyError::Forbidden {
                proxy,
                target,
                reason,
            }),
            502 => Err(ProxyError::BadGateway {
                proxy,
                target,
                reason,
            }),
            status => Err(ProxyError::Refused {
                proxy,
                target,
                status,
                reason,
            }),
        }
    }
}

fn has_port(hostport: &str) -> bool {
    match hostport.rsplit_once(':') {
        // `[::1]` alone has colons but no port.
        Some((h, p)) => !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && !h.is_empty(),
        None => false,
    }
}

fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let userinfo = &url[s + 3..at];
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{}{user}:***{}", &url[..s + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(v) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `NO_PROXY` exempts `host`, as curl reads it: comma-separated entries, each
/// `*` (everything), a domain name matching itself and its subdomains (`example.com`
/// and `.example.com` both match `example.com` and `eu.example.com`), an IP address,
/// or a CIDR block (`10.0.0.0/8`, `fd00::/8`) matching the IP addresses in it. A
/// `:port` after an entry is ignored. A host given by name is compared by name only
/// (as curl does, nothing is resolved for a CIDR block).
pub fn bypass(no_proxy: &str, host: &str) -> bool {
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    let host_ip = host.parse::<std::net::IpAddr>().ok();
    no_proxy.split(',').map(str::trim).any(|entry| {
        if entry == "*" {
            return true;
        }
        if let Some((net, bits)) = entry.split_once('/') {
            return host_ip.is_some_and(|ip| in_block(ip, net, bits));
        }
        let entry = entry.to_ascii_lowercase();
        // Strip a port (but not the colons of an IPv6 address).
        let entry = match entry.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') && p.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => entry.as_str(),
        };
        let entry = entry.trim_start_matches('[').trim_end_matches(']');
        let domain = entry.trim_start_matches('.');
        !domain.is_empty() && (host == domain || host.ends_with(&format!(".{domain}")))
    })
}

/// Whether `ip` lies in the block `net/bits` (both of one family; a block that does
/// not parse matches nothing).
fn in_block(ip: std::net::IpAddr, net: &str, bits: &str) -> bool {
    use std::net::IpAddr;
    let net = net.trim().trim_start_matches('[').trim_end_matches(']');
    let (Ok(net), Ok(bits)) = (net.parse::<IpAddr>(), bits.trim().parse::<u32>()) else {
        return false;
    };
    // The same prefix of `bits` bits, as numbers of the family's width.
    let same = |a: u128, b: u128, width: u32| {
        bits <= width && (bits == 0 || (a ^ b) >> (width - bits) == 0)
    };
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            same(u128::from(u32::from(a)), u128::from(u32::from(n)), 32)
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => same(u128::from(a), u128::from(n), 128),
        // An IPv4 address written as IPv6 (`::ffff:10.1.2.3`) against an IPv4 block.
        (IpAddr::V6(a), IpAddr::V4(n)) => a
            .to_ipv4_mapped()
            .is_some_and(|a| same(u128::from(u32::from(a)), u128::from(u32::from(n)), 32)),
        (IpAddr::V4(_), IpAddr::V6(_)) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_url_parses_with_credentials_and_hides_the_password() {
        let p = Proxy::parse("http://alice:s%40cret@proxy.lan:3128").unwrap();
        assert_eq!(p.address, "proxy.lan:3128");
        assert_eq!(
            p.credentials,
            Some(("alice".to_owned(), "s@cret".to_owned()))
        );
        assert_eq!(p.to_string(), "http://alice:***@proxy.lan:3128");
        assert_eq!(Proxy::parse("proxy.lan").unwrap().address, "proxy.lan:3128");
        assert_eq!(
            Proxy::parse("http://[::1]:8080/").unwrap().address,
            "[::1]:8080"
        );
    }

    #[test]
    fn unusable_proxy_urls_are_refused_without_showing_the_password() {
        let e = Proxy::parse("https://bob:pw@p:1").unwrap_err().to_string();
        assert!(e.contains("not supported") && !e.contains("pw"), "{e}");
        assert!(Proxy::parse("socks5://p:1").is_err());
    }

    #[test]
    fn no_proxy_matches_hosts_domains_and_stars() {
        assert!(bypass("localhost,.example.com", "localhost"));
        assert!(bypass("localhost,.example.com", "eu.example.com"));
        assert!(bypass("example.com", "eu.example.com"));
        assert!(bypass("example.com:443", "example.com"));
        assert!(!bypass("example.com", "badexample.com"));
        assert!(bypass("*", "anything"));
        assert!(bypass("127.0.0.1, ::1", "::1"));
        assert!(!bypass("", "x"));
        assert!(bypass(".example.com", "example.com"));
        assert!(bypass("EXAMPLE.com", "Eu.Example.COM"));
    }

    #[test]
    fn no_proxy_matches_ip_addresses_in_cidr_blocks_of_their_family() {
        let no_proxy = "localhost, 10.0.0.0/8, 192.168.1.128/25, fd00::/8, [2001:db8::]/32";
        for inside in [
            "10.0.0.1",
            "10.255.255.255",
            "192.168.1.200",
            "fd12::1",
            "[2001:db8::7]",
        ] {
            assert!(bypass(no_proxy, inside), "{inside}");
        }
        for outside in [
            "11.0.0.1",
            "192.168.1.127",
            "fe80::1",
            "2001:db9::1",
            "10.example.com",
        ] {
            assert!(!bypass(no_proxy, outside), "{outside}");
        }
        // An IPv4 address written as IPv6 is in its IPv4 block; families do not mix.
        assert!(bypass("10.0.0.0/8", "::ffff:10.1.2.3"));
        assert!(!bypass("::/0", "10.0.0.1"));
        // Every address, and the edges of a prefix length.
        assert!(bypass("0.0.0.0/0", "203.0.113.9"));
        assert!(bypass("203.0.113.9/32", "203.0.113.9"));
        assert!(!bypass("203.0.113.9/32", "203.0.113.8"));
        // A block that does not parse matches nothing (and not by name either).
        assert!(!bypass("10.0.0.0/33, 10.0.0.0/x, nonsense/8", "10.0.0.1"));
    }
}
