//! Fuzz targets of hetsched: every decoder and parser that reads what a peer, a user or a
//! file hands it. Each target is a plain `fn(&[u8])` in [`targets`] that panics only on a
//! bug (a decoder must return an error, never panic or loop); the AFL binaries in
//! `src/bin/` wrap one each, and the workspace test `tests/fuzz_corpus.rs` replays every
//! file of `fuzz/corpus/<target>/` through the same functions.

pub mod targets;
