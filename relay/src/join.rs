//! Agents that are not in the topology join a relay with a token (single-use unless its
//! line in the tokens file says `uses=N`; valid until its `expires=DATE`, if any).
//!
//! A relay configured with `join:` accepts QUIC connections without a client
//! certificate (and only such a relay does). Such a connection names no node and may do
//! exactly one exchange: the agent sends a [`JoinRequest`] (its token, the cluster name
//! it wants and a certificate signing request for its own key) on one unidirectional
//! stream; the relay answers with a [`JoinReply`] on another and the connection ends.
//! Anything else closes it with `close_code::PROTOCOL`.
//!
//! Join attempts are rate-limited per source address and overall before anything else
//! ([`Joining::check_rate`], `join.rate_per_source` / `join.rate_global`): over the rate
//! the answer is a refusal saying so. The relay grants a request when the token is one
//! of its tokens, not expired and not used up, the name is not revoked, and the name is
//! free (not the relay, its parent, a configured child or an agent that joined
//! before). It then records the used token and the new child in its store in one
//! durable commit *before* answering, so a token works once even across restarts and
//! the agent is admitted after a restart. Tokens are kept by their SHA-256 only.
//!
//! The agent's certificate is signed by the relay's join CA (an intermediate of the
//! hierarchy's CA with path length 0). A certificate chain with an intermediate is
//! accepted on a node link only when that intermediate is this relay's own join CA
//! ([`chain_allowed`]): an agent that joined one relay cannot pose as a node elsewhere.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use strata_protocol::wire::{JoinReply, JoinRequest};

use crate::certs::Ca;
use crate::config::{JoinFiles, check_node_name};
use crate::join_limits::{JoinLimiter, TokenRule, parse_token_line};
use crate::tier::core::NodeCore;
pub use strata_node::join::JoinConnection;
use strata_node::store::{Batch, Store};

/// Why a relay cannot admit agents by token: a `join:` file is unusable.
#[derive(Debug, thiserror::Error)]
#[error("join.{field}: {path}: {reason}")]
#[allow(missing_docs)] // `path` is the file, `reason` what is wrong with it
pub struct JoinSetupError {
    /// The configuration field (`tokens`, `ca_cert`, `ca_key`).
    pub field: &'static str,
    pub path: PathBuf,
    pub reason: String,
}

/// What a relay admits joining agents with: its tokens and its join CA, and the rate
/// of join attempts it takes.
pub struct Joining {
    relay: String,
    /// SHA-256 (hex) of every token, and its rule: as loaded, or as the tokens file
    /// holds it now ([`Joining::reload_tokens`]).
    tokens: JoinTokens,
    /// The tokens file.
    tokens_path: PathBuf,
    ca: Ca,
    ca_der: Vec<u8>,
    limiter: tokio::sync::Mutex<JoinLimiter>,
}

impl std::fmt::Debug for Joining {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Joining")
            .field("relay", &self.relay)
            .field("tokens", &self.tokens().len())
            .finish_non_exhaustive()
    }
}

/// The join tokens of a relay.
enum JoinTokens {
    /// As loaded at start (the simulation, tests).
    Fixed(Arc<BTreeMap<String, TokenRule>>),
    /// As the file holds them now.
    Reloading(crate::reload::Reloading<BTreeMap<String, TokenRule>>),
}

/// Why a join tokens file does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinTokensError {
    /// A line does not parse.
    #[error("line {line}: {error}")]
    Line {
        /// The line, from 1.
        line: usize,
        /// What is wrong with it.
        error: crate::join_limits::TokenLineError,
    },
    /// The file holds no token.
    #[error("holds no token")]
    Empty,
}

/// Parses a join tokens file (one token a line, with its rule): the tokens by id, and
/// a summary for the logs. An error names the line, or says that the file holds no
/// token.
pub fn parse_join_tokens(
    text: &str,
) -> Result<crate::reload::Parsed<BTreeMap<String, TokenRule>>, JoinTokensError> {
    let mut tokens = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (token, rule) =
            parse_token_line(line).map_err(|error| JoinTokensError::Line { line: i + 1, error })?;
        tokens.insert(token_id(&token), rule);
    }
    if tokens.is_empty() {
        return Err(JoinTokensError::Empty);
    }
    let summary = format!("{} join token(s)", tokens.len());
    Ok((tokens, summary))
}

/// A token's id: its SHA-256 in hex (what the store keeps).
pub fn token_id(token: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.trim().as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

impl Joining {
    /// Loads the tokens file (one token per line) and the join CA of relay `relay`.
    pub fn load(relay: &str, files: &JoinFiles) -> Result<Joining, JoinSetupError> {
        let err = |field: &'static str, path: &Path, reason: String| JoinSetupError {
            field,
            path: path.to_owned(),
            reason,
        };
        let text = std::fs::read_to_string(&files.tokens)
            .map_err(|e| err("tokens", &files.tokens, format!("cannot read: {e}")))?;
        let (tokens, _) = parse_join_tokens(&text)
            .map_err(|why| err("tokens", &files.tokens, why.to_string()))?;
        for (field, path) in [("ca_cert", &files.ca_cert), ("ca_key", &files.ca_key)] {
            if let Err(e) = std::fs::metadata(path) {
                return Err(err(field, path, format!("cannot read: {e}")));
            }
        }
        let ca = Ca::load_join_ca(&files.ca_cert, &files.ca_key)
            .map_err(|e| err("ca_cert", &files.ca_cert, e.to_string()))?
            .with_lifetimes(strata_topology::certs::Lifetimes {
                node_days: files.node_days,
                ..Default::default()
            });
        let ca_der = CertificateDer::from_pem_slice(ca.cert_pem().as_bytes())
            .map_err(|e| {
                err(
                    "ca_cert",
                    &files.ca_cert,
                    format!("not a PEM certificate: {e}"),
                )
            })?
            .to_vec();
        Ok(Joining {
            relay: relay.to_owned(),
            tokens: JoinTokens::Fixed(Arc::new(tokens)),
            tokens_path: files.tokens.clone(),
            ca,
            ca_der,
            limiter: tokio::sync::Mutex::new(JoinLimiter::new(
                files.rate_per_source,
                files.rate_global,
            )),
        })
    }

    /// The relay's name.
    pub fn relay(&self) -> &str {
        &self.relay
    }

    /// From now on, the tokens the file holds whenever it changes (see
    /// [`crate::reload`]): a token added is good at once, one removed refused. Needs a
    /// tokio runtime.
    pub fn reload_tokens(mut self, every: std::time::Duration) -> Joining {
        let JoinTokens::Fixed(now) = &self.tokens else {
            return self;
        };
        let now = BTreeMap::clone(now);
        self.tokens = JoinTokens::Reloading(crate::reload::Reloading::spawn(
            self.tokens_path.clone(),
            "join.tokens",
            now,
            parse_join_tokens,
            every,
        ));
        self
    }

    /// The tokens as they are now, by id.
    fn tokens(&self) -> Arc<BTreeMap<String, TokenRule>> {
        match &self.tokens {
            JoinTokens::Fixed(t) => t.clone(),
            JoinTokens::Reloading(r) => r.current(),
        }
    }

    /// Takes one join attempt from `source`, or says why it is refused (too many).
    pub async fn check_rate(
        &self,
        source: std::net::IpAddr,
    ) -> Result<(), crate::join_limits::TooMany> {
        let result = self
            .limiter
            .lock()
            .await
            .check(source, tokio::time::Instant::now());
        if let Err(why) = &result {
            tracing::debug!(%source, %why, "refusing a join attempt");
        }
        result
    }
}

/// Whether a verified peer chain (leaf first) may be used on this node's links: every
/// certificate after the leaf must be one of this node's own intermediates (`own`,
/// from [`own_intermediates`]: its join CA, the CA it signs renewals with). Node
/// certificates issued by `relay topology certs` come straight from the hierarchy's
/// CA; a child's renewed one may chain through its parent's intermediate.
pub fn chain_allowed(chain: &[CertificateDer<'_>], own: &[Vec<u8>]) -> bool {
    chain
        .iter()
        .skip(1)
        .all(|c| own.iter().any(|o| c.as_ref() == o.as_slice()))
}

/// The intermediates [`chain_allowed`] accepts at a relay: its join CA and the
/// intermediate its renewals are signed with, if any (usually the same one).
pub fn own_intermediates(
    joining: Option<&Joining>,
    signer: Option<&crate::renew::Signer>,
) -> Vec<Vec<u8>> {
    let mut own: Vec<Vec<u8>> = joining.map(|j| j.ca_der.clone()).into_iter().collect();
    if let Some(der) = signer.and_then(crate::renew::Signer::intermediate_der)
        && !own.contains(&der)
    {
        own.push(der);
    }
    own
}

/// The admissions a relay has made, kept by its core task; see the module docs.
pub struct Admissions {
    joining: Arc<Joining>,
    parent: Option<String>,
    store: Arc<dyn Store>,
    /// Token id -> the name that joined with it.
    used: BTreeMap<String, String>,
}

impl std::fmt::Debug for Admissions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admissions")
            .field("joining", &self.joining)
            .field("used", &self.used.len())
            .finish_non_exhaustive()
    }
}

impl Admissions {
    /// The admissions restored from the store (`joined`: token id -> name).
    pub fn new(
        joining: Arc<Joining>,
        parent: Option<String>,
        store: Arc<dyn Store>,
        joined: BTreeMap<String, String>,
    ) -> Admissions {
        Admissions {
            joining,
            parent,
            store,
            used: joined,
        }
    }

    /// Decides a request, records a grant durably, admits the new child into `core`,
    /// and returns the answer. Blocks on the store commit.
    /// `wall_secs`: the wall-clock time (Unix seconds, the node's clock) a token's expiry
    /// is checked against and the certificate is valid from.
    pub fn admit(
        &mut self,
        core: &mut NodeCore,
        request: &JoinRequest,
        wall_secs: i64,
    ) -> JoinReply {
        let relay = self.joining.relay.clone();
        let refuse = |reason: String| {
            tracing::info!(
                target: "audit",
                who = %request.cluster,
                action = "join-refused",
                relay = %relay,
                reason = %reason,
                "{relay} refused to admit {:?}: {reason}",
                request.cluster
            );
            JoinReply::Refused {
                relay: relay.clone(),
                reason,
            }
        };
        let id = token_id(&request.token);
        let Some(rule) = self.joining.tokens().get(&id).cloned() else {
            return refuse("unknown join token".into());
        };
        if let Some(expires) = rule.expires
            && wall_secs >= expires
        {
            return refuse(format!(
                "the join token expired on {}",
                strata_topology::certs::utc_date(expires)
            ));
        }
        // The first use is kept under the token's id, the n-th (n > 1) under `id/n`.
        let uses: Vec<&String> = self
            .used
            .range(id.clone()..)
            .take_while(|(k, _)| {
                k.strip_prefix(id.as_str())
                    .is_some_and(|r| r.is_empty() || r.starts_with('/'))
            })
            .map(|(_, who)| who)
            .collect();
        if uses.len() >= rule.uses as usize {
            let who = uses
                .iter()
                .map(|w| format!("{w:?}"))
                .collect::<Vec<_>>()
                .join(", ");
            return refuse(if rule.uses == 1 {
                format!("the join token was already used (by {who})")
            } else {
                format!(
                    "the join token was already used {} times (by {who})",
                    uses.len()
                )
            });
        }
        let slot = if uses.is_empty() {
            id.clone()
        } else {
            format!("{id}/{}", uses.len() + 1)
        };
        let name = request.cluster.as_str();
        if let Err(why) = check_node_name(name) {
            return refuse(why.to_string());
        }
        if core.is_revoked(name) {
            return refuse(format!("the name {name:?} was revoked at the root"));
        }
        // A recovery token re-enrolls the one child it names, whose name is taken by
        // definition; it is good for nothing else.
        let recovering = match rule.recover.as_deref() {
            Some(r) if r == name => true,
            Some(r) => {
                return refuse(format!(
                    "the token is a recovery token for {r:?}, not for {name:?}"
                ));
            }
            None => false,
        };
        if name == relay
            || self.parent.as_deref() == Some(name)
            || (core.is_allowed_child(name) && !recovering)
        {
            return refuse(format!("the name {name:?} is already taken here"));
        }
        let chain = match self
            .joining
            .ca
            .issue_for_csr_at(name, &request.csr_pem, wall_secs)
        {
            Ok(c) => c,
            Err(e) => return refuse(format!("unusable certificate signing request: {e}")),
        };
        let batch = Batch {
            joined: vec![(slot.clone(), name.to_owned())],
            ..Batch::default()
        };
        if let Err(e) = strata_node::store::commit_off_workers(self.store.as_ref(), &batch) {
            return refuse(format!("cannot record the join ({e}); try again later"));
        }
        self.used.insert(slot, name.to_owned());
        if !core.is_allowed_child(name) {
            core.admit_child(name);
        }
        tracing::info!(child = %name, recovering, "admitted an agent by join token");
        tracing::info!(
            target: "audit",
            who = %name,
            action = if recovering { "recovered" } else { "admitted" },
            relay = %relay,
            token = %id.get(..12).unwrap_or_default(),
            "{relay} admitted {name:?} by join token"
        );
        JoinReply::Granted { chain_pem: chain }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unusable_join_files_are_named_with_their_field() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let files = JoinFiles {
            tokens: d.join("eu.tokens"),
            ca_cert: d.join("eu.ca.crt"),
            ca_key: d.join("eu.ca.key"),
            node_days: 365,
            rate_per_source: 5,
            rate_global: 50,
        };
        let err = Joining::load("eu", &files).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "join.tokens: {}: cannot read",
                files.tokens.display()
            )),
            "{err}"
        );
        std::fs::write(&files.tokens, "\n  \n").unwrap();
        let err = Joining::load("eu", &files).unwrap_err().to_string();
        assert_eq!(
            err,
            format!("join.tokens: {}: holds no token", files.tokens.display())
        );
        std::fs::write(&files.tokens, "t1\n").unwrap();
        let ca = Ca::generate("test").unwrap().issue_join_ca("eu").unwrap();
        std::fs::write(&files.ca_cert, ca.cert_pem()).unwrap();
        let err = Joining::load("eu", &files).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "join.ca_key: {}: cannot read",
                files.ca_key.display()
            )),
            "{err}"
        );
        std::fs::write(&files.ca_key, ca.key_pem()).unwrap();
        let joining = Joining::load("eu", &files).unwrap();
        assert!(joining.tokens().contains_key(&token_id("t1")));
    }

    #[tokio::test]
    async fn join_tokens_added_to_the_file_count_and_a_broken_file_keeps_them() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let ca = Ca::generate("test").unwrap().issue_join_ca("eu").unwrap();
        let files = JoinFiles {
            tokens: d.join("eu.tokens"),
            ca_cert: d.join("eu.ca.crt"),
            ca_key: d.join("eu.ca.key"),
            node_days: 365,
            rate_per_source: 5,
            rate_global: 50,
        };
        std::fs::write(&files.ca_cert, ca.cert_pem()).unwrap();
        std::fs::write(&files.ca_key, ca.key_pem()).unwrap();
        std::fs::write(&files.tokens, "t1\n").unwrap();
        let joining = Joining::load("eu", &files)
            .unwrap()
            .reload_tokens(std::time::Duration::from_millis(20));
        let holds = |joining: &Joining, t: &str| joining.tokens().contains_key(&token_id(t));
        std::fs::write(&files.tokens, "t1\nt2 uses=3\n").unwrap();
        for _ in 0..200 {
            if holds(&joining, "t2") {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(holds(&joining, "t1") && holds(&joining, "t2"));
        std::fs::write(&files.tokens, "t3 uses=x\n").unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(holds(&joining, "t2") && !holds(&joining, "t3"));
        std::fs::write(&files.tokens, "t3\n").unwrap();
        for _ in 0..200 {
            if holds(&joining, "t3") {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(holds(&joining, "t3") && !holds(&joining, "t1"));
    }
}
