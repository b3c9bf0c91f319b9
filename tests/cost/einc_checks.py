"""einc_checks.py - what the end-to-end cost scripts of this folder share:
running the einc driver and reporting a list of checks."""
import glob
import json
import os
import re
import subprocess


def run(einc, *args):
    """einc's exit status, stdout and stderr for `args`."""
    p = subprocess.run([einc, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


class Checks:
    """Prints `ok   what` or `FAIL what` per check; exit_status() says how it went."""

    def __init__(self):
        self.failures = []

    def __call__(self, cond, what):
        print(("ok   " if cond else "FAIL ") + what)
        if not cond:
            self.failures.append(what)

    def exit_status(self):
        """1 (and a count) if any check failed, else 0."""
        if self.failures:
            print("%d check(s) failed" % len(self.failures))
            return 1
        return 0


def with_hbm(src, d, hbm):
    """A copy of hw/host.json with hbm_bytes = hbm, in directory d."""
    host = json.load(open(os.path.join(src, "hw", "host.json")))
    host["hbm_bytes"] = hbm
    path = os.path.join(d, f"host_{int(hbm)}.json")
    with open(path, "w") as f:
        json.dump(host, f)
    return path


def expect_lines(directory, tag):
    """(path, einc args, rest of the line) for every `# TAG: ARGS | REST`
    line of the .ein files in `directory`, in file order."""
    for path in sorted(glob.glob(os.path.join(directory, "*.ein"))):
        with open(path, encoding="utf-8") as f:
            for line in f:
                m = re.match(r"#\s*%s:\s*(.*?)\s*\|\s*(.+?)\s*$" % re.escape(tag), line)
                if m:
                    yield path, m.group(1).split(), m.group(2)
