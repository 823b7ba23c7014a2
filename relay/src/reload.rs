//! Files a running relay reads again when they change: the API's tokens (`api.tokens`),
//! the join tokens (`join.tokens`) and its configuration's `children`. Adding a user, a
//! join token or a child, or taking a token away, is an edit of the file; no restart.
//!
//! A [`Reloading`] task looks at the file every [`POLL_EVERY`] (its modification time
//! and length first, its content when either moved: no watcher crate, and it works on
//! every file system and through the symbolic links a Kubernetes Secret volume swaps).
//! A content that parses replaces the previous one at once (readers hold a
//! [`tokio::sync::watch::Receiver`] and see it at their next request); each reload is
//! logged and audited (an `audit` line, as API writes are). A content that does not
//! parse, or a file that went, keeps the previous tokens and is logged as an error
//! naming the file and, for a bad line, its number; the same fault is said once.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

/// How often a watched file is looked at.
pub const POLL_EVERY: Duration = Duration::from_secs(2);

/// What a file's parser yields: the value, and a summary of it for the logs
/// (`3 tokens (users alice, bob)`).
pub type Parsed<T> = (T, String);

/// A file read again whenever it changes; dropping it stops the task.
#[derive(Debug)]
pub struct Reloading<T> {
    current: watch::Receiver<Arc<T>>,
    task: tokio::task::JoinHandle<()>,
}

impl<T> Drop for Reloading<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<T: Send + Sync + 'static> Reloading<T> {
    /// Watches `path`, whose content `initial` was parsed from, with `parse` (an error
    /// names the line). `what` names the file in logs and audit lines (`api.tokens`).
    pub fn spawn<E: std::fmt::Display + 'static>(
        path: PathBuf,
        what: &'static str,
        initial: T,
        parse: impl Fn(&str) -> Result<Parsed<T>, E> + Send + 'static,
        every: Duration,
    ) -> Reloading<T> {
        Self::spawn_as(path, what, "tokens-reload", initial, parse, every)
    }

    /// [`Reloading::spawn`], its audit lines saying `action` (`ACTION` when the file was
    /// read again, `ACTION-refused` when it was not).
    pub fn spawn_as<E: std::fmt::Display + 'static>(
        path: PathBuf,
        what: &'static str,
        action: &'static str,
        initial: T,
        parse: impl Fn(&str) -> Result<Parsed<T>, E> + Send + 'static,
        every: Duration,
    ) -> Reloading<T> {
        let (tx, current) = watch::channel(Arc::new(initial));
        let seen = Seen::of(&path);
        let file = Watched { path, what, action };
        let task = tokio::spawn(watch_file(file, tx, parse, every, seen));
        Reloading { current, task }
    }

    /// What the file holds now (as last parsed successfully).
    pub fn current(&self) -> Arc<T> {
        self.current.borrow().clone()
    }

    /// A receiver of every reload, for a reader that outlives this handle's borrow.
    pub fn subscribe(&self) -> watch::Receiver<Arc<T>> {
        self.current.clone()
    }
}

/// What was last seen of the file: modification time, length, content.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Seen {
    modified: Option<SystemTime>,
    len: u64,
    text: Option<String>,
}

impl Seen {
    fn of(path: &Path) -> Seen {
        let meta = std::fs::metadata(path).ok();
        Seen {
            modified: meta.as_ref().and_then(|m| m.modified().ok()),
            len: meta.as_ref().map_or(0, |m| m.len()),
            text: std::fs::read_to_string(path).ok(),
        }
    }
}

/// A watched file: where, what it is called in logs, and its audit lines' action.
struct Watched {
    path: PathBuf,
    what: &'static str,
    action: &'static str,
}

async fn watch_file<T: Send + Sync + 'static, E: std::fmt::Display>(
    file: Watched,
    tx: watch::Sender<Arc<T>>,
    parse: impl Fn(&str) -> Result<Parsed<T>, E>,
    every: Duration,
    mut seen: Seen,
) {
    let Watched { path, what, action } = file;
    let refused = format!("{action}-refused");
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The fault last said, so that a file left broken is not logged every tick.
    let mut said: Option<String> = None;
    loop {
        tick.tick().await;
        let meta = std::fs::metadata(&path).ok();
        let (modified, len) = (
            meta.as_ref().and_then(|m| m.modified().ok()),
            meta.as_ref().map_or(0, |m| m.len()),
        );
        // Unchanged time and length: nothing to read (an edit within the file
        // system's time resolution that keeps the length is read at the next one
        // that moves either; the content is compared anyway before anything is done).
        if meta.is_some() && modified == seen.modified && len == seen.len {
            continue;
        }
        seen.modified = modified;
        seen.len = len;
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                let fault = format!("cannot read: {e}");
                if said.as_ref() != Some(&fault) {
                    tracing::error!(file = %path.display(), field = what, error = %fault, "keeping what it held before");
                    said = Some(fault);
                }
                continue;
            }
        };
        if seen.text.as_ref() == Some(&text) {
            continue;
        }
        match parse(&text) {
            Ok((value, summary)) => {
                seen.text = Some(text);
                said = None;
                tx.send_replace(Arc::new(value));
                tracing::info!(file = %path.display(), field = what, %summary, "reloaded");
                tracing::info!(
                    target: "audit",
                    who = "file",
                    action = action,
                    field = what,
                    file = %path.display(),
                    summary = %summary,
                    "{what} reloaded from {}: {summary}",
                    path.display()
                );
            }
            Err(fault) => {
                let fault = fault.to_string();
                // Remembered: the same broken text is not parsed (nor said) again, and
                // a fix, which differs, is read when it comes.
                seen.text = Some(text);
                if said.as_ref() != Some(&fault) {
                    tracing::error!(file = %path.display(), field = what, error = %fault, "keeping what it held before");
                    tracing::info!(
                        target: "audit",
                        who = "file",
                        action = %refused,
                        field = what,
                        file = %path.display(),
                        error = %fault,
                        "{what} in {} not reloaded: {fault}",
                        path.display()
                    );
                    said = Some(fault);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn lines(text: &str) -> Result<Parsed<Vec<String>>, String> {
        let mut out = Vec::new();
        for (i, l) in text.lines().enumerate() {
            if l.contains(' ') {
                return Err(format!("line {}: a space", i + 1));
            }
            out.push(l.to_owned());
        }
        let summary = format!("{} lines", out.len());
        Ok((out, summary))
    }

    async fn until(r: &Reloading<Vec<String>>, want: &[String]) -> bool {
        for _ in 0..200 {
            if r.current().as_slice() == want {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    #[tokio::test]
    async fn a_changed_file_replaces_the_value_and_a_broken_one_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        std::fs::write(&path, "a\n").unwrap();
        let r = Reloading::spawn(
            path.clone(),
            "test",
            vec!["a".to_owned()],
            lines,
            Duration::from_millis(20),
        );
        std::fs::write(&path, "a\nbb\n").unwrap();
        assert!(until(&r, &["a".to_owned(), "bb".to_owned()]).await);
        // Broken: the previous value stays, however long.
        std::fs::write(&path, "a\nb b\nccc\n").unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(r.current().as_slice(), ["a", "bb"]);
        // Gone: kept too; back and fixed: read.
        std::fs::remove_file(&path).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(r.current().as_slice(), ["a", "bb"]);
        std::fs::write(&path, "z\n").unwrap();
        assert!(until(&r, &["z".to_owned()]).await);
    }
}
