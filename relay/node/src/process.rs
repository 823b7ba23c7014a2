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

/// The target of audit events: who changed what through the root's API, and every
/// admission and revocation (`tracing::info!(target: AUDIT_TARGET, ...)`).
pub const AUDIT_TARGET: &str = "audit";

/// Logs to standard error: filtered by `--log`, else `RUST_LOG`, else `info`; in the
/// chosen format; with colour codes only when standard error is a terminal and
/// `NO_COLOR` is unset; audit events ([`AUDIT_TARGET`]) always, as JSON lines. What the `relay` and `agent` binaries use.
pub fn init_logging(args: &LogArgs) {
    use std::io::IsTerminal;
    use tracing_subscriber::filter::{self, FilterExt};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{Layer, fmt};
    let filter = match &args.log {
        Some(directives) => {
            tracing_subscriber::EnvFilter::try_new(directives).map_err(|e| e.to_string())
        }
        None => tracing_subscriber::EnvFilter::try_from_default_env().map_err(|e| e.to_string()),
    };
    let bad_filter = filter.as_ref().err().cloned();
    let filter = filter.unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    // Audit events (target `audit`) are always JSON lines and never filtered out: an
    // operator's collector can pick them from the stream by `"target":"audit"`.
    let not_audit = filter::filter_fn(|m| m.target() != AUDIT_TARGET);
    let (text, json) = match args.log_format {
        LogFormat::Text => (
            Some(
                fmt::layer()
                    .with_ansi(colour)
                    .with_writer(std::io::stderr)
                    .with_filter(filter.and(not_audit)),
            ),
            None,
        ),
        LogFormat::Json => (
            None,
            Some(
                fmt::layer()
                    .json()
                    .with_ansi(false)
                    .with_writer(std::io::stderr)
                    .with_filter(filter.and(not_audit)),
            ),
        ),
    };
    let audit = fmt::layer()
        .json()
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .with_filter(filter::filter_fn(|m| m.target() == AUDIT_TARGET));
    tracing_subscriber::registry()
        .with(text)
        .with(json)
        .with(audit)
        .init();
    if let Some(why) =
        bad_filter.filter(|_| args.log.is_some() || std::env::var_os("RUST_LOG").is_some())
    {
        tracing::warn!(error = %why, "the log filter does not parse; logging at info");
    }
}

/// SIGTERM and SIGINT (Ctrl-C), watched from when this is made until it is dropped.
///
/// Make it once, early, and keep it: tokio drops a signal that arrives while nobody
/// listens for it, so a listener made afresh for each wait (say, in a loop beside a
/// timer) misses a SIGTERM that lands between two of them.
pub struct Signals {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Starts watching both signals. One that cannot be watched is logged, and the
    /// other still stops the process.
    pub fn new() -> Signals {
        use tokio::signal::unix::{SignalKind, signal};
        let watch = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::error!(error = %e, signal = name, "cannot watch the signal");
                None
            }
        };
        Signals {
            term: watch(SignalKind::terminate(), "SIGTERM"),
            int: watch(SignalKind::interrupt(), "SIGINT"),
        }
    }

    /// Returns when SIGTERM or SIGINT has arrived since this was made or last returned.
    /// Cancel-safe: a signal is not lost when this future is dropped.
    pub async fn recv(&mut self) {
        async fn one(s: &mut Option<tokio::signal::unix::Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            _ = one(&mut self.term) => {}
            _ = one(&mut self.int) => {}
        }
    }
}

impl Default for Signals {
    fn default() -> Signals {
        Signals::new()
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
