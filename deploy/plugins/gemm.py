"""hetsched gemm plug-in (S0): C = A·B for the call's n×n f32 matrices, on a GPU with CuPy
when it is importable, else on the CPU with NumPy (the same code: the array API both share).

Inputs are generated exactly as the slave's built-in kernel generates them
(slave/src/engine/kernels.rs): SplitMix64 from the call's seed, 2·n² draws, each
`(next >> 11) / 2^53 * 2 - 1` in f64, rounded to f32; A is the first n², B the next n²,
both row-major. The result is C row-major as little-endian f32, so the slave can compare it
with the CPU kernel's by relative Frobenius error (≤ 1e-4; TF32 is off).

Modes (HETSCHED_PLUGIN_MODE, set by the slave): `server` reads one JSON request line per
call and answers a header line {"ok": true, "len": N} and N raw bytes (or {"ok": false,
"error": "..."}), until its stdin ends; `once` (the default) answers one request with the
raw bytes and exits. `--backend` prints which array library it would use and exits.
"""

import json
import os
import sys

os.environ.setdefault("CUPY_TF32", "0")  # full f32 products: the tolerance assumes it

GAMMA = 0x9E3779B97F4A7C15
MAX_N = 2048


def backend():
    """The array module: CuPy with a usable GPU, else NumPy."""
    if os.environ.get("HETSCHED_PLUGIN_BACKEND", "") != "numpy":
        try:
            import cupy

            if cupy.cuda.runtime.getDeviceCount() > 0:
                return cupy
        except Exception:  # no CuPy, or no device: the CPU it is
            pass
    import numpy

    return numpy


xp = backend()


def uniform(seed, count):
    """`count` SplitMix64 draws from `seed` as f64 in [0, 1) (the kernel's `unit`)."""
    u64 = xp.uint64
    k = xp.arange(1, count + 1, dtype=u64)
    z = k * u64(GAMMA) + u64(seed % (1 << 64))
    z = (z ^ (z >> u64(30))) * u64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> u64(27))) * u64(0x94D049BB133111EB)
    z = z ^ (z >> u64(31))
    return (z >> u64(11)).astype(xp.float64) / float(1 << 53)


def inputs(n, seed):
    """A and B exactly as the built-in kernel makes them."""
    v = (uniform(seed, 2 * n * n) * 2.0 - 1.0).astype(xp.float32)
    return v[: n * n].reshape(n, n), v[n * n :].reshape(n, n)


def gemm(args):
    n, seed = int(args.get("n", 0)), int(args.get("seed", 0))
    if not 1 <= n <= MAX_N:
        raise ValueError(f"n must be in 1..={MAX_N}, got {n}")
    a, b = inputs(n, seed)
    c = xp.matmul(a, b).astype("<f4")
    if xp.__name__ == "cupy":
        c = xp.asnumpy(c)
    return c.tobytes()


def answer(line):
    """The result bytes of one request line (an exception when it cannot be served)."""
    req = json.loads(line)
    if req.get("api") != "gemm":
        raise ValueError(f"this plug-in implements gemm, not {req.get('api')!r}")
    return gemm(req.get("args") or {})


def serve(inp, out):
    for line in inp:
        if not line.strip():
            continue
        try:
            body = answer(line)
            head = {"ok": True, "len": len(body)}
        except Exception as e:  # the call fails; the plug-in stays up
            body, head = b"", {"ok": False, "error": str(e)}
        out.write(json.dumps(head).encode() + b"\n")
        out.write(body)
        out.flush()


def main():
    if "--backend" in sys.argv[1:]:
        print(xp.__name__)
        return 0
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    if os.environ.get("HETSCHED_PLUGIN_MODE") == "server":
        serve(inp, out)
        return 0
    try:
        out.write(answer(inp.readline()))
    except Exception as e:
        print(f"gemm plug-in: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
