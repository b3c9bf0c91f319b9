#!/usr/bin/python3
"""plot.py - the loss curves of several training runs in one PNG.

Each argument is LABEL=FILE.jsonl, a metrics file written by a training
executable's --metrics (one JSON object per step with "step" and "loss").

Usage: plot.py OUT.png LABEL=metrics.jsonl [LABEL=metrics.jsonl ...]
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__.strip().split("\n")[-1])
    fig, ax = plt.subplots(figsize=(7, 4))
    for arg in sys.argv[2:]:
        label, path = arg.split("=", 1)
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        ax.plot([r["step"] for r in rows], [r["loss"] for r in rows], label=label, linewidth=1)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (cross-entropy, nats)")
    ax.set_yscale("log")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(sys.argv[1], dpi=100)
    print("wrote", sys.argv[1])


if __name__ == "__main__":
    main()
