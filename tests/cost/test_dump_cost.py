#!/usr/bin/env python3
"""--dump-cost's whole-program totals, end to end through the einc driver.

usage: test_dump_cost.py EINC EXAMPLES_DIR COST_TESTS_DIR

1. Model FLOPs against seed 003: a forward pass costs 2 * params * tokens
   (each matmul 2 * B * D * F).  params = global elements of the `param`
   tensors, tokens = the product of the dims of the `input` that no param
   has (the ones not contracted with a weight: B for an FFW).  Checked
   within 1% on the LLaMA-2 13B FFW, at two batch sizes, and on
   ffw_fsdp_tp.ein: on tpu-v5e, where the planner shards its batch over
   both axes, and on host, where its GEMMs are MeshSlice loops.
2. MFU counts model FLOPs: the plan of tp_dp_alltoall.ein computes its
   second matmul on every device of Y (2.5x its share) and has the lower
   MFU, below seed 000's TP plan (tp_dp.ein).
3. Memory: a program whose per-device peak exceeds the profile's HBM
   (dp_memory.ein on tpu-v5e) prints the warning and exits 0; the same
   program at a smaller batch, and the FFW examples, print none.
4. A training step (tests/golden/programs/train_fsdp.ein, AdamW, FSDP on
   X of a 2x2 mesh): model FLOPs are the forward pass's 4BDF plus the
   backward's 6BDF (dWin, dWout and dAct; In is data, so no dIn: seed 003
   counts 6 * params * tokens when the input's gradient is made too); the
   phases line splits them; the optimizer state is AdamW's m and v, twice
   the params per device (plus the 4-byte step count); gradients are live
   at the peak.
"""
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from einc_checks import Checks, run  # noqa: E402

GIB = 1024.0 ** 3


def parse_ein(path, defines):
    """Dims, params and inputs of a .ein file: {name: size}, [[dims]], [[dims]]."""
    dims, params, inputs = {}, [], []
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if line.startswith("dim "):
            for item in line[4:].split(","):
                name, size = item.split("=")
                dims[name.strip()] = int(size)
        for kind, out in (("param", params), ("input", inputs)):
            m = re.match(kind + r"\s+\w+\[([^\]]*)\]", line)
            if m:
                out.append([d.strip().split("_")[0] for d in m.group(1).split(",")])
    dims.update(defines)
    return dims, params, inputs


def seed003_forward_flops(path, defines):
    """2 * params * tokens (seed 003) for the forward pass of `path`."""
    dims, params, inputs = parse_ein(path, defines)
    nparams = 0
    for p in params:
        n = 1
        for d in p:
            n *= dims[d]
        nparams += n
    weight_dims = {d for p in params for d in p}
    tokens = 1
    for d in inputs[0]:
        if d not in weight_dims:
            tokens *= dims[d]
    return 2 * nparams * tokens


def totals(out):
    """The numbers of --dump-cost's totals lines."""
    t = {}
    m = re.search(r"MFU ([0-9.]+)%", out)
    t["mfu"] = float(m.group(1)) / 100 if m else None
    m = re.search(r"^model FLOPs: (\S+) global .*?, (\S+) per device; executed (\S+) per device",
                  out, re.M)
    if m:
        t["model"], t["share"], t["executed"] = (float(x) for x in m.groups())
    m = re.search(r"^memory: peak (\d+) bytes .* per device at ", out, re.M)
    t["peak"] = int(m.group(1)) if m else None
    return t


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    einc, examples, cases = argv[1:]
    check = Checks()

    # 1. model FLOPs = 2 * params * tokens
    for name, defines, extra, hw in (("llama2_ffw.ein", {}, [], "tpu-v5e"),
                                     ("llama2_ffw.ein", {"B": 1024}, [], "tpu-v5e"),
                                     ("ffw_fsdp_tp.ein", {}, [], "tpu-v5e"),
                                     ("ffw_fsdp_tp.ein", {}, [], "host"),
                                     ("ffw_fsdp_tp.ein", {}, ["--meshslice=off"], "tpu-v5e")):
        path = os.path.join(examples, name)
        args = ["--hw", hw, "--dump-cost", *extra]
        for k, v in defines.items():
            args += ["-D", "%s=%d" % (k, v)]
        rc, out, err = run(einc, *args, path)
        t = totals(out)
        want = seed003_forward_flops(path, defines)
        got = t.get("model")
        check(rc == 0 and got is not None and abs(got - want) <= 0.01 * want,
              "%s %s: model FLOPs %s vs 2 * params * tokens %.4g" % (name, " ".join(args[3:]), got, want))
        mem = [l for l in err.splitlines() if "warning" in l and "needs" in l]
        check(not mem, "%s: no memory warning (%s)" % (name, "; ".join(mem)[:200]))
    rc, out, _ = run(einc, "--hw", "host", "--dump-cost", os.path.join(examples, "ffw_fsdp_tp.ein"))
    check(re.search(r"^\S+ +MeshSlice ", out, re.M) is not None,
          "ffw_fsdp_tp.ein on host has MeshSlice loops (their model FLOPs are checked above)")

    # 2. MFU of the redundant plan is below seed 000's TP plan
    _, out_tp, _ = run(einc, "--hw", "tpu-v5e", "--dump-cost", os.path.join(cases, "tp_dp.ein"))
    _, out_a2a, _ = run(einc, "--hw", "tpu-v5e", "--dump-cost", os.path.join(cases, "tp_dp_alltoall.ein"))
    tp, a2a = totals(out_tp), totals(out_a2a)
    check("AllToAll" in out_a2a, "tp_dp_alltoall.ein moves Win with an AllToAll")
    check(abs(tp["executed"] - tp["share"]) <= 1e-6 * tp["share"], "tp_dp.ein executes its share")
    check(abs(a2a["executed"] / a2a["share"] - 2.5) < 1e-3,
          "tp_dp_alltoall.ein executes 2.5x its share (%.4g / %.4g)" % (a2a["executed"], a2a["share"]))
    check(a2a["mfu"] < tp["mfu"], "MFU %.3f (AllToAll plan) < %.3f (seed 000 TP)" % (a2a["mfu"], tp["mfu"]))
    # The executed-FLOPs MFU would have been 2.5x the model one, above tp_dp's.
    check(a2a["mfu"] * 2.5 > tp["mfu"], "the executed-FLOPs MFU (%.3f) would rank it first" % (a2a["mfu"] * 2.5))

    # 3. memory warning
    mem = os.path.join(cases, "dp_memory.ein")
    rc, out, err = run(einc, "--hw", "tpu-v5e", "--dump-cost", mem)
    t = totals(out)
    check(rc == 0, "dp_memory.ein compiles (exit %d) despite the warning" % rc)
    m = re.search(r"einc: warning: needs ([0-9.]+) GiB per device .*tpu-v5e has ([0-9.]+) GiB", err)
    check(m is not None, "dp_memory.ein warns: %s" % err.strip())
    if m and t["peak"]:
        check(abs(float(m.group(1)) - t["peak"] / GIB) <= 0.05 + 1e-9 and float(m.group(2)) == 16.0,
              "the warning names the peak (%.1f GiB) and the chip's 16 GiB" % (t["peak"] / GIB))
    check("does not fit" in out, "--dump-cost says it does not fit")
    rc, out, err = run(einc, "--hw", "tpu-v5e", "--dump-cost", "-D", "B=65536", mem)
    check(rc == 0 and "warning" not in err and ": fits" in out, "dp_memory.ein -D B=65536 fits, no warning")
    # Without --dump-cost the warning still comes (it is about the program).
    rc, out, err = run(einc, "--hw", "tpu-v5e", "--dump-ir", mem)
    check(rc == 0 and "einc: warning: needs" in err, "the warning without --dump-cost")

    # 4. a training step
    train = os.path.join(cases, "..", "golden", "programs", "train_fsdp.ein")
    rc, out, _ = run(einc, "--hw", "tpu-v5p", "--dump-cost", train)
    t = totals(out)
    dims, _, _ = parse_ein(train, {})
    bdf = dims["B"] * dims["D"] * dims["F"]
    check(rc == 0 and t.get("model") is not None and abs(t["model"] - 10 * bdf) <= 1e-3 * 10 * bdf,
          "train_fsdp.ein: model FLOPs %s = 4BDF forward + 6BDF backward (%d)" % (t.get("model"), 10 * bdf))
    m = re.search(r"^phases \(op times summed, per device\): forward \S+ us, (\S+) FLOPs; "
                  r"backward \S+ us, (\S+) FLOPs; update \S+ us, (\S+) FLOPs", out, re.M)
    check(m is not None, "train_fsdp.ein: a phases line")
    if m:
        fwd, bwd, upd = (float(x) for x in m.groups())
        # Per device, elementwise FLOPs included (gelu's derivative is the most).
        check(abs(bwd / fwd - 1.5) < 0.05, "backward/forward FLOPs %.3g ~ 6BDF/4BDF" % (bwd / fwd))
        check(0 < upd < 0.01 * fwd, "the update is elementwise (%.3g FLOPs)" % upd)
    m = re.search(r"\(params (\S+) GiB, optimizer state (\S+) GiB, .* gradients and cotangents "
                  r"(\S+) GiB\)", out)
    check(m is not None, "train_fsdp.ein: the memory line splits state and gradients")
    if m:
        params, state, grads = (float(x) for x in m.groups())
        check(abs(state - 2 * params) <= 0.01 * params, "optimizer state %.3g GiB = m + v = 2 x params "
              "%.3g GiB" % (state, params))
        check(grads > 0, "gradients live at the peak (%.3g GiB)" % grads)

    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
