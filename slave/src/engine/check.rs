//! Results compared by meaning (S0): a result from another engine is checked against the
//! CPU kernel's — byte for byte where the API's result is exact (sort, sha256, compress),
//! by relative Frobenius error ‖C − C_ref‖ / ‖C_ref‖ ≤ [`GEMM_TOLERANCE`] where it is a
//! float matrix (gemm), whose summation order differs from engine to engine.

use hetsched_common::program::{Api, CheckKind, ResultCheck, GEMM_TOLERANCE};

/// How `api`'s results are compared.
pub fn kind_of(api: Api) -> CheckKind {
    match api {
        Api::Gemm => CheckKind::Tolerance,
        Api::Sort | Api::Sha256 | Api::Compress => CheckKind::Exact,
    }
}

/// `got` against the CPU kernel's `reference` for `api`.
pub fn compare(api: Api, got: &[u8], reference: &[u8]) -> ResultCheck {
    let kind = kind_of(api);
    let rel_err = match kind {
        CheckKind::Exact => {
            if got == reference {
                0.0
            } else {
                1.0
            }
        }
        CheckKind::Tolerance => frobenius_rel_err(got, reference),
    };
    let ok = match kind {
        CheckKind::Exact => rel_err == 0.0,
        CheckKind::Tolerance => rel_err <= GEMM_TOLERANCE,
    };
    ResultCheck { kind, rel_err, ok }
}

/// ‖got − reference‖_F / ‖reference‖_F of two little-endian f32 matrices, in f64; 1 when
/// their lengths differ or the error is not a finite number (a NaN result fails).
pub fn frobenius_rel_err(got: &[u8], reference: &[u8]) -> f64 {
    if got.len() != reference.len() || !got.len().is_multiple_of(4) {
        return 1.0;
    }
    let f = |c: &[u8]| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (g, r) in got.chunks_exact(4).zip(reference.chunks_exact(4)) {
        let (g, r) = (f(g), f(r));
        diff += (g - r) * (g - r);
        norm += r * r;
    }
    let err = if norm == 0.0 {
        if diff == 0.0 {
            0.0
        } else {
            1.0
        }
    } else {
        (diff / norm).sqrt()
    };
    if err.is_finite() {
        err.min(1.0)
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn float_results_pass_within_tolerance_and_fail_beyond() {
        let r = bytes(&[3.0, 4.0]);
        let c = compare(Api::Gemm, &r, &r);
        assert_eq!((c.kind, c.rel_err, c.ok), (CheckKind::Tolerance, 0.0, true));
        // ‖(0, 1e-5·5)‖ / 5 = 1e-5: inside.
        let near = bytes(&[3.0, 4.0 + 5e-5]);
        let c = compare(Api::Gemm, &near, &r);
        assert!(c.ok && c.rel_err > 0.0 && c.rel_err < 2e-5, "{c:?}");
        let far = bytes(&[3.0, 4.01]);
        assert!(!compare(Api::Gemm, &far, &r).ok);
        assert!(!compare(Api::Gemm, &bytes(&[f32::NAN, 4.0]), &r).ok);
        assert_eq!(compare(Api::Gemm, &r[..4], &r).rel_err, 1.0, "length");
    }

    #[test]
    fn exact_results_compare_bytes() {
        let c = compare(Api::Sort, b"abc", b"abc");
        assert_eq!((c.kind, c.rel_err, c.ok), (CheckKind::Exact, 0.0, true));
        let c = compare(Api::Sha256, b"abc", b"abd");
        assert_eq!((c.rel_err, c.ok), (1.0, false));
    }
}
