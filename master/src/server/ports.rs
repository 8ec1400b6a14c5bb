//! What the cluster and admin ports serve: each frame is routed to Raft, the client API or
//! the slave API; admin-only requests are refused on the cluster port.

use super::admin::refuse_off_admin;
use super::reply::message_name;
use super::Master;
use hetsched_common::protocol::{ClientRequest, ErrorKind, ErrorReply, Message};
use hetsched_common::wire::Handler;
use std::sync::Arc;

impl Master {
    /// The frame handler for the cluster port (`admin` false) or the admin port (true):
    /// both serve everything, except that benchmark and fault-injection requests are
    /// refused on the cluster port.
    pub fn handler(&self, admin: bool) -> Handler {
        let me = self.clone();
        Arc::new(move |msg, _peer| {
            let me = me.clone();
            Box::pin(async move { me.handle(msg, admin).await })
        })
    }

    async fn handle(&self, msg: Message, admin: bool) -> Option<Message> {
        if let (false, Message::Client(req)) = (admin, &msg) {
            if let Some(refusal) = refuse_off_admin(req) {
                return Some(Message::Error(refusal));
            }
        }
        match msg {
            Message::Raft { from, msgs } => {
                self.raft
                    .step(from.0, msgs.into_iter().map(|b| b.into_vec()).collect());
                None
            }
            Message::Client(req) => {
                let submit = matches!(req, ClientRequest::Submit { .. });
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
            Message::Slave(req) => Some(match self.slave(req).await {
                Ok(r) => Message::SlaveReply(r),
                Err(e) => Message::Error(e),
            }),
            other => Some(Message::Error(ErrorReply::new(
                ErrorKind::Unsupported,
                format!("a master does not serve {}", message_name(&other)),
            ))),
        }
    }
}
