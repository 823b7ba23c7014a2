//! Ports `render` assigns to addresses the topology leaves open (`127.0.0.1:0`, or
//! omitted), kept in `ports.yaml` so that re-rendering gives the same files.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use crate::Addr;
use crate::files;
use crate::output::RenderError;

/// Ports assigned to `Addr::Auto` addresses, by `node.field`.
pub(crate) struct Ports {
    path: PathBuf,
    ports: BTreeMap<String, u16>,
    changed: bool,
}

impl Ports {
    pub(crate) fn load(dir: &Path) -> Result<Ports, RenderError> {
        let path = files::ports(dir);
        let ports = match std::fs::read_to_string(&path) {
            Ok(text) => serde_saphyr::from_str(&text).map_err(|e| RenderError::Ports {
                path: path.clone(),
                detail: e.to_string(),
            })?,
            Err(_) => BTreeMap::new(),
        };
        Ok(Ports {
            path,
            ports,
            changed: false,
        })
    }

    pub(crate) fn resolve(
        &mut self,
        node: &str,
        field: &str,
        a: Addr,
    ) -> Result<SocketAddr, RenderError> {
        let ip = match a {
            Addr::Fixed(a) => return Ok(a),
            Addr::Auto(ip) => ip,
        };
        let key = format!("{node}.{field}");
        if let Some(&port) = self.ports.get(&key) {
            return Ok(SocketAddr::new(ip, port));
        }
        let taken: Vec<u16> = self.ports.values().copied().collect();
        let port = unused_port(ip, &taken).map_err(|source| RenderError::NoPort {
            ip,
            what: key.clone(),
            source,
        })?;
        self.ports.insert(key, port);
        self.changed = true;
        Ok(SocketAddr::new(ip, port))
    }

    pub(crate) fn save(&self) -> Result<(), RenderError> {
        if !self.changed {
            return Ok(());
        }
        let mut text =
            String::from("# ports assigned by `relay topology render`; delete to reassign\n");
        for (k, p) in &self.ports {
            let _ = writeln!(text, "{k}: {p}");
        }
        std::fs::write(&self.path, text).map_err(|source| RenderError::Io {
            path: self.path.clone(),
            source,
        })
    }
}

/// A port free for both UDP (QUIC) and TCP (the API, metrics) on `ip` right now, not
/// among `taken`, chosen below the kernel's ephemeral range where there is room (ports
/// 10,000 and up).
///
/// A port from the ephemeral range is free only until some socket binds port 0 (every
/// client connection, every agent's endpoint) and the kernel hands it out: a port
/// written into a node's configuration could be taken before the node starts, or
/// after it restarts. Below the range only explicit binds compete. Tried in a
/// different order in every process; without room below the range (or after 200
/// tries), the kernel's choice.
pub fn unused_port(ip: IpAddr, taken: &[u16]) -> std::io::Result<u16> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    const BASE: u16 = 10_000;
    // std's hasher keys are random per process: a seed without reading a clock.
    let seed = {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.finish()
    };
    let both_free = |port: u16| -> std::io::Result<u16> {
        let udp = std::net::UdpSocket::bind((ip, port))?;
        let port = udp.local_addr()?.port();
        if taken.contains(&port) {
            return Err(std::io::Error::other("a port already assigned"));
        }
        std::net::TcpListener::bind((ip, port))?;
        Ok(port)
    };
    let mut last = None;
    if low > BASE + 1_000 {
        for _ in 0..200 {
            // splitmix64 over a counter: a different candidate each try.
            let mut z = seed.wrapping_add(
                NEXT.fetch_add(0x9E37_79B9_7F4A_7C15, std::sync::atomic::Ordering::Relaxed),
            );
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            let candidate = BASE + u16::try_from(z % u64::from(low - BASE)).unwrap_or(0);
            match both_free(candidate) {
                Ok(port) => return Ok(port),
                Err(e) => last = Some(e),
            }
        }
    }
    for _ in 0..100 {
        match both_free(0) {
            Ok(port) => return Ok(port),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("every port tried was taken")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assigned_ports_are_free_for_both_protocols_below_the_ephemeral_range_and_not_taken() {
        let ip: IpAddr = [127, 0, 0, 1].into();
        let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok());
        let mut taken = Vec::new();
        for _ in 0..20 {
            let port = unused_port(ip, &taken).unwrap();
            assert!(!taken.contains(&port), "{port} was given twice");
            if let Some(low) = low.filter(|l| *l > 11_000) {
                assert!((10_000..low).contains(&port), "{port} is not below {low}");
            }
            // Free for both, as the node will bind it.
            let _udp = std::net::UdpSocket::bind((ip, port)).unwrap();
            let _tcp = std::net::TcpListener::bind((ip, port)).unwrap();
            taken.push(port);
        }
        // A port held by someone else is not handed out.
        let held = std::net::UdpSocket::bind((ip, taken[0])).unwrap();
        for _ in 0..50 {
            assert_ne!(unused_port(ip, &[]).unwrap(), taken[0]);
        }
        drop(held);
    }
}
