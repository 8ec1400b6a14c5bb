use thiserror::Error;

/// Errors of the common crate: framing, encoding and input validation.
#[derive(Debug, Error)]
pub enum Error {
    /// A frame's length prefix exceeds the configured cap.
    #[error("frame of {len} bytes exceeds the cap of {cap} bytes")]
    FrameTooLarge {
        /// Announced length.
        len: usize,
        /// Configured cap.
        cap: usize,
    },
    /// The peer closed the connection in the middle of a frame.
    #[error("connection closed in the middle of a frame")]
    Truncated,
    /// A frame did not arrive completely within the partial-frame timeout.
    #[error("partial frame not completed within {0:?}")]
    PartialFrameTimeout(std::time::Duration),
    /// The frame's payload is not a valid envelope.
    #[error("malformed frame: {0}")]
    Malformed(String),
    /// The envelope carries a protocol version this build does not speak.
    #[error("unsupported protocol version {got} (this build speaks {supported})")]
    WrongVersion {
        /// Version in the frame.
        got: u16,
        /// Version this build speaks.
        supported: u16,
    },
    /// Encoding a message failed (a bug: every message type is serialisable).
    #[error("encoding failed: {0}")]
    Encode(String),
    /// Socket I/O failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// A user-supplied value is invalid.
    #[error("invalid {what}: {why}")]
    Invalid {
        /// What was being parsed.
        what: &'static str,
        /// Why it was rejected.
        why: String,
    },
}

/// Result alias of the common crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
