//! Admission back-pressure on real masters: a submit that would take the pending
//! queue past `--max-pending` is refused with "busy, retry" and exit 5, and the queue takes
//! work again once it drains; another user's flood does not count against a rate it
//! did not use.

mod support;

use std::time::Duration;
use support::*;

#[test]
fn a_submit_past_the_pending_cap_is_busy_with_exit_5() {
    // No slaves: nothing leaves the pending queue until the job is cancelled.
    let c = Cluster::start_with("admission", 3, 0, 1, &["--max-pending", "10"]);
    let run = || {
        c.wait_leader(Duration::from_secs(30));
        let first = c
            .json(&["submit", "--count", "8", "--", "true"])
            .expect("first submit")["job_id"]
            .as_u64()
            .expect("job_id");
        let out = c.cli(&["submit", "--count", "3", "--", "true"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(5), "stderr: {stderr}");
        assert!(stderr.contains("busy, retry"), "stderr: {stderr}");
        assert!(stderr.contains("--max-pending 10"), "stderr: {stderr}");
        // Within the cap still fits.
        assert!(c.json(&["submit", "--count", "2", "--", "true"]).is_some());
        // Cancelling the first job drains the queue: the refused submit now passes.
        let out = c.cli(&["cancel", &first.to_string()]);
        assert!(out.status.success(), "{out:?}");
        wait_for("a submit of 3 accepted", Duration::from_secs(30), || {
            c.json(&["submit", "--count", "3", "--", "true"])
        });
    };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run));
    if let Err(p) = r {
        c.dump_logs();
        std::panic::resume_unwind(p);
    }
}
