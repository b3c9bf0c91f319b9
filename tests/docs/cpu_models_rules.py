#!/usr/bin/env python3
"""bench/cpu_models.py keeps one record per CPU model and refuses mixed runs.

In a scratch results directory: three runs on CPU A are recorded (three
rows naming A); three runs on CPU B then add B's rows and keep A's; a second
set of runs on A replaces A's rows (now with the new values) and keeps B's;
runs that name two different CPUs, or a CPU without family and model, are
refused with exit status 1 and the record left as it was.  The record
passes bench/perfdoc.py's field checks.  Exit status 0 when all that holds.
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
SCRIPT = ROOT / "bench" / "cpu_models.py"
STEMS = ("cost_accuracy_quick", "cost_accuracy_quick_mpi", "layer_roofline")
A, B = "Vendor X (family 1, model 2)", "Vendor Y (family 3, model 4)"


def write_runs(res, cpus, value):
    for stem, cpu in zip(STEMS, cpus):
        (res / f"{stem}.json").write_text(json.dumps({
            "bench": stem, "title": stem, "command": f"python3 bench/{stem}.py", "cpu": cpu,
            "cores": 2, "date": "2026-12-01T10:00Z", "load": 0.5, "load_at": "start",
            "rows": [{"figure": "mean |error|", "value": value, "unit": "%", "target": "<= 10%",
                      "ratio": None, "verdict": "ok"}]}))


def record(res):
    r = subprocess.run([sys.executable, str(SCRIPT), "--results", str(res)],
                       capture_output=True, text=True)
    return r, json.loads((res / "cpu_models.json").read_text()) if (res / "cpu_models.json").exists() else None


def main():
    sys.path.insert(0, str(ROOT / "bench"))
    import perfdoc
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        res = Path(tmp)
        write_runs(res, [A] * 3, 9.0)
        r, doc = record(res)
        if r.returncode != 0 or [x["cpu"] for x in doc["rows"]] != [A] * 3:
            bad.append(f"first record of A: status {r.returncode}, {r.stderr!r}, {doc}")
        write_runs(res, [B] * 3, 12.0)
        r, doc = record(res)
        if r.returncode != 0 or [x["cpu"] for x in doc["rows"]] != [A] * 3 + [B] * 3:
            bad.append(f"B did not add to A: {doc and [x['cpu'] for x in doc['rows']]}")
        write_runs(res, [A] * 3, 7.5)
        r, doc = record(res)
        vals = {(x["cpu"], x["value"]) for x in doc["rows"]}
        if r.returncode != 0 or vals != {(A, 7.5), (B, 12.0)} or len(doc["rows"]) != 6:
            bad.append(f"A's second runs did not replace A's rows only: {sorted(vals)}")
        if not all(A in x["figure"] or B in x["figure"] for x in doc["rows"]):
            bad.append("a row's figure does not name its CPU")
        errs = perfdoc.check_fields("cpu_models.json", doc)
        if errs or not doc.get("machine_per_row"):
            bad.append(f"the record fails perfdoc's checks: {errs}")
        before = (res / "cpu_models.json").read_text()
        for cpus, want in (([A, B, A], "different CPUs"), (["AMD EPYC"] * 3, "no family and model")):
            write_runs(res, cpus, 1.0)
            r, _ = record(res)
            if r.returncode != 1 or want not in r.stderr:
                bad.append(f"runs on {cpus}: status {r.returncode}, stderr {r.stderr!r}")
            if (res / "cpu_models.json").read_text() != before:
                bad.append(f"refused runs on {cpus} changed the record")
    for b in bad:
        print("FAIL: " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
