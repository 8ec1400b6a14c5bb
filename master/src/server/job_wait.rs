//! Issue 55: a job's long poll (`ClientRequest::WaitJob`, `GET /v1/jobs/{id}/wait`). The
//! wait holds one waker in this master's event journal and reads its own applied state
//! only when the job changed: nothing is polled, and a job that does not change costs
//! nothing until the timeout.

use super::events::final_job_state;
use super::Master;
use hetsched_common::protocol::{ClientResponse, ErrorKind, ErrorReply, ListFilter};
use hetsched_common::JobId;
use std::time::Duration;

/// Longest wait one request may ask for.
pub const MAX_WAIT: Duration = Duration::from_secs(600);

impl Master {
    /// Answers with `job` as `jobs` lists it once it ended (with `change`: once it changed),
    /// or when `timeout_ms` passed.
    pub(super) async fn wait_job(
        &self,
        job: JobId,
        timeout_ms: u64,
        change: bool,
    ) -> Result<ClientResponse, ErrorReply> {
        let deadline =
            tokio::time::Instant::now() + MAX_WAIT.min(Duration::from_millis(timeout_ms));
        let mut first = true;
        loop {
            // Registered before the read, so that a change in between wakes it.
            let woken = match self.events.lock() {
                Ok(mut j) => j.wait_job(job),
                Err(p) => p.into_inner().wait_job(job),
            };
            let filter = ListFilter {
                job: Some(job),
                ..ListFilter::default()
            };
            let now = self.query(!first, |q| q.jobs(filter)).await?;
            let ClientResponse::Jobs(listed) = &now else {
                return Err(ErrorReply::new(
                    ErrorKind::Internal,
                    "a job listing expected",
                ));
            };
            let ended = listed.first().is_some_and(|j| final_job_state(&j.state));
            if ended || (change && !first) {
                return Ok(now);
            }
            first = false;
            tokio::select! {
                _ = woken => {}
                _ = tokio::time::sleep_until(deadline) => return Ok(now),
            }
        }
    }
}
