#!/usr/bin/env python3
"""Speculative decoding (--speculate K) against plain decoding of the same
target (docs/generation.md, "Speculative decoding").

The target is the fortunes decode model written over a window of T new
characters (bench/fortunes_window.ein: two layers, 4 rows, a cache of 64,
128 characters, a 2x2 mesh); the draft the same file without its second
layer, compiled with -D T=1 and linked in with `einc --draft`.  Both run
with --random-inputs 1, so the draft's params are the target's first
layer, embedding and head (untrained: the acceptance rate says how close
a one-layer model is to the two-layer one, not what a trained pair gets).
Plain decoding is the target compiled with -D T=1.

For each K the same prompts (4 rows of 8 characters) generate --tokens
characters, greedy (the tokens must equal plain decoding's: checked) and
sampled at temperature 0.8; each run --repeat times, the median time per
output token.  A second draft is the target itself (-D T=1): every token
is accepted, so its row shows the loop's cost at K + 1 tokens per target
run.  Printed: acceptance rate, tokens per target run, the
measured speed-up (plain / speculative time per output token) and the
runtime's own estimate (docs/generation.md).

    python3 bench/speculative.py --build BUILD [--tokens 48] [--ks 1,2,4] [--repeat 3]
                                 [--json FILE]
"""
import os
import re
import statistics
import tempfile

import benchlib
import numpy as np

SRC = benchlib.BENCH / "fortunes_window.ein"


def draft_source(text):
    """fortunes_window.ein without its second layer: the final norm reads X1."""
    lines = text.split("\n")
    start = lines.index("# layer 2")
    end = next(i for i, l in enumerate(lines) if l.startswith("Rf["))
    body = lines[:start] + lines[end:]
    out = "\n".join(l for l in body if not re.match(r"(param|state) [A-Za-z]+2c?\[", l))
    return out.replace("X2[B, T, D]", "X1[B, T, D]")


def timed(cmd, repeat):
    """Runs cmd `repeat` times; (median ms per output token, last stdout)."""
    times, out = [], ""
    for _ in range(repeat):
        out = benchlib.run(cmd)
        m = re.search(r"time per output token ([0-9.]+) ms", out)
        if not m:
            raise benchlib.BenchError("no timing line in:\n" + out)
        times.append(float(m.group(1)))
    return statistics.median(times), out


def tokens(out):
    return re.findall(r"^tokens \d+:.*$", out, re.M)


def main():
    p = benchlib.parser(__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=48, help="characters per row (default 48)")
    p.add_argument("--ks", default="1,2,4", help="draft lengths K (default 1,2,4)")
    p.add_argument("--repeat", type=int, default=3, help="runs per variant (median; default 3)")
    a = p.parse_args()
    ks = [int(k) for k in a.ks.split(",")]
    if not 1 <= a.tokens <= 64 - 8 - max(ks) or a.repeat < 1:
        raise benchlib.BenchError("--tokens must leave the 64-position cache room for the "
                                  "prompt (8) and K")
    einc = benchlib.einc(a.build)
    text = SRC.read_text()
    print(benchlib.machine())
    print("# fortunes_window.ein (2 layers) verifies, its first layer drafts; 4 rows, prompts "
          "of 8, %d new characters, --random-inputs 1, median of %d runs" % (a.tokens, a.repeat))
    rows = []
    with tempfile.TemporaryDirectory(prefix="einc-bench-spec-") as tmp:
        drafts = {"1 layer": os.path.join(tmp, "draft.ein"), "= target": str(SRC)}
        with open(drafts["1 layer"], "w") as f:
            f.write(draft_source(text))
        prompt = os.path.join(tmp, "prompt.npy")
        rng = np.random.default_rng(1)
        np.save(prompt, rng.integers(32, 127, (4, 8)).astype(np.int32))
        plain = os.path.join(tmp, "plain")
        benchlib.run([str(einc), str(SRC), "-D", "T=1", "-o", plain])
        gen = ["--random-inputs", "1", "--prompt-ids", prompt, "--generate", str(a.tokens)]
        for (name, draft), k in [(d, k) for d in drafts.items() for k in ks]:
            exe = os.path.join(tmp, "spec%d" % k)
            benchlib.run([str(einc), str(SRC), "-D", "T=%d" % (k + 1), "--draft", draft,
                          "--draft-define", "T=1", "-o", exe])
            for mode, flags in (("greedy", []), ("T=0.8", ["--temperature", "0.8", "--seed", "3"])):
                base, pout = timed([plain] + gen + flags, a.repeat)
                spec, sout = timed([exe, "--speculate", str(k)] + gen + flags, a.repeat)
                if mode == "greedy" and tokens(pout) != tokens(sout):
                    raise benchlib.BenchError("greedy speculative tokens differ from plain "
                                              "decoding's:\n%s\n%s" % (pout, sout))
                m = re.search(r"acceptance rate ([0-9.]+), ([0-9.]+) tokens per target run.*"
                              r"speed-up ([0-9.]+)x", sout)
                rows.append([name, k, mode, base, spec, float(m.group(1)), float(m.group(2)),
                             base / spec, float(m.group(3))])
    res = benchlib.Results("speculative", "Speculative decoding vs plain decoding (fortunes, "
                           "untrained)")
    for name, k, mode, base, spec, acc, per_run, _, _ in rows:
        what = "draft %s, K=%d, %s" % (name, k, mode)
        res.add("speed-up, " + what, round(base / spec, 3), "x", ratio=round(base / spec, 3))
        res.add("acceptance rate, " + what, acc, "")
        res.add("tokens per target run, " + what, per_run, "tokens")
    res.write(a.json)
    benchlib.table(["draft", "K", "sampling", "plain ms/token", "speculative ms/token", "acceptance",
                    "tokens/target run", "speed-up", "runtime's estimate"], rows)


if __name__ == "__main__":
    benchlib.main_guard(main)
