//! Job specs and the task state machine.
//!
//! ```text
//! pending ──assign──▶ assigned(node, attempt) ──started──▶ running ──▶ succeeded
//!    ▲                    │                                   │   └──▶ failed(code)
//!    └──── lost (attempt + 1) ◀───────────────────────────────┘
//! any non-final state ──cancel──▶ cancelled
//! ```

use crate::dependency::AfterMode;
use crate::{JobId, ResourceRequest};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// What a user submits: K identical tasks running one command, or one API program (S0).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    /// Human name (defaults to the command's program name).
    #[serde(default)]
    pub name: String,
    /// Submitting user.
    #[serde(default)]
    pub user: String,
    /// Cluster partition (S1 quotas are per partition).
    #[serde(default)]
    pub partition: String,
    /// What each task needs.
    #[serde(default)]
    pub resources: ResourceRequest,
    /// Number of tasks (≥ 1).
    pub count: u32,
    /// argv of each task's process.
    pub command: Vec<String>,
    /// Extra environment for each task.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Ask that this job's tasks never be preemption victims (S1; allowed only at or above
    /// the configuration's `protect_min_priority`).
    #[serde(default)]
    pub no_preempt: bool,
    /// Locality: the nodes (names, ids or `node-N`) the tasks may run on; empty means any.
    #[serde(default)]
    pub nodes: Vec<String>,
    /// How many more times a failed task is re-run (0: never).
    #[serde(default)]
    pub retries: u32,
    /// Delay before the first re-run, ms; it doubles with each failure, capped at
    /// [`MAX_BACKOFF_MS`].
    #[serde(default)]
    pub backoff_ms: u64,
    /// Longest one attempt may run, ms; past it the attempt is stopped with reason
    /// `timeout`. `None`: no limit.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// An API program each task runs instead of a command (S0; `submit --program FILE`).
    /// The command is then empty: [`JobSpec::carry_program`] fills the marker argv.
    #[serde(default)]
    pub program: Option<crate::program::Program>,
    /// S3.2: a GPU task's class and CPU-side hints (`submit --class ...`); the leader then
    /// searches the task's best CPU count while it runs. `None`: no search.
    #[serde(default)]
    pub cpu_search: Option<CpuSearchSpec>,
    /// The directory each task starts in (Slurm scripts' submit directory, a container's
    /// working directory). `None`: the slave's default, as before. Left out of the encoding
    /// when unset, so entries written before the key existed encode the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// Issue 52: the container image each task runs in (`submit --image REF`,
    /// [`crate::image::ImageRef`]); the command then runs inside it, or the image's own
    /// entrypoint and cmd when the command is empty. `None`: a bare task, as before. Left
    /// out of the encoding when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Issue 52: the user a container task runs as inside its image (`submit --run-as
    /// USER|UID`; `--user` names the submitting user); `None`: the image's own user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as: Option<String>,
    /// Issue 52: a container task's network (`submit --network host|none`): `none` gives it
    /// a network namespace of its own with only a loopback device; `None` or `host`: the
    /// host's network, as a bare task has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    // Issue 51, workflows (`dependency.rs`): every key left out of the encoding when unset,
    // so entries and snapshots written before they existed encode (and hash) the same.
    /// Start once each of these jobs succeeded (Slurm `afterok`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<JobId>,
    /// Start once each of these jobs ended, in any state (Slurm `afterany`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after_any: Vec<JobId>,
    /// Start once each of these jobs failed or was cancelled (Slurm `afternotok`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after_fail: Vec<JobId>,
    /// Task *i* starts once task *i* of this job succeeded (Slurm `aftercorr`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_each: Option<JobId>,
    /// Whether every dependency must be met (`all`) or one is enough (`any`).
    #[serde(default, skip_serializing_if = "AfterMode::is_all")]
    pub after_mode: AfterMode,
    /// At most one singleton job per (user, name) under way at a time.
    #[serde(default, skip_serializing_if = "crate::dependency::is_false")]
    pub singleton: bool,
    /// At most this many of the job's tasks assigned or running at once (the throttle).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_running: Option<u32>,
}

/// `--network`: `host` or `none`, for a container task.
fn check_network(n: &str, has_image: bool) -> Result<(), String> {
    if !has_image {
        return Err("--network applies to container tasks only; add --image".into());
    }
    match n {
        "host" | "none" => Ok(()),
        _ => Err(format!("--network {n:?}: expected host or none")),
    }
}

/// `--run-as`: a user name or a numeric uid, optionally `:GROUP|GID`, for a container task.
fn check_run_as(u: &str, has_image: bool) -> Result<(), String> {
    if !has_image {
        return Err("--run-as applies to container tasks only; add --image".into());
    }
    let ok = |p: &str| {
        !p.is_empty()
            && p.len() <= 64
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    };
    let (user, group) = match u.split_once(':') {
        Some((a, b)) => (a, Some(b)),
        None => (u, None),
    };
    if ok(user) && group.is_none_or(ok) {
        Ok(())
    } else {
        Err(format!(
            "--run-as {u:?}: give USER or UID, optionally :GROUP or :GID"
        ))
    }
}

/// A GPU task's class (S3.2): the CPU-count history is kept per class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskClass {
    /// Image models.
    Image,
    /// Speech models.
    Speech,
    /// Language models.
    Nlp,
    /// Anything else.
    Other,
}

impl TaskClass {
    /// Every class, in display order.
    pub const ALL: [TaskClass; 4] = [
        TaskClass::Image,
        TaskClass::Speech,
        TaskClass::Nlp,
        TaskClass::Other,
    ];

    /// The name users write (`image`, `speech`, `nlp`, `other`).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskClass::Image => "image",
            TaskClass::Speech => "speech",
            TaskClass::Nlp => "nlp",
            TaskClass::Other => "other",
        }
    }
}

impl fmt::Display for TaskClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for TaskClass {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        TaskClass::ALL
            .into_iter()
            .find(|c| c.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                format!("unknown task class {s:?}: expected image, speech, nlp or other")
            })
    }
}

/// What `submit --class C [--pipelined] [--heavy-weights] [--cpu-heavy]` declares (S3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuSearchSpec {
    /// The class whose recorded best count is the start point.
    pub class: TaskClass,
    /// The task pipelines its input (start one CPU lower).
    #[serde(default)]
    pub pipelined: bool,
    /// The model has heavy weights (start one CPU lower).
    #[serde(default)]
    pub heavy_weights: bool,
    /// The CPU side of the task is heavy (start one CPU higher).
    #[serde(default)]
    pub cpu_heavy: bool,
}

impl CpuSearchSpec {
    /// The search's start point in whole CPUs: `base` (the class's recorded best, else the
    /// task's own count), −1 pipelined, −1 heavy weights, +1 CPU-heavy, then kept within
    /// `[1, max]`.
    pub fn start(&self, base: u32, max: u32) -> u32 {
        let mut c = i64::from(base);
        if self.pipelined {
            c -= 1;
        }
        if self.heavy_weights {
            c -= 1;
        }
        if self.cpu_heavy {
            c += 1;
        }
        c.clamp(1, i64::from(max.max(1))) as u32
    }
}

/// Largest delay between re-runs of a failed task (5 minutes).
pub const MAX_BACKOFF_MS: u64 = 5 * 60 * 1000;

/// Most re-runs one task may ask for.
pub const MAX_RETRIES: u32 = 1000;

/// Largest number of tasks one job may have.
pub const MAX_TASKS_PER_JOB: u32 = 100_000;

/// Longest single argument or environment entry: Linux's `MAX_ARG_STRLEN`, beyond which
/// `execve` fails anyway.
pub const MAX_ARG_BYTES: usize = 128 * 1024;
/// Most bytes of a task's argv plus its environment entries together (the kernel's own limit
/// is larger, but a spec is copied into every task of the replicated state).
pub const MAX_ARGV_ENV_BYTES: usize = 1024 * 1024;

impl JobSpec {
    /// Checks the spec; a bad spec is rejected before it reaches the log.
    pub fn validate(&self) -> crate::Result<()> {
        let bad = |why: String| crate::Error::Invalid {
            what: "job spec",
            why,
        };
        if let Some(p) = &self.program {
            p.validate()?;
            let carried = self.command.is_empty()
                || self.command == [crate::program::PROGRAM_COMMAND.to_string()];
            if !carried {
                return Err(bad(
                    "a job runs either a command or a program, not both".into()
                ));
            }
            if self.image.is_some() {
                return Err(bad("a program job runs no container image".into()));
            }
        } else if let Some(image) = &self.image {
            crate::image::ImageRef::parse(image).map_err(|e| bad(e.to_string()))?;
            // An empty command runs the image's own entrypoint and cmd.
            if self.command.first().is_some_and(String::is_empty) {
                return Err(bad("the command's program is empty".into()));
            }
        } else if self.command.is_empty() || self.command[0].is_empty() {
            return Err(bad("the command is empty".into()));
        }
        if let Some(w) = self.workdir.as_deref().filter(|w| !w.starts_with('/')) {
            return Err(bad(format!("workdir {w:?} must be an absolute path")));
        }
        if let Some(u) = &self.run_as {
            check_run_as(u, self.image.is_some()).map_err(bad)?;
        }
        if let Some(n) = &self.network {
            check_network(n, self.image.is_some()).map_err(bad)?;
        }
        if self.count == 0 || self.count > MAX_TASKS_PER_JOB {
            return Err(bad(format!(
                "count {} is outside 1..={MAX_TASKS_PER_JOB}",
                self.count
            )));
        }
        if self.resources.cpu_milli == 0 {
            return Err(bad("a task must ask for some cpu (cpu_milli > 0)".into()));
        }
        if self.retries > MAX_RETRIES {
            return Err(bad(format!(
                "retries {} is above the limit of {MAX_RETRIES}",
                self.retries
            )));
        }
        if self.timeout_ms == Some(0) {
            return Err(bad("timeout must be longer than 0".into()));
        }
        if let Some(n) = self.nodes.iter().find(|n| n.trim().is_empty()) {
            return Err(bad(format!("node name {n:?} is empty")));
        }
        if self.cpu_search.is_some() && self.resources.gpu.is_none() {
            return Err(bad(
                "--class (the CPU-count search, S3.2) applies to GPU tasks only; add --gpus".into(),
            ));
        }
        if self.cpu_search.is_some() && !self.resources.cpu_milli.is_multiple_of(1000) {
            return Err(bad(
                "--class searches whole CPUs: --cpus must be a whole number".into(),
            ));
        }
        self.validate_workflow().map_err(bad)?;
        self.resources.validate()
    }

    /// Checks the spec's resources against the per-task limits
    /// ([`ResourceRequest::check_limits`]): at the edge, never in `apply`, so that a job an
    /// older build accepted still applies the same.
    pub fn check_limits(&self) -> crate::Result<()> {
        let bad = |why: String| crate::Error::Invalid {
            what: "job spec",
            why,
        };
        let env = self.env.iter().map(|(k, v)| k.len() + v.len() + 1);
        if let Some(n) = self
            .command
            .iter()
            .map(String::len)
            .chain(env.clone())
            .find(|n| *n > MAX_ARG_BYTES)
        {
            return Err(bad(format!(
                "an argument or environment entry of {n} bytes is above the limit of {MAX_ARG_BYTES}"
            )));
        }
        let total: usize =
            self.command.iter().map(|a| a.len() + 1).sum::<usize>() + env.sum::<usize>();
        if total > MAX_ARGV_ENV_BYTES {
            return Err(bad(format!(
                "argv and environment of {total} bytes are above the limit of {MAX_ARGV_ENV_BYTES}"
            )));
        }
        self.resources.check_limits()
    }

    /// How long a task waits before its re-run after its `failures`-th failure (≥ 1):
    /// `backoff_ms`, doubling per failure, capped at [`MAX_BACKOFF_MS`].
    pub fn retry_delay_ms(&self, failures: u32) -> u64 {
        let doublings = failures.saturating_sub(1).min(32);
        self.backoff_ms
            .saturating_mul(1u64 << doublings)
            .min(MAX_BACKOFF_MS)
    }
}

impl JobSpec {
    /// For a program job: sets the marker argv and puts the program (as JSON) in the env
    /// under [`PROGRAM_ENV`](crate::program::PROGRAM_ENV), which is how an assignment carries
    /// it to the slave. Deterministic (the replicated state calls it at submit); no-op for a
    /// command job.
    pub fn carry_program(&mut self) {
        let Some(p) = &self.program else {
            return;
        };
        let json = serde_json::to_string(p).unwrap_or_default();
        self.command = vec![crate::program::PROGRAM_COMMAND.to_string()];
        self.env
            .insert(crate::program::PROGRAM_ENV.to_string(), json);
    }
}

/// Parses `HOST:PORT` (a host name, IPv4, or `[IPv6]`), with a clear error.
pub fn parse_host_port(s: &str) -> crate::Result<String> {
    let bad = |why: &str| crate::Error::Invalid {
        what: "address",
        why: format!("{s:?}: {why} (expected HOST:PORT)"),
    };
    let (host, port) = s.rsplit_once(':').ok_or_else(|| bad("no port"))?;
    if host.is_empty() {
        return Err(bad("empty host"));
    }
    port.parse::<u16>()
        .map_err(|_| bad("port is not a number in 0..=65535"))?;
    Ok(s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TaskStatus;

    #[test]
    fn unset_slots_stay_out_of_the_encoding() {
        // Snapshots and log entries written before `workdir` and `reason_detail` existed
        // encode (and hash) the same as today's with them unset.
        let spec = serde_json::to_value(JobSpec::default()).expect("json");
        assert!(spec.get("workdir").is_none());
        let status = serde_json::to_value(TaskStatus::new()).expect("json");
        assert!(status.get("reason_detail").is_none());
        let with = JobSpec {
            workdir: Some("/data/run".into()),
            ..JobSpec::default()
        };
        let bytes = rmp_serde::to_vec_named(&with).expect("encode");
        let back: JobSpec = rmp_serde::from_slice(&bytes).expect("decode");
        assert_eq!(back.workdir.as_deref(), Some("/data/run"));
    }

    #[test]
    fn spec_validation() {
        let mut s = JobSpec {
            name: "x".into(),
            user: "u".into(),
            partition: "default".into(),
            resources: ResourceRequest {
                cpu_milli: 100,
                ..Default::default()
            },
            count: 1,
            command: vec!["true".into()],
            ..Default::default()
        };
        assert!(s.validate().is_ok());
        s.count = 0;
        assert!(s.validate().is_err());
        s.count = 1;
        s.command.clear();
        assert!(s.validate().is_err());
    }

    #[test]
    fn limits_are_checked_apart_from_what_apply_validates() {
        let s = JobSpec {
            resources: ResourceRequest {
                cpu_milli: u64::MAX,
                mem_mib: u64::MAX,
                ..Default::default()
            },
            count: 1,
            command: vec!["true".into()],
            ..Default::default()
        };
        // An older build accepted this into the log: `apply` must still accept it.
        assert!(s.validate().is_ok());
        let e = s.check_limits().expect_err("over the limits").to_string();
        assert!(e.contains("100000 cores per task"), "{e}");
    }

    #[test]
    fn retry_delay_doubles_and_is_capped() {
        let s = JobSpec {
            backoff_ms: 5_000,
            ..Default::default()
        };
        assert_eq!(s.retry_delay_ms(1), 5_000);
        assert_eq!(s.retry_delay_ms(2), 10_000);
        assert_eq!(s.retry_delay_ms(3), 20_000);
        assert_eq!(s.retry_delay_ms(10), MAX_BACKOFF_MS);
        assert_eq!(s.retry_delay_ms(u32::MAX), MAX_BACKOFF_MS);
    }

    #[test]
    fn host_port() {
        assert!(parse_host_port("127.0.0.1:7000").is_ok());
        assert!(parse_host_port("[::1]:7000").is_ok());
        assert!(parse_host_port("localhost").is_err());
        assert!(parse_host_port(":80").is_err());
        assert!(parse_host_port("h:99999").is_err());
    }

    #[test]
    fn container_jobs_check_their_image_user_and_workdir() {
        let job = |image: Option<&str>, command: &[&str]| JobSpec {
            count: 1,
            command: command.iter().map(|c| c.to_string()).collect(),
            resources: crate::ResourceRequest {
                cpu_milli: 1000,
                ..Default::default()
            },
            image: image.map(str::to_string),
            ..Default::default()
        };
        // The image's own entrypoint runs when the command is empty.
        assert!(job(Some("oci:/srv/bb"), &[]).validate().is_ok());
        assert!(job(Some("oci:/srv/bb"), &["sh", "-c", "id"])
            .validate()
            .is_ok());
        let e = job(Some("bb"), &["true"])
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown kind"), "{e}");
        let e = job(None, &[]).validate().unwrap_err().to_string();
        assert!(e.contains("command is empty"), "{e}");
        let run_as = |image: Option<&str>, u: &str| JobSpec {
            run_as: Some(u.into()),
            ..job(image, &["true"])
        };
        assert!(run_as(Some("oci:/srv/bb"), "1000:1000").validate().is_ok());
        assert!(run_as(Some("oci:/srv/bb"), "nobody").validate().is_ok());
        let e = run_as(None, "1000").validate().unwrap_err().to_string();
        assert!(e.contains("add --image"), "{e}");
        let e = run_as(Some("oci:/srv/bb"), "a b")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("USER or UID"), "{e}");
        let rel = JobSpec {
            workdir: Some("work".into()),
            ..job(None, &["true"])
        };
        assert!(rel.validate().unwrap_err().to_string().contains("absolute"));
        // Left out of the encoding when unset (entries written before issue 52 hash the same).
        let v = serde_json::to_value(job(None, &["true"])).expect("encode");
        assert!(
            v.get("image").is_none() && v.get("run_as").is_none() && v.get("network").is_none()
        );
        let network = |image: Option<&str>, n: &str| JobSpec {
            network: Some(n.into()),
            ..job(image, &["true"])
        };
        assert!(network(Some("oci:/srv/bb"), "none").validate().is_ok());
        assert!(network(Some("oci:/srv/bb"), "host").validate().is_ok());
        let e = network(None, "none").validate().unwrap_err().to_string();
        assert!(e.contains("add --image"), "{e}");
        let e = network(Some("oci:/srv/bb"), "bridge")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected host or none"), "{e}");
    }
}
