//! Client commands: submit, cancel, status, jobs, tasks, nodes.

/// Arguments of `hetsched submit`.
#[derive(clap::Args, Debug)]
pub struct SubmitArgs {
    /// Job name (default: the program's name).
    #[arg(long)]
    pub name: Option<String>,
    /// User (default: $USER).
    #[arg(long)]
    pub user: Option<String>,
    /// Partition.
    #[arg(long, default_value = "default")]
    pub partition: String,
    /// CPU cores per task (fractions allowed: 0.5).
    #[arg(long, default_value_t = 1.0)]
    pub cpus: f64,
    /// Memory per task, MiB.
    #[arg(long, default_value_t = 128)]
    pub mem: u64,
    /// GPUs per task: a whole number, or a fraction of one GPU (0.5).
    #[arg(long, default_value_t = 0.0)]
    pub gpus: f64,
    /// Number of tasks.
    #[arg(long, default_value_t = 1)]
    pub count: u32,
    /// Print {"job_id": ...} as one JSON line.
    #[arg(long)]
    pub json: bool,
    /// The command each task runs.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Arguments of `hetsched cancel`.
#[derive(clap::Args, Debug)]
pub struct CancelArgs {
    /// Job id.
    pub job: u64,
    /// Print one JSON line.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `hetsched status`.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// Answer from the addressed master's own applied state, no redirect (implies --stale).
    #[arg(long)]
    pub local: bool,
    /// Allow a follower's answer.
    #[arg(long)]
    pub stale: bool,
    /// Print one JSON line.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `hetsched jobs|nodes`.
#[derive(clap::Args, Debug)]
pub struct ListArgs {
    /// Answer from the addressed master's own applied state, no redirect (implies --stale).
    #[arg(long)]
    pub local: bool,
    /// Allow a follower's answer.
    #[arg(long)]
    pub stale: bool,
    /// Print a JSON array.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `hetsched tasks`.
#[derive(clap::Args, Debug)]
pub struct TasksArgs {
    /// Only this job's tasks.
    #[arg(long)]
    pub job: Option<u64>,
    /// Answer from the addressed master's own applied state, no redirect (implies --stale).
    #[arg(long)]
    pub local: bool,
    /// Allow a follower's answer.
    #[arg(long)]
    pub stale: bool,
    /// Print a JSON array.
    #[arg(long)]
    pub json: bool,
}

fn todo() -> anyhow::Result<()> {
    anyhow::bail!("client commands are not implemented yet")
}

/// `submit`.
pub fn submit(_m: &[String], _a: SubmitArgs) -> anyhow::Result<()> {
    todo()
}
/// `cancel`.
pub fn cancel(_m: &[String], _a: CancelArgs) -> anyhow::Result<()> {
    todo()
}
/// `status`.
pub fn status(_m: &[String], _a: StatusArgs) -> anyhow::Result<()> {
    todo()
}
/// `jobs`.
pub fn jobs(_m: &[String], _a: ListArgs) -> anyhow::Result<()> {
    todo()
}
/// `tasks`.
pub fn tasks(_m: &[String], _a: TasksArgs) -> anyhow::Result<()> {
    todo()
}
/// `nodes`.
pub fn nodes(_m: &[String], _a: ListArgs) -> anyhow::Result<()> {
    todo()
}
