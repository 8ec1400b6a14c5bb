//! Snapshot chunks: raft-rs puts a whole snapshot in one `MsgSnapshot`, which may exceed the
//! 16 MiB frame cap. The sender splits the encoded message into chunks that travel as
//! ordinary entries of `Message::Raft { msgs }`; the receiver reassembles them before `step`.
//!
//! A chunk starts with a zero byte, which no protobuf encoding of a raft `Message` can start
//! with (field number 0 is invalid), so chunks and plain messages share `msgs` unambiguously:
//!
//! ```text
//! 0x00 'S' 0x01 | snapshot id u64 BE | seq u32 BE | count u32 BE | total len u64 BE | payload
//! ```
//!
//! Everything here comes from a peer: malformed or inconsistent chunks are refused (logged by
//! the caller and dropped), never trusted.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Payload bytes per chunk.
pub const CHUNK_SIZE: usize = 1024 * 1024;
/// Largest snapshot accepted for reassembly.
pub const MAX_SNAPSHOT_BYTES: u64 = 2 * 1024 * 1024 * 1024;
const MAGIC: [u8; 3] = [0x00, b'S', 0x01];
const HEADER: usize = 3 + 8 + 4 + 4 + 8;
/// An assembly that saw no chunk for this long is abandoned (the leader retries anyway).
const STALE: Duration = Duration::from_secs(60);

/// True when `bytes` is a chunk (not a plain raft message).
pub fn is_chunk(bytes: &[u8]) -> bool {
    bytes.first() == Some(&0)
}

/// Splits an encoded `MsgSnapshot` into chunks of at most [`CHUNK_SIZE`] payload bytes.
pub fn split(id: u64, msg: &[u8]) -> Vec<Vec<u8>> {
    let count = msg.len().div_ceil(CHUNK_SIZE).max(1);
    let mut out = Vec::with_capacity(count);
    for seq in 0..count {
        let part = msg
            .get(seq * CHUNK_SIZE..((seq + 1) * CHUNK_SIZE).min(msg.len()))
            .unwrap_or(&[]);
        let mut c = Vec::with_capacity(HEADER + part.len());
        c.extend_from_slice(&MAGIC);
        c.extend_from_slice(&id.to_be_bytes());
        c.extend_from_slice(&(seq as u32).to_be_bytes());
        c.extend_from_slice(&(count as u32).to_be_bytes());
        c.extend_from_slice(&(msg.len() as u64).to_be_bytes());
        c.extend_from_slice(part);
        out.push(c);
    }
    out
}

struct Header {
    id: u64,
    seq: u32,
    count: u32,
    total: u64,
}

fn parse(bytes: &[u8]) -> Result<(Header, &[u8]), String> {
    if bytes.len() < HEADER || bytes[..3] != MAGIC {
        return Err(format!("bad chunk header ({} bytes)", bytes.len()));
    }
    let u64_at = |at: usize| -> Option<u64> {
        Some(u64::from_be_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
    };
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    let h = match (u64_at(3), u32_at(11), u32_at(15), u64_at(19)) {
        (Some(id), Some(seq), Some(count), Some(total)) => Header {
            id,
            seq,
            count,
            total,
        },
        _ => return Err("truncated chunk header".into()),
    };
    let payload = &bytes[HEADER..];
    let expected_count = (h.total as usize).div_ceil(CHUNK_SIZE).max(1) as u64;
    if h.total > MAX_SNAPSHOT_BYTES
        || u64::from(h.count) != expected_count
        || h.seq >= h.count
        || payload.len() > CHUNK_SIZE
    {
        return Err(format!(
            "inconsistent chunk (seq {} of {}, total {}, payload {})",
            h.seq,
            h.count,
            h.total,
            payload.len()
        ));
    }
    Ok((h, payload))
}

struct Assembly {
    id: u64,
    total: u64,
    parts: Vec<Option<Vec<u8>>>,
    received: usize,
    bytes: u64,
    touched: Instant,
}

/// Reassembly state, one snapshot in progress per sender.
#[derive(Default)]
pub struct Reassembler {
    by_peer: HashMap<u64, Assembly>,
}

impl Reassembler {
    /// Takes one chunk from `from`; returns the whole message once its last chunk arrived.
    /// A chunk of a newer snapshot id replaces an unfinished older one.
    pub fn push(&mut self, from: u64, bytes: &[u8]) -> Result<Option<Vec<u8>>, String> {
        let (h, payload) = parse(bytes)?;
        let now = Instant::now();
        self.by_peer
            .retain(|_, a| now.duration_since(a.touched) < STALE);
        let fresh = match self.by_peer.get(&from) {
            Some(a) => a.id != h.id || a.parts.len() != h.count as usize || a.total != h.total,
            None => true,
        };
        if fresh {
            self.by_peer.insert(
                from,
                Assembly {
                    id: h.id,
                    total: h.total,
                    parts: vec![None; h.count as usize],
                    received: 0,
                    bytes: 0,
                    touched: now,
                },
            );
        }
        let Some(a) = self.by_peer.get_mut(&from) else {
            return Ok(None);
        };
        a.touched = now;
        let slot = &mut a.parts[h.seq as usize];
        if slot.is_none() {
            a.bytes += payload.len() as u64;
            if a.bytes > a.total {
                self.by_peer.remove(&from);
                return Err("chunks exceed the announced size".into());
            }
            *slot = Some(payload.to_vec());
            a.received += 1;
        }
        if a.received < a.parts.len() {
            return Ok(None);
        }
        let Some(a) = self.by_peer.remove(&from) else {
            return Ok(None);
        };
        if a.bytes != a.total {
            return Err(format!(
                "reassembled {} bytes, announced {}",
                a.bytes, a.total
            ));
        }
        let mut out = Vec::with_capacity(a.total as usize);
        for p in a.parts.into_iter().flatten() {
            out.extend_from_slice(&p);
        }
        Ok(Some(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_and_reassemble_out_of_order_with_duplicates() {
        let msg: Vec<u8> = (0..(2 * CHUNK_SIZE + 123)).map(|i| i as u8).collect();
        let chunks = split(7, &msg);
        assert_eq!(chunks.len(), 3);
        assert!(chunks
            .iter()
            .all(|c| is_chunk(c) && c.len() <= HEADER + CHUNK_SIZE));
        let mut r = Reassembler::default();
        assert_eq!(r.push(1, &chunks[2]).unwrap(), None);
        assert_eq!(r.push(1, &chunks[0]).unwrap(), None);
        assert_eq!(r.push(1, &chunks[0]).unwrap(), None);
        assert_eq!(r.push(1, &chunks[1]).unwrap(), Some(msg));
        let small = split(8, b"tiny");
        assert_eq!(small.len(), 1);
        assert_eq!(r.push(2, &small[0]).unwrap(), Some(b"tiny".to_vec()));
    }

    #[test]
    fn malformed_chunks_are_refused() {
        let mut r = Reassembler::default();
        assert!(r.push(1, &[0]).is_err());
        assert!(r.push(1, &[0, b'S', 1, 0, 0]).is_err());
        let mut c = split(1, b"abc").remove(0);
        c[17] = 9; // count 9 for a 3-byte message
        assert!(r.push(1, &c).is_err());
        let mut c = split(1, b"abc").remove(0);
        c.extend_from_slice(b"more"); // payload longer than announced
        assert!(r.push(1, &c).is_err());
        // A newer snapshot id replaces an unfinished one.
        let old = split(1, &vec![1u8; CHUNK_SIZE + 1]);
        let new = split(2, b"new");
        assert_eq!(r.push(3, &old[0]).unwrap(), None);
        assert_eq!(r.push(3, &new[0]).unwrap(), Some(b"new".to_vec()));
        assert_eq!(r.push(3, &old[1]).unwrap(), None);
    }
}
