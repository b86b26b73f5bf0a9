"""Gemini through the real langchain-google-genai client against the local fake of the Gemini API, alone and in
mixed panels beside the OpenAI-compatible fake: what each server received, usage and cost in the manifest,
retries on 429/500, one-line failures, and API keys that never reach the run directory."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from jurygraph.cli import main
from jurygraph.running.rundir import read_results
from jurygraph.testing.fake_gemini import wants_json
from jurygraph.testing.fake_server import Faults, count_tokens, prompt_of

GOOGLE_KEY = "fake-google-key-for-tests-1234"
GEMINI_KEY = "fake-gemini-key-for-tests-5678"
OPENAI_KEY = "sk-fake-openai-key-for-tests-9012"
GEMINI = "gemini-2.0-flash"
ENDPOINT = f"models/{GEMINI}:generateContent"


def unversioned(paths: list[str]) -> list[str]:
    """Request paths without the API version: google-genai 1.x-2.x sends /v1beta/, 3.x /v1/ (both served)."""
    return [re.sub(r"^/v1(?:beta|alpha)?/", "", path) for path in paths]


@pytest.fixture(autouse=True)
def _fake_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Obviously fake keys, set by the test: the clients send them, the run directory must never hold them."""
    monkeypatch.setenv("GOOGLE_API_KEY", GOOGLE_KEY)
    monkeypatch.setenv("GEMINI_API_KEY", GEMINI_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)


def words(text: str) -> int:
    """What the fakes count as a text's tokens."""
    return count_tokens(text)


def gemini_prompt_words(request: dict[str, Any]) -> int:
    """What the fake counts as a request's prompt tokens: the tokens of every text part."""
    contents = [*request.get("contents", []), request.get("systemInstruction") or {}]
    return sum(words(str(part.get("text", ""))) for content in contents for part in content.get("parts", []))


def assert_no_key_in(out: Path) -> None:
    for path in out.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for key in (GOOGLE_KEY, GEMINI_KEY, OPENAI_KEY):
                assert key.encode() not in data, f"{key} written to {path}"


def ok_requests(server: Any) -> list[dict[str, Any]]:
    return [r for r, outcome in zip(server.requests, server.outcomes, strict=True) if outcome == "ok"]


# --- ReFeR Turbo: OpenAI-compatible peers, a Gemini area chair ---

PEER_RATINGS = {"peer1": 1, "peer2": 2, "peer3": 3}
CHAIR_RATINGS = [3, 2, 3]


def peer_responder(request: dict[str, Any], i: int) -> str:
    return f"Analysis: {request['model']} read the dialogue.\nRating: {PEER_RATINGS[request['model']]}"


def chair_responder(request: dict[str, Any], i: int) -> str:
    # the area chair's 3 samples are 3 requests of one candidate each: tell them apart by arrival order
    chair_responder.calls += 1  # type: ignore[attr-defined]
    return f"Analysis: weighed the peers.\nRating: {CHAIR_RATINGS[(chair_responder.calls - 1) % 3]}"  # type: ignore[attr-defined]


def test_refer_turbo_with_openai_peers_and_a_gemini_area_chair(openai_server, gemini_server, tmp_path: Path,
                                                                capsys) -> None:
    chair_responder.calls = 0  # type: ignore[attr-defined]
    peers = openai_server(peer_responder)
    chair = gemini_server(chair_responder, faults=Faults(script=["429", "500"]))
    out = tmp_path / "run"
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({GEMINI: {"input": 1.0, "output": 2.0}}))
    started = time.monotonic()
    code = main(["eval", "--protocol", "refer", "--variant", "turbo", "--samples", "3",
                 "--peers", "openai:peer1,openai:peer2,openai:peer3", "--base-url", peers.base_url,
                 "--area-chair", f"google_genai:{GEMINI}@{chair.base_url}", "--max-retries", "2",
                 "--dataset", "topical-chat", "--aspect", "engagingness", "--limit", "2", "--concurrency", "1",
                 "--out", str(out), "--quiet", "--prices", str(prices)])
    assert code == 0, capsys.readouterr().err
    assert time.monotonic() - started < 30

    # the OpenAI-compatible server: 3 peers x 2 items, one answer each
    assert sorted(r["model"] for r in peers.requests) == ["peer1", "peer1", "peer2", "peer2", "peer3", "peer3"]
    assert all(r.get("n", 1) == 1 for r in peers.requests)
    # the Gemini server: Gemini's candidateCount is capped (1-8) and ReFeR asks 20 by default, so the n samples
    # are n requests of one candidate each: 3 x 2 items, plus the 429 and the 500 the client retried
    assert chair.outcomes == ["429", "500"] + ["ok"] * 6
    assert set(unversioned(chair.paths)) == {ENDPOINT}
    assert all(r["generationConfig"]["candidateCount"] == 1 for r in chair.requests)
    assert all(r["generationConfig"]["temperature"] == 1.0 for r in chair.requests)  # ReFeR's sampling
    assert {h["x-goog-api-key"] for h in chair.headers} == {GOOGLE_KEY}  # GOOGLE_API_KEY wins, as documented
    prompt = prompt_of(chair.requests[-1])
    assert "First Assistant’s Evaluation: 1" in prompt and "Third Assistant’s Evaluation: 3" in prompt

    records = read_results(out)
    assert len(records) == 2
    for record in records:
        assert record["status"] == "ok"
        assert record["verdict"]["score"] == pytest.approx(sum(CHAIR_RATINGS) / 3)
        assert record["usage"]["area_chair"]["requests"] == 3

    manifest = json.loads((out / "manifest.json").read_text())
    label = f"google_genai:{GEMINI}@{chair.base_url}"
    assert manifest["models"]["area_chair"] == label
    gemini_usage = manifest["usage_by_model"][label]
    assert gemini_usage["requests"] == 6
    assert gemini_usage["input_tokens"] == sum(gemini_prompt_words(r) for r in ok_requests(chair))
    assert gemini_usage["output_tokens"] == 6 * words(chair_responder({}, 0))
    assert manifest["attempts_by_model"][label] == 8  # the retries are counted, not billed
    assert manifest["attempts_by_model"][f"openai:peer1@{peers.base_url}"] == 2
    # a model at your own server is priced only by --prices: here the Gemini chair is, the peers are not
    expected = gemini_usage["input_tokens"] / 1e6 * 1.0 + gemini_usage["output_tokens"] / 1e6 * 2.0
    assert manifest["counts"]["cost_usd"] == pytest.approx(expected)
    assert_no_key_in(out)


def test_a_gemini_model_at_a_local_url_has_no_list_price(gemini_server, openai_server, tmp_path: Path) -> None:
    chair = gemini_server(lambda request, i: "Rating: 2")
    peers = openai_server(lambda request, i: "Rating: 1")
    out = tmp_path / "run"
    assert main(["eval", "--protocol", "refer", "--variant", "lite", "--peers", "openai:gpt-4o-mini",
                 "--base-url", peers.base_url, "--area-chair", f"google_genai:{GEMINI}@{chair.base_url}",
                 "--dataset", "topical-chat", "--aspect", "engagingness", "--limit", "1", "--out", str(out),
                 "--quiet"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    # gpt-4o-mini and gemini-2.0-flash have list prices, but not at 127.0.0.1
    label = f"google_genai:{GEMINI}@{chair.base_url}"
    assert manifest["usage_by_model"][label]["output_tokens"] == count_tokens("Rating: 2")
    assert manifest["counts"]["cost_usd"] is None


# --- ChatEval: an OpenAI-compatible General Public and a Gemini Critic, one by one ---

def test_chateval_with_a_gemini_referee_hears_the_other_one(openai_server, gemini_server, tmp_path: Path) -> None:
    public = openai_server(lambda request, i: "Evidence: public view.\nThe score of Assistant 1: 7\n"
                                              "The score of Assistant 2: 4")
    critic = gemini_server(lambda request, i: "Evidence: critical view.\nThe score of Assistant 1: 6\n"
                                              "The score of Assistant 2: 8")
    out = tmp_path / "run"
    code = main(["eval", "--protocol", "chateval", "--turns", "2", "--no-calibrate", "--model", "openai:public",
                 "--base-url", public.base_url, "--models", f"Critic=google_genai:{GEMINI}@{critic.base_url}",
                 "--dataset", "faireval", "--limit", "1", "--out", str(out), "--quiet"])
    assert code == 0
    assert len(public.requests) == 2 and len(critic.requests) == 2  # two turns each
    # one by one: each referee's prompt renders the chat so far, so the Critic hears the General Public's turn
    # before its own, and the General Public hears the Critic's first turn in its second
    assert [c["role"] for c in critic.requests[0]["contents"]] == ["user"]
    assert "public view" in prompt_of(critic.requests[0])
    assert "critical view" not in prompt_of(public.requests[0])
    assert "critical view" in prompt_of(public.requests[1])
    assert all(r["generationConfig"]["temperature"] == public.requests[0]["temperature"] for r in critic.requests)
    (record,) = read_results(out)
    assert record["usage"]["Critic"]["model"] == f"google_genai:{GEMINI}@{critic.base_url}"
    assert record["verdict"]["label"] == "1"  # (7 + 6) / 2 > (4 + 8) / 2
    assert record["usage"]["Critic"]["input_tokens"] == sum(gemini_prompt_words(r) for r in critic.requests)
    assert_no_key_in(out)


def test_server_urls_with_a_query_keep_it_for_both_providers(openai_server, gemini_server, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """``?key=`` on a Gemini endpoint and ``?api_key=`` on an OpenAI-compatible proxy reach their servers on the
    right path with the query kept; neither credential is stored or printed."""
    reply = "Evidence: x.\nThe score of Assistant 1: 7\nThe score of Assistant 2: 4"
    public, critic = openai_server(lambda request, i: reply), gemini_server(lambda request, i: reply)
    out = tmp_path / "run"
    code = main(["eval", "--protocol", "chateval", "--turns", "1", "--no-calibrate", "--model", "openai:public",
                 "--base-url", f"{public.base_url}?api_key=PROXY-SECRET",
                 "--models", f"Critic=google_genai:{GEMINI}@{critic.base_url}/?key=GEMINI-SECRET",
                 "--dataset", "faireval", "--limit", "1", "--out", str(out)])
    assert code == 0
    assert public.paths == ["/v1/chat/completions?api_key=PROXY-SECRET"]
    assert unversioned(critic.paths) == [f"{ENDPOINT}?key=GEMINI-SECRET"]
    (record,) = read_results(out)
    assert record["usage"]["Critic"]["model"] == f"google_genai:{GEMINI}@{critic.base_url}/?key=***"
    printed = "".join(capsys.readouterr())
    for path in (p for p in out.rglob("*") if p.is_file()):
        assert b"-SECRET" not in path.read_bytes(), path.name
    assert "-SECRET" not in printed
    assert_no_key_in(out)
    # never stored, so a resume asks for both again, and takes them when given
    assert main(["eval", "--resume", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "the run's --base-url and --models had credentials" in err and "-SECRET" not in err
    assert main(["eval", "--resume", str(out), "--quiet", "--base-url", f"{public.base_url}?api_key=PROXY-SECRET",
                 "--models", f"Critic=google_genai:{GEMINI}@{critic.base_url}/?key=GEMINI-SECRET"]) == 0


# --- DEBATE: an OpenAI-compatible Scorer, a Gemini Critic ---

def test_debate_with_a_gemini_critic(openai_server, gemini_server, tmp_path: Path) -> None:
    def scorer(request: dict[str, Any], i: int) -> str:
        turns = sum(m["role"] == "assistant" for m in request["messages"])
        return f"Rationale {turns}.\n- Coherence: {2 if turns == 0 else 4}"

    def critic(request: dict[str, Any], i: int) -> str:
        reviews = sum(c["role"] == "model" for c in request["contents"])
        return "The score of 2 ignores the clear order of events." if reviews == 0 else "NO ISSUE"

    scoring, reviewing = openai_server(scorer), gemini_server(critic, faults=Faults(script=["500"]))
    out = tmp_path / "run"
    code = main(["eval", "--protocol", "debate", "--model", "openai:scorer", "--base-url", scoring.base_url,
                 "--models", f"critic=google_genai:{GEMINI}@{reviewing.base_url}", "--dataset", "summeval",
                 "--aspect", "coherence", "--limit", "1", "--out", str(out), "--quiet"])
    assert code == 0
    assert len(scoring.requests) == 2
    assert reviewing.outcomes == ["500", "ok", "ok"]
    # the second review carries the Critic's first review as its own ("model") turn and the Scorer's revision
    second = reviewing.requests[-1]
    assert [c["role"] for c in second["contents"]] == ["user", "model", "user"]
    assert "Rationale 1." in prompt_of(second)
    assert "The score of 2 ignores" in prompt_of(scoring.requests[1])
    (record,) = read_results(out)
    assert record["verdict"]["score"] == 4
    assert record["usage"]["Critic"]["requests"] == 2
    assert_no_key_in(out)


# --- --base-url with a google_genai: spec, structured output ---

def test_base_url_serves_a_google_genai_model_with_structured_output(gemini_server, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_API_KEY")  # GEMINI_API_KEY alone is enough

    def responder(request: dict[str, Any], i: int) -> str:
        assert wants_json(request)
        return json.dumps({"evidence": "Answer 2 is more precise.", "score_assistant_1": 3, "score_assistant_2": 8})

    server = gemini_server(responder)
    out = tmp_path / "run"
    code = main(["eval", "--protocol", "single", "--no-calibrate", "--model", f"google_genai:{GEMINI}",
                 "--base-url", server.base_url, "--structured-output", "--dataset", "faireval", "--limit", "1",
                 "--out", str(out), "--quiet"])
    assert code == 0
    (request,) = server.requests
    assert server.headers[0]["x-goog-api-key"] == GEMINI_KEY
    config = request["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    schema = config["responseJsonSchema"]["properties"]
    assert schema["score_assistant_1"]["maximum"] == 10 and "evidence" in schema  # FairEval's 1-10 scale
    (record,) = read_results(out)
    assert record["verdict"]["label"] == "2"
    assert json.loads((out / "manifest.json").read_text())["models"]["default"] == \
        f"google_genai:{GEMINI}@{server.base_url}"
    assert_no_key_in(out)


def test_one_base_url_for_both_providers_is_refused(capsys) -> None:
    code = main(["eval", "--protocol", "chateval", "--model", "openai:a", "--models", f"Critic=google_genai:{GEMINI}",
                 "--base-url", "http://127.0.0.1:9/v1", "--dataset", "faireval", "--limit", "1"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "would serve both google_genai and openai models" in err


# --- failures no retry fixes: one line, exit 1, within seconds ---

@pytest.mark.parametrize(("fault", "says"), [("401", "401 Unauthorized"), ("400-key", "401 Unauthorized"),
                                             ("403", "403 Forbidden"), ("404", "404 Not Found")])
def test_a_refusing_gemini_server_stops_the_run_in_one_line(gemini_server, tmp_path: Path, capsys, fault: str,
                                                              says: str) -> None:
    server = gemini_server(faults=Faults(always=fault))
    started = time.monotonic()
    code = main(["eval", "--protocol", "single", "--no-calibrate", "--model",
                 f"google_genai:{GEMINI}@{server.base_url}", "--dataset", "faireval", "--limit", "3",
                 "--concurrency", "1", "--out", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 1
    assert time.monotonic() - started < 10
    assert len(server.requests) == 1  # never retried, and no other item started
    assert "Traceback" not in err and err.count("\n") == 1
    assert f"google_genai at {server.base_url}: {says}" in err
    assert GOOGLE_KEY not in err


def test_a_gemini_server_that_is_down_is_one_line_before_any_item(tmp_path: Path, capsys) -> None:
    started = time.monotonic()
    code = main(["eval", "--protocol", "single", "--no-calibrate", "--model", f"google_genai:{GEMINI}",
                 "--base-url", "http://127.0.0.1:9", "--dataset", "faireval", "--limit", "1",
                 "--out", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and time.monotonic() - started < 10
    assert err.count("\n") == 1 and "google_genai at http://127.0.0.1:9: cannot connect" in err


def test_a_missing_gemini_key_names_both_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys) -> None:
    monkeypatch.delenv("GOOGLE_API_KEY")
    monkeypatch.delenv("GEMINI_API_KEY")
    code = main(["eval", "--protocol", "single", "--model", f"google_genai:{GEMINI}", "--dataset", "faireval",
                 "--limit", "1", "--out", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "GOOGLE_API_KEY or GEMINI_API_KEY is not set" in err


def test_a_garbled_gemini_body_is_retried_then_named_in_one_line(gemini_server, tmp_path: Path, capsys) -> None:
    server = gemini_server(lambda request, i: "The score of Assistant 1: 6\nThe score of Assistant 2: 4",
                           faults=Faults(script=["garbage"]))
    out = tmp_path / "run"
    assert main(["eval", "--protocol", "single", "--no-calibrate", "--model",
                 f"google_genai:{GEMINI}@{server.base_url}", "--dataset", "faireval", "--limit", "1",
                 "--out", str(out), "--quiet"]) == 0
    assert server.outcomes == ["garbage", "ok"]  # a 200 that is not JSON is transient: sent again
    assert read_results(out)[0]["verdict"]["label"] == "1"

    broken = gemini_server(faults=Faults(always="garbage"))
    code = main(["eval", "--protocol", "single", "--no-calibrate", "--model",
                 f"google_genai:{GEMINI}@{broken.base_url}", "--dataset", "faireval", "--limit", "1",
                 "--out", str(tmp_path / "broken"), "--quiet"])
    assert code == 1
    (record,) = read_results(tmp_path / "broken")
    assert record["status"] == "failed"
    assert record["error"].startswith(f"UnreadableResponse: google_genai at {broken.base_url}: the response is not")


def test_the_live_view_streams_from_gemini(gemini_server, tmp_path: Path) -> None:
    """The runner's live view (``on_token``, as in ``jurygraph demo``) makes the client stream:
    ``:streamGenerateContent?alt=sse``, whose chunks are shown as they come and whose usage is counted once."""
    from jurygraph import JuryContext, create_single_agent
    from jurygraph.running.datasets import load_dataset
    from jurygraph.running.runner import run

    reply = "Evidence: both fine.\nThe score of Assistant 1: 6\nThe score of Assistant 2: 4"
    server = gemini_server(lambda request, i: reply)
    tokens: list[str] = []
    summary = run(create_single_agent(), load_dataset("faireval").items[:1], out_dir=tmp_path / "run",
                  context=JuryContext(default=f"google_genai:{GEMINI}@{server.base_url}"), progress=False,
                  on_token=lambda item, node, text: tokens.append(text))
    assert summary.done == 1
    assert unversioned(server.paths) == [f"models/{GEMINI}:streamGenerateContent?alt=sse"]
    assert len(tokens) == 2 and "".join(tokens) == reply
    (record,) = read_results(tmp_path / "run")
    assert record["verdict"]["label"] == "1"
    assert record["usage"]["Single Agent"]["output_tokens"] == words(reply)
    assert record["usage"]["Single Agent"]["input_tokens"] == gemini_prompt_words(server.requests[0])


def test_a_notebook_invoke_reaches_gemini_through_the_sync_client(gemini_server) -> None:
    """``graph.invoke`` (no event loop) uses the client's sync HTTP path; its attempts are counted as well."""
    from jurygraph import JuryContext, create_debate, verdict_of
    from jurygraph.llm.models import http_attempts
    from jurygraph.running.datasets import load_dataset

    def responder(request: dict[str, Any], i: int) -> str:
        system = json.dumps(request.get("systemInstruction") or {})
        return "Rationale.\n- Coherence: 3" if "Logically think to score" in system else "NO ISSUE"

    server = gemini_server(responder, faults=Faults(script=["429"]))
    label = f"google_genai:{GEMINI}@{server.base_url}"
    before = http_attempts[label]
    item = load_dataset("summeval", aspect="coherence").items[0]
    out = create_debate().compile().invoke({"item": item}, context=JuryContext(default=label))
    assert verdict_of(out).score == 3
    assert server.outcomes == ["429", "ok", "ok"]  # Scorer (retried once), Critic
    assert http_attempts[label] - before == 3
    assert "Logically think to score" in json.dumps(server.requests[0]["systemInstruction"])
