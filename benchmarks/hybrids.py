"""Requests and tokens per item of the protocols beyond the papers (issue 14) against their bases, at the local
OpenAI-compatible test server (127.0.0.1), on items where the scripted judges agree from round 1 and on items
where they never agree.

    python benchmarks/hybrids.py [--items 10] [--turns 3]

Scripted replies (deterministic, in each protocol's answer form):
- ChatEval referees: on an ``agree`` item every referee prefers Assistant 2 (6 vs 8); on a ``never`` item the
  General Public prefers Assistant 1 and the Critic Assistant 2, in every round.
- The devil's advocate: NO ISSUE on an ``agree`` item (the panel is right), an objection on a ``never`` item.
- ReFeR peers: all rate 2 on an ``agree`` item; 1, 2, 3 on a ``never`` item. The area chair rates 2.
Tokens are the server's usage (fake_server.count_tokens: GPT-4's pre-tokenizer pieces, plus the chat framing;
whitespace words before issue 20), summed over the item.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from langgraph.graph import StateGraph

from jurygraph import EvalItem, JuryContext, ModelSpec, create_chateval, create_refer, load_dataset
from jurygraph.graphs import create_chateval_devil, create_refer_discussion
from jurygraph.testing import pairwise_reply
from jurygraph.testing.fake_server import FakeOpenAIServer, prompt_of

PEER_RATINGS = {"agree": {"peer_1": 2, "peer_2": 2, "peer_3": 2}, "never": {"peer_1": 1, "peer_2": 2, "peer_3": 3}}


def responder(kind: str) -> Callable[[dict[str, Any], int], str]:
    def respond(request: dict[str, Any], index: int) -> str:
        prompt = prompt_of(request)
        if "Object to the current majority" in prompt:  # the devil's advocate
            return "NO ISSUE" if kind == "agree" else "The majority overlooks what Assistant 1 gets right."
        if "New summary:" in prompt:
            return "The referees compared both answers."
        if "Output with the following format strictly" in prompt:  # ChatEval referees
            name = re.search(r"short and clear, (.+) !", prompt)
            first = kind == "never" and name is not None and name.group(1) == "General Public"
            return pairwise_reply(8, 6) if first else pairwise_reply(6, 8)
        if "“Rating”" in prompt or "Rating: <a number" in prompt:  # ReFeR peers (and their discussion turns)
            if "Assistant’s Evaluation" in prompt:  # the area chair
                return "Analysis: the peers' views weighed.\nRating: 2"
            peer = request["model"]
            return f"Analysis: {peer} reviewed the reply.\nRating: {PEER_RATINGS[kind][peer]}"
        return "I think Assistant 2 covers more of the question."  # a ChatEval discussion turn

    return respond


def measure(builder: StateGraph, items: list[EvalItem], kind: str, context: Callable[[str], JuryContext]) -> dict:
    server = FakeOpenAIServer(responder(kind)).start()
    try:
        graph = builder.compile()
        tokens, rounds = 0, []
        for item in items:
            out = graph.invoke({"item": item}, context=context(server.base_url))
            tokens += sum(u.get("input_tokens", 0) + u.get("output_tokens", 0) for u in out["usage"].values())
            rounds.append(out["verdict"].get("detail", {}).get("rounds"))
        return {"requests": len(server.requests) / len(items), "tokens": tokens / len(items), "rounds": rounds[0]}
    finally:
        server.stop()


def one_model(url: str) -> JuryContext:
    return JuryContext(default=ModelSpec.parse(f"openai:judge@{url}"))


def peer_models(url: str) -> JuryContext:
    # each peer its own model name, so the scripted server knows who is speaking
    return JuryContext(default=ModelSpec.parse(f"openai:area_chair@{url}"),
                       models={f"peer_{i}": ModelSpec.parse(f"openai:peer_{i}@{url}") for i in (1, 2, 3)})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=10)
    parser.add_argument("--turns", type=int, default=3)
    args = parser.parse_args()
    pairwise = load_dataset("faireval").items[: args.items]
    scored = load_dataset("topical-chat", aspect="coherence").items[: args.items]
    t = args.turns
    rows: list[tuple[str, StateGraph, list[EvalItem], Callable[[str], JuryContext]]] = []
    for strategy in ("one-by-one", "simultaneous", "summarizer"):
        rows += [(f"chateval {strategy} T={t} (base)", create_chateval(strategy=strategy, turns=t), pairwise,
                  one_model),
                 (f"chateval {strategy} T={t} --stop-when consensus",
                  create_chateval(strategy=strategy, turns=t, stop_when="consensus"), pairwise, one_model)]
    rows += [(f"chateval one-by-one T={t} --devil", create_chateval_devil(turns=t), pairwise, one_model),
             (f"chateval one-by-one T={t} --devil --stop-when consensus",
              create_chateval_devil(turns=t, stop_when="consensus"), pairwise, one_model),
             ("refer lite K=3 (base)", create_refer(variant="lite"), scored, peer_models),
             ("refer lite K=3 --peer-discussion 1", create_refer_discussion(rounds=1, variant="lite"), scored,
              peer_models),
             ("refer lite K=3 --peer-discussion 2", create_refer_discussion(rounds=2, variant="lite"), scored,
              peer_models)]
    print("| protocol | agree: requests/item | agree: tokens/item | agree: rounds | never: requests/item | "
          "never: tokens/item | never: rounds |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, builder, items, context in rows:
        agree, never = (measure(builder, items, kind, context) for kind in ("agree", "never"))
        print(f"| {name} | {agree['requests']:g} | {agree['tokens']:.0f} | {agree['rounds'] or '–'} | "
              f"{never['requests']:g} | {never['tokens']:.0f} | {never['rounds'] or '–'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
