//! Admission back-pressure: a cap on pending tasks and a per-user submit rate, so
//! a flood of submissions gets a clear "busy, retry" (exit 5) instead of unbounded memory.
//!
//! Pure: the caller passes the time and the current number of pending tasks. Leader-local
//! and not replicated — a new leader starts with full buckets, which at worst admits one
//! extra second's worth per user.

use std::collections::HashMap;

/// Limits; `None` switches a limit off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdmissionConfig {
    /// Most tasks pending at once (a submit that would exceed it is refused).
    pub max_pending: Option<u64>,
    /// Tasks per second each user may submit (a token bucket holding one second's worth).
    pub submit_rate: Option<f64>,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        Self {
            max_pending: Some(1_000_000),
            submit_rate: None,
        }
    }
}

/// Why a submission was refused; its text is what the client shows.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Busy {
    /// The pending queue is at its cap.
    #[error("busy, retry later: {pending} tasks pending and this job adds {tasks} (cap --max-pending {cap})")]
    Pending {
        /// Pending now.
        pending: u64,
        /// Tasks of the refused job.
        tasks: u64,
        /// The cap.
        cap: u64,
    },
    /// The user submits faster than the rate allows.
    #[error("busy, retry in {retry_ms} ms: user {user:?} is over the submit rate of {rate} tasks/s (--submit-rate)")]
    Rate {
        /// The user.
        user: String,
        /// The rate.
        rate: f64,
        /// When the bucket will have room again.
        retry_ms: u64,
    },
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at_ms: u64,
}

/// The admission state of one leader.
#[derive(Debug, Default)]
pub struct Admission {
    cfg: AdmissionConfig,
    buckets: HashMap<String, Bucket>,
}

impl Admission {
    /// Admission with these limits.
    pub fn new(cfg: AdmissionConfig) -> Self {
        Self {
            cfg,
            buckets: HashMap::new(),
        }
    }

    /// Admits (and charges) a job of `tasks` tasks by `user` at `now_ms`, with `pending`
    /// tasks already queued. A job larger than a full bucket is admitted when the bucket is
    /// full (and leaves it in debt), so big jobs are slowed, never refused forever.
    pub fn admit(&mut self, user: &str, tasks: u64, pending: u64, now_ms: u64) -> Result<(), Busy> {
        if let Some(cap) = self.cfg.max_pending {
            if pending.saturating_add(tasks) > cap && pending > 0 {
                return Err(Busy::Pending {
                    pending,
                    tasks,
                    cap,
                });
            }
        }
        let Some(rate) = self.cfg.submit_rate.filter(|r| *r > 0.0) else {
            return Ok(());
        };
        let b = self.buckets.entry(user.to_string()).or_insert(Bucket {
            tokens: rate,
            at_ms: now_ms,
        });
        let elapsed = now_ms.saturating_sub(b.at_ms) as f64 / 1000.0;
        b.tokens = (b.tokens + elapsed * rate).min(rate);
        b.at_ms = now_ms;
        let need = tasks as f64;
        if b.tokens >= need || b.tokens >= rate {
            b.tokens -= need;
            Ok(())
        } else {
            let missing = need.min(rate) - b.tokens;
            Err(Busy::Rate {
                user: user.to_string(),
                rate,
                retry_ms: (missing / rate * 1000.0).ceil() as u64,
            })
        }
    }

    /// Forgets users idle long enough to have a full bucket (bounds memory by active users).
    pub fn forget_idle(&mut self, now_ms: u64) {
        if let Some(rate) = self.cfg.submit_rate.filter(|r| *r > 0.0) {
            self.buckets.retain(|_, b| {
                b.tokens + now_ms.saturating_sub(b.at_ms) as f64 / 1000.0 * rate < rate
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pending_cap_refuses_what_would_exceed_it() {
        let mut a = Admission::new(AdmissionConfig {
            max_pending: Some(100),
            submit_rate: None,
        });
        assert_eq!(a.admit("u", 60, 40, 0), Ok(()));
        let e = a.admit("u", 61, 40, 0).unwrap_err();
        assert!(matches!(
            e,
            Busy::Pending {
                pending: 40,
                tasks: 61,
                cap: 100
            }
        ));
        assert!(e.to_string().starts_with("busy, retry"));
        // An empty queue takes any single job (a job larger than the cap is not stuck).
        assert_eq!(a.admit("u", 500, 0, 0), Ok(()));
    }

    #[test]
    fn the_submit_rate_is_per_user_and_refills_over_time() {
        let mut a = Admission::new(AdmissionConfig {
            max_pending: None,
            submit_rate: Some(100.0),
        });
        assert_eq!(a.admit("alice", 100, 0, 1_000), Ok(()));
        // Alice's bucket is empty; Bob's is full.
        match a.admit("alice", 10, 0, 1_000) {
            Err(Busy::Rate { retry_ms, .. }) => assert_eq!(retry_ms, 100),
            r => panic!("{r:?}"),
        }
        assert_eq!(a.admit("bob", 50, 0, 1_000), Ok(()));
        // 100 ms later alice has 10 tasks' worth again.
        assert_eq!(a.admit("alice", 10, 0, 1_100), Ok(()));
        // A job larger than the bucket passes once the bucket is full, leaving a debt.
        assert_eq!(a.admit("carol", 1_000, 0, 0), Ok(()));
        assert!(a.admit("carol", 1, 0, 5_000).is_err());
        assert_eq!(a.admit("carol", 1, 0, 10_100), Ok(()));
    }

    #[test]
    fn idle_users_are_forgotten() {
        let mut a = Admission::new(AdmissionConfig {
            max_pending: None,
            submit_rate: Some(10.0),
        });
        a.admit("u", 10, 0, 0).unwrap();
        a.forget_idle(500);
        assert_eq!(a.buckets.len(), 1);
        a.forget_idle(2_000);
        assert!(a.buckets.is_empty());
    }
}
