//! The listener side of a relay: the accept loop, and one task per incoming
//! connection that identifies it (a child by its certificate, or an agent joining with
//! a token) and pumps its messages to the driver as [`RelayInput`]s.

use std::sync::Arc;

use quinn::{Connection, Endpoint, VarInt};
use strata_node::driver::Input;
use strata_node::tls::{peer_chain, peer_node_name};
use strata_node::transport::{self, Receiver, close_code};
use strata_protocol::codec::DEFAULT_MAX_FRAME;
use strata_protocol::wire::{ChildToParent, ParentToChild};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tracing::Instrument;

use super::input::RelayInput;
use crate::join::{self, Joining};

/// Accepts connections until the endpoint closes; every connection's task belongs to
/// the loop and ends with it.
pub(super) async fn accept_loop(
    listener: Endpoint,
    joining: Option<Arc<Joining>>,
    tx: mpsc::Sender<Input<RelayInput>>,
) {
    let mut conns = JoinSet::new();
    let mut next_id = 0u64;
    while let Some(incoming) = listener.accept().await {
        next_id += 1;
        let conn_id = next_id;
        let tx = tx.clone();
        let joining = joining.clone();
        conns.spawn(serve_connection(incoming, conn_id, joining, tx).in_current_span());
        // Reap finished connection tasks so the set does not grow without bound.
        while conns.try_join_next().is_some() {}
    }
    conns.shutdown().await;
}

/// One incoming connection: a join exchange when it has no client certificate, else a
/// child's session, in a span naming the child.
async fn serve_connection(
    incoming: quinn::Incoming,
    conn_id: u64,
    joining: Option<Arc<Joining>>,
    tx: mpsc::Sender<Input<RelayInput>>,
) {
    let conn = match incoming.await {
        Ok(c) => c,
        Err(e) => {
            tracing::info!(error = %e, "handshake failed (a certificate refused?)");
            return;
        }
    };
    // No client certificate: only a relay admitting joins lets that through TLS,
    // and such a connection may do one join exchange and nothing else.
    let Some(chain) = peer_chain(&conn) else {
        if joining.is_some() {
            serve_join(conn, &tx).await;
        } else {
            conn.close(
                VarInt::from_u32(close_code::UNKNOWN_CHILD),
                b"a client certificate is required",
            );
        }
        return;
    };
    if !join::chain_allowed(&chain, joining.as_deref()) {
        conn.close(
            VarInt::from_u32(close_code::UNKNOWN_CHILD),
            b"the certificate was issued by an intermediate that is not this relay's join CA",
        );
        return;
    }
    let name = match peer_node_name(&conn) {
        Ok(n) => n,
        Err(e) => {
            conn.close(
                VarInt::from_u32(close_code::UNKNOWN_CHILD),
                e.to_string().as_bytes(),
            );
            return;
        }
    };
    let span = tracing::info_span!("child", peer = %name, conn = conn_id);
    async move {
        let (sender, receiver) =
            transport::split::<ParentToChild, ChildToParent>(conn.clone(), DEFAULT_MAX_FRAME);
        if tx
            .send(Input::Node(RelayInput::ChildUp {
                name: name.clone(),
                conn_id,
                conn,
                sender,
            }))
            .await
            .is_err()
        {
            return;
        }
        let why = pump_child(receiver, &name, conn_id, &tx).await;
        let _ = tx
            .send(Input::Node(RelayInput::ChildDown { name, conn_id, why }))
            .await;
    }
    .instrument(span)
    .await;
}

/// One join exchange on a connection without a client certificate.
async fn serve_join(conn: Connection, tx: &mpsc::Sender<Input<RelayInput>>) {
    let Some(request) = join::read_request(&conn).await else {
        return;
    };
    let (reply_tx, reply_rx) = oneshot::channel();
    let input = Input::Node(RelayInput::Join {
        request,
        reply: reply_tx,
    });
    if tx.send(input).await.is_err() {
        return;
    }
    if let Ok(reply) = reply_rx.await {
        join::send_reply(conn, &reply).await;
    }
}

async fn pump_child(
    mut receiver: Receiver<ChildToParent>,
    name: &str,
    conn_id: u64,
    tx: &mpsc::Sender<Input<RelayInput>>,
) -> String {
    loop {
        match receiver.recv().await {
            Ok(msg) => {
                let input = Input::Node(RelayInput::ChildMsg {
                    name: name.to_owned(),
                    conn_id,
                    msg,
                });
                if tx.send(input).await.is_err() {
                    return "node stopping".into();
                }
            }
            Err(e) => return e.to_string(),
        }
    }
}
