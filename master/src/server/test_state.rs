//! An applied state for the handlers' unit tests: nodes, jobs and tokens put in through
//! `apply`, as the log would put them; no sockets, no runtime.

use hetsched_common::protocol::TokenRole;
use hetsched_common::{JobId, JobSpec, NodeId, NodeResources, ResourceRequest, TaskId};
use hetsched_master_core::state::{Command, CommandEnvelope, Outcome, Replica, TokenRecord};

/// The leader's clock of the entries applied here.
pub const AT_MS: u64 = 1_000_000;

/// A state and the index of its next entry.
pub struct TestState {
    pub state: Replica,
    index: u64,
}

impl TestState {
    pub fn new() -> Self {
        Self {
            state: Replica::new(),
            index: 0,
        }
    }

    /// Applies `command` as the next entry.
    pub fn apply(&mut self, command: Command) -> Outcome {
        self.index += 1;
        self.state.apply(
            self.index,
            CommandEnvelope {
                at_ms: AT_MS + self.index,
                request: None,
                command,
            },
        )
    }

    /// Registers node `name` with `cpus` cores.
    pub fn node(&mut self, key: u64, name: &str, cpus: u64) -> NodeId {
        match self.apply(Command::RegisterNode {
            key,
            node: None,
            name: name.into(),
            addr: format!("127.0.0.1:{}", 20000 + key),
            capacity: NodeResources {
                cpu_milli: cpus * 1000,
                mem_mib: 4096,
                ..Default::default()
            },
            labels: Default::default(),
            partitions: Vec::new(),
        }) {
            Outcome::Registered { node } => node,
            o => panic!("not registered: {o:?}"),
        }
    }

    /// Submits `count` tasks of one core each as `user`.
    pub fn job(&mut self, user: &str, count: u32) -> (JobId, Vec<TaskId>) {
        match self.apply(Command::SubmitJob {
            spec: spec(user, count, 1),
        }) {
            Outcome::Submitted { job, tasks } => (job, tasks),
            o => panic!("not submitted: {o:?}"),
        }
    }

    /// A token for `user` with `role`, valid until `expires_ms`: the whole token.
    pub fn token(&mut self, user: &str, role: TokenRole, expires_ms: Option<u64>) -> String {
        let g = hetsched_common::tokens::generate().expect("random source");
        let token = TokenRecord {
            accessor: g.accessor,
            user: user.into(),
            role,
            salt: g.salt,
            hash: g.hash,
            created_ms: 0,
            expires_ms,
        };
        let o = self.apply(Command::CreateToken {
            token,
            bootstrap: false,
        });
        assert!(matches!(o, Outcome::Ignored(_)), "token not created: {o:?}");
        g.token
    }
}

/// A job of `count` tasks of `cpus` cores each, as `user`.
pub fn spec(user: &str, count: u32, cpus: u64) -> JobSpec {
    JobSpec {
        name: "j".into(),
        user: user.into(),
        partition: "default".into(),
        resources: ResourceRequest {
            cpu_milli: cpus * 1000,
            mem_mib: 64,
            ..Default::default()
        },
        count,
        command: vec!["true".into()],
        ..Default::default()
    }
}
