"""Token counts for estimates (jurygraph.llm.tokens): tiktoken where its encoding can be had, an approximation
that says so where not; the fake servers' own count is another method (fake_server.count_tokens)."""

from __future__ import annotations

from pathlib import Path

import pytest
import tiktoken
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from jurygraph.llm import tokens
from jurygraph.llm.tokens import APPROX_BYTES_PER_TOKEN, TokenCounter, counter_for, encoding_name
from jurygraph.testing.fake_server import count_tokens, prompt_tokens


@pytest.fixture(autouse=True)
def _empty_tiktoken_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken"))
    tokens._encoding_counter.cache_clear()
    yield
    tokens._encoding_counter.cache_clear()


def test_openai_models_have_their_encoding_and_others_none() -> None:
    assert encoding_name("openai:gpt-4o-mini") == "o200k_base"
    assert encoding_name("openai:gpt-4o-mini-2024-07-18@http://127.0.0.1:8000/v1") == "o200k_base"
    assert encoding_name("openai:gpt-4") == "cl100k_base"
    assert encoding_name("openai:llama3@http://127.0.0.1:8000/v1") is None
    assert encoding_name("google_genai:gemini-2.0-flash") is None


def test_an_uncached_encoding_is_approximate_and_says_why() -> None:
    counter = counter_for("openai:gpt-4o-mini")
    assert counter.approximate and "not cached" in counter.method
    assert counter_for("google_genai:gemini-2.0-flash").method.startswith("approximate")


def test_offline_the_download_falls_back_to_the_approximation() -> None:
    # pytest-socket blocks every host but 127.0.0.1, as an offline machine would
    counter = counter_for("openai:gpt-4o-mini", download=True)
    assert counter.approximate and "could not be downloaded" in counter.method


def test_the_approximation_counts_bytes_and_the_chat_framing() -> None:
    counter = counter_for("google_genai:gemini-2.0-flash")
    assert counter.text("x" * 48) == 10
    assert counter.text("é" * 24) == 10  # 48 bytes: other scripts are not undercounted
    messages = [SystemMessage("s" * 48), HumanMessage("h" * 48, name="Critic")]
    # 3 per message, 1 per name, 3 for the reply; roles and names counted as text
    expected = 3 + (3 + counter.text("system") + 10) + (3 + counter.text("user") + 10 + 1 + counter.text("Critic"))
    assert counter.messages(messages) == expected
    assert counter.messages([{"role": "user", "content": "h" * 48, "name": "Critic"}]) == expected - 3 - \
        counter.text("system") - 10
    assert len(counter.truncate("abc " * 100, 5).encode()) == int(5 * APPROX_BYTES_PER_TOKEN)


def test_a_tiktoken_encoding_counts_exactly() -> None:
    # a tiny byte-level encoding with one merge: what the counter does with any tiktoken encoding
    ranks = {bytes([i]): i for i in range(256)}
    ranks[b"ab"] = 256
    encoding = tiktoken.Encoding("tiny", pat_str=r"\S+|\s+", mergeable_ranks=ranks, special_tokens={})
    counter = TokenCounter("tiktoken tiny", True, encoding.encode_ordinary, encoding.decode)
    assert counter.text("abab c") == 4  # ab ab, ' ', c
    assert counter.truncate("abab c", 2) == "abab"
    assert counter.messages([AIMessage("ab", name="x")]) == 3 + 3 + counter.text("assistant") + 1 + 1 + 1


def test_the_fake_servers_count_pieces_not_bytes() -> None:
    text = "The score of Assistant 1: 8\nThe score of Assistant 2: 10"
    # 'The', ' score', ' of', ' Assistant', ' ', '1', ':', ' ', '8', '\n', then 9 more ('10' is one piece)
    assert count_tokens(text) == 19
    assert prompt_tokens([{"role": "user", "content": text}]) == 3 + 3 + 1 + 19
    assert count_tokens(text) != counter_for("google_genai:x").text(text)


def test_an_estimate_counts_tokens_in_one_of_two_modes() -> None:
    assert tokens.counter_in("openai:gpt-4o-mini", "approximate").method.endswith("no tokenizer loaded before a run")
    with pytest.raises(ValueError, match="tokenizer 'cached': one of download, approximate"):
        tokens.counter_in("openai:gpt-4o-mini", "cached")
