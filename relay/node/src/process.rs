//! What a node's process takes from its operating system: logging to standard error,
//! the stop signals, and randomness for run ids.

/// Logs to standard error, filtered by `RUST_LOG` (default `info`): what the `relay`
/// and `agent` binaries use.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
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
