//! The command-line arguments of the client commands (clap): submit, cancel, the read
//! flags and filters of the listings, and members.

use hetsched_common::{JobId, TaskId};

/// Arguments of `hetsched submit`.
#[derive(clap::Args, Debug)]
pub struct SubmitArgs {
    /// Job spec file (TOML or JSON; see README "Job spec files"). Flags override its fields.
    #[arg(value_name = "FILE")]
    pub file: Option<String>,
    /// Job name (default: the program's name).
    #[arg(long)]
    pub name: Option<String>,
    /// User (default: $USER).
    #[arg(long)]
    pub user: Option<String>,
    /// Partition [default: default].
    #[arg(long)]
    pub partition: Option<String>,
    /// CPU cores per task (fractions allowed: 0.5) [default: 1].
    #[arg(long)]
    pub cpus: Option<f64>,
    /// Memory per task, MiB [default: 128].
    #[arg(long)]
    pub mem: Option<u64>,
    /// GPUs per task: a whole number, or a fraction of one GPU (0.5) [default: 0].
    #[arg(long)]
    pub gpus: Option<f64>,
    /// Acceptable GPU model (e.g. T4).
    #[arg(long, value_name = "MODEL")]
    pub gpu_model: Option<String>,
    /// Number of tasks [default: 1].
    #[arg(long)]
    pub count: Option<u32>,
    /// Extra environment for every task (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// Run only on these nodes (names or ids).
    #[arg(long, value_delimiter = ',', value_name = "NAME_OR_ID,...")]
    pub nodes: Option<Vec<String>>,
    /// Re-run a failed task up to N more times.
    #[arg(long, value_name = "N")]
    pub retries: Option<u32>,
    /// First delay before a re-run (doubling, capped at 5m), e.g. 5s.
    #[arg(long, value_name = "DURATION")]
    pub backoff: Option<String>,
    /// Longest one attempt may run (then stopped, reason "timeout"), e.g. 1h.
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
    /// Print {"job_id": ..., "tasks": N} as one JSON line.
    #[arg(long)]
    pub json: bool,
    /// Never make this job's tasks preemption victims (S1). Accepted only for users whose
    /// priority is at least the configuration's `protect_min_priority`.
    #[arg(long)]
    pub no_preempt: bool,
    /// Change nothing: print the priority each task would get, where the next scheduling
    /// round would place it, and what it would preempt.
    #[arg(long)]
    pub dry_run: bool,
    /// Submit even when no registered node could ever hold one task (nodes may join later);
    /// without it the leader refuses such a job with why (exit 2).
    #[arg(long)]
    pub allow_unplaceable: bool,
    /// Make the submit idempotent: the same KEY (1 to 64 visible ASCII bytes) from the same
    /// user within 24 h answers the first job instead of making another, through leader
    /// changes (docs/CONTRACT.md).
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    /// An API program (TOML, `[[call]]` tables) each task runs instead of a command: each
    /// call runs on the best available engine of the task's node (see `hetsched calls`).
    #[arg(long, value_name = "FILE", conflicts_with = "command")]
    pub program: Option<std::path::PathBuf>,
    /// S3.2, GPU tasks: the task's class. Its best CPU count is searched while it runs
    /// (starting from the class's recorded best, else --cpus) and recorded for the class.
    #[arg(long, value_name = "image|speech|nlp|other", value_parser = parse_class)]
    pub class: Option<hetsched_common::TaskClass>,
    /// S3.2 hint (needs --class): the task pipelines its input; the search starts one CPU
    /// lower.
    #[arg(long)]
    pub pipelined: bool,
    /// S3.2 hint (needs --class): the model's weights are heavy; the search starts one CPU
    /// lower.
    #[arg(long)]
    pub heavy_weights: bool,
    /// S3.2 hint (needs --class): the task's CPU side is heavy; the search starts one CPU
    /// higher.
    #[arg(long)]
    pub cpu_heavy: bool,
    /// Start once each of these jobs succeeded (Slurm `afterok`); a job that fails or is
    /// cancelled cancels this one (reason `dependency`).
    #[arg(long, value_delimiter = ',', value_name = "JOB,...")]
    pub after: Vec<JobId>,
    /// Start once each of these jobs ended, in any state (Slurm `afterany`).
    #[arg(long, value_delimiter = ',', value_name = "JOB,...")]
    pub after_any: Vec<JobId>,
    /// Start once each of these jobs failed or was cancelled (Slurm `afternotok`).
    #[arg(long, value_delimiter = ',', value_name = "JOB,...")]
    pub after_fail: Vec<JobId>,
    /// Task i starts once task i of JOB succeeded (Slurm `aftercorr`; the task counts must
    /// match); if it fails, task i of this job is cancelled and the others go on.
    #[arg(long, value_name = "JOB")]
    pub after_each: Option<JobId>,
    /// How the dependencies combine: all (default) must be met, or any one is enough
    /// (Slurm's `?`).
    #[arg(long, value_name = "all|any")]
    pub after_mode: Option<hetsched_common::AfterMode>,
    /// At most one job of this user and name (--singleton) under way at a time.
    #[arg(long)]
    pub singleton: bool,
    /// At most N of this job's tasks assigned or running at once (Slurm `--array=...%N`).
    #[arg(long, value_name = "N")]
    pub max_running: Option<u32>,
    /// Run each task in this container image (docs/guide/containers.md): oci:DIR[:TAG],
    /// oci-archive:FILE.tar, docker-archive:FILE.tar (paths on the slave, under its
    /// --image-dir) or docker://HOST/NAME:TAG. Without CMD the image's entrypoint and cmd run.
    #[arg(long, value_name = "REF", conflicts_with = "program")]
    pub image: Option<String>,
    /// A container task's user in its image: USER or UID, optionally :GROUP or :GID
    /// (default: the image's own user; --user names the submitting user).
    #[arg(long, value_name = "USER|UID")]
    pub run_as: Option<String>,
    /// A container task's network: host (default: the host's, as a bare task's) or none (a
    /// network namespace of its own with only loopback).
    #[arg(long, value_name = "host|none")]
    pub network: Option<String>,
    /// The directory each task starts in (absolute; inside the image for a container task,
    /// whose default is the image's working directory).
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<String>,
    /// The command each task runs (overrides the file's `command`).
    #[arg(last = true, value_name = "CMD", conflicts_with = "program")]
    pub command: Vec<String>,
}

/// Arguments of `hetsched cancel`.
#[derive(clap::Args, Debug)]
pub struct CancelArgs {
    /// The job (`5`, `job-5`); `task-17` cancels one task, `batch-3` a whole batch,
    /// `flow-2` every unfinished step of a flow.
    #[arg(value_name = "JOB", required_unless_present = "task")]
    pub job: Option<String>,
    /// Cancel only this task (`17`, `task-17`).
    #[arg(long, value_name = "ID", conflicts_with = "job")]
    pub task: Option<TaskId>,
    /// Print one JSON line.
    #[arg(long)]
    pub json: bool,
}

/// How a read may be answered, and how it is printed (shared by every read command).
#[derive(clap::Args, Debug)]
pub struct ReadFlags {
    /// Answer from the addressed (first) master's own applied state, no redirect (implies --stale).
    #[arg(long)]
    pub local: bool,
    /// Allow a follower's answer.
    #[arg(long)]
    pub stale: bool,
    /// Print JSON (one line).
    #[arg(long)]
    pub json: bool,
}

impl ReadFlags {
    /// Whether a non-linearizable answer is acceptable.
    pub fn stale(&self) -> bool {
        self.stale || self.local
    }
}

/// Arguments of `hetsched status`.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    pub(super) read: ReadFlags,
}

/// Arguments of `hetsched nodes`.
#[derive(clap::Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub(super) read: ReadFlags,
}

/// Filters shared by `jobs` and `tasks`.
#[derive(clap::Args, Debug)]
pub struct FilterFlags {
    /// Only this state (jobs: pending, running, succeeded, failed, cancelled; tasks also
    /// assigned).
    #[arg(long)]
    pub state: Option<String>,
    /// Only this user's.
    #[arg(long)]
    pub user: Option<String>,
    /// At most N (newest first).
    #[arg(long, value_name = "N")]
    pub limit: Option<u32>,
    /// Only tasks waiting for this reason (jobs: with such a task): resources, quota,
    /// priority, fair-share, pool, engine, locality, drained, reserved, gang, backoff,
    /// blocked, dependency, throttle.
    #[arg(long, value_name = "R")]
    pub reason: Option<String>,
}

/// Arguments of `hetsched jobs`.
#[derive(clap::Args, Debug)]
pub struct JobsArgs {
    /// Only this job (`5`, `job-5`).
    #[arg(value_name = "JOB")]
    pub id: Option<JobId>,
    /// Only this job (same as JOB).
    #[arg(long, value_name = "JOB", conflicts_with = "id")]
    pub job: Option<JobId>,
    #[command(flatten)]
    pub(super) filter: FilterFlags,
    #[command(flatten)]
    pub(super) read: ReadFlags,
}

/// Arguments of `hetsched tasks`.
#[derive(clap::Args, Debug)]
pub struct TasksArgs {
    /// Only this job's tasks (`5`, `job-5`).
    #[arg(long)]
    pub job: Option<JobId>,
    #[command(flatten)]
    pub(super) filter: FilterFlags,
    #[command(flatten)]
    pub(super) read: ReadFlags,
}

/// Arguments of `hetsched members`.
#[derive(clap::Args, Debug)]
pub struct MembersArgs {
    /// What to do (default: list).
    #[command(subcommand)]
    pub action: Option<MembersAction>,
    /// Answer from the addressed (first) master's own view, no redirect (implies --stale).
    #[arg(long, global = true)]
    pub local: bool,
    /// Allow a follower's answer.
    #[arg(long, global = true)]
    pub stale: bool,
    /// Print one JSON line.
    #[arg(long, global = true)]
    pub json: bool,
}

/// `hetsched members` actions.
#[derive(clap::Subcommand, Debug)]
pub enum MembersAction {
    /// Add a master (start it first with `hetsched master --join`).
    Add {
        /// Its id (≥ 1, not used by another master).
        id: u64,
        /// Its cluster address.
        #[arg(value_name = "HOST:PORT")]
        addr: String,
    },
    /// Remove a master (removing the leader hands leadership over first).
    Remove {
        /// Its id.
        id: u64,
    },
    /// Hand leadership to another master.
    TransferLeader {
        /// Its id.
        id: u64,
    },
}

/// `--class`: `image`, `speech`, `nlp` or `other`.
fn parse_class(s: &str) -> Result<hetsched_common::TaskClass, String> {
    s.parse()
}
