//! S4 — DistBuckets placement index. STATUS: not implemented yet (issue 4).
