//! `relay rollout status|pause|resume|abort|undo PLACEMENT`: a placement's rollout
//! through the root's Kubernetes API. Commands set the Placement's
//! `strata.dev/rollout` annotation (what `kubectl annotate` does), stamped so the same
//! verb can be given twice; status reads `status.rollout` and `status.conditions`.

use std::io::IsTerminal;
use std::time::Duration;

use hyper::{Method, StatusCode};
use serde_json::{Value, json};
use strata_protocol::rollout::COMMAND_ANNOTATION;

use crate::client::{ApiClient, RequestError};
use crate::cmd::api::Refused;

/// Why a rollout command failed.
#[derive(Debug, thiserror::Error)]
pub enum RolloutCliError {
    /// The API could not be reached or did not answer.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// The API refused.
    #[error(transparent)]
    Refused(#[from] Refused),
    /// The placement has no `rollout`.
    #[error("placement {placement:?} has no rollout (spec.rollout)")]
    NoRollout {
        /// The placement.
        placement: String,
    },
    /// Others kept changing the placement meanwhile.
    #[error("placement {placement:?} kept changing while it was being updated; try again")]
    Busy {
        /// The placement.
        placement: String,
    },
}

fn placement_path(space: &str, name: &str) -> String {
    format!("/spaces/{space}/apis/strata.dev/v1alpha1/placements/{name}")
}

fn refused(what: String, status: StatusCode, v: &Value) -> RolloutCliError {
    Refused::answer(what, status, v).into()
}

async fn read(client: &ApiClient, space: &str, placement: &str) -> Result<Value, RolloutCliError> {
    let (status, v) = client
        .request(Method::GET, &placement_path(space, placement), None)
        .await?;
    if status != StatusCode::OK {
        return Err(refused(
            format!("reading placement {placement:?}"),
            status,
            &v,
        ));
    }
    Ok(v)
}

/// Sets the command annotation (`verb@stamp`) on the placement. Returns a line saying
/// what was asked.
pub async fn command(
    client: &ApiClient,
    space: &str,
    placement: &str,
    verb: &str,
    stamp: u64,
) -> Result<String, RolloutCliError> {
    let path = placement_path(space, placement);
    for _ in 0..5 {
        let mut object = read(client, space, placement).await?;
        if object["spec"]["rollout"].is_null() {
            return Err(RolloutCliError::NoRollout {
                placement: placement.to_owned(),
            });
        }
        if !object["metadata"]["annotations"].is_object() {
            object["metadata"]["annotations"] = json!({});
        }
        object["metadata"]["annotations"][COMMAND_ANNOTATION] = json!(format!("{verb}@{stamp}"));
        if let Some(o) = object.as_object_mut() {
            o.remove("status");
        }
        let body = serde_json::to_vec(&object).unwrap_or_default();
        let (status, answer) = client.request(Method::PUT, &path, Some(body)).await?;
        match status {
            StatusCode::OK | StatusCode::CREATED => {
                return Ok(format!("placement {placement}: rollout {verb} asked"));
            }
            StatusCode::CONFLICT => continue,
            _ => {
                return Err(refused(
                    format!("updating placement {placement:?}"),
                    status,
                    &answer,
                ));
            }
        }
    }
    Err(RolloutCliError::Busy {
        placement: placement.to_owned(),
    })
}

/// One line of a rollout's status: revision, phase, wave, released and available.
pub fn status_line(placement: &str, status: &Value, tty: bool) -> String {
    let r = &status["rollout"];
    let (index, waves) = (
        r["waveIndex"].as_u64().unwrap_or(0),
        r["waves"].as_u64().unwrap_or(0),
    );
    let available = r["available"].as_str().unwrap_or("0/0");
    let bar = if tty {
        let (a, b) = available.split_once('/').unwrap_or(("0", "0"));
        let (a, b): (u64, u64) = (a.parse().unwrap_or(0), b.parse().unwrap_or(0));
        let filled = (a * 20).checked_div(b).unwrap_or(0) as usize;
        format!(
            " [{}{}]",
            "#".repeat(filled),
            ".".repeat(20 - filled.min(20))
        )
    } else {
        String::new()
    };
    let mut line = format!(
        "{placement} revision {} {} wave {} ({index}/{waves}) released {} available {available}{bar} failed {}",
        r["revision"],
        r["phase"].as_str().unwrap_or("?"),
        r["wave"].as_str().unwrap_or("?"),
        r["released"],
        r["failed"],
    );
    for field in ["unreachable", "pending"] {
        if let Some(n) = r[field].as_u64().filter(|n| *n > 0) {
            line.push_str(&format!(" {field} {n}"));
        }
    }
    if let Some(m) = r["message"].as_str() {
        line.push_str(&format!(": {m}"));
    }
    line
}

/// Prints the rollout's status; with `watch`, a line whenever it changes until it is
/// complete, rolled back or paused. Returns the last phase.
pub async fn status(
    client: &ApiClient,
    space: &str,
    placement: &str,
    watch: bool,
) -> Result<String, RolloutCliError> {
    let tty = std::io::stdout().is_terminal();
    let mut last = String::new();
    loop {
        let object = read(client, space, placement).await?;
        if object["spec"]["rollout"].is_null() {
            return Err(RolloutCliError::NoRollout {
                placement: placement.to_owned(),
            });
        }
        let line = status_line(placement, &object["status"], tty);
        if line != last {
            println!("{line}");
            last = line;
        }
        let phase = object["status"]["rollout"]["phase"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        if !watch || matches!(phase.as_str(), "Complete" | "RolledBack" | "Paused") {
            return Ok(phase);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
