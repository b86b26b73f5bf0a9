"""jurygraph.evaluators finds its protocol as `jurygraph eval --protocol` does (issue 29's registry: a built-in name,
an entry point, ``module:factory``, a spec, a factory), takes the spec's options by the names ``--param`` takes,
typed and checked by the spec, and calibrates pairwise items as `eval` decides (graphs.calibration)."""

from __future__ import annotations

import importlib
import json
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jurygraph.evaluators import create_panel_evaluator
from jurygraph.running.datasets import load_dataset
from jurygraph.running.rundir import read_manifest, read_results
from jurygraph.testing import FakeJudge, pairwise_reply
from jurygraph.testing.fake_server import FakeOpenAIServer, prompt_of
from tests.test_evaluators import as_evaluation, eval_verdicts, item_texts
from tests.test_fidelity_refer import responder as refer_responder
from tests.test_plugin_protocol import PACKAGE, plugin  # noqa: F401 (plugin: the fixture)

ASSISTANT_1 = FakeJudge(respond=lambda prompt, messages: pairwise_reply(8, 5, "Assistant 1 is more complete."))


def hashed_scores(request: dict[str, Any], choice: int) -> str:
    """Two scores from a hash of the model, the prompt and the sample: the same for the same request whoever sends
    it, different per answer order and per item (so the orders disagree on some items)."""
    digest = zlib.crc32(f"{request.get('model')}:{prompt_of(request)}:{choice}".encode())
    first, second = 1 + digest % 10, 1 + digest // 10 % 10
    vote = (1, 0) if first > second else (0, 1)  # a D3 juror's
    return f"{pairwise_reply(first, second)}\nVote: {vote}"


def pairwise_call(panel: Any) -> list[dict[str, Any]]:
    return panel(inputs="Which answer is better?", outputs=["a full answer", "half an answer"],
                 reference_outputs={"label": "1"})


@pytest.mark.usefixtures("plugin")
def test_every_way_eval_names_a_protocol_gives_the_same_panel() -> None:
    module = importlib.import_module(f"{PACKAGE}.protocols")
    ways: list[tuple[Any, str]] = [
        ("relay", "relay"),  # an entry point of the jurygraph.protocols group: a spec
        ("relay-bare", "relay-bare"),  # an entry point: a bare factory, its spec derived from its signature
        (f"{PACKAGE}.protocols:create_relay", f"{PACKAGE}.protocols:create_relay"),  # MODULE:FACTORY
        (module.SPEC, "relay"),  # a spec
        (module.create_relay, f"{PACKAGE}.protocols:create_relay"),  # a factory
    ]
    for protocol, name in ways:
        panel = create_panel_evaluator(protocol, task="pairwise", default=ASSISTANT_1, referees=3, order="backward")
        assert panel.protocol.name == name
        assert panel.protocol.params["referees"] == 3 and panel.protocol.params["order"] == "backward"
        verdict, *members = pairwise_call(panel)
        assert (verdict["score"], verdict["value"]) == (1.0, "1")
        # three referees, the last persona first (order="backward"): each a member of its own
        assert len(members) == 3 and all(m["value"] == "1" for m in members)
        assert verdict["key"] == name.rpartition(":")[2]
        panel.close()
    # a built-in by name
    assert create_panel_evaluator("debate", task="score", scale=(1, 5), default=ASSISTANT_1).protocol.spec.name == \
        "debate"


@pytest.mark.usefixtures("plugin")
def test_options_are_typed_and_checked_as_the_spec_says() -> None:
    def relay(**options: Any) -> Any:
        return create_panel_evaluator("relay", task="pairwise", default=ASSISTANT_1, **options)

    assert relay(referees="3", turns="2").protocol.params | {"protocol": "relay"} == \
        {"protocol": "relay", "referees": 3, "order": "forward", "turns": 2}  # a text is read as --param reads it
    with pytest.raises(ValueError, match=r"protocol relay: referees must be at least 1 \(got 0\)"):
        relay(referees=0)
    with pytest.raises(ValueError, match="protocol relay: referees=True: not a whole number"):
        relay(referees=True)
    with pytest.raises(ValueError, match="protocol relay: referees=three: not a whole number"):
        relay(referees="three")
    with pytest.raises(ValueError, match="protocol relay: order must be one of forward, backward"):
        relay(order="sideways")
    with pytest.raises(ValueError, match=r"protocol relay: turns=None: give a whole number \(default 1\)"):
        relay(turns=None)
    with pytest.raises(ValueError, match=r"protocol relay: agents is not one of its options \(referees, order, "
                                         r"turns, calibrate, mec_k, mec_temperature\)"):
        relay(agents=3)
    with pytest.raises(ValueError, match="protocol refer judges score, choice items, not pairwise items"):
        create_panel_evaluator("refer", task="pairwise", default=ASSISTANT_1)
    with pytest.raises(ValueError, match="give the function that builds it: a factory"):
        create_panel_evaluator(create_panel_evaluator("relay", task="pairwise").protocol.graph, task="pairwise")


def test_the_models_the_options_name_judge(openai_server: Callable[..., FakeOpenAIServer]) -> None:
    """ReFeR's --peers / --area-chair as options: the models they name are the agents' (no default needed)."""
    server = openai_server(refer_responder)
    url = server.base_url
    panel = create_panel_evaluator("refer", task="score", aspect="engagingness", dataset="topical-chat",
                                   peers=f"openai:peer1@{url},openai:peer2@{url}", area_chair=f"openai:chair@{url}",
                                   variant="lite", normalize=False)
    verdict, *members = panel(**as_evaluation(load_dataset("topical-chat", aspect="engagingness").items[0]))
    assert sorted(r["model"] for r in server.requests) == ["chair", "peer1", "peer2"]
    assert panel.protocol.params["peers"] == 2 and panel.protocol.models["area_chair"] == f"openai:chair@{url}"
    assert verdict["score"] == 3  # the area chair's one sample (Lite): RATINGS[0]
    assert [m["key"] for m in members] == ["refer/peer_1", "refer/peer_2", "refer/area_chair"]


@pytest.mark.parametrize(("protocol", "flags", "options", "calibration"), [
    ("chateval", [], {}, ("bpc", None)),  # both orders by default (ChatEval's position calibration)
    ("chateval", ["--no-calibrate"], {"no_calibrate": True}, (None, None)),
    ("single", [], {}, ("bpc", "chateval")),  # both orders of ChatEval's single agent, not FairEval's evaluator
    ("single", ["--calibrate", "mec", "--mec-k", "2"], {"calibrate": "mec", "mec_k": 2}, ("mec", "faireval")),
    ("ensemble", ["--calibrate", "bpc+mec", "--mec-k", "2"], {"calibrate": "bpc+mec", "mec_k": 2}, ("bpc+mec", None)),
    ("d3", ["--d3-mode", "more", "--advocates", "1", "--jurors", "3"], {"d3_mode": "more", "advocates": 1,
                                                                        "jurors": 3}, (None, None)),  # one order
])
def test_pairwise_items_are_calibrated_as_eval_decides(openai_server: Callable[..., FakeOpenAIServer],
                                                       tmp_path: Path, protocol: str, flags: list[str],
                                                       options: dict[str, Any],
                                                       calibration: tuple[str | None, str | None]) -> None:
    server = openai_server(hashed_scores)
    cli = eval_verdicts(["--protocol", protocol, *flags, "--dataset", "faireval", "--limit", "3", "--model", "judge",
                         "--base-url", server.base_url], tmp_path / "cli")
    panel = create_panel_evaluator(protocol, task="pairwise", default=f"openai:judge@{server.base_url}",
                                   run_dir=tmp_path / "evaluator", **options)
    items = load_dataset("faireval").items[:3]
    with panel:
        for item in items:
            verdict, *_ = panel(**as_evaluation(item))
            assert verdict["value"] == cli[item_texts(item)]["label"]
    params = read_manifest(tmp_path / "evaluator")["parameters"]
    assert params == read_manifest(tmp_path / "cli")["parameters"]
    assert (params.get("calibrate"), params.get("calibration_baseline")) == calibration
    assert [r["verdict"] for r in read_results(tmp_path / "evaluator")] == \
        [cli[item_texts(item)] for item in items]
    assert len({json.dumps(v, sort_keys=True) for v in cli.values()}) > 1  # the items differ: a real comparison
    assert not any(v.get("missing") for v in cli.values())
