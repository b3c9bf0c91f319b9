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

With --int8, the weight-only int8 variant (seed 002; issue 26's target
>= 0.7x): every matmul weight an i8 param read through a cast,
`f32(Wq[D, ...])`, with an f32 scale per output channel applied to the
einsum's result; caches, norms and the embedding stay f32.  Its limit
counts the weights at 1 byte.  It is compiled twice and both run in the
same process: with the casts folded into the GEMM (the default: the
runtime converts blocks of the i8 weights as OpenBLAS reads them) and
with --fold-casts=off (each cast writes an f32 copy that the einsum reads
again, as einc did before), run alternately in five rounds of --repeat
runs; each time is its fastest round's median (on a shared machine load
only adds time), and each line gives its peak memory per device (--stats).

    python3 bench/decode_bandwidth.py --build BUILD [-D S=4096 ...] [--repeat 9] [--int8] [--json FILE]
"""
import os
import re
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


# The matmul weights of the decode step: name -> (the dims the matmul
# contracts, in the order they are written).  Their other dims are the
# output channels, one f32 scale each.
INT8_WEIGHTS = {"Wq": ["D"], "Wk": ["D"], "Wv": ["D"], "Wo": ["K", "M", "P", "G"],
                "Wg": ["D"], "Wu": ["D"], "Wd": ["F"], "Wlm": ["D"]}


def int8_source(text):
    """The f32 decode program as weight-only int8: each weight of
    INT8_WEIGHTS an i8 param with a scale param S<name> over its output
    channels (same shardings), read as `f32(W[...])` and its einsum's result
    scaled per channel."""
    out = []
    for line in text.splitlines():
        m = re.match(r"param (W\w+)\[([^\]]*)\] : f32$", line)
        if m and m.group(1) in INT8_WEIGHTS:
            name, dims = m.group(1), [d.strip() for d in m.group(2).split(",")]
            keep = [d for d in dims if d.split("_")[0] not in INT8_WEIGHTS[name]]
            out += ["param %s[%s] : i8" % (name, ", ".join(dims)),
                    "param S%s[%s] : f32" % (name, ", ".join(keep))]
            continue
        if not line.startswith(("param", "input", "state", "output", "#")):
            for name, contracted in INT8_WEIGHTS.items():
                m = re.search(r"\b%s\[([^\]]*)\]" % name, line)
                if not m:
                    continue
                dims = [d.strip() for d in m.group(1).split(",")]
                keep = [d for d in dims if d not in contracted]
                line = line.replace(m.group(0), "f32(%s) * S%s[%s]" % (m.group(0), name, ", ".join(keep)))
        out.append(line)
    return "\n".join(out) + "\n"


def read_bytes_int8(d):
    """Bytes the int8 decode step reads: i8 weights, their f32 scales, the
    f32 norms, B rows of the f32 Emb, the f32 caches."""
    D, K, M, G, F, V, L, B, S = (d[k] for k in ("D", "K", "M", "G", "F", "V", "L", "B", "S"))
    H = 2 * G
    weights = L * (D * K * M * H * 2 + D * K * H * 2 + 3 * D * F) + D * V
    scales = L * (K * M * H + 2 * K * H + D + 2 * F + D) + V
    f32 = scales + L * 2 * D + D + B * D
    cache = 2 * L * B * S * K * H
    return weights + 4 * f32, 4 * cache


def resident_bytes(d):
    """Bytes of the int8 decode step's params (Emb whole) and caches."""
    params, cache = read_bytes_int8(d)
    return params - 4 * d["B"] * d["D"] + 4 * d["V"] * d["D"] + cache


def peak_bytes(exe):
    """The largest peak rt_alloc bytes of a device in one run (--stats)."""
    out = bl.run([exe, "--random-inputs", "1", "--stats"])
    m = re.search(r"peak memory per device: max (\d+) bytes", out)
    return int(m.group(1)) if m else -1


def main_int8(a, dims, defines, einc):
    with tempfile.TemporaryDirectory(prefix="einc-decode-int8-") as work:
        src = os.path.join(work, "decode_int8.ein")
        with open(src, "w") as f:
            f.write(int8_source(EXAMPLE.read_text().replace("bf16", "f32")))
        exes = {"folded": [], "--fold-casts=off": ["--fold-casts=off"]}
        for name, flags in exes.items():
            exes[name] = os.path.join(work, "decode_" + ("off" if flags else "folded"))
            bl.run([einc, src, "-o", exes[name]] + flags + defines)
        # alternately, five rounds: a load that comes and goes hits both, and
        # only ever adds time, so each variant's fastest round counts
        times = {name: [] for name in exes}
        for _ in range(5):
            for name, exe in exes.items():
                times[name].append(bl.median_run_ms(exe, a.repeat))
        runs = {name: (min(times[name]), peak_bytes(exe)) for name, exe in exes.items()}
        copy_ms = copy_bandwidth_ms(work, einc, a.repeat)
    limit_ms = print_limit("int8 decode step", dims, copy_ms, read_bytes_int8(dims),
                           ("params (i8 weights, f32 scales, norms, B rows of Emb)", "KV cache (f32)"))
    res = bl.Results("decode_bandwidth_int8", "The int8 decode step vs its memory-bandwidth limit",
                     "decode_bandwidth")
    for name, (ms, peak) in runs.items():
        ratio = limit_ms / ms
        print("int8 decode step, casts %s: %.2f ms measured, %.2f ms bandwidth limit: ratio %.3f %s; "
              "peak memory %.1f MiB per device" % (name, ms, limit_ms, ratio, bl.verdict(ratio, 0.7),
                                                   peak / 2**20))
        res.add("int8 decode step (weight-only, one device), casts %s, %s"
                % (name, " ".join("%s=%d" % kv for kv in dims.items())),
                ms, "ms", ">= 0.7x bandwidth limit", ratio, bl.verdict(ratio, 0.7))
    (fold_ms, fold_peak), (off_ms, off_peak) = runs["folded"], runs["--fold-casts=off"]
    print("folded: %.2fx the speed of --fold-casts=off, %.1f MiB less peak memory (params and caches: %.1f MiB)"
          % (off_ms / fold_ms, (off_peak - fold_peak) / 2**20, resident_bytes(dims) / 2**20))
    res.add("int8 decode step, peak memory per device with casts folded (params and caches resident: "
            "%.1f MiB)" % (resident_bytes(dims) / 2**20), round(fold_peak / 2**20, 1), "MiB", "",
            fold_peak / off_peak)
    res.add("int8 decode step, peak memory per device with --fold-casts=off", round(off_peak / 2**20, 1),
            "MiB")
    res.write(a.json)


def print_limit(what, dims, copy_ms, reads, names):
    """Prints the bytes the step reads (`reads`, named `names`) and their
    time at the copy bandwidth W of the same run; returns the limit in ms."""
    bytes_per_s = 2.0 * 4096 * 4096 * 4 / (copy_ms * 1e-3)
    print("%s: %s" % (what, " ".join("%s=%d" % kv for kv in dims.items())))
    bl.table(["reads", "bytes", "at W = %.2f GB/s (same run)" % (bytes_per_s / 1e9)],
             [[n, bl.human_bytes(b), "%.2f ms" % (b / bytes_per_s * 1e3)] for n, b in zip(names, reads)])
    return sum(reads) / bytes_per_s * 1e3


def copy_bandwidth_ms(work, einc, repeat):
    """Median ms of the one-op copy `Y[R, C] = X[R, C]` of 4096 x 4096 f32."""
    r, c = 4096, 4096
    copy_src, copy_exe = os.path.join(work, "copy.ein"), os.path.join(work, "copy")
    with open(copy_src, "w") as f:
        f.write("dim R = %d, C = %d\ninput X[R, C] : f32\nY[R, C] = X[R, C]\noutput Y\n" % (r, c))
    bl.run([einc, copy_src, "-o", copy_exe])
    return bl.median_run_ms(copy_exe, repeat)


def main():
    p = bl.parser(__doc__)
    p.add_argument("-D", action="append", default=[], help="NAME=VALUE over the defaults")
    p.add_argument("--repeat", type=int, default=9)
    p.add_argument("--int8", action="store_true", help="the weight-only int8 variant, folded and not")
    a = p.parse_args()
    dims, defines = bl.sizes(DEFAULTS, a.D)
    einc = str(bl.einc(a.build))
    print(bl.machine())
    if a.int8:
        main_int8(a, dims, defines, einc)
        return
    with tempfile.TemporaryDirectory(prefix="einc-decode-") as work:
        src, exe = os.path.join(work, "decode_f32.ein"), os.path.join(work, "decode")
        with open(src, "w") as f:
            f.write(EXAMPLE.read_text().replace("bf16", "f32"))
        bl.run([einc, src, "-o", exe] + defines)
        step_ms = bl.median_run_ms(exe, a.repeat)
        copy_ms = copy_bandwidth_ms(work, einc, a.repeat)
    limit_ms = print_limit("decode step", dims, copy_ms, read_bytes(dims),
                           ("params (B rows of Emb)", "KV cache"))
    ratio = limit_ms / step_ms
    print("decode step: %.2f ms measured, %.2f ms bandwidth limit: ratio %.3f %s"
          % (step_ms, limit_ms, ratio, bl.verdict(ratio, 0.7)))
    res = bl.Results("decode_bandwidth", "A decode step vs its memory-bandwidth limit")
    res.add("decode step (f32, one device), %s" % " ".join("%s=%d" % kv for kv in dims.items()),
            step_ms, "ms", ">= 0.7x bandwidth limit", ratio, bl.verdict(ratio, 0.7))
    res.write(a.json)


if __name__ == "__main__":
    bl.main_guard(main)
