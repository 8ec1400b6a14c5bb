use super::*;
use hetsched_common::GpuDevice;
use std::collections::BTreeMap;

fn node(cores: u64, mem_mib: u64, gpus: &[&str]) -> NodeResources {
    NodeResources {
        cpu_milli: cores * 1000,
        mem_mib,
        gpus: gpus
            .iter()
            .map(|m| GpuDevice {
                model: m.to_string(),
                free_milli: GPU_MILLI_PER_DEVICE,
                emulated: true,
            })
            .collect(),
        engines: BTreeMap::new(),
    }
}

fn ask(cpu_milli: u64, mem_mib: u64, gpu: GpuRequest) -> ResourceRequest {
    ResourceRequest {
        cpu_milli,
        mem_mib,
        gpu,
        engines: BTreeMap::new(),
    }
}

fn why(req: &ResourceRequest, nodes: &[NodeResources]) -> Option<String> {
    unplaceable(req, nodes).map(|u| u.to_string())
}

#[test]
fn no_node_registered_refuses_nothing() {
    let huge = ask(1_000_000, 1 << 30, GpuRequest::whole(64));
    assert_eq!(unplaceable(&huge, &[]), None);
}

#[test]
fn a_request_that_fits_one_node_whole_capacity_is_placeable() {
    let nodes = [node(2, 4096, &[]), node(8, 1024, &["A10", "A10"])];
    assert_eq!(why(&ask(2000, 4096, GpuRequest::none()), &nodes), None);
    assert_eq!(why(&ask(8000, 1024, GpuRequest::whole(2)), &nodes), None);
    assert_eq!(why(&ask(500, 64, GpuRequest::fraction(300)), &nodes), None);
}

#[test]
fn too_many_cores_names_the_largest_node() {
    let nodes = [node(2, 4096, &[]), node(2, 4096, &[])];
    assert_eq!(
        why(&ask(1_000_000, 64, GpuRequest::none()), &nodes).as_deref(),
        Some("cpus 1000: no node has more than 2")
    );
    let mut half = node(2, 4096, &[]);
    half.cpu_milli = 2500;
    assert_eq!(
        why(&ask(3000, 64, GpuRequest::none()), &[half]).as_deref(),
        Some("cpus 3: no node has more than 2.5")
    );
}

#[test]
fn too_much_memory() {
    let nodes = [node(4, 4096, &[]), node(4, 2048, &[])];
    assert_eq!(
        why(&ask(1000, 8192, GpuRequest::none()), &nodes).as_deref(),
        Some("mem 8192: no node has more than 4096")
    );
}

#[test]
fn gpus_count_and_fraction_and_model() {
    let nodes = [node(8, 8192, &[]), node(8, 8192, &["A10", "T4", "A10"])];
    assert_eq!(
        why(&ask(1000, 64, GpuRequest::whole(4)), &nodes).as_deref(),
        Some("gpus 4: no node has more than 3")
    );
    let a10 = GpuRequest {
        count: 3,
        milli: GPU_MILLI_PER_DEVICE,
        models: vec!["A10".into()],
    };
    assert_eq!(
        why(&ask(1000, 64, a10), &nodes).as_deref(),
        Some("gpus 3: no node has more than 2 of model A10")
    );
    let h100 = GpuRequest {
        count: 1,
        milli: GPU_MILLI_PER_DEVICE,
        models: vec!["H100".into()],
    };
    assert_eq!(
        why(&ask(1000, 64, h100.clone()), &nodes).as_deref(),
        Some("gpu model H100: no node has one (nodes have A10, T4)")
    );
    assert_eq!(
        why(&ask(1000, 64, h100), &[node(2, 64, &[])]).as_deref(),
        Some("gpu model H100: no node has one (no node has a GPU)")
    );
    assert_eq!(
        why(
            &ask(1000, 64, GpuRequest::fraction(500)),
            &[node(2, 64, &[])]
        )
        .as_deref(),
        Some("gpus 0.5: no node has more than 0")
    );
}

#[test]
fn other_engines() {
    let mut n = node(4, 4096, &[]);
    n.engines.insert(EngineKind::Npu, 2);
    let mut req = ask(1000, 64, GpuRequest::none());
    req.engines.insert(EngineKind::Npu, 4);
    assert_eq!(
        why(&req, &[n]).as_deref(),
        Some("npu 4: no node has more than 2")
    );
}

#[test]
fn parts_that_fit_different_nodes_but_no_one_node() {
    // Many cores without a GPU, a GPU with few cores.
    let nodes = [node(16, 4096, &[]), node(2, 4096, &["A10"])];
    assert_eq!(
        why(&ask(8000, 64, GpuRequest::whole(1)), &nodes).as_deref(),
        Some("cpus 8, mem 64, gpus 1: no node has all of them at once")
    );
}
