#!/usr/bin/env python3
"""Auto-sharding goldens: seed 002's inference sharding, memory as a constraint.

Each `# expect-plan: FLAGS | CHECKS` line of the .ein files given runs
`einc plan FILE FLAGS --json` and `einc FILE FLAGS --dump-ir` (which
compiles what plan chose) and checks, separated by ';':
  chosen A|B|..   the chosen candidate's family is one of these
  stationary      the compiled plan AllGathers no param (FSDP's weight
                  movement; seed 002: infeasible for generation)
  cache DECL      the plan declares the state Kc as DECL (sharding included)
  cache-split D   the plan's Kc is split over every chip, the dim D among
                  its split dims (each chip reads its share of the cache)
  near F MESH P%  plan's own table has family F on MESH (X=2,Y=2,...), it
                  fits, and its step is within P% of the chosen row's
  remat R         the chosen row was compiled with --remat=R ("none" or
                  "layer"); a "layer" the search chose is marked in the
                  text table, and the compiled choice fits
  forced-none     with --remat=none given, the chosen family and mesh
                  do not fit (so the search's remat was needed)
  nofit chips N batch S
                  nothing fits; the smallest change plan names is N chips
                  (the smallest candidate's first mesh axis scaled) or the
                  batch dim at S, each checked against plan's own table at
                  that size, with the next smaller change not fitting
Also: the chosen row is the fastest that fits (a pipelined one beyond its
margin, test_autoshard.expected_choice), and every row whose plan
gathers weights is reported under an FSDP name, never as model parallel.
Exits 1 on the first failure.
"""
import argparse
import json
import re
import subprocess
import sys

from test_autoshard import expected_choice


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900)


def check(cond, what):
    if not cond:
        print("FAIL: " + what)
        sys.exit(1)


def params_of(ir):
    return {m.group(1) for m in re.finditer(r"^param (\w+)\[", ir, re.M)}


def gathered_params(ir, params):
    """Params an AllGather reads, directly or through a layer slice."""
    slices = {}
    for m in re.finditer(r"^\s*([\w.]+)\[[^\]]*\] = LayerSlice\(\w+\) (\w+)\[", ir, re.M):
        slices[m.group(1)] = m.group(2)
    out = set()
    for m in re.finditer(r"= AllGather_\w+ ([\w.]+)\[", ir, re.M):
        v = m.group(1)
        base = slices.get(v, v).split(".")[0]
        if base in params:
            out.add(base)
    return out


def with_flag(flags, name, value):
    """flags with `name VALUE` set, replacing a --chips or a -D of the same dim."""
    key = value.split("=")[0] + "=" if name == "-D" else None
    out, i = [], 0
    while i < len(flags):
        if flags[i] == name and i + 1 < len(flags) and (key is None or flags[i + 1].startswith(key)):
            i += 2
            continue
        out.append(flags[i])
        i += 1
    return out + [name, value]


def same_row(einc, ein, flags, family, mesh):
    """The candidate of `einc plan FLAGS --json` with this family and mesh."""
    r = run([einc, "plan", ein, *flags, "--json"])
    check(r.returncode == 0, f"plan {flags}: {r.stderr}")
    rows = [c for c in json.loads(r.stdout)["candidates"] if c["family"] == family and c["mesh"] == mesh]
    check(len(rows) == 1, f"plan {flags}: {len(rows)} candidates {family} on {mesh}")
    return rows[0]


def nofit(einc, ein, flags, d, arg):
    """Nothing fits; plan's 'fit' names N chips and batch S, and both are
    the smallest such changes by plan's own table at those sizes."""
    w = arg.split()
    want_chips, want_batch = int(w[2]), int(w[4])
    ch, fit = d["chosen"], d.get("fit")
    check(not any(c["fits"] for c in d["candidates"]) and fit, f"{flags}: something fits, or no 'fit': {fit}")
    smallest = min(c["memory_per_device"] for c in d["candidates"] if "memory_per_device" in c)
    check(ch["memory_per_device"] == smallest, f"{flags}: the chosen row is not the smallest")
    chips = int(flags[flags.index("--chips") + 1])
    mc, sb = fit["more_chips"], fit["smaller_batch"]
    check(mc and mc["chips"] == want_chips and mc["fits"], f"{flags}: more chips {mc}, want {want_chips}")
    # The same family with its first axis scaled, in plan's own table at
    # that chip count: it fits there, with the figures fit reported, and
    # not at half the chips (when that is still more than asked).
    for k, fits in ((want_chips, True), (want_chips // 2, False)):
        if k <= chips:
            continue
        mesh = dict(ch["mesh"])
        mesh["X"] = mesh["X"] * k // chips
        row = same_row(einc, ein, with_flag(flags, "--chips", str(k)), ch["family"], mesh)
        check(row["fits"] == fits, f"{flags}: at {k} chips {ch['family']} on {mesh} fits={row['fits']}")
        if fits:
            check(row["memory_per_device"] == mc["memory_per_device"], f"{flags}: {row} against {mc}")
    check(sb and sb["size"] == want_batch and sb["fits"], f"{flags}: smaller batch {sb}, want {want_batch}")
    dim = sb["dim"]
    for size, fits in ((want_batch, True), (want_batch * 2, False)):
        row = same_row(einc, ein, with_flag(flags, "-D", f"{dim}={size}"), ch["family"], ch["mesh"])
        check(row["fits"] == fits, f"{flags}: at {dim}={size} {ch['family']} fits={row['fits']}")
    t = run([einc, "plan", ein, *flags])
    check(f"it fits on {want_chips} chips" in t.stdout and f"-D {dim}={want_batch}" in t.stdout,
          f"{flags}: the 'chosen:' line does not name the changes:\n{t.stdout[-400:]}")
    print(f"ok: {ein} {' '.join(flags)}: none fits; {want_chips} chips or {dim} = {want_batch}")


def one(einc, ein, flags, checks):
    r = run([einc, "plan", ein, *flags, "--json"])
    check(r.returncode == 0, f"plan {flags}: {r.stderr}")
    d = json.loads(r.stdout)
    ch, cands = d["chosen"], d["candidates"]
    if checks[0].strip().startswith("nofit"):
        return nofit(einc, ein, flags, d, checks[0].strip())
    check(ch in cands and ch["fits"], f"{flags}: chosen {ch} is not a candidate that fits")
    check(ch == expected_choice(d)[0], f"{flags}: chosen is not the fastest that fits (a pipelined row "
          f"beyond its margin)")
    c = run([einc, ein, *flags, "--dump-ir"])
    check(c.returncode == 0, f"{ein} {flags} --dump-ir: {c.stderr}")
    ir = c.stdout
    for chk in checks:
        word, _, arg = chk.strip().partition(" ")
        if word == "chosen":
            check(ch["family"] in arg.split("|"), f"{flags}: chose {ch['family']} on {ch['mesh']}, want {arg}")
        elif word == "stationary":
            g = gathered_params(ir, params_of(ir))
            check(not g, f"{flags}: the chosen plan gathers params {sorted(g)}")
        elif word == "cache":
            decl = re.search(r"^state (Kc\[[^\]]*\])", ir, re.M)
            check(decl and decl.group(1) == arg.strip(), f"{flags}: cache {decl and decl.group(1)}, want {arg}")
        elif word == "cache-split":
            decl = re.search(r"^state Kc\[([^\]]*)\]", ir, re.M)
            check(decl, f"{flags}: no state Kc in the plan")
            parts, split = 1, set()
            for dim in decl.group(1).split(","):
                name, _, axes = dim.strip().partition("_")
                for a in axes:
                    parts *= ch["mesh"][a]
                if axes:
                    split.add(name)
            chips = 1
            for n in ch["mesh"].values():
                chips *= n
            check(parts == chips and arg.strip() in split,
                  f"{flags}: cache Kc[{decl.group(1)}] is not split over all {chips} chips with {arg.strip()} among its dims")
        elif word == "near":
            fam, mesh_text, pct = arg.split()
            mesh = {k: int(v) for k, v in (kv.split("=") for kv in mesh_text.split(","))}
            rows = [c for c in cands if c["family"] == fam and c["mesh"] == mesh]
            check(len(rows) == 1 and rows[0]["fits"], f"{flags}: {fam} on {mesh_text}: {rows}")
            limit = 1 + float(pct.rstrip("%")) / 100
            check(rows[0]["step_time"] <= ch["step_time"] * limit,
                  f"{flags}: {fam} on {mesh_text} at {rows[0]['step_time'] * 1e3:.4g} ms, not within {pct} "
                  f"of the chosen {ch['family']} at {ch['step_time'] * 1e3:.4g} ms")
        elif word == "remat":
            check(ch.get("remat") == arg.strip(), f"{flags}: chosen remat {ch.get('remat')}, want {arg}")
            if arg.strip() != "none":
                t = run([einc, "plan", ein, *flags])
                star = [l for l in t.stdout.splitlines() if l.startswith("*")]
                check(star and star[0].endswith(", remat=layer") and "fits only with --remat=layer" in t.stdout,
                      f"{flags}: the text table does not say the search chose remat:\n{t.stdout}")
                check(re.search(r"^memory: .*: fits$", c.stdout + run([einc, ein, *flags, "--dump-cost"]).stdout,
                                re.M), f"{flags}: the compiled choice does not fit")
        elif word == "forced-none":
            f = run([einc, "plan", ein, *flags, "--remat=none", "--json"])
            check(f.returncode == 0, f"{flags} --remat=none: {f.stderr}")
            same = [c for c in json.loads(f.stdout)["candidates"]
                    if c["family"] == ch["family"] and c["mesh"] == ch["mesh"]]
            check(len(same) == 1 and not same[0]["fits"] and same[0]["remat"] == "none",
                  f"{flags}: with --remat=none the chosen candidate is {same}")
        else:
            check(False, f"unknown check {word!r} in {ein}")
    # The reported names follow the plan: a name of model parallelism
    # (TP-D, 2D-WS) only where no weight moves, which `stationary` checks on
    # the chosen row; FSDP's names appear only where the plan gathers.
    # A pipelined row is "PP" or "PP+" one of those, and carries its
    # pipeline; no other row does.
    names = ("DP", "FSDP", "TP", "FSDP+TP", "DP+TP", "TP-D", "2D-WS")
    for c in cands:
        pp = c["family"] == "PP" or c["family"].startswith("PP+")
        base = c["family"].removeprefix("PP+") if c["family"] != "PP" else "DP"
        check(base in names and ("pipeline" in c) == pp, f"{flags}: family {c['family']} ({c.get('pipeline')})")
    print(f"ok: {ein} {' '.join(flags)}: {ch['family']} on {ch['mesh']}, {ch['step_time'] * 1e3:.4g} ms")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--einc", required=True)
    ap.add_argument("--first-only", action="store_true", help="only the first expect-plan line of each file")
    ap.add_argument("ein", nargs="+")
    args = ap.parse_args()
    n = 0
    for ein in args.ein:
        for line in open(ein, encoding="utf-8"):
            m = re.match(r"#\s*expect-plan:\s*(.*?)\s*\|\s*(.*)$", line)
            if m:
                one(args.einc, ein, m.group(1).split(), m.group(2).split(";"))
                n += 1
                if args.first_only:
                    break
    check(n > 0, "no expect-plan lines")
    print(f"{n} passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
