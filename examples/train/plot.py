#!/usr/bin/env python3
"""Plots the main job's metrics (metrics.jsonl, written by examples/train) as a
PNG: training loss, training and test accuracy, and (when the metrics hold
it) the gradient's global norm, against the epoch. A value the trainer found
not finite is written as null and named in the line's "nonfinite" list: such
points are left out and the step is marked on every panel.

    python3 examples/train/plot.py OUT/metrics.jsonl OUT/curves.png [TITLE]

The metrics do not record the model or the device count, so the caller
names the run in TITLE (scripts/run-main passes its arguments).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    """The training and test records, each only with its finite values, and
    the epochs of the lines that held a non-finite value."""
    train, test, bad = [], [], []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            if r.get("nonfinite"):
                bad.append(r["epoch"])
            r = {k: v for k, v in r.items() if v is not None}
            if "loss" in r:
                train.append(r)
            if "test_accuracy" in r:
                test.append(r)
    return train, test, bad


def mark_nonfinite(axes, bad):
    for ax in axes:
        for i, epoch in enumerate(bad):
            ax.axvline(epoch, color="red", lw=1, ls="--",
                       label="non-finite: the run stopped" if i == 0 else None)


def main(argv):
    if len(argv) not in (3, 4):
        sys.exit("usage: plot.py METRICS.jsonl OUT.png [TITLE]")
    train, test, bad = read(argv[1])
    if not train:
        sys.exit(f"plot.py: no training records in {argv[1]}")
    norms = [r for r in train if "grad_norm" in r]
    fig, axes = plt.subplots(1, 3 if norms else 2, figsize=(16 if norms else 11, 4),
                             constrained_layout=True)
    ax_loss, ax_acc = axes[0], axes[1]
    mark_nonfinite(axes, bad)
    ax_loss.plot([r["epoch"] for r in train], [r["loss"] for r in train], lw=1, label="train")
    if test:
        ax_loss.plot([r["epoch"] for r in test], [r["test_loss"] for r in test], "o-", lw=1.5,
                     label="test")
    ax_loss.set(xlabel="epoch", ylabel="softmax cross-entropy", title="loss")
    ax_loss.legend()
    ax_loss.grid(alpha=0.3)
    ax_acc.plot([r["epoch"] for r in train], [100 * r["accuracy"] for r in train], lw=1,
                label="train (batch mean)")
    if test:
        ax_acc.plot([r["epoch"] for r in test], [100 * r["test_accuracy"] for r in test], "o-",
                    lw=1.5, label="test (10,000 images)")
        last = test[-1]
        ax_acc.annotate(f"{100 * last['test_accuracy']:.2f}%", (last["epoch"],
                        100 * last["test_accuracy"]), textcoords="offset points",
                        xytext=(-10, -16), ha="right")
    ax_acc.set(xlabel="epoch", ylabel="accuracy (%)", title="accuracy")
    ax_acc.legend(loc="lower right")
    ax_acc.grid(alpha=0.3)
    if norms:
        ax_norm = axes[2]
        ax_norm.plot([r["epoch"] for r in norms], [r["grad_norm"] for r in norms], lw=1)
        ax_norm.set(xlabel="epoch", ylabel="global norm (mean over the logged steps)",
                    title="gradient norm", yscale="log")
        ax_norm.grid(alpha=0.3)
        if bad:
            ax_norm.legend()
    fig.suptitle(argv[3] if len(argv) == 4 else "kiln examples/train on Fashion-MNIST")
    fig.savefig(argv[2], dpi=110)
    print(f"wrote {argv[2]}")


if __name__ == "__main__":
    main(sys.argv)
