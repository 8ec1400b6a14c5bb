//! The three queues of S3.1 (CPU, single-GPU, multi-GPU) as a plain classification.
//!
//! It sits below `state` because the replicated state names a task's queue in its views
//! (`tasks --json` `"queue"`); the scheduler's multi-queue stage re-exports it.

use hetsched_common::ResourceRequest;

/// GPU tasks asking this many GPUs or more queue in `gpu-multi`.
pub const MULTI_GPU_THRESHOLD: u32 = 4;

/// The queue a task waits in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QueueKind {
    /// GPU tasks asking [`MULTI_GPU_THRESHOLD`] GPUs or more.
    GpuMulti,
    /// GPU tasks asking fewer.
    GpuSingle,
    /// Tasks asking no GPU.
    Cpu,
}

impl QueueKind {
    /// Every queue, in the order the pipeline serves them.
    pub const ALL: [QueueKind; 3] = [QueueKind::GpuMulti, QueueKind::GpuSingle, QueueKind::Cpu];

    /// The queue of a task asking `req`.
    pub fn of(req: &ResourceRequest) -> Self {
        if req.gpu.is_none() {
            QueueKind::Cpu
        } else if req.gpu.count >= MULTI_GPU_THRESHOLD {
            QueueKind::GpuMulti
        } else {
            QueueKind::GpuSingle
        }
    }

    /// The name in `tasks --json` (`"queue"`) and `status --json` (`"queues"`).
    pub fn name(self) -> &'static str {
        match self {
            QueueKind::Cpu => "cpu",
            QueueKind::GpuSingle => "gpu-single",
            QueueKind::GpuMulti => "gpu-multi",
        }
    }

    /// Whether this is a GPU queue.
    pub fn is_gpu(self) -> bool {
        self != QueueKind::Cpu
    }
}
