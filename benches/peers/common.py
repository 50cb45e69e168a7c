"""What the peer scripts (langgraph_dag.py, autogen_dag.py) share: the DAG's task ids and
dependencies, the command line and its checks, and the printed result (one line, or one JSON
object with --json). Each script imports it from its own folder.
"""

import argparse
import json
import sys


def tid(l: int, i: int) -> str:
    """The id of node i of layer l."""
    return f"l{l}n{i}"


def deps_of(l: int, i: int, width: int) -> list:
    """The ids node i of layer l depends on: nodes i and (i+1) mod width of layer l-1."""
    if l == 0:
        return []
    j = (i + 1) % width
    return [tid(l - 1, i)] if j == i else [tid(l - 1, i), tid(l - 1, j)]


def parse_args(doc: str) -> argparse.Namespace:
    """The command line of every peer script; `doc` is the script's docstring (its first line is
    the help's description)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--layers", type=int, default=20)
    p.add_argument("--width", type=int, default=50)
    p.add_argument("--round", choices=["star", "all-to-all"])
    p.add_argument("--agents", type=int, default=8)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--msg-tokens", type=int, default=100)
    p.add_argument("--json", action="store_true")
    return p.parse_args()


def args_ok(a: argparse.Namespace) -> bool:
    """Whether the sizes fit the chosen workload (the round with --round, else the DAG); when they
    do not, says so on stderr (the caller then exits 2)."""
    if a.round:
        if a.agents < 2 or a.rounds < 1:
            print("--agents must be at least 2 and --rounds at least 1", file=sys.stderr)
            return False
    elif a.layers < 1 or a.width < 1:
        print("--layers and --width must be at least 1", file=sys.stderr)
        return False
    return True


def emit(a: argparse.Namespace, res: dict, extra: str = "") -> None:
    """Prints `res` (with its "system" and "version"): as JSON with --json, else one line for the
    round or the DAG; `extra` ends the DAG's line."""
    if a.json:
        print(json.dumps(res))
        return
    head = f"{res['system']} {res['version']}"
    if a.round:
        print(f"{head} {a.round}: n {a.agents} rounds {a.rounds} messages "
              f"{res['messages']} elapsed_s {res['elapsed_s']:.3f} messages_per_s {res['messages_per_s']:.0f}")
    else:
        print(f"{head}: tasks {res['tasks']} elapsed_s {res['elapsed_s']:.3f} "
              f"tasks_per_s {res['tasks_per_s']:.0f}{extra}")
