//! Writes the binary starting seeds (frames, envelopes, Raft log entries) into
//! `fuzz/seeds/<target>/`: real encodings of real messages, which a fuzzer cannot easily
//! guess. Text targets' seeds are plain files kept in the repository.
//!
//!   cargo afl build --release && target/release/make_seeds seeds

use hetsched_common::jobfile::parse_job_file;
use hetsched_common::protocol::{ClientRequest, ErrorKind, ErrorReply, ListFilter, Message};
use hetsched_common::wire::{encode_frame, Envelope, DEFAULT_MAX_FRAME};
use hetsched_common::{ClientRequestId, GpuDevice, JobId, MasterId, NodeId, NodeResources, TaskId};
use hetsched_master_core::{Command, CommandEnvelope};
use std::collections::BTreeMap;
use std::path::Path;

fn write(dir: &Path, target: &str, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let d = dir.join(target);
    std::fs::create_dir_all(&d)?;
    std::fs::write(d.join(name), bytes)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "seeds".into());
    let dir = Path::new(&dir);
    let spec = parse_job_file(
        "job.toml",
        "name = \"seed\"\ncommand = [\"sleep\", \"1\"]\ncount = 2\n[resources]\ncpus = 1\nmem = 64\ngpus = 0.5\n",
    )?
    .to_spec("alice")?;
    let messages = vec![
        Message::Client(ClientRequest::Status { stale: true }),
        Message::Client(ClientRequest::Jobs {
            stale: false,
            filter: ListFilter {
                job: Some(JobId(3)),
                state: Some("running".into()),
                user: Some("alice".into()),
                limit: Some(10),
            },
        }),
        Message::Client(ClientRequest::Submit {
            request: ClientRequestId(7),
            spec: spec.clone(),
            allow_unplaceable: true,
        }),
        Message::Client(ClientRequest::Cancel {
            request: ClientRequestId(8),
            job: JobId(1),
        }),
        Message::Error(ErrorReply::new(ErrorKind::Malformed, "bad frame")),
        Message::Raft {
            from: MasterId(2),
            msgs: vec![serde_bytes::ByteBuf::from(vec![8, 1, 16, 2])],
        },
    ];
    let mut stream = Vec::new();
    for (i, m) in messages.into_iter().enumerate() {
        let frame = encode_frame(&Envelope::new(i as u64 + 1, m), DEFAULT_MAX_FRAME)?;
        write(dir, "message", &format!("msg-{i}"), &frame[4..])?;
        write(dir, "frame", &format!("frame-{i}"), &frame)?;
        stream.extend_from_slice(&frame);
    }
    write(dir, "frame", "stream", &stream)?;

    let capacity = NodeResources {
        cpu_milli: 4000,
        mem_mib: 8192,
        gpus: vec![GpuDevice {
            model: "V100".into(),
            free_milli: 1000,
            emulated: true,
        }],
        engines: BTreeMap::new(),
    };
    let commands = vec![
        Command::RegisterNode {
            key: 11,
            node: None,
            name: "s1".into(),
            addr: "127.0.0.1:7000".into(),
            capacity,
            labels: BTreeMap::from([("zone".to_string(), "a".to_string())]),
            partitions: vec!["default".into()],
        },
        Command::NodeDown { node: NodeId(1) },
        Command::NodeUp { node: NodeId(1) },
        Command::SubmitJob { spec },
        Command::CancelJob { job: JobId(1) },
        Command::TaskStarted {
            node: NodeId(1),
            task: TaskId(1),
            attempt: 1,
        },
    ];
    for (i, c) in commands.into_iter().enumerate() {
        let env = CommandEnvelope {
            at_ms: 1_700_000_000_000 + i as u64,
            request: Some(ClientRequestId(i as u64)),
            command: c,
        };
        write(dir, "raft_entry", &format!("cmd-{i}"), &env.encode())?;
    }
    Ok(())
}
