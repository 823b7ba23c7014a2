//! Users who are not in the tokens file: x509 client certificates from a CA the root
//! trusts, and OIDC ID tokens from an issuer it trusts, as kube-apiserver's
//! `--client-ca-file` and `--oidc-*` flags allow; each mapped to a role by the root's
//! configuration (`api.client_certificates`, `api.oidc`; deploy/CONFIG.md).
//!
//! # Layout
//!
//! * this file: the configuration of both ([`ClientCertificates`], [`OidcConfig`]) and
//!   the mapping of a user and its groups to a grant ([`RoleRules`]);
//! * [`x509`]: the user (CN) and groups (O) a client certificate names;
//! * [`jwt`]: an ID token checked against the issuer's keys (ES256, RS256), its
//!   issuer, audience and validity (pure: the time is given);
//! * [`oidc`]: the issuer's discovery document and keys, fetched over HTTPS and fetched
//!   again when a token names a key not seen yet.

pub mod jwt;
pub mod oidc;
pub mod x509;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use crate::api::auth::{Authn, Grant, parse_tokens};

/// Who a user is, as a certificate or an ID token says: a name and groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    /// The user name (a certificate's CN, a token's username claim).
    pub user: String,
    /// Its groups (a certificate's O values, a token's groups claim).
    pub groups: Vec<String>,
}

/// Which role each user or group gets (`users:` and `groups:` of a section). A user's
/// own entry wins; else the group of the highest role (the first by name of those).
/// A value is a role, optionally followed by a token line's `spaces=` and `debug=`:
/// `edit spaces=team-a,team-b`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoleRules {
    users: BTreeMap<String, Grant>,
    groups: BTreeMap<String, Grant>,
}

impl RoleRules {
    /// Reads `users:` and `groups:`; a fault names the entry (`{section}.groups.ops`).
    pub fn compile(
        section: &str,
        users: &BTreeMap<String, String>,
        groups: &BTreeMap<String, String>,
        faults: &mut Vec<String>,
    ) -> RoleRules {
        let mut one = |kind: &str, name: &str, value: &str| -> Option<Grant> {
            let mut words = value.split_whitespace();
            let role = words.next().unwrap_or_default();
            let rest: Vec<&str> = words.collect();
            let line = format!("- role={role} {}", rest.join(" "));
            match parse_tokens(&line) {
                Ok(mut g) if g.len() == 1 => g.pop(),
                Ok(_) => None,
                Err(e) => {
                    // The line number of a one-line text says nothing.
                    let e = e.to_string();
                    let e = e.strip_prefix("line 1: ").unwrap_or(&e);
                    faults.push(format!("{section}.{kind}.{name}: {e}"));
                    None
                }
            }
        };
        let mut rules = RoleRules::default();
        for (name, value) in users {
            if let Some(g) = one("users", name, value) {
                rules.users.insert(name.clone(), g);
            }
        }
        for (name, value) in groups {
            if let Some(g) = one("groups", name, value) {
                rules.groups.insert(name.clone(), g);
            }
        }
        if rules.users.is_empty() && rules.groups.is_empty() && faults.is_empty() {
            faults.push(format!(
                "{section}: maps no user or group to a role (`users:` or `groups:`): it would admit no one"
            ));
        }
        rules
    }

    /// The grant of `subject`, authenticated `via`, if a rule maps it to a role.
    pub fn grant(&self, subject: &Subject, via: Authn) -> Option<Grant> {
        let chosen = self.users.get(&subject.user).or_else(|| {
            subject
                .groups
                .iter()
                .filter_map(|g| self.groups.get(g).map(|grant| (g, grant)))
                .max_by(|(ga, a), (gb, b)| a.role.cmp(&b.role).then_with(|| gb.cmp(ga)))
                .map(|(_, grant)| grant)
        })?;
        Some(Grant {
            token: String::new(),
            user: subject.user.clone(),
            groups: subject.groups.clone(),
            via,
            ..chosen.clone()
        })
    }
}

/// `api.client_certificates`: users with a client certificate signed by `ca`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertificates {
    /// The CA file (PEM, one or more certificates).
    pub ca: PathBuf,
    /// Their roles.
    pub roles: RoleRules,
}

/// `api.oidc`: users with an ID token of an OpenID Connect issuer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcConfig {
    /// The issuer (`iss`), an `https://` URL; its discovery document is under
    /// `/.well-known/openid-configuration`.
    pub issuer_url: String,
    /// The audience a token must name (`aud`: the client ID).
    pub audience: String,
    /// The claim that names the user (default `sub`).
    pub username_claim: String,
    /// The claim that lists the user's groups, if any.
    pub groups_claim: Option<String>,
    /// The CA that the issuer's HTTPS certificate chains to (PEM).
    pub ca: PathBuf,
    /// Their roles.
    pub roles: RoleRules,
}

/// `api.client_certificates` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawClientCertificates {
    ca: PathBuf,
    #[serde(default)]
    users: BTreeMap<String, String>,
    #[serde(default)]
    groups: BTreeMap<String, String>,
}

/// `api.oidc` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawOidc {
    issuer_url: String,
    audience: String,
    #[serde(default)]
    username_claim: Option<String>,
    #[serde(default)]
    groups_claim: Option<String>,
    ca: PathBuf,
    #[serde(default)]
    users: BTreeMap<String, String>,
    #[serde(default)]
    groups: BTreeMap<String, String>,
}

impl RawClientCertificates {
    /// Checked, paths taken relative to `base`; faults are pushed.
    pub(crate) fn check(
        self,
        base: &std::path::Path,
        faults: &mut Vec<String>,
    ) -> ClientCertificates {
        let section = "api.client_certificates";
        ClientCertificates {
            ca: base.join(self.ca),
            roles: RoleRules::compile(section, &self.users, &self.groups, faults),
        }
    }
}

impl RawOidc {
    /// Checked, paths taken relative to `base`; faults are pushed.
    pub(crate) fn check(self, base: &std::path::Path, faults: &mut Vec<String>) -> OidcConfig {
        let section = "api.oidc";
        if !self.issuer_url.starts_with("https://") {
            faults.push(format!(
                "{section}.issuer_url: {:?} is not an https:// URL",
                self.issuer_url
            ));
        }
        if self.audience.is_empty() {
            faults.push(format!("{section}.audience: empty"));
        }
        OidcConfig {
            issuer_url: self.issuer_url,
            audience: self.audience,
            username_claim: self.username_claim.unwrap_or_else(|| "sub".to_owned()),
            groups_claim: self.groups_claim,
            ca: base.join(self.ca),
            roles: RoleRules::compile(section, &self.users, &self.groups, faults),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::api::auth::Role;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_users_entry_wins_and_else_the_highest_group() {
        let mut faults = Vec::new();
        let rules = RoleRules::compile(
            "api.oidc",
            &map(&[("alice", "view")]),
            &map(&[("ops", "admin"), ("dev", "edit spaces=team-a")]),
            &mut faults,
        );
        assert_eq!(faults, Vec::<String>::new());
        let s = |user: &str, groups: &[&str]| Subject {
            user: user.to_owned(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        };
        let g = rules.grant(&s("alice", &["ops"]), Authn::Oidc).unwrap();
        assert_eq!(
            (g.user.as_str(), g.role, g.via),
            ("alice", Role::View, Authn::Oidc)
        );
        let g = rules
            .grant(&s("bob", &["dev", "ops"]), Authn::Oidc)
            .unwrap();
        assert_eq!(g.role, Role::Admin);
        let g = rules
            .grant(&s("carol", &["dev"]), Authn::ClientCertificate)
            .unwrap();
        assert_eq!(
            (g.role, g.spaces.clone()),
            (Role::Edit, Some(vec!["team-a".to_owned()]))
        );
        assert_eq!(g.groups, vec!["dev".to_owned()]);
        assert!(rules.grant(&s("dave", &["guests"]), Authn::Oidc).is_none());

        let mut faults = Vec::new();
        RoleRules::compile("api.oidc", &map(&[("eve", "root")]), &map(&[]), &mut faults);
        assert_eq!(
            faults,
            vec!["api.oidc.users.eve: role \"root\" is not view, edit or admin".to_owned()]
        );
        let mut faults = Vec::new();
        RoleRules::compile("api.oidc", &map(&[]), &map(&[]), &mut faults);
        assert!(faults[0].contains("maps no user or group"), "{faults:?}");
    }
}
