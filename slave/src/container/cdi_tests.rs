use super::*;
use oci_spec::runtime::Process;

/// A spec shaped as `nvidia-ctk cdi generate --format json` writes it (two GPUs, shortened).
const SAMPLE: &str = r#"{
  "cdiVersion": "0.5.0",
  "kind": "nvidia.com/gpu",
  "devices": [
    {"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0", "major": 195, "minor": 0}]}},
    {"name": "1", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia1", "major": 195, "minor": 1}]}},
    {"name": "all", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}, {"path": "/dev/nvidia1"}]}}
  ],
  "containerEdits": {
    "env": ["NVIDIA_VISIBLE_DEVICES=void"],
    "deviceNodes": [{"path": "/dev/nvidiactl", "major": 195, "minor": 255},
                    {"path": "/dev/nvidia-uvm", "hostPath": "/dev/nvidia-uvm", "major": 510, "minor": 0}],
    "hooks": [{"hookName": "createContainer", "path": "/usr/bin/nvidia-ctk",
               "args": ["nvidia-ctk", "hook", "update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"]},
              {"hookName": "sometime", "path": "/bin/true"}],
    "mounts": [{"hostPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
                "containerPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
                "options": ["ro", "nosuid", "nodev", "bind"]},
               {"hostPath": "/usr/bin/nvidia-smi", "containerPath": "/usr/bin/nvidia-smi",
                "options": ["ro", "nosuid", "nodev", "bind"]}]
  }
}"#;

#[test]
fn the_spec_in_the_first_directory_that_has_one_is_read_and_yaml_is_skipped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (run, etc) = (dir.path().join("run"), dir.path().join("etc"));
    std::fs::create_dir_all(&run).expect("mkdir");
    std::fs::create_dir_all(&etc).expect("mkdir");
    let dirs = [run.as_path(), etc.as_path()];
    assert!(find_gpu_spec(&dirs).is_none());
    std::fs::write(etc.join("nvidia.json"), SAMPLE).expect("write");
    std::fs::write(run.join("nvidia.yaml"), "kind: nvidia.com/gpu\n").expect("write");
    std::fs::write(run.join("other.json"), r#"{"kind": "vendor.com/fpga"}"#).expect("write");
    // A broken JSON file (first by name) is skipped, not a panic nor an end of the search.
    std::fs::write(run.join("broken.json"), "{").expect("write");
    let e = read_spec(&run.join("broken.json")).expect_err("broken");
    assert!(e.to_string().contains("broken.json"), "{e}");
    let (file, spec) = find_gpu_spec(&dirs).expect("found");
    assert_eq!(file, etc.join("nvidia.json"));
    assert_eq!(spec.devices.len(), 3);
}

#[test]
fn the_granted_devices_common_edits_mounts_env_and_hooks_go_in() {
    let spec: CdiSpec = serde_json::from_str(SAMPLE).expect("sample");
    let file = Path::new("/etc/cdi/nvidia.json");
    let edits = edits_for(file, &spec, &[1]).expect("edits");
    let paths: Vec<_> = edits.device_nodes.iter().map(|d| d.path.clone()).collect();
    assert_eq!(
        paths,
        ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia1"].map(PathBuf::from)
    );
    let e = edits_for(file, &spec, &[2]).expect_err("no device 2");
    assert!(e.to_string().contains("nvidia.com/gpu=2"), "{e}");

    let mut oci = Spec::default();
    let mut process = Process::default();
    process.set_env(Some(vec![
        "PATH=/bin".into(),
        "NVIDIA_VISIBLE_DEVICES=all".into(),
    ]));
    oci.set_process(Some(process));
    apply(&mut oci, &edits).expect("apply");
    let linux = oci.linux().as_ref().expect("linux");
    let devs: Vec<_> = linux
        .devices()
        .clone()
        .unwrap_or_default()
        .iter()
        .map(|d| (d.path().clone(), d.major(), d.minor()))
        .collect();
    assert_eq!(
        devs,
        [
            (PathBuf::from("/dev/nvidiactl"), 195, 255),
            (PathBuf::from("/dev/nvidia-uvm"), 510, 0),
            (PathBuf::from("/dev/nvidia1"), 195, 1)
        ]
    );
    assert_eq!(
        crate::container::devices::allowed_devices(&oci),
        [(195, 255), (510, 0), (195, 1)],
        "device 0 was not granted"
    );
    let mounts: Vec<_> = oci
        .mounts()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.typ().as_deref() == Some("bind"))
        .map(|m| m.destination().clone())
        .collect();
    assert!(
        mounts.contains(&PathBuf::from("/usr/bin/nvidia-smi")),
        "{mounts:?}"
    );
    let env = oci.process().as_ref().and_then(|p| p.env().clone());
    assert_eq!(
        env.unwrap_or_default(),
        ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=void"]
    );
    let hooks = oci.hooks().as_ref().expect("hooks");
    let create = hooks.create_container().clone().unwrap_or_default();
    assert_eq!(create.len(), 1, "the unknown hook point is skipped");
    assert_eq!(create[0].path(), Path::new("/usr/bin/nvidia-ctk"));
}

#[test]
fn a_node_without_numbers_must_exist_on_the_host() {
    let edits = Edits {
        device_nodes: vec![DeviceNode {
            path: "/dev/nvidia9".into(),
            host_path: Some("/nonexistent/nvidia9".into()),
            ..Default::default()
        }],
        ..Default::default()
    };
    let e = apply(&mut Spec::default(), &edits).expect_err("no such node");
    assert!(e.to_string().contains("/nonexistent/nvidia9"), "{e}");
    // /dev/null is a character device: its numbers are read from the host (1, 3).
    let edits = Edits {
        device_nodes: vec![DeviceNode {
            path: "/dev/null-in".into(),
            host_path: Some("/dev/null".into()),
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut oci = Spec::default();
    apply(&mut oci, &edits).expect("apply");
    let d = oci.linux().as_ref().and_then(|l| l.devices().clone());
    let d = d.unwrap_or_default();
    assert_eq!((d[0].major(), d[0].minor()), (1, 3));
}
