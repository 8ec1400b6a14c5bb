//! Preparing a task attempt for its launcher: its directory (the "started" mark), its cgroup
//! with the task's limits, its `cpus` file, its environment and log files — the [`Spec`] a
//! [`super::Launch`] starts it from — and changing a running attempt's CPU allocation live.

use super::files::{
    write_atomically, Spec, CPUS_FILE, FORMAT_VERSION, STATUS_FILE, SUPERVISOR_FILE,
};
use super::{attempt_name, log_paths};
use crate::cgroup::{AttemptCgroup, Cgroups, Limits};
use hetsched_common::protocol::Assignment;
use hetsched_common::{Attempt, TaskId};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The GPU device ids granted, comma-separated (`"0,1"`; empty for none). A fractional grant
/// names its one device.
pub fn gpu_ids(a: &Assignment) -> String {
    a.gpus
        .iter()
        .map(|(device, _)| device.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// A CPU allocation in millicores as users write it (`1.5`).
pub fn cpus_text(cpu_milli: u64) -> String {
    format!("{}", cpu_milli as f64 / 1000.0)
}

/// The environment every task gets on top of the slave's own and the assignment's `env`
/// (docs/CONTRACT.md, "Environment variables"). `cpus_file` is `HETSCHED_CPUS_FILE`, where the slave
/// keeps the current allocation when it changes live.
pub fn task_env(a: &Assignment, cpus_file: Option<&Path>) -> Vec<(String, String)> {
    let gpus = gpu_ids(a);
    let mut env = vec![
        ("HETSCHED_JOB_ID".into(), a.job.0.to_string()),
        ("HETSCHED_TASK_ID".into(), a.task.0.to_string()),
        ("HETSCHED_TASK_INDEX".into(), a.index.to_string()),
        ("HETSCHED_ATTEMPT".into(), a.attempt.to_string()),
        ("HETSCHED_CPUS".into(), cpus_text(a.resources.cpu_milli)),
        ("HETSCHED_GPUS".into(), gpus.clone()),
        // Device numbers are the slave's (NVML) order; make CUDA count the same way.
        ("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into()),
        ("CUDA_VISIBLE_DEVICES".into(), gpus.clone()),
        ("NVIDIA_VISIBLE_DEVICES".into(), gpus),
        // Slurm's names for the same values, so batch scripts run unchanged (a job made
        // by `hetsched sbatch` sets its own SLURM_NTASKS and SLURM_CPUS_PER_TASK in its env,
        // which comes after these).
        ("SLURM_JOB_ID".into(), a.job.0.to_string()),
        ("SLURM_ARRAY_JOB_ID".into(), a.job.0.to_string()),
        ("SLURM_ARRAY_TASK_ID".into(), a.index.to_string()),
        (
            "SLURM_CPUS_PER_TASK".into(),
            cpus_text(a.resources.cpu_milli),
        ),
        ("SLURM_NTASKS".into(), "1".into()),
        ("SLURM_JOB_NAME".into(), a.job_name.clone()),
    ];
    if let Some(dir) = &a.workdir {
        env.push(("SLURM_SUBMIT_DIR".into(), dir.clone()));
    }
    if let Some(f) = cpus_file {
        env.push(("HETSCHED_CPUS_FILE".into(), f.display().to_string()));
    }
    env
}

/// Why a task could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The assignment has no command.
    #[error("empty command")]
    EmptyCommand,
    /// The attempt's directory exists: it was started before (by this agent or an earlier
    /// run of it) and must not start again.
    #[error("attempt already started ({0} exists)")]
    AlreadyStarted(PathBuf),
    /// A file of the attempt could not be written.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
}

/// Prepares task attempts (directory, cgroup, spec) for the launcher that starts them.
#[derive(Clone, Debug)]
pub struct Launcher {
    /// The supervisor command: program and leading arguments (`[hetsched, supervise]`); the
    /// pool is started as `supervisor --pool DIR` ([`super::pool::client`]).
    pub supervisor: Vec<OsString>,
    /// Where attempt directories live (`DATA/attempts`).
    pub attempts_dir: PathBuf,
    /// Where task output files live (`DATA/logs`).
    pub log_dir: PathBuf,
    /// The slave's cgroups.
    pub cgroups: Cgroups,
    /// Which emulated-probe files tasks get (S3 probes).
    pub probe_files: ProbeFiles,
    /// Issue 52: the image store and the runtime (`None`: the slave runs no containers).
    pub containers: Option<std::sync::Arc<crate::container::Containers>>,
}

/// The files through which tasks report to the slave's emulated probes: named in the
/// task's environment only where that probe is the emulated one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeFiles {
    /// GPU tasks get `HETSCHED_GPU_UTIL_FILE` (the node's GPUs are emulated).
    pub gpu_util: bool,
    /// Every task gets `HETSCHED_MEMBW_FILE` (no resctrl on the node).
    pub membw: bool,
}

/// Name of the emulated GPU-utilisation file in an attempt's directory.
pub const GPU_UTIL_FILE: &str = "gpu_util";

/// Name of the emulated memory-bandwidth file in an attempt's directory.
pub const MEMBW_FILE: &str = "membw";

impl Launcher {
    /// The directory of (task, attempt).
    pub fn attempt_dir(&self, task: TaskId, attempt: Attempt) -> PathBuf {
        self.attempts_dir.join(attempt_name(task, attempt))
    }

    /// Removes an ended attempt's directory. The files an attempt leaves in the common case
    /// go by name, then the directory; anything else in it (an older supervisor's files, a
    /// probe's) is found by the full walk. (The walk alone took twice the system calls, once
    /// per task.)
    pub fn remove_attempt_dir(&self, task: TaskId, attempt: Attempt) -> std::io::Result<()> {
        let dir = self.attempt_dir(task, attempt);
        for f in [CPUS_FILE, SUPERVISOR_FILE, STATUS_FILE] {
            let _ = std::fs::remove_file(dir.join(f));
        }
        match std::fs::remove_dir(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => std::fs::remove_dir_all(&dir),
            _ => Ok(()),
        }
    }

    /// Where the slave's long-lived supervisor keeps its socket, journal and log
    /// (`DATA/supervisor`, beside `DATA/attempts`; see [`super::pool`]).
    pub fn pool_dir(&self) -> PathBuf {
        self.attempts_dir.with_file_name("supervisor")
    }

    /// Everything a supervisor needs to start attempt `a`: its directory (refusing if it
    /// exists — an attempt never starts twice), its cgroup with the task's limits (where
    /// cgroups are in use) and its `cpus` file. Returns the directory and the spec (which
    /// the launcher gets, [`super::Launch`]).
    pub fn prepare(&self, a: &Assignment) -> Result<(PathBuf, Spec), SpawnError> {
        if a.command.is_empty() && a.image.is_none() {
            return Err(SpawnError::EmptyCommand);
        }
        let dir = self.attempt_dir(a.task, a.attempt);
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| SpawnError::Io { path, source }
        };
        // The attempts directory exists after the first start: made only when missing
        // (two system calls saved per start).
        let mut made = std::fs::create_dir(&dir);
        if made
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        {
            std::fs::create_dir_all(&self.attempts_dir).map_err(io(&self.attempts_dir))?;
            made = std::fs::create_dir(&dir);
        }
        match made {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(SpawnError::AlreadyStarted(dir))
            }
            Err(e) => return Err(io(&dir)(e)),
        }
        tracing::debug!(target: "hetsched::trace", task = %a.task, "prepare: attempt directory created");
        let name = attempt_name(a.task, a.attempt);
        let limits = Limits {
            cpu_milli: a.resources.cpu_milli,
            mem_mib: a.resources.mem_mib,
        };
        let cg = match self.cgroups.create(&name, limits) {
            Ok(cg) => Some(cg),
            Err(e) => {
                // The task still runs, unlimited; the operator sees why.
                tracing::warn!(task = %a.task, attempt = a.attempt, error = %e, "cannot create the attempt's cgroup; running it without limits");
                None
            }
        };
        tracing::debug!(target: "hetsched::trace", task = %a.task, "prepare: cgroup ready");
        let cpus_file = dir.join(CPUS_FILE);
        // Not fsynced: the agent's loop waits for this, and the file only matters while the
        // task runs. Written in place: nothing reads it before the task starts (a change
        // later replaces it atomically, `set_cpus`).
        std::fs::write(
            &cpus_file,
            format!("{}\n", cpus_text(a.resources.cpu_milli)).as_bytes(),
        )
        .map_err(io(&cpus_file))?;
        // Written in the log dir on disk, where it is kept ([`crate::logs`]): a stream the task
        // leaves empty is removed when it ends, with its line in the index. Not on tmpfs
        // like the attempt's other files: tmpfs pages are charged to the task's memory
        // cgroup and cannot be written back, so a task's output would count against its
        // `--mem` (a 32 MiB task printing 64 MiB was OOM-killed) and hold host RAM.
        let (keep_out, keep_err) = log_paths(&self.log_dir, a);
        let (stdout, stderr) = (keep_out.clone(), keep_err.clone());
        let mut env = task_env(a, Some(&cpus_file));
        if self.probe_files.gpu_util && !a.gpus.is_empty() {
            env.push((
                "HETSCHED_GPU_UTIL_FILE".into(),
                dir.join(GPU_UTIL_FILE).display().to_string(),
            ));
        }
        if self.probe_files.membw {
            env.push((
                "HETSCHED_MEMBW_FILE".into(),
                dir.join(MEMBW_FILE).display().to_string(),
            ));
        }
        env.extend(a.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        let spec = Spec {
            version: FORMAT_VERSION,
            argv: a.command.clone(),
            env,
            stdout,
            stderr,
            cgroup_procs: cg.as_ref().map(|c| c.procs_files()).unwrap_or_default(),
            oom_counter: cg.as_ref().and_then(|c| c.oom_counter_file()),
            keep: Some(crate::logs::Keep {
                stdout: keep_out,
                stderr: keep_err,
            }),
            cwd: a.workdir.as_ref().map(PathBuf::from),
        };
        Ok((dir, spec))
    }

    /// [`prepare`](Self::prepare) for a container attempt of `image`: the spec's argv is
    /// the runtime's (`crate::container::launch`), run in the slave's directory; the task's
    /// environment goes into the container after the image's.
    pub fn prepare_container(
        &self,
        a: &Assignment,
        image: &crate::container::store::Image,
    ) -> Result<(PathBuf, Spec), SpawnError> {
        use crate::container::launch;
        let containers = self.containers.as_ref().ok_or_else(|| SpawnError::Io {
            path: self.attempts_dir.clone(),
            source: std::io::Error::other("this slave runs no containers"),
        })?;
        let (dir, mut spec) = self.prepare(a)?;
        let name = attempt_name(a.task, a.attempt);
        let fail = |why: String| SpawnError::Io {
            path: containers.launcher.bundle(&name),
            source: std::io::Error::other(why),
        };
        let user_text = a
            .run_as
            .clone()
            .unwrap_or_else(|| image.config.user.clone());
        let user = launch::resolve_user(&image.rootfs, &user_text).map_err(fail)?;
        let task = launch::TaskSide {
            argv: a.command.clone(),
            env: spec.env.clone(),
            workdir: a.workdir.clone(),
            run_as: a.run_as.clone(),
            network: a.network.clone(),
        };
        let cg = self.cgroups.attempt(&name);
        let child = format!("{}-{name}", self.cgroups.own_name().unwrap_or_default());
        let (cgroups_path, oom_counter) =
            launch::container_cgroup(&cg, self.cgroups.root(), &child);
        spec.oom_counter = oom_counter;
        let mut config =
            launch::config(&image.config, &task, user, cgroups_path, &name).map_err(fail)?;
        if !a.gpus.is_empty() {
            // The granted devices only, and the driver's libraries (none where the GPUs are
            // emulated: no device nodes).
            let granted: Vec<u32> = a.gpus.iter().map(|(d, _)| *d).collect();
            crate::container::gpu::add_granted(&mut config, &granted);
        }
        spec.argv = containers
            .launcher
            .prepare(&name, &image.rootfs, &config)
            .map_err(fail)?;
        spec.cwd = None;
        Ok((dir, spec))
    }
}

/// Changes a running attempt's CPU allocation live: its cgroup's quota and its
/// `HETSCHED_CPUS_FILE` (for the CPU search and compression, S3).
pub fn set_cpus(
    attempt_dir: &Path,
    cgroup: &AttemptCgroup,
    cpu_milli: u64,
) -> Result<(), SpawnError> {
    cgroup.set_cpu(cpu_milli).map_err(|e| SpawnError::Io {
        path: attempt_dir.to_path_buf(),
        source: std::io::Error::other(e),
    })?;
    let f = attempt_dir.join(CPUS_FILE);
    write_atomically(&f, format!("{}\n", cpus_text(cpu_milli)).as_bytes()).map_err(|source| {
        SpawnError::Io {
            path: f.clone(),
            source,
        }
    })
}

/// Appends a line to the task's `.err` log (best effort), so that a user reading the task's
/// output sees why it never started.
pub fn note_in_err_log(log_dir: &Path, a: &Assignment, line: &str) {
    use std::io::Write;
    let (_, err) = log_paths(log_dir, a);
    let r = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&err)
        .and_then(|mut f| writeln!(f, "{line}"));
    if let Err(e) = r {
        tracing::debug!(path = %err.display(), error = %e, "cannot write task log");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_dir_is_removed_with_its_usual_files_or_anything_else_in_it() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let l = Launcher {
            supervisor: Vec::new(),
            attempts_dir: tmp.path().join("attempts"),
            log_dir: tmp.path().join("logs"),
            cgroups: Cgroups::none(),
            probe_files: ProbeFiles::default(),
            containers: None,
        };
        for (task, extra) in [(1, None), (2, Some("probe.out")), (3, None)] {
            let dir = l.attempt_dir(TaskId(task), 1);
            std::fs::create_dir_all(&dir).expect("mkdir");
            for f in [CPUS_FILE, SUPERVISOR_FILE, STATUS_FILE]
                .into_iter()
                .chain(extra)
            {
                std::fs::write(dir.join(f), "x").expect("write");
            }
            if task == 3 {
                std::fs::remove_dir_all(&dir).expect("gone before");
            }
            l.remove_attempt_dir(TaskId(task), 1).expect("removed");
            assert!(!dir.exists(), "task {task}");
        }
    }

    fn asg(gpus: Vec<(u32, u32)>, cpu_milli: u64) -> Assignment {
        Assignment {
            task: TaskId(17),
            job: hetsched_common::JobId(3),
            index: 2,
            attempt: 4,
            command: vec!["true".into()],
            env: Default::default(),
            resources: hetsched_common::ResourceRequest {
                cpu_milli,
                ..Default::default()
            },
            gpus,
            queued: false,
            engine: None,
            job_name: String::new(),
            workdir: None,
            image: None,
            run_as: None,
            network: None,
        }
    }

    #[test]
    fn environment_names_ids_cpus_and_gpus() {
        let env: std::collections::BTreeMap<String, String> = task_env(
            &asg(vec![(0, 1000), (3, 1000)], 1500),
            Some(Path::new("/x/cpus")),
        )
        .into_iter()
        .collect();
        assert_eq!(env["HETSCHED_TASK_ID"], "17");
        assert_eq!(env["HETSCHED_ATTEMPT"], "4");
        assert_eq!(env["HETSCHED_CPUS"], "1.5");
        assert_eq!(env["HETSCHED_CPUS_FILE"], "/x/cpus");
        for k in [
            "HETSCHED_GPUS",
            "CUDA_VISIBLE_DEVICES",
            "NVIDIA_VISIBLE_DEVICES",
        ] {
            assert_eq!(env[k], "0,3", "{k}");
        }
        // A fractional grant names its one device; no grant names none.
        assert_eq!(gpu_ids(&asg(vec![(1, 500)], 100)), "1");
        assert_eq!(gpu_ids(&asg(vec![], 100)), "");
    }

    #[test]
    fn live_cpu_change_updates_quota_and_cpus_file() {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(root.path().join("cpu")).expect("mkdir");
        std::fs::write(root.path().join("cpu/cpu.cfs_quota_us"), "-1").expect("write");
        let cgs = Cgroups::detect(root.path(), "1:cpu:/\n", "s");
        let cg = cgs
            .create(
                "task-17-4",
                Limits {
                    cpu_milli: 2000,
                    mem_mib: 0,
                },
            )
            .expect("create");
        let dir = root.path().join("attempt");
        std::fs::create_dir_all(&dir).expect("mkdir");
        set_cpus(&dir, &cg, 1000).expect("set cpus");
        let quota = root
            .path()
            .join("cpu/hetsched-s/task-17-4/cpu.cfs_quota_us");
        assert_eq!(std::fs::read_to_string(quota).expect("quota"), "100000");
        assert_eq!(
            std::fs::read_to_string(dir.join(CPUS_FILE)).expect("cpus file"),
            "1\n"
        );
    }
}
