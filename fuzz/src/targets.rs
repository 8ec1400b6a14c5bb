//! The fuzz targets, one plain function each. A target feeds its bytes to one decoder or
//! parser exactly as the product does and checks what must hold for any input: no panic,
//! no endless loop, and where the decoder also encodes, that what it accepted re-encodes to
//! the same bytes. Errors are fine (bad input gets a clear error); a panic is a bug.
//!
//! Also compiled by the workspace test `tests/fuzz_corpus.rs` (through `#[path]`), so it uses
//! only crates the root package depends on.

use hetsched_common::wire::{decode_payload, encode_frame, FrameLimits, DEFAULT_MAX_FRAME};
use hetsched_master::http_input;
use hetsched_master_core::plan::makespan;
use hetsched_master_core::sched::index::trace;
use std::time::Duration;

/// One fuzz target: its name (the folder under `fuzz/corpus/`) and its function.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, by name.
pub const TARGETS: &[Target] = &[
    ("frame", frame),
    ("message", message),
    ("raft_entry", raft_entry),
    ("jobspec_toml", jobspec_toml),
    ("jobspec_json", jobspec_json),
    ("priority", priority),
    ("trace_csv", trace_csv),
    ("plan_text", plan_text),
    ("plan_json", plan_json),
    ("engines", engines),
    ("program", program),
    ("http", http),
];

/// Largest instance the planner targets plan: bigger inputs are parsed only, so that a run
/// measures the parser and the planner's correctness, not its running time.
const PLAN_MAX_JOBS: usize = 12;
const PLAN_MAX_BLOCKS: usize = 64;
const PLAN_MAX_CORES: usize = 16;

fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// The frame reader on a stream of bytes (every port reads this first), then the envelope
/// decoder on every frame it yields.
pub fn frame(data: &[u8]) {
    thread_local! {
        static RT: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a current-thread runtime");
    }
    let limits = FrameLimits {
        max_frame: 64 * 1024,
        partial_timeout: Duration::from_secs(1),
    };
    RT.with(|rt| {
        rt.block_on(async {
            let mut stream = data;
            // Every frame consumes at least its 4-byte prefix, so this ends.
            for _ in 0..=data.len() {
                match hetsched_common::wire::read_frame(&mut stream, limits).await {
                    Ok(Some(payload)) => {
                        assert!(payload.len() <= limits.max_frame, "frame over the cap");
                        let _ = decode_payload(&payload);
                    }
                    Ok(None) | Err(_) => return,
                }
            }
            panic!("the frame reader did not consume its input");
        })
    });
}

/// The envelope decoder (every message of every port). What it accepts must re-encode, and
/// re-encoding is stable: decode(encode(m)) encodes to the same bytes.
pub fn message(data: &[u8]) {
    let Ok(env) = decode_payload(data) else {
        return;
    };
    let Ok(once) = encode_frame(&env, DEFAULT_MAX_FRAME) else {
        return; // only a payload over the cap may fail to encode
    };
    let again = decode_payload(&once[4..]).expect("an encoded envelope decodes");
    let twice = encode_frame(&again, DEFAULT_MAX_FRAME).expect("it encoded before");
    assert_eq!(once, twice, "re-encoding changed the message");
}

/// A Raft log entry's command, as a replica decodes it when it applies or replays the log.
pub fn raft_entry(data: &[u8]) {
    let Ok(env) = hetsched_master_core::CommandEnvelope::decode(data) else {
        return;
    };
    let once = env.encode();
    let again = hetsched_master_core::CommandEnvelope::decode(&once).expect("re-decodes");
    assert_eq!(once, again.encode(), "re-encoding changed the command");
}

fn jobspec(file: &str, data: &[u8]) {
    let Some(t) = text(data) else { return };
    if let Ok(f) = hetsched_common::jobfile::parse_job_file(file, t) {
        let _ = f.to_spec("fuzz");
    }
}

/// A job spec file in TOML (`submit --file job.toml`).
pub fn jobspec_toml(data: &[u8]) {
    jobspec("job.toml", data);
}

/// A job spec file in JSON (`submit --file job.json`).
pub fn jobspec_json(data: &[u8]) {
    jobspec("job.json", data);
}

/// The priority configuration (`config apply FILE`).
pub fn priority(data: &[u8]) {
    let Some(t) = text(data) else { return };
    let _ = hetsched_common::priority::parse_priority_toml(t);
}

/// The trace readers (`sim`): the first byte picks node list, pod list, or the pod list
/// with its header kept.
pub fn trace_csv(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let Some(t) = text(rest) else { return };
    match which % 3 {
        0 => drop(trace::parse_nodes(t)),
        1 => drop(trace::parse_pods(t)),
        _ => drop(trace::parse_pod_list(t)),
    }
}

fn plan_small(inst: &makespan::Instance) {
    let blocks: usize = inst.jobs().iter().map(|j| j.blocks.len()).sum();
    if inst.jobs().len() > PLAN_MAX_JOBS
        || blocks > PLAN_MAX_BLOCKS
        || inst.total_cores() > PLAN_MAX_CORES
    {
        return;
    }
    // A plan error means a schedule the planner built failed its own validator: a bug.
    let plan = makespan::plan(inst).unwrap_or_else(|e| panic!("{e}"));
    let eval = makespan::validate(inst, &plan.schedule).expect("the chosen schedule is valid");
    assert!(eval.makespan.is_finite(), "makespan {}", eval.makespan);
    assert!(
        plan.makespan + 1e-6 * plan.makespan.abs().max(1.0) >= plan.lower_bound,
        "makespan {} below the lower bound {}",
        plan.makespan,
        plan.lower_bound
    );
}

/// The planner's course text format (`plan-batch FILE`), planned when small.
pub fn plan_text(data: &[u8]) {
    let Some(t) = text(data) else { return };
    if let Ok(inst) = makespan::parse_text(t) {
        plan_small(&inst);
    }
}

/// The planner's JSON format with replicas (`plan-batch FILE.json`), planned when small.
pub fn plan_json(data: &[u8]) {
    let Some(t) = text(data) else { return };
    if let Ok(inst) = makespan::parse_json(t) {
        plan_small(&inst);
    }
}

/// The slave's engines file (`slave --engines FILE`), then the engine set built from it.
pub fn engines(data: &[u8]) {
    let Some(t) = text(data) else { return };
    if let Ok(f) = hetsched_slave::engine::EnginesFile::parse(t, "fuzz.toml") {
        let _ = hetsched_slave::engine::EngineSet::new(&f, 4, 2, true);
    }
}

/// A program file (`submit --program FILE`).
pub fn program(data: &[u8]) {
    let Some(t) = text(data) else { return };
    let _ = hetsched_common::program::parse_program(t, "fuzz.toml");
}

/// What the HTTP API reads from a request: the first byte picks the submit body, the drain
/// body, or a listing's, a log's or a read's query string.
pub fn http(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 5 {
        0 => drop(http_input::submit_body(rest)),
        1 => drop(http_input::drain_body(rest)),
        2 => {
            if let Some(q) = text(rest) {
                if let Ok(l) = http_input::query::<http_input::ListQuery>(q) {
                    let _ = l.filter();
                }
            }
        }
        3 => {
            if let Some(q) = text(rest) {
                if let Ok(l) = http_input::query::<http_input::LogsQuery>(q) {
                    let _ = l.stderr();
                }
            }
        }
        _ => {
            if let Some(q) = text(rest) {
                let _ = http_input::query::<http_input::StaleQuery>(q);
            }
        }
    }
}
