"""`jurygraph report` on conversation items, opened in headless Chromium: the item browser shows each message with
its role, the tool calls with their arguments, the tool results, the turn judged, and the per-turn verdicts."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from jurygraph.cli.app import main
from tests.test_conversations import eval_args, responder
from tests.test_report import browse


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A per-turn single-agent run over the score conversations, and its report page."""
    from jurygraph.testing.fake_server import FakeOpenAIServer

    root = tmp_path_factory.mktemp("conversation_report")
    with FakeOpenAIServer(responder) as server:
        assert main(eval_args(server, root / "run", "single", "score", "--per-turn")) == 0
    page = root / "report.html"
    assert main(["report", str(root / "run"), "--out", str(page)]) == 0
    return page


def messages_of(dom: str) -> list[tuple[str, str]]:
    """Each rendered message: its classes and its text (tags removed)."""
    found = re.findall(r'<div class="(msg [^"]*)">(.*?)</div>(?=<div class="msg|</div><div class="runconv|'
                       r'<div class="steps|<h4>)', dom)
    return [(classes, html.unescape(re.sub(r"<[^>]+>", " ", body))) for classes, body in found]


def test_the_report_renders_a_trajectory_with_roles_and_tool_calls(report: Path) -> None:
    dom = browse(report, "item=flight")
    shown = messages_of(dom)
    assert [classes for classes, _ in shown] == ["msg system", "msg user", "msg assistant", "msg tool",
                                                 "msg assistant", "msg user", "msg assistant", "msg tool",
                                                 "msg assistant"]
    assert "You are a travel agent." in shown[0][1]
    assert 'calls search_flights {"from": "BGO", "to": "OSL", "date": "2025-03-03"}  (call_1)' in shown[2][1]
    assert "tool result of search_flights" in shown[3][1] and "SK262" in shown[3][1]
    assert "tool result of book_flight" in shown[7][1] and "XK7Q2" in shown[7][1]
    assert "agent graph steps: agent → tools → agent → agent → tools → agent" in html.unescape(dom)
    # the per-turn verdicts and each turn's judge, under its turn
    verdict = "verdict: 3.5 [per turn: mean of 2 turns]; per turn (mean) turn 1: score 3, turn 2: score 4"
    assert verdict in html.unescape(dom)
    assert '<div class="order">turn 1</div>' in dom and '<div class="order">turn 2</div>' in dom


def test_the_turn_judged_is_outlined(report: Path) -> None:
    shown = messages_of(browse(report, "item=flight-turn-2"))
    judged = [text for classes, text in shown if "judged" in classes]
    assert len(judged) == 3 and all("turn judged" in text for text in judged)  # the call, its result, the reply
    assert "Booked: SK262" in judged[-1]
    assert not any("judged" in classes for classes, _ in shown[:6])
