#!/usr/bin/env python3
"""Benchmark 15: bf16 matmuls through rt_einsum vs cblas_sbgemm, oneDNN and cblas_sgemm.

One device, C[i,k] = A[i,j] B[j,k] in bf16 (bf16_gemm.c), at each size of
--sizes (MxNxK; default square 512, 1024, 2048 and a decode-like M = 8).
Four calls are timed alternately in the same run: einc's bf16 einsum
(rt_einsum), OpenBLAS's cblas_sbgemm followed by rounding its f32 product to
bf16 (so both deliver the same bf16 result), oneDNN's dnnl_gemm_bf16bf16f32
with the same rounding (the same operation from a second library, not
OpenBLAS) and cblas_sgemm on f32 copies.  Ratios
are rates, einc / baseline (= baseline time / einc time); target >= 0.9x
sbgemm (einc issue 26).  Prints the CPU model, whether it has avx512_bf16
(OpenBLAS's bf16 GEMM kernels need it; without it sbgemm is a generic C
loop) and OPENBLAS_CORETYPE (which also picks the kernels).  cblas_sbgemm
is looked up at run time: Debian's OpenBLAS is built without BUILD_BFLOAT16
and lacks it, so it comes from a second OpenBLAS, built by
bench/openblas_bf16.sh (a minute; cached) and opened by the C bench beside
the system one, which keeps serving einc and sgemm.  --sbgemm-lib picks it:
`auto` (default) uses that build when it is cached, `build` runs the script
first, a PATH names a libopenblas with cblas_sbgemm, `none` looks only in
the linked (or LD_PRELOADed) OpenBLAS.  Without cblas_sbgemm the run
records einc against sgemm and oneDNN, with the sbgemm target left
unjudged ("-").  Both OpenBLAS copies and oneDNN run on --threads threads.
oneDNN is opened at run time too (libdnnl.so.2, Debian's libdnnl2): without
it, or where it refuses the call, its columns are "-".  It runs on OpenMP
with --threads threads, as many as OpenBLAS gets for einc and sgemm.

    python3 bench/bf16_gemm.py --build BUILD [--sizes 512x512x512,8x2048x2048] [--reps 5]
                               [--threads T] [--sbgemm-lib auto|build|none|PATH]
                               [--json FILE]
"""
import os
import subprocess
from pathlib import Path

import benchlib as bl

DEFAULT_SIZES = "512x512x512,1024x1024x1024,2048x2048x2048,8x2048x2048"


def cpu_flag(flag):
    """Whether /proc/cpuinfo's first CPU lists `flag` ('?' where unreadable)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                return "yes" if flag in line.split(":", 1)[1].split() else "no"
    except OSError:
        pass
    return "?"


def parse_sizes(text):
    """'MxNxK,...' as a list of (M, N, K); BenchError when malformed."""
    out = []
    for item in text.split(","):
        try:
            m, n, k = (int(x) for x in item.lower().split("x"))
        except ValueError:
            raise bl.BenchError(f"--sizes: '{item}' is not MxNxK")
        if min(m, n, k) < 1:
            raise bl.BenchError(f"--sizes: '{item}' has a dim < 1")
        out.append((m, n, k))
    return out


def sbgemm_lib(choice):
    """(path, description, short label) of the libopenblas with cblas_sbgemm
    that --sbgemm-lib `choice` names, or (None, why, "") for none; BenchError
    when the build fails or PATH does not exist."""
    if choice == "none":
        return None, "--sbgemm-lib none: the linked OpenBLAS's, if any", ""
    if choice in ("auto", "build"):
        cmd = [str(bl.BENCH / "openblas_bf16.sh")] + (["--cached"] if choice == "auto" else [])
        # The build's progress (stderr) goes to the terminal: it takes a minute.
        r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        if choice == "auto" and r.returncode == 3:
            return None, "no cached build of bench/openblas_bf16.sh (--sbgemm-lib build)", ""
        if r.returncode != 0 or not r.stdout.strip():
            raise bl.BenchError(f"{' '.join(cmd)} failed (status {r.returncode})")
        path = Path(r.stdout.strip().splitlines()[-1])
    else:
        path = Path(choice)
    if not path.is_file():
        raise bl.BenchError(f"--sbgemm-lib: {path} is not a file")
    info = {}
    try:  # bench/openblas_bf16.sh's notes beside lib/
        for line in open(path.parent.parent / "build-info"):
            key, _, value = line.rstrip("\n").partition("=")
            info[key] = value
    except OSError:
        pass
    if "target" not in info:
        return path.resolve(), str(path), str(path)
    short = "AVX512-BF16 kernels" if info["target"] == "COOPERLAKE" else "generic C kernel"
    return (path.resolve(), f"OpenBLAS {info['version'].split()[0]} TARGET={info['target']} "
            f"(bench/openblas_bf16.sh), sbgemm on its {info['sbgemm_kernels']}",
            f"OpenBLAS {info['target']}, {short}")


def main():
    p = bl.parser(__doc__)
    p.add_argument("--sizes", default=DEFAULT_SIZES, help="MxNxK,... (default %(default)s)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--sbgemm-lib", default="auto", metavar="auto|build|none|PATH",
                   help="the OpenBLAS with cblas_sbgemm (default %(default)s: "
                        "bench/openblas_bf16.sh's build when cached)")
    a = p.parse_args()
    sizes = parse_sizes(a.sizes)
    exe = bl.compile_c(a.build, "bf16_gemm", ["bf16_gemm.c"], runtime=True)
    sb_path, sb_what, sb_label = sbgemm_lib(a.sbgemm_lib)
    print(bl.machine())
    print(f"# avx512_bf16: {cpu_flag('avx512_bf16')}")
    print(f"# sbgemm library: {sb_what}")
    res = bl.Results("bf16_gemm", "bf16 matmul: rt_einsum vs cblas_sbgemm, oneDNN and cblas_sgemm")
    rows, missing = [], False
    for m, n, k in sizes:
        out = bl.run([exe, m, n, k, a.reps, a.threads] + ([sb_path] if sb_path else []))
        for line in out.splitlines():
            if line.startswith("#"):
                print(line)
        for r in bl.results(out):
            shape = f"{r['m']}x{r['n']}x{r['k']}"
            sb, dn = r["sbgemm"] == 1, r["onednn"] == 1
            rows.append([shape, r["einc_ms"], r["sbgemm_ms"] if sb else "-",
                         r["onednn_ms"] if dn else "-", r["sgemm_ms"], r["einc_gflops"],
                         r["sbgemm_gflops"] if sb else "-", r["onednn_gflops"] if dn else "-",
                         r["sgemm_gflops"], f"{r['ratio_sbgemm']:.3f}" if sb else "-",
                         bl.verdict(r["ratio_sbgemm"], 0.9) if sb else "-",
                         f"{r['ratio_onednn']:.3f}" if dn else "-",
                         f"{r['ratio_sgemm']:.3f}", f"{r['err_einc']:.1e}",
                         f"{r['err_onednn']:.1e}" if dn else "-"])
            if sb:
                res.add(f"rt_einsum bf16 MxNxK={shape}", r["einc_gflops"], "GFLOP/s",
                        ">= 0.9x cblas_sbgemm", r["ratio_sbgemm"],
                        bl.verdict(r["ratio_sbgemm"], 0.9))
                lib = f"{sb_label}, " if sb_label else ""
                res.add(f"cblas_sbgemm ({lib}+ rounding to bf16) MxNxK={shape}",
                        r["sbgemm_gflops"], "GFLOP/s")
            else:  # no baseline: the target cannot be judged, the figure is still recorded
                where = sb_path if sb_path else "the linked OpenBLAS"
                res.add(f"rt_einsum bf16 MxNxK={shape} (cblas_sbgemm absent from {where})",
                        r["einc_gflops"], "GFLOP/s", ">= 0.9x cblas_sbgemm")
            if dn:  # a second bf16 baseline, not the one the target names
                res.add(f"oneDNN dnnl_gemm_bf16bf16f32 (+ rounding to bf16) MxNxK={shape}",
                        r["onednn_gflops"], "GFLOP/s")
                res.add(f"rt_einsum bf16 / oneDNN bf16 MxNxK={shape}", r["ratio_onednn"], "x",
                        "", r["ratio_onednn"])
            res.add(f"cblas_sgemm f32 MxNxK={shape}", r["sgemm_gflops"], "GFLOP/s")
            res.add(f"rt_einsum bf16 / cblas_sgemm f32 MxNxK={shape}", r["ratio_sgemm"], "x", "",
                    r["ratio_sgemm"])
            missing = missing or not sb
    bl.table(["MxNxK", "einc ms", "sbgemm ms", "oneDNN ms", "sgemm ms", "einc GFLOP/s",
              "sbgemm GFLOP/s", "oneDNN GFLOP/s", "sgemm GFLOP/s", "einc/sbgemm", ">=0.9x",
              "einc/oneDNN", "einc/sgemm", "einc err", "oneDNN err"], rows)
    print("# sbgemm = OpenBLAS cblas_sbgemm (the target's baseline); oneDNN = oneDNN's "
          "dnnl_gemm_bf16bf16f32, a second bf16 baseline; ratios are einc's rate / theirs")
    if missing:
        why = (f"{sb_path} does not define it" if sb_path else
               "the linked OpenBLAS was built without BUILD_BFLOAT16 (--sbgemm-lib build "
               "makes one)")
        print(f"# cblas_sbgemm is absent: {why}; the errors (max rel err) are then against "
              "sgemm's product rounded to bf16")
    else:
        print(f"# sbgemm: {sb_what}; the errors (max rel err) are against its product "
              "rounded to bf16")
    res.write(a.json)


if __name__ == "__main__":
    bl.main_guard(main)
