//! Who may do what: each line of the tokens file is a bearer token, optionally followed
//! by `user=NAME`, `role=view|edit|admin` and `spaces=a,b` (or `*`):
//!
//! ```text
//! 3f6c...a1   user=ops role=admin
//! 9b2e...77   user=alice role=edit spaces=team-a,team-b
//! 5d01...c3   user=dashboard role=view
//! ```
//!
//! A bare token is `admin` of every space (what `relay topology certs` writes). `view`
//! reads (get, list, watch); `edit` also writes; both only in their spaces. The
//! inventory, tier tree and upsynced objects (`/clusters`, `/status`, `/upsynced`) are
//! readable by every token.
//!
//! Debugging a cluster through the tiers (`/clusters/{name}/...`, the Kubernetes API of
//! that cluster) needs `debug`: `debug=*` for every cluster, or `debug=SELECTOR` for the
//! clusters a label selector matches (`debug=region=eu,tier!=gold`: Kubernetes'
//! syntax, without spaces); `admin` has `debug=*` unless the line says otherwise
//! (`debug=none`). What the request may do in the cluster is then bounded by the
//! agent's own credentials there.

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Read.
    View,
    /// Read and write.
    Edit,
    /// Everything, in every space.
    Admin,
}

/// One token's grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The bearer token.
    pub token: String,
    /// Who it is (for logs and answers).
    pub user: String,
    /// What it may do.
    pub role: Role,
    /// The spaces it may use; `None`: every space.
    pub spaces: Option<Vec<String>>,
    /// Which clusters it may debug through the tiers.
    pub debug: DebugGrant,
    /// The user's groups (a client certificate's O, an ID token's groups claim; none
    /// for a token of the tokens file).
    pub groups: Vec<String>,
    /// How the user proved who it is.
    pub via: Authn,
}

/// How a request's user proved who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Authn {
    /// A bearer token of the tokens file (or the web view's session standing for one).
    Token,
    /// An x509 client certificate from the CA `api.client_certificates` names.
    ClientCertificate,
    /// An OIDC ID token from the issuer `api.oidc` names.
    Oidc,
}

impl std::fmt::Display for Authn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Authn::Token => "token",
            Authn::ClientCertificate => "x509",
            Authn::Oidc => "oidc",
        })
    }
}

/// Which clusters a token may reach through the debug tunnel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DebugGrant {
    /// None.
    None,
    /// Every cluster.
    All,
    /// The clusters this label selector matches (checked when the tokens are read).
    Selector(String),
}

/// Why a tokens file does not parse ([`parse_tokens`]): the line (from 1) and what is
/// wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokensError {
    /// A word that is none of the attributes.
    #[error("line {line}: {word:?} is not user=, role=, spaces= or debug=")]
    Attribute {
        /// The line.
        line: usize,
        /// The word.
        word: String,
    },
    /// A role that is none of the three.
    #[error("line {line}: role {role:?} is not view, edit or admin")]
    Role {
        /// The line.
        line: usize,
        /// The role as written.
        role: String,
    },
    /// A `debug=` value that is not a label selector.
    #[error("line {line}: debug={selector}: not a label selector: {reason}")]
    Debug {
        /// The line.
        line: usize,
        /// The value as written.
        selector: String,
        /// Why it does not parse.
        reason: String,
    },
    /// The file holds no token: the API would serve no one.
    #[error("holds no token; the API serves no one anonymously")]
    Empty,
}

/// The tokens file as the API serves it: every grant, and the spaces they name.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    /// Every token's grant, in file order.
    pub grants: Vec<Grant>,
    /// The spaces the grants name (see `crate::kube::spaces`).
    pub named_spaces: std::collections::BTreeSet<String>,
}

impl Tokens {
    /// The grant of a bearer token, if the file holds it (compared in constant time).
    pub fn grant(&self, token: &str) -> Option<&Grant> {
        self.grants
            .iter()
            .find(|g| constant_time_eq(g.token.as_bytes(), token.as_bytes()))
    }

    /// Parses the tokens file; an error names the line, or says that the file holds no
    /// token (the API would serve no one). With a summary for the logs: how many
    /// tokens, and their users.
    pub fn parse(text: &str) -> Result<(Tokens, String), TokensError> {
        let grants = parse_tokens(text)?;
        if grants.is_empty() {
            return Err(TokensError::Empty);
        }
        let named_spaces = grants
            .iter()
            .filter_map(|g| g.spaces.as_ref())
            .flatten()
            .cloned()
            .collect();
        let users: std::collections::BTreeSet<&str> =
            grants.iter().map(|g| g.user.as_str()).collect();
        let summary = format!(
            "{} token(s), users {}",
            grants.len(),
            users.into_iter().collect::<Vec<_>>().join(", ")
        );
        Ok((
            Tokens {
                grants,
                named_spaces,
            },
            summary,
        ))
    }
}

/// Whether two byte strings are equal, in a time that depends on their length only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Parses the tokens file; an error names the line and what is wrong with it.
pub fn parse_tokens(text: &str) -> Result<Vec<Grant>, TokensError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let Some(token) = words.next() else { continue };
        let mut grant = Grant {
            token: token.to_owned(),
            user: "admin".to_owned(),
            role: Role::Admin,
            spaces: None,
            debug: DebugGrant::All,
            groups: Vec::new(),
            via: Authn::Token,
        };
        let mut debug = None;
        for word in words {
            let bad = || TokensError::Attribute {
                line: i + 1,
                word: word.to_owned(),
            };
            match word.split_once('=').ok_or_else(bad)? {
                ("user", u) => grant.user = u.to_owned(),
                ("role", "view") => grant.role = Role::View,
                ("role", "edit") => grant.role = Role::Edit,
                ("role", "admin") => grant.role = Role::Admin,
                ("role", r) => {
                    return Err(TokensError::Role {
                        line: i + 1,
                        role: r.to_owned(),
                    });
                }
                ("debug", "*") => debug = Some(DebugGrant::All),
                ("debug", "none") => debug = Some(DebugGrant::None),
                ("debug", sel) => {
                    strata_kube_core::selector::LabelQuery::parse(sel).map_err(|e| {
                        TokensError::Debug {
                            line: i + 1,
                            selector: sel.to_owned(),
                            reason: e.to_string(),
                        }
                    })?;
                    debug = Some(DebugGrant::Selector(sel.to_owned()));
                }
                ("spaces", "*") => grant.spaces = None,
                ("spaces", s) => grant.spaces = Some(s.split(',').map(str::to_owned).collect()),
                _ => return Err(bad()),
            }
        }
        grant.debug = debug.unwrap_or(if grant.role == Role::Admin {
            DebugGrant::All
        } else {
            DebugGrant::None
        });
        out.push(grant);
    }
    Ok(out)
}

impl Grant {
    /// Whether this grant allows a request in `space` (`None`: not about a space) that
    /// reads or, with `write`, writes; the refusal says why.
    pub fn allows(&self, space: Option<&str>, write: bool) -> Result<(), Denied> {
        if let (Some(space), Some(spaces)) = (space, &self.spaces)
            && self.role != Role::Admin
            && !spaces.iter().any(|s| s == space)
        {
            return Err(Denied::Space {
                user: self.user.clone(),
                space: space.to_owned(),
                spaces: spaces.join(", "),
            });
        }
        if write && self.role == Role::View {
            return Err(Denied::ReadOnly {
                user: self.user.clone(),
            });
        }
        Ok(())
    }
}

/// Why a grant refuses a request (the 403's message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[allow(missing_docs)] // the fields are the user, the space asked and the user's spaces
pub enum Denied {
    /// The space is not one of the grant's.
    #[error("user {user:?} may not use space {space:?} (its spaces: {spaces})")]
    Space {
        user: String,
        space: String,
        spaces: String,
    },
    /// A write by a token of role view.
    #[error("user {user:?} has role view: it may read, not write")]
    ReadOnly { user: String },
    /// A debug tunnel to a cluster the grant's `debug=` selector does not match.
    #[error(
        "user {user:?} may debug the clusters matching {selector:?}, and cluster {cluster:?} does not"
    )]
    DebugOutside {
        user: String,
        selector: String,
        cluster: String,
    },
    /// A debug tunnel by a token without `debug=` permission.
    #[error("user {user:?} may not debug clusters (its token has no debug= permission)")]
    NoDebug { user: String },
}

impl Grant {
    /// Whether this grant may debug the cluster `name` with these (effective) labels;
    /// the refusal says why.
    pub fn may_debug(
        &self,
        name: &str,
        labels: &strata_protocol::model::Labels,
    ) -> Result<(), Denied> {
        match &self.debug {
            DebugGrant::All => Ok(()),
            DebugGrant::Selector(sel)
                if strata_kube_core::selector::LabelQuery::parse(sel)
                    .is_ok_and(|q| q.matches(labels)) =>
            {
                Ok(())
            }
            DebugGrant::Selector(sel) => Err(Denied::DebugOutside {
                user: self.user.clone(),
                selector: sel.clone(),
                cluster: name.to_owned(),
            }),
            DebugGrant::None => Err(Denied::NoDebug {
                user: self.user.clone(),
            }),
        }
    }
}

/// The space a request path is about, if any: `/spaces/{space}/...`, or the Kubernetes
/// API's own paths (the space `default`).
pub fn space_of<'a>(path: &[&'a str]) -> Option<&'a str> {
    match path {
        ["spaces", space, ..] => Some(space),
        [first, ..] if ["api", "apis", "version", "openapi"].contains(first) => Some("default"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_tokens_are_admins_and_roles_bound_what_others_do() {
        let g = parse_tokens(
            "# tokens\nt0\nt1 user=alice role=edit spaces=team-a\nt2 user=dash role=view\n",
        )
        .unwrap();
        assert_eq!(g[0].role, Role::Admin);
        assert!(g[0].allows(Some("any"), true).is_ok());
        assert!(g[1].allows(Some("team-a"), true).is_ok());
        let e = g[1].allows(Some("team-b"), false).unwrap_err().to_string();
        assert!(e.contains("may not use space \"team-b\""), "{e}");
        assert!(g[2].allows(Some("default"), false).is_ok());
        let e = g[2].allows(Some("default"), true).unwrap_err();
        assert!(matches!(e, Denied::ReadOnly { .. }), "{e}");
        assert!(e.to_string().contains("role view"), "{e}");
        let e = parse_tokens("t3 role=root\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 1: role \"root\" is not view, edit or admin"
        );
        assert_eq!(space_of(&["spaces", "x", "objects"]), Some("x"));
        assert_eq!(space_of(&["apis", "apps", "v1"]), Some("default"));
        assert_eq!(space_of(&["clusters"]), None);
    }

    #[test]
    fn debug_is_admins_by_default_and_others_by_selector() {
        let g = parse_tokens(
            "t0\nt1 user=alice role=view debug=region=eu\nt2 user=bob role=edit\nt3 role=admin debug=none\n",
        )
        .unwrap();
        let eu: strata_protocol::model::Labels = [("region".to_owned(), "eu".to_owned())].into();
        let us: strata_protocol::model::Labels = [("region".to_owned(), "us".to_owned())].into();
        assert!(g[0].may_debug("c", &us).is_ok());
        assert!(g[1].may_debug("c", &eu).is_ok());
        let e = g[1].may_debug("c", &us).unwrap_err().to_string();
        assert!(e.contains("\"region=eu\""), "{e}");
        let e = g[2].may_debug("c", &eu).unwrap_err().to_string();
        assert!(e.contains("no debug= permission"), "{e}");
        assert!(g[3].may_debug("c", &eu).is_err());
        let e = parse_tokens("t4 debug=a%b\n").unwrap_err().to_string();
        assert!(
            e.starts_with("line 1: debug=a%b: not a label selector"),
            "{e}"
        );
    }
}
