#!/usr/bin/env python3
"""int8 in the cost model (docs/cost-model.md, "Narrow operands"), end to
end through einc --dump-ir=json on tpu-v5e, against closed forms.

usage: test_int8_cost.py EINC INT8_DIR

1. weight_only.ein (Wq[D, F_X] : i8, dequantized to bf16 in the matmul on
   4 devices): the cast moves nothing; the einsum reads Wq at 1 byte per
   element, D F / 4, plus Xin and writes Y in bf16; the peak memory holds
   no bf16 copy of Wq; the lower bound's HBM part counts Wq at 1 byte.
2. The forced alternative, weight_only_copy.ein: the dequantized weights
   are also an output, so the cast is not fused: it reads 1 and writes 2
   bytes per element, and the einsum reads the 2-byte copy.  In both the
   planner's objective is the cost pass's step time.
3. int8_int8.ein: both operands are casts of i8 values, so the einsum is
   priced at peak_flops.int8 (3.94e14 on v5e), twice bf16's rate; on a
   profile without an int8 rate (written here), at f32's.
4. fsdp_gather.ein: the AllGather of int8 weights moves 1 byte per element.
5. The fold is the runtime's too (docs/codegen.md, "Folded casts"): on the
   calibrated host profile weight_only.ein's cast moves nothing and the
   peak holds no copy; with --fold-casts=off (tpu-v5e) the cast is priced
   as in 2 and the peak holds the copy.
"""
import json
import os
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from einc_checks import Checks, run  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def dump(einc, path, hw="tpu-v5e", *flags):
    rc, out, err = run(einc, path, "--hw", hw, "--dump-ir=json", *flags)
    if rc != 0:
        print(err)
        sys.exit(1)
    return json.loads(out)


def ops_of(d, kind):
    return [o for o in d["ops"] if o["op"] == kind]


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(a), abs(b))


def main():
    einc, d8 = sys.argv[1], sys.argv[2]
    ok = Checks()
    B, D, F, P = 8, 8192, 8192, 4
    w = dump(einc, os.path.join(d8, "weight_only.ein"))
    cast = [o for o in ops_of(w, "Elementwise") if o["result"]["dtype"] == "bf16"
            and o["operands"][0]["dtype"] == "i8"]
    ok(len(cast) == 1 and cast[0]["cost"]["hbm_bytes"] == 0,
       "weight-only: the cast of Wq moves no bytes (fused into the einsum's read)")
    ein = ops_of(w, "Einsum")
    want = D * F // P * 1 + B * D * 2 + B * F // P * 2
    ok(len(ein) == 1 and ein[0]["cost"]["hbm_bytes"] == want,
       "weight-only: the einsum reads Wq at 1 byte per element: %s == D F / 4 + 2 B D + 2 B F / 4 = %d"
       % (ein[0]["cost"]["hbm_bytes"] if ein else None, want))
    resident = D * F // P + B * D * 2 + F // P * 2
    live = w["totals"]["peak_memory"] - resident
    ok(0 <= live < D * F // P,
       "weight-only: peak memory holds no bf16 copy of Wq (live values %d bytes < %d)"
       % (live, D * F // P))
    lb = w["totals"]["lower_bound_parts"]["hbm_bytes"]
    ok(close(lb, (D * F + B * D * 2 + F * 2) / P),
       "weight-only: the bound's HBM part counts Wq at 1 byte per element (%g)" % lb)

    c = dump(einc, os.path.join(d8, "weight_only_copy.ein"))
    ccast = [o for o in ops_of(c, "Elementwise") if o["operands"][0]["dtype"] == "i8"]
    cein = ops_of(c, "Einsum")
    ok(len(ccast) == 1 and ccast[0]["cost"]["hbm_bytes"] == D * F // P * 3,
       "copy also an output: the cast reads 1 and writes 2 bytes per element")
    ok(len(cein) == 1 and cein[0]["cost"]["hbm_bytes"] == D * F // P * 2 + B * D * 2 + B * F // P * 2,
       "copy also an output: the einsum reads the bf16 copy")
    ok(cein and ein and cein[0]["cost"]["time"] > 1.9 * ein[0]["cost"]["time"],
       "copy also an output: the memory-bound einsum takes about twice as long")
    # The planner prices each op on copies of its values: it must see the
    # same fusion (and the same output) as the cost pass.
    for name, dd in (("weight-only", w), ("copy also an output", c)):
        ok(close(dd["plan"]["objective"], dd["totals"]["step_time"], 1e-3),
           "%s: the planner's objective is the step's time (%g s, %g s)"
           % (name, dd["plan"]["objective"], dd["totals"]["step_time"]))

    q = dump(einc, os.path.join(d8, "int8_int8.ein"))
    qe = ops_of(q, "Einsum")[0]["cost"]
    n = 4096
    ok(close(qe["flops"], 2.0 * n ** 3) and close(qe["t_compute"], 2.0 * n ** 3 / 3.94e14, 1e-6),
       "int8 x int8: priced at v5e's int8 rate, 3.94e14 FLOP/s (%g s)" % qe["t_compute"])
    ok(close(q["totals"]["lower_bound_parts"]["compute"], 2.0 * n ** 3 / 3.94e14, 1e-6),
       "int8 x int8: the bound's compute part at the int8 rate too")
    ok(abs(q["totals"]["mfu"] - 1.0) < 0.01, "int8 x int8: MFU against the int8 peak (%g)"
       % q["totals"]["mfu"])
    prof = json.load(open(os.path.join(HERE, "..", "..", "hw", "tpu-v5e.json")))
    prof["peak_flops"].pop("int8", None)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "v5e-no-int8.json")
        json.dump(prof, open(path, "w"))
        f = dump(einc, os.path.join(d8, "int8_int8.ein"), path)
    fe = ops_of(f, "Einsum")[0]["cost"]
    ok(close(fe["t_compute"], 2.0 * n ** 3 / prof["peak_flops"]["f32"], 1e-6),
       "int8 x int8 on a profile without an int8 rate: at its f32 rate")

    # Priced serially the planner gathers Wq before the cast; with collective
    # matmul (--ilp-overlap, the default) it gathers the bf16 copy behind the
    # one matmul instead, a shorter step on v5e (no earlier layer hides a
    # weight gather here).  The i8 gather's bytes are checked on the first.
    g = dump(einc, os.path.join(d8, "fsdp_gather.ein"), "tpu-v5e", "--ilp-overlap=off")
    g_cm = dump(einc, os.path.join(d8, "fsdp_gather.ein"))
    ok(g_cm["totals"]["step_time"] <= g["totals"]["step_time"],
       "FSDP: the plan with collective matmul priced is no slower (%g s, %g s serially)"
       % (g_cm["totals"]["step_time"], g["totals"]["step_time"]))
    ag = ops_of(g, "AllGather")
    ok(len(ag) == 1 and ag[0]["result"]["dtype"] == "i8" and
       close(ag[0]["cost"]["comm_bytes"], 1024 * 1024 * (P - 1) / P),
       "FSDP: the AllGather of Wq moves its i8 bytes, (P-1)/P x D F x 1 byte")

    h = dump(einc, os.path.join(d8, "weight_only.ein"), "host")
    hcast = [o for o in ops_of(h, "Elementwise") if o["operands"][0]["dtype"] == "i8"]
    ok(len(hcast) == 1 and hcast[0]["cost"]["hbm_bytes"] == 0 and
       0 <= h["totals"]["peak_memory"] - resident < D * F // P,
       "host profile: the folded cast moves nothing and the peak holds no copy of Wq")
    o = dump(einc, os.path.join(d8, "weight_only.ein"), "tpu-v5e", "--fold-casts=off")
    ocast = [x for x in ops_of(o, "Elementwise") if x["operands"][0]["dtype"] == "i8"]
    ok(len(ocast) == 1 and ocast[0]["cost"]["hbm_bytes"] == D * F // P * 3 and
       o["totals"]["peak_memory"] - resident >= D * F // P * 2,
       "--fold-casts=off: the cast reads 1 and writes 2 bytes per element, and its copy is in the peak")
    return ok.exit_status()


if __name__ == "__main__":
    sys.exit(main())
