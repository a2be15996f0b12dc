#!/usr/bin/python3
"""Smoke test of dc_bench (a benchmark, not a measurement): runs it for about
a second on a tiny synthetic workload, both systems, in memory, one thread, and checks that it exits 0 and that every stdout line is
a JSON result line with the fields bench/README.md promises, with result
lines of both systems and dc/bdb ratio lines carrying targets.

usage: dc_bench_smoke_test.py PATH_TO_DC_BENCH
"""
import json
import subprocess
import sys

REQUIRED = ("bench", "workload", "system", "threads", "ops", "seconds", "ops_per_s")
RUN_FIELDS = ("mode", "p50_us", "p99_us", "max_us", "stddev_us", "budget_bytes", "data_bytes",
              "cores", "peak_rss_bytes", "peak_rss_over_budget")
DC_FIELDS = ("write_amplification", "flush_failure_rate", "cleaning_overhead",
             "space_amplification", "tree_update_retry_rate")


def fail(msg):
    print(f"dc_bench smoke: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    cmd = [sys.argv[1], "--only", "synthetic", "--modes", "mem", "--threads", "1", "--rounds", "1",
           "--set", "scale_pct=1", "--set", "run_ms=100"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        fail(f"exit {proc.returncode}: {proc.stderr[-2000:]}")
    lines = [json.loads(raw) for raw in proc.stdout.splitlines()]  # raises on a bad line
    systems = set()
    targets = 0
    for d in lines:
        for f in REQUIRED:
            if f not in d:
                fail(f"line without {f}: {d}")
        if d["bench"] != "dc_bench":
            fail(f"bench {d['bench']}")
        systems.add(d["system"])
        if d.get("phase") == "run":
            for f in RUN_FIELDS:
                if f not in d:
                    fail(f"run line without {f}: {d}")
            if d["system"] == "dc":
                for f in DC_FIELDS:
                    if f not in d:
                        fail(f"dc line without {f}: {d}")
            if d["ops"] <= 0:
                fail(f"no operations: {d}")
        if d["system"] == "dc/bdb":
            if d.get("statistic") != "median" or "ratio" not in d:
                fail(f"ratio line without median ratio: {d}")
            if "target" in d:
                targets += 1
                if d["meets_target"] not in (0, 1):
                    fail(f"meets_target: {d}")
    if not {"dc", "bdb", "dc/bdb"} <= systems:
        fail(f"systems {sorted(systems)}")
    if targets == 0:
        fail("no ratio line with a target")
    print(f"dc_bench smoke: {len(lines)} lines ok")


if __name__ == "__main__":
    main()
