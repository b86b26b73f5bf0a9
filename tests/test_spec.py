"""A protocol's spec (graphs/spec.py) and the registry that finds specs (graphs/registry.py): options typed from a
factory's signature and docstring, values read and checked, the options of several protocols listed once each in
an order that keeps every protocol's own, names that point nowhere said so."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
from langgraph.graph import END, START, StateGraph

from jurygraph.graphs.registry import UnknownProtocol, builtin, find, listed_options, resolve_name, spec_of
from jurygraph.graphs.spec import Option, ProtocolSpec, derive_spec, panel_signals
from jurygraph.judging.state import JuryState


def create_toy(rounds: int = 2, *, mode: Literal["a", "b"] = "a", strict: bool = False, weight: float | None = None,
               label: str = "x", prompt: Path | None = None, personas: list[str] | None = None,
               state_schema: type = JuryState) -> StateGraph:
    """A toy protocol.

    Args:
        rounds: how many rounds.
        mode: which way.
        strict: whether to be strict.
    """
    builder = StateGraph(state_schema)
    builder.add_node("judge", lambda state: {})
    builder.add_edge(START, "judge")
    builder.add_edge("judge", END)
    return builder


def test_a_bare_factorys_options_come_from_its_signature_and_docstring() -> None:
    spec = derive_spec(create_toy, "toy", source="tests:create_toy")
    found = {o.name: (o.type, o.default, o.choices) for o in spec.options}
    # a list parameter and the schema are no options: their defaults stand
    assert found == {"rounds": (int, 2, None), "mode": (str, "a", ("a", "b")), "strict": (bool, False, None),
                     "weight": (float, None, None), "label": (str, "x", None), "prompt": (str, None, None)}
    assert spec.option("rounds").help == "how many rounds."  # type: ignore[union-attr]
    assert spec.help == "A toy protocol." and spec.tasks == ("pairwise", "score", "choice") and spec.plan is None
    built = spec.create({"rounds": 3})
    assert built.params == {"rounds": 3, "mode": "a", "strict": False, "weight": None, "label": "x", "prompt": None}
    assert isinstance(built.graph, StateGraph)


def test_a_parameter_no_option_can_give_is_an_error_when_the_protocol_is_loaded() -> None:
    def create_needy(personas: list[str]) -> StateGraph:
        return create_toy()

    with pytest.raises(ValueError, match="parameters personas have no default and no plain type"):
        derive_spec(create_needy, "needy")

    def create_required(rounds: int) -> StateGraph:
        return create_toy(rounds)

    spec = derive_spec(create_required, "required", source="m:create_required")
    with pytest.raises(ValueError, match="--protocol m:create_required needs --param rounds=VALUE"):
        spec.create()
    assert spec.create({"rounds": 4}).params == {"rounds": 4}


def test_an_options_values_are_read_as_its_type_and_checked() -> None:
    turns = Option("turns", int, 2, minimum=1)
    assert turns.parse("3") == 3 and turns.cli_flag == "--turns"
    with pytest.raises(ValueError, match="turns=three: not a whole number"):
        turns.parse("three")
    with pytest.raises(ValueError, match=r"--turns must be at least 1 \(got 0\)"):
        turns.check(0)
    flag = Option("strict", bool, False)
    assert flag.parse("yes") is True and flag.parse("False") is False
    assert flag.argparse_kwargs() == {"action": "store_true", "help": ""}
    with pytest.raises(ValueError, match="write true or false"):
        flag.parse("maybe")
    assert Option("samples", int, None).parse("none") is None
    tolerance = Option("tolerance", float, 0.0, minimum=0, exclusive=True)
    with pytest.raises(ValueError, match="must be greater than 0"):
        tolerance.check(0.0)
    with pytest.raises(ValueError, match=r"--mode must be one of a, b \(got c\)"):
        Option("mode", str, "a", choices=("a", "b")).check("c")


def test_options_are_listed_once_keeping_each_protocols_order() -> None:
    a, b, c, d = (Option(name) for name in "abcd")
    first = ProtocolSpec("one", create_toy, options=(a, c))
    second = ProtocolSpec("two", create_toy, options=(a, b, c, d))
    assert [o.name for o in listed_options([first, second])] == ["a", "b", "c", "d"]
    other = ProtocolSpec("three", create_toy, options=(Option("a", int),))
    with pytest.raises(ValueError, match="option 'a' of three differs from the one another protocol declares"):
        listed_options([first, other])
    with pytest.raises(ValueError, match="unknown task kinds"):
        ProtocolSpec("bad", create_toy, tasks=("rating",))
    with pytest.raises(ValueError, match="declared twice"):
        ProtocolSpec("twice", create_toy, options=(a, a))


def test_the_built_in_protocols_are_found_by_their_modules() -> None:
    assert list(builtin()) == ["chateval", "debate", "refer", "single", "ensemble", "geval", "analyze-rate", "d3"]
    assert find("debate") is builtin()["debate"]
    assert panel_signals("score", members=3, samples=20) == {"spread", "sample_spread"}
    assert panel_signals("pairwise", members=2, samples=20) == {"agreement"}


def test_a_name_that_points_nowhere_is_said_so(tmp_path: Path) -> None:
    with pytest.raises(UnknownProtocol, match="no such protocol; choose from analyze-rate, chateval"):
        find("nosuch")
    with pytest.raises(UnknownProtocol, match=r"cannot load nowhere_at_all:create_x \(ModuleNotFoundError"):
        find("nowhere_at_all:create_x")
    with pytest.raises(UnknownProtocol, match=r"cannot load .*missing\.py:create_x \(ImportError: no Python file"):
        find(f"{tmp_path / 'missing.py'}:create_x")
    with pytest.raises(UnknownProtocol, match="neither a ProtocolSpec nor a factory"):
        spec_of(42, "x", "somewhere:x")
    mine = tmp_path / "mine.py"
    mine.write_text("from tests.test_spec import create_toy\nTOY = create_toy\n", encoding="utf-8")
    assert resolve_name("mine.py:TOY") == f"{Path('mine.py').resolve()}:TOY"
    assert find(f"{mine}:TOY").option("mode").choices == ("a", "b")  # type: ignore[union-attr]
    assert find("tests.test_spec:create_toy").name == "tests.test_spec:create_toy"


# a declared plan is what `eval` shows before a large run, the manifest's requests_per_item and the dry run's "with
# every format re-ask": it must never be below what the graph can send. Counted here with a model whose n samples
# are n requests (the costliest way), the most scenario's scripted replies and one re-ask per judging call.
PLANS = [
    ("--protocol chateval --no-calibrate", "pairwise", "exact"),
    ("--protocol chateval --no-calibrate --strategy summarizer --agents 3 --turns 3", "pairwise", "exact"),
    ("--protocol chateval --no-calibrate --strategy summarizer --summary-mode code --agents 3 --turns 3", "pairwise",
     "exact"),
    ("--protocol chateval --no-calibrate --stop-when consensus", "pairwise", "exact"),
    ("--protocol chateval --no-calibrate --devil", "pairwise", "exact"),
    ("--protocol chateval --no-calibrate --unreadable code", "pairwise", "above"),  # the code's 3 attempts
    ("--protocol chateval", "pairwise", "exact"),
    ("--protocol debate", "score", "exact"),
    ("--protocol debate --max-iterations 1", "score", "exact"),
    ("--protocol debate --tie-breaker --commander-llm", "score", "exact"),
    ("--protocol refer", "score", "exact"),
    ("--protocol refer --variant lite", "score", "exact"),
    ("--protocol refer --variant lite --lite-from-turbo", "score", "exact"),
    ("--protocol refer --peer-discussion 2", "score", "exact"),
    ("--protocol single --no-calibrate", "pairwise", "exact"),
    ("--protocol ensemble --no-calibrate", "pairwise", "exact"),
    ("--protocol geval", "score", "exact"),
    ("--protocol geval --estimator logprobs", "score", "above"),  # its fallback to n samples
    ("--protocol single --calibrate bpc+mec", "pairwise", "above"),  # FairEval's k reviews in one request
    ("--protocol d3", "pairwise", "exact"),
    ("--protocol d3 --d3-mode more", "pairwise", "exact"),
]


@pytest.mark.parametrize(("argv", "task", "bound"), PLANS, ids=[argv for argv, _, _ in PLANS])
def test_a_declared_plan_is_never_below_what_its_graph_can_send(argv: str, task: str, bound: str) -> None:
    import argparse

    from jurygraph.cli.protocols import _counted, add_protocol_arguments, build_protocol
    from jurygraph.running.datasets import load_dataset

    item = load_dataset("faireval" if task == "pairwise" else "summeval").items[0]
    parser = argparse.ArgumentParser()
    add_protocol_arguments(parser)
    setup = build_protocol(parser.parse_args(argv.split()), {task})
    declared = setup.requests_per_item(item, None)
    counted = _counted(setup.most_panel_graph or setup.panel_graph or setup.graph, item, None)
    assert declared == counted if bound == "exact" else declared > counted, (declared, counted)
