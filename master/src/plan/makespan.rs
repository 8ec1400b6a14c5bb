//! S2 — makespan planner for data-local batch jobs. STATUS: not implemented yet (issue 5).
