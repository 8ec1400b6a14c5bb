//! Connections from the leader to slaves, reused across calls and re-made when broken.

use hetsched_common::protocol::Message;
use hetsched_common::wire::{CallError, Connection};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;

/// A pool of one connection per slave address.
#[derive(Clone, Default)]
pub struct SlavePool {
    conns: Arc<Mutex<HashMap<String, Connection>>>,
}

impl SlavePool {
    /// Calls `addr` with `msg`, connecting first if needed.
    pub async fn call(
        &self,
        addr: &str,
        msg: Message,
        timeout: Duration,
    ) -> Result<Message, CallError> {
        let conn = {
            let mut conns = self.conns.lock().await;
            match conns.get(addr) {
                Some(c) if !c.is_closed() => c.clone(),
                _ => {
                    let c = Connection::connect(addr, Duration::from_secs(1)).await?;
                    conns.insert(addr.to_string(), c.clone());
                    c
                }
            }
        };
        let r = conn.call(msg, timeout).await;
        if r.is_err() {
            self.conns.lock().await.remove(addr);
        }
        r
    }
}
