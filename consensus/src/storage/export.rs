//! Export: the applied log read back page by page (the chaos tool replays it to check every
//! index), starting from the stored snapshot's state once the log is compacted.

use super::{SledStorage, SnapshotData};
use crate::Error;
use raft::eraftpb::Entry;
use raft::GetEntriesContext;

impl SledStorage {
    /// One page of the log up to `upto` (the applied index) from `from`, for export: when
    /// `from` lies in the compacted part, the stored snapshot's state stands for everything up
    /// to its index and the page goes on after it. At most `max_bytes` of entries (at least
    /// one); entries `is_command` refuses (no-ops, configuration changes) are left out but
    /// still move `next`.
    pub fn export(
        &self,
        from: u64,
        upto: u64,
        max_bytes: u64,
        is_command: impl Fn(&Entry) -> bool,
    ) -> Result<crate::LogPage, Error> {
        let mut low = from.max(1);
        let mut page = crate::LogPage {
            applied: upto,
            next: low,
            ..Default::default()
        };
        if low < self.first_index {
            let meta = self.snapshot.get_metadata();
            if self.snapshot_has_state {
                let data = SnapshotData::decode(&self.snapshot.data)
                    .map_err(|e| Error::Storage(format!("stored snapshot: {e}")))?;
                if let Some(state) = data.state {
                    page.snapshot = Some((meta.index, state));
                }
            }
            // With a state, the snapshot covers everything up to its index (the log may keep
            // a tail before it); without one (the bootstrap snapshot) nothing was compacted
            // that held a command.
            low = if page.snapshot.is_some() {
                meta.index + 1
            } else {
                self.first_index
            };
        }
        let high = upto.min(self.last_index_now()) + 1;
        if low >= high {
            page.next = low;
            return Ok(page);
        }
        let entries =
            raft::Storage::entries(self, low, high, max_bytes, GetEntriesContext::empty(false))
                .map_err(|e| Error::Storage(format!("read log [{low}, {high}): {e}")))?;
        page.next = entries.last().map_or(low, |e| e.index + 1);
        page.entries = entries
            .into_iter()
            .filter(|e| is_command(e))
            .map(|e| (e.index, e.data.to_vec()))
            .collect();
        Ok(page)
    }
}
