//! `hetsched sbatch [OPTIONS] SCRIPT [ARGS…]`: a Slurm batch script submitted unchanged. The
//! script's `#SBATCH` lines and these options are read as Slurm reads them
//! ([`hetsched_common::sbatch`]); the output is Slurm's (`Submitted batch job 12`).

use crate::cmd::client::{block_on, call, request_id, short};
use crate::cmd::exit;
use anyhow::anyhow;
use hetsched_common::protocol::{ClientRequest, ClientResponse};
use hetsched_common::sbatch::{self, CommandLine, SubmitContext};

/// Arguments of `hetsched sbatch`: read by the Slurm option parser, not by clap, so that
/// Slurm's spellings (`-c4`, `--mem 2G`, `-J name`) and the script's own arguments pass
/// through as written.
#[derive(clap::Args, Debug)]
#[command(disable_help_flag = true)]
pub struct SbatchArgs {
    /// Slurm options, the batch script, then the script's own arguments
    /// (`hetsched sbatch --help` lists the options read).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "[OPTIONS] SCRIPT [ARGS]"
    )]
    pub args: Vec<String>,
}

const HELP: &str = "\
Submit a Slurm batch script, unchanged.

Usage: hetsched sbatch [OPTIONS] SCRIPT [ARGS...]

Options come from the script's #SBATCH lines (up to its first command) and from the
command line, which wins. The script runs once per array task, in the submit directory,
with SLURM_JOB_ID, SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID, SLURM_CPUS_PER_TASK,
SLURM_NTASKS, SLURM_JOB_NAME and SLURM_SUBMIT_DIR set; its output goes to slurm-%j.out
(slurm-%A_%a.out for arrays) unless -o/-e say otherwise.

  -J, --job-name=NAME        job name [default: the script's file name]
  -c, --cpus-per-task=N      CPUs per task [default: 1]
  -n, --ntasks=N             tasks: the script runs once holding N x c CPUs
      --mem=SIZE             memory, with K/M/G/T [default unit: M]
      --gres=gpu[:TYPE][:N]  GPUs (other resources warn and are ignored)
  -G, --gpus=[TYPE:]N        GPUs
  -a, --array=LIST[%N]       array: 0-15, 1,3,5, 0-99:2; %N runs at most N at once
  -d, --dependency=LIST      afterok:ID[:ID...], afterany, afternotok, aftercorr, singleton;
                             ',' = all of, '?' = any of
  -t, --time=TIME            limit: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
  -p, --partition=NAME       partition
  -o, --output=PATTERN       stdout file (%j %A %a %x %u %N %%; %4a pads)
  -e, --error=PATTERN        stderr file [default: with stdout]
  -D, --chdir=DIR            working directory [default: the submit directory]
      --export=ALL|NONE|VARS the submitting shell's variables to pass [default: ALL,
                             except HETSCHED_TOKEN and names ending in _TOKEN, _SECRET,
                             _PASSWORD or _KEY]
      --parsable             print the job id alone
      --json                 print {\"job_id\", \"tasks\", \"warnings\"}

Other Slurm options are accepted with a warning and ignored.";

/// `hetsched sbatch`.
pub fn run(masters: &[String], a: SbatchArgs) -> anyhow::Result<()> {
    let bad = |e: sbatch::SbatchError| exit::bad_input(e.to_string());
    let (options, script, args) = match sbatch::split_command_line(&a.args).map_err(bad)? {
        CommandLine::Help => {
            println!("{HELP}\n\n{}", exit::EXIT_CODES_HELP);
            return Ok(());
        }
        CommandLine::Run {
            options,
            script,
            args,
        } => (options, script, args),
    };
    let text = std::fs::read_to_string(&script)
        .map_err(|e| exit::bad_input(format!("cannot read batch script {script}: {e}")))?;
    let cwd = std::env::current_dir()
        .map_err(|e| anyhow!("cannot tell the current directory: {e}"))?
        .display()
        .to_string();
    let ctx = SubmitContext {
        cwd,
        env: std::env::vars().collect(),
        user: crate::cmd::client::default_user(),
    };
    let job = sbatch::job(&script, &text, &options, &args, &ctx).map_err(bad)?;
    for w in &job.warnings {
        eprintln!("warning: {w}");
    }
    let req = ClientRequest::Submit {
        request: request_id(),
        spec: job.spec,
        allow_unplaceable: false,
    };
    match block_on(call(masters, req, false))?? {
        ClientResponse::Submitted { job: id, tasks } => {
            if job.json {
                crate::cmd::print_json(&serde_json::json!({
                    "job_id": id,
                    "tasks": tasks.len(),
                    "warnings": job.warnings,
                }))
            } else if job.parsable {
                println!("{}", id.0);
                Ok(())
            } else {
                println!("Submitted batch job {}", id.0);
                Ok(())
            }
        }
        other => Err(anyhow!("unexpected answer: {}", short(&other))),
    }
}
