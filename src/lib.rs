//! hetsched as a library, for its own binary and the integration tests: the local-cluster
//! launcher ([`local`]) that `hetsched up`, the benchmarks, `hetsched chaos run` and the tests
//! share.

pub mod local;
