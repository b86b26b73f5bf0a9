"""The benchmark server's capacity: how many chat completions a second it answers when the client is not the limit.

A load generator as light as a client can be: pre-encoded HTTP/1.1 requests (the bodies of real ChatEval
one-by-one calls: the template's prompts with the scripted replies in the history, as the bare loop sends them),
``connections`` persistent connections per process each sending its next request as soon as the last answer is
in, on asyncio's fastest loop (uvloop when installed), in ``processes`` processes. It reads only the status line
and ``Content-Length``. Several processes spread the client over the cores the server leaves free; its rate is
then a lower bound of the server's capacity, and the server's CPU per request (from ``/stats``) gives the other
bound: what one core of the server would answer if it did nothing else.

    python benchmarks/loadgen.py --port PORT --bodies BODIES.json --connections 50 --requests 20000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def chateval_bodies(items: int, model: str = "bench") -> list[bytes]:
    """The JSON bodies of ChatEval one-by-one's calls (2 referees x 2 turns) on the first ``items`` benchmark
    items, each with the history the scripted replies make: the same prompts and sizes as the bare loop's."""
    from langchain_core.messages import AIMessage, BaseMessage

    from benchmarks.scenarios import bench_items
    from benchmarks.server import chateval_reply
    from jurygraph.nodes.referee import ChatEvalTemplate, chateval_personas

    frame, panel = ChatEvalTemplate(), chateval_personas(None, 2)
    bodies = []
    for item in bench_items(items):
        history: list[BaseMessage] = []
        for turn in (1, 2):
            for referee in panel:
                prompt, _ = frame.build(item, referee, history, final=turn == 2)
                request = {"messages": [{"content": prompt, "role": "user"}], "model": model, "n": 1,
                           "stream": False, "temperature": 0.0}
                bodies.append(json.dumps(request).encode())
                history.append(AIMessage(chateval_reply(request, 0), name=referee.name))
    return bodies


class _Client(asyncio.Protocol):
    """One persistent connection sending requests back to back."""

    def __init__(self, requests: list[bytes], start: int, step: int, budget: list[int], done: asyncio.Future[None],
                 errors: list[int]) -> None:
        self.requests, self.index, self.step = requests, start, step
        self.budget, self.done, self.errors = budget, done, errors
        self.buffer = b""
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self._send()

    def _send(self) -> None:
        if self.budget[0] <= 0:
            self.transport.close()
            return
        self.budget[0] -= 1
        self.transport.write(self.requests[self.index % len(self.requests)])
        self.index += self.step

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].lower()
            start = head.find(b"content-length:") + 15
            stop = head.find(b"\r\n", start)
            length = int(head[start:stop if stop >= 0 else end])
            if len(self.buffer) < end + 4 + length:
                return
            if not self.buffer.startswith(b"HTTP/1.1 200"):
                self.errors[0] += 1
            self.buffer = self.buffer[end + 4 + length:]
            self.budget[1] += 1
            self._send()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def _drive(port: int, bodies: list[bytes], connections: int, requests: int) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    framed = [b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body for body in bodies]
    budget, errors = [requests, 0], [0]  # [requests left to send, answers received]
    finished: list[asyncio.Future[None]] = []
    started = time.perf_counter()
    for number in range(connections):
        done: asyncio.Future[None] = loop.create_future()
        finished.append(done)
        client = _Client(framed, number, connections, budget, done, errors)
        await loop.create_connection(lambda client=client: client, "127.0.0.1", port)  # type: ignore[misc]
    await asyncio.gather(*finished)
    seconds = time.perf_counter() - started
    return {"requests": budget[1], "seconds": seconds, "errors": errors[0], "cpu_seconds": time.process_time()}


def _run(coroutine: Any) -> Any:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


def capacity(port: int, bodies_file: Path, *, connections: int, processes: int, requests: int) -> dict[str, Any]:
    """Drive the server at ``port`` from ``processes`` load-generator processes of ``connections`` connections
    each, ``requests`` requests in all; the rate is answers over the slowest process's time."""
    per = requests // processes
    command = [sys.executable, str(Path(__file__).resolve()), "--port", str(port), "--bodies", str(bodies_file),
               "--connections", str(connections), "--requests", str(per)]
    children = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(processes)]
    outputs = [json.loads(child.communicate()[0].strip().splitlines()[-1]) for child in children]
    answered = sum(o["requests"] for o in outputs)
    seconds = max(o["seconds"] for o in outputs)
    return {"processes": processes, "connections_each": connections, "requests": answered,
            "errors": sum(o["errors"] for o in outputs), "seconds": round(seconds, 3),
            "requests_per_second": round(answered / seconds, 1),
            "generator_cpu_ms_per_request": round(1000 * sum(o["cpu_seconds"] for o in outputs) / answered, 3)}


def write_bodies(path: Path, items: int = 50) -> Path:
    path.write_text(json.dumps([body.decode() for body in chateval_bodies(items)]), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--bodies", required=True, help="a JSON list of request bodies (write_bodies)")
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--requests", type=int, default=20_000)
    args = parser.parse_args(argv)
    bodies = [body.encode() for body in json.loads(Path(args.bodies).read_text(encoding="utf-8"))]
    print(json.dumps(_run(_drive(args.port, bodies, args.connections, args.requests))), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
