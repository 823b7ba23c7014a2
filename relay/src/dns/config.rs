//! The `dns:` section of a relay's configuration.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::rr::Name;
use serde::Deserialize;

use super::answer::Zone;

/// The TTL of answers when `ttl_s` is not given.
pub const DEFAULT_TTL: u32 = 5;
/// How much longer than a TTL a finished move's old clusters keep the app after DNS
/// stopped naming them, when `drain_grace_s` is not given.
pub const DEFAULT_DRAIN_GRACE: Duration = Duration::from_secs(5);

/// `dns:` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDns {
    /// Where to answer (UDP and TCP); none: this relay answers no queries (at the
    /// root, the section then only sets the drain of moves).
    #[serde(default)]
    pub listen: Option<String>,
    /// The zone (`apps.example.com`).
    pub zone: String,
    /// The TTL of answers, in seconds.
    #[serde(default)]
    pub ttl_s: Option<u32>,
    /// At the root: how long past a TTL a finished move's old clusters keep the app.
    #[serde(default)]
    pub drain_grace_s: Option<u64>,
}

/// `dns:` checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsConfig {
    /// Where to answer, if anywhere.
    pub listen: Option<SocketAddr>,
    /// The zone and the TTL.
    pub zone: Zone,
    /// The grace past a TTL (see [`DnsConfig::drain`]).
    pub drain_grace: Duration,
}

impl DnsConfig {
    /// How long a finished make-before-break move's old clusters drain (kept, left
    /// out of DNS) before they are dropped: one TTL plus the grace. Read at the root.
    pub fn drain(&self) -> Duration {
        Duration::from_secs(u64::from(self.zone.ttl)) + self.drain_grace
    }
}

impl RawDns {
    /// Checks the section, adding what is wrong to `faults`.
    pub fn check(self, faults: &mut Vec<String>) -> Option<DnsConfig> {
        let listen = match self.listen.as_deref().map(str::parse::<SocketAddr>) {
            None => None,
            Some(Ok(a)) => Some(a),
            Some(Err(e)) => {
                faults.push(format!("dns.listen: {e}"));
                None
            }
        };
        let apex = match Name::from_ascii(format!("{}.", self.zone.trim_end_matches('.'))) {
            Ok(n) if !self.zone.trim_matches('.').is_empty() => n.to_lowercase(),
            Ok(_) => {
                faults.push("dns.zone: must not be empty".to_owned());
                return None;
            }
            Err(e) => {
                faults.push(format!(
                    "dns.zone: {:?} is not a domain name: {e}",
                    self.zone
                ));
                return None;
            }
        };
        let ttl = match self.ttl_s {
            Some(0) => {
                faults.push("dns.ttl_s: must be at least 1".to_owned());
                DEFAULT_TTL
            }
            Some(t) => t,
            None => DEFAULT_TTL,
        };
        Some(DnsConfig {
            listen,
            zone: Zone { apex, ttl },
            drain_grace: self
                .drain_grace_s
                .map_or(DEFAULT_DRAIN_GRACE, Duration::from_secs),
        })
    }
}
