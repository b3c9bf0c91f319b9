#!/usr/bin/env python3
"""Benchmarks 8 and 9: the LLaMA-2 decoder layer on one device against its roofline.

The layer (examples/llama2_layer.ein on a 1x1 mesh, at the sizes below) is
compiled and run with --repeat; its time is the median per run.  The
roofline is the sum over the layer's compute ops (einsums and elementwise
ops; `einc --dump-cost` gives each one's FLOPs and bytes read and written)
of max(FLOPs / R, bytes / W), with two rates measured in the same run on
the same device:

  - R, the BLAS rate: the FLOP/s of a one-op einc program
    `C[M, N] = A[M, K] * B[K, N]` of the layer's largest GEMM shape (one
    cblas_sgemm through the runtime);
  - W, the copy bandwidth: the bytes read and written per second by the
    one-op program `Y[R, C] = X[R, C]` of 64 MiB (as in benchmark 7).

Collectives are left out of the roofline (on one device there should be
none); any the program still runs count against the ratio.

ratio = roofline time / measured time; the target is >= 0.8 (issue 11).

With --train (benchmark 9) the program is a training step of the layer:
the file plus a loss (the mean square of Out) and SGD on all its params
(`loss` / `optimize`, docs/language.md), so the roofline and the time
cover the forward pass, the backward pass einc derives and the update;
the time is the mean per step of `--steps`.  The target is >= 0.75
(issue 12).  The mesh may be 2x2 (`-D X=2 -D Y=2`: threads, one core per
two devices here); the rates are still one device's, so the roofline is
the per-device work at one device's rates.

    python3 bench/layer_roofline.py --build BUILD [-D T=512 ...] [--repeat 5] [--train] [--json FILE]
"""
import os
import re
import tempfile

import benchlib as bl

EXAMPLE = bl.ROOT / "examples" / "llama2_layer.ein"
# One device; sizes that fit and run in seconds here, the model's ratios
# (D/N/F as LLaMA-2 7B/13B scaled down by 5-10x).
DEFAULTS = {"X": 1, "Y": 1, "B": 1, "T": 512, "S": 512, "D": 1024, "N": 8, "F": 2816}


TRAIN = """
Lt[] = mean(Out[B, T, D] * Out[B, T, D])
loss Lt
optimize G1, Wq, Wk, Wv, Wo, G2, Wg, Wu, Wd with sgd(lr=0.001)
"""


def step_ms(exe, steps):
    """Median time per training step over `steps` steps after a warm-up step."""
    out = bl.run([exe, "--random-inputs", "1", "--steps", str(steps + 1)])
    times = [float(x) for x in re.findall(r"^step \d+/\d+\s+loss \S+\s+([\d.]+) ms", out, re.M)]
    if len(times) != steps + 1:
        raise bl.BenchError("no time per step from %s:\n%s" % (exe, out))
    times = sorted(times[1:])
    return times[len(times) // 2]


def cost_rows(einc, src, defines):
    """(op kind, FLOPs, HBM bytes) of every op, from --dump-cost."""
    out = bl.run([einc, str(src), "--dump-cost"] + defines)
    rows = []
    num = r"(\d[\d.]*(?:e[+-]?\d+)?)"
    for line in out.splitlines():
        m = re.match(r"\S+\s+([A-Z]\w+)\s+%s\s+%s\s" % (num, num), line)
        if m:
            rows.append((m.group(1), float(m.group(2)), float(m.group(3))))
    if not rows:
        raise bl.BenchError("no ops in --dump-cost of %s:\n%s" % (src, out))
    return rows


def one_op(einc, work, name, text, repeat):
    src = os.path.join(work, name + ".ein")
    with open(src, "w") as f:
        f.write(text)
    exe = os.path.join(work, name)
    bl.run([einc, src, "-o", exe])
    return bl.median_run_ms(exe, repeat)


def main():
    p = bl.parser(__doc__)
    p.add_argument("-D", action="append", default=[], help="NAME=VALUE over the defaults")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--train", action="store_true", help="a training step of the layer (benchmark 9)")
    a = p.parse_args()
    dims, defines = bl.sizes(DEFAULTS, a.D)
    einc = str(bl.einc(a.build))
    print(bl.machine())
    with tempfile.TemporaryDirectory(prefix="einc-layer-") as work:
        exe, src = os.path.join(work, "layer"), EXAMPLE
        if a.train:
            src = os.path.join(work, "layer_train.ein")
            with open(src, "w") as f:
                f.write(EXAMPLE.read_text() + TRAIN)
        bl.run([einc, str(src), "-o", exe] + defines)
        layer_ms = step_ms(exe, a.repeat) if a.train else bl.median_run_ms(exe, a.repeat)
        rows = cost_rows(einc, src, defines)
        # The BLAS rate at the layer's largest GEMM: [B*T, D] x [D, F].
        m, k, n = dims["B"] * dims["T"], dims["D"], dims["F"]
        gemm_ms = one_op(einc, work, "gemm",
                         "dim M = %d, K = %d, N = %d\ninput A[M, K] : f32\ninput B[K, N] : f32\n"
                         "C[M, N] = A[M, K] * B[K, N]\noutput C\n" % (m, k, n), a.repeat)
        flops_per_s = 2.0 * m * k * n / (gemm_ms * 1e-3)
        # The copy bandwidth of a 64 MiB array (read + write).
        r, c = 4096, 4096
        copy_ms = one_op(einc, work, "copy",
                         "dim R = %d, C = %d\ninput X[R, C] : f32\nY[R, C] = X[R, C]\noutput Y\n"
                         % (r, c), a.repeat)
        bytes_per_s = 2.0 * r * c * 4 / (copy_ms * 1e-3)
    compute = [(kind, fl, by) for kind, fl, by in rows if kind in ("Einsum", "Elementwise")]
    gemm_s = sum(fl / flops_per_s for _, fl, by in compute if fl / flops_per_s >= by / bytes_per_s)
    mem_s = sum(by / bytes_per_s for _, fl, by in compute if fl / flops_per_s < by / bytes_per_s)
    n_gemm = sum(1 for _, fl, by in compute if fl / flops_per_s >= by / bytes_per_s)
    others = sorted(set(kind for kind, _, _ in rows) - {"Einsum", "Elementwise"})
    roof_ms = (gemm_s + mem_s) * 1e3
    print("layer: %s" % " ".join("%s=%d" % kv for kv in dims.items()))
    bl.table(["ops", "count", "rate (same run)", "roofline ms"],
                   [["compute-bound (FLOPs / R)", str(n_gemm),
                     "R = %.1f GFLOP/s" % (flops_per_s / 1e9), "%.2f" % (gemm_s * 1e3)],
                    ["memory-bound (bytes / W)", str(len(compute) - n_gemm),
                     "W = %.2f GB/s" % (bytes_per_s / 1e9), "%.2f" % (mem_s * 1e3)]])
    if others:
        print("also in the program, not in the roofline: %s" % ", ".join(others))
    ratio = roof_ms / layer_ms
    target = 0.75 if a.train else 0.8
    print("decoder layer%s: %.2f ms measured, %.2f ms roofline: ratio %.3f %s"
          % (" training step" if a.train else "", layer_ms, roof_ms, ratio,
             bl.verdict(ratio, target)))
    res = (bl.Results("layer_roofline_train", "A training step of the decoder layer vs its roofline",
                      script="layer_roofline") if a.train else
           bl.Results("layer_roofline", "The decoder layer vs its roofline"))
    res.add("decoder layer%s, %s" % (" training step" if a.train else "",
                                     " ".join("%s=%d" % kv for kv in dims.items())),
            layer_ms, "ms", ">= %gx roofline" % target, ratio, bl.verdict(ratio, target))
    res.write(a.json)


if __name__ == "__main__":
    bl.main_guard(main)
