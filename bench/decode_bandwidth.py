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

With --int8, the int8 variants (seed 002; issue 26's target >= 0.7x):
every matmul weight an i8 param read through a cast, `f32(Wq[D, ...])`,
with an f32 scale per output channel applied to the einsum's result; norms
and the embedding stay f32.  Three programs, each against the limit of
the bytes it reads (the weights at 1 byte; the T rows of each rotary
table that the window's gather reads: read_bytes_int8):
  weights i8, f32 cache, casts folded (the default: the runtime converts
      the i8 weights in registers as it reads them, gemv_narrow.c)
  the same with --fold-casts=off (each cast writes an f32 copy that the
      einsum reads again, as einc did before)
  weights and KV cache i8, casts folded: both caches i8 states with a
      static f32 scale per head channel (docs/generation.md, "An int8 KV
      cache"), written as `i8(Kr[...] * IKc[...])` and read through folded
      casts by the attention einsums, batched over the heads
and the first and last again with EINC_GEMV_THREADS=2: the large narrow
products always shared with a helper thread on the second core (rt_gemv.h;
by default only when the machine has a spare core and only while it is
the faster, which on a loaded machine is never) and with EINC_GEMV_THREADS=1 (never split), so
that the default and the split are also given as ratios to one thread
measured in the same rounds (robust to the load); and the first and third as
W8A8 (w8a8_source: every activation that multiplies an i8 weight
quantized per row by the program, dynamic scale max |x| / 127, so each
such product is i8 x i8 summed in i32, runtime/gemv_i8i8.c), each against
the same limit as its weight-only twin (the activations' bytes are a few
KiB); and the int8-cache program and its W8A8 twin again with
EINC_GEMV_ISA=avx2 (rt_gemv.h: the AVX2 loops on a CPU with AVX-512), so
the AVX-512 loops' (gemv_narrow_avx512.c) and the VNNI loops' (gemv_i8i8_vnni.c)
gain on the step is a ratio measured in the same rounds; and the int8-cache
program with EINC_GEMV_ISA=avx512, its weights summed in f32, against the
default's W8A16 sums (gemv_w8a16_vnni.c, where the CPU has AVX512-VNNI).
All of them run alternately in five rounds of --repeat runs with the copy
that measures W; each time is its fastest round's median (on a shared
machine load only adds time; the fastest copy gives the highest W, the
strictest limit), and each line gives its peak memory per device
(--stats).  Then the i8 GEMV kernel at the step's shapes, portable C (the
compiler's AVX2 clone of it: what ran before the AVX2 kernel) vs the AVX2
kernel, the AVX-512 kernel vs the AVX2 one (where the CPU has AVX-512 F,
BW and VL), each vector kernel split with a helper thread vs on one,
and for the weights' shapes the W8A8 kernel (i8 x i8) vs the AVX2 one and
the W8A8 VNNI kernel vs the W8A8 AVX2 one
(bench/gemv_narrow.c, weights/s, the matrix read from memory, and once
from cache), and the AVX2 kernel's matrices on 2 MiB pages (as rt_alloc
gives a program's weights and caches, runtime/device.c) vs 4 KiB pages
(as it did before; PAGES=4k), one thread and split.  Every program here,
the copy that measures W included, runs on the huge pages rt_alloc asks
for: on 4 KiB pages the copy measured a lower W (the step's limit was
looser) as well as a slower step.

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


def w8a8_source(text):
    """`text` (a weight-only int8 program of int8_source) with the
    activations quantized too (W8A8, docs/generation.md "int8 x int8"):
    each activation A that multiplies an i8 weight is quantized per row
    (the dims the weight does not contract) before its first use, with a
    dynamic symmetric scale S8A = max |A| / 127, as Q8A = i8(A / S8A), and
    read as `f32(Q8A[...])`, the einsum's result times S8A."""
    out, done = [], set()
    for line in text.splitlines():
        lhs = re.match(r"\s*(\w+)\[", line)
        if lhs and not line.lstrip().startswith(("param", "input", "state", "output", "#")):
            m = re.search(r"\b(\w+)\[([^\]]*)\] \* f32\((W\w+)\[", line)
            if m and m.group(3) in INT8_WEIGHTS:
                act, dims = m.group(1), m.group(2)
                rows = ", ".join(d.strip() for d in dims.split(",")
                                 if d.strip() not in INT8_WEIGHTS[m.group(3)])
                ind = re.match(r"\s*", line).group(0)
                if act not in done:
                    out += ["%sA8%s[%s] = max(abs(%s[%s]))" % (ind, act, rows, act, dims),
                            "%sS8%s[%s] = A8%s[%s] / 127" % (ind, act, rows, act, rows),
                            "%sQ8%s[%s] = i8(%s[%s] / S8%s[%s])" % (ind, act, dims, act, dims, act, rows)]
                    done.add(act)
                line = line.replace(m.group(0), "f32(Q8%s[%s]) * f32(%s[" % (act, dims, m.group(3)))
                line += " * S8%s[%s]" % (act, rows)
            done.discard(lhs.group(1))  # a new value of that name: quantized again
        out.append(line)
    return "\n".join(out) + "\n"


CACHES = ("Kc", "Vc")


def int8_cache_source(text):
    """`text` (a decode program) with both KV caches i8 (seed 002): each
    cache a state of i8 with static f32 scales S<cache> over its dims but
    B and S (a scale per head channel, as docs/generation.md's int8
    cache) and their inverses I<cache>; the new keys and values written
    as `i8(Kr[...] * IKc[...])`, the cache read as `f32(Kc[...]) * SKc[...]`."""
    out = []
    for line in text.splitlines():
        m = re.match(r"state (%s)\[([^\]]*)\] : f32$" % "|".join(CACHES), line)
        if m:
            dims = [d.strip() for d in m.group(2).split(",")]
            keep = ", ".join(d for d in dims if d not in ("B", "S"))
            out += ["state %s[%s] : i8" % (m.group(1), m.group(2)),
                    "param S%s[%s] : f32" % (m.group(1), keep),
                    "param I%s[%s] : f32" % (m.group(1), keep)]
            continue
        for name in CACHES:
            w = re.match(r"(\s*%s\[[^\]]*\] = )(.*)$" % name, line)
            if w:  # the write: rhs is the new rows [B, T, rest]
                dims = [d.strip() for d in re.search(r"\[([^\]]*)\]", w.group(2)).group(1).split(",")]
                line = "%si8(%s * I%s[%s])" % (w.group(1), w.group(2), name,
                                              ", ".join(d for d in dims if d not in ("B", "T")))
                break
            r = re.search(r"\b%s\[([^\]]*)\]" % name, line)
            if r and not line.lstrip().startswith(("param", "input", "state", "output", "#")):
                dims = [d.strip() for d in r.group(1).split(",")]
                scale = "S%s[%s]" % (name, ", ".join(d for d in dims if d not in ("B", "S")))
                result = re.match(r"\s*\w+\[([^\]]*)\]", line).group(1).replace(" ", "").split(",")
                # a scale over dims the product keeps multiplies its result;
                # one over contracted dims (the head channels of Q . K)
                # multiplies the other operand first, not the cache
                kept = all(d in result for d in dims if d not in ("B", "S"))
                line = line.replace(r.group(0), ("f32(%s) * %s" if kept else "%s * f32(%s)")
                                    % ((r.group(0), scale) if kept else (scale, r.group(0))))
        out.append(line)
    return "\n".join(out) + "\n"


def read_bytes_int8(d, int8_cache=False):
    """Bytes the int8 decode step reads: i8 weights, their f32 scales, the
    f32 norms, B rows of the f32 Emb; the caches, f32 or (int8_cache) i8
    with their two f32 scale tensors per layer; T rows of each f32 rotary
    table CosT and SinT: the program selects the rows at Pos with
    `sum(where(S == Pos[] + T, CosT[S, G], 0), S)`, which the select-gather
    pass makes a gather of those rows (docs/passes.md), so the step reads
    T rows of each, not the whole tables (as it did before the pass)."""
    D, K, M, G, F, V, L, B, S = (d[k] for k in ("D", "K", "M", "G", "F", "V", "L", "B", "S"))
    T = d.get("T", 1)
    H = 2 * G
    weights = L * (D * K * M * H * 2 + D * K * H * 2 + 3 * D * F) + D * V
    scales = L * (K * M * H + 2 * K * H + D + 2 * F + D) + V
    f32 = scales + L * 2 * D + D + B * D
    cache = 2 * L * B * S * K * H
    rotary = 4 * 2 * T * G
    if int8_cache:
        return weights + 4 * f32, cache + 4 * 2 * 2 * L * K * H, rotary
    return weights + 4 * f32, 4 * cache, rotary


def resident_bytes(d):
    """Bytes of the int8 decode step's params (Emb whole) and caches."""
    params, cache, _ = read_bytes_int8(d)
    return params - 4 * d["B"] * d["D"] + 4 * d["V"] * d["D"] + cache


def peak_bytes(exe):
    """The largest peak rt_alloc bytes of a device in one run (--stats)."""
    out = bl.run([exe, "--random-inputs", "1", "--stats"])
    m = re.search(r"peak memory per device: max (\d+) bytes", out)
    return int(m.group(1)) if m else -1


# The narrow GEMV kernel at the decode step's shapes (bench/gemv_narrow.c):
# label -> (rows, cols, form, env).  The heads of the i8 cache are 8
# interleaved products [S x H] with rows K*H apart (BATCH, LD).
# "in cache": one matrix read over and over (COPIES=1), the conversion's
# own speed; the others cycle through 256 MiB of copies, as the step reads.
def kernel_shapes(d):
    H, KH = 2 * d["G"], d["K"] * 2 * d["G"]
    return {"X * Wg (i8 [D, F], cols form)": (d["D"], d["F"], "cols", {}),
            "X * Wg (i8 [D, F], cols form), in cache": (d["D"], d["F"], "cols", {"COPIES": "1"}),
            "Hg * Wd (i8 [F, D], cols form)": (d["F"], d["D"], "cols", {}),
            "Q . Kc, %d heads (i8 cache, rows form)" % d["K"]:
                (d["S"], H, "rows", {"BATCH": str(d["K"]), "LD": str(KH)}),
            "P . Vc, %d heads (i8 cache, cols form)" % d["K"]:
                (d["S"], H, "cols", {"BATCH": str(d["K"]), "LD": str(KH)})}


def kernel_rates(a, dims, res):
    """Weights/s of the i8 GEMV kernels, portable C vs AVX2, at the decode
    step's shapes, matrices read from memory; adds one figure per shape."""
    exe = bl.compile_c(a.build, "gemv_narrow", ["gemv_narrow.c"], runtime=True)
    rows = []
    for label, (r, c, form, env) in kernel_shapes(dims).items():
        got = rates(exe, r, c, form, "i8", env)
        if "avx2" not in got:
            rows.append([label, "%.3g" % got["portable"]] + ["-"] * 14)
            continue
        ratio = got["avx2"] / got["portable"]
        split = got["avx2 threads=2"] / got["avx2"]
        # the matrices on 4 KiB pages, as the runtime allocated them before
        # (rt_alloc's huge pages, runtime/device.c), in the next run
        small = rates(exe, r, c, form, "i8", dict(env, PAGES="4k"))
        huge = (got["avx2"] / small["avx2"], got["avx2 threads=2"] / small["avx2 threads=2"])
        # W8A8 (gemv_i8i8.c) where the step has it: the weights, not the cache
        w8 = rates(exe, r, c, form, "i8i8", env).get("avx2") if " . " not in label else None
        # AVX-512 (gemv_narrow_avx512.c) and the VNNI W8A8 loops
        # (gemv_i8i8_vnni.c) beside AVX2, where the CPU has them
        wide = got.get("avx512")
        wide2 = got.get("avx512 threads=2")
        v8 = (rates(exe, r, c, form, "i8i8", env).get("avx512")
              if wide and " . " not in label else None)
        rows.append([label, "%.3g" % got["portable"], "%.3g" % got["avx2"], "%.2fx" % ratio,
                     "%.3g" % wide if wide else "-", "%.2fx" % (wide / got["avx2"]) if wide else "-",
                     "%.3g" % got["avx2 threads=2"], "%.2fx" % split,
                     "%.3g" % wide2 if wide2 else "-", "%.2fx" % (wide2 / wide) if wide2 else "-",
                     "split" if got["default splits"] else "one thread",
                     "%.3g" % w8 if w8 else "-", "%.2fx" % (w8 / got["avx2"]) if w8 else "-",
                     "%.3g" % v8 if v8 else "-", "%.2fx" % (v8 / w8) if v8 and w8 else "-",
                     "%.2fx / %.2fx" % huge])
        if wide:
            res.add("i8 GEMV kernel, AVX-512 vs AVX2, %s, %dx%d" % (label, r, c), wide / 1e9,
                    "1e9 weights/s", "", wide / got["avx2"])
        if wide2:
            res.add("i8 GEMV kernel, AVX-512 split over 2 threads vs 1, %s, %dx%d" % (label, r, c),
                    wide2 / 1e9, "1e9 weights/s", "", wide2 / wide)
        if v8 and w8:
            res.add("i8 x i8 GEMV kernel (W8A8), AVX-512 VNNI vs AVX2, %s, %dx%d" % (label, r, c),
                    v8 / 1e9, "1e9 weights/s", "", v8 / w8)
        if w8:
            res.add("i8 x i8 GEMV kernel (W8A8), AVX2 vs i8 x f32 AVX2, %s, %dx%d" % (label, r, c),
                    w8 / 1e9, "1e9 weights/s", "", w8 / got["avx2"])
        res.add("i8 GEMV kernel, AVX2 vs portable C, %s, %dx%d" % (label, r, c), got["avx2"] / 1e9,
                "1e9 weights/s", "", ratio)
        res.add("i8 GEMV kernel, AVX2 split over 2 threads vs 1, %s, %dx%d" % (label, r, c),
                got["avx2 threads=2"] / 1e9, "1e9 weights/s", "", split)
        res.add("i8 GEMV kernel, AVX2, 2 MiB pages vs 4 KiB pages, one thread, %s, %dx%d"
                % (label, r, c), got["avx2"] / 1e9, "1e9 weights/s", "", huge[0])
        res.add("i8 GEMV kernel, AVX2, 2 MiB pages vs 4 KiB pages, split over 2 threads, %s, %dx%d"
                % (label, r, c), got["avx2 threads=2"] / 1e9, "1e9 weights/s", "", huge[1])
    bl.table(["kernel shape", "portable C weights/s", "AVX2 weights/s", "ratio",
              "AVX-512 weights/s", "ratio to AVX2",
              "AVX2 2 threads weights/s", "ratio to 1 thread",
              "AVX-512 2 threads weights/s", "ratio to 1 thread", "the default",
              "W8A8 AVX2 weights/s", "ratio to AVX2", "W8A8 VNNI weights/s", "ratio to W8A8 AVX2",
              "2 MiB vs 4 KiB pages (1 thread / 2)"], rows)


def rates(exe, r, c, form, dtype, env):
    """bench/gemv_narrow.c's weights/s per variant ("portable", "avx2",
    "avx512", "avx2 threads=2", "avx512 threads=2") for one shape and dtype (i8, or i8i8: W8A8), and
    "default splits": whether a device's default plan offers the shape to
    its helper (rt_gemv_split_wants)."""
    out = bl.run([exe, r, c, form, dtype, 31], env=env)
    got = dict((m.group(1), float(m.group(2))) for m in
               re.finditer(r"RESULT isa=(\w+(?: threads=\d+)?) ms=\S+ weights_per_s=(\S+)", out))
    m = re.search(r"DEFAULT split=(\d)", out)
    got["default splits"] = m is not None and m.group(1) == "1"
    return got


def main_int8(a, dims, defines, einc):
    with tempfile.TemporaryDirectory(prefix="einc-decode-int8-") as work:
        text = int8_source(EXAMPLE.read_text().replace("bf16", "f32"))
        srcs = {"plain": text, "cache": int8_cache_source(text), "w8a8": w8a8_source(text),
                "w8a8 cache": int8_cache_source(w8a8_source(text))}
        for name, t in srcs.items():
            srcs[name] = os.path.join(work, "decode_int8_%s.ein" % name.replace(" ", "_"))
            with open(srcs[name], "w") as f:
                f.write(t)
        # name -> (source, flags, int8 cache, environment)
        two, one = {"EINC_GEMV_THREADS": "2"}, {"EINC_GEMV_THREADS": "1"}
        variants = {"weights i8, f32 cache, casts folded": ("plain", [], False, {}),
                    "weights i8, f32 cache, --fold-casts=off": ("plain", ["--fold-casts=off"], False, {}),
                    "weights and KV cache i8, casts folded": ("cache", [], True, {}),
                    "weights i8, f32 cache, casts folded, EINC_GEMV_THREADS=2":
                        ("plain", [], False, two),
                    "weights and KV cache i8, casts folded, EINC_GEMV_THREADS=2":
                        ("cache", [], True, two),
                    "weights i8, f32 cache, casts folded, EINC_GEMV_THREADS=1":
                        ("plain", [], False, one),
                    "weights and KV cache i8, casts folded, EINC_GEMV_THREADS=1":
                        ("cache", [], True, one),
                    "W8A8 (weights and activations i8), f32 cache": ("w8a8", [], False, {}),
                    "W8A8 (weights and activations i8), KV cache i8": ("w8a8 cache", [], True, {}),
                    # the same two on the AVX2 loops (EINC_GEMV_ISA, rt_gemv.h): the
                    # AVX-512 and VNNI loops' gain in the same rounds
                    "weights and KV cache i8, casts folded, EINC_GEMV_ISA=avx2":
                        ("cache", [], True, {"EINC_GEMV_ISA": "avx2"}),
                    "W8A8 (weights and activations i8), KV cache i8, EINC_GEMV_ISA=avx2":
                        ("w8a8 cache", [], True, {"EINC_GEMV_ISA": "avx2"}),
                    # the weights' sums of rows in f32 (EINC_GEMV_ISA=avx512), not
                    # W8A16 (gemv_w8a16_vnni.c), where the CPU has AVX512-VNNI
                    "weights and KV cache i8, casts folded, EINC_GEMV_ISA=avx512":
                        ("cache", [], True, {"EINC_GEMV_ISA": "avx512"})}
        exes = {}
        for i, (name, (src, flags, _, _)) in enumerate(variants.items()):
            exes[name] = os.path.join(work, "decode_%d" % i)
            bl.run([einc, srcs[src], "-o", exes[name]] + flags + defines)
        # alternately, five rounds, the copy that measures W among them: a
        # load that comes and goes hits all, and only ever adds time, so each
        # one's fastest round counts (the copy's: the highest W, the
        # strictest limit)
        copy = copy_exe(work, einc)
        times = {name: [] for name in list(exes) + ["copy"]}
        for _ in range(5):
            for name, exe in list(exes.items()) + [("copy", copy)]:
                env = variants[name][3] if name in variants else {}
                times[name].append(bl.median_ms(bl.run([exe, "--random-inputs", "1", "--repeat",
                                                        str(a.repeat)], env=env)))
        runs = {name: (min(times[name]), peak_bytes(exe)) for name, exe in exes.items()}
        copy_ms = min(times["copy"])
    res = bl.Results("decode_bandwidth_int8", "The int8 decode step vs its memory-bandwidth limit",
                     "decode_bandwidth")
    limits = {}
    for cache in (False, True):
        limits[cache] = print_limit("int8 decode step, %s cache" % ("i8" if cache else "f32"), dims,
                                    copy_ms, read_bytes_int8(dims, cache),
                                    ("params (i8 weights, f32 scales, norms, B rows of Emb)",
                                     "KV cache (i8 and its scales)" if cache else "KV cache (f32)",
                                     "rotary rows of CosT, SinT (f32, T rows each, gathered)"))
    for name, (ms, peak) in runs.items():
        ratio = limits[variants[name][2]] / ms
        print("int8 decode step, %s: %.2f ms measured, %.2f ms bandwidth limit: ratio %.3f %s; "
              "peak memory %.1f MiB per device" % (name, ms, limits[variants[name][2]], ratio,
                                                   bl.verdict(ratio, 0.7), peak / 2**20))
        res.add("int8 decode step (one device), %s, %s"
                % (name, " ".join("%s=%d" % kv for kv in dims.items())),
                ms, "ms", ">= 0.7x bandwidth limit", ratio, bl.verdict(ratio, 0.7))
    for name, base in (("W8A8 (weights and activations i8), f32 cache", "weights i8, f32 cache, casts folded"),
                       ("W8A8 (weights and activations i8), KV cache i8",
                        "weights and KV cache i8, casts folded")):
        print("%s: %.2fx the speed of %s" % (name, runs[base][0] / runs[name][0], base))
        res.add("int8 decode step, %s vs %s" % (name, base), runs[name][0], "ms", "",
                runs[base][0] / runs[name][0])
    for name in ("weights and KV cache i8, casts folded",
                 "W8A8 (weights and activations i8), KV cache i8"):
        narrow = runs[name + ", EINC_GEMV_ISA=avx2"][0]
        print("%s: %.2fx the speed of the AVX2 loops (EINC_GEMV_ISA=avx2)"
              % (name, narrow / runs[name][0]))
        res.add("int8 decode step, %s, the best loops vs EINC_GEMV_ISA=avx2" % name,
                runs[name][0], "ms", "", narrow / runs[name][0])
    name = "weights and KV cache i8, casts folded"
    f32sums = runs[name + ", EINC_GEMV_ISA=avx512"][0]
    print("%s: %.2fx the speed of f32 sums of rows (EINC_GEMV_ISA=avx512; 1.00x where the CPU "
          "has no AVX512-VNNI)" % (name, f32sums / runs[name][0]))
    res.add("int8 decode step, %s, W8A16 sums of rows vs EINC_GEMV_ISA=avx512" % name,
            runs[name][0], "ms", "", f32sums / runs[name][0])
    fold, off = (runs["weights i8, f32 cache, casts folded"],
                 runs["weights i8, f32 cache, --fold-casts=off"])
    for name in ("weights i8, f32 cache, casts folded", "weights and KV cache i8, casts folded"):
        split = runs[name + ", EINC_GEMV_THREADS=2"][0]
        alone = runs[name + ", EINC_GEMV_THREADS=1"][0]
        print("%s: always split with the helper thread (EINC_GEMV_THREADS=2): %.2fx the speed "
              "of the default; the default %.2fx and the split %.2fx the speed of one thread "
              "(EINC_GEMV_THREADS=1)" % (name, runs[name][0] / split, alone / runs[name][0],
                                         alone / split))
        res.add("int8 decode step, %s, EINC_GEMV_THREADS=2 vs the default" % name, split, "ms",
                "", runs[name][0] / split)
        # measured in the same rounds: robust to a load that comes and goes
        res.add("int8 decode step, %s, the default vs EINC_GEMV_THREADS=1" % name, runs[name][0],
                "ms", "", alone / runs[name][0])
        res.add("int8 decode step, %s, EINC_GEMV_THREADS=2 vs EINC_GEMV_THREADS=1" % name, split,
                "ms", "", alone / split)
    print("folded: %.2fx the speed of --fold-casts=off, %.1f MiB less peak memory (params and caches: %.1f MiB)"
          % (off[0] / fold[0], (off[1] - fold[1]) / 2**20, resident_bytes(dims) / 2**20))
    res.add("int8 decode step, peak memory per device with casts folded (params and caches resident: "
            "%.1f MiB)" % (resident_bytes(dims) / 2**20), round(fold[1] / 2**20, 1), "MiB", "",
            fold[1] / off[1])
    res.add("int8 decode step, peak memory per device with --fold-casts=off", round(off[1] / 2**20, 1),
            "MiB")
    kernel_rates(a, dims, res)
    res.write(a.json)


def print_limit(what, dims, copy_ms, reads, names):
    """Prints the bytes the step reads (`reads`, named `names`) and their
    time at the copy bandwidth W of the same run; returns the limit in ms."""
    bytes_per_s = 2.0 * 4096 * 4096 * 4 / (copy_ms * 1e-3)
    print("%s: %s" % (what, " ".join("%s=%d" % kv for kv in dims.items())))
    bl.table(["reads", "bytes", "at W = %.2f GB/s (same run)" % (bytes_per_s / 1e9)],
             [[n, bl.human_bytes(b), "%.2f ms" % (b / bytes_per_s * 1e3)] for n, b in zip(names, reads)])
    return sum(reads) / bytes_per_s * 1e3


def copy_exe(work, einc):
    """The one-op copy `Y[R, C] = X[R, C]` of 4096 x 4096 f32, compiled."""
    r, c = 4096, 4096
    copy_src, exe = os.path.join(work, "copy.ein"), os.path.join(work, "copy")
    with open(copy_src, "w") as f:
        f.write("dim R = %d, C = %d\ninput X[R, C] : f32\nY[R, C] = X[R, C]\noutput Y\n" % (r, c))
    bl.run([einc, copy_src, "-o", exe])
    return exe


def copy_bandwidth_ms(work, einc, repeat):
    """Median ms of the copy of copy_exe."""
    return bl.median_run_ms(copy_exe(work, einc), repeat)


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
