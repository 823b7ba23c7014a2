//! Renewing this node's certificate through its parent, over the established and
//! authenticated link, well before it expires.
//!
//! At [`RenewConfig::at_percent`] of the certificate's lifetime (two thirds by default)
//! the driver makes a new key and a certificate signing request naming this node and
//! sends it on the control stream ([`ChildToParent::Renew`], protocol version 4). The
//! parent signs it with the CA it holds for that (its `renew:` CA or its join CA) and
//! answers ([`ParentToChild::Renewal`]). The child checks the chain (it verifies
//! against the CAs it trusts, names this node and certifies the new key), writes key
//! and chain durably ([`write_files`]: each to a `.new` file, synced, then renamed key
//! first), and uses them from the next handshake on; the open session goes on.
//!
//! A refusal or no answer is retried after a tenth of the time left (between a second
//! and an hour). A certificate that expired while the node was offline cannot renew
//! this way (the parent refuses the handshake): its recovery path is a one-time
//! recovery token (see `relay/src/join.rs`).
//!
//! [`ParentToChild::Renewal`]: strata_protocol::wire::ParentToChild::Renewal

use std::time::Duration;

use strata_protocol::wire::{ChildToParent, ProtocolVersion, RENEW_VERSION, RenewReply};

use crate::clock::Clock;
pub use crate::net::cert_files::{
    DEFAULT_RENEW_AT_PERCENT, RenewConfig, expired, expired_at, settle_files, write_files,
};
use crate::net::dial::Connector;
use crate::net::tls::{Identity, client_config};

/// The wall-clock time of `clock` in Unix seconds, what certificates' validity is
/// compared with.
fn wall_secs(clock: &Clock) -> i64 {
    i64::try_from(clock.wall().0 / 1000).unwrap_or(i64::MAX)
}

/// The driver's part of renewal: when to ask, the key waiting for its certificate.
#[derive(Debug)]
pub(crate) struct Renewer {
    config: RenewConfig,
    connector: Connector,
    /// The node's clock: when to renew is planned on its wall time.
    clock: Clock,
    /// The current certificate's (notBefore, notAfter), Unix seconds.
    validity: Option<(i64, i64)>,
    /// The key of the request in flight.
    pending: Option<String>,
    /// When to ask (again).
    next: tokio::time::Instant,
    /// The protocol version of the open session (0: none).
    version: ProtocolVersion,
}

impl Renewer {
    pub(crate) fn new(config: RenewConfig, connector: Connector, clock: Clock) -> Renewer {
        let validity = std::fs::read_to_string(&config.files.cert)
            .ok()
            .and_then(|pem| strata_topology::certs::pem_validity(&pem));
        let mut r = Renewer {
            config,
            connector,
            clock,
            validity,
            pending: None,
            next: tokio::time::Instant::now(),
            version: 0,
        };
        r.schedule();
        r
    }

    /// Plans the next request at the configured share of the lifetime.
    fn schedule(&mut self) {
        let now = wall_secs(&self.clock);
        let wait = match self.validity {
            Some((from, to)) => {
                let due = from + (to - from) * i64::from(self.config.at_percent) / 100;
                u64::try_from(due - now).unwrap_or(0)
            }
            // An unreadable certificate: nothing to plan from; look again in an hour.
            None => 3600,
        };
        self.next = tokio::time::Instant::now() + Duration::from_secs(wait);
        if let Some((_, to)) = self.validity {
            tracing::debug!(in_s = wait, expires = %strata_topology::certs::utc_date(to), "certificate renewal planned");
        }
    }

    /// After a refusal or no answer: a tenth of the time left, between 1 s and 1 h.
    fn retry_later(&mut self) {
        let left = self
            .validity
            .map(|(_, to)| to - wall_secs(&self.clock))
            .unwrap_or(36_000);
        let wait = u64::try_from(left / 10).unwrap_or(0).clamp(1, 3600);
        self.next = tokio::time::Instant::now() + Duration::from_secs(wait);
    }

    /// When the next request is due.
    pub(crate) fn next(&self) -> tokio::time::Instant {
        self.next
    }

    /// A session opened with protocol `version` (0: the link is gone).
    pub(crate) fn session(&mut self, version: ProtocolVersion) {
        self.version = version;
        if version == 0 {
            self.pending = None;
        }
    }

    /// The due time came: a request to send now, if the session can carry one.
    pub(crate) fn due(&mut self) -> Option<ChildToParent> {
        if self.validity.is_none() {
            // Nothing to renew from yet: read the certificate again, plan from it.
            self.validity = std::fs::read_to_string(&self.config.files.cert)
                .ok()
                .and_then(|pem| strata_topology::certs::pem_validity(&pem));
            self.schedule();
            return None;
        }
        self.retry_later();
        if self.version < RENEW_VERSION {
            if self.version != 0 {
                tracing::warn!(
                    version = self.version,
                    "the certificate is due for renewal but the parent speaks protocol version {} (renewal needs {RENEW_VERSION})",
                    self.version
                );
            }
            return None;
        }
        // The new key is of the kind the current one is.
        let current = std::fs::read_to_string(&self.config.files.key).unwrap_or_default();
        match strata_topology::certs::join_request_like(&self.config.node, &current) {
            Ok((key, csr_pem)) => {
                self.pending = Some(key);
                tracing::info!("asking the parent to renew this node's certificate");
                Some(ChildToParent::Renew { csr_pem })
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot make a certificate signing request");
                None
            }
        }
    }

    /// The parent's answer: on a grant, the new identity (checked, written durably,
    /// and given to the connector for the next handshake).
    pub(crate) fn answer(&mut self, reply: RenewReply) -> Option<Identity> {
        let Some(key) = self.pending.take() else {
            tracing::warn!("a certificate renewal answer without a request in flight; ignored");
            return None;
        };
        let chain = match reply {
            RenewReply::Granted { chain_pem } => chain_pem,
            RenewReply::Refused { parent, reason } => {
                tracing::warn!(%parent, %reason, "the parent refused to renew this node's certificate");
                return None;
            }
        };
        match self.install(&chain, &key) {
            Ok(identity) => {
                self.validity = strata_topology::certs::pem_validity(&chain);
                self.schedule();
                let expires = self
                    .validity
                    .map(|(_, to)| strata_topology::certs::utc_date(to))
                    .unwrap_or_default();
                tracing::info!(
                    target: "audit",
                    who = %self.config.node,
                    action = "renewed",
                    %expires,
                    "{} renewed its certificate; it is used from the next handshake",
                    self.config.node
                );
                Some(identity)
            }
            Err(why) => {
                tracing::error!(%why, "the renewed certificate is unusable; keeping the current one");
                None
            }
        }
    }

    fn install(&self, chain: &str, key: &str) -> Result<Identity, String> {
        let files = &self.config.files;
        if !strata_topology::certs::chain_matches_key(chain, key) {
            return Err("it does not certify the key this node asked for".into());
        }
        let ca = std::fs::read(&files.ca).map_err(|e| format!("{}: {e}", files.ca.display()))?;
        let identity = Identity::from_pem(chain.as_bytes(), key.as_bytes(), &ca)
            .map_err(|(_, reason)| reason)?
            .with_time(self.connector.tls_time());
        identity
            .check_chain(&self.config.node)
            .map_err(|e| e.to_string())?;
        let tls = client_config(&identity).map_err(|e| e.to_string())?;
        write_files(&files.cert, &files.key, chain, key)
            .map_err(|e| format!("cannot write {}: {e}", files.cert.display()))?;
        self.connector.use_tls(tls);
        Ok(identity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    use crate::net::cert_files::TlsFiles;
    use crate::net::dial::TransportMode;
    use strata_topology::certs::{Ca, join_request};

    /// Node `eu`'s certificate, key and CA files in `dir`, renewed at half its lifetime.
    fn eu_files(dir: &Path) -> TlsFiles {
        TlsFiles {
            cert: dir.join("eu.crt"),
            key: dir.join("eu.key"),
            ca: dir.join("ca.crt"),
            renew_at_percent: 50,
        }
    }

    #[tokio::test]
    async fn a_renewal_is_asked_only_at_version_4_and_a_wrong_chain_is_never_installed() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::generate("test").unwrap();
        let files = eu_files(dir.path());
        let first = ca.issue("eu").unwrap();
        std::fs::write(&files.cert, &first.cert_pem).unwrap();
        std::fs::write(&files.key, &first.key_pem).unwrap();
        std::fs::write(&files.ca, ca.cert_pem()).unwrap();
        let connector = Connector::new(TransportMode::Tcp, None, None, None);
        let mut r = Renewer::new(files.renewal("eu"), connector, Clock::start());
        // A parent of version 3 is not asked; one of version 4 is.
        r.session(3);
        assert_eq!(r.due(), None);
        r.session(RENEW_VERSION);
        let Some(ChildToParent::Renew { csr_pem }) = r.due() else {
            panic!("no request at version 4");
        };
        // A chain for another key is refused, and the files stay.
        let (_, other_csr) = join_request("eu").unwrap();
        let wrong = ca
            .renew_for_csr("eu", &other_csr, Duration::from_secs(60))
            .unwrap();
        assert!(r.answer(RenewReply::Granted { chain_pem: wrong }).is_none());
        assert_eq!(
            std::fs::read_to_string(&files.cert).unwrap(),
            first.cert_pem
        );
        // The right one is installed, durably.
        let Some(ChildToParent::Renew { csr_pem: again }) = r.due() else {
            panic!("no second request");
        };
        assert_ne!(again, csr_pem);
        let chain = ca
            .renew_for_csr("eu", &again, Duration::from_secs(60))
            .unwrap();
        assert!(
            r.answer(RenewReply::Granted {
                chain_pem: chain.clone()
            })
            .is_some()
        );
        assert_eq!(std::fs::read_to_string(&files.cert).unwrap(), chain);
        assert!(strata_topology::certs::chain_matches_key(
            &chain,
            &std::fs::read_to_string(&files.key).unwrap()
        ));
        // A chain from a foreign CA is refused too.
        let foreign = Ca::generate("elsewhere").unwrap();
        let Some(ChildToParent::Renew { csr_pem: third }) = r.due() else {
            panic!("no third request");
        };
        let alien = foreign
            .renew_for_csr("eu", &third, Duration::from_secs(60))
            .unwrap();
        assert!(r.answer(RenewReply::Granted { chain_pem: alien }).is_none());
        assert_eq!(std::fs::read_to_string(&files.cert).unwrap(), chain);
    }

    #[tokio::test]
    async fn expiry_and_the_renewal_plan_follow_the_nodes_clock_not_the_systems() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::generate("test").unwrap();
        let files = eu_files(dir.path());
        // Issued at 2026-01-01 (the simulation's origin) by the signer's clock, for
        // 100 s: valid from 25 s before.
        let t = 1_767_225_600;
        let (key, csr) = join_request("eu").unwrap();
        let chain = ca
            .renew_for_csr_at("eu", &csr, Duration::from_secs(100), t)
            .unwrap();
        assert_eq!(
            strata_topology::certs::pem_validity(&chain),
            Some((t - 25, t + 100))
        );
        std::fs::write(&files.cert, &chain).unwrap();
        std::fs::write(&files.key, &key).unwrap();
        std::fs::write(&files.ca, ca.cert_pem()).unwrap();
        assert!(!expired_at(&files.cert, t + 99));
        assert!(expired_at(&files.cert, t + 100));
        // Half of its 125 s is 62 s after its start: 37 s after `t` on the node's
        // clock (the system's clock, months later, would make it due at once).
        let clock = Clock::start_at(strata_protocol::time::UnixMillis(
            u64::try_from(t).unwrap() * 1000,
        ));
        let connector = Connector::new(TransportMode::Tcp, None, None, None);
        let r = Renewer::new(files.renewal("eu"), connector, clock);
        let wait = r.next() - tokio::time::Instant::now();
        assert!(
            wait > Duration::from_secs(36) && wait <= Duration::from_secs(37),
            "{wait:?}"
        );
    }
}
