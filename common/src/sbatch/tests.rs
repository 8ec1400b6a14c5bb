use super::*;

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn ctx() -> SubmitContext {
    SubmitContext {
        cwd: "/home/ada/run".into(),
        env: vec![
            ("PATH".into(), "/usr/bin:/bin".into()),
            ("HOME".into(), "/home/ada".into()),
            ("HETSCHED_TOKEN".into(), "secret".into()),
            ("AWS_SECRET".into(), "s".into()),
            ("GITHUB_TOKEN".into(), "t".into()),
            ("DB_PASSWORD".into(), "p".into()),
            ("SSH_KEY".into(), "k".into()),
            ("SLURM_JOB_ID".into(), "999".into()),
            ("HETSCHED_TASK_INDEX".into(), "7".into()),
            ("PWD".into(), "/elsewhere".into()),
        ],
        user: "ada".into(),
    }
}

const SCRIPT: &str = "#!/bin/bash\n\
#SBATCH -J train\n\
#SBATCH -c 2 --mem=2G\n\
#SBATCH -n 2\n\
#SBATCH --array=0-7%2\n\
#SBATCH -d afterok:12\n\
#SBATCH -t 1:00\n\
#SBATCH -o out-%A_%a.txt\n\
#SBATCH --mail-type=END\n\
\n\
# a comment between directives is fine\n\
echo hello\n\
#SBATCH --partition=late\n";

#[test]
fn times_in_every_slurm_format() {
    let ms = |t: &str| time_limit_ms(t).unwrap();
    assert_eq!(ms("30"), Some(30 * 60_000));
    assert_eq!(ms("1:00"), Some(60_000));
    assert_eq!(ms("2:03:04"), Some((2 * 3600 + 3 * 60 + 4) * 1000));
    assert_eq!(ms("1-2"), Some((86_400 + 2 * 3600) * 1000));
    assert_eq!(ms("1-2:30"), Some((86_400 + 2 * 3600 + 30 * 60) * 1000));
    assert_eq!(ms("1-0:0:5"), Some((86_400 + 5) * 1000));
    assert_eq!(ms("UNLIMITED"), None);
    assert_eq!(ms("infinite"), None);
    assert_eq!(ms("0"), None);
    for bad in [
        "",
        "1:2:3:4",
        "a",
        "1-",
        "-5",
        "1-2:3:4:5",
        "1.5",
        "99999999999999999999",
    ] {
        assert!(time_limit_ms(bad).is_err(), "{bad:?} should be refused");
    }
}

#[test]
fn memory_sizes_default_to_mib() {
    assert_eq!(mem_mib("2G").unwrap(), 2048);
    assert_eq!(mem_mib("512").unwrap(), 512);
    assert_eq!(mem_mib("512M").unwrap(), 512);
    assert_eq!(mem_mib("1T").unwrap(), 1024 * 1024);
    assert_eq!(mem_mib("1500K").unwrap(), 2);
    assert_eq!(mem_mib("4g").unwrap(), 4096);
    for bad in ["", "G", "2X", "-1G", "1.5G", "99999999999999T"] {
        assert!(mem_mib(bad).is_err(), "{bad:?} should be refused");
    }
}

#[test]
fn gpu_requests_by_gres_and_gpus() {
    let g = |count, model: Option<&str>| GpuAsk {
        count,
        model: model.map(String::from),
    };
    assert_eq!(gres("gpu:2").unwrap(), (Some(g(2, None)), vec![]));
    assert_eq!(gres("gpu").unwrap(), (Some(g(1, None)), vec![]));
    assert_eq!(
        gres("gpu:a100:4").unwrap(),
        (Some(g(4, Some("a100"))), vec![])
    );
    assert_eq!(
        gres("gpu:v100").unwrap(),
        (Some(g(1, Some("v100"))), vec![])
    );
    assert_eq!(
        gres("nvme:1,gpu:1").unwrap(),
        (Some(g(1, None)), vec!["nvme:1".to_string()])
    );
    assert_eq!(gpus("3").unwrap(), g(3, None));
    assert_eq!(gpus("h100:8").unwrap(), g(8, Some("h100")));
    for bad in ["gpu:0", "gpu:a:b:c", "gpu:1,gpu:2"] {
        assert!(gres(bad).is_err(), "{bad:?} should be refused");
    }
    assert!(gpus("0").is_err());
    assert!(gpus("x").is_err());
}

#[test]
fn arrays_ranges_lists_steps_and_throttles() {
    let a = array("0-7%2").unwrap();
    assert_eq!(a.ids, (0..8).collect::<Vec<_>>());
    assert_eq!(a.max_running, Some(2));
    assert_eq!(a.progression(), Some((0, 1)));
    let a = array("1,3,5").unwrap();
    assert_eq!(a.ids, vec![1, 3, 5]);
    assert_eq!(a.progression(), Some((1, 2)));
    let a = array("0-99:2").unwrap();
    assert_eq!(a.ids.len(), 50);
    assert_eq!(a.ids[49], 98);
    let a = array("1-3,7,10-20:5").unwrap();
    assert_eq!(a.ids, vec![1, 2, 3, 7, 10, 15, 20]);
    assert_eq!(a.progression(), None);
    assert_eq!(array("5").unwrap().ids, vec![5]);
    for bad in [
        "",
        "3-1",
        "1,,2",
        "0-9:0",
        "a-b",
        "0-9%0",
        "0-9%x",
        "0-4294967295",
    ] {
        assert!(array(bad).is_err(), "{bad:?} should be refused");
    }
}

#[test]
fn dependencies_all_of_and_any_of() {
    let d = dependency("afterok:12:13,afterany:14").unwrap();
    assert!(!d.any_of);
    assert_eq!(
        d.terms,
        vec![
            DependencyTerm::AfterOk(vec![12, 13]),
            DependencyTerm::AfterAny(vec![14])
        ]
    );
    let d = dependency("afterok:1?afternotok:2").unwrap();
    assert!(d.any_of);
    assert_eq!(
        dependency("singleton").unwrap().terms,
        vec![DependencyTerm::Singleton]
    );
    assert_eq!(
        dependency("aftercorr:9").unwrap().terms,
        vec![DependencyTerm::AfterCorr(9)]
    );
    for bad in [
        "afterok:1,afterany:2?afterok:3",
        "afterok",
        "afterok:x",
        "after:5",
        "afterok:5+10",
        "afterok:5_3",
        "aftercorr:1:2",
        "before:3",
        "afterok:0",
    ] {
        assert!(dependency(bad).is_err(), "{bad:?} should be refused");
    }
}

#[test]
fn export_lists() {
    assert_eq!(export("ALL").unwrap(), Export::default());
    let e = export("NONE").unwrap();
    assert!(!e.all && e.names.is_empty());
    let e = export("HOME,PATH,SEED=3").unwrap();
    assert!(!e.all);
    assert_eq!(e.names, s(&["HOME", "PATH"]));
    assert_eq!(e.set, vec![("SEED".to_string(), "3".to_string())]);
    assert!(export("ALL,X=1").unwrap().all);
    assert!(export("1BAD").is_err());
    assert!(export("A-B").is_err());
}

#[test]
fn directives_stop_at_the_first_command_and_need_an_interpreter() {
    let d = directives("run.sh", SCRIPT).unwrap();
    assert_eq!(d.len(), 8, "{d:?}");
    assert_eq!(d[0], (2, s(&["-J", "train"])));
    assert_eq!(d[1], (3, s(&["-c", "2", "--mem=2G"])));
    // The --partition line comes after `echo hello`: Slurm does not read it either.
    assert!(d
        .iter()
        .all(|(_, w)| !w.iter().any(|x| x.contains("partition"))));
    let e = directives("run.sh", "echo hi\n#SBATCH -J x\n").unwrap_err();
    assert_eq!(e.place, "run.sh:1");
    assert!(e.why.contains("#!"), "{e}");
    let quoted = directives(
        "q.sh",
        "#!/bin/sh\n#SBATCH -J \"two words\" # trailing comment\n#SBATCHX not one\n",
    )
    .unwrap();
    assert_eq!(quoted, vec![(2, s(&["-J", "two words"]))]);
    assert!(directives("q.sh", "#!/bin/sh\n#SBATCH -J 'open\n").is_err());
    assert!(directives("q.sh", "#!/bin/sh\0").is_err());
}

#[test]
fn the_command_line_splits_at_the_script_and_overrides_it() {
    let cl = split_command_line(&s(&["-c", "4", "--parsable", "job.sh", "-x", "--y"])).unwrap();
    let CommandLine::Run {
        options,
        script,
        args,
    } = cl
    else {
        panic!("{cl:?}")
    };
    assert_eq!(options, s(&["-c", "4", "--parsable"]));
    assert_eq!(script, "job.sh");
    assert_eq!(args, s(&["-x", "--y"]));
    assert_eq!(
        split_command_line(&s(&["--help"])).unwrap(),
        CommandLine::Help
    );
    assert!(split_command_line(&s(&["-J", "x"])).is_err());
    let (o, _) = read_options("run.sh", SCRIPT, &s(&["-c", "4", "-Jother"])).unwrap();
    assert_eq!(o.cpus_per_task, Some(4.0));
    assert_eq!(o.job_name.as_deref(), Some("other"));
    assert_eq!(o.mem_mib, Some(2048));
    let e = read_options("run.sh", SCRIPT, &s(&["--no-such-option"])).unwrap_err();
    assert_eq!(e.place, "command line");
    assert!(e.why.contains("--no-such-option"), "{e}");
    let e = read_options("run.sh", SCRIPT, &s(&["--mem", "lots"])).unwrap_err();
    assert!(e.why.starts_with("--mem:"), "{e}");
}

#[test]
fn unknown_directives_warn_and_the_rest_apply() {
    let text = "#!/bin/sh\n#SBATCH --frobnicate 3\n#SBATCH --nodes=2\n#SBATCH -c 3\ntrue\n";
    let (o, w) = read_options("w.sh", text, &[]).unwrap();
    assert_eq!(o.cpus_per_task, Some(3.0));
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(
        w[0].starts_with("w.sh:2:") && w[0].contains("--frobnicate"),
        "{w:?}"
    );
    assert!(
        w[1].starts_with("w.sh:3:") && w[1].contains("--nodes"),
        "{w:?}"
    );
    let e = read_options("w.sh", "#!/bin/sh\n#SBATCH -c many\n", &[]).unwrap_err();
    assert_eq!(e.place, "w.sh:2");
}

#[test]
fn a_script_becomes_one_job_per_array_with_the_tasks_cpus() {
    let j = job("/tmp/run.sh", SCRIPT, &[], &s(&["a", "b c"]), &ctx()).unwrap();
    let spec = &j.spec;
    assert_eq!(spec.name, "train");
    assert_eq!(spec.count, 8);
    assert_eq!(spec.resources.cpu_milli, 4000, "-n 2 × -c 2");
    assert_eq!(spec.resources.mem_mib, 2048);
    assert_eq!(spec.timeout_ms, Some(60_000));
    assert_eq!(spec.workdir.as_deref(), Some("/home/ada/run"));
    assert_eq!(spec.partition, "");
    assert_eq!(spec.max_running, Some(2), "%2 throttles the array");
    assert_eq!(spec.after, vec![crate::JobId(12)], "-d afterok:12");
    let any = job(
        "p.sh",
        "#!/bin/sh\n",
        &s(&[
            "-d",
            "afterany:3?afternotok:4",
            "-d",
            "singleton,aftercorr:5,afterok:6:7",
        ]),
        &[],
        &ctx(),
    )
    .unwrap();
    // The later -d wins, as Slurm's last option does.
    assert_eq!(any.spec.after_any, vec![]);
    assert!(any.spec.singleton);
    assert_eq!(any.spec.after_each, Some(crate::JobId(5)));
    assert_eq!(any.spec.after, vec![crate::JobId(6), crate::JobId(7)]);
    assert_eq!(any.spec.after_mode, crate::AfterMode::All);
    let any = job(
        "p.sh",
        "#!/bin/sh\n",
        &s(&["-d", "afterany:3?afternotok:4"]),
        &[],
        &ctx(),
    )
    .unwrap();
    assert_eq!(any.spec.after_any, vec![crate::JobId(3)]);
    assert_eq!(any.spec.after_fail, vec![crate::JobId(4)]);
    assert_eq!(any.spec.after_mode, crate::AfterMode::Any);
    assert_eq!(spec.command[..2], s(&["/bin/sh", "-c"]));
    assert_eq!(spec.command[3..], s(&["/tmp/run.sh", "a", "b c"]));
    assert_eq!(j.warnings.len(), 1, "{:?}", j.warnings);
    let env = &spec.env;
    assert_eq!(env["SLURM_NTASKS"], "2");
    assert_eq!(env["SLURM_CPUS_PER_TASK"], "2");
    assert_eq!(env["SLURM_JOB_NAME"], "train");
    assert_eq!(env["SLURM_SUBMIT_DIR"], "/home/ada/run");
    assert_eq!(env["SLURM_ARRAY_TASK_COUNT"], "8");
    assert_eq!(env["PATH"], "/usr/bin:/bin");
    assert_eq!(env["HETSCHED_SBATCH_SCRIPT"], SCRIPT);
    for gone in [
        "HETSCHED_TOKEN",
        "AWS_SECRET",
        "GITHUB_TOKEN",
        "DB_PASSWORD",
        "SSH_KEY",
        "HETSCHED_TASK_INDEX",
        "PWD",
    ] {
        assert!(!env.contains_key(gone), "{gone} must not be exported");
    }
    // The submitting shell's SLURM_JOB_ID (sbatch run inside a Slurm job) is not this job's.
    assert!(!env.contains_key("SLURM_JOB_ID"));
    let none = job(
        "/tmp/run.sh",
        SCRIPT,
        &s(&["--export=NONE,SEED=4"]),
        &[],
        &ctx(),
    )
    .unwrap();
    assert!(!none.spec.env.contains_key("PATH"));
    assert_eq!(none.spec.env["SEED"], "4");
}

#[test]
fn defaults_follow_slurm() {
    let j = job("dir/plain.sh", "#!/bin/sh\ntrue\n", &[], &[], &ctx()).unwrap();
    assert_eq!(j.spec.name, "plain.sh");
    assert_eq!(j.spec.count, 1);
    assert_eq!(j.spec.resources.cpu_milli, 1000);
    assert_eq!(j.spec.resources.mem_mib, crate::jobfile::DEFAULT_MEM_MIB);
    assert_eq!(j.spec.timeout_ms, None);
    assert!(j.spec.env["HETSCHED_SBATCH_PRELUDE"].contains("slurm-${SLURM_JOB_ID}.out"));
    assert!(j.spec.env["HETSCHED_SBATCH_PRELUDE"].contains("2>&1"));
    let rel = job(
        "p.sh",
        "#!/bin/sh\ntrue\n",
        &s(&["--chdir=sub"]),
        &[],
        &ctx(),
    )
    .unwrap();
    assert_eq!(rel.spec.workdir.as_deref(), Some("/home/ada/run/sub"));
    let gpu = job(
        "p.sh",
        "#!/bin/sh\n#SBATCH --gres=gpu:a100:2\n",
        &[],
        &[],
        &ctx(),
    )
    .unwrap();
    assert_eq!(gpu.spec.resources.gpu.count, 2);
    assert_eq!(gpu.spec.resources.gpu.models, s(&["a100"]));
}

#[test]
fn output_patterns_become_shell_words() {
    assert_eq!(
        output_path("out-%A_%a.txt", "ada"),
        "out-${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}.txt"
    );
    assert_eq!(
        output_path("%x-%u-%j.log", "ada"),
        "${SLURM_JOB_NAME}-ada-${SLURM_JOB_ID}.log"
    );
    assert_eq!(output_path("100%%", ""), "100%");
    assert_eq!(
        output_path("t%4a", ""),
        "t$(printf '%04d' \"$SLURM_ARRAY_TASK_ID\")"
    );
    assert_eq!(output_path("a\"$b`c", ""), "a\\\"\\$b\\`c");
    assert_eq!(output_path("%u", ""), "${USER:-unknown}");
    assert_eq!(output_path("%q", ""), "%q");
}

/// The job's command, run by a real shell with the environment a slave gives task 2 of
/// job 41: the script sees its arguments, its array id and its variables, and writes where
/// `-o` says.
#[test]
fn the_prelude_runs_the_script_unchanged() {
    let dir = std::env::temp_dir().join(format!("hetsched-sbatch-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = "#!/bin/sh\n#SBATCH --array=1,4,9\n#SBATCH -o res-%A_%a.txt\n\
echo \"args=$1,$2 id=$SLURM_ARRAY_TASK_ID n=$SLURM_NTASKS name=$SLURM_JOB_NAME\"\n\
echo oops >&2\n\
[ -z \"$HETSCHED_SBATCH_SCRIPT\" ] && echo script-var-gone\n";
    let mut c = ctx();
    c.cwd = dir.display().to_string();
    let j = job("t.sh", script, &[], &s(&["x", "y z"]), &c).unwrap();
    let status = std::process::Command::new(&j.spec.command[0])
        .args(&j.spec.command[1..])
        .current_dir(&dir)
        .env_clear()
        .envs(&j.spec.env)
        .env("HETSCHED_TASK_INDEX", "2")
        .env("SLURM_JOB_ID", "41")
        .env("SLURM_ARRAY_JOB_ID", "41")
        .status()
        .unwrap();
    assert!(status.success());
    let out = std::fs::read_to_string(dir.join("res-41_9.txt")).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(
        out,
        "args=x,y z id=9 n=1 name=t.sh\noops\nscript-var-gone\n"
    );
}
