//! The bench's requests to the leader: the common leader-following client, retrying what may
//! pass, with refusals handed back as the error answers they were.

use anyhow::bail;
use hetsched_common::leader::{self, LeaderError, LeaderOptions};
use hetsched_common::protocol::{ClientRequest, ClientResponse, ErrorReply, Message, StatusInfo};
use std::time::Duration;

/// Requests to whichever master leads: the common [`leader::LeaderClient`], retrying everything
/// that may pass (elections, `Busy`) every 50 ms; a refusal comes back as the error answer
/// it was.
pub(crate) struct BenchClient {
    inner: leader::LeaderClient,
}

impl BenchClient {
    pub(crate) fn new(masters: Vec<String>) -> Self {
        let options = LeaderOptions {
            connect_timeout: Duration::from_secs(1),
            call_timeout: Duration::from_secs(10),
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_millis(50),
            retry_busy: true,
            ..LeaderOptions::default()
        };
        Self {
            inner: leader::LeaderClient::new(masters).with_options(options),
        }
    }

    /// The same client connecting with `setup` (an in-process slave's certificate).
    pub(crate) fn with_tls(
        mut self,
        setup: std::sync::Arc<hetsched_common::wire::tls::TlsSetup>,
    ) -> Self {
        self.inner = self.inner.with_tls(setup);
        self
    }

    /// The same client answering the leader's commands on its connections with `handler`
    /// (an in-process slave's link).
    pub(crate) fn with_commands(mut self, handler: hetsched_common::wire::Handler) -> Self {
        self.inner = self.inner.with_commands(handler);
        self
    }

    /// The same client waiting up to `t` for a connection (the TLS handshake included).
    pub(crate) fn with_connect_timeout(mut self, t: Duration) -> Self {
        let opts = LeaderOptions {
            connect_timeout: t,
            ..self.inner.options()
        };
        self.inner = self.inner.with_options(opts);
        self
    }

    /// Connections opened so far (a change: attach again).
    pub(crate) fn connections_opened(&self) -> u64 {
        self.inner.connections_opened()
    }

    pub(crate) async fn call(
        &mut self,
        body: Message,
        deadline: Duration,
    ) -> anyhow::Result<Message> {
        match self.inner.request(body, deadline).await {
            Ok(m) => Ok(m),
            Err(LeaderError::Refused { kind, message, .. }) => {
                Ok(Message::Error(ErrorReply { kind, message }))
            }
            Err(LeaderError::Deadline { .. }) => {
                bail!("no answer from a leader within {deadline:?}")
            }
            Err(e) => Err(e.into()),
        }
    }

    pub(crate) async fn status(&mut self) -> anyhow::Result<StatusInfo> {
        match self
            .call(
                Message::Client(ClientRequest::Status { stale: false }),
                Duration::from_secs(30),
            )
            .await?
        {
            Message::ClientReply(ClientResponse::Status(s)) => Ok(s),
            other => bail!("unexpected answer to status: {other:?}"),
        }
    }
}
