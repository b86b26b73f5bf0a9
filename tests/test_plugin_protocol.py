"""Your protocol is first-class (issue 29): a protocol from a package of its own, outside jurygraph, runs through
every command like a built-in one, with no jurygraph file changed.

The package is written here into a temporary site folder with its distribution's metadata, so its entry points
(``jurygraph.protocols``) are found as an installed package's are: ``relay`` (a spec beside its factory) and
``relay-bare`` (the bare factory, its spec derived from its signature). The same factory is also given as
``MODULE:FACTORY``. Each form is run through ``eval``, ``--dry-run``, ``--resume`` after the writer was killed
(``kill -9`` in the middle of an item), ``show``, ``report``, ``metaeval``, a budget, escalation and review,
against the local OpenAI-compatible server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jurygraph.cli import main
from jurygraph.running.rundir import read_manifest, read_results
from jurygraph.testing import pairwise_reply
from jurygraph.testing.fake_server import prompt_of

PACKAGE = "jg_relay_plugin"
PROTOCOLS = '''
"""Relay: referees speak one after another, each hearing those before it; the verdict averages their scores."""

from typing import Literal

from langgraph.graph import END, StateGraph

from jurygraph import JuryContext
from jurygraph.graphs.chateval import ChatEvalState, wire_turns
from jurygraph.graphs.spec import Option, ProtocolSpec, panel_signals
from jurygraph.nodes.aggregator import make_aggregator_node
from jurygraph.nodes.referee import chateval_personas


def create_relay(*, referees: int = 2, order: Literal["forward", "backward"] = "forward",
                 turns: int = 1) -> StateGraph:
    """Referees speak one after another, each hearing those before it; the verdict averages their scores.

    Args:
        referees: how many referees speak (the paper's personas, in order).
        order: who speaks first: forward (the first persona) or backward.
        turns: how many times each speaks; the last turn gives the scores.
    """
    panel = chateval_personas(None, referees)
    names = [r.name for r in panel][:: 1 if order == "forward" else -1]
    builder = StateGraph(ChatEvalState, context_schema=JuryContext)
    last = wire_turns(builder, panel, [[(name,) for name in names] for _ in range(turns)])
    builder.add_node("aggregate", make_aggregator_node(names))
    builder.add_edge(last, "aggregate")
    builder.add_edge("aggregate", END)
    return builder


SPEC = ProtocolSpec(
    name="relay",
    factory=create_relay,
    help="Relay: referees in turn, each hearing those before it",
    options=(Option("referees", int, 2, "Relay: how many referees", minimum=1),
             Option("order", str, "forward", "Relay: who speaks first", choices=("forward", "backward")),
             Option("turns", int, 1, "Relay: turns", minimum=1)),
    tasks=("pairwise", "score"),
    signals=lambda params, task: panel_signals(task, members=int(params.get("referees") or 2)),
)
'''
ENTRY_POINTS = f"""[jurygraph.protocols]
relay = {PACKAGE}.protocols:SPEC
relay-bare = {PACKAGE}.protocols:create_relay
"""


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The package installed in a site folder of its own: on ``sys.path`` here, on ``PYTHONPATH`` for a writer
    started as another process."""
    site = tmp_path / "site"
    (site / PACKAGE).mkdir(parents=True)
    (site / PACKAGE / "__init__.py").write_text("", encoding="utf-8")
    (site / PACKAGE / "protocols.py").write_text(textwrap.dedent(PROTOCOLS), encoding="utf-8")
    info = site / f"{PACKAGE}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(ENTRY_POINTS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    yield site
    for name in [m for m in sys.modules if m.startswith(PACKAGE)]:
        del sys.modules[name]


def respond(request: dict[str, Any], _: int) -> str:
    prompt = prompt_of(request)
    if "Output with the following format strictly" in prompt:  # a referee's last turn: its scores
        return pairwise_reply(8, 5, "Assistant 1 is more complete.")
    return "Assistant 1 answers the question; Assistant 2 drifts."


def run(*args: str) -> tuple[int, str, str]:
    """A command in this process, with its output."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def model(server: Any) -> list[str]:
    return ["--model", "judge", "--base-url", server.base_url]


WRITER = "import sys\nfrom jurygraph.cli import main\nsys.exit(main(sys.argv[1:]))\n"


def killed_mid_run(server: Any, release: threading.Event, args: list[str], at_request: int) -> None:
    """Start ``eval`` as another process and kill it (-9) while request number ``at_request`` is in flight."""
    writer = subprocess.Popen([sys.executable, "-c", WRITER, *args], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while len(server.requests) < at_request and time.monotonic() < deadline and writer.poll() is None:
            time.sleep(0.02)
        assert len(server.requests) == at_request, (len(server.requests), writer.poll(), writer.stderr)
    finally:
        writer.kill()
        writer.wait(timeout=30)
        release.set()


@pytest.mark.parametrize("protocol", ["relay", f"{PACKAGE}.protocols:create_relay"], ids=["entry point", "module"])
def test_a_protocol_of_ones_own_runs_through_every_command(protocol: str, plugin: Path, openai_server,
                                                          tmp_path: Path) -> None:
    release = threading.Event()
    hold_at = 8  # the second item's second referee: the writer is killed while it waits for this answer

    def held(request: dict[str, Any], i: int) -> str:
        if len(server.requests) == hold_at and not release.is_set():
            release.wait(30)
        return respond(request, i)

    server = openai_server(held)
    out = tmp_path / "run"
    options = ["--param", "referees=3", "--param", "turns=2"]
    data = ["--dataset", "faireval", "--limit", "3"]  # one answer order: its spec asks for no position calibration
    # the dry run: the plan is counted on the graph itself (3 referees x 2 turns; each last turn may be re-asked)
    code, text, err = run("eval", "--protocol", protocol, *options, *data, *model(server), "--dry-run", "--json")
    assert code == 0, err
    estimate = json.loads(text)
    assert estimate["requests"] == 3 * 6 and estimate["requests_per_item"] == 6
    assert estimate["requests_per_item_with_reasks"] == 6 + 3
    assert server.requests == []
    # a run, killed in the middle of its second item; the resume continues it from its checkpoint
    args = ["eval", "--protocol", protocol, *options, *data, *model(server), "--out", str(out), "--quiet",
            "--concurrency", "1"]
    killed_mid_run(server, release, args, at_request=hold_at)
    assert [r["id"] for r in read_results(out)] == ["0"]
    code, text, err = run("eval", "--resume", str(out), "--base-url", server.base_url, "--quiet")
    assert code == 0, err
    records = read_results(out)
    assert sorted(r["id"] for r in records) == ["0", "1", "2"] and all(r["status"] == "ok" for r in records)
    assert all(r["verdict"]["label"] == "1" and set(r["judgments"]) == {"General Public", "Critic", "News Author"}
               for r in records)
    # item 1's first answer came from its checkpoint: only the request in flight when it was killed went out twice
    assert len(server.requests) == 6 + 2 + 5 + 6
    manifest = read_manifest(out)
    assert manifest is not None and manifest["protocol"] == protocol
    assert manifest["parameters"] == {"referees": 3, "order": "forward", "turns": 2, "protocol": protocol}
    assert manifest["requests_per_item"] == 9 and len(manifest["invocations"]) == 2
    # show: the item's conversation from its checkpoint
    code, text, err = run("show", str(out), "1")
    assert code == 0, err
    assert "News Author" in text and "verdict: label 1" in text
    # report: the page, with the protocol's diagram rebuilt from the manifest
    code, text, err = run("report", str(out), "--out", str(tmp_path / "report.html"), "--resamples", "0")
    assert code == 0 and "no diagram" not in err, err
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "news_author_t2" in page or "data:image/png" in page
    # metaeval: agreement with the human labels, and the panel's members are the three referees
    code, text, err = run("metaeval", str(out), "--json", "--resamples", "0")
    assert code == 0, err
    found = json.loads(text)
    assert found["methods"][0]["agreement"]["pairwise"]
    assert {m["name"] for m in found["panels"][0]["members"]} == {"General Public", "Critic", "News Author"}


def test_its_options_are_typed_and_checked(plugin: Path, openai_server, tmp_path: Path) -> None:
    server = openai_server(respond)
    base = ["eval", "--dataset", "faireval", "--limit", "1", *model(server), "--quiet"]
    code, _, err = run(*base, "--protocol", "relay", "--param", "turns=0", "--out", str(tmp_path / "a"))
    assert code == 2 and "--param turns must be at least 1 (got 0)" in err
    code, _, err = run(*base, "--protocol", "relay", "--param", "order=sideways", "--out", str(tmp_path / "b"))
    assert code == 2 and "--param order must be one of forward, backward (got sideways)" in err
    code, _, err = run(*base, "--protocol", "relay", "--param", "rounds=2", "--out", str(tmp_path / "c"))
    assert code == 2 and "--param rounds: not an option of --protocol relay" in err
    code, _, err = run(*base, "--protocol", "relay", "--turns", "2", "--out", str(tmp_path / "d"))
    assert code == 2 and "--turns is not an option of --protocol relay (it is read by chateval)" in err
    # the task kinds its spec names: a table of choice items is refused before a request
    choices = tmp_path / "choices.jsonl"
    choices.write_text('{"id": "q1", "question": "What is 2+2? (A) 4 (B) 5", "answer": "A"}\n', encoding="utf-8")
    code, _, err = run(*base, "--protocol", "relay", "--dataset", str(choices), "--task", "choice",
                       "--out", str(tmp_path / "e"))
    assert code == 2 and f"--protocol relay judges pairwise, score items, not the choice items of {choices}" in err
    assert server.requests == []
    # the bare factory's options come from its signature: typed, with the docstring's help
    from jurygraph.graphs.registry import find

    bare = find("relay-bare")
    assert [(o.name, o.type, o.default, o.choices) for o in bare.options] == [
        ("referees", int, 2, None), ("order", str, "forward", ("forward", "backward")), ("turns", int, 1, None)]
    assert bare.option("order").help == "who speaks first: forward (the first persona) or backward."
    code, _, err = run(*base, "--protocol", "relay-bare", "--param", "referees=two", "--out", str(tmp_path / "f"))
    assert code == 2 and "--param referees=two: not a whole number" in err
    code, _, err = run(*base, "--protocol", "relay-bare", "--param", "order=backward",
                       "--out", str(tmp_path / "g"))
    assert code == 0, err
    assert read_manifest(tmp_path / "g")["parameters"]["order"] == "backward"  # type: ignore[index]
    code, _, err = run(*base, "--protocol", "nowhere.module:create_x", "--out", str(tmp_path / "h"))
    assert code == 2 and "--protocol nowhere.module:create_x: cannot load" in err


def test_budgets_escalation_and_review_take_it_as_a_built_in(plugin: Path, openai_server, tmp_path: Path) -> None:
    server = openai_server(respond)
    base = ["eval", "--protocol", "relay", "--dataset", "faireval", "--limit", "2", *model(server), "--quiet"]
    # both answer orders, a budget, and an escalation of the items the relay is unsure of (it never is: 8 vs 5)
    code, _, err = run(*base, "--calibrate", "bpc", "--max-total-tokens", "1000000", "--escalate-when",
                       "agreement<1", "--escalate-to", "openai:big", "--out", str(tmp_path / "a"))
    assert code == 0, err
    manifest = read_manifest(tmp_path / "a") or {}
    assert manifest["parameters"]["calibrate"] == "bpc"
    assert manifest["parameters"]["escalation"] == {"protocol": "relay single agent", "calibrate": "bpc"}
    # its plan: the relay's, counted on its graph, both orders, and the single agent it escalates to
    assert manifest["requests_per_item"] == 2 * (2 + 2) + 2 * 2
    assert manifest["budget"]["max_total_tokens"] == 1000000
    # a condition on a signal its spec says it never gives is refused before a request
    code, _, err = run(*base, "--review-when", "sample_spread>1", "--out", str(tmp_path / "b"))
    assert code == 2 and "relay on pairwise items gives no sample_spread signal" in err
    code, _, err = run(*base, "--review-when", "margin<10", "--out", str(tmp_path / "c"))
    assert code == 0 and "2 items await review" in _ + err


def test_escalation_and_bench_take_it_by_name(plugin: Path, openai_server, tmp_path: Path) -> None:
    server = openai_server(respond)
    # another protocol's doubtful items go to it (the relay at its defaults: 2 requests, each re-askable)
    code, _, err = run("eval", "--protocol", "ensemble", "--dataset", "faireval", "--limit", "2", *model(server),
                       "--no-calibrate", "--escalate-when", "margin<5", "--escalate-protocol", "relay",
                       "--out", str(tmp_path / "escalated"), "--quiet")
    assert code == 0, err
    manifest = read_manifest(tmp_path / "escalated") or {}
    assert manifest["parameters"]["escalation"] == {"protocol": "relay"}
    assert manifest["requests_per_item"] == 2 * 2 + (2 + 2)
    records = read_results(tmp_path / "escalated")
    assert all(r["decided_by"] == "escalation" for r in records)  # 8 vs 5: a margin of 3
    # a bench method, its runs measured beside a built-in's
    out = tmp_path / "bench"
    code, text, err = run("bench", "--dataset", "faireval", "--limit", "2", "--method",
                          f"relay=--protocol relay --param referees=3 --model judge --base-url {server.base_url}",
                          "--resamples", "0", "--no-plots", "--out", str(out), "--quiet")
    assert code == 0, err
    assert "relay" in text
    assert (read_manifest(out / "runs" / "relay" / "faireval") or {})["parameters"]["referees"] == 3
