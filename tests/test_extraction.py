"""Reading judgments out of real-looking replies: what each gives, and what stays missing (never 0 or tie)."""

from __future__ import annotations

import pytest

from jurygraph.judging.extraction import AnswerForm, UnreadableReply, parse_choice, parse_pairwise, parse_score
from jurygraph.judging.items import Scale, TaskKind

TEN = Scale(low=1, high=10)
FIVE = Scale(low=1, high=5)

PAIRWISE_CASES = [
    ("well-formed", "Evaluation evidence: A is precise.\nThe score of Assistant 1: 8\nThe score of Assistant 2: 6",
     (8.0, 6.0)),
    ("reordered", "The score of Assistant 2: 9\nThe score of Assistant 1: 7", (7.0, 9.0)),
    ("extra prose", "After discussing with Critic I keep my view.\nEvaluation evidence: B misses the point.\n"
                    "The score of Assistant 1: 7\nThe score of Assistant 2: 4\nThank you!", (7.0, 4.0)),
    ("out of ten", "The score of Assistant 1: 10/10\nThe score of Assistant 2: 8/10", (10.0, 8.0)),
    ("chinese colon", "The score of Assistant 1：7\nThe score of Assistant 2：５", (7.0, 5.0)),
    ("markdown bold label", "**The score of Assistant 1:** 6\n**The score of Assistant 2:** 9", (6.0, 9.0)),
    ("markdown bold all", "**The score of Assistant 1: 6.5**\n**The score of Assistant 2: 7**", (6.5, 7.0)),
    ("short labels", "Assistant 1: 3\nAssistant 2: 8", (3.0, 8.0)),
    ("last mention wins", "Earlier I said The score of Assistant 1: 2 but after discussion\n"
                          "The score of Assistant 1: 9\nThe score of Assistant 2: 8", (9.0, 8.0)),
    ("score for", "Score for Assistant 1 = 4, score for Assistant 2 = 5", (4.0, 5.0)),
]

PAIRWISE_UNREADABLE = [
    ("missing score", "The score of Assistant 1: 7\nAssistant 2 is also fine.", "Assistant 2"),
    ("no scores at all", "Both answers are good, I cannot decide.", "Assistant 1"),
    ("off the scale", "The score of Assistant 1: 11\nThe score of Assistant 2: 5", "outside the scale"),
    ("other denominator", "The score of Assistant 1: 4/5\nThe score of Assistant 2: 3/5", "scale is 1-10"),
    ("a count is not a score", "Assistant 1 lists 3 factors while Assistant 2 lists 5.", "Assistant 1"),
]


@pytest.mark.parametrize(("case", "reply", "expected"), PAIRWISE_CASES, ids=[c[0] for c in PAIRWISE_CASES])
def test_pairwise_replies(case: str, reply: str, expected: tuple[float, float]) -> None:
    s1, s2, _ = parse_pairwise(reply, TEN)
    assert (s1, s2) == expected


@pytest.mark.parametrize(("case", "reply", "reason"), PAIRWISE_UNREADABLE, ids=[c[0] for c in PAIRWISE_UNREADABLE])
def test_pairwise_unreadable_says_why(case: str, reply: str, reason: str) -> None:
    with pytest.raises(UnreadableReply, match=reason):
        parse_pairwise(reply, TEN)


def test_evidence_is_kept() -> None:
    _, _, evidence = parse_pairwise(PAIRWISE_CASES[0][1], TEN)
    assert evidence == "A is precise."


@pytest.mark.parametrize(("reply", "expected"), [
    ("Evaluation evidence: coherent.\nThe score of the summary: 4", 4.0),
    ("Coherence: 3", 3.0),
    ("**Rating:** 4/5", 4.0),
    ("Score: 2.5", 2.5),
    ("5", 5.0),
    ("Analysis: fine.\nRating: 2\n", 2.0),
])
def test_score_replies(reply: str, expected: float) -> None:
    score, _ = parse_score(reply, FIVE, labels=("coherence",))
    assert score == expected


@pytest.mark.parametrize("reply", ["I would give it a good mark.", "Score: 7", "Rating: 0"])
def test_score_unreadable(reply: str) -> None:
    with pytest.raises(UnreadableReply):
        parse_score(reply, FIVE)


@pytest.mark.parametrize(("reply", "expected"), [
    # the answer line wins over a label inside parentheses, even a later one
    ("Rating: 2 (at first I thought Rating: 5)", 2.0),
    # the last answer line wins: a reply that revises itself ends on its final answer
    ("Score: 3, as the summary skips the ending.\nOn reflection the ending is implied.\nFinal: 2", 2.0),
    ("Score: 3\nFinal score: 4", 4.0),
    # shaped like the released transcripts (tests/data/chateval_outputs): reasoning that mentions scores inside
    # sentences, then the answer on its own last line
    ("Assistant 1's summary would deserve a score: 5 if it were complete, but it stops early.\n\nRating: 3", 3.0),
    ("- Coherence: 4", 4.0),
    # no line starts with a label: the last mention anywhere
    ("I rate it, all things considered, Score: 3 and not Score: 4", 4.0),
])
def test_the_answer_line_is_read_not_a_mention_in_passing(reply: str, expected: float) -> None:
    score, _ = parse_score(reply, FIVE, labels=("coherence",))
    assert score == expected


def test_choice_letters_and_numbers() -> None:
    options = {"A": "x", "B": "y", "C": "z"}
    assert parse_choice("Let me think... so the answer is (B).", options)[0] == "B"
    assert parse_choice("Answer: C", options)[0] == "C"
    assert parse_choice("The answer is $1,250.", None)[0] == "1250"
    with pytest.raises(UnreadableReply):
        parse_choice("None of them fits.", options)


def test_answer_form_makes_judgments() -> None:
    form = AnswerForm(TaskKind.PAIRWISE, "reminder", scale=TEN)
    judgment = form.read("Critic", "The score of Assistant 1: 3\nThe score of Assistant 2: 3")
    assert (judgment.label, judgment.missing, judgment.agent) == ("tie", False, "Critic")
