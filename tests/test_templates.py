"""The one table that says which template judges an item, for every protocol (prompts/templates.json)."""

from __future__ import annotations

import pytest

from jurygraph.prompts import load_json, load_prompt, select_template


@pytest.mark.parametrize("protocol", [p for p in load_json("templates") if not p.startswith("_")])
def test_every_template_the_table_names_exists(protocol: str) -> None:
    refer = load_json("refer/templates")
    for name in load_json("templates")[protocol].values():
        assert name in refer if protocol == "refer" else load_prompt(name)


def test_the_most_specific_key_wins() -> None:
    assert select_template("geval", task="score", dataset="summeval", aspect="fluency") == "geval/summeval_fluency"
    assert select_template("geval", task="score", dataset="summeval", aspect="fluency",
                           variant="1to5") == "geval/summeval_fluency_1to5"
    assert select_template("geval", task="score", dataset="summeval", aspect="coherence",
                           variant="1to5") == "geval/summeval_coherence"
    assert select_template("geval", task="score", dataset="mine", aspect="coherence") is None
    assert select_template("debate", task="score", dataset="topical-chat", aspect="coherence") == \
        "debate/topical_chat_coherence"
    assert select_template("debate-tie-breaker", task="score", dataset="topical-chat", aspect="other") == \
        "debate/tie_breaker_topical_chat"
    assert select_template("debate", task="score", dataset="mine", aspect="x") == "debate/generic"
    assert select_template("chateval-single", task="pairwise") == "chateval/single_faireval"
    assert select_template("refer", task="choice", dataset="aqua") == "aqua"
    assert select_template("refer", task="choice", dataset="mine") is None


def test_a_protocol_the_table_does_not_list_keeps_its_own_in_its_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """A protocol added later needs no line in prompts/templates.json: its prompts/<name>/select.json is read."""
    import jurygraph.prompts as prompts

    own = {"pairwise": "newproto/judge", "summeval/coherence": "newproto/coherence"}
    asked: list[str] = []

    def tables(name: str) -> object:
        asked.append(name)
        return own if name == "newproto/select" else load_json(name)

    monkeypatch.setattr(prompts, "load_json", tables)
    assert select_template("newproto", task="pairwise") == "newproto/judge"
    assert select_template("newproto", task="score", dataset="summeval", aspect="coherence") == "newproto/coherence"
    assert select_template("newproto", task="choice") is None
    assert select_template("geval", task="score", dataset="summeval", aspect="coherence") == \
        "geval/summeval_coherence"  # a listed protocol is read from the one table, as before
    assert "geval/select" not in asked
