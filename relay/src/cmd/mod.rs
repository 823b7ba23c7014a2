//! The command layer: the `relay` command line ([`Cli`], [`run`]), run a node or talk to
//! the root's API. The one place in the relay where errors become `anyhow` chains; the
//! library below it returns typed errors.
//!
//! * [`serve`]: `relay serve`: a node from its configuration file until a signal.
//! * [`up`]: `relay up`: a whole topology as processes on this machine; [`demo`]:
//!   `relay demo`, a whole hierarchy brought up that way and walked through a move.
//! * [`topology`]: `relay topology validate|certs|render` over [`strata_topology`].
//! * [`kubeconfig`]: `relay kubeconfig`.
//! * [`api`]: what the commands that call the root's API share (flags, output, errors).
//! * [`objects`]: `relay get` and `relay delete KIND NAME`, with kubectl's flags;
//!   [`kinds`]: what their KIND argument names, from the root's discovery.
//! * [`rollout`]: `relay rollout status|pause|resume|abort|undo`: a placement's rollout
//!   through its annotation and status.
//! * [`lifecycle`](mod@lifecycle): `relay cordon|uncordon|drain`: taints on a cluster at the root.
//! * [`views`]: the text views of the tier tree and the inventory.
//! * [`tokens`]: `relay token create|revoke`, `relay join-token create`: the tokens
//!   files a running relay reads again.

pub mod api;
pub mod demo;
mod demo_debug;
pub mod invoke;
pub mod kinds;
pub mod kube_context;
pub mod kubeconfig;
pub mod lifecycle;
pub mod objects;
pub mod rollout;
pub mod serve;
pub mod tokens;
pub mod topology;
pub mod ui;
pub mod up;
pub mod views;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use hyper::Method;

pub use crate::cmd::api::{ApiArgs, CallError, ManifestError, Output};
use crate::cmd::api::{call, read_manifests};
use crate::cmd::serve::ServeError;
use crate::cmd::topology::TopologyCliError;

/// Strata relay: one binary at every tier of the hierarchy.
///
/// `relay serve` runs a node (root, regional or site relay) from its configuration file.
/// The other commands talk to the root's API: apply manifests and placements, see where
/// they are and how they are doing.
#[derive(Debug, Parser)]
#[command(name = "relay", version, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Logging options (`--log-format`, `--log`).
    #[command(flatten)]
    pub logging: strata_node::process::LogArgs,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one node until SIGTERM or SIGINT.
    ///
    /// With `dns: { listen, zone, ttl_s }` in the configuration, the node also answers
    /// DNS (UDP and TCP, authoritative) for the apps of its subtree:
    /// `<service>.<namespace>.<zone>` gives the addresses of the clusters where the app
    /// is Available, nearest first (see deploy/CONFIG.md).
    Serve {
        /// The node's configuration file (YAML).
        #[arg(long, short = 'c', value_name = "FILE")]
        config: PathBuf,
    },
    /// Start a demo hierarchy on this machine (root, 2 regions, 3 sites each, 4 simulated
    /// clusters per site, all separate processes), roll out a sample app to one region,
    /// move it to the other, and stop.
    Demo {
        /// Keep the demo's files (certificates, configs, stores, logs) here.
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
        /// How the app moves between regions: `makeBeforeBreak` (the default: the
        /// first region keeps it until the second runs it) or `breakBeforeMake` (to
        /// see the gap the default avoids).
        #[arg(long = "move", value_name = "STRATEGY", default_value = "makeBeforeBreak",
              value_parser = ["makeBeforeBreak", "breakBeforeMake"])]
        move_strategy: String,
    },
    /// Check a topology file, issue its certificates, render each node's configuration.
    Topology {
        /// What to do with it.
        #[command(subcommand)]
        command: crate::cmd::topology::TopologyCommand,
    },
    /// Start the whole hierarchy a topology file describes on this machine (a process
    /// per relay, an agent with a simulated cluster per cluster), wait until every link
    /// is connected, print how to reach the root; stop everything on Ctrl-C or SIGTERM.
    Up {
        /// The topology file (YAML).
        file: PathBuf,
        /// Keep certificates, configs, stores and logs here across runs (a temporary
        /// directory, removed on exit, otherwise): the CA, `api.tokens` and `ports.yaml`
        /// at the top, each node's files in `nodes/NAME/`, logs in `logs/`.
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
    },
    /// Apply manifests (any Kubernetes objects and Placements) to a space. A bad
    /// document is rejected with its index and field, and nothing is applied.
    Apply {
        /// A YAML file, a directory of them, or - for standard input.
        #[arg(short = 'f', long = "filename", value_name = "FILE|DIR|-")]
        file: String,
        /// How to reach the API.
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Delete what a file names, or one object by kind and name (in the given namespace
    /// only, `default` unless `-n` says otherwise). Deleting a Namespace deletes what is
    /// in it.
    Delete {
        /// A YAML file, a directory of them, or -.
        #[arg(short = 'f', long = "filename", value_name = "FILE|DIR|-", conflicts_with_all = ["kind", "name"])]
        file: Option<String>,
        /// Kind, as kubectl takes it: `deployment`, `deploy`, `deployments.apps`, `cm`.
        kind: Option<String>,
        /// Name.
        name: Option<String>,
        /// Namespace of the object (for namespaced kinds).
        #[arg(short = 'n', long, default_value = "default")]
        namespace: String,
        /// How to reach the API.
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Show objects with their rollout and status summary per placement (the table), or
    /// as the Kubernetes API serves them (`-o yaml|json`, which `relay apply -f` and
    /// `kubectl apply -f` take back), or their names (`-o name`).
    Get {
        /// Kind, as kubectl takes it: a kind, plural, singular or short name (`deploy`,
        /// `cm`, `svc`, `ns`, `pl`), optionally with its group (`deployments.apps`,
        /// `menus.example.com`). Resolved by the space's discovery, so CRDs count; an
        /// unknown kind is an error.
        kind: String,
        /// Name; all objects of the kind (in the namespace) when omitted.
        name: Option<String>,
        /// Namespace (for namespaced kinds).
        #[arg(short = 'n', long, default_value = "default")]
        namespace: String,
        /// Every namespace.
        #[arg(short = 'A', long, conflicts_with = "name")]
        all_namespaces: bool,
        /// Label selector, e.g. `app=web,tier!=db`.
        #[arg(short = 'l', long, conflicts_with = "name")]
        selector: Option<String>,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
        output: Output,
        /// How to reach the API.
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Stop choosing a cluster for placements (a NoSchedule taint in the space); what
    /// runs there stays. Undo with `relay uncordon`.
    Cordon {
        /// The cluster.
        cluster: String,
        /// How to reach the API.
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Move every workload off a cluster (a NoExecute taint in the space),
    /// make-before-break: the cluster keeps each one until its new clusters run it.
    /// Placements that tolerate the taint stay. Undo with `relay uncordon`.
    Drain {
        /// The cluster.
        cluster: String,
        /// Wait until no placement is routed to the cluster any more, at most this long
        /// (e.g. 5m).
        #[arg(long, value_name = "DURATION")]
        wait: Option<String>,
        /// How to reach the API.
        #[command(flatten)]
        api: ApiArgs,
    },
    /// A placement's rollout: `status [-w]`, `pause`, `resume`, `abort`, `undo`.
    Rollout {
        /// What to do.
        #[arg(value_parser = ["status", "pause", "resume", "abort", "undo"])]
        action: String,
        /// The placement.
        placement: String,
        /// With `status`: a line whenever it changes, until complete, rolled back or
        /// paused.
        #[arg(short = 'w', long)]
        watch: bool,
        /// How to reach the API.
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Remove the taints of `relay cordon` and `relay drain` from a cluster.
    Uncordon {
        /// The cluster.
        cluster: String,
        /// How to reach the API.
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Show the clusters the root knows, by relay path, with their labels and when each
    /// was last seen ("now" while every link on its path is up).
    Clusters {
        /// How to reach the API.
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Open the root's web view (`https://ROOT/ui/`): the tiers live, placements and
    /// rollouts, and the actions your token's role allows. Prints a login link, good
    /// once and for two minutes, that trades itself for a session cookie, so no token
    /// is pasted into a page; opens it in a browser when one is at hand (`$BROWSER`,
    /// `xdg-open` or `open`). The browser must trust the root's API certificate (the
    /// hierarchy's CA, or the certificate `api.tls` names).
    Ui {
        /// Only print the link.
        #[arg(long)]
        print: bool,
        /// How to reach the API.
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Show objects born on clusters that placements copy to the center (`upsync:`),
    /// under their cluster's name.
    Upsynced {
        /// Only this cluster's.
        cluster: Option<String>,
        /// Output format.
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
        /// How to reach the API.
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Print a kubeconfig for kubectl, Helm and client libraries: the root's
    /// Kubernetes API for the space (`--space`, default `default`), the CA inline, and a
    /// token: `--token` (`STRATA_TOKEN`), or with `--user U` the token of user U in the
    /// root's tokens file (`--tokens`, `STRATA_TOKENS`: the `api.tokens` that `relay
    /// topology certs` writes). The server is the address the root's API certificate
    /// covers (then no `tls-server-name`), else the address with `tls-server-name` set to
    /// the root's name. Cluster, user and context are named after the space and user.
    /// For example: `relay kubeconfig --user alice > kc.yaml && kubectl --kubeconfig
    /// kc.yaml get deploy -A`.
    Kubeconfig {
        /// How to reach the API, and whose token to use.
        #[command(flatten)]
        args: crate::cmd::kubeconfig::KubeconfigArgs,
    },
    /// Print a shell completion script for `relay` to standard output, e.g.
    /// `relay completion bash > /etc/bash_completion.d/relay`, or
    /// `source <(relay completion zsh)` in `~/.zshrc`.
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Show the tier tree: every relay link's state (up or DOWN, since when), its lag in
    /// revisions and its last heartbeat, as each parent last reported it. Deeper links
    /// are refreshed upward every few seconds, so their heartbeats can be that old.
    Status {
        /// List agents' links too, not only relays'.
        #[arg(long)]
        agents: bool,
        /// How to reach the API.
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Add or take away a user of the root's API: edits the root's tokens file
    /// (`--tokens`, or the `api.tokens` of `--config`), which the running root reads
    /// again within 2 s (logged and audited); no restart. `create` prints the new token
    /// once.
    Token {
        /// What to do.
        #[command(subcommand)]
        command: crate::cmd::tokens::TokenCommand,
    },
    /// Add a join token to a relay: edits its join tokens file, which the running relay
    /// reads again within 2 s (logged and audited); no restart. Prints the token once.
    JoinToken {
        /// What to do.
        #[command(subcommand)]
        command: crate::cmd::tokens::JoinTokenCommand,
    },
    /// Revoke a node (a cluster's agent, an agent that joined, or a relay and so its
    /// subtree's link): recorded at the root, sent to every tier, refused at its next
    /// handshake and its open session closed. An admin's act; it cannot be undone.
    Revoke {
        /// The node's name (as its certificate names it).
        name: String,
        /// Why (kept with the revocation and in the audit trail).
        #[arg(long, default_value = "")]
        reason: String,
        /// How to reach the API.
        #[command(flatten)]
        api: ApiArgs,
    },
}

/// Why a command failed. The binary prints it with its causes, one after another.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // `NotFound` names what was asked for
pub enum CliError {
    /// `relay serve`.
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// `relay demo`.
    #[error(transparent)]
    Demo(anyhow::Error),
    /// `relay topology ...`.
    #[error(transparent)]
    Topology(#[from] TopologyCliError),
    /// `relay up`.
    #[error(transparent)]
    Up(anyhow::Error),
    /// The manifests to apply or delete were refused before anything was sent.
    #[error(transparent)]
    Manifests(#[from] ManifestError),
    /// The API could not be asked, or refused.
    #[error(transparent)]
    Call(#[from] CallError),
    /// `relay kubeconfig` failed.
    #[error(transparent)]
    Kubeconfig(#[from] crate::cmd::kubeconfig::KubeconfigError),
    /// A KIND could not be resolved.
    #[error(transparent)]
    Kind(#[from] crate::cmd::kinds::ResolveError),
    /// `relay delete` was given neither a file nor a kind and a name.
    #[error("give -f FILE, or KIND and NAME")]
    DeleteWhat,
    /// `relay get` or `relay delete KIND NAME`.
    #[error(transparent)]
    Objects(#[from] crate::cmd::objects::ObjectsError),
    /// `relay cordon|uncordon|drain`.
    #[error(transparent)]
    Lifecycle(#[from] crate::cmd::lifecycle::LifecycleError),
    /// `relay rollout`.
    #[error(transparent)]
    Rollout(#[from] crate::cmd::rollout::RolloutCliError),
    /// `relay token` or `relay join-token`.
    #[error(transparent)]
    Tokens(#[from] crate::cmd::tokens::TokenCmdError),
    /// A command-line value is wrong.
    #[error("{0}")]
    Usage(String),
    /// The answer could not be written as JSON.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// The answer could not be written as YAML.
    #[error(transparent)]
    Yaml(#[from] serde_saphyr::ser::Error),
}

/// Runs a command.
pub async fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Serve { config } => Ok(crate::cmd::serve::serve(&config).await?),
        Command::Demo {
            data,
            move_strategy,
        } => crate::cmd::demo::run(data, &move_strategy)
            .await
            .map_err(CliError::Demo),
        Command::Topology { command } => Ok(crate::cmd::topology::run(command)?),
        Command::Token { command } => Ok(crate::cmd::tokens::run_token(command)?),
        Command::JoinToken { command } => Ok(crate::cmd::tokens::run_join_token(command)?),
        Command::Up { file, data } => crate::cmd::up::run(&file, data, cli.logging.log)
            .await
            .map_err(CliError::Up),
        Command::Completion { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Cli::command(), "relay", &mut std::io::stdout());
            Ok(())
        }
        Command::Kubeconfig { args } => {
            print!("{}", crate::cmd::kubeconfig::run(&args).await?);
            Ok(())
        }
        Command::Apply { file, api } => {
            let body = read_manifests(&file, &api.space())?;
            let v = call(
                &api,
                Method::POST,
                &format!("/spaces/{}/apply", api.space()),
                Some(body),
            )
            .await?;
            for k in v["applied"].as_array().into_iter().flatten() {
                println!("applied   {}", k.as_str().unwrap_or_default());
            }
            for k in v["unchanged"].as_array().into_iter().flatten() {
                println!("unchanged {}", k.as_str().unwrap_or_default());
            }
            if let Some(rev) = v["revision"].as_u64() {
                println!("revision {rev}");
            }
            // As kubectl prints the API's `Warning` headers.
            for w in v["warnings"].as_array().into_iter().flatten() {
                eprintln!("Warning: {}", w.as_str().unwrap_or_default());
            }
            Ok(())
        }
        Command::Delete {
            file,
            kind,
            name,
            namespace,
            api,
        } => match (file, kind, name) {
            (Some(file), _, _) => {
                let body = read_manifests(&file, &api.space())?;
                let v = call(
                    &api,
                    Method::POST,
                    &format!("/spaces/{}/delete", api.space()),
                    Some(body),
                )
                .await?;
                for k in v["deleted"].as_array().into_iter().flatten() {
                    println!("deleted {}", k.as_str().unwrap_or_default());
                }
                Ok(())
            }
            (None, Some(kind), Some(name)) => {
                Ok(crate::cmd::objects::delete(&api, &kind, &name, &namespace).await?)
            }
            _ => Err(CliError::DeleteWhat),
        },
        Command::Get {
            kind,
            name,
            namespace,
            all_namespaces,
            selector,
            output,
            api,
        } => {
            let what = crate::cmd::objects::Selection {
                kind,
                name,
                namespace,
                all_namespaces,
                selector,
            };
            Ok(crate::cmd::objects::get(&api, what, output).await?)
        }
        Command::Rollout {
            action,
            placement,
            watch,
            api,
        } => {
            let client = api.client()?;
            if action == "status" {
                crate::cmd::rollout::status(&client, &api.space(), &placement, watch).await?;
            } else {
                let stamp = strata_node::clock::Clock::start().wall().0;
                let said =
                    crate::cmd::rollout::command(&client, &api.space(), &placement, &action, stamp)
                        .await?;
                println!("{said}");
            }
            Ok(())
        }
        Command::Cordon { cluster, api } => {
            lifecycle(&api, &cluster, crate::cmd::lifecycle::Action::Cordon, None).await
        }
        Command::Uncordon { cluster, api } => {
            lifecycle(
                &api,
                &cluster,
                crate::cmd::lifecycle::Action::Uncordon,
                None,
            )
            .await
        }
        Command::Drain { cluster, wait, api } => {
            let wait = wait
                .map(|w| strata_protocol::choice::Seconds::parse(&w))
                .transpose()
                .map_err(|e| CliError::Usage(e.to_string()))?;
            lifecycle(&api, &cluster, crate::cmd::lifecycle::Action::Drain, wait).await
        }
        Command::Clusters { api } => {
            let path = format!("/clusters?space={}", api.space());
            let v = call(&api, Method::GET, &path, None).await?;
            print!("{}", crate::cmd::views::clusters_table(&v));
            Ok(())
        }
        Command::Ui { print, api } => {
            let v = call(&api, Method::POST, "/ui/login-codes", None).await?;
            let path = v["path"].as_str().unwrap_or("/ui/");
            let url = format!("https://{}{path}", api.client()?.addr());
            println!("{url}");
            if !print {
                ui::open_browser(&url);
            }
            Ok(())
        }
        Command::Upsynced {
            cluster,
            output,
            api,
        } => {
            let path = match &cluster {
                Some(c) => format!("/upsynced?cluster={c}"),
                None => "/upsynced".to_owned(),
            };
            let v = call(&api, Method::GET, &path, None).await?;
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&v["items"])?),
                Output::Yaml => print!("{}", serde_saphyr::to_string(&v["items"])?),
                Output::Table | Output::Wide | Output::Name | Output::Summary => {
                    print!("{}", crate::cmd::views::upsynced_table(&v))
                }
            }
            Ok(())
        }
        Command::Status { api, agents } => {
            let v = call(&api, Method::GET, "/status", None).await?;
            print!("{}", crate::cmd::views::status_tree(&v, agents));
            Ok(())
        }
        Command::Revoke { name, reason, api } => {
            let body = serde_json::to_vec(&serde_json::json!({ "reason": reason }))?;
            let v = call(
                &api,
                Method::POST,
                &format!("/revocations/{name}"),
                Some(body),
            )
            .await?;
            match v["revision"].as_u64() {
                Some(rev) => println!("revoked {name} at revision {rev}"),
                None => println!("{name} was already revoked"),
            }
            Ok(())
        }
    }
}

/// `relay cordon|uncordon|drain`.
async fn lifecycle(
    api: &ApiArgs,
    cluster: &str,
    action: crate::cmd::lifecycle::Action,
    wait: Option<strata_protocol::choice::Seconds>,
) -> Result<(), CliError> {
    let client = api.client()?;
    let said = crate::cmd::lifecycle::run(&client, &api.space(), cluster, action).await?;
    println!("{said}");
    if let Some(limit) = wait {
        let took = crate::cmd::lifecycle::wait_drained(
            &client,
            &api.space(),
            cluster,
            Duration::from_secs(limit.0),
        )
        .await?;
        println!(
            "cluster {cluster} drained in {:.1} s: no placement is routed there",
            took.as_secs_f64()
        );
    }
    Ok(())
}
