#!/usr/bin/env python3
"""Runs quorate and the peers (LangGraph, AutoGen-core) on the same workloads in one run and
prints a table with the throughput of each and the ratio quorate / faster peer.

Workloads:
  * layered DAG, small: L x W for every system (default 20x50);
  * layered DAG, large: quorate at 200x500 (100k tasks), the peers at a documented smaller size
    (default 40x250 = 10k tasks: LangGraph needs seconds per 1k nodes to build and run); tasks/s
    are compared;
  * star and all-to-all round: n agents, R rounds, M-word messages; messages/s compared
    (quorate: `quorate experiment topology --mode delta`).

Every measurement is the best of --repeat runs (same rule for every system). Writes
results.json next to this file. Use compare.sh, which builds quorate and sets up the venv.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PY = os.path.join(HERE, ".venv", "bin", "python")
QUORATE = os.path.join(ROOT, "target", "release", "quorate")


def run_json(cmd: list, timeout: int = 240) -> dict:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {out.returncode}: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def best(cmd: list, repeat: int, key: str) -> dict:
    runs = [run_json(cmd) for _ in range(repeat)]
    return max(runs, key=lambda r: r[key])


def dag_rows(label: str, q: tuple, p: tuple, repeat: int) -> list:
    rows = []
    ql, qw = q
    # One run a process, like each peer: the best of `repeat` fresh processes for every system.
    # Cold, like the peers: each process runs the DAG once, without a warm-up run.
    r = best([QUORATE, "bench", "dag", "--layers", str(ql), "--width", str(qw), "--runs", "1", "--no-warmup", "--json"], repeat, "tasks_per_s")
    rows.append({"workload": label, "system": "quorate", "size": f"{ql}x{qw}", "tasks": r["tasks"],
                 "elapsed_s": r["elapsed_s"], "per_s": r["tasks_per_s"]})
    pl, pw = p
    for system, script in (("langgraph", "langgraph_dag.py"), ("autogen-core", "autogen_dag.py")):
        r = best([PY, os.path.join(HERE, script), "--layers", str(pl), "--width", str(pw), "--json"],
                 repeat, "tasks_per_s")
        rows.append({"workload": label, "system": system, "size": f"{pl}x{pw}", "tasks": r["tasks"],
                     "elapsed_s": r["elapsed_s"], "per_s": r["tasks_per_s"]})
    return rows


def round_rows(topology: str, n: int, rounds: int, tokens: int, repeat: int) -> list:
    label = f"round {topology}"
    size = f"n={n} R={rounds}"
    runs = []
    for _ in range(repeat):
        rep = run_json([QUORATE, "experiment", "topology", "--agents", str(n), "--rounds", str(rounds),
                        "--msg-tokens", str(tokens), "--mode", "delta", "--json"])
        row = next(x for x in rep["rows"] if x["topology"] == topology)
        assert row["messages_match"] and row["tokens_match"], row
        runs.append(row)
    q = max(runs, key=lambda x: x["messages"] / max(x["wall_ms"], 1e-9))
    rows = [{"workload": label, "system": "quorate", "size": size, "tasks": q["messages"],
             "elapsed_s": q["wall_ms"] / 1000, "per_s": q["messages"] / (q["wall_ms"] / 1000)}]
    for system, script in (("langgraph", "langgraph_dag.py"), ("autogen-core", "autogen_dag.py")):
        r = best([PY, os.path.join(HERE, script), "--round", topology, "--agents", str(n), "--rounds",
                  str(rounds), "--msg-tokens", str(tokens), "--json"], repeat, "messages_per_s")
        rows.append({"workload": label, "system": system, "size": size, "tasks": r["messages"],
                     "elapsed_s": r["elapsed_s"], "per_s": r["messages_per_s"]})
    return rows


def size(s: str) -> tuple:
    l, w = s.lower().split("x")
    return int(l), int(w)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", type=size, default=(20, 50), help="LxW for every system")
    ap.add_argument("--large", type=size, default=(200, 500), help="LxW for quorate")
    ap.add_argument("--large-peers", type=size, default=(40, 250), help="LxW for the peers")
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--msg-tokens", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(HERE, "results.json"))
    a = ap.parse_args()
    t0 = time.perf_counter()
    rows = []
    rows += dag_rows("dag small", a.small, a.small, a.repeat)
    rows += dag_rows("dag large", a.large, a.large_peers, a.repeat)
    for topology in ("star", "all-to-all"):
        rows += round_rows(topology, a.agents, a.rounds, a.msg_tokens, a.repeat)
    for wl in dict.fromkeys(r["workload"] for r in rows):
        group = [r for r in rows if r["workload"] == wl]
        q = next(r for r in group if r["system"] == "quorate")
        fastest = max((r for r in group if r["system"] != "quorate"), key=lambda r: r["per_s"])
        q["ratio_to_faster_peer"] = q["per_s"] / fastest["per_s"]
        q["faster_peer"] = fastest["system"]
    print(f"{'workload':<17} {'system':<13} {'size':<11} {'tasks/msgs':>10} {'elapsed_s':>10} "
          f"{'per_s':>12} {'quorate/faster peer':>20}")
    for r in rows:
        ratio = f"{r['ratio_to_faster_peer']:.0f}x ({r['faster_peer']})" if "ratio_to_faster_peer" in r else ""
        print(f"{r['workload']:<17} {r['system']:<13} {r['size']:<11} {r['tasks']:>10} "
              f"{r['elapsed_s']:>10.4f} {r['per_s']:>12.0f} {ratio:>20}")
    meta = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpus": os.cpu_count(),
            "python": platform.python_version(), "repeat": a.repeat,
            "total_s": time.perf_counter() - t0,
            "versions": {"langgraph": run_json([PY, "-c", "import json;from importlib.metadata import version as v;print(json.dumps({'v':v('langgraph')}))"])["v"],
                         "autogen-core": run_json([PY, "-c", "import json;from importlib.metadata import version as v;print(json.dumps({'v':v('autogen-core')}))"])["v"]}}
    with open(a.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=2)
    print(f"wrote {a.out} ({meta['total_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
