"""When does the Critic's reply end the debate?

The default is the paper's rule (Algorithm 1 line 8: ``'NO ISSUE' in Feedback``, with the personas'
NO_ISSUES spelling); the ``strict`` option accepts every spelling the papers use and rejects critiques that
mention the token in passing (the ENDS / CONTINUES tables)."""

from __future__ import annotations

import pytest

from jurygraph.nodes.debate import CriticPersona, ends_debate, no_issue_in, says_no_issue

ENDS = [
    "NO ISSUE",  # Algorithm 1, D.1, Appendix H
    "NO ISSUE.",
    "NO_ISSUES",  # G.1 personas
    "NO ISSUES",  # Appendix C
    "NO\\_ISSUES",  # as 003's extraction escapes it
    "**NO ISSUE**",
    "`NO_ISSUES`",
    '"NO ISSUES"',
    "“NO ISSUES”",
    "### NO ISSUES",
    "- NO ISSUE",
    "no issues",
    "No issue.",
    "NO ISSUES!",
    "  NO_ISSUES\n",
    "Verdict: NO ISSUE",
    "Final answer: **NO_ISSUES**",
    "NO ISSUES. The score is objective and accurate.",
    "NO ISSUE: the rationale holds.",
    "**NO ISSUES**\nThe Scorer's reasoning is sound.",
    "The revised score of 4 is well supported by the text.\n\nNO ISSUES",
    "__NO_ISSUES__",
    "The rationale is sound and the score fits the rubric.\nTherefore, NO ISSUES.",
    "In conclusion: NO ISSUE",
]

CONTINUES = [
    "There is no issue with the grammar, however the score of 5 is too high.",
    "No issues with the structure, but the second sentence contradicts the first.",
    "I cannot say NO ISSUE here: the summary misses the main point.",
    "NO ISSUE with the first point, but the score ignores the repetition.",
    "NO ISSUES with fluency; coherence is another matter, lower the score to 2.",
    "The Scorer says there are no issues, yet the summary repeats itself.",
    "Before I would print out NO ISSUES, the Scorer must explain the jump between sentences.",
    "The score is too high.",
    "",
    "ISSUE: the score is not justified.",
    "NOISSUE is not what I would say.",
    "Therefore, no issues remain with fluency, but coherence needs a lower score.",
    "I have NO ISSUES.",
]


@pytest.mark.parametrize("reply", ENDS)
def test_strict_rule_spellings_of_the_papers_end_the_debate(reply: str) -> None:
    assert says_no_issue(reply) and ends_debate(reply, "strict")


@pytest.mark.parametrize("reply", CONTINUES)
def test_strict_rule_critiques_that_mention_no_issue_in_passing_do_not_end_it(reply: str) -> None:
    assert not says_no_issue(reply) and not ends_debate(reply, "strict")


# the paper's substring test: the capitals anywhere in the reply, in passing too
PAPER_ENDS = [
    "NO ISSUE", "NO ISSUE.", "NO ISSUES", "NO_ISSUES", "NO\\_ISSUES", "**NO ISSUE**",
    "The score is accurate. NO ISSUES",
    "NO ISSUE with the first point, but the score ignores the repetition.",
    "I cannot say NO ISSUE here: the summary misses the main point.",
    "I have NO ISSUES.",
]
PAPER_CONTINUES = [
    "No issues.", "no issues", "No issue.", "There is no issue with the grammar.", "The score is too high.",
    "", "NOISSUE is not what I would say.", "No_issues",
]


@pytest.mark.parametrize("reply", PAPER_ENDS)
def test_paper_rule_ends_on_the_capitals_anywhere(reply: str) -> None:
    assert no_issue_in(reply) and ends_debate(reply) and ends_debate(reply, "paper")


@pytest.mark.parametrize("reply", PAPER_CONTINUES)
def test_paper_rule_continues_without_the_capitals(reply: str) -> None:
    assert not no_issue_in(reply) and not ends_debate(reply)


def test_the_two_rules_disagree_where_the_issue_says() -> None:
    assert ends_debate("The score is accurate. NO ISSUES") and not ends_debate("No issues.")
    assert not ends_debate("The score is accurate. NO ISSUES", "strict")
    assert ends_debate("No issues.", "strict")
    with pytest.raises(ValueError, match="unknown NO ISSUE rule"):
        ends_debate("NO ISSUE", "lenient")


def test_which_personas_name_their_stop_token() -> None:
    named = {name: CriticPersona.of(name).names_stop_token for name in
             ("plain", "weak", "moderate", "strict", "sophisticated")}
    # Section 2's strict prompt never tells the Critic how to stop; the others do (G.1, Appendix C)
    assert named == {"plain": True, "weak": True, "moderate": True, "strict": False, "sophisticated": True}
