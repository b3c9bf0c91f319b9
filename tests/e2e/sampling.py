#!/usr/bin/python3
"""sampling.py - --generate's sampling flags on a real decode program: top-k
and top-p against NumPy, seeds, stop tokens, the cache-length check, the
[B, 1, V] logits and every bad flag value.

generate.py's two-layer decoder (the program without an argmax output, on
a 2x2 mesh, threads and with --mpi 4 MPI ranks):
 - sampled with temperature, top-k and top-p, the tokens must be the ones
   NumPy's decoder (f64) chooses by the same rule with the same uniform
   draws (sample_ref.py), and --check (the unsharded reference) must pass;
 - the same seed twice gives the same tokens, another seed others;
 - --stop-token ends a sequence at its stop token (later places -1 in
   --generated), and the loop ends when every sequence has ended;
 - N tokens that fit the cache exactly run; one more is refused before
   anything runs (no tokens printed, no --generated file), with the most
   that fits;
 - every bad value of --top-k, --top-p, --stop-token, and the sampling
   flags without --temperature or --generate, exit 1 with a message.
prefill.py's one-layer model with its window dim T = 1 (tokens [B, 1],
logits [B, 1, V], threads): with its logits replicated (`output Lg[B, T, V]`)
and vocab-sharded (`output Lg`) it samples the same tokens and passes --check.
Sampling on sharded logits (runtime/sample_shard.c): the decoder with its
logits written `Logits[B, V_X]`, `Logits[B_Y, V_X]` and `Logits[B, V_XY]`
decodes greedily and samples (top-k, top-p, and without top-k) exactly the
tokens of `Logits[B, V]` and of NumPy, with --check, threads and MPI,
and --stats prints the gather each step chose, pairs or whole rows, with
the closed form's bytes (pairs B_l * G * K * 16 + B * 8 against whole rows
B * V * 4: both occur among these shardings and settings); an
argmax output `Next[B_Y]` beside them leaves the choice to the logits,
and alone is refused with a message (threads).
The last line is `N passed, N failed`.

Usage: sampling.py --einc PATH [--mpi --mpirun PATH]
"""
import os
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from e2e_common import Tally, builds, runtime_args  # noqa: E402
from generate import DIMS, decode, printed_tokens, run, source, weights  # noqa: E402
from prefill import LM  # noqa: E402
from sample_ref import choose, uniform  # noqa: E402

# (temperature, top-k, top-p): each cut binding alone, and both together.
SETTINGS = [(1.5, 5, 1.0), (1.0, 0, 0.8), (0.8, 4, 0.9)]

def window_lm():
    """prefill.py's one-layer model at T = 1 (tokens [B, 1], logits [B, 1, V])
    with a vocab-parallel LM head, up to its logits (no argmax, no output)."""
    src = LM.replace("T = 4", "T = 1").replace("param Wlm[D, V]", "param Wlm[D, V_X]")
    src = src[:src.index("Next[B, T]")]
    assert "T = 1" in src and "V_X" in src and src.endswith("Wlm[D, V]\n"), src
    return src


def flags(t, k, p, seed):
    """The command line of a setting (k = 0 and p = 1 are the defaults)."""
    return (["--temperature", repr(t), "--seed", str(seed)] + (["--top-k", str(k)] if k else []) +
            (["--top-p", repr(p)] if p < 1 else []))


def sampled(w64, prompt, n, t, k, p, seed):
    """NumPy's tokens for one setting: the same rule and draws as the runtime."""
    return decode(w64, prompt, n, lambda row, s, b: choose(row, t, k, p, uniform(seed, s, b)))


def decoder_checks(a, work, tally):
    rng = np.random.default_rng(17)
    B, V, S, N, T0 = DIMS["B"], DIMS["V"], DIMS["S"], 6, 4
    w64, args = weights(rng, work)
    prompt = rng.integers(0, V, size=(B, T0), dtype=np.int32)
    ppath = os.path.join(work, "prompt.npy")
    np.save(ppath, prompt)
    greedy = decode(w64, prompt, N)
    src = os.path.join(work, "logits.ein")
    with open(src, "w") as f:
        f.write(source(False))
    for rt, exe, launch in builds(a, src, os.path.join(work, "logits"), 4, tally):
        cmd = launch + [exe, "--prompt-ids", ppath] + args
        gen = cmd + ["--generate", str(N)]
        for t, k, p in SETTINGS:
            want = sampled(w64, prompt, N, t, k, p, 7)
            rc, out = run(gen + flags(t, k, p, 7) + ["--check"])
            got = printed_tokens(out, B) if rc == 0 else None
            tally.result(rc == 0 and got == want.tolist() and "check tokens: equal" in out,
                         "T=%g top-k %d top-p %g, seed 7 (%s): %s as NumPy" % (t, k, p, rt, got),
                         "want %s\n%s" % (want.tolist(), out))
        t, k, p = SETTINGS[2]
        runs = [run(gen + flags(t, k, p, seed))[1] for seed in (11, 11, 12)]
        toks = [printed_tokens(out, B) for out in runs]
        tally.result(toks[0] == toks[1] and toks[0] != toks[2] and None not in toks[0],
                     "seed 11 twice gives the same tokens, seed 12 others (%s)" % rt,
                     "\n".join(runs))
        # Stop tokens: each sequence ends at the first of them it makes.
        stop = sorted({int(greedy[0][1]), int(greedy[1][2])})
        want = np.full((B, N), -1)
        for b in range(B):
            end = min([list(greedy[b]).index(x) for x in stop if x in greedy[b]] + [N - 1])
            want[b, :end + 1] = greedy[b, :end + 1]
        gpath = os.path.join(work, "stop.npy")
        rc, out = run(gen + ["--stop-token", ",".join(map(str, stop)), "--generated", gpath,
                             "--check"])
        saved = np.load(gpath) if rc == 0 else None
        made = max(int((r >= 0).sum()) for r in want)  # the loop ends when all have ended
        tally.result(rc == 0 and printed_tokens(out, B) == [[x for x in r if x >= 0] for r in want]
                     and np.array_equal(saved[:, T0:], want) and "check tokens: equal" in out
                     and "generated %d tokens for %d sequences" % (made, B) in out,
                     "--stop-token %s ends the sequences there (%s): %s" % (stop, rt, want.tolist()),
                     "want %s\n%s" % (want.tolist(), out))
        # The cache: exactly full runs; one token more is refused before the run.
        fits = S - T0 + 1
        rc, out = run(cmd + ["--generate", str(fits)])
        tally.result(rc == 0 and len(printed_tokens(out, B)[0]) == fits,
                     "--generate %d fills the cache of %d (%s)" % (fits, S, rt), out)
        gpath = os.path.join(work, "never.npy")
        rc, out = run(cmd + ["--generate", str(fits + 1), "--generated", gpath])
        needle = ("--generate %d: the prompt's %d tokens and %d new ones need positions 0 to %d, "
                  "and the cache holds %d (position input 'Pos' is below %d): at most %d new "
                  "tokens fit after this prompt; nothing was run"
                  % (fits + 1, T0, fits + 1, S, S, S, fits))
        tally.result(rc == 1 and needle in out and "tokens 0:" not in out and
                     not os.path.exists(gpath), "past the cache: refused before the run (%s)" % rt,
                     "exit %s, expected %r in:\n%s" % (rc, needle, out))
        if rt != "threads":
            continue
        bad = [(["--top-k", "0", "--temperature", "1"], "--top-k expects a count from 1 to"),
               (["--top-k", "x", "--temperature", "1"], "--top-k expects a count from 1 to"),
               (["--top-k", str(V + 1), "--temperature", "1"],
                "--top-k %d: the logits 'Logits' have %d tokens: K must be from 1 to %d"
                % (V + 1, V, V)),
               (["--top-p", "0", "--temperature", "1"], "--top-p expects a number in (0, 1]"),
               (["--top-p", "1.01", "--temperature", "1"], "--top-p expects a number in (0, 1]"),
               (["--top-p", "nan", "--temperature", "1"], "--top-p expects a number in (0, 1]"),
               (["--top-k", "3"], "--top-k samples: give --temperature T > 0 as well"),
               (["--top-p", "0.5"], "--top-p samples: give --temperature T > 0 as well"),
               (["--temperature", "-1"], "--temperature expects a number >= 0"),
               (["--stop-token", "1,,2"], "--stop-token expects token ids from 0 to"),
               (["--stop-token", "-1"], "--stop-token expects token ids from 0 to"),
               (["--stop-token", str(V)], "--stop-token %d: the vocabulary has %d tokens "
                                          "(logits 'Logits'): ids are from 0 to %d" % (V, V, V - 1))]
        for extra, needle in bad:
            rc, out = run(gen + extra)
            tally.result(rc == 1 and needle in out and "tokens 0:" not in out,
                         "%s: refused" % " ".join(extra), "exit %s, expected %r in:\n%s"
                         % (rc, needle, out))
        for flag, val in (("--top-k", "2"), ("--top-p", "0.5"), ("--stop-token", "3")):
            rc, out = run([exe] + args + [flag, val])
            tally.result(rc == 1 and "%s needs --generate N" % flag in out,
                         "%s without --generate: refused" % flag, out)


def window_checks(a, work, tally):
    """Logits [B, 1, V]: replicated and vocab-sharded, the same sampled tokens."""
    prompt = os.path.join(work, "prompt1.npy")
    np.save(prompt, np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32))
    got = {}
    for out_stmt, tag in (("output Lg[B, T, V]", "replicated"), ("output Lg", "vocab-sharded")):
        src = os.path.join(work, "window_%s.ein" % tag)
        with open(src, "w") as f:
            f.write(window_lm() + out_stmt + "\n")
        a1 = type(a)(**dict(vars(a), mpi=False))
        for rt, exe, launch in builds(a1, src, os.path.join(work, "window_" + tag), 4, tally):
            rc, out = run(launch + [exe, "--random-inputs", "1", "--prompt-ids", prompt,
                                    "--generate", "4"] + flags(1.0, 8, 0.9, 3) + ["--check"])
            got[tag] = printed_tokens(out, 2) if rc == 0 else None
            tally.result(rc == 0 and "check tokens: equal" in out and
                         len(got[tag][1]) == 4,
                         "logits [B, 1, V] %s: sampled, --check passes" % tag, out)
    tally.result(got.get("replicated") is not None and
                 got.get("replicated") == got.get("vocab-sharded"),
                 "logits [B, 1, V]: vocab-sharded samples the replicated tokens", str(got))


# Shardings of the decoder's logits: the vocabulary over X, the batch too
# (over Y), and the vocabulary over both axes (4 shards).
SHARDED_LOGITS = ["Logits[B, V_X]", "Logits[B_Y, V_X]", "Logits[B, V_XY]"]


def gather_line(constraint, t, k):
    """The line --stats prints for the sampling gather of `constraint`'s
    logits sampled with temperature t and top-k k (rt_sample_choose)."""
    B, V = DIMS["B"], DIMS["V"]
    if "_" not in constraint:
        return "sampling gather per step: none (the logits are replicated)"
    G = 4 if "V_XY" in constraint else 2
    rows = B // 2 if "B_Y" in constraint else B
    K = 1 if t == 0 else k if 0 < k < V else V
    pairs, whole = rows * G * K * 16 + B * 8, B * V * 4
    if pairs < whole:
        return ("sampling gather per step: pairs, K = %d per shard, %d bytes per device "
                "(whole rows: %d)" % (K, pairs, whole))
    return "sampling gather per step: whole rows, %d bytes per device (pairs: %d)" % (whole, pairs)


def sharded_checks(a, work, tally):
    """Sharded logits: greedy and seeded sampling give exactly the tokens of
    the same program with replicated logits (and NumPy's), on every runtime."""
    rng = np.random.default_rng(23)
    B, V, N, T0 = DIMS["B"], DIMS["V"], 6, 4
    w64, args = weights(rng, work)
    prompt = rng.integers(0, V, size=(B, T0), dtype=np.int32)
    ppath = os.path.join(work, "prompt_sh.npy")
    np.save(ppath, prompt)
    settings = [(0, 0, 1.0)] + SETTINGS  # greedy first; SETTINGS[1] has no --top-k
    paths = set()
    for constraint in ["Logits[B, V]"] + SHARDED_LOGITS:
        tag = constraint.replace("[", "_").replace(", ", "_").replace("]", "")
        src = os.path.join(work, tag + ".ein")
        with open(src, "w") as f:
            f.write(source(False).replace("output Logits[B, V]", "output " + constraint))
        for rt, exe, launch in builds(a, src, os.path.join(work, tag), 4, tally):
            gen = launch + [exe, "--prompt-ids", ppath, "--generate", str(N)] + args
            for t, k, p in settings:
                want = (decode(w64, prompt, N) if t == 0 else sampled(w64, prompt, N, t, k, p, 5))
                rc, out = run(gen + (flags(t, k, p, 5) if t else []) + ["--check", "--stats"])
                got = printed_tokens(out, B) if rc == 0 else None
                line = gather_line(constraint, t, k)
                paths.add(line.split(",")[0])
                tally.result(rc == 0 and got == want.tolist() and "check tokens: equal" in out and
                             line in out, "output %s, T=%g top-k %d top-p %g (%s): %s as "
                             "replicated and NumPy; %s" % (constraint, t, k, p, rt, got, line),
                             "want %s\n%s" % (want.tolist(), out))
    tally.result(len(paths) == 3, "the shardings and settings gather pairs, whole rows and none",
                 repr(paths))
    # A sharded argmax output: beside the logits they decide; alone, refused.
    want = decode(w64, prompt, N)
    for logits, tag in (("output Logits[B, V_X]", "next_logits"), ("", "next_only")):
        src = os.path.join(work, tag + ".ein")
        with open(src, "w") as f:
            f.write(source(True).replace("output Logits[B, V]", logits)
                    .replace("output Next[B]", "output Next[B_Y]"))
        a1 = type(a)(**dict(vars(a), mpi=False))
        for rt, exe, launch in builds(a1, src, os.path.join(work, tag), 4, tally):
            rc, out = run([exe, "--prompt-ids", ppath, "--generate", str(N), "--check"] + args)
            if logits:
                tally.result(rc == 0 and printed_tokens(out, B) == want.tolist(),
                             "output Next[B_Y] beside Logits[B, V_X]: greedy from the logits",
                             "want %s\n%s" % (want.tolist(), out))
            else:
                needle = ("--generate: output 'Next' is the next token of each sequence: it must "
                          "have shape [2] and be replicated (written without subscripts), or the "
                          "program must output its logits [B, V] as well")
                tally.result(rc == 1 and needle in out and "tokens 0:" not in out,
                             "output Next[B_Y] alone: refused, naming the ways out",
                             "exit %s, expected %r in:\n%s" % (rc, needle, out))


def main():
    a = runtime_args(__doc__)
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="einc-sampling-") as work:
        decoder_checks(a, work, tally)
        window_checks(a, work, tally)
        sharded_checks(a, work, tally)
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
