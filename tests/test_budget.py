"""--max-cost / --max-total-tokens: the run stops starting items before its spend would pass the budget, in-flight
items finish, the manifest says `stopped: budget` and the spend, the command exits 3 with one line; a resume with
a higher budget continues: nothing lost, no item and no call paid twice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jurygraph.cli import main
from jurygraph.running.budget import Budget, Spend, SpendMeter
from jurygraph.running.ledger import Ledger
from jurygraph.running.rundir import read_results

REPLY = "Evaluation evidence: both are fine.\nThe score of Assistant 1: 8\nThe score of Assistant 2: 6"
PER_ITEM = 4  # chateval one-by-one, 2 referees x 2 turns, one order


def args_for(server: Any, out: Path, *extra: str) -> list[str]:
    return ["eval", "--protocol", "chateval", "--no-calibrate", "--dataset", "faireval", "--limit", "12",
            "--model", "judge", "--base-url", server.base_url, "--gen", "*.max_tokens=40", "--out", str(out),
            "--quiet", *extra]


def manifest_of(out: Path) -> dict[str, Any]:
    return json.loads((out / "manifest.json").read_text())


def test_the_budget_stops_the_run_and_a_higher_one_continues(openai_server, tmp_path: Path, capsys) -> None:
    server = openai_server(lambda request, i: REPLY)
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"judge": {"input": 10.0, "output": 30.0}}))
    out = tmp_path / "run"
    capsys.readouterr()
    assert main(args_for(server, out, "--prices", str(prices), "--max-cost", "0.2", "--concurrency", "4")) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("jurygraph: stopped: budget reached: $0.")
    assert "of --max-cost 0.2" in err[0] and f"--resume {out}" in err[0]
    manifest = manifest_of(out)
    assert manifest["stopped"] == "budget" and manifest["budget"]["max_cost_usd"] == 0.2
    spend = manifest["spend"]
    assert 0 < spend["cost_usd"] <= 0.2  # stopped before passing it
    done = read_results(out)
    assert 0 < len(done) < 12 and all(r["status"] == "ok" for r in done)  # in-flight items finished whole
    assert spend["requests"] == len(server.requests) == PER_ITEM * len(done)
    # the reserve of an item is the estimate's most expensive item with a margin: the next one did not fit
    reserve = manifest["budget"]["reserve_per_item"]["cost_usd"]
    assert spend["cost_usd"] + reserve > 0.2

    assert main(["eval", "--resume", str(out), "--max-cost", "1"]) == 0
    records = read_results(out)
    assert sorted(r["id"] for r in records) == sorted({r["id"] for r in records}) and len(records) == 12
    assert len(server.requests) == PER_ITEM * 12  # no call paid twice
    manifest = manifest_of(out)
    assert manifest["stopped"] is None and manifest["spend"]["requests"] == PER_ITEM * 12  # the whole run's
    assert manifest["spend"]["cost_usd"] == pytest.approx(
        sum(entry["input_tokens"] * 10 + entry["output_tokens"] * 30 for r in records
            for entry in r["usage"].values()) / 1e6)


def test_a_resume_keeps_the_budget_of_the_run(openai_server, tmp_path: Path) -> None:
    server = openai_server(lambda request, i: REPLY)
    out = tmp_path / "run"
    assert main(args_for(server, out, "--max-total-tokens", "6000", "--concurrency", "2")) == 3
    first = manifest_of(out)["spend"]
    assert 0 < first["input_tokens"] + first["output_tokens"] <= 6000
    assert main(["eval", "--resume", str(out)]) == 3  # the same budget, already spent: nothing more starts
    assert manifest_of(out)["spend"] == first
    assert main(["eval", "--resume", str(out), "--max-total-tokens", "1000000"]) == 0
    assert len(read_results(out)) == 12 and len(server.requests) == PER_ITEM * 12


def test_a_cost_budget_needs_a_price(openai_server, tmp_path: Path, capsys) -> None:
    server = openai_server(lambda request, i: REPLY)
    capsys.readouterr()
    assert main(args_for(server, tmp_path / "run", "--max-cost", "1")) == 2
    err = capsys.readouterr().err
    assert "--max-cost: no model of this run has a price" in err and "--max-total-tokens" in err
    assert server.requests == []


def test_an_item_in_flight_keeps_its_reserve_less_what_it_spent(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.sqlite")
    meter = SpendMeter(ledger, out=tmp_path)
    reserve = Spend(requests=1, input_tokens=300, output_tokens=100)
    budget = Budget(max_total_tokens=1150, reserves={"a": reserve, "b": reserve})
    assert budget.admits(meter, reserve)
    meter.started("a")
    meter.started("b")
    assert not budget.admits(meter, reserve)  # 0 spent + 2 x 400 in flight + 400 > 1150
    meter.paid("a", {"x": {"model": "m", "requests": 1, "input_tokens": 350, "output_tokens": 0}})
    assert not budget.admits(meter, reserve)  # 350 spent + (50 + 400) in flight + 400
    meter.finished("a")  # a spent 350: 350 + 400 + 400
    assert budget.admits(meter, reserve)
    meter.paid("b", {"x": {"model": "m", "requests": 1, "input_tokens": 500, "output_tokens": 0}})
    assert not budget.admits(meter, reserve)  # b went past its reserve: what it spent counts as it is: 850 + 0 + 400
    assert budget.admits(meter, Spend(requests=1, input_tokens=300))  # a smaller item still fits: 850 + 300
    meter.close()  # spend.json follows the ledger (a thread writes it); close() waits for the last figures
    assert json.loads((tmp_path / "spend.json").read_text())["input_tokens"] == 850
    ledger.close()
    again = Ledger(tmp_path / "ledger.sqlite", invocation=1)
    assert SpendMeter(again).total.input_tokens == 850  # the next invocation starts from there


def test_an_item_s_reserve_is_its_own_and_rendering_is_spared_far_from_the_limit(tmp_path: Path) -> None:
    """Each item is priced from itself: a long one is rendered (and held back if it alone passes the budget); far
    from the limit an item no longer than one rendered takes that one's reserve; near the limit every item is
    rendered."""
    from jurygraph.judging.items import EvalItem

    rendered: list[str] = []

    def price(item: EvalItem) -> Spend:
        rendered.append(item.id)
        tokens = len(item.response or "") // 4 + 500
        return Spend(requests=4, input_tokens=tokens, output_tokens=100)

    def item(item_id: str, words: int) -> EvalItem:
        return EvalItem(id=item_id, task="score", source="Article.", response="word " * words,
                        scale={"low": 1, "high": 5})

    meter = SpendMeter(Ledger(tmp_path / "ledger.sqlite"), out=tmp_path)
    budget = Budget(max_total_tokens=100_000, price_item=price)
    first = budget.reserve_for(item("a", 100), meter)
    assert first is not None and rendered == ["a"] and first.tokens == round((125 + 500 + 100) * 1.25)
    budget.started("a")
    assert budget.reserve_for(item("b", 50), meter) == first and rendered == ["a"]  # no longer: a's reserve
    giant = budget.reserve_for(item("c", 200_000), meter)
    assert rendered == ["a", "c"] and giant is not None and not budget.fits_alone(giant)
    small = budget.reserve_for(item("d", 80), meter)
    assert small == first  # the shortest rendered item at least as long: a, not the giant
    meter.paid("x", {"x": {"model": "m", "requests": 1, "input_tokens": 99_000, "output_tokens": 0}})
    assert budget.reserve_for(item("e", 10), meter) is not None and rendered[-1] == "e"  # near the limit: its own


def test_a_short_conversation_of_many_turns_is_rendered_not_priced_as_a_long_one_of_few(tmp_path: Path) -> None:
    """--per-turn judges every assistant turn: a conversation's reserve grows with its turns, not only its text. A
    short conversation of three turns after a long one of one turn is rendered (a long one's reserve would be a
    third of what it may spend); one no longer and of no more turns than a rendered one takes its reserve."""
    from jurygraph.judging.items import EvalItem

    rendered: list[str] = []

    def price(item: EvalItem) -> Spend:  # one judgment per assistant turn, each reading the conversation
        rendered.append(item.id)
        turns = sum(m.role == "assistant" for m in item.messages or [])
        text = sum(len(m.text) for m in item.messages or [])
        return Spend(requests=turns, input_tokens=turns * (text // 4 + 200), output_tokens=turns * 512)

    def conversation(item_id: str, turns: int, words: int) -> EvalItem:
        messages = []
        for k in range(turns):
            messages += [{"role": "user", "content": f"Question {k}? " + "word " * words},
                         {"role": "assistant", "content": f"Answer {k}."}]
        return EvalItem(id=item_id, task="score", messages=messages, scale={"low": 1, "high": 10})

    meter = SpendMeter(Ledger(tmp_path / "ledger.sqlite"), out=tmp_path)
    budget = Budget(max_total_tokens=10_000_000, price_item=price)
    long_one = budget.reserve_for(conversation("long", 1, 400), meter)
    assert long_one is not None and long_one.requests == 1
    short = conversation("short", 3, 5)
    assert len(short.model_dump_json(exclude_none=True)) < len(conversation("long", 1, 400).model_dump_json())
    many = budget.reserve_for(short, meter)
    assert rendered == ["long", "short"] and many is not None and many.requests > long_one.requests
    assert many.output_tokens >= 3 * 512
    # no longer than the long one and of one turn: the long one's reserve
    assert budget.reserve_for(conversation("one", 1, 100), meter) == long_one and rendered == ["long", "short"]
    # no longer than the short one and of two turns: the short one's
    assert budget.reserve_for(conversation("two", 2, 3), meter) == many and rendered == ["long", "short"]


def test_an_item_whose_rendering_sends_nothing_starts_and_lends_its_nothing_to_no_other(tmp_path: Path) -> None:
    """An item a trajectory match decides before the panel sends no request: its reserve is nothing, so a budget
    never holds it back (before, its 0-request rendering read as "cannot be rendered" and, with no other item's
    known, the item was held back); and an item no longer than it does not take its reserve of nothing."""
    from jurygraph.judging.items import EvalItem

    def price(item: EvalItem) -> Spend:
        return Spend() if item.id.startswith("matched") else Spend(requests=2, input_tokens=300, output_tokens=100)

    def item(item_id: str, words: int) -> EvalItem:
        return EvalItem(id=item_id, task="score", response="word " * words, scale={"low": 1, "high": 5})

    meter = SpendMeter(Ledger(tmp_path / "ledger.sqlite"), out=tmp_path)
    budget = Budget(max_total_tokens=100_000, price_item=price)
    nothing = budget.reserve_for(item("matched", 100), meter)
    assert nothing == Spend() and budget.fits_alone(nothing) and budget.admits(meter, nothing)
    budget.started("matched")
    shorter = budget.reserve_for(item("shorter", 10), meter)
    assert shorter is not None and shorter.requests == round(2 * 1.25)
