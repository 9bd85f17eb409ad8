"""What the bench scripts share: `edgellm bench -o json` and llama-bench's `-o json` read
alike (the same fields), and a figure as the median of the runs ± their deviation."""
import json
import os
import statistics


def rows(path):
    """{(n_threads, "pp512" | "tg128"): row} of a bench JSON; {} for a missing or empty one"""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return {}
    res = {}
    for r in json.load(open(path)):
        test = "pp%d" % r["n_prompt"] if r["n_gen"] == 0 else "tg%d" % r["n_gen"]
        res[(r["n_threads"], test)] = r
    return res


def med(r):
    return statistics.median(r["samples_ts"])


def cell(r):
    if r is None:
        return "—"
    s = r["samples_ts"]
    sd = statistics.stdev(s) if len(s) > 1 else 0.0
    return "%.1f ± %.1f" % (med(r), sd)


def ratio(ours, theirs):
    return "%.2f×" % (med(ours) / med(theirs)) if ours and theirs else "—"
