"""``--gen`` (issue 28, finding 7): an override names an agent or role the protocol's graph has (read from the built
graph, escalation included), and a value in the documented range of every model it reaches; anything else is one
line naming the flag and the value, before a request is sent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jurygraph.cli import main
from jurygraph.llm.models import GenRange, gen_range, parse_gen
from jurygraph.testing import pairwise_reply


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith("jurygraph: "), err
    return err


def chateval(server: Any, out: Path, *gen: str) -> list[str]:
    return ["eval", "--protocol", "chateval", "--no-calibrate", "--dataset", "faireval", "--limit", "1",
            "--model", "judge", "--base-url", server.base_url, "--out", str(out), "--quiet",
            *(arg for value in gen for arg in ("--gen", value))]


@pytest.mark.parametrize(("gen", "expected"), [
    ("Critc.temperature=0", ["--gen 'Critc.temperature=0'", "no agent or role 'Critc'", "did you mean 'Critic'?",
                             "its agents: General Public, Critic", "roles: referee"]),
    ("critic.max_tokens=64", ["no agent or role 'critic'", "did you mean 'Critic'?"]),  # names are case-sensitive
    ("Judge.top_p=0.5", ["no agent or role 'Judge'", "its agents: General Public, Critic"]),
    ("*.temperature=5", ["--gen '*.temperature=5'", "temperature must be between 0 and 2", "openai:judge@"]),
    ("Critic.temperature=2.5", ["--gen 'Critic.temperature=2.5'", "between 0 and 2"]),
    ("*.max_tokens=-5", ["--gen '*.max_tokens=-5'", "max_tokens must be at least 1 (got -5)"]),
    ("*.max_tokens=0", ["max_tokens must be at least 1 (got 0)"]),
    ("referee.top_p=0", ["--gen 'referee.top_p=0'", "top_p must be in (0, 1] (got 0)"]),
    ("all.top_p=1.5", ["top_p must be in (0, 1] (got 1.5)"]),
    ("*.temperature=-0.1", ["temperature must be at least 0 (got -0.1)"]),
    ("*.n=0", ["n must be at least 1 (got 0)"]),
    # n for agents that make single-reply calls: said before the run, not as every item's failure
    ("referee.n=3", ["--gen n=3 for agent 'General Public' (role 'referee')", "single-reply"]),
])
def test_a_gen_the_protocol_cannot_take_is_refused_before_any_request(
        openai_server, tmp_path: Path, capsys: pytest.CaptureFixture[str], gen: str, expected: list[str]) -> None:
    server = openai_server(lambda request, i: pairwise_reply(7, 3))
    assert main(chateval(server, tmp_path / "run", gen)) == 2
    err = one_line(capsys)
    for text in expected:
        assert text in err, err
    assert server.requests == [] and not (tmp_path / "run").exists()


@pytest.mark.parametrize("gen", [
    ["General Public.temperature=0.7", "Critic.max_tokens=64"],  # agent names, spaces included
    ["referee.top_p=1", "*.temperature=2", "all.max_tokens=1"],  # a role, every agent, the ends of the ranges
    ["Critic.temperature=none"],
])
def test_the_agents_and_roles_of_the_graph_are_taken(openai_server, tmp_path: Path, gen: list[str]) -> None:
    server = openai_server(lambda request, i: pairwise_reply(7, 3))
    assert main(chateval(server, tmp_path / "run", *gen)) == 0
    assert len(server.requests) == 4  # two referees, two turns
    if gen[0].startswith("General Public"):
        public, critic = server.requests[:2]
        assert public["temperature"] == 0.7 and critic["max_completion_tokens"] == 64


def test_agents_that_speak_only_on_some_paths_are_known(openai_server, tmp_path: Path) -> None:
    """DEBATE's tie-breaker speaks only when the Critic never agrees, an escalation protocol's agents only for
    doubtful items: both are agents of the graph as built."""
    server = openai_server(lambda request, i: "NO ISSUE" if "Critic" in str(request["messages"][0]) else
                           "Rationale.\n- Coherence: 4")
    common = ["eval", "--dataset", "summeval", "--aspect", "coherence", "--limit", "1", "--model", "judge",
              "--base-url", server.base_url, "--quiet", "--dry-run"]
    assert main([*common, "--protocol", "debate", "--tie-breaker", "--gen", "Tie-breaker.temperature=0.3"]) == 0
    assert main([*common, "--protocol", "debate", "--gen", "Tie-breaker.temperature=0.3"]) == 2  # not without it
    assert main([*common, "--protocol", "single", "--escalate-when", "missing", "--escalate-protocol",
                 "debate", "--gen", "Scorer.max_tokens=100"]) == 0
    assert main([*common, "--protocol", "refer", "--gen", "peer_2.temperature=0.1",
                 "--gen", "area_chair.n=5"]) == 0


def test_a_providers_documented_range_applies_to_its_models_only(tmp_path: Path) -> None:
    """Gemini's and OpenAI's APIs take a temperature from 0 to 2; llama.cpp (the embedded model) any from 0."""
    assert gen_range("temperature", "openai") == gen_range("temperature", "google_genai") == GenRange(0, 2)
    assert 3.0 in gen_range("temperature", "local") and -1.0 not in gen_range("temperature", "local")
    dry = ["eval", "--protocol", "single", "--no-calibrate", "--dataset", "faireval", "--limit", "1", "--dry-run",
           "--gen", "*.temperature=3"]
    assert main([*dry, "--model", "local"]) == 0
    assert main([*dry, "--model", "google_genai:gemini-2.0-flash"]) == 2


def test_parse_gen_checks_what_no_model_takes() -> None:
    assert parse_gen(["*.top_p=1", "a.max_tokens=1", "b.n=1", "c.temperature=0"]) == {
        "*": {"top_p": 1.0}, "a": {"max_tokens": 1}, "b": {"n": 1}, "c": {"temperature": 0.0}}
    for bad in ("*.max_tokens=-5", "*.top_p=0", "*.n=-1", "*.temperature=-1"):
        with pytest.raises(ValueError, match=r"^--gen '.*': \w+ must be"):
            parse_gen([bad])


def test_a_resumed_run_keeps_its_own_gen_with_a_warning(openai_server, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A run started before these checks may hold a --gen they refuse (it was ignored then): its resume goes on."""
    import json

    server = openai_server(lambda request, i: pairwise_reply(7, 3))
    out = tmp_path / "run"
    assert main(chateval(server, out)) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["cli"]["gen"] = ["Critc.temperature=0"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    (out / "results.jsonl").write_text("")  # the item is judged again (from the cache)
    capsys.readouterr()
    assert main(["eval", "--resume", str(out), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "warning: --gen 'Critc.temperature=0': chateval has no agent or role 'Critc'" in err
    assert "kept on --resume" in err


def test_models_must_name_an_agent_or_role_of_the_protocol(openai_server, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A misspelt ``--models`` name would leave that agent on ``--model`` without a word: refused before any
    request, with the close match; a name or a role the graph calls is accepted."""
    server = openai_server(lambda request, i: pairwise_reply(7, 3))
    base = ["eval", "--dataset", "faireval", "--limit", "1", "--model", "judge", "--base-url", server.base_url,
            "--quiet"]
    capsys.readouterr()
    assert main([*base, "--models", f"Critc=openai:strong@{server.base_url}", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "--models Critc=...: chateval has no agent or role 'Critc' (did you mean 'Critic'?)" in err
    assert not server.requests and len(err.splitlines()) == 1
    assert main([*base, "--models", f"Critic=openai:strong@{server.base_url}", "--out", str(tmp_path / "b")]) == 0
    assert {request["model"] for request in server.requests} == {"judge", "strong"}
