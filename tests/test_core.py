"""Items, prompts, model specs: validation with clear errors, single-pass slots, lazy keys."""

from __future__ import annotations

from importlib import resources
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ValidationError

from jurygraph import (
    EvalItem,
    JuryContext,
    MissingAPIKey,
    ModelSpec,
    Scale,
    create_chateval,
    create_single_agent,
    verdict_of,
)
from jurygraph.prompts import load_prompt, render, slots_of


def test_item_errors_name_the_item_and_field() -> None:
    with pytest.raises(ValidationError, match=r"item 'q7': a pairwise item needs 'response_2'"):
        EvalItem(id="q7", task="pairwise", question="Q?", response_1="a")
    with pytest.raises(ValidationError, match=r"item 's1': a score item needs 'scale'"):
        EvalItem(id="s1", task="score", response="text")
    with pytest.raises(ValidationError, match="human label 'gpt35'"):
        EvalItem(id="q", task="pairwise", question="Q", response_1="a", response_2="b", human={"label": "gpt35"})
    with pytest.raises(ValidationError, match="task"):
        EvalItem(id="q", task="rank", question="Q")
    with pytest.raises(ValidationError, match="scale low"):
        EvalItem(id="s", task="score", response="r", scale={"low": 5, "high": 1})


def test_swapped_item_swaps_answers_and_label() -> None:
    item = EvalItem(id=3, task="pairwise", question="Q", response_1="a", response_2="b", human={"label": "1"})
    swapped = item.swapped()
    assert (item.id, swapped.response_1, swapped.response_2, swapped.human) == ("3", "b", "a", {"label": "2"})


def test_image_bytes_become_a_data_url(tmp_path) -> None:
    item = EvalItem(id="i", task="score", response="a cat", scale={"low": 0, "high": 5}, image=b"\x89PNG")
    assert item.image_data_url() == "data:image/png;base64,iVBORw=="
    missing = EvalItem(id="j", task="score", response="x", scale={"low": 0, "high": 5}, image=str(tmp_path / "no.png"))
    with pytest.raises(FileNotFoundError, match="item 'j'"):
        missing.image_data_url()


def test_render_substitutes_each_slot_once() -> None:
    tricky = "look: {chat_history} ${agent_name} {{Peer_response1}} $role_description $$5"
    out = render("[${source_text}] by ${agent_name}", source_text=tricky, agent_name="Critic")
    assert out == f"[{tricky}] by Critic"
    with pytest.raises(KeyError, match="agent_name"):
        render("${source_text} ${agent_name}", source_text="x")


def test_every_shipped_template_renders() -> None:
    root = resources.files("jurygraph.prompts")
    names = [f"{d.name}/{f.name[:-4]}" for d in root.iterdir() if d.is_dir()
             for f in d.iterdir() if f.name.endswith(".txt")]
    assert "chateval/faireval" in names
    for name in names:
        template = load_prompt(name)
        out = render(template, **{slot: f"<{slot}>" for slot in slots_of(template)})
        assert "${" not in out, name


def test_faireval_template_is_the_papers() -> None:
    template = load_prompt("chateval/faireval")
    assert slots_of(template) == {"source_text", "compared_text_one", "compared_text_two", "chat_history",
                                  "role_description", "agent_name", "final_prompt"}
    assert "Each assistant receives an overall score on a scale of 1 to 10" in template
    assert "Now it’s your time to talk, please make your talk short and clear, ${agent_name} !" in template


@pytest.mark.parametrize(("text", "provider", "model", "base_url"), [
    ("openai:gpt-4o-mini", "openai", "gpt-4o-mini", None),
    ("google_genai:gemini-2.0-flash", "google_genai", "gemini-2.0-flash", None),
    ("openai:llama3@http://127.0.0.1:8000/v1", "openai", "llama3", "http://127.0.0.1:8000/v1"),
    ("local", "local", "smollm2-135m-instruct", None),
])
def test_model_specs(text: str, provider: str, model: str, base_url: str | None) -> None:
    spec = ModelSpec.parse(text)
    assert (spec.provider, spec.model, spec.base_url) == (provider, model, base_url)


def test_bare_model_name_needs_a_base_url() -> None:
    assert ModelSpec.parse("qwen2", base_url="http://127.0.0.1:9/v1").base_url == "http://127.0.0.1:9/v1"
    with pytest.raises(ValueError, match="names no provider"):
        ModelSpec.parse("qwen2")
    with pytest.raises(ValueError, match="unknown provider 'anthropic'"):
        ModelSpec.parse("anthropic:claude")


def test_no_key_needed_to_build_and_a_clear_error_at_the_first_call() -> None:
    graph = create_chateval().compile()  # building and compiling need no key
    item = EvalItem(id="q", task="pairwise", question="Q", response_1="a", response_2="b")
    with pytest.raises(MissingAPIKey, match="OPENAI_API_KEY is not set"):
        graph.invoke({"item": item}, context=JuryContext(default="openai:gpt-4o-mini"))
    with pytest.raises(MissingAPIKey, match="GOOGLE_API_KEY or GEMINI_API_KEY is not set"):
        graph.invoke({"item": item}, context=JuryContext(default="google_genai:gemini-2.0-flash"))


def test_a_local_server_needs_no_key() -> None:
    model = ModelSpec.parse("openai:m@http://127.0.0.1:1/v1").build()
    assert model.openai_api_base == "http://127.0.0.1:1/v1"  # type: ignore[attr-defined]


class BareJudge(BaseChatModel):
    """A user's own chat model with no generation-parameter fields at all."""

    @property
    def _llm_type(self) -> str:
        return "bare"

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage("Fine.\nScore: 7"))])


def test_paper_defaults_a_model_lacks_are_skipped_but_a_users_gen_is_not() -> None:
    item = EvalItem(id="s1", task="score", context="c", response="r", scale=Scale(low=1, high=10))
    app = create_single_agent().compile()
    # ChatEval's referee sends temperature 0 and max_tokens 512: a model without those fields still judges
    state = app.invoke({"item": item.model_dump(mode="json")}, context=JuryContext(default=BareJudge()))
    assert verdict_of(state).score == 7
    with pytest.raises(TypeError, match=r"has no parameter\(s\) top_p"):
        app.invoke({"item": item.model_dump(mode="json")},
                   context=JuryContext(default=BareJudge(), gen={"*": {"top_p": 0.5}}))
