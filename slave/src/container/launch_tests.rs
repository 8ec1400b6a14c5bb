//! The config a container attempt gets, and its user from the image.

use super::*;

fn image() -> ImageConfig {
    ImageConfig {
        entrypoint: vec![],
        cmd: vec!["/bin/sh".into()],
        env: vec![
            "PATH=/bin".into(),
            "FROM_IMAGE=1".into(),
            "SHARED=image".into(),
        ],
        working_dir: "/srv".into(),
        user: "app".into(),
    }
}

#[test]
fn the_job_overrides_cmd_env_workdir_and_the_runtime_gets_no_limits() {
    let task = TaskSide {
        argv: vec!["id".into(), "-u".into()],
        env: vec![
            ("SHARED".into(), "task".into()),
            ("HETSCHED_TASK_ID".into(), "7".into()),
        ],
        workdir: Some("/data".into()),
        run_as: None,
        network: None,
    };
    let spec = config(
        &image(),
        &task,
        (1000, 1000),
        Some("/hetsched-1/task-7-1".into()),
        "h",
    )
    .expect("config");
    let p = spec.process().as_ref().expect("process");
    assert_eq!(
        p.args().as_deref(),
        Some(&["id".to_string(), "-u".to_string()][..])
    );
    let env = p.env().clone().unwrap_or_default();
    assert!(env.contains(&"SHARED=task".to_string()) && !env.contains(&"SHARED=image".to_string()));
    assert!(env.contains(&"FROM_IMAGE=1".to_string()));
    assert!(env.contains(&"HETSCHED_TASK_ID=7".to_string()));
    assert_eq!(p.cwd(), Path::new("/data"));
    assert_eq!((p.user().uid(), p.user().gid()), (1000, 1000));
    assert_eq!(p.no_new_privileges(), Some(true));
    let linux = spec.linux().as_ref().expect("linux");
    assert_eq!(
        linux.cgroups_path().as_deref(),
        Some(Path::new("/hetsched-1/task-7-1"))
    );
    assert!(linux.resources().is_none(), "the slave's limits stand");
    let ns: Vec<_> = linux
        .namespaces()
        .clone()
        .unwrap_or_default()
        .iter()
        .map(|n| n.typ())
        .collect();
    for t in [
        LinuxNamespaceType::Pid,
        LinuxNamespaceType::Mount,
        LinuxNamespaceType::Ipc,
        LinuxNamespaceType::Uts,
    ] {
        assert!(ns.contains(&t), "{t:?}");
    }
    assert!(
        !ns.contains(&LinuxNamespaceType::Network),
        "the host's network"
    );
    assert!(!ns.contains(&LinuxNamespaceType::User), "no user namespace");
    // The image's cmd when the job gives none; an entrypoint stays in front.
    assert_eq!(process_args(&image(), &[]), ["/bin/sh"]);
    let ep = ImageConfig {
        entrypoint: vec!["/init".into()],
        ..image()
    };
    assert_eq!(process_args(&ep, &["a".into()]), ["/init", "a"]);
    let empty = ImageConfig {
        cmd: vec![],
        ..image()
    };
    assert!(config(&empty, &TaskSide::default(), (0, 0), None, "h").is_err());
}

#[test]
fn users_resolve_in_the_image() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let etc = tmp.path().join("etc");
    std::fs::create_dir(&etc).expect("mkdir");
    std::fs::write(
        etc.join("passwd"),
        "root:x:0:0::/:/bin/sh\napp:x:1000:1001::/:/bin/sh\n",
    )
    .expect("passwd");
    std::fs::write(etc.join("group"), "root:x:0:\nstaff:x:50:\n").expect("group");
    let r = |u: &str| resolve_user(tmp.path(), u);
    assert_eq!(r(""), Ok((0, 0)));
    assert_eq!(r("app"), Ok((1000, 1001)));
    assert_eq!(r("1000"), Ok((1000, 1001)));
    assert_eq!(r("4242"), Ok((4242, 0)));
    assert_eq!(r("app:staff"), Ok((1000, 50)));
    assert_eq!(r("5:6"), Ok((5, 6)));
    assert!(r("nobody")
        .unwrap_err()
        .contains("not in the image's /etc/passwd"));
    assert!(r("app:nogroup").unwrap_err().contains("/etc/group"));
}

#[test]
fn the_runtime_gets_the_attempts_own_cgroup() {
    let root = tempfile::tempdir().expect("tempdir");
    for c in ["cpu", "memory"] {
        let d = root.path().join(c);
        std::fs::create_dir_all(&d).expect("mkdir");
    }
    std::fs::write(root.path().join("cpu/cpu.cfs_quota_us"), "-1").expect("w");
    std::fs::write(root.path().join("memory/memory.limit_in_bytes"), "0").expect("w");
    let cgs = crate::cgroup::Cgroups::detect(root.path(), "4:cpu:/a\n5:memory:/a\n", "s");
    let cg = cgs.attempt("task-7-1");
    assert_eq!(
        cgroups_path(Some(&cg), root.path()).as_deref(),
        Some("/a/hetsched-s/task-7-1")
    );
    let uneven = crate::cgroup::Cgroups::detect(root.path(), "4:cpu:/a\n5:memory:/b\n", "t");
    assert_eq!(
        cgroups_path(Some(&uneven.attempt("task-7-1")), root.path()),
        None
    );
    assert_eq!(cgroups_path(None, root.path()), None);
}

/// `--network none`: the container gets a network namespace of its own (the runtime brings
/// up its loopback); `host` and no choice keep the host's.
#[test]
fn network_none_gives_the_container_its_own_network_namespace() {
    let has_netns = |network: Option<&str>| {
        let task = TaskSide {
            network: network.map(str::to_string),
            ..TaskSide::default()
        };
        let spec = config(&image(), &task, (0, 0), None, "h").expect("config");
        spec.linux()
            .as_ref()
            .and_then(|l| l.namespaces().clone())
            .unwrap_or_default()
            .iter()
            .any(|n| n.typ() == LinuxNamespaceType::Network)
    };
    assert!(has_netns(Some("none")));
    assert!(!has_netns(Some("host")));
    assert!(!has_netns(None));
}
