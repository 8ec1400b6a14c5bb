//! The pure frame codec: the envelope every frame carries, the limits applied to frames,
//! and encoding and decoding of one frame. No I/O here, so it builds without the `net`
//! feature (the master's pure core and tools that only read recorded frames use it).

use crate::protocol::Message;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Protocol version spoken by this build.
pub const PROTOCOL_VERSION: u16 = 1;
/// Default cap on one frame's payload.
pub const DEFAULT_MAX_FRAME: usize = 16 * 1024 * 1024;
/// Default time a started frame may take to arrive completely.
pub const DEFAULT_PARTIAL_FRAME_TIMEOUT: Duration = Duration::from_secs(10);

/// One frame's payload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Protocol version of the sender.
    pub version: u16,
    /// Chosen by the requester, echoed by every reply part.
    pub request_id: u64,
    /// More reply parts follow under this request id.
    #[serde(default)]
    pub more: bool,
    /// A client request's API token (docs/SECURITY.md); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The message.
    pub body: Message,
}

/// Only the header fields, decoded first so a frame of a foreign version (whose body this
/// build may not understand) is still answered under its request id.
#[derive(Deserialize)]
struct Header {
    version: u16,
    #[serde(default)]
    request_id: u64,
}

impl Envelope {
    /// An envelope of this build's version.
    pub fn new(request_id: u64, body: Message) -> Self {
        Self {
            version: PROTOCOL_VERSION,
            request_id,
            more: false,
            token: None,
            body,
        }
    }
}

/// Limits applied to every connection.
#[derive(Clone, Copy, Debug)]
pub struct FrameLimits {
    /// Largest payload accepted or sent.
    pub max_frame: usize,
    /// Time a started frame may take to complete.
    pub partial_timeout: Duration,
}

impl Default for FrameLimits {
    fn default() -> Self {
        Self {
            max_frame: DEFAULT_MAX_FRAME,
            partial_timeout: DEFAULT_PARTIAL_FRAME_TIMEOUT,
        }
    }
}

/// Encodes an envelope as one frame (length prefix included).
pub fn encode_frame(env: &Envelope, max_frame: usize) -> Result<Vec<u8>> {
    let payload = rmp_serde::to_vec_named(env).map_err(|e| Error::Encode(e.to_string()))?;
    if payload.len() > max_frame || payload.len() > u32::MAX as usize {
        return Err(Error::FrameTooLarge {
            len: payload.len(),
            cap: max_frame,
        });
    }
    let mut out = Vec::with_capacity(4 + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

/// Decodes a frame's payload (without the length prefix). On a version mismatch the error is
/// returned together with the request id, so the caller can answer it.
pub fn decode_payload(payload: &[u8]) -> std::result::Result<Envelope, (Option<u64>, Error)> {
    let header: Header = rmp_serde::from_slice(payload)
        .map_err(|e| (None, Error::Malformed(format!("bad envelope header: {e}"))))?;
    if header.version != PROTOCOL_VERSION {
        return Err((
            Some(header.request_id),
            Error::WrongVersion {
                got: header.version,
                supported: PROTOCOL_VERSION,
            },
        ));
    }
    rmp_serde::from_slice(payload).map_err(|e| {
        (
            Some(header.request_id),
            Error::Malformed(format!("bad envelope: {e}")),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ClientRequest;

    #[test]
    fn frame_round_trip() {
        let env = Envelope::new(42, Message::Client(ClientRequest::Status { stale: true }));
        let f = encode_frame(&env, DEFAULT_MAX_FRAME).expect("encode");
        let len = u32::from_be_bytes([f[0], f[1], f[2], f[3]]) as usize;
        assert_eq!(len, f.len() - 4);
        assert_eq!(decode_payload(&f[4..]).expect("decode"), env);
    }

    #[test]
    fn wrong_version_keeps_request_id() {
        let mut env = Envelope::new(
            9,
            Message::Client(ClientRequest::Jobs {
                stale: false,
                filter: Default::default(),
            }),
        );
        env.version = 99;
        let payload = rmp_serde::to_vec_named(&env).expect("encode");
        match decode_payload(&payload) {
            Err((Some(9), Error::WrongVersion { got: 99, .. })) => {}
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn oversized_encode_is_refused() {
        let env = Envelope::new(
            1,
            Message::Raft {
                from: crate::MasterId(1),
                msgs: vec![serde_bytes::ByteBuf::from(vec![0u8; 2048])],
            },
        );
        assert!(matches!(
            encode_frame(&env, 1024),
            Err(Error::FrameTooLarge { .. })
        ));
    }
}
