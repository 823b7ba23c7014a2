//! `relay token create|revoke` and `relay join-token create`: edit the tokens files a
//! running relay reads again within 2 s of every change (`crate::reload`), so a user or
//! a join token is added or taken away without a restart. Each edit replaces the file
//! whole (a temporary file beside it, renamed over it), so the relay never reads half a
//! file; the relay logs and audits the reload (`tokens-reload`, naming the file and its
//! users). A new secret is printed once, on standard output, and kept nowhere else in
//! clear (join tokens are kept by their SHA-256 once used).
//!
//! Two edits at the same moment may lose one of them (the last rename wins): run them
//! one after another.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};

use crate::api::auth::{Tokens, parse_tokens};
use crate::config::NodeConfig;

/// `relay token ...`.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Add a user with a new bearer token to the root's API tokens file and print the
    /// token (once). The running root accepts it within 2 s, no restart.
    Create {
        /// The user's name (as audit lines and refusals name it).
        name: String,
        /// What the token may do.
        #[arg(long, value_parser = ["view", "edit", "admin"])]
        role: String,
        /// The spaces it may use, comma-separated (default: every space).
        #[arg(long, value_name = "A,B")]
        spaces: Option<String>,
        /// Which clusters it may debug through the tiers: `*`, a label selector, or
        /// `none` (default: `*` for admin, `none` otherwise).
        #[arg(long, value_name = "SELECTOR")]
        debug: Option<String>,
        /// Where the tokens file is.
        #[command(flatten)]
        file: ApiTokensFile,
    },
    /// Take every token of a user out of the root's API tokens file. The running root
    /// refuses them (401) within 2 s, no restart.
    Revoke {
        /// The user's name.
        name: String,
        /// Where the tokens file is.
        #[command(flatten)]
        file: ApiTokensFile,
    },
}

/// `relay join-token ...`.
#[derive(Debug, Subcommand)]
pub enum JoinTokenCommand {
    /// Add a join token to a relay's join tokens file and print it (once). The running
    /// relay admits agents with it within 2 s, no restart.
    Create {
        /// The relay the agents join (its `join:` tokens file).
        #[arg(long, value_name = "SITE")]
        parent: String,
        /// How many agents may join with it.
        #[arg(long, default_value_t = 1)]
        uses: u32,
        /// How long it is valid from now (`24h`, `7d`, `90m`); default: until used up.
        #[arg(long, value_name = "DURATION")]
        expires: Option<String>,
        /// The relay's join tokens file itself.
        #[arg(long, value_name = "FILE", conflicts_with_all = ["config", "dir"])]
        tokens: Option<PathBuf>,
        /// The relay's configuration, whose `join.tokens` names the file.
        #[arg(long, short = 'c', value_name = "FILE", conflicts_with = "dir")]
        config: Option<PathBuf>,
        /// The directory `relay topology certs` wrote (`nodes/SITE/join.tokens`).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// Where the root's API tokens file is: given, or named by the root's configuration.
#[derive(Debug, Args)]
pub struct ApiTokensFile {
    /// The tokens file (`api.tokens` in the directory `relay topology certs` wrote).
    #[arg(long, env = "STRATA_TOKENS", value_name = "FILE")]
    pub tokens: Option<PathBuf>,
    /// The root's configuration, whose `api.tokens` names the file (it wins over
    /// `--tokens` and `STRATA_TOKENS`).
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Why a tokens file was not changed.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // each names the file and what is wrong
pub enum TokenCmdError {
    /// Neither a tokens file nor a configuration was given.
    #[error("say which file: --tokens FILE or --config FILE{dir}")]
    NoFile { dir: &'static str },
    /// The configuration could not be read.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The configuration has no such file.
    #[error("{path}: has no {field} (this node {why})")]
    NotInConfig {
        path: PathBuf,
        field: &'static str,
        why: &'static str,
    },
    /// `--config` is another relay's.
    #[error("{path}: is the configuration of {node:?}, not of --parent {parent:?}")]
    OtherNode {
        path: PathBuf,
        node: String,
        parent: String,
    },
    /// The file could not be read or written.
    #[error("{path}: {action}")]
    Io {
        path: PathBuf,
        action: &'static str,
        source: std::io::Error,
    },
    /// The user name is unusable in a tokens line.
    #[error("user name {0:?}: must be non-empty, without spaces or '='")]
    BadName(String),
    /// The user has a token already.
    #[error("{path}: user {name:?} has a token already (revoke it first, or pick another name)")]
    Exists { path: PathBuf, name: String },
    /// No line is the user's.
    #[error("{path}: no token of user {name:?} (users there: {known})")]
    NoSuchUser {
        path: PathBuf,
        name: String,
        known: String,
    },
    /// The file would not parse, or hold no token, after the change: it is refused
    /// before writing (the relay would keep the previous tokens).
    #[error("{path}: the change is refused, the file would not be accepted: {reason}")]
    WouldBreak { path: PathBuf, reason: String },
    /// `--expires` is not a duration.
    #[error("--expires {0:?}: not a duration (e.g. 24h, 7d, 90m)")]
    Expires(String),
    /// `--uses 0`.
    #[error("--uses must be at least 1")]
    Uses,
    /// No random secret could be made.
    #[error("the system random source failed")]
    Random,
}

/// Runs `relay token ...`; prints the new token on standard output.
pub fn run_token(command: TokenCommand) -> Result<(), TokenCmdError> {
    match command {
        TokenCommand::Create {
            name,
            role,
            spaces,
            debug,
            file,
        } => {
            let path = api_tokens_path(&file)?;
            let secret =
                create_api_token(&path, &name, &role, spaces.as_deref(), debug.as_deref())?;
            println!("{secret}");
            eprintln!(
                "user {name} (role {role}) added to {}; the root accepts the token within 2 s",
                path.display()
            );
            Ok(())
        }
        TokenCommand::Revoke { name, file } => {
            let path = api_tokens_path(&file)?;
            let n = revoke_api_token(&path, &name)?;
            eprintln!(
                "{n} token(s) of user {name} taken out of {}; the root refuses them within 2 s",
                path.display()
            );
            Ok(())
        }
    }
}

/// Runs `relay join-token create`; prints the new token on standard output.
pub fn run_join_token(command: JoinTokenCommand) -> Result<(), TokenCmdError> {
    let JoinTokenCommand::Create {
        parent,
        uses,
        expires,
        tokens,
        config,
        dir,
    } = command;
    let path = match (tokens, config, dir) {
        (Some(t), _, _) => t,
        (None, Some(c), _) => {
            let loaded = NodeConfig::load(&c)?;
            if loaded.node != parent {
                return Err(TokenCmdError::OtherNode {
                    path: c,
                    node: loaded.node,
                    parent,
                });
            }
            match loaded.join {
                Some(j) => j.tokens,
                None => {
                    return Err(TokenCmdError::NotInConfig {
                        path: c,
                        field: "join.tokens",
                        why: "admits no agent by token: give it `join:`",
                    });
                }
            }
        }
        (None, None, Some(d)) => strata_topology::files::join_tokens(&d, &parent),
        (None, None, None) => {
            return Err(TokenCmdError::NoFile {
                dir: " or --dir DIR",
            });
        }
    };
    let expires_at = match expires {
        Some(e) => {
            let d = strata_protocol::choice::Seconds::parse(&e)
                .map_err(|_| TokenCmdError::Expires(e.clone()))?;
            let now = strata_node::clock::Clock::start().wall().0 / 1000;
            Some(now.saturating_add(d.0))
        }
        None => None,
    };
    let secret = create_join_token(&path, uses, expires_at)?;
    println!("{secret}");
    let until = expires_at.map_or(String::new(), |t| format!(", until Unix time {t}"));
    eprintln!(
        "join token for {parent} ({uses} use(s){until}) added to {}; the relay admits it within 2 s",
        path.display()
    );
    Ok(())
}

fn api_tokens_path(file: &ApiTokensFile) -> Result<PathBuf, TokenCmdError> {
    match (&file.tokens, &file.config) {
        (_, Some(c)) => match NodeConfig::load(c)?.api {
            Some(api) => Ok(api.tokens),
            None => Err(TokenCmdError::NotInConfig {
                path: c.clone(),
                field: "api.tokens",
                why: "serves no API: only the root does",
            }),
        },
        (Some(t), None) => Ok(t.clone()),
        (None, None) => Err(TokenCmdError::NoFile { dir: "" }),
    }
}

/// Adds a line `SECRET user=NAME role=ROLE [spaces=..] [debug=..]` to the API tokens
/// file at `path` and returns the secret; the file must parse afterwards.
pub fn create_api_token(
    path: &Path,
    name: &str,
    role: &str,
    spaces: Option<&str>,
    debug: Option<&str>,
) -> Result<String, TokenCmdError> {
    if name.is_empty() || name.contains(char::is_whitespace) || name.contains('=') {
        return Err(TokenCmdError::BadName(name.to_owned()));
    }
    let text = read(path)?;
    let existing = parse_tokens(&text).map_err(|e| would_break(path, e))?;
    if existing.iter().any(|g| g.user == name) {
        return Err(TokenCmdError::Exists {
            path: path.to_owned(),
            name: name.to_owned(),
        });
    }
    let secret = secret()?;
    let mut line = format!("{secret} user={name} role={role}");
    for (attr, value) in [("spaces", spaces), ("debug", debug)] {
        if let Some(v) = value {
            line.push_str(&format!(" {attr}={v}"));
        }
    }
    let new = appended(&text, &line);
    Tokens::parse(&new).map_err(|e| would_break(path, e))?;
    replace(path, &new)?;
    Ok(secret)
}

/// Takes every line of user `name` out of the API tokens file at `path`; how many.
/// Refused when no token would be left (the root would keep the previous ones).
pub fn revoke_api_token(path: &Path, name: &str) -> Result<usize, TokenCmdError> {
    let text = read(path)?;
    let grants = parse_tokens(&text).map_err(|e| would_break(path, e))?;
    let theirs: Vec<&str> = grants
        .iter()
        .filter(|g| g.user == name)
        .map(|g| g.token.as_str())
        .collect();
    if theirs.is_empty() {
        let known: std::collections::BTreeSet<&str> =
            grants.iter().map(|g| g.user.as_str()).collect();
        return Err(TokenCmdError::NoSuchUser {
            path: path.to_owned(),
            name: name.to_owned(),
            known: known.into_iter().collect::<Vec<_>>().join(", "),
        });
    }
    let kept: String = text
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .next()
                .is_none_or(|t| l.trim_start().starts_with('#') || !theirs.contains(&t))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    Tokens::parse(&kept).map_err(|e| would_break(path, e))?;
    replace(path, &kept)?;
    Ok(theirs.len())
}

/// Adds a join token (`uses`, valid until Unix second `expires`) to the join tokens
/// file at `path` and returns it.
pub fn create_join_token(
    path: &Path,
    uses: u32,
    expires: Option<u64>,
) -> Result<String, TokenCmdError> {
    if uses == 0 {
        return Err(TokenCmdError::Uses);
    }
    let text = read(path)?;
    let secret = secret()?;
    let mut line = format!("{secret} uses={uses}");
    if let Some(t) = expires {
        line.push_str(&format!(" expires={t}"));
    }
    let new = appended(&text, &line);
    crate::join::parse_join_tokens(&new).map_err(|e| would_break(path, e))?;
    replace(path, &new)?;
    Ok(secret)
}

fn would_break(path: &Path, e: impl std::fmt::Display) -> TokenCmdError {
    TokenCmdError::WouldBreak {
        path: path.to_owned(),
        reason: e.to_string(),
    }
}

fn read(path: &Path) -> Result<String, TokenCmdError> {
    std::fs::read_to_string(path).map_err(|source| TokenCmdError::Io {
        path: path.to_owned(),
        action: "cannot read",
        source,
    })
}

fn appended(text: &str, line: &str) -> String {
    let mut out = text.to_owned();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(line);
    out.push('\n');
    out
}

fn secret() -> Result<String, TokenCmdError> {
    strata_topology::certs::random_token().map_err(|_| TokenCmdError::Random)
}

/// Replaces the file at `path` (through a symbolic link, its target) with `text`: a
/// temporary file in the same directory with the same permissions, synced, renamed over
/// it.
fn replace(path: &Path, text: &str) -> Result<(), TokenCmdError> {
    let io = |action: &'static str, p: &Path| {
        let p = p.to_owned();
        move |source| TokenCmdError::Io {
            path: p,
            action,
            source,
        }
    };
    let target = std::fs::canonicalize(path).map_err(io("cannot resolve", path))?;
    let permissions = std::fs::metadata(&target)
        .map_err(io("cannot read", &target))?
        .permissions();
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = target.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let written = (|| {
        use std::io::Write as _;
        let mut f = std::fs::File::create(&temp)?;
        f.set_permissions(permissions)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(io("cannot write a temporary file beside it", &target)(e));
    }
    std::fs::rename(&temp, &target).map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        io("cannot replace", &target)(e)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::api::auth::Role;

    #[test]
    fn created_tokens_parse_and_revoked_ones_are_gone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("api.tokens");
        std::fs::write(&path, "# users\nroot-secret user=ops\n").unwrap();
        let t = create_api_token(&path, "bob", "view", Some("team-a"), None).unwrap();
        let (tokens, _) = Tokens::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let bob = tokens.grant(&t).unwrap();
        assert_eq!((bob.user.as_str(), bob.role), ("bob", Role::View));
        assert_eq!(bob.spaces, Some(vec!["team-a".to_owned()]));
        let e = create_api_token(&path, "bob", "edit", None, None).unwrap_err();
        assert!(e.to_string().contains("has a token already"), "{e}");
        let e = create_api_token(&path, "eve", "edit", None, Some("a%b")).unwrap_err();
        assert!(e.to_string().contains("not a label selector"), "{e}");

        assert_eq!(revoke_api_token(&path, "bob").unwrap(), 1);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "# users\nroot-secret user=ops\n");
        let e = revoke_api_token(&path, "bob").unwrap_err().to_string();
        assert!(
            e.contains("no token of user \"bob\" (users there: ops)"),
            "{e}"
        );
        let e = revoke_api_token(&path, "ops").unwrap_err().to_string();
        assert!(e.contains("holds no token"), "{e}");
        assert!(path.exists() && std::fs::read_dir(dir.path()).unwrap().count() == 1);
    }

    #[test]
    fn join_tokens_are_added_with_their_uses_and_expiry() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("join.tokens");
        std::fs::write(&path, "old\n").unwrap();
        let t = create_join_token(&path, 5, Some(1_900_000_000)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("old\n{t} uses=5 expires=1900000000\n"));
        let (tokens, _) = crate::join::parse_join_tokens(&text).unwrap();
        assert_eq!(tokens[&crate::join::token_id(&t)].uses, 5);
        assert!(matches!(
            create_join_token(&path, 0, None),
            Err(TokenCmdError::Uses)
        ));
    }
}
