#!/usr/bin/env python3
"""Turns decode_bench's JSON output into the table in docs/benchmarks.md.

    build-codecs-bench/cpp/bench/decode_bench --benchmark_min_time=1 \\
        --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true \\
        --benchmark_out=decode.json
    python3 cpp/bench/summarize_decode_bench.py decode.json

MB/s is 10^6 decoded bytes per second. The main columns come from BM_Paired (raw and
pipeline alternating call by call, the fastest call of each per repetition; medians over
repetitions of those speeds and of their per-repetition ratio): the fair comparison on a
shared machine. "separate" numbers are the medians of the plain BM_Raw and
BM_Pipeline repetitions, which drift with whatever else the machine runs.
"""

import json
import statistics
import sys
from collections import defaultdict


def main(path):
    separate = defaultdict(list)  # (kind, codec) -> [MB/s]
    paired = defaultdict(list)  # codec -> [(raw MB/s, pipeline MB/s, pipeline / raw)]
    ratio = {}  # codec -> compression ratio
    order = {}  # codec -> its index in decode_bench (rows in that order)
    for b in json.load(open(path))["benchmarks"]:
        if b.get("run_type") != "iteration" or b.get("error_occurred"):
            continue
        kind, codec, index = b["run_name"].split("/")[:3]
        order[codec] = int(index)
        if kind == "paired":
            paired[codec].append((b["raw_MBps"], b["pipeline_MBps"], b["pipeline_over_raw"]))
        else:
            separate[(kind, codec)].append(b["bytes_per_second"] / 1e6)
            ratio[codec] = b["ratio"]
    print("| codec | compression ratio | raw MB/s | pipeline MB/s | pipeline / raw "
          "| separate runs: raw / pipeline MB/s (median) |")
    print("|---|---:|---:|---:|---:|---:|")
    for codec, pairs in sorted(paired.items(), key=lambda kv: order[kv[0]]):
        raw = statistics.median(p[0] for p in pairs)
        pipe = statistics.median(p[1] for p in pairs)
        rel = statistics.median(p[2] for p in pairs)
        sep_raw = statistics.median(separate[("raw", codec)])
        sep_pipe = statistics.median(separate[("pipeline", codec)])
        print(f"| {codec} | {ratio[codec]:.2f} | {raw:.0f} | {pipe:.0f} | {rel:.3f} "
              f"| {sep_raw:.0f} / {sep_pipe:.0f} |")


if __name__ == "__main__":
    main(sys.argv[1])
