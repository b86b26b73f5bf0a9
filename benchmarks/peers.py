"""The peers of the ``peers`` scenario: one judge call per FairEval item from another library, or from nothing.

Each runs as a command of its own, as ``jurygraph eval`` does, so the scenario measures every one the same way
(wall time of the whole command, first request after its start, exit after its last reply):

    python benchmarks/peers.py bare      --url URL --items faireval.json --concurrency 50 --out results.jsonl
    python benchmarks/peers.py openevals --url URL --items faireval.json --concurrency 50 --out results.jsonl

``bare`` is the floor: ``langchain_openai.ChatOpenAI`` and an asyncio semaphore, nothing else (no jurygraph
import). ``openevals`` is LangChain's ``create_async_llm_as_judge`` with the same client: structured output (a
JSON schema the server's FairEval replies fill), the way openevals asks for a score. ``inspect_ai`` (optional, may
run from another environment: this file imports nothing of jurygraph's) is inspect_ai's own ``eval`` of a task of
one ``generate()`` per question. None keeps anything durable but its results (inspect_ai: its log); ``jurygraph
eval`` keeps checkpoints, an LLM cache and a results line per item as it goes. The items file is a JSON list of
``{"id", "question", "response_1", "response_2"}`` (the scenario writes it from jurygraph's FairEval copy).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

PROMPT = """[Question]
{question}

[The Start of Assistant 1's Answer]
{answer_1}
[The End of Assistant 1's Answer]

[The Start of Assistant 2's Answer]
{answer_2}
[The End of Assistant 2's Answer]

We would like to request your feedback on the performance of two AI assistants in response to the user question
displayed above. Please rate the helpfulness, relevance, accuracy, and level of detail of their responses. Each
assistant receives an overall score on a scale of 1 to 10. Output the scores of Assistant 1 and 2 on two lines:
The score of Assistant 1: <score>
The score of Assistant 2: <score>"""

OPENEVALS_PROMPT = """You compare two AI assistants' answers to a user question.
<question>
{inputs}
</question>
<answers>
{outputs}
</answers>
Is Assistant 1's answer more helpful, relevant, accurate and detailed than Assistant 2's?"""


def _model(url: str) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model="bench", base_url=url, api_key="not-needed", temperature=0, max_retries=2,  # type: ignore[arg-type]
                      timeout=60)


def bare(url: str) -> Callable[[dict[str, Any]], Awaitable[Any]]:
    model = _model(url)

    async def judge(item: dict[str, Any]) -> Any:
        prompt = PROMPT.format(question=item["question"], answer_1=item["response_1"], answer_2=item["response_2"])
        reply = await model.ainvoke(prompt)
        return reply.text

    return judge


def openevals(url: str) -> Callable[[dict[str, Any]], Awaitable[Any]]:
    from openevals.llm import create_async_llm_as_judge

    evaluator = create_async_llm_as_judge(prompt=OPENEVALS_PROMPT, judge=_model(url), feedback_key="assistant_1")

    async def judge(item: dict[str, Any]) -> Any:
        return await evaluator(inputs=item["question"],  # type: ignore[misc]
                               outputs={"assistant_1": item["response_1"], "assistant_2": item["response_2"]})

    return judge


RUNNERS: dict[str, Callable[[str], Callable[[dict[str, Any]], Awaitable[Any]]]] = {
    "bare": bare, "openevals": openevals,
}


def inspect_ai(url: str, items: list[dict[str, Any]], concurrency: int, out: Path) -> None:
    """inspect_ai's own runner: a task of one ``generate()`` per question (its model call) and a scorer that reads
    the reply without a model, so one call per item as the others; its log directory beside ``out``."""
    import os

    from inspect_ai import Task
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.scorer import includes
    from inspect_ai.solver import generate

    os.environ.setdefault("OPENAI_API_KEY", "not-needed")
    samples = [Sample(id=item["id"], target="Assistant 1", input=PROMPT.format(
        question=item["question"], answer_1=item["response_1"], answer_2=item["response_2"])) for item in items]
    task = Task(dataset=MemoryDataset(samples), solver=generate(), scorer=includes())
    # the chat completions API, as the other peers call it (inspect_ai would use the Responses API for "openai/")
    logs = inspect_eval(task, model="openai/bench", model_base_url=url, model_args={"responses_api": False},
                        max_connections=concurrency, log_dir=str(out.parent / "inspect-logs"), display="none")
    out.write_text(json.dumps({"status": [log.status for log in logs]}) + "\n", encoding="utf-8")


async def judge_all(judge: Callable[[dict[str, Any]], Awaitable[Any]], items: list[dict[str, Any]],
                    concurrency: int) -> list[dict[str, Any]]:
    gate = asyncio.Semaphore(concurrency)

    async def one(item: dict[str, Any]) -> dict[str, Any]:
        async with gate:
            return {"id": item["id"], "result": await judge(item)}

    return await asyncio.gather(*(one(item) for item in items))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runner", choices=sorted([*RUNNERS, "inspect_ai"]))
    parser.add_argument("--url", required=True, help="the model server's base URL (.../v1)")
    parser.add_argument("--items", required=True, help="a JSON list of FairEval items")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--out", required=True, help="results, one JSON line per item")
    args = parser.parse_args(argv)
    items = json.loads(Path(args.items).read_text(encoding="utf-8"))
    if args.runner == "inspect_ai":
        inspect_ai(args.url, items, args.concurrency, Path(args.out))
        return 0
    results = asyncio.run(judge_all(RUNNERS[args.runner](args.url), items, args.concurrency))
    Path(args.out).write_text("".join(json.dumps(r, default=str) + "\n" for r in results), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
