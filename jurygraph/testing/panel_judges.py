"""Judges whose behaviour is known, on the bundled FairEval data, served by the fake OpenAI server: the panel of
``docs/PANEL.md`` and of the panel tests.

Each judge is a model name; whatever prompt it gets (ChatEval's referee, the ensemble, a single agent, either
answer order), it finds the FairEval question in it and answers in ChatEval's answer form by its script:

=================  ==========================================================================================
``gpt-4o-mini``    the oracle: always the human label (so it never errs)
``coin``           a fixed coin: Assistant 1, 2 or tie by a hash of the question (agrees about a third of the time)
``coin-twin``      copies ``coin``: its errors are ``coin``'s
``llama3-8b``      self-preferring: always vicuna (a LLaMA fine-tune, of its family)
``first``          position-biased: always the answer shown first, whichever it is
``follower``       conformist: first a coin of its own, then (once it has spoken) the majority of what the
                   others said last in the discussion it heard
=================  ==========================================================================================

Any other model name answers as ``coin``. Picks are stated for the order the judge was shown (a pick of
gpt35 is "Assistant 2" when vicuna's answer comes first), so a calibrated run maps them back as for any judge.

``python -m jurygraph.testing.panel_judges [--port N]`` serves them on 127.0.0.1 until interrupted and prints
the ``--base-url`` to give ``jurygraph eval``.
"""

from __future__ import annotations

import re
import zlib
from functools import cache
from typing import Any

from jurygraph.judging.aggregation import majority_label
from jurygraph.judging.items import SWAP_LABEL
from jurygraph.judging.judgments import PAIRWISE_LABELS, pairwise_label
from jurygraph.running.datasets import load_dataset
from jurygraph.testing import pairwise_reply
from jurygraph.testing.fake_server import FakeOpenAIServer, prompt_of

_SCORES = {"1": (8, 4), "2": (4, 8), "tie": (6, 6)}
_SPOKEN = re.compile(r"\[(?P<name>[^\]\n]+)\]: Evaluation evidence:.*?\nThe score of Assistant 1: (?P<one>[\d.]+)\n"
                     r"The score of Assistant 2: (?P<two>[\d.]+)", re.S)
_SPEAKER = re.compile(r"short and clear, (?P<name>.+?) !")


@cache
def faireval() -> dict[str, dict[str, Any]]:
    """FairEval by question: the two answers (gpt35's, vicuna's) and the human label."""
    return {item.question or "": {"id": item.id, "answers": (item.response_1, item.response_2),
                                  "label": (item.human or {}).get("label")}
            for item in load_dataset("faireval").items}


def coin(question: str, salt: str = "coin") -> str:
    """The coin's pick for a question: a label by a hash (the same every time)."""
    return PAIRWISE_LABELS[zlib.crc32(f"{salt}:{question}".encode()) % 3]


def _heard_majority(prompt: str) -> str | None:
    """From the second time a referee speaks: the majority of what the others said last (in the order shown),
    read from its discussion history; None before it has spoken, or when the others are split."""
    own = _SPEAKER.search(prompt)
    last: dict[str, str] = {}
    for said in _SPOKEN.finditer(prompt):
        last[said["name"]] = pairwise_label(float(said["one"]), float(said["two"]))
    if own is None or last.pop(own["name"], None) is None or not last:
        return None
    return majority_label(last.values())[0]


def pick(model: str, question: str, human: str | None, prompt: str = "") -> tuple[str, bool]:
    """A judge's pick, and whether it is stated in the original order (False: in the order shown)."""
    if model == "gpt-4o-mini":
        return human or "tie", True
    if model == "llama3-8b":
        return "2", True
    if model == "first":
        return "1", False
    if model == "follower":
        heard = _heard_majority(prompt)
        return (heard, False) if heard else (coin(question, "follower"), True)
    return coin(question), True


def respond(request: dict[str, Any], choice: int = 0) -> str:
    """The fake server's responder: each model judges by its script (see the module's doc)."""
    prompt = prompt_of(request)
    question = next((q for q in faireval() if q and q in prompt), None)
    if question is None:
        return "I cannot find the question."
    item = faireval()[question]
    label, original = pick(str(request.get("model")), question, item["label"], prompt)
    gpt35, vicuna = (prompt.find(a) for a in item["answers"])
    shown_swapped = 0 <= vicuna < gpt35
    if original and shown_swapped:
        label = SWAP_LABEL[label]
    one, two = _SCORES[label]
    return pairwise_reply(one, two, f"{request.get('model')} judged by its script.")


def serve(port: int = 0) -> FakeOpenAIServer:
    """The judges on a local fake OpenAI server (started; stop it with ``.stop()``); port 0: any free one."""
    return FakeOpenAIServer(respond, port=port).start()


def main() -> None:
    import argparse
    import time

    parser = argparse.ArgumentParser(prog="python -m jurygraph.testing.panel_judges",
                                     description="FairEval judges with known behaviour on a local fake OpenAI server")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free one)")
    server = serve(port=parser.parse_args().port)
    print(f"panel judges at --base-url {server.base_url}  (Ctrl-C stops)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
