//! What the cluster and admin ports serve: each frame is routed to Raft, the client API or
//! the slave API; admin-only requests are refused on the cluster port. On a secured master
//! the framed server has already matched the message family to the peer's certificate role
//! (`hetsched_common::wire::authz`); here the client request is matched to the caller
//! ([`super::authz`]) and a slave's requests to the name in its certificate.

use super::admin::refuse_off_admin;
use super::reply::message_name;
use super::Master;
use hetsched_common::protocol::{ClientRequest, ErrorKind, ErrorReply, Message};
use hetsched_common::wire::{Handler, Peer};
use std::sync::Arc;

impl Master {
    /// The frame handler for the cluster port (`admin` false) or the admin port (true):
    /// both serve everything, except that benchmark and fault-injection requests are
    /// refused on the cluster port.
    pub fn handler(&self, admin: bool) -> Handler {
        let me = self.clone();
        Arc::new(move |msg, peer| {
            let me = me.clone();
            Box::pin(async move { me.handle(msg, admin, peer).await })
        })
    }

    async fn handle(&self, msg: Message, admin: bool, peer: Peer) -> Option<Message> {
        if let (false, Message::Client(req)) = (admin, &msg) {
            if let Some(refusal) = refuse_off_admin(req) {
                return Some(Message::Error(refusal));
            }
        }
        match msg {
            Message::Raft { from, msgs } => {
                // A master certificate named by its id (as `hetsched up` and the launcher
                // issue them) speaks only for that id.
                let claimed = peer
                    .identity
                    .as_ref()
                    .and_then(|i| i.name.parse::<u64>().ok());
                if peer.secured && claimed.is_some_and(|c| c != from.0) {
                    tracing::warn!(%peer, from = from.0, "Raft traffic under another master's id dropped");
                    return None;
                }
                self.raft
                    .step(from.0, msgs.into_iter().map(|b| b.into_vec()).collect());
                None
            }
            Message::Client(mut req) => {
                let admitted = self.caller(&peer).and_then(|c| {
                    super::authz::scope_request(&c, &mut req);
                    self.authorize(&c, &req)
                });
                if let Err(e) = admitted {
                    return Some(Message::Error(e));
                }
                let submit = matches!(req, ClientRequest::Submit { .. });
                if submit {
                    tracing::debug!(target: "hetsched::trace", %peer, "submit: received");
                }
                let started = std::time::Instant::now();
                let answer = self.client(req).await;
                if submit {
                    metrics::histogram!("hetsched_master_submit_seconds", "via" => "cluster")
                        .record(started.elapsed());
                }
                Some(match answer {
                    Ok(r) => Message::ClientReply(r),
                    Err(e) => Message::Error(e),
                })
            }
            Message::Slave(req) => Some(match self.check_slave_name(&peer, &req) {
                Err(e) => Message::Error(e),
                Ok(()) => match self.slave(req).await {
                    Ok(r) => Message::SlaveReply(r),
                    Err(e) => Message::Error(e),
                },
            }),
            other => Some(Message::Error(ErrorReply::new(
                ErrorKind::Unsupported,
                format!("a master does not serve {}", message_name(&other)),
            ))),
        }
    }
}
