#!/usr/bin/env python3
"""The layered DAG of `quorate bench dag`, run in LangGraph.

L layers x W width; node i of layer l depends on nodes i and (i+1) mod W of layer l-1. Every
task is one LangGraph node of a StateGraph; every dependency is an edge. A task with two
dependencies uses a join edge (`add_edge([a, b], task)`), so it runs once both have written.
The work is trivial: the node returns the number of its inputs (as in quorate's agent).

The state is one dict of results keyed by task id, merged by a reducer. The reducer updates the
dict in place instead of copying it (a copying `{**a, **b}` reducer is quadratic in the task
count and would make larger graphs infeasible); that is the only concession to speed.

Only `invoke` is timed (time.perf_counter); building and compiling the graph are reported
separately. Prints one line, or one JSON object with --json.

Round (--round star|all-to-all --agents n --rounds R --msg-tokens M): one node per participant.
LangGraph has no messages between nodes, only state writes that later nodes read; a "message"
here is one text of M words written by one node and read (word-counted) by another.
Star: worker nodes write reports, a join edge runs the hub, which reads the n-1 reports and
writes one feedback per worker; a conditional edge loops back to the workers for R rounds:
2(n-1) messages a round. All-to-all: every node writes its contribution and routes to every
other node; in the next superstep each node reads the n-1 others' contributions:
n(n-1) messages a round. Only invoke() is timed.
"""

import sys
import time
from typing import Annotated, TypedDict

from common import args_ok, deps_of, emit, parse_args, tid


def merge(a: dict, b: dict) -> dict:
    a.update(b)
    return a


class State(TypedDict):
    results: Annotated[dict, merge]


def make_node(name: str, deps: list):
    def node(state: State) -> dict:
        results = state["results"]
        inputs = [results[d] for d in deps]
        return {"results": {name: len(inputs)}}

    return node




def build(layers: int, width: int):
    from langgraph.graph import END, START, StateGraph

    g = StateGraph(State)
    for l in range(layers):
        for i in range(width):
            g.add_node(tid(l, i), make_node(tid(l, i), deps_of(l, i, width)))
    for i in range(width):
        g.add_edge(START, tid(0, i))
        g.add_edge(tid(layers - 1, i), END)
    for l in range(1, layers):
        for i in range(width):
            d = deps_of(l, i, width)
            g.add_edge(d if len(d) > 1 else d[0], tid(l, i))
    return g.compile()


def run_round(topology: str, n: int, rounds: int, msg_tokens: int) -> dict:
    from langgraph.graph import END, START, StateGraph

    text = " ".join(f"w{k}" for k in range(msg_tokens))
    read = {"messages": 0, "tokens": 0}

    def count(t: str) -> None:
        read["messages"] += 1
        read["tokens"] += len(t.split())

    class RState(TypedDict):
        posts: Annotated[dict, merge]
        feedback: Annotated[dict, merge]
        round: Annotated[dict, merge]
        done: Annotated[dict, merge]

    g = StateGraph(RState)
    names = [f"p{i}" for i in range(n)]
    if topology == "star":
        workers = names[1:]

        def worker(name: str):
            def node(state: RState) -> dict:
                fb = state["feedback"].get(name)
                if fb is not None:
                    count(fb)
                return {"posts": {name: text}}

            return node

        def hub(state: RState) -> dict:
            for w in workers:
                count(state["posts"][w])
            r = state["round"].get("hub", 0) + 1
            return {"feedback": {w: text for w in workers}, "round": {"hub": r}}

        def after_hub(state: RState):
            return workers if state["round"]["hub"] < rounds else "last"

        def last(state: RState) -> dict:
            for w in workers:
                count(state["feedback"][w])
            return {}

        for w in workers:
            g.add_node(w, worker(w))
            g.add_edge(START, w)
        g.add_node("hub", hub)
        g.add_node("last", last)
        g.add_edge(workers, "hub")
        g.add_conditional_edges("hub", after_hub, workers + ["last"])
        g.add_edge("last", END)
    else:

        def peer(name: str):
            def node(state: RState) -> dict:
                r = state["round"].get(name, 0)
                if r > 0:
                    for other in names:
                        if other != name:
                            count(state["posts"][other])
                if r == rounds:
                    return {"done": {name: True}}
                return {"posts": {name: text}, "round": {name: r + 1}}

            return node

        def route(name: str):
            others = [o for o in names if o != name]

            def go(state: RState):
                return END if state["done"].get(name) else others

            return go

        for name in names:
            g.add_node(name, peer(name))
            g.add_edge(START, name)
        for name in names:
            g.add_conditional_edges(name, route(name), [o for o in names if o != name] + [END])
    graph = g.compile()
    start = time.perf_counter()
    graph.invoke({"posts": {}, "feedback": {}, "round": {}, "done": {}}, {"recursion_limit": 4 * rounds + 10})
    elapsed = time.perf_counter() - start
    formula = (2 * (n - 1) if topology == "star" else n * (n - 1)) * rounds
    return {"topology": topology, "n": n, "rounds": rounds, "messages": read["messages"],
            "formula_messages": formula, "tokens": read["tokens"], "elapsed_s": elapsed,
            "messages_per_s": read["messages"] / elapsed}


def main() -> int:
    a = parse_args(__doc__)
    if not args_ok(a):
        return 2
    from importlib.metadata import version

    if a.round:
        res = run_round(a.round, a.agents, a.rounds, a.msg_tokens)
        res.update(system="langgraph", version=version("langgraph"))
        if res["messages"] != res["formula_messages"]:
            print(f"counted {res['messages']} messages, formula {res['formula_messages']}", file=sys.stderr)
            return 1
        emit(a, res)
        return 0
    t0 = time.perf_counter()
    graph = build(a.layers, a.width)
    build_s = time.perf_counter() - t0
    start = time.perf_counter()
    out = graph.invoke({"results": {}}, {"recursion_limit": a.layers + 10})
    elapsed = time.perf_counter() - start
    tasks = a.layers * a.width
    done = len(out["results"])
    if done != tasks:
        print(f"only {done} of {tasks} tasks ran", file=sys.stderr)
        return 1
    res = {
        "system": "langgraph",
        "version": version("langgraph"),
        "mode": "StateGraph, one node per task, join edges; invoke()",
        "layers": a.layers,
        "width": a.width,
        "tasks": tasks,
        "build_s": build_s,
        "elapsed_s": elapsed,
        "tasks_per_s": tasks / elapsed,
    }
    emit(a, res, f" (build+compile {build_s:.2f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
