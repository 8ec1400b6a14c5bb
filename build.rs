//! Link the `hetsched` binary as a position-dependent executable. Every client command is a
//! fresh process, and a PIE of this size spends most of its start in the dynamic loader
//! applying ~42,000 relative relocations (and faulting the pages they touch); a non-PIE
//! binary has none. The trade-off (no ASLR for the binary's own image) is in
//! docs/SECURITY.md; BENCHMARKS.md has the figures.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
