#!/usr/bin/env python3
"""The layered DAG of `quorate bench dag` (and the star / all-to-all round of
`quorate experiment topology`), run in AutoGen-core on `SingleThreadedAgentRuntime`.

DAG (default): L layers x W width; node i of layer l depends on nodes i and (i+1) mod W of
layer l-1. One RoutedAgent per role: a `coordinator` that owns the DAG and a `worker` that does
the tasks. The coordinator sends one request (`send_message`, request/response) per task to the
worker as soon as the task's dependencies have answered; the worker's work is trivial (it answers
with the number of inputs, as quorate's agent does). The timed region (time.perf_counter) is the
single `send_message(RunDag)` from the driver to the coordinator, i.e. all N task requests.

Round (--round star|all-to-all --agents n --rounds R --msg-tokens M): n `participant` agents.
Star: participant 0 is the hub; each round every other participant sends a report (M words) to
the hub with `send_message` and the hub answers with feedback (M words): 2(n-1) messages a round.
All-to-all: every participant sends its contribution (M words) to every other one:
n(n-1) messages a round. Receivers count the words they read (the "delta" token model). The
driver starts each round and awaits its end (not counted, as in quorate's experiment).
"""

import asyncio
import sys
import time
from dataclasses import dataclass, field

from autogen_core import (
    AgentId,
    MessageContext,
    RoutedAgent,
    SingleThreadedAgentRuntime,
    message_handler,
)

from common import args_ok, deps_of, emit, parse_args, tid


# ---------------------------------------------------------------- DAG


@dataclass
class RunDag:
    layers: int
    width: int


@dataclass
class DagDone:
    tasks: int


@dataclass
class TaskRequest:
    task: str
    inputs: list = field(default_factory=list)


@dataclass
class TaskResult:
    task: str
    value: int


class Worker(RoutedAgent):
    def __init__(self) -> None:
        super().__init__("does one task per request")

    @message_handler
    async def on_task(self, message: TaskRequest, ctx: MessageContext) -> TaskResult:
        return TaskResult(task=message.task, value=len(message.inputs))


class Coordinator(RoutedAgent):
    def __init__(self) -> None:
        super().__init__("runs a layered DAG, one request per task")

    @message_handler
    async def on_run(self, message: RunDag, ctx: MessageContext) -> DagDone:
        worker = AgentId("worker", "default")
        loop = asyncio.get_running_loop()
        futures = {}
        for l in range(message.layers):
            for i in range(message.width):
                futures[tid(l, i)] = loop.create_future()

        async def run_task(l: int, i: int) -> None:
            deps = deps_of(l, i, message.width)
            inputs = [await futures[d] for d in deps]
            result = await self.send_message(TaskRequest(tid(l, i), inputs), worker)
            futures[result.task].set_result(result.value)

        await asyncio.gather(
            *(run_task(l, i) for l in range(message.layers) for i in range(message.width))
        )
        return DagDone(tasks=len(futures))


async def run_dag(layers: int, width: int) -> dict:
    runtime = SingleThreadedAgentRuntime()
    await Worker.register(runtime, "worker", lambda: Worker())
    await Coordinator.register(runtime, "coordinator", lambda: Coordinator())
    runtime.start()
    start = time.perf_counter()
    done = await runtime.send_message(RunDag(layers, width), AgentId("coordinator", "default"))
    elapsed = time.perf_counter() - start
    await runtime.stop()
    tasks = layers * width
    assert done.tasks == tasks
    return {"layers": layers, "width": width, "tasks": tasks, "elapsed_s": elapsed,
            "tasks_per_s": tasks / elapsed}


# ---------------------------------------------------------------- round


@dataclass
class StartRound:
    topology: str
    n: int
    text: str


@dataclass
class Turn:
    text: str


@dataclass
class Count:
    messages: int = 0
    tokens: int = 0


class Participant(RoutedAgent):
    def __init__(self) -> None:
        super().__init__("one participant of a star or all-to-all round")
        self.tokens = 0
        self.messages = 0

    @message_handler
    async def on_start(self, message: StartRound, ctx: MessageContext) -> int:
        me = int(self.id.key)
        if message.topology == "star":
            if me == 0:
                return 0
            feedback = await self.send_message(Turn(message.text), AgentId("participant", "0"))
            self.tokens += len(feedback.text.split())
            self.messages += 1
            return 1
        others = [j for j in range(message.n) if j != me]
        await asyncio.gather(
            *(self.send_message(Turn(message.text), AgentId("participant", str(j))) for j in others)
        )
        return len(others)

    @message_handler
    async def on_turn(self, message: Turn, ctx: MessageContext) -> Turn:
        self.tokens += len(message.text.split())
        self.messages += 1
        return Turn(message.text)

    @message_handler
    async def on_count(self, message: Count, ctx: MessageContext) -> Count:
        return Count(self.messages, self.tokens)


async def run_round(topology: str, n: int, rounds: int, msg_tokens: int) -> dict:
    runtime = SingleThreadedAgentRuntime()
    await Participant.register(runtime, "participant", lambda: Participant())
    runtime.start()
    text = " ".join(f"w{k}" for k in range(msg_tokens))
    ids = [AgentId("participant", str(i)) for i in range(n)]
    start = time.perf_counter()
    for _ in range(rounds):
        await asyncio.gather(*(runtime.send_message(StartRound(topology, n, text), a) for a in ids))
    elapsed = time.perf_counter() - start
    counts = [await runtime.send_message(Count(), a) for a in ids]
    await runtime.stop()
    messages = sum(c.messages for c in counts)
    formula = (2 * (n - 1) if topology == "star" else n * (n - 1)) * rounds
    assert messages == formula, (messages, formula)
    return {"topology": topology, "n": n, "rounds": rounds, "messages": messages,
            "tokens": sum(c.tokens for c in counts), "elapsed_s": elapsed,
            "messages_per_s": messages / elapsed}


def main() -> int:
    a = parse_args(__doc__)
    from importlib.metadata import version

    if not args_ok(a):
        return 2
    if a.round:
        res = asyncio.run(run_round(a.round, a.agents, a.rounds, a.msg_tokens))
        res.update(system="autogen-core", version=version("autogen-core"))
        emit(a, res)
        return 0
    res = asyncio.run(run_dag(a.layers, a.width))
    res.update(system="autogen-core", version=version("autogen-core"),
               mode="SingleThreadedAgentRuntime, coordinator + worker RoutedAgents, one send_message per task")
    emit(a, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
