//! hetsched chaos tool — **stub**. It will launch a local cluster, inject faults (kill, pause,
//! partition), record a history and check that no task was lost. Nothing is implemented yet;
//! the fault-injection tests of issue 2 and 3 live in the root package's `tests/` for now.
