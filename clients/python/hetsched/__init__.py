"""hetsched: the Python client of the hetsched cluster scheduler.

    from hetsched import Client
    c = Client.from_env()                       # the export lines of `hetsched up`
    job = c.submit(["python3", "train.py"], cpus=2, gpus=1)
    print(c.wait(job).state)                    # succeeded
"""

from .client import Client, JobRef, job_id
from .errors import (
    BadInput,
    Gone,
    HetschedError,
    NotFound,
    NotSupported,
    PermissionDenied,
    Unavailable,
)
from .types import Event, FlowSubmitted, Job, Node, Submitted, Task

__version__ = "0.1.0"

__all__ = [
    "BadInput",
    "Client",
    "Event",
    "FlowSubmitted",
    "Gone",
    "HetschedError",
    "Job",
    "JobRef",
    "Node",
    "NotFound",
    "NotSupported",
    "PermissionDenied",
    "Submitted",
    "Task",
    "Unavailable",
    "__version__",
    "job_id",
]
