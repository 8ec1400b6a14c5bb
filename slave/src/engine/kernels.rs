//! Built-in CPU kernels (S0): real computation on deterministic data from a seed. Every API
//! has one; an emulated engine runs it too and models its own time. A call's **digest** is
//! the SHA-256 of its output bytes, so equal digests mean equal results. The argument bytes
//! ([`inputs`]) and the computation on them ([`compute`]) are apart, so that a forwarded
//! call carries its arguments to the peer (S0.6).
//!
//! - `gemm(n, seed)`: C = A·B for n×n f32 matrices with entries in [-1, 1); output C,
//!   row-major little-endian f32 (i-k-j loop, fixed summation order: deterministic).
//! - `sort(items, seed)`: `items` random u64 sorted ascending; output little-endian u64.
//! - `sha256(bytes, seed)`: the SHA-256 of `bytes` random bytes; output the 32-byte hash.
//! - `compress(bytes, seed)`: deflate (zlib format, level 6) of `bytes` of text-like data
//!   (words drawn from a small vocabulary); output the compressed stream.

use hetsched_common::program::{Api, ApiCall};
use hetsched_common::rng::SplitMix64;
use sha2::{Digest, Sha256};
use std::io::Write;

/// Runs `call` on the CPU and returns its output.
pub fn run(call: &ApiCall) -> Vec<u8> {
    // The arguments always have the length `compute` expects.
    compute(call, &inputs(call)).unwrap_or_default()
}

/// The call's argument bytes, generated from its seed: what a program hands the API, and
/// what a forwarded call sends to the peer (S0.6). gemm: A then B, row-major little-endian
/// f32 (8·n² bytes); sort: the items, little-endian u64; sha256: the bytes; compress: the
/// text.
pub fn inputs(call: &ApiCall) -> Vec<u8> {
    let (size, seed) = (call.size() as usize, call.seed());
    match call.api {
        Api::Gemm => {
            let mut rng = SplitMix64::new(seed);
            let a = matrix(&mut rng, size);
            let b = matrix(&mut rng, size);
            a.iter().chain(&b).flat_map(|x| x.to_le_bytes()).collect()
        }
        Api::Sort => {
            let mut rng = SplitMix64::new(seed);
            (0..size)
                .flat_map(|_| rng.next_u64().to_le_bytes())
                .collect()
        }
        Api::Sha256 => random_bytes(size, seed),
        Api::Compress => text(size, seed),
    }
}

/// Bytes of `call`'s arguments (the length [`inputs`] returns).
pub fn input_len(call: &ApiCall) -> u64 {
    let size = call.size();
    match call.api {
        Api::Gemm => size.saturating_mul(size).saturating_mul(8),
        Api::Sort => size.saturating_mul(8),
        Api::Sha256 | Api::Compress => size,
    }
}

/// Runs `call`'s API on the argument bytes `args` (a peer's, for a forwarded call); an
/// error when they are not the length the call's size implies.
pub fn compute(call: &ApiCall, args: &[u8]) -> Result<Vec<u8>, String> {
    let want = input_len(call);
    if args.len() as u64 != want {
        return Err(format!(
            "{} arguments are {} bytes, the call's size needs {want}",
            call.api,
            args.len()
        ));
    }
    let size = call.size() as usize;
    Ok(match call.api {
        Api::Gemm => {
            let f: Vec<f32> = args
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            let (a, b) = f.split_at(size * size);
            gemm_of(size, a, b)
        }
        Api::Sort => {
            let mut v: Vec<u64> = args
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect();
            v.sort_unstable();
            v.iter().flat_map(|x| x.to_le_bytes()).collect()
        }
        Api::Sha256 => Sha256::digest(args).to_vec(),
        Api::Compress => deflate(args),
    })
}

/// Hex SHA-256 of `bytes`: a call's digest.
pub fn digest(bytes: &[u8]) -> String {
    let h = Sha256::digest(bytes);
    h.iter().map(|b| format!("{b:02x}")).collect()
}

fn matrix(rng: &mut SplitMix64, n: usize) -> Vec<f32> {
    (0..n * n)
        .map(|_| (rng.unit() * 2.0 - 1.0) as f32)
        .collect()
}

fn gemm_of(n: usize, a: &[f32], b: &[f32]) -> Vec<u8> {
    let mut c = vec![0f32; n * n];
    for i in 0..n {
        let row = &mut c[i * n..(i + 1) * n];
        for k in 0..n {
            let aik = a[i * n + k];
            let brow = &b[k * n..(k + 1) * n];
            for (cj, bj) in row.iter_mut().zip(brow) {
                *cj += aik * bj;
            }
        }
    }
    c.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn random_bytes(bytes: usize, seed: u64) -> Vec<u8> {
    let mut rng = SplitMix64::new(seed);
    let mut out = Vec::with_capacity(bytes + 8);
    while out.len() < bytes {
        out.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    out.truncate(bytes);
    out
}

const WORDS: [&str; 16] = [
    "engine", "task", "slave", "master", "queue", "kernel", "call", "node", "the", "of", "and",
    "gpu", "cpu", "raft", "log", "steal",
];

fn text(bytes: usize, seed: u64) -> Vec<u8> {
    let mut rng = SplitMix64::new(seed);
    let mut out = Vec::with_capacity(bytes + 16);
    while out.len() < bytes {
        out.extend_from_slice(WORDS[rng.below(WORDS.len() as u64) as usize].as_bytes());
        out.push(if rng.below(12) == 0 { b'\n' } else { b' ' });
    }
    out.truncate(bytes);
    out
}

fn deflate(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::ZlibEncoder::new(
        Vec::with_capacity(data.len() / 3 + 64),
        flate2::Compression::new(6),
    );
    // Writing into a Vec cannot fail.
    let _ = enc.write_all(data);
    enc.finish().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn d(api: Api, size: u64, seed: u64) -> String {
        digest(&run(&ApiCall::new(api, size, seed)))
    }

    #[test]
    fn digest_of_empty_input_is_the_standard_one() {
        assert_eq!(
            digest(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            digest(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn kernels_produce_known_digests_for_fixed_seeds() {
        // Pinned outputs: a change here changes every recorded digest.
        let got = [
            d(Api::Gemm, 8, 1),
            d(Api::Sort, 100, 1),
            d(Api::Sha256, 1000, 1),
            d(Api::Compress, 1000, 1),
        ];
        for (i, (g, w)) in got.iter().zip(KNOWN).enumerate() {
            assert_eq!(g, w, "kernel {i}: {got:?}");
        }
    }

    /// sort and sha256 were reproduced independently (Python: SplitMix64 + hashlib).
    const KNOWN: [&str; 4] = [
        "3405ee02923d86a03cb1a3299000447b1f531746636918cc7836d819dcfe4de5",
        "0bbd5c4858821fcd844a8930e4a5719e9f70a815b988b0f6a16aad076b7d54f2",
        "11581b405bfad8fd55e8be38bc76e6f3d77d34120ebb7ef8ccdfe02369156e2d",
        "912d5b52ef870347a0cd0bbc7a23e343f3f352fbe490f8c6f99da9f61d720575",
    ];

    #[test]
    fn outputs_are_deterministic_and_seeded() {
        for api in Api::ALL {
            let size = if api == Api::Gemm { 16 } else { 4096 };
            assert_eq!(d(api, size, 7), d(api, size, 7), "{api}");
            assert_ne!(d(api, size, 7), d(api, size, 8), "{api}");
        }
    }

    #[test]
    fn outputs_are_real_results() {
        let sorted = run(&ApiCall::new(Api::Sort, 1000, 3));
        let v: Vec<u64> = sorted
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        assert_eq!(v.len(), 1000);
        assert!(v.windows(2).all(|w| w[0] <= w[1]));
        // gemm of 1×1 is a product of the two seeded entries.
        let mut rng = SplitMix64::new(5);
        let (a, b) = (
            (rng.unit() * 2.0 - 1.0) as f32,
            (rng.unit() * 2.0 - 1.0) as f32,
        );
        assert_eq!(run(&ApiCall::new(Api::Gemm, 1, 5)), (a * b).to_le_bytes());
        // compress round-trips and compresses.
        let z = run(&ApiCall::new(Api::Compress, 100_000, 2));
        assert!(z.len() < 50_000, "text-like data compresses: {}", z.len());
        let mut back = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::ZlibDecoder::new(&z[..]), &mut back)
            .expect("inflates");
        assert_eq!(back, text(100_000, 2));
    }

    #[test]
    fn computing_on_the_argument_bytes_gives_the_same_result() {
        for api in Api::ALL {
            let call = ApiCall::new(api, if api == Api::Gemm { 16 } else { 4096 }, 3);
            let args = inputs(&call);
            assert_eq!(args.len() as u64, input_len(&call), "{api}");
            assert_eq!(
                compute(&call, &args).expect("computes"),
                run(&call),
                "{api}"
            );
            assert!(compute(&call, &args[1..]).is_err(), "{api}: wrong length");
        }
    }

    #[test]
    fn cpu_cost_grows_with_scale() {
        // Relative order only: sorting 2^20 items costs more than 2^10.
        let time = |items: u64| {
            let t = Instant::now();
            run(&ApiCall::new(Api::Sort, items, 1));
            t.elapsed()
        };
        let small = (0..3).map(|_| time(1 << 10)).min().unwrap_or_default();
        let big = time(1 << 20);
        assert!(big > small, "sort 2^20 took {big:?}, 2^10 took {small:?}");
    }
}
