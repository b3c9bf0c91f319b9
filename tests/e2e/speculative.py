#!/usr/bin/python3
"""speculative.py - speculative decoding (--speculate K) against plain decoding.

A one-layer language model (embedding, attention over a KV cache written
at a window of T new tokens, LM head; prefill.py's) is the target,
compiled with T = K + 1 = 4 on a 2x2 mesh, and the same source with
-D T=1 (--draft-define) is its draft, linked in with --draft and given
other params (--draft-input).  Checks, on the threads runtime (and with
--mpi the greedy one on 4 MPI ranks):
 - greedy speculative decoding gives, token for token, the greedy tokens
   of plain decoding of the target compiled with T = 1, for 4 rows with
   different prompts advancing in lockstep, with both N and the rounds'
   lengths varied;
 - --stop-token: the same tokens, -1s and counts as plain decoding's;
 - a draft compiled without a mesh (each device runs all of it) gives
   the same greedy tokens;
 - a draft with the target's params is always accepted: acceptance rate
   1.00 and K + 1 tokens per target run;
 - sampled (temperature 1.5, and with top-k 6): the first two tokens of
   2048 seeded samples (256 rows of one prompt, 8 seeds) fit the target's
   distribution by a chi-square test (p > 0.001): the first token's from
   the target's logits, the second's from the logits after each possible
   first token (one plain run over V prompts); the draft's own samples
   fail the same test (p < 1e-6), so the test can tell the two apart;
 - the same seed gives the same tokens;
 - bad flags: --speculate in an executable without a draft, K + 1 other
   than the window, K = 0, --draft-input without --speculate, a window
   that does not fit the cache; a draft whose vocabulary differs is a
   compile error at its output line, one on another mesh at its mesh line;
   --draft with -c, and --draft-define without --draft, are bad usage.
The last line is `N passed, N failed`.

Usage: speculative.py --einc PATH [--mpi --mpirun PATH]
"""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import Tally, mpi_launch, printed_tokens, runtime_args  # noqa: E402

V, D, K, H, S = 16, 16, 2, 8, 24
LM = """mesh X = 2, Y = 2
dim B = 4, S = %d, D = %d, K = %d, H = %d, V = %d, T = 4
input Tok[B, T] : i32
input Pos[] : i32
param Emb[V, D] : f32
param Wq[D, K_Y, H] : f32
param Wk[D, K_Y, H] : f32
param Wv[D, K_Y, H] : f32
param Wo[K_Y, H, D] : f32
param Wlm[D, V] : f32
state KC[B, S_X, K_Y, H] : f32
state VC[B, S_X, K_Y, H] : f32
X0[B, T, D] = Emb[Tok[B, T], D]
Q[B, T, K, H] = X0[B, T, D] * Wq[D, K, H]
KC[B, Pos:T, K, H] = X0[B, T, D] * Wk[D, K, H]
VC[B, Pos:T, K, H] = X0[B, T, D] * Wv[D, K, H]
Sc[B, T, K, S] = Q[B, T, K, H] * KC[B, S, K, H] / 2.8284271247461903
P[B, T, K, S] = softmax(where(S <= Pos[] + T, Sc[B, T, K, S], -inf), S)
O[B, T, K, H] = P[B, T, K, S] * VC[B, S, K, H]
Y[B, T, D] = X0[B, T, D] + O[B, T, K, H] * Wo[K, H, D]
Lg[B, T, V] = Y[B, T, D] * Wlm[D, V]
output Lg[B, T, V]
""" % (S, D, K, H, V)
SHAPES = {"Emb": (V, D), "Wq": (D, K, H), "Wk": (D, K, H), "Wv": (D, K, H), "Wo": (K, H, D),
          "Wlm": (D, V)}


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=300)
    return p.returncode, p.stdout


def compile_ok(tally, what, cmd):
    rc, out = run(cmd)
    if rc != 0:
        tally.result(False, what, out)
    return rc == 0


def chi2_pvalue(counts, expected):
    """Pearson's chi-square p-value, cells with expected < 5 pooled into one."""
    from scipy.stats import chi2
    small = expected < 5
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    stat = float(np.sum((obs[keep] - exp[keep]) ** 2 / exp[keep]))
    return float(chi2.sf(stat, int(keep.sum()) - 1)), stat


def softmax(x, temp, top_k=0):
    z = x.astype(np.float64) / temp
    if top_k:
        cut = np.sort(z)[::-1][top_k - 1]
        z = np.where(z >= cut, z, -np.inf)
    e = np.exp(z - z.max())
    return e / e.sum()


def main():
    a = runtime_args(__doc__)
    tally = Tally()
    rng = np.random.default_rng(27)
    with tempfile.TemporaryDirectory(prefix="einc-spec-") as work:
        def path(name):
            return os.path.join(work, name)

        src = path("lm.ein")
        with open(src, "w") as f:
            f.write(LM)
        tgt, drf, wide = [], [], []
        for n, s in SHAPES.items():
            w = (rng.standard_normal(s) / 2).astype(np.float32)
            # The draft: the target's weights plus noise, so most tokens agree.
            dw = (w + rng.standard_normal(s).astype(np.float32) * 0.1).astype(np.float32)
            np.save(path("t_%s.npy" % n), w)
            np.save(path("d_%s.npy" % n), dw)
            tgt += ["--input", "%s=%s" % (n, path("t_%s.npy" % n))]
            drf += ["--draft-input", "%s=%s" % (n, path("d_%s.npy" % n))]
            wide += ["--input", "%s=%s" % (n, path("d_%s.npy" % n))]
        same = [x.replace("--input", "--draft-input") for x in tgt]
        spec, plain = path("spec"), path("plain")
        if not (compile_ok(tally, "einc --draft", [a.einc, src, "--draft", src, "--draft-define",
                                                   "T=1", "-o", spec]) and
                compile_ok(tally, "einc -D T=1", [a.einc, src, "-D", "T=1", "-o", plain])):
            return tally.finish()

        # Greedy: lockstep rows against plain decoding, several N.
        prompts = rng.integers(0, V, (4, 5)).astype(np.int32)
        np.save(path("prompt.npy"), prompts)
        gen = ["--prompt-ids", path("prompt.npy")]
        for n in (1, 7, 17):  # 17: the last window ends at the cache's last position
            rc1, want = run([plain] + tgt + gen + ["--generate", str(n)])
            rc2, got = run([spec, "--speculate", "3"] + tgt + drf + gen + ["--generate", str(n)])
            ok = rc1 == 0 and rc2 == 0 and printed_tokens(got, 4) == printed_tokens(want, 4)
            m = re.search(r"acceptance rate ([0-9.]+), ([0-9.]+) tokens per target run", got)
            tally.result(ok and m is not None,
                         "greedy speculative (K = 3, 4 rows) equals greedy decoding, N = %d%s"
                         % (n, " (acceptance %s, %s tokens per run)" % m.groups() if m else ""),
                         "plain:\n%s\nspeculative:\n%s" % (want, got))
        # Stop tokens: the same -1s and early end as --generate's.
        rc, out = run([plain] + tgt + gen + ["--generate", "12"])
        made = [t for row in printed_tokens(out, 4) for t in row]
        stop = str(max(set(made), key=made.count))  # the commonest token
        outs = []
        for exe, extra in ((plain, []), (spec, ["--speculate", "3"] + drf)):
            rc, out = run([exe] + extra + tgt + gen + ["--generate", "12", "--stop-token", stop,
                                                       "--generated", path("stop.npy")])
            outs.append((rc, np.load(path("stop.npy")) if rc == 0 else None, out))
        ok = all(o[0] == 0 for o in outs) and np.array_equal(outs[0][1], outs[1][1])
        counts = [re.search(r"generated (\d+) tokens.*?(\d+) ended at a stop token", o[2])
                  for o in outs]
        tally.result(ok and all(counts) and counts[0].groups() == counts[1].groups(),
                     "--stop-token %s: speculative --generated equals --generate's" % stop,
                     "\n".join(o[2] for o in outs))
        # A draft on one device (no mesh): every device runs all of it.
        solo = path("lm_solo.ein")
        with open(solo, "w") as f:
            f.write(re.sub(r"_[XY]", "", LM.replace("mesh X = 2, Y = 2\n", "")))
        if compile_ok(tally, "einc --draft (one device)", [a.einc, src, "--draft", solo,
                                                           "--draft-define", "T=1", "-o",
                                                           path("spec_solo")]):
            rc1, want = run([plain] + tgt + gen + ["--generate", "9"])
            rc2, got = run([path("spec_solo"), "--speculate", "3"] + tgt + drf + gen +
                           ["--generate", "9"])
            tally.result(rc1 == 0 and rc2 == 0 and
                         printed_tokens(got, 4) == printed_tokens(want, 4),
                         "a one-device draft beside a 2x2 target: greedy decoding's tokens",
                         want + got)
        rc, out = run([spec, "--speculate", "3"] + tgt + same + gen + ["--generate", "12"])
        tally.result(rc == 0 and "acceptance rate 1.00, 4.00 tokens per target run" in out,
                     "a draft equal to the target is always accepted", out)

        # Sampled: the first two tokens' distribution.
        B = 256
        big = path("lm256.ein")
        with open(big, "w") as f:
            f.write(LM.replace("B = 4", "B = %d" % B))
        spec2, plain2 = path("spec256"), path("plain256")
        if not (compile_ok(tally, "einc --draft (B = 256)", [a.einc, big, "--draft", big,
                                                             "--draft-define", "T=1", "-o", spec2])
                and compile_ok(tally, "einc -D T=1 (B = 256)", [a.einc, big, "-D", "T=1", "-o",
                                                                 plain2])):
            return tally.finish()
        head = prompts[0, :3]
        np.save(path("p256.npy"), np.tile(head, (B, 1)).astype(np.int32))
        # The target's logits after the prompt, and after each first token v.
        rc, out = run([plain2] + tgt + ["--prompt-ids", path("p256.npy"), "--generate", "1",
                                        "--output", "Lg=" + path("lg1.npy")])
        ext = np.tile(np.append(head, 0), (B, 1)).astype(np.int32)
        ext[:, 3] = np.arange(B) % V
        np.save(path("ext.npy"), ext)
        rc2, out2 = run([plain2] + tgt + ["--prompt-ids", path("ext.npy"), "--generate", "1",
                                          "--output", "Lg=" + path("lg2.npy")])
        if rc or rc2:
            tally.result(False, "the target's logits", out + out2)
            return tally.finish()
        lg1, lg2 = np.load(path("lg1.npy"))[0, 0], np.load(path("lg2.npy"))[:V, 0]
        for temp, top_k in ((1.5, 0), (1.5, 6)):
            flags = ["--temperature", str(temp)] + (["--top-k", str(top_k)] if top_k else [])
            p1 = softmax(lg1, temp, top_k)
            joint = np.array([p1[v] * softmax(lg2[v], temp, top_k) for v in range(V)]).ravel()
            samples, draft_only, rates = [], [], []
            for seed in range(8):
                cmd = ["--prompt-ids", path("p256.npy"), "--generate", "2", "--seed", str(seed),
                       "--generated", path("g.npy")] + flags
                rc, out = run([spec2, "--speculate", "3"] + tgt + drf + cmd)
                if rc:
                    tally.result(False, "sampled speculative run", out)
                    return tally.finish()
                samples.append(np.load(path("g.npy"))[:, 3:5])
                rates += re.findall(r"acceptance rate ([0-9.]+)", out)
                rc, out = run([plain2] + wide + cmd)
                draft_only.append(np.load(path("g.npy"))[:, 3:5])
            sm = np.concatenate(samples)
            dm = np.concatenate(draft_only)
            n = len(sm)
            c1 = np.bincount(sm[:, 0], minlength=V)
            pv1, st1 = chi2_pvalue(c1, n * p1)
            cj = np.bincount(sm[:, 0] * V + sm[:, 1], minlength=V * V)
            pvj, stj = chi2_pvalue(cj, n * joint)
            dj = np.bincount(dm[:, 0] * V + dm[:, 1], minlength=V * V)
            pvd, _ = chi2_pvalue(dj, n * joint)
            what = "T = %g%s" % (temp, ", top-k %d" % top_k if top_k else "")
            tally.result(pv1 > 1e-3 and pvj > 1e-3,
                         "sampled speculative (%s): %d first tokens fit the target's distribution "
                         "(chi-square p = %.3g) and first pairs too (p = %.3g); acceptance %s"
                         % (what, n, pv1, pvj, "/".join(sorted(set(rates)))),
                         "counts %s\nexpected %s" % (c1, np.round(n * p1, 1)))
            tally.result(pvd < 1e-6, "the draft's own samples fail the same test (%s): p = %.3g"
                         % (what, pvd))
        cmd = ["--prompt-ids", path("p256.npy"), "--generate", "6", "--seed", "5",
               "--temperature", "1"]
        r1 = run([spec2, "--speculate", "3"] + tgt + drf + cmd)
        r2 = run([spec2, "--speculate", "3"] + tgt + drf + cmd)
        tally.result(r1[0] == 0 and printed_tokens(r1[1], 16) == printed_tokens(r2[1], 16),
                     "the same seed gives the same speculative tokens", r1[1])

        # Bad flags and programs.
        bad = [([plain, "--speculate", "3"] + tgt + gen + ["--generate", "4"],
                "--speculate 3: this executable has no draft program"),
               ([spec, "--speculate", "2"] + tgt + drf + gen + ["--generate", "4"],
                "--speculate 2: the target verifies K + 1 = 3 tokens a run, and its tokens 'Tok' "
                "are [4, 4] (a window of 4): compile it with -D T=3, or give --speculate 3"),
               ([spec, "--speculate", "0"] + tgt + drf + gen + ["--generate", "4"],
                "--speculate expects a count from 1 to 64"),
               ([plain] + tgt + drf + gen + ["--generate", "4"],
                "--draft-input gives the draft's values: it needs --speculate K"),
               ([spec, "--speculate", "3"] + tgt + drf + gen + ["--generate", "18"],
                "need 25 cache positions, and the target's cache holds 24"),
               ([spec, "--speculate", "3"] + tgt + gen + ["--generate", "4"],
                "missing --input Emb=FILE.npy for param 'Emb'")]
        for cmd, needle in bad:
            rc, out = run(cmd)
            tally.result(rc == 1 and needle in out, "refused: %s" % needle,
                         "exit %d:\n%s" % (rc, out))
        v32 = path("lm_v32.ein")
        with open(v32, "w") as f:
            f.write(LM.replace("V = %d" % V, "V = 32"))
        rc, out = run([a.einc, src, "--draft", v32, "--draft-define", "T=1", "-o", path("x")])
        tally.result(rc == 1 and "lm_v32.ein:22:" in out and "must share the target's "
                     "vocabulary" in out, "a draft with another vocabulary is a compile error",
                     out)
        mesh4 = path("lm_mesh4.ein")
        with open(mesh4, "w") as f:
            f.write(LM.replace("mesh X = 2, Y = 2", "mesh X = 4, Y = 1"))
        rc, out = run([a.einc, src, "--draft", mesh4, "--draft-define", "T=1", "-o", path("x")])
        tally.result(rc == 1 and "lm_mesh4.ein:1:" in out and "its mesh must be the target's"
                     in out, "a draft on another mesh is a compile error", out)
        for args, needle in ((["--draft", src, "-c", "-o", path("x.o")],
                              "--draft links a draft into an executable"),
                             (["--draft-define", "T=1", "-o", path("x")],
                              "--draft-define needs --draft FILE.ein")):
            rc, out = run([a.einc, src] + args)
            tally.result(rc == 2 and needle in out, "einc refuses: " + needle, out)

        if a.mpi:
            mspec = path("spec_mpi")
            if compile_ok(tally, "einc --draft --runtime=mpi", [a.einc, src, "--draft", src,
                                                                "--draft-define", "T=1",
                                                                "--runtime=mpi", "-o", mspec]):
                rc1, want = run([plain] + tgt + gen + ["--generate", "9"])
                rc2, got = run(mpi_launch(a.mpirun, 4) + [mspec, "--speculate", "3"] + tgt + drf +
                               gen + ["--generate", "9"])
                tally.result(rc1 == 0 and rc2 == 0 and
                             printed_tokens(got, 4) == printed_tokens(want, 4),
                             "greedy speculative on 4 MPI ranks equals greedy decoding",
                             want + got)
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
