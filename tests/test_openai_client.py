"""The real langchain-openai client against the local OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json

from jurygraph import EvalItem, JuryContext, ModelSpec, create_chateval, judgments_of, verdict_of
from jurygraph.testing import pairwise_reply
from jurygraph.testing.fake_server import prompt_of

FINAL = "Output with the following format strictly"
TRICKY = "Explain {chat_history} and ${agent_name} and {{Peer_response1}} and $role_description, please."


def responder(request: dict, index: int) -> str:
    prompt = prompt_of(request)
    if request.get("response_format"):
        return json.dumps({"evidence": "structured", "score_assistant_1": 4, "score_assistant_2": 9})
    if FINAL in prompt:
        return pairwise_reply(3, 8, "B is more detailed")
    return "I prefer the second answer."


def test_full_chateval_run_over_http(openai_server) -> None:
    server = openai_server(responder)
    item = EvalItem(id="q", task="pairwise", question="What is LangGraph?", response_1="A lib.",
                    response_2="A library for stateful agent graphs.")
    context = JuryContext(default=f"openai:judge@{server.base_url}")
    out = create_chateval().compile().invoke({"item": item}, context=context)
    assert len(server.requests) == 4
    assert all(r["model"] == "judge" and r["temperature"] == 0.0 for r in server.requests)
    assert [FINAL in prompt_of(r) for r in server.requests] == [False, False, True, True]
    assert verdict_of(out).label == "2"  # type: ignore[union-attr]
    usage = out["usage"]["Critic"]
    assert usage["requests"] == 2 and usage["input_tokens"] > 0 and usage["model"].startswith("openai:judge@")


def test_item_text_with_template_syntax_reaches_the_server_verbatim(openai_server) -> None:
    server = openai_server(responder)
    item = EvalItem(id="t", task="pairwise", question=TRICKY, response_1="${compared_text_two}",
                    response_2="{compared_text_one}")
    create_chateval().compile().invoke({"item": item}, context=JuryContext(default=f"openai:judge@{server.base_url}"))
    for request in server.requests:
        prompt = prompt_of(request)
        assert f"[Question]\n{TRICKY}\n" in prompt
        assert "[The Start of Assistant 1’s Answer]\n${compared_text_two}\n" in prompt
        assert "[The Start of Assistant 2’s Answer]\n{compared_text_one}\n" in prompt


def test_structured_output_only_when_the_run_asks_for_it(openai_server) -> None:
    server = openai_server(responder)
    item = EvalItem(id="s", task="pairwise", question="Q", response_1="a", response_2="b")
    spec = f"openai:judge@{server.base_url}"
    create_chateval().compile().invoke({"item": item}, context=JuryContext(default=spec))
    assert server.requests and not any(r.get("response_format") for r in server.requests)  # the paper's free text
    server.requests.clear()
    out = create_chateval().compile().invoke({"item": item}, context=JuryContext(default=spec, structured_output=True))
    final_requests = [r for r in server.requests if r.get("response_format")]
    assert len(final_requests) == 2
    assert final_requests[0]["response_format"]["json_schema"]["name"] == "PairwiseAnswer"
    critic = judgments_of(out)["Critic"]
    assert (critic.score_1, critic.score_2, critic.evidence) == (4.0, 9.0, "structured")
    # what the others hear is the model's own text field, not a rewrite in the answer form
    assert out["transcript"][-1].text == "structured"
    # ModelSpec.structured=True asks for it whatever the run says
    server.requests.clear()
    forced = ModelSpec.parse(spec, structured=True)
    create_chateval().compile().invoke({"item": item}, context=JuryContext(default=forced))
    assert len([r for r in server.requests if r.get("response_format")]) == 2
