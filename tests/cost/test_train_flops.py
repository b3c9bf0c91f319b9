#!/usr/bin/env python3
"""A 40-layer LLaMA-2 13B training step against seed 003's FLOP count.

usage: test_train_flops.py EINC EXAMPLES_DIR

Seed 003 ("Transformer math", "Training FLOPs") counts a training step as
6 * params * tokens (2 forward, 4 backward: each einsum's two adjoint
einsums) plus the attention's score and value einsums, three times their
forward 4 * B * T * S * N * H per layer.  For
`einc examples/llama2_13b_train.ein --hw tpu-v5p --dump-cost` (40 layers as
one repeated block, its backward a loop over the layers in reverse):

1. the model FLOPs are that count, within 0.1% above it (the rest are the
   small einsums of RMSNorm, softmax, RoPE and the loss);
2. the phases line gives backward/forward FLOPs of 2 (seed 003), and the
   phases add up to the FLOPs a device executes;
3. MFU is printed, in (0, 100%];
4. the IR has one forward loop and one reverse loop over L = 40, and the
   reverse loop all-reduces each of the 9 stacked params' per-layer
   gradients over X (seed 000, DP) inside the loop (the norm gains' over
   X and Y where the plan keeps the residual stream sequence-parallel
   over Y, which collective matmul makes the faster plan on tpu-v5p);
5. the step time and the FLOPs grow linearly in L (L = 3, 4, 40): the
   backward loop counts its body |L| times, as the forward loop does.
   (At L = 2 the planner lays out the LM head differently, a choice
   outside the loops.)
"""
import json
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from einc_checks import Checks, run  # noqa: E402

NUM = r"([0-9.]+(?:e[+-]?[0-9]+)?)"


def totals(einc, path, layers):
    rc, out, err = run(einc, path, "-D", "L=%d" % layers, "--hw", "tpu-v5p", "--dump-ir=json")
    if rc != 0:
        raise SystemExit("einc failed: " + err[-600:])
    return json.loads(out)["totals"]


def main(argv):
    einc, examples = argv[1], argv[2]
    path = os.path.join(examples, "llama2_13b_train.ein")
    check = Checks()
    rc, out, err = run(einc, "--hw", "tpu-v5p", "--dump-cost", path)
    check(rc == 0, "einc --dump-cost exits 0 (%s)" % err.strip()[-300:])
    rc2, ir, err2 = run(einc, "--hw", "tpu-v5p", "--dump-ir=json", path)
    check(rc2 == 0, "einc --dump-ir=json exits 0")
    js = json.loads(ir)
    dims = {d["name"]: d["size"] for d in js["dims"]}
    B, T, S, D, N, F, V, L = (dims[k] for k in "BTSDNFVL")
    H = dims["P"] * dims["G"]
    params = L * (4 * D * N * H + 3 * D * F) + D * V  # layers and LM head (a lookup is no FLOP)
    attention = L * 4 * B * T * S * N * H
    want = 6 * params * B * T + 3 * attention
    got = js["totals"]["model_flops"]
    check(want <= got <= 1.001 * want,
          "model FLOPs %.6g = 6 * params * tokens + 3 * attention = %.6g (+0.1%%)" % (got, want))

    m = re.search(r"phases \(op times summed, per device\): forward " + NUM + r" us, " + NUM +
                  r" FLOPs; backward " + NUM + r" us, " + NUM + r" FLOPs; update " + NUM +
                  r" us, " + NUM + r" FLOPs; backward/forward FLOPs " + NUM, out)
    check(m is not None, "--dump-cost prints the forward, backward and update phases")
    if m:
        fwd, bwd, upd = float(m.group(2)), float(m.group(4)), float(m.group(6))
        check(1.99 <= bwd / fwd <= 2.01, "backward/forward FLOPs %.4f (seed 003: 2)" % (bwd / fwd))
        ex = re.search(r"executed " + NUM + r" per device", out)
        executed = float(ex.group(1)) if ex else 0
        check(ex is not None and abs(fwd + bwd + upd - executed) <= 0.01 * executed,
              "phases add up to the executed FLOPs per device: %.4g vs %.4g" %
              (fwd + bwd + upd, executed))
    mfu = re.search(r"MFU " + NUM + "%", out)
    check(mfu is not None and 0 < float(mfu.group(1)) <= 100,
          "MFU printed: %s" % (mfu.group(0) if mfu else "none"))

    ops = js["ops"]
    begins = [i for i, o in enumerate(ops) if o["op"] == "LoopBegin"]
    check(len(begins) == 2 and [ops[i].get("reverse") for i in begins] == [False, True] and
          all(ops[i].get("trips") == 40 for i in begins),
          "one forward and one reverse loop over L = 40: %s" %
          [(ops[i].get("trips"), ops[i].get("reverse")) for i in begins])
    if len(begins) == 2:
        body = [o for o in ops[begins[1] + 1:ops[begins[1]]["end"]]]
        grads = [o for o in body if o["op"] == "AllReduce" and "X" in (o.get("axes") or [])]
        check(len(grads) == 9, "the reverse loop all-reduces 9 per-layer gradients over X: %d (%s)"
              % (len(grads), ", ".join(o["result"]["tensor"] for o in grads)))

    t3, t4, t40 = (totals(einc, path, n) for n in (3, 4, 40))
    for key in ("step_time", "model_flops"):
        per_layer = t4[key] - t3[key]
        check(per_layer > 0 and abs((t40[key] - t3[key]) - 37 * per_layer) <= 1e-6 * t40[key],
              "%s is linear in L: L=3 %.6g, L=4 %.6g, L=40 %.6g" % (key, t3[key], t4[key], t40[key]))
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
