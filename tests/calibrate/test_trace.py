#!/usr/bin/env python3
"""test_trace.py - --trace writes a valid Chrome trace-event file.

The validator follows the Trace Event Format document (Google, "Trace Event
Format", the JSON Object Format): the file is an object with a
"traceEvents" array; every event has "ph" (a string), "pid" and "tid"; a
complete event ("X") has "name", "cat" (strings), "ts" and "dur" (numbers,
microseconds, dur >= 0); a metadata event ("M") has a "name" among
process_name / thread_name / ... and "args" with a string "name".  On top of
the format, einc's contract (docs/cost-model.md): pid 0, one thread_name per
device, tid = device, cat "compute" or "collective", spans of every op on
every device, no two spans of one device overlap, ts within the run.

Runs examples/ffw_fsdp_tp.ein (the FSDP + TP layer, with --meshslice=off so
its AllGathers and ReduceScatter are separate ops) on threads and, with
--mpirun, on 4 MPI ranks; and checks that an unwritable path fails cleanly.
"""
import argparse
import json
import os
import tempfile

from calib_common import check, finish, mpi_prefix, run

METADATA_NAMES = {"process_name", "process_labels", "process_sort_index", "thread_name",
                  "thread_sort_index"}


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def validate(doc, where):
    """Trace Event Format checks; returns the events."""
    if not check(isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list),
                 "%s: an object with a traceEvents array" % where):
        return []
    if "displayTimeUnit" in doc:
        check(doc["displayTimeUnit"] in ("ms", "ns"), "%s: displayTimeUnit ms|ns" % where)
    evs = doc["traceEvents"]
    for e in evs:
        ok = (isinstance(e, dict) and isinstance(e.get("ph"), str) and is_num(e.get("pid"))
              and is_num(e.get("tid")))
        if not check(ok, "%s: event with ph, pid, tid: %r" % (where, e)):
            continue
        if e["ph"] == "X":
            check(isinstance(e.get("name"), str) and isinstance(e.get("cat"), str) and
                  is_num(e.get("ts")) and is_num(e.get("dur")) and e["dur"] >= 0,
                  "%s: complete event needs name, cat, ts, dur >= 0: %r" % (where, e))
            if "args" in e:
                check(isinstance(e["args"], dict), "%s: args is an object" % where)
        elif e["ph"] == "M":
            check(e.get("name") in METADATA_NAMES and isinstance(e.get("args"), dict) and
                  isinstance(e["args"].get("name", ""), str),
                  "%s: metadata event: %r" % (where, e))
        else:
            check(False, "%s: unexpected phase %r" % (where, e["ph"]))
    return evs


def check_einc_trace(evs, ndev, where):
    threads = {e["tid"]: e["args"]["name"] for e in evs
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    check(sorted(threads) == list(range(ndev)), "%s: a thread_name per device: %s" %
          (where, sorted(threads)))
    spans = [e for e in evs if e.get("ph") == "X"]
    check(all(e["pid"] == 0 for e in evs), "%s: pid 0" % where)
    check(all(e["cat"] in ("compute", "collective") for e in spans), "%s: cat" % where)
    for d in range(ndev):
        mine = sorted((e for e in spans if e["tid"] == d), key=lambda e: e["ts"])
        cats = {e["cat"] for e in mine}
        check(cats == {"compute", "collective"}, "%s: device %d has compute and collective "
              "spans: %s" % (where, d, cats))
        names = {e["name"] for e in mine}
        for want in ("In.1 = AllGather_Y In", "Win.1 = AllGather_X Win",
                     "Wout.1 = AllGather_X Wout", "Out.1 = ReduceScatter_Y Out"):
            check(want in names, "%s: device %d has a span '%s'" % (where, d, want))
        check(any(n.startswith("Tmp = Einsum") for n in names) and
              any(n.startswith("Act = Elementwise") for n in names),
              "%s: device %d has the einsum and gelu spans" % (where, d))
        for a, b in zip(mine, mine[1:]):
            check(a["ts"] + a["dur"] <= b["ts"] + 0.002, "%s: device %d spans do not overlap"
                  % (where, d))
        check(all(e["ts"] >= 0 for e in mine), "%s: ts >= 0" % where)
        for e in mine:
            if e["cat"] == "collective":
                check(e["name"].split(" = ")[1].split("_")[0] in
                      ("AllGather", "ReduceScatter", "AllReduce", "AllToAll"),
                      "%s: collective category only for collectives" % where)
    # two runs: each op twice per device
    per = {}
    for e in spans:
        per[(e["tid"], e["name"])] = per.get((e["tid"], e["name"]), 0) + 1
    check(set(per.values()) == {2}, "%s: every op twice per device (--repeat 2)" % where)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--einc", required=True)
    ap.add_argument("--examples", required=True)
    ap.add_argument("--mpirun")
    a = ap.parse_args()
    ex = os.path.join(a.examples, "ffw_fsdp_tp.ein")
    with tempfile.TemporaryDirectory() as tmp:
        runtimes = ["threads"] + (["mpi"] if a.mpirun else [])
        for rt in runtimes:
            exe = os.path.join(tmp, "ffw_" + rt)
            run([a.einc, ex, "--meshslice=off", "--runtime=" + rt, "-o", exe])
            out = os.path.join(tmp, "trace_%s.json" % rt)
            cmd = [exe, "--random-inputs", "1", "--repeat", "2", "--trace", out]
            if rt == "mpi":
                cmd = mpi_prefix(a.mpirun, 4) + cmd
            run(cmd)
            check(not [f for f in os.listdir(tmp) if ".tmp" in f], "%s: no temp file left" % rt)
            with open(out) as f:
                doc = json.load(f)
            evs = validate(doc, rt)
            check_einc_trace(evs, 4, rt)
            check(doc.get("otherData", {}).get("backend") == rt, "%s: backend recorded" % rt)
        # An unwritable trace path is an error with a message, exit 1.
        exe = os.path.join(tmp, "ffw_threads")
        r = run([exe, "--random-inputs", "1", "--trace",
                 os.path.join(tmp, "missing", "t.json")], expect=1)
        check("--trace" in r.stderr and "einrt: error" in r.stderr,
              "unwritable trace reported: " + r.stderr.strip())
        r = run([exe, "--random-inputs", "1", "--trace"], expect=1)
        check("--trace needs a value" in r.stderr, "--trace without a file: " + r.stderr.strip())
    finish("test_trace")


if __name__ == "__main__":
    main()
