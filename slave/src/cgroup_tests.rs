//! Tests of the cgroup handling against fake trees.

use super::*;
use crate::cgroup_usage::{cpu_stat_usage_usec, CgroupUsage};

const V1_SELF: &str = "4:memory:/outer/abc\n2:cpu,cpuacct:/\n1:name=systemd:/x\n0::/\n";

fn touch(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, text).expect("write");
}

#[test]
fn own_paths() {
    assert_eq!(own_path(V1_SELF, "memory").as_deref(), Some("/outer/abc"));
    assert_eq!(own_path(V1_SELF, "cpu").as_deref(), Some("/"));
    assert_eq!(own_path(V1_SELF, "").as_deref(), Some("/"));
    assert_eq!(own_path("0::/a/b\n", "").as_deref(), Some("/a/b"));
    assert_eq!(own_path("garbage", "cpu"), None);
}

#[test]
fn quota_of_cpus() {
    assert_eq!(cfs_quota_us(500), Some(50_000));
    assert_eq!(cfs_quota_us(2500), Some(250_000));
    assert_eq!(cfs_quota_us(1), Some(CFS_QUOTA_MIN_US));
    assert_eq!(cfs_quota_us(0), None);
}

#[test]
fn oom_counter_parsing() {
    assert_eq!(
        oom_kills_of("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"),
        2
    );
    assert_eq!(
        oom_kills_of("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n"),
        1
    );
    assert_eq!(oom_kills_of("nothing"), 0);
}

#[test]
fn fake_v1_tree_gets_the_expected_files() {
    let root = tempfile::tempdir().expect("tempdir");
    let r = root.path();
    touch(&r.join("cpu/cpu.cfs_quota_us"), "-1\n");
    touch(
        &r.join("memory/memory.limit_in_bytes"),
        "9223372036854771712\n",
    );
    // The slave's memory cgroup supports swap accounting.
    touch(
        &r.join("memory/outer/abc/hetsched-s1/memory.memsw.limit_in_bytes"),
        "9223372036854771712\n",
    );
    let cgs = Cgroups::detect(r, V1_SELF, "s1");
    assert_eq!(cgs.mode(), CgroupMode::V1);
    let cg = cgs
        .create(
            "task-17-1",
            Limits {
                cpu_milli: 1500,
                mem_mib: 64,
            },
        )
        .expect("create");
    let cpu = r.join("cpu/hetsched-s1/task-17-1");
    let mem = r.join("memory/outer/abc/hetsched-s1/task-17-1");
    let read = |p: PathBuf| std::fs::read_to_string(p).expect("read");
    assert_eq!(read(cpu.join("cpu.cfs_period_us")), "100000");
    assert_eq!(read(cpu.join("cpu.cfs_quota_us")), "150000");
    assert_eq!(read(mem.join("memory.limit_in_bytes")), "67108864");
    assert_eq!(read(mem.join("memory.memsw.limit_in_bytes")), "67108864");
    assert_eq!(
        cg.procs_files(),
        vec![cpu.join("cgroup.procs"), mem.join("cgroup.procs")]
    );
    assert_eq!(cg.oom_counter_file(), Some(mem.join("memory.oom_control")));
    // Live change of the CPU limit.
    cg.set_cpu(500).expect("set cpu");
    assert_eq!(read(cpu.join("cpu.cfs_quota_us")), "50000");
    touch(
        &mem.join("memory.oom_control"),
        "oom_kill_disable 0\noom_kill 1\n",
    );
    assert_eq!(cg.oom_kills(), 1);

    // Without swap accounting, swappiness closes swap instead.
    let r2 = tempfile::tempdir().expect("tempdir");
    touch(&r2.path().join("memory/memory.limit_in_bytes"), "1\n");
    let cgs2 = Cgroups::detect(r2.path(), V1_SELF, "s2");
    cgs2.create(
        "task-1-1",
        Limits {
            cpu_milli: 100,
            mem_mib: 1,
        },
    )
    .expect("create");
    let mem2 = r2.path().join("memory/outer/abc/hetsched-s2/task-1-1");
    assert_eq!(read(mem2.join("memory.swappiness")), "0");
    assert!(!mem2.join("memory.memsw.limit_in_bytes").exists());

    // Stale attempt cgroups go; kept ones stay.
    cgs.create(
        "task-18-2",
        Limits {
            cpu_milli: 100,
            mem_mib: 0,
        },
    )
    .expect("create");
    let keep: BTreeSet<String> = ["task-18-2".to_string()].into();
    assert_eq!(cgs.clean_stale(&keep), vec!["task-17-1".to_string()]);
    assert!(!cpu.exists() && !mem.exists());
    assert!(r.join("cpu/hetsched-s1/task-18-2").exists());
}

#[test]
fn fake_v2_tree_gets_the_expected_files() {
    let root = tempfile::tempdir().expect("tempdir");
    let r = root.path();
    touch(&r.join("cgroup.controllers"), "cpuset cpu io memory pids\n");
    touch(
        &r.join("a/b/hetsched-s1/cgroup.controllers"),
        "cpu memory pids\n",
    );
    touch(&r.join("a/b/hetsched-s1/memory.swap.max"), "max\n");
    let cgs = Cgroups::detect(r, "0::/a/b\n", "s1");
    assert_eq!(cgs.mode(), CgroupMode::V2);
    let read = |p: PathBuf| std::fs::read_to_string(p).expect("read");
    assert_eq!(read(r.join("a/b/cgroup.subtree_control")), "+cpu +memory");
    assert_eq!(
        read(r.join("a/b/hetsched-s1/cgroup.subtree_control")),
        "+cpu +memory"
    );
    let cg = cgs
        .create(
            "task-5-3",
            Limits {
                cpu_milli: 500,
                mem_mib: 100,
            },
        )
        .expect("create");
    let d = r.join("a/b/hetsched-s1/task-5-3");
    assert_eq!(read(d.join("cpu.max")), "50000 100000");
    assert_eq!(read(d.join("memory.max")), "104857600");
    assert_eq!(read(d.join("memory.swap.max")), "0");
    assert_eq!(cg.procs_files(), vec![d.join("cgroup.procs")]);
    assert_eq!(cg.oom_counter_file(), Some(d.join("memory.events")));
    cg.set_cpu(0).expect("unlimit");
    assert_eq!(read(d.join("cpu.max")), "max 100000");
    cg.set_cpu(2000).expect("two cores");
    assert_eq!(read(d.join("cpu.max")), "200000 100000");
    cg.remove();
    assert!(!d.exists());

    // Controllers delegated neither under the slave's cgroup nor at the top: no limits, and
    // the node says so.
    let r2 = tempfile::tempdir().expect("tempdir");
    touch(&r2.path().join("cgroup.controllers"), "cpu memory\n");
    touch(
        &r2.path().join("x/hetsched-s1/cgroup.controllers"),
        "pids\n",
    );
    touch(&r2.path().join("hetsched-s1/cgroup.controllers"), "pids\n");
    assert_eq!(
        Cgroups::detect(r2.path(), "0::/x\n", "s1").mode(),
        CgroupMode::None
    );
}

#[test]
fn v2_without_delegation_under_the_slave_uses_the_top_of_the_hierarchy() {
    // The slave shares its cgroup with other processes (as under `hetsched up`, or in a login
    // shell's scope): its child directory gets no cpu or memory controller. The top of the
    // hierarchy can enable them, so the tasks' cgroups go there.
    let root = tempfile::tempdir().expect("tempdir");
    let r = root.path();
    touch(&r.join("cgroup.controllers"), "cpuset cpu io memory pids\n");
    touch(&r.join("shared/scope/hetsched-s1/cgroup.controllers"), "");
    touch(
        &r.join("hetsched-s1/cgroup.controllers"),
        "cpu memory pids\n",
    );
    let cgs = Cgroups::detect(r, "0::/shared/scope\n", "s1");
    assert_eq!(cgs.mode(), CgroupMode::V2);
    let read = |p: PathBuf| std::fs::read_to_string(p).expect("read");
    assert_eq!(
        read(r.join("hetsched-s1/cgroup.subtree_control")),
        "+cpu +memory"
    );
    let limits = Limits {
        cpu_milli: 1500,
        mem_mib: 64,
    };
    let cg = cgs.create("task-9-1", limits).expect("create");
    let d = r.join("hetsched-s1/task-9-1");
    assert_eq!(read(d.join("cpu.max")), "150000 100000");
    assert_eq!(cg.procs_files(), vec![d.join("cgroup.procs")]);
    // Nothing is created in the shared cgroup for tasks.
    assert!(!r.join("shared/scope/hetsched-s1/task-9-1").exists());
}

#[test]
fn no_hierarchy_means_none() {
    let root = tempfile::tempdir().expect("tempdir");
    let cgs = Cgroups::detect(root.path(), V1_SELF, "s");
    assert_eq!(cgs.mode(), CgroupMode::None);
    let cg = cgs
        .create(
            "task-1-1",
            Limits {
                cpu_milli: 1,
                mem_mib: 1,
            },
        )
        .expect("nothing to do");
    assert!(cg.procs_files().is_empty());
    assert_eq!(cg.oom_kills(), 0);
}

#[test]
fn an_ended_attempts_cgroup_is_reused_by_the_next_with_the_same_limits() {
    let root = tempfile::tempdir().expect("tempdir");
    let r = root.path();
    touch(&r.join("cpu/cpu.cfs_quota_us"), "-1\n");
    touch(&r.join("memory/memory.limit_in_bytes"), "1\n");
    let cgs = Cgroups::detect(r, V1_SELF, "s1");
    let limits = Limits {
        cpu_milli: 1000,
        mem_mib: 16,
    };
    let cpu = r.join("cpu/hetsched-s1");
    let mem = r.join("memory/outer/abc/hetsched-s1");
    // What the kernel shows of an ended attempt: no process, memory left, OOM count.
    let ended = |name: &str, left: u64, ooms: u64| {
        touch(&cpu.join(name).join("cgroup.procs"), "");
        touch(&mem.join(name).join("cgroup.procs"), "");
        touch(
            &mem.join(name).join("memory.usage_in_bytes"),
            &format!("{left}\n"),
        );
        touch(
            &mem.join(name).join("memory.oom_control"),
            &format!("oom_kill_disable 0\noom_kill {ooms}\n"),
        );
    };
    let a = cgs.create("task-1-1", limits).expect("create");
    ended("task-1-1", 170 << 10, 0);
    // Marks the quota file: a reused cgroup is not written again.
    std::fs::write(cpu.join("task-1-1/cpu.cfs_quota_us"), "marked").expect("write");
    a.retire();
    assert!(!cpu.join("task-1-1").exists() && !mem.join("task-1-1").exists());
    let b = cgs.create("task-2-1", limits).expect("create");
    let read = |p: PathBuf| std::fs::read_to_string(p).expect("read");
    assert_eq!(read(cpu.join("task-2-1/cpu.cfs_quota_us")), "marked");
    assert_eq!(read(mem.join("task-2-1/memory.limit_in_bytes")), "16777216");
    // Other limits: a new cgroup.
    cgs.create(
        "task-3-1",
        Limits {
            cpu_milli: 2000,
            mem_mib: 16,
        },
    )
    .expect("create");
    assert_eq!(read(cpu.join("task-3-1/cpu.cfs_quota_us")), "200000");
    // An OOM kill counted, or too much memory left: the memory directory is removed, not
    // kept (the cpu one, which holds no memory state, is).
    ended("task-2-1", 0, 1);
    std::fs::write(mem.join("task-2-1/memory.limit_in_bytes"), "marked").expect("write");
    b.retire();
    assert!(!mem.join("task-2-1").exists());
    let c = cgs.create("task-4-1", limits).expect("create");
    assert_eq!(read(cpu.join("task-4-1/cpu.cfs_quota_us")), "marked");
    assert_eq!(read(mem.join("task-4-1/memory.limit_in_bytes")), "16777216");
    ended("task-4-1", 2 << 20, 0);
    std::fs::write(mem.join("task-4-1/memory.limit_in_bytes"), "marked").expect("write");
    c.retire();
    assert!(!mem.join("task-4-1").exists());
    let d = cgs.create("task-5-1", limits).expect("create");
    assert_eq!(read(mem.join("task-5-1/memory.limit_in_bytes")), "16777216");
    // A live CPU change: not kept. Spares of an earlier run go at start.
    d.set_cpu(500).expect("set cpu");
    ended("task-5-1", 0, 0);
    d.retire();
    assert!(!cpu.join("task-5-1").exists());
    // After kill_all found it empty, retire_emptied does not read cgroup.procs again: a
    // file that still names a process (as a live one would) keeps plain retire from reusing
    // the cgroup, and does not stop retire_emptied.
    for (name, emptied) in [("task-6-1", false), ("task-7-1", true)] {
        let e = cgs.create(name, limits).expect("create");
        ended(name, 0, 0);
        touch(&cpu.join(name).join("cgroup.procs"), "4242\n");
        std::fs::write(cpu.join(name).join("cpu.cfs_quota_us"), name).expect("write");
        if emptied {
            e.retire_emptied();
        } else {
            e.retire();
        }
        let next = cgs.create("task-8-1", limits).expect("create");
        let reused = read(cpu.join("task-8-1/cpu.cfs_quota_us")) == name;
        assert_eq!(reused, emptied, "{name}");
        next.remove();
    }
    std::fs::create_dir_all(cpu.join("spare-1-1")).expect("mkdir");
    cgs.clean_stale(&BTreeSet::new());
    assert!(!cpu.join("spare-1-1").exists());
}

#[test]
fn usage_is_read_from_a_separate_cpuacct_hierarchy_and_reset_on_reuse() {
    let root = tempfile::tempdir().expect("tempdir");
    let r = root.path();
    touch(&r.join("cpu/cpu.cfs_quota_us"), "-1\n");
    touch(&r.join("cpuacct/cpuacct.usage"), "0\n");
    touch(&r.join("memory/memory.limit_in_bytes"), "1\n");
    let cgs = Cgroups::detect(r, V1_SELF, "s1");
    let limits = Limits {
        cpu_milli: 1000,
        mem_mib: 16,
    };
    let a = cgs.create("task-1-1", limits).expect("create");
    let acct = r.join("cpuacct/hetsched-s1/task-1-1");
    let mem = r.join("memory/outer/abc/hetsched-s1/task-1-1");
    assert!(a.procs_files().contains(&acct.join("cgroup.procs")));
    // Nothing counted yet: no reading, not zero.
    assert_eq!(a.usage(), CgroupUsage::default());
    touch(&acct.join("cpuacct.usage"), "2500000000\n");
    touch(
        &mem.join("memory.max_usage_in_bytes"),
        &format!("{}\n", 300u64 << 20),
    );
    let u = a.usage();
    assert_eq!(u.cpu_s, Some(2.5));
    assert_eq!(u.peak_bytes, Some(300 << 20));
    // Ended and kept as a spare: the next attempt's counters start from zero.
    for d in [&r.join("cpu/hetsched-s1/task-1-1"), &acct, &mem] {
        touch(&d.join("cgroup.procs"), "");
    }
    touch(&mem.join("memory.usage_in_bytes"), "0\n");
    touch(&mem.join("memory.oom_control"), "oom_kill 0\n");
    a.retire();
    let b = cgs.create("task-2-1", limits).expect("create");
    let acct2 = r.join("cpuacct/hetsched-s1/task-2-1");
    assert_eq!(
        std::fs::read_to_string(acct2.join("cpuacct.usage")).expect("read"),
        "0"
    );
    assert_eq!(b.usage().cpu_s, Some(0.0));
    assert_eq!(b.usage().peak_bytes, Some(0));
}

#[test]
fn cpu_stat_usage() {
    assert_eq!(
        cpu_stat_usage_usec("usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n"),
        Some(1_500_000)
    );
    assert_eq!(cpu_stat_usage_usec("nr_periods 0\n"), None);
}
