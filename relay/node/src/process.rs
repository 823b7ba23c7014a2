//! What a node's process takes from its operating system: logging to standard error,
//! the stop signals, and randomness for run ids.

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event (colour only when standard error is a terminal).
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `fields`, `target`, `spans`), for
    /// log collectors.
    Json,
}

/// The logging options both binaries take (flattened into their command lines, valid
/// before or after the subcommand).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LogArgs {
    /// How log lines are written to standard error.
    #[arg(long, global = true, value_enum, env = "STRATA_LOG_FORMAT", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Which events are logged, as a `RUST_LOG` filter (`info`, `debug`,
    /// `strata_node=debug,info`); overrides `RUST_LOG`, whose default is `info`.
    #[arg(long = "log", global = true, value_name = "FILTER")]
    pub log: Option<String>,
}

/// The tracing target of audit lines, logged at `info` whatever the filter's level.
pub const AUDIT_TARGET: &str = "strata::audit";

/// Logs to standard error: filtered by `--log`, else `RUST_LOG`, else `info`; in the
/// chosen format; with colour codes only when standard error is a terminal and
/// `NO_COLOR` is unset. What the `relay` and `agent` binaries use.
pub fn init_logging(args: &LogArgs) {
    use std::io::IsTerminal;
    let filter = match &args.log {
        Some(directives) => {
            tracing_subscriber::EnvFilter::try_new(directives).map_err(|e| e.to_string())
        }
        None => tracing_subscriber::EnvFilter::try_from_default_env().map_err(|e| e.to_string()),
    };
    let bad_filter = filter.as_ref().err().cloned();
    let filter = filter.unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // The audit trail (target `strata::audit`: one line per debug-tunnel request at the
    // root) is kept whatever the level, unless the filter names that target itself.
    let names_audit = args
        .log
        .as_deref()
        .is_some_and(|d| d.contains(AUDIT_TARGET))
        || std::env::var("RUST_LOG").is_ok_and(|d| d.contains(AUDIT_TARGET));
    let filter = match format!("{AUDIT_TARGET}=info").parse() {
        Ok(audit) if !names_audit => filter.add_directive(audit),
        _ => filter,
    };
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Text => builder.with_ansi(colour).init(),
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
    if let Some(why) =
        bad_filter.filter(|_| args.log.is_some() || std::env::var_os("RUST_LOG").is_some())
    {
        tracing::warn!(error = %why, "the log filter does not parse; logging at info");
    }
}

/// Returns on SIGTERM or SIGINT (Ctrl-C).
pub async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot watch SIGTERM; only Ctrl-C stops the node");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// The operating system's random source failed.
#[derive(Debug, thiserror::Error)]
#[error("the system random source failed")]
pub struct RandomSourceFailed;

/// `N` bytes from the system's random source (secrets, store ids, run ids).
pub fn random_bytes<const N: usize>() -> Result<[u8; N], RandomSourceFailed> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; N];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| RandomSourceFailed)?;
    Ok(bytes)
}

/// A random u64 from the system's source (run ids); zero if the source failed, which
/// only makes the run id less likely to differ from the last run's.
pub fn random_u64() -> u64 {
    random_bytes().map_or(0, u64::from_be_bytes)
}
