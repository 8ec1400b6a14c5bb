//! One frame over a stream (the `net` feature): read with the partial-frame timeout, written
//! whole; and the error kind a rejected frame is answered with.

use super::codec::{encode_frame, Envelope, FrameLimits};
use crate::protocol::ErrorKind;
use crate::{Error, Result};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Reads one frame's payload. `Ok(None)` on a clean end of stream between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    limits: FrameLimits,
) -> Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    // The first byte may wait forever (an idle connection is fine); the rest of the frame
    // must follow within the partial-frame timeout.
    if r.read(&mut len[..1]).await? == 0 {
        return Ok(None);
    }
    let rest = async {
        r.read_exact(&mut len[1..]).await?;
        let n = u32::from_be_bytes(len) as usize;
        if n > limits.max_frame {
            return Err(Error::FrameTooLarge {
                len: n,
                cap: limits.max_frame,
            });
        }
        let mut buf = vec![0u8; n];
        r.read_exact(&mut buf).await?;
        Ok(buf)
    };
    match tokio::time::timeout(limits.partial_timeout, rest).await {
        Ok(Ok(buf)) => Ok(Some(buf)),
        Ok(Err(Error::Io(e))) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Err(Error::Truncated)
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Error::PartialFrameTimeout(limits.partial_timeout)),
    }
}

/// Writes one envelope as a frame.
pub async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    env: &Envelope,
    limits: FrameLimits,
) -> Result<()> {
    let frame = encode_frame(env, limits.max_frame)?;
    w.write_all(&frame).await?;
    Ok(())
}

pub(super) fn error_kind_of(e: &Error) -> ErrorKind {
    match e {
        Error::FrameTooLarge { .. } => ErrorKind::TooLarge,
        Error::WrongVersion { .. } => ErrorKind::WrongVersion,
        _ => ErrorKind::Malformed,
    }
}
