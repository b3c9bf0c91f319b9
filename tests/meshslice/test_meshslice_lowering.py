#!/usr/bin/python3
"""test_meshslice_lowering.py - the meshslice pass as --dump-ir shows it.

- examples/ffw_fsdp_tp.ein (seed 000 "FSDP + TP"): the first FFW GEMM is
  MeshSlice OS and the second LS, both over rows X and columns Y, with no
  whole-tensor AllGather / ReduceScatter left; the text dump shows the loop.
- --meshslice=off gives back exactly propagate's listing (the pipeline
  without the pass), with the seed's four collectives.
- --meshslice=K sets K; a K that does not divide the per-device split dim
  falls back to the largest one below it with a note.
- auto: the chosen K is the smallest whose estimate is within 1% of the
  least over every forced K (the exhaustive search), and K=1 (the Collective 2D GEMM) overlaps
  nothing: its time is at least its compute time plus one collective.
- 1D programs (ffw_tp.ein, ffw_fsdp.ein) have no 2D GEMM and are unchanged.

Usage: test_meshslice_lowering.py EINC EXAMPLES_DIR
"""
import json
import subprocess
import sys

FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
    return cond


def einc(*args):
    p = subprocess.run([EINC] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def ms_ops(path, *opts):
    rc, out, err = einc("--dump-ir=json", *opts, path)
    if not check(rc == 0, "einc %s %s failed: %s" % (" ".join(opts), path, err)):
        return None, []
    ir = json.loads(out)
    return ir, [op for op in ir["ops"] if op["op"] == "MeshSlice"]


def main():
    ffw = EX + "/ffw_fsdp_tp.ein"
    ir, ms = ms_ops(ffw)
    if check(len(ms) == 2, "ffw_fsdp_tp: expected 2 MeshSlice ops, got %d" % len(ms)):
        check([m["dataflow"] for m in ms] == ["OS", "LS"],
              "ffw_fsdp_tp: dataflows %s, expected OS then LS" % [m["dataflow"] for m in ms])
        check(all(m["axes"] == ["X", "Y"] for m in ms), "ffw_fsdp_tp: axes are not [X, Y]")
        check([m["result"]["tensor"] for m in ms] == ["Tmp", "Out"], "ffw_fsdp_tp: wrong results")
        check(ms[0]["split_dim"] == "D" and ms[1]["split_dim"] == "D", "ffw_fsdp_tp: split dims")
        os_colls = sorted((c["op"], c["axis"]) for c in ms[0]["collectives"])
        ls_colls = sorted((c["op"], c["axis"]) for c in ms[1]["collectives"])
        check(os_colls == [("AllGather", "X"), ("AllGather", "Y")], "OS collectives %s" % os_colls)
        check(ls_colls == [("AllGather", "X"), ("ReduceScatter", "Y")], "LS collectives %s" % ls_colls)
        left = [op["op"] for op in ir["ops"] if op["op"] in ("AllGather", "ReduceScatter")]
        check(not left, "whole-tensor collectives left: %s" % left)
    rc, text, _ = einc("--dump-ir", ffw)
    check("MeshSlice(OS, K=" in text and "MeshSlice(LS, K=" in text and "for k in 0.." in text,
          "text dump does not show the MeshSlice loops:\n" + text)

    # off == the pipeline without the pass (propagate's seed 000 listing).
    rc1, off, _ = einc("--dump-ir", "--meshslice=off", ffw)
    rc2, plain, _ = einc("--dump-ir", "--passes=propagate,cost", ffw)
    check(rc1 == 0 and off == plain, "--meshslice=off differs from propagate,cost")
    for line in ("AllGather_Y In", "AllGather_X Win", "AllGather_X Wout", "ReduceScatter_Y Out"):
        check(line in off, "--meshslice=off lacks %s" % line)
    check("MeshSlice" not in off, "--meshslice=off still has MeshSlice")

    # Fixed K, and a K that does not divide (per-device D is 128 = 2^7).
    _, ms4 = ms_ops(ffw, "--meshslice=4")
    check([m["k"] for m in ms4] == [4, 4], "--meshslice=4 gave K %s" % [m["k"] for m in ms4])
    rc, out, err = einc("--dump-ir=json", "--meshslice=3", ffw)
    ks = [op["k"] for op in json.loads(out)["ops"] if op["op"] == "MeshSlice"] if rc == 0 else []
    check(ks == [2, 2] and "does not divide" in err, "--meshslice=3: K %s, stderr %r" % (ks, err))

    # auto: the smallest K within 1% of the least estimate over every valid K
    # (per-device D is 128 on both axes here, so the valid K are 1..128's divisors).
    for i, m in enumerate(ms):
        times = {}
        for k in (1, 2, 4, 8, 16, 32, 64, 128):
            _, forced = ms_ops(ffw, "--meshslice=%d" % k)
            times[k] = forced[i]["cost"]
        least = min(c["time"] for c in times.values())
        want = min(k for k, c in times.items() if c["time"] <= least * 1.01)
        check(m["k"] == want, "op %d: auto K=%d, expected the smallest K within 1%% of the least, %d (%s)"
              % (i, m["k"], want, {k: c["time"] for k, c in times.items()}))
        check(abs(m["cost"]["time"] - times[m["k"]]["time"]) <= 1e-12 * least,
              "auto and forced K=%d disagree" % m["k"])
        c = times[1]
        check(c["time"] >= c["t_compute"] + c["t_comm"] / 2 * 0.999, "K=1 overlaps communication: %s" % c)

    # No 2D GEMM: the same listing with or without the pass.
    for f in ("ffw_tp.ein", "ffw_fsdp.ein", "ffw_dp.ein"):
        a = einc("--dump-ir", EX + "/" + f)[1]
        b = einc("--dump-ir", "--meshslice=off", EX + "/" + f)[1]
        check(a == b and "MeshSlice" not in a, "%s changed by the meshslice pass" % f)

    for f in FAILS:
        print("FAIL", f)
    print("%d failures" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    EINC, EX = sys.argv[1], sys.argv[2]
    sys.exit(main())
