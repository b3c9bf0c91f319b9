#!/usr/bin/env python3
"""Benchmark 10: a decode step on one device against its memory-bandwidth limit.

examples/llama2_13b_decode.ein (one generation step: every weight and the
whole KV cache read once per token, seed 002's memory-bound regime) is
compiled on a 1x1 mesh at the sizes below, in f32 (the file's bf16
replaced: the host has no bf16 arithmetic, so bf16 would measure its
conversions, not the memory system), and run with --repeat; its time is the
median per run.  The limit is the bytes the step must read, every param
except the embedding table (the step reads B of its rows) plus both
caches, over W, the copy bandwidth measured in the same run: the bytes read
and written per second by the one-op program `Y[R, C] = X[R, C]` of
64 MiB (as benchmarks 7 and 8).

ratio = (bytes / W) / measured time; the target is >= 0.7 (issue 13).

    python3 bench/decode_bandwidth.py --build BUILD [-D S=4096 ...] [--repeat 9] [--json FILE]
"""
import os
import tempfile

import benchlib as bl

EXAMPLE = bl.ROOT / "examples" / "llama2_13b_decode.ein"
# One device; LLaMA-2's shapes scaled down to run in tens of ms here:
# 4 layers of D = 1024, 8 KV heads of H = 128, a 2048-position cache.
DEFAULTS = {"X": 1, "Y": 1, "B": 1, "S": 2048, "D": 1024, "K": 8, "M": 1, "G": 64, "F": 2816,
            "V": 8192, "L": 4}


def read_bytes(d):
    """f32 bytes a decode step reads: params (B rows of Emb) and the caches."""
    D, K, M, G, F, V, L, B, S = (d[k] for k in ("D", "K", "M", "G", "F", "V", "L", "B", "S"))
    H = 2 * G
    per_layer = D * K * M * H * 2 + D * K * H * 2 + 3 * D * F + 2 * D  # Wq, Wo; Wk, Wv; MLP; norms
    params = L * per_layer + D * V + D + B * D                        # layers, LM head, Gf, Emb rows
    cache = 2 * L * B * S * K * H
    return 4 * params, 4 * cache


def main():
    p = bl.parser(__doc__)
    p.add_argument("-D", action="append", default=[], help="NAME=VALUE over the defaults")
    p.add_argument("--repeat", type=int, default=9)
    a = p.parse_args()
    dims, defines = bl.sizes(DEFAULTS, a.D)
    einc = str(bl.einc(a.build))
    print(bl.machine())
    with tempfile.TemporaryDirectory(prefix="einc-decode-") as work:
        src, exe = os.path.join(work, "decode_f32.ein"), os.path.join(work, "decode")
        with open(src, "w") as f:
            f.write(EXAMPLE.read_text().replace("bf16", "f32"))
        bl.run([einc, src, "-o", exe] + defines)
        step_ms = bl.median_run_ms(exe, a.repeat)
        r, c = 4096, 4096
        copy_src, copy_exe = os.path.join(work, "copy.ein"), os.path.join(work, "copy")
        with open(copy_src, "w") as f:
            f.write("dim R = %d, C = %d\ninput X[R, C] : f32\nY[R, C] = X[R, C]\noutput Y\n" % (r, c))
        bl.run([einc, copy_src, "-o", copy_exe])
        copy_ms = bl.median_run_ms(copy_exe, a.repeat)
    bytes_per_s = 2.0 * r * c * 4 / (copy_ms * 1e-3)
    params, cache = read_bytes(dims)
    limit_ms = (params + cache) / bytes_per_s * 1e3
    print("decode step: %s" % " ".join("%s=%d" % kv for kv in dims.items()))
    bl.table(["reads", "bytes", "at W = %.2f GB/s (same run)" % (bytes_per_s / 1e9)],
             [["params (B rows of Emb)", bl.human_bytes(params), "%.2f ms" % (params / bytes_per_s * 1e3)],
              ["KV cache", bl.human_bytes(cache), "%.2f ms" % (cache / bytes_per_s * 1e3)]])
    ratio = limit_ms / step_ms
    print("decode step: %.2f ms measured, %.2f ms bandwidth limit: ratio %.3f %s"
          % (step_ms, limit_ms, ratio, bl.verdict(ratio, 0.7)))
    res = bl.Results("decode_bandwidth", "A decode step vs its memory-bandwidth limit")
    res.add("decode step (f32, one device), %s" % " ".join("%s=%d" % kv for kv in dims.items()),
            step_ms, "ms", ">= 0.7x bandwidth limit", ratio, bl.verdict(ratio, 0.7))
    res.write(a.json)


if __name__ == "__main__":
    bl.main_guard(main)
