//! The durable baseline's set-up at the hub: a JetStream stream on the payload's subject
//! (file storage), and one durable push consumer per leaf that delivers to the leaf's
//! own subject and waits for its explicit acknowledgement of every message. This is
//! what our hierarchy does: every tier keeps the object durably, and every agent's
//! status is counted.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use super::super::BenchError;
use super::client::{Conn, deliver_subject};
use super::{SUBJECT, err};

/// The publisher's inbox: the JetStream API's answers and the stream's PubAcks.
pub(super) const INBOX: &str = "_INBOX.js";

/// The stream's name.
const STREAM: &str = "BENCH";

/// Consumers asked for before their answers are read. At 256 nats-server 2.9.10 created
/// about 383 consumers (the first 256 and half the next 256) and then neither created
/// nor answered any more, logging nothing: the stall of runs above 256 leaves (leaf382
/// the first unanswered at 10,000 leaves, leaf383 at 1,000). At 32 the 1,000 are created
/// in 2.3 s.
const PIPELINE: u32 = 32;

/// How long an answer of the JetStream API (or a PubAck) may take before the bench
/// fails naming what it asked: a request the server dropped would otherwise wait
/// forever (a 10,000-leaf run once sat 15 minutes in this phase with every server idle).
const ANSWER_WAIT: Duration = Duration::from_secs(60);

/// How often the set-up says how far it got, in consumers.
const PROGRESS_EVERY: u32 = 1000;

/// Creates the stream and one durable consumer per leaf (`0..leaves`), through the
/// JetStream API on the publisher's connection (which it subscribes to [`INBOX`]).
pub(super) async fn set_up(conn: &mut Conn, leaves: u32) -> Result<(), BenchError> {
    send(conn, &format!("SUB {INBOX} 99\r\n")).await?;
    let stream = json!({
        "name": STREAM,
        "subjects": [SUBJECT],
        "storage": "file",
        "retention": "limits",
        "discard": "old",
        "max_msgs": 100_000,
    });
    request(conn, &format!("$JS.API.STREAM.CREATE.{STREAM}"), &stream).await?;
    answered(conn, "creating the stream").await?;
    let started = Instant::now();
    let mut leaf = 0;
    while leaf < leaves {
        let batch = leaf..(leaf + PIPELINE).min(leaves);
        for l in batch.clone() {
            let consumer = json!({
                "stream_name": STREAM,
                "config": {
                    "durable_name": format!("leaf{l}"),
                    "deliver_subject": deliver_subject(l),
                    "deliver_policy": "new",
                    "ack_policy": "explicit",
                    // Nothing is redelivered while a round is measured.
                    "ack_wait": 120_000_000_000u64,
                },
            });
            let subject = format!("$JS.API.CONSUMER.DURABLE.CREATE.{STREAM}.leaf{l}");
            request(conn, &subject, &consumer).await?;
        }
        for l in batch.clone() {
            answered(conn, &format!("creating consumer leaf{l}")).await?;
        }
        if batch.end / PROGRESS_EVERY > batch.start / PROGRESS_EVERY || batch.end == leaves {
            eprintln!(
                "JetStream: {} of {leaves} durable consumers created in {:.1} s",
                batch.end,
                started.elapsed().as_secs_f64()
            );
        }
        leaf = batch.end;
    }
    Ok(())
}

async fn send(conn: &mut Conn, text: &str) -> Result<(), BenchError> {
    conn.writer.write_all(text.as_bytes()).await.map_err(err)
}

/// Publishes `body` to the JetStream API's `subject`, answered on [`INBOX`].
async fn request(conn: &mut Conn, subject: &str, body: &Value) -> Result<(), BenchError> {
    let body = body.to_string();
    send(
        conn,
        &format!("PUB {subject} {INBOX} {}\r\n{body}\r\n", body.len()),
    )
    .await
}

/// Waits for the next message on [`INBOX`] (an API answer or a PubAck) to the request
/// `what`, within [`ANSWER_WAIT`], and fails when it carries a JetStream error (see
/// [`check`]). Answers the server's PINGs on the way.
pub(super) async fn answered(conn: &mut Conn, what: &str) -> Result<(), BenchError> {
    let body = tokio::time::timeout(ANSWER_WAIT, next_message(conn))
        .await
        .map_err(|_| {
            err(format!(
                "{what}: no answer from JetStream within {ANSWER_WAIT:?}"
            ))
        })??;
    check(&body, what)
}

async fn next_message(conn: &mut Conn) -> Result<Vec<u8>, BenchError> {
    let line = conn.read_until("MSG").await?;
    let size: usize = line
        .split_whitespace()
        .last()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; size + 2];
    conn.reader.read_exact(&mut body).await.map_err(err)?;
    body.truncate(size);
    Ok(body)
}

/// Fails when a JetStream answer carries an error, naming `what` was asked.
fn check(body: &[u8], what: &str) -> Result<(), BenchError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| err(format!("{what}: JetStream answered no JSON ({e})")))?;
    match v.get("error") {
        Some(e) => Err(err(format!("{what}: JetStream refused: {e}"))),
        None => Ok(()),
    }
}
