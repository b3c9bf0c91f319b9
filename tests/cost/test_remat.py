#!/usr/bin/env python3
"""--remat trades memory for FLOPs in a training step with a repeated block.

usage: test_remat.py EINC PROGRAM

PROGRAM is tests/golden/programs/grad_repeat_fsdp.ein (8 FFW layers as
`repeat N`, FSDP, gradients of the stacked weights).  Compiled with
`--hw tpu-v5p` and --remat=none, elementwise and layer:

1. none keeps, per layer, the layer's input, the first einsum's result Z
   and its gelu H (three LayerStacks in the forward loop); elementwise
   keeps Z and the input and computes H again; layer keeps only the input
   and computes the layer again in the backward loop;
2. the peak memory per device falls from none to elementwise by H's stack
   (|N| layers), and to layer by Z's stack less the one layer of Z and H
   the backward loop computes again;
3. the model FLOPs are the same in the three (a FLOP computed again is not
   a model FLOP, seed 003); none and elementwise execute the same einsum
   FLOPs, layer one more einsum per layer (Z; Y is not needed by the
   backward pass) and says so ("computed again ... (--remat)"), and its
   MFU is lower;
4. the ops computed again are marked in --dump-ir.
"""
import json
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from einc_checks import Checks, run  # noqa: E402

NUM = r"([0-9.]+(?:e[+-]?[0-9]+)?)"


def compile_mode(einc, prog, mode):
    args = ["--hw", "tpu-v5p", "--remat=" + mode, prog]
    rc, out, err = run(einc, "--dump-cost", *args)
    rc2, js, err2 = run(einc, "--dump-ir=json", *args)
    rc3, text, err3 = run(einc, "--dump-ir", *args)
    if rc or rc2 or rc3:
        raise SystemExit("einc --remat=%s failed: %s" % (mode, (err + err2 + err3)[-600:]))
    return out, json.loads(js), text


def main(argv):
    einc, prog = argv[1], argv[2]
    check = Checks()
    res = {m: compile_mode(einc, prog, m) for m in ("none", "elementwise", "layer")}
    stacks = {}
    for mode, (out, js, text) in res.items():
        ops = js["ops"]
        first_end = next(o["end"] for o in ops if o["op"] == "LoopBegin")
        stacks[mode] = sorted(o["result"]["tensor"] for o in ops[:first_end]
                              if o["op"] == "LayerStack")
    check(stacks == {"none": ["H", "In", "Z"], "elementwise": ["In", "Z"], "layer": ["In"]},
          "the forward loop keeps per layer: %s" % stacks)

    peak = {m: r[1]["totals"]["peak_memory"] for m, r in res.items()}
    dims = {d["name"]: d["size"] for d in res["none"][1]["dims"]}
    layer_bytes = dims["N"] * dims["B"] * dims["F"] * 4 // 4  # [N, B_X, F] f32 on 4 devices
    # elementwise drops H's stack; layer drops Z's but holds one layer's
    # recomputed Z and H in the backward loop.
    check(peak["none"] - peak["elementwise"] >= layer_bytes and
          peak["elementwise"] - peak["layer"] >= layer_bytes - 2 * layer_bytes // dims["N"],
          "peak memory falls by a stack of [N, B_X, F] (%d bytes), then by one less two "
          "layers: %s" % (layer_bytes, peak))

    model = {m: r[1]["totals"]["model_flops"] for m, r in res.items()}
    check(len(set(model.values())) == 1, "model FLOPs equal: %s" % model)
    executed = {}
    for mode, (out, js, text) in res.items():
        e = re.search(r"executed " + NUM + r" per device", out)
        executed[mode] = float(e.group(1)) if e else 0
    again = re.search(r"of which " + NUM + r" computed again for the backward pass \(--remat\)",
                      res["layer"][0])
    z_flops = 2 * dims["B"] * dims["D"] * dims["F"] * dims["N"] / 4  # Z per device, N layers
    check(executed["none"] == executed["elementwise"] and again is not None and
          abs(float(again.group(1)) - z_flops) <= 1e-3 * z_flops and
          abs(executed["layer"] - executed["none"] - z_flops) <= 1e-3 * z_flops,
          "executed FLOPs per device %s; layer computes Z again: %s (want %.4g)" %
          (executed, again.group(0) if again else "no remat note", z_flops))
    mfu = {m: r[1]["totals"]["mfu"] for m, r in res.items()}
    check(mfu["layer"] < mfu["none"], "MFU lower with the layer computed again: %s" % mfu)
    marked = [l.split(" =")[0].strip() for l in res["layer"][2].splitlines()
              if "computed again for the backward pass (--remat)" in l]
    check(len(marked) == 2 and not any("--remat" in l for l in res["none"][2].splitlines()),
          "--dump-ir marks the ops computed again (Z and H): %s" % marked)
    return check.exit_status()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
