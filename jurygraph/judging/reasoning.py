"""Reasoning tasks (ReFeR Appendix N.3: AQuA, CSQA, BBH date understanding, GSM8k): options, answer
normalisation, agreement among peers, and accuracy against gold answers (``item.human["answer"]``)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

_OPTION_LINE = re.compile(r"^\s*\(([A-Z])\)\s*(.+?)\s*$", re.MULTILINE)


def format_options(options: Mapping[str, str]) -> str:
    """Options as the datasets print them: one 'A) text' per line."""
    return "\n".join(f"{letter}) {text}" for letter, text in options.items())


def options_from_question(question: str) -> dict[str, str]:
    """The '(A) text' lines a question carries itself (BBH writes its options into the question)."""
    return {m.group(1): m.group(2) for m in _OPTION_LINE.finditer(question)}


def normalize_answer(value: Any) -> str:
    """One spelling per answer: option letters upper-case; numbers without '$', ',', GSM8k's '####' or '.0'."""
    text = str(value).strip()
    text = text.rpartition("####")[2].strip() if "####" in text else text
    number = text.replace(",", "").replace("$", "").strip()
    try:
        x = float(number)
    except ValueError:
        letter = re.fullmatch(r"\(?([A-Za-z])\)?\.?", text)
        return letter.group(1).upper() if letter else text
    return str(int(x)) if x.is_integer() else f"{x:g}"


def is_correct(answer: Any, gold: Any) -> bool:
    return normalize_answer(answer) == normalize_answer(gold)


def agreement(answers: Iterable[Any]) -> tuple[str | None, float | None]:
    """The majority answer and the share of answers that agree with it (None, None without answers;
    a tie for first place has no majority, and its share is that of the tied answers)."""
    votes = Counter(normalize_answer(a) for a in answers)
    if not votes:
        return None, None
    ranked = votes.most_common()
    share = ranked[0][1] / sum(votes.values())
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        return None, share
    return ranked[0][0], share


def reasoning_report(records: Sequence[Mapping[str, Any]], peers: Sequence[str] | None = None) -> dict[str, Any]:
    """Accuracy against gold answers from run records (``results.jsonl`` lines or ``{"verdict", "judgments",
    "human"}`` dicts): the framework's, each peer's, and the peer majority's; items without a gold answer
    are not counted, a missing answer counts as wrong and is reported."""
    graded = [r for r in records if (r.get("human") or {}).get("answer") is not None]
    names = list(peers) if peers is not None else sorted(
        {p for r in graded for p in (r.get("judgments") or {}) if p != "area_chair"})

    def accuracy(answers: list[Any], golds: list[Any]) -> float | None:
        return sum(a is not None and is_correct(a, g) for a, g in zip(answers, golds, strict=True)) / len(golds) \
            if golds else None

    golds = [r["human"]["answer"] for r in graded]
    final = [(r.get("verdict") or {}).get("answer") for r in graded]
    per_peer = {p: accuracy([((r.get("judgments") or {}).get(p) or {}).get("answer") for r in graded], golds)
                for p in names}
    majorities = [agreement([j.get("answer") for p, j in (r.get("judgments") or {}).items()
                             if p in names and j.get("answer") is not None])[0] for r in graded]
    return {
        "items": len(graded),
        "accuracy": accuracy(final, golds),
        "missing_answers": sum(a is None for a in final),
        "peer_accuracy": per_peer,
        "peer_majority_accuracy": accuracy(list(majorities), golds),
        "agrees_with_peer_majority": (sum(a is not None and m is not None and normalize_answer(a) == m
                                          for a, m in zip(final, majorities, strict=True)) / len(graded))
        if graded else None,
    }


# --- command line: `jurygraph reasoning-report RUN_DIR` ---------------------------------------------


def add_command(commands: Any) -> None:
    cmd = commands.add_parser("reasoning-report", help="accuracy of a reasoning run against gold answers: the "
                                                       "verdict's, each peer's, the peer majority's (JSON)")
    cmd.add_argument("run_dir", help="a run directory written by `jurygraph eval`")
    cmd.set_defaults(handler=cmd_reasoning_report)


def cmd_reasoning_report(args: Any) -> int:
    import json

    from jurygraph.running.runner import read_results

    report = reasoning_report([r for r in read_results(args.run_dir) if r.get("status") == "ok"])
    print(json.dumps(report, indent=2))
    return 0 if report["items"] else 1
