#!/usr/bin/env python3
"""Elementwise loops that write their result with non-temporal stores.

Chooses whether a loop nest streams its result (codegen/elementwise.c,
docs/codegen.md, "Streamed results").  Each case is an einc program holding
one elementwise loop over E elements per device on a mesh of --devices
(the threads runtime, several devices to a core when there are more
devices than cores, as the examples run here), compiled twice with the same
einc: `--stream-min=off` (the baseline: ordinary stores, each of which
reads its line first) and the default (the result computed a chunk at a
time into a stage and copied out with non-temporal stores).  The two
executables run alternately, `--repeat` runs each, `--rounds` times; the
time of one is the median over its rounds of the op's per-call time in
`--profile`.  ratio = ordinary / streamed: above 1 streaming is faster.

  add      Y[E] = A[E] + B[E]                          the streamed add of
                                                       `einc calibrate`
  scale    Y[E] = A[E] * 2                             one byte read per
                                                       byte written
  rotary   Y[R, N, P2, G] = Q[R, N, P2, G] * C[R, G]    the rotary embedding
                  + Q[R, N, P, G] * (P2 - P) * S[R, G]  (rows of 64 f32)
  silu     Y[E] = silu(A[E]) * B[E]                    LLaMA's gated unit

    python3 bench/stream.py --build BUILD [--elems 8388608] [--devices 4] [--repeat 5] [--rounds 3]
        [--json FILE]
"""
import os
import re
import statistics
import tempfile

import benchlib as bl

CASES = {
    "add": "dim E = {e}\ninput A[E_X] : f32\ninput B[E_X] : f32\n"
           "Y[E_X] = A[E] + B[E]\noutput Y\n",
    "scale": "dim E = {e}\ninput A[E_X] : f32\nY[E_X] = A[E] * 2\noutput Y\n",
    "rotary": "dim R = {r}, N = 16, P = 2, P2 = 2, G = 64\n"
              "input Q[R_X, N, P, G] : f32\ninput C[R, G] : f32\ninput S[R, G] : f32\n"
              "Y[R_X, N, P2, G] = Q[R, N, P2, G] * C[R, G] + Q[R, N, P, G] * (P2 - P) * S[R, G]\n"
              "output Y\n",
    "silu": "dim E = {e}\ninput A[E_X] : f32\ninput B[E_X] : f32\n"
            "Y[E_X] = silu(A[E]) * B[E]\noutput Y\n",
}


def op_ms(exe, repeat):
    """The --profile time of the op that writes Y (ms per call): the last
    Elementwise op, which the rotary einsum is fused into."""
    out = bl.run([exe, "--random-inputs", "1", "--profile", "--repeat", str(repeat)])
    ms = [float(m.group(1)) for m in
          (re.match(r"\s+\d+\s+\d+\s+([\d.]+)\s+\S+\s+\S+\s+Y(\.\d+)? = Elementwise", line)
           for line in out.splitlines()) if m]
    if ms:
        return ms[-1]
    raise bl.BenchError("no line for Y in the --profile of %s:\n%s" % (exe, out))


def main():
    p = bl.parser(__doc__)
    p.add_argument("--einc", help="the einc compiler (default BUILD/einc)")
    p.add_argument("--elems", type=int, default=1 << 23, help="elements of Y per device")
    p.add_argument("--devices", type=int, default=4, help="devices of the mesh (axis X)")
    p.add_argument("--cases", default=",".join(CASES), help="which cases, comma-separated")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    einc = a.einc or str(bl.einc(a.build))
    print(bl.machine())
    print("# %d devices, %s of f32 result per device" % (a.devices, bl.human_bytes(4 * a.elems)))
    e = a.elems * a.devices
    rows = []
    res = bl.Results("stream", "Streamed results: elementwise loops with non-temporal stores")
    with tempfile.TemporaryDirectory(prefix="einc-stream-") as work:
        for case in a.cases.split(","):
            if case not in CASES:
                raise bl.BenchError("no case '%s' (cases: %s)" % (case, ", ".join(CASES)))
            src = os.path.join(work, case + ".ein")
            with open(src, "w") as f:
                f.write("mesh X = %d\n" % a.devices)
                f.write(CASES[case].format(e=e, r=e // (16 * 2 * 64)))
            exe = {}
            for name, flag in (("plain", "--stream-min=off"), ("stream", None)):
                exe[name] = os.path.join(work, "%s_%s" % (case, name))
                bl.run([einc, src] + ([flag] if flag else []) + ["-o", exe[name]])
            t = {"plain": [], "stream": []}
            for _ in range(a.rounds):
                for name in ("plain", "stream"):
                    t[name].append(op_ms(exe[name], a.repeat))
            pl, st = statistics.median(t["plain"]), statistics.median(t["stream"])
            rows.append([case, "%.3f" % pl, "%.3f" % st, "%.2f" % (pl / st)])
            res.add("%s streamed, %d devices x %s" % (case, a.devices, bl.human_bytes(4 * a.elems)),
                    st, "ms", "", pl / st)
    bl.table(["case", "ordinary stores ms", "streamed ms", "ratio ordinary / streamed"], rows)
    res.write(a.json)


if __name__ == "__main__":
    bl.main_guard(main)
