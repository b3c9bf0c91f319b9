#!/usr/bin/env python3
"""bench/perfdoc.py --check fails where it must, and passes where it must.

In a scratch directory: a complete results file and the doc perfdoc.py
writes from it pass --check; the same doc with one figure changed by hand
fails it (the doc cannot drift from the results); a results file without
one of the required fields (each of them in turn, in the file and in a row)
fails it with a message naming the field; a bad verdict and a non-number
value fail it.  A run whose optional `drift` exceeds 10% is labelled a
drifted run, one within it is not, and a `drift` that is not a number
fails.  Exit status 0 when all of that holds.
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
PERFDOC = ROOT / "bench" / "perfdoc.py"

GOOD = {"bench": "einsum_gemm", "title": "Local contraction", "command": "python3 bench/einsum_gemm.py",
        "cpu": "AMD EPYC", "cores": 2, "date": "2026-11-28T20:00Z", "load": 1.5,
        "rows": [{"figure": "rt_einsum plain f32 N=512", "value": 41.25, "unit": "GFLOP/s",
                  "target": ">= 0.9x cblas", "ratio": 0.97, "verdict": "ok"}]}


def perfdoc(results, out, check=True):
    cmd = [sys.executable, str(PERFDOC), "--results", str(results), "--out", str(out)]
    return subprocess.run(cmd + (["--check"] if check else []), capture_output=True, text=True)


def main():
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        res, out = Path(tmp) / "results", Path(tmp) / "performance.md"
        res.mkdir()
        (res / "einsum_gemm.json").write_text(json.dumps(GOOD))
        if perfdoc(res, out, check=False).returncode != 0 or perfdoc(res, out).returncode != 0:
            bad.append("a complete results file and its own doc did not pass --check")
        text = out.read_text()
        if "41.2" not in text or "AMD EPYC, 2 cores" not in text or "do not edit" not in text:
            bad.append("the doc lacks the figure, the machine or the do-not-edit header:\n" + text)
        out.write_text(text.replace("41.2", "52.0"))
        if perfdoc(res, out).returncode == 0:
            bad.append("--check passed a doc whose figure was edited by hand")
        for drift, banner in ((25.5, True), (-10.5, True), (4.0, False)):
            (res / "einsum_gemm.json").write_text(json.dumps(dict(GOOD, drift=drift)))
            r = perfdoc(res, out, check=False)
            got = r.returncode == 0 and "**Drifted run**" in out.read_text()
            if got != banner or (banner and f"{drift:+.1f}% off" not in out.read_text()):
                bad.append(f"drift {drift}: drifted-run label {'missing' if banner else 'present'} "
                           f"(status {r.returncode})")
        (res / "einsum_gemm.json").write_text(json.dumps(GOOD))
        perfdoc(res, out, check=False)
        cases = [(f"no '{k}'", {x: v for x, v in GOOD.items() if x != k}) for k in
                 ("bench", "title", "command", "cpu", "cores", "date", "rows")]
        for k in ("figure", "value", "unit", "target", "ratio", "verdict"):
            row = {x: v for x, v in GOOD["rows"][0].items() if x != k}
            cases.append((f"row 0 has no '{k}'", dict(GOOD, rows=[row])))
        cases.append(("verdict is not one of", dict(GOOD, rows=[dict(GOOD["rows"][0], verdict="fine")])))
        cases.append(("'value' has the wrong type", dict(GOOD, rows=[dict(GOOD["rows"][0], value="41")])))
        cases.append(("no rows", dict(GOOD, rows=[])))
        cases.append(("'drift' is not a finite number", dict(GOOD, drift="12")))
        for want, doc in cases:
            (res / "einsum_gemm.json").write_text(json.dumps(doc))
            r = perfdoc(res, out)
            if r.returncode == 0 or want not in r.stderr:
                bad.append(f"--check on a file with {want}: status {r.returncode}, stderr {r.stderr!r}")
    for b in bad:
        print("FAIL: " + b)
    print("perfdoc --check: %d of %d expectations failed" % (len(bad), 6 + len(cases)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
