//! Talking to the cluster: one request through the common leader-following client, with
//! the client timeout (`HETSCHED_CLIENT_TIMEOUT_MS`) and every failure mapped to its exit
//! code; and the small helpers every command shares (runtime, request ids, short answers).

use crate::cmd::exit;
use anyhow::{anyhow, Context};
use hetsched_common::leader::{LeaderClient, LeaderError, LeaderOptions};
use hetsched_common::protocol::{ClientRequest, ClientResponse, ErrorKind, Message};
use hetsched_common::ClientRequestId;
use std::time::Duration;

/// How long a client command keeps retrying (elections, restarts) before giving up.
pub fn deadline() -> Duration {
    std::env::var("HETSCHED_CLIENT_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_secs(15))
}

/// The error a master's answer maps to, with its exit code.
fn answer_error(kind: &ErrorKind, message: &str) -> anyhow::Error {
    match kind {
        ErrorKind::NotFound => exit::not_found(message),
        ErrorKind::Invalid | ErrorKind::Malformed | ErrorKind::TooLarge => exit::bad_input(message),
        ErrorKind::Unavailable
        | ErrorKind::Unknown
        | ErrorKind::NotLeader { .. }
        | ErrorKind::WrongVersion
        | ErrorKind::Busy => exit::unavailable(message),
        // Permission denied (docs/CONTRACT.md exit 3): an admin request on the cluster port.
        ErrorKind::Forbidden | ErrorKind::PermissionDenied | ErrorKind::Unauthenticated => {
            exit::forbidden(message)
        }
        ErrorKind::Unsupported | ErrorKind::UnknownNode | ErrorKind::Internal => {
            anyhow!("{message}")
        }
    }
}

/// Sends `req` to the cluster, following the leader. With `local`, asks only the first master.
/// Gives up within the client timeout with an "unavailable" error (exit 5).
pub async fn call(
    masters: &[String],
    req: ClientRequest,
    local: bool,
) -> anyhow::Result<ClientResponse> {
    if masters.is_empty() {
        return Err(exit::bad_input(
            "no masters given: use --masters HOST:PORT,... or HETSCHED_MASTERS",
        ));
    }
    for m in masters {
        hetsched_common::parse_host_port(m).map_err(|e| exit::bad_input(e.to_string()))?;
    }
    let limit = deadline();
    // No single connect or call outlasts the client timeout.
    let options = LeaderOptions {
        connect_timeout: Duration::from_secs(1),
        call_timeout: Duration::from_secs(10),
        backoff_min: Duration::from_millis(50),
        backoff_max: Duration::from_millis(500),
        ..LeaderOptions::default()
    };
    let msg = Message::Client(req);
    let (client, answer) = if local {
        let left = limit.max(Duration::from_millis(50));
        let mut client = LeaderClient::new(vec![masters[0].clone()]).with_options(LeaderOptions {
            connect_timeout: left.min(options.connect_timeout),
            call_timeout: left.min(options.call_timeout),
            max_redirects: 0,
            ..options
        });
        let answer = client.attempt(msg).await;
        (client, answer)
    } else {
        let hint = super::leader_hint::read(masters);
        let mut client = LeaderClient::new(masters.to_vec())
            .with_options(options)
            .with_leader_hint(hint.clone());
        let answer = client.request(msg, limit).await;
        // Only the leader answers a request that is not `--local`.
        if answer.is_ok() {
            super::leader_hint::write(masters, client.target(), hint.as_deref());
        }
        (client, answer)
    };
    match answer {
        Ok(Message::ClientReply(r)) => Ok(r),
        Ok(other) => Err(anyhow!(LeaderError::unexpected(client.target(), &other))),
        Err(LeaderError::Refused { kind, message, .. }) => Err(answer_error(&kind, &message)),
        Err(LeaderError::Deadline { deadline, last }) => Err(exit::unavailable(format!(
            "no leader answered within {deadline:?} (HETSCHED_CLIENT_TIMEOUT_MS): {last}"
        ))),
        Err(e) => Err(exit::unavailable(e.to_string())),
    }
}

/// A short description of an unexpected answer.
pub fn short<T: std::fmt::Debug>(v: &T) -> String {
    let s = format!("{v:?}");
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

/// Runs a future on a fresh single-threaded runtime.
pub fn block_on<F: std::future::Future>(f: F) -> anyhow::Result<F::Output> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    Ok(rt.block_on(f))
}

/// A random client request id: the command's own retries (elections, restarts) send it
/// again, so that they apply once (kept `master --request-retention`).
pub fn request_id() -> ClientRequestId {
    let seed = hetsched_common::rng::seed_from_env("HETSCHED_NO_SUCH_VAR")
        ^ (std::process::id() as u64) << 32;
    ClientRequestId::automatic(hetsched_common::rng::SplitMix64::new(seed).next_u64())
}

/// Issue 55: the request id of `--idempotency-key KEY` (the same key from the same user
/// answers the first job for 24 h, whoever sends it), else a random one.
pub fn keyed_request_id(key: Option<&str>) -> anyhow::Result<ClientRequestId> {
    match key {
        Some(k) => ClientRequestId::from_key(k)
            .map_err(|why| exit::bad_input(format!("--idempotency-key {k:?}: {why}"))),
        None => Ok(request_id()),
    }
}
