"""D3's agents (Bandi & Harrasse, "Debate, Deliberate, Decide"): advocates, a judge, and a jury.

The released code (github.com/abirharrasse/D3-Judge, ``utils/SAMRE_architecture.py``, ``MORE_architecture.py``,
``anonymizer.py``, ``convergence.py``, ``personas.py``) is the reference; ``docs/FIDELITY.md`` lists where and why
jurygraph departs from it, each departure an option.

Every call is a fresh chat: the system message MetaGPT builds from the role's name (``prompts/d3/system.txt``) and
one user prompt, at temperature 0 with 4096 max tokens (MetaGPT's defaults, which the released runs sent). Each
agent's ``histories`` entry holds each of its calls in order: system message, prompt, reply.

- SAMRE (one advocate per answer, up to R rounds): each advocate writes a defense and then summarises it (the
  Summarizer action, same model); only the summary is heard, by the opponent (its next "last argument"), the judge
  and the jury. The judge scores the round's two summaries and its whole evaluation (with the code's
  ``Scores: (s1, s2)`` line) is the advocates' next feedback. After each round :func:`stop_reason` decides.
- MORE (k advocates per answer, one round): each group's advocates defend in parallel, the group's aggregator merges
  their defenses, group 2 hears group 1's merged defense; a judge gives feedback and a scorer scores.
- The jury (both modes): each juror, a persona of the released pool, reads the anonymized transcript
  (:func:`compile_transcript`) and votes ``(1, 0)`` or ``(0, 1)``; the verdict is the jury's tally.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from statistics import fmean
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableLambda

from jurygraph.judging.extraction import AnswerForm, UnreadableReply
from jurygraph.judging.items import EvalItem, Scale, TaskKind, as_item, format_number
from jurygraph.judging.judgments import Judgment, PairwiseAnswer, PairwiseLabel, Verdict, pairwise_label
from jurygraph.llm.calls import ModelReply, ModelRequest, agent_node
from jurygraph.prompts import load_json, load_prompt, render

Mode = Literal["samre", "more"]
MODES: tuple[str, ...] = ("samre", "more")
Personas = Literal["pool", "curated"]
PERSONA_CHOICES: tuple[str, ...] = ("pool", "curated")
Ties = Literal["keep", "code"]
TIES: tuple[str, ...] = ("keep", "code")
VoteReading = Literal["binary", "any"]
VOTE_READINGS: tuple[str, ...] = ("binary", "any")
Unreadable = Literal["missing", "code"]
UNREADABLE: tuple[str, ...] = ("missing", "code")

JUDGE, SCORER = "Judge", "Scorer"
# MetaGPT's LLMConfig defaults, which every released run sent (the experiments used temperature 0, and
# initiate_model writes no temperature for OpenAI models, so 0.0 reached them whatever was asked)
D3_PARAMS: dict[str, Any] = {"temperature": 0, "max_tokens": 4096}

# how each reply's score tuple is found, as the released code finds it
_JUDGE_TUPLE = r"[\(\[](\d+),\s*(\d+)[\)\]]"  # SAMRE's get_last_tuple: the last (a, b) or [a, b]
_SCORER_TUPLE = r"\((\d+),\s*(\d+)\)"  # MORE's ScoreAnswer: the first (a, b)
_BINARY_VOTE = r"[\(\[]([01]),\s*([01])[\)\]]"  # MORE's get_vote_tuple: the last (0|1, 0|1)
# the judge sums six criteria scored 1-20 (the prompt); the code reads any integers, this bounds only a JSON schema
JUDGE_SCALE = Scale(low=6, high=120)
VOTE_SCALE = Scale(low=0, high=1)
_SCORE_REMINDER = "Sum up the scores and return the final score tuple (score1, score2). Example: (95, 87)"
_VOTE_REMINDER = ("Reasoning: [Your brief explanation]\n"
                  "Vote: (1, 0) if you vote for {first}, or (0, 1) if you vote for {second}")

# anonymizer.AnonymizationMapping.create_default, applied longest name first, case-insensitively
_ANONYMOUS = (("Opponent of Advocate1", "Opposing Defense A"), ("Opponent of Advocate2", "Opposing Defense B"),
              ("AdvocateGroup1", "Defense A"), ("AdvocateGroup2", "Defense B"),
              ("Advocate1", "Defense A"), ("Advocate2", "Defense B"))


def d3_prompt(name: str) -> str:
    """A ``prompts/d3`` template (its ``#:`` provenance lines removed)."""
    return load_prompt(f"d3/{name}")


def pairwise_item(state: dict[str, Any]) -> EvalItem:
    item = as_item(state["item"])
    if item.task is not TaskKind.PAIRWISE:
        raise ValueError(f"item {item.id!r}: D3 compares two answers (pairwise items); {item.task.value} items are "
                         "not supported")
    return item


# --- reading the tuples -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TupleForm(AnswerForm):
    """A pairwise judgment written as a tuple ``(a, b)``, found by ``pattern`` (its first or last match, as the
    released code looks for it). Any integers are read: the code checks no range (``scale`` bounds only a JSON
    schema and the dry run's replies)."""

    pattern: str = _JUDGE_TUPLE
    first: bool = False
    answer_line: str = "Final score tuple: "
    what: str = "score tuple (score1, score2)"

    def read(self, agent: str, text: str, attempts: int = 1) -> Judgment:
        found = re.findall(self.pattern, text)
        if not found:
            raise UnreadableReply(f"no {self.what} in the reply")
        a, b = (int(x) for x in found[0 if self.first else -1])
        return Judgment(agent=agent, kind=TaskKind.PAIRWISE, raw=text, attempts=attempts, score_1=a, score_2=b,
                        label=pairwise_label(a, b))

    def render(self, parsed: Any) -> str:
        """A structured answer (or the dry run's) in the tuple form the reader finds."""
        assert isinstance(parsed, PairwiseAnswer)
        a, b = format_number(parsed.score_assistant_1), format_number(parsed.score_assistant_2)
        return f"{parsed.evidence}\n{self.answer_line}({a}, {b})"


def judge_form(mode: Mode | str) -> TupleForm:
    """The score tuple of SAMRE's judge (the last one) or MORE's scorer (the first one)."""
    return TupleForm(TaskKind.PAIRWISE, _SCORE_REMINDER, scale=JUDGE_SCALE,
                     pattern=_JUDGE_TUPLE if mode == "samre" else _SCORER_TUPLE, first=mode == "more")


def vote_form(mode: Mode | str, reading: VoteReading | str = "binary") -> TupleForm:
    """A juror's vote: the last ``(1, 0)``/``(0, 1)`` tuple (``binary``, MORE's reader), or the last tuple of any
    integers (``any``, SAMRE's ``get_last_tuple``, whose numbers are added to the tally as they are)."""
    first, second = ("Advocate1", "Advocate2") if mode == "samre" else ("Defense A", "Defense B")
    return TupleForm(TaskKind.PAIRWISE, _VOTE_REMINDER.format(first=first, second=second), scale=VOTE_SCALE,
                     pattern=_BINARY_VOTE if reading == "binary" else _JUDGE_TUPLE, answer_line="Vote: ",
                     what="vote tuple (1, 0) or (0, 1)" if reading == "binary" else "vote tuple")


def code_reading(form: TupleForm, agent: str, text: str) -> Judgment:
    """``unreadable="code"``: the released code's reading, a reply without a tuple counts as ``(0, 0)``."""
    try:
        return form.read(agent, text)
    except UnreadableReply:
        return Judgment(agent=agent, kind=TaskKind.PAIRWISE, raw=text, score_1=0, score_2=0, label="tie",
                        reason="no tuple in the reply: (0, 0), as the released code reads it")


# --- the jury's personas -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Juror:
    """A juror: its agent name (``Jury1``...), its persona's name in the pool and the identity its prompt states."""

    agent: str
    persona: str
    identity: str


def persona_pool() -> list[dict[str, str]]:
    """The released pool of 50 personas (name, identity, domain, focus)."""
    return list(load_json("d3/personas")["pool"])


def draw_jury(n: int, personas: Personas | Sequence[str] = "pool", seed: int | None = None) -> list[Juror]:
    """The ``n`` jurors: ``pool`` (a sample of the 50-persona pool with ``seed``, the draw of the released
    ``personas.get_random_personas(n, seed=seed)``: ``random.seed(seed); random.sample(pool, n)``), ``curated``
    (the released SAMRE and MORE code: the curated five, cycled), or a list of pool names, cycled."""
    pool = {p["name"]: p for p in persona_pool()}
    if n < 1:
        raise ValueError("jurors must be at least 1")
    if personas == "pool":
        if n > len(pool):
            raise ValueError(f"jurors: a jury drawn from the pool is drawn without replacement from its {len(pool)} "
                             f"personas; {n} is too many")
        chosen = random.Random(seed).sample(list(pool.values()), n)
    else:
        names = list(load_json("d3/personas")["curated"]) if personas == "curated" else list(personas)
        unknown = [name for name in names if name not in pool]
        if unknown or not names:
            raise ValueError(f"unknown persona(s) {unknown or names}: the jury's personas are 'pool', 'curated' or "
                             "names of the pool (prompts/d3/personas.json)")
        chosen = [pool[names[i % len(names)]] for i in range(n)]
    return [Juror(f"Jury{i}", p["name"], p["identity"]) for i, p in enumerate(chosen, 1)]


# --- what the agents hear --------------------------------------------------------------------------------------


def system_message(agent: str) -> SystemMessage:
    return SystemMessage(render(d3_prompt("system"), name=agent))


def python_scores(scores: Sequence[tuple[int, int]]) -> str:
    """``previous_scores`` as the code's ``str.format`` prints a list of tuples: ``[(95, 87), (90, 88)]``."""
    return str([(int(a), int(b)) for a, b in scores])


def latest(records: Sequence[dict[str, Any]], **where: Any) -> dict[str, Any] | None:
    """The last record whose fields equal ``where``."""
    found = [r for r in records if all(r.get(k) == v for k, v in where.items())]
    return found[-1] if found else None


def argument(arguments: Sequence[dict[str, Any]], **where: Any) -> str:
    """The text of the argument ``where`` names (the graph's order guarantees it was said)."""
    found = latest(arguments, **where)
    if found is None:
        raise LookupError(f"no argument {where} in the debate so far")
    return str(found["text"])


def round_scores(state: dict[str, Any]) -> list[tuple[int, int] | None]:
    """Each judged round's score tuple, None where the judge's reply had none."""
    return [None if r.get("score_1") is None else (int(r["score_1"]), int(r["score_2"]))
            for r in state.get("judge_rounds") or []]


def latest_feedback(state: dict[str, Any]) -> str:
    rounds = state.get("judge_rounds") or []
    return str(rounds[-1]["feedback"]) if rounds else ""


def anonymize(text: str) -> str:
    """``anonymizer.anonymize_transcript``: the advocates' names become Defense A / B (longest name first, any
    case). "Advocate 1" with a space, as the judge's prompt writes it, is left as it is, as in the code."""
    for name, anonymous in _ANONYMOUS:
        text = re.sub(re.escape(name), anonymous, text, flags=re.IGNORECASE)
    return text


_RULE, _THIN = "=" * 60, "-" * 40


def compile_transcript(item: EvalItem, arguments: Sequence[dict[str, Any]],
                       judge_rounds: Sequence[dict[str, Any]]) -> str:
    """The anonymized transcript the jury reads, laid out as ``anonymizer.compile_anonymized_transcript``: the
    question, both answers, then per round the two sides' arguments and the judge's feedback with the scores. A round
    whose score is missing shows its feedback without a scores line (the code would print 0 and 0)."""
    lines = [_RULE, "DEBATE TRANSCRIPT (ANONYMIZED)", _RULE, "", "QUESTION:", item.question or "", "",
             "CANDIDATE ANSWERS:", _THIN, "Defense A's Position:", item.response_1 or "", "",
             "Defense B's Position:", item.response_2 or "", "", "DEBATE ARGUMENTS:", _THIN]
    ordered = sorted(arguments, key=lambda a: (a["round"], a["side"]))
    for i, argument in enumerate(ordered):
        number = i // 2 + 1  # the code counts rounds by pairs of arguments
        if i % 2 == 0:
            lines.append(f"\n--- Round {number} ---")
        lines += [f"\n{anonymize(argument['speaker'])}:", anonymize(argument["text"])]
        if i % 2 == 1 and i // 2 < len(judge_rounds):
            judged = judge_rounds[i // 2]
            lines += [f"\nJudge's Round {number} Feedback:", anonymize(judged["feedback"])]
            if judged.get("score_1") is not None:
                lines.append(f"Scores: Defense A: {judged['score_1']}, Defense B: {judged['score_2']}")
    lines += ["", _RULE, "END OF TRANSCRIPT", _RULE]
    return "\n".join(lines)


# --- SAMRE's budgeted stopping ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stopping:
    """``convergence.BudgetConfig`` as SAMRE's run uses it: at most ``max_rounds``; stop when the debate's tokens
    exceed ``token_budget`` (None: never, as in the released code, which records 0 tokens per round); stop when the
    score gaps converged (:func:`converged`)."""

    max_rounds: int = 5
    epsilon: float = 5.0
    window: int = 3
    min_rounds: int = 3
    token_budget: int | None = None


def converged(scores: Sequence[tuple[int, int] | None], epsilon: float, window: int, min_rounds: int) -> bool:
    """``convergence.check_convergence``: after at least ``max(window, min_rounds)`` rounds, the gaps
    ``|s1 - s2|`` of the last ``window`` rounds lie within less than ``epsilon`` of each other and do not move
    strictly one way (all equal converges). A round without a score in the window means not converged."""
    if len(scores) < max(window, min_rounds):
        return False
    recent = scores[-window:]
    if any(s is None for s in recent):
        return False
    gaps = [abs(s[0] - s[1]) for s in recent if s is not None]
    if max(gaps) - min(gaps) >= epsilon:
        return False
    if len(set(gaps)) == 1:
        return True
    pairs = list(pairwise(gaps))
    return not (all(a < b for a, b in pairs) or all(a > b for a, b in pairs))


def stop_reason(scores: Sequence[tuple[int, int] | None], tokens: int, stopping: Stopping) -> str | None:
    """``BudgetedStoppingController.should_stop`` after a round, with its reasons: R reached, the token budget
    exceeded, converged; None: debate on."""
    if len(scores) >= stopping.max_rounds:
        return "max_rounds_reached"
    if stopping.token_budget is not None and tokens > stopping.token_budget:
        return "token_budget_exceeded"
    if converged(scores, stopping.epsilon, stopping.window, stopping.min_rounds):
        return "converged"
    return None


# --- the nodes ---------------------------------------------------------------------------------------------------


def _request(agent: str, role: str, prompt: str, form: AnswerForm | None = None) -> ModelRequest:
    return ModelRequest(agent=agent, role=role, messages=[system_message(agent), HumanMessage(prompt)], form=form,
                        params=dict(D3_PARAMS))


def _exchange(request: ModelRequest, reply: ModelReply) -> list[BaseMessage]:
    """A call as its agent's history keeps it: what was sent, then the reply."""
    return [*request.messages, reply.message]


def _tokens(*replies: ModelReply) -> int:
    """The tokens of these replies' calls (input and output), from the replies themselves, so that a cached or
    resumed answer counts as a paid one and the token budget stops a debate at the same round either way."""
    total = 0
    for reply in replies:
        meta = reply.message.usage_metadata
        if meta:
            total += int(meta.get("input_tokens", 0)) + int(meta.get("output_tokens", 0))
    return total


def _said(agent: str, text: str, **metadata: Any) -> AIMessage:
    return AIMessage(text, name=agent, response_metadata=metadata)


def _sides(item: EvalItem, side: int) -> tuple[str, str]:
    """(the answer this side defends, the opponent's answer)."""
    first, second = item.response_1 or "", item.response_2 or ""
    return (first, second) if side == 1 else (second, first)


def make_samre_advocate_node(side: int, name: str) -> RunnableLambda:
    """SAMRE's advocate of answer ``side``: its defense from the opponent's last argument and the judge's last
    feedback, then its summary of it (the Summarizer action). The summary is its argument: nobody hears the defense."""
    agent = f"Advocate{side}"

    def body(state: dict[str, Any]):
        item = pairwise_item(state)
        answer, opponent_answer = _sides(item, side)
        number = int(state.get("round") or 0) + 1
        opponent = latest(state.get("arguments") or [], side=3 - side)
        defend = _request(agent, "advocate", render(
            d3_prompt("samre_advocate"), answer=answer, question=item.question, opponent_answer=opponent_answer,
            feedback=latest_feedback(state), opponent_argument=opponent["text"] if opponent else ""))
        defense = yield defend
        summarize = _request(agent, "advocate", render(d3_prompt("summarizer"), content=defense.message.text))
        summary = yield summarize
        return {"arguments": [{"round": number, "side": side, "speaker": agent, "agent": agent,
                               "text": summary.message.text}],
                "histories": {agent: [*_exchange(defend, defense), *_exchange(summarize, summary)]},
                "transcript": [_said(agent, defense.message.text, round=number),
                               _said(agent, summary.message.text, round=number, summary=True)],
                "debate_tokens": _tokens(defense, summary)}

    return agent_node(body, name)


def make_samre_judge_node(stopping: Stopping, unread_summary: bool, unreadable: Unreadable | str,
                          name: str = "judge") -> RunnableLambda:
    """SAMRE's judge: scores the round's two arguments (its reply's last tuple); its evaluation, with the code's
    ``Scores: (s1, s2)`` line, is the advocates' next feedback. Then, as the code does, it summarises its evaluation
    (``unread_summary``: a call whose text nobody reads). Decides whether the debate goes on (:func:`stop_reason`)."""
    form = judge_form("samre")

    def body(state: dict[str, Any]):
        item = pairwise_item(state)
        number = int(state.get("round") or 0) + 1
        arguments = state.get("arguments") or []
        previous = [s for s in round_scores(state) if s is not None]
        prompt = render(d3_prompt("samre_judge"), question=item.question, answer1=item.response_1,
                        answer2=item.response_2, current_round=number, max_rounds=stopping.max_rounds,
                        previous_scores=python_scores(previous),
                        defense1=argument(arguments, round=number, side=1),
                        defense2=argument(arguments, round=number, side=2))
        judge = _request(JUDGE, "judge", prompt, form if unreadable == "missing" else None)
        reply = yield judge
        judgment = reply.judgment if unreadable == "missing" else code_reading(form, JUDGE, reply.message.text)
        judgment = judgment or Judgment.missing_for(JUDGE, TaskKind.PAIRWISE, reply.message.text, "no reply", 1)
        heard = reply.message.text
        if not judgment.missing:
            heard += f"\n\nScores: ({format_number(judgment.score_1 or 0)}, {format_number(judgment.score_2 or 0)})"
        replies = [reply]
        history = _exchange(judge, reply)
        if unread_summary:
            summarize = _request(JUDGE, "judge", render(d3_prompt("summarizer"), content=heard))
            summary = yield summarize
            replies.append(summary)
            history += _exchange(summarize, summary)
        record = {"round": number, "feedback": heard, **_scores_of(judgment)}
        scores = [*round_scores(state), None if judgment.missing else (int(judgment.score_1 or 0),
                                                                       int(judgment.score_2 or 0))]
        tokens = int(state.get("debate_tokens") or 0) + _tokens(*replies)
        rounds = [*(state.get("judge_rounds") or []), record]
        return {"judge_rounds": [record], "round": number, "stopped": stop_reason(scores, tokens, stopping),
                "debate_tokens": _tokens(*replies), "histories": {JUDGE: history},
                "transcript": [_said(JUDGE, heard, round=number)],
                "judgments": {JUDGE: court_result(rounds, reply.message.text).to_state()}}

    return agent_node(body, name)


def _scores_of(judgment: Judgment) -> dict[str, Any]:
    if judgment.missing:
        return {"missing": True, "reason": judgment.reason}
    return {"score_1": int(judgment.score_1 or 0), "score_2": int(judgment.score_2 or 0)}


def court_result(rounds: Sequence[dict[str, Any]], raw: str) -> Judgment:
    """The judge's own result, as the released experiments compute it: SAMRE's mean score tuple over its rounds
    (MORE has one), the label from the two means; missing when no round was scored."""
    scored = [r for r in rounds if r.get("score_1") is not None]
    if not scored:
        return Judgment.missing_for(JUDGE, TaskKind.PAIRWISE, raw, "no round was scored", 1)
    s1, s2 = fmean(r["score_1"] for r in scored), fmean(r["score_2"] for r in scored)
    return Judgment(agent=JUDGE, kind=TaskKind.PAIRWISE, raw=raw, score_1=s1, score_2=s2, label=pairwise_label(s1, s2))


def group_name(side: int) -> str:
    return f"AdvocateGroup{side}"


def make_more_advocate_node(side: int, index: int, advocates: int, name: str) -> RunnableLambda:
    """One of MORE's ``advocates`` advocates of answer ``side``: its defense from the opponent group's last merged
    argument, the judge's last feedback and its team's previous arguments (each teammate's last defense)."""
    agent = f"{group_name(side)}_Advocate{index}"

    def body(state: dict[str, Any]):
        item = pairwise_item(state)
        answer, opponent_answer = _sides(item, side)
        defenses = state.get("defenses") or []
        team = [latest(defenses, side=side, advocate=i) for i in range(1, advocates + 1)]
        opponent = latest(state.get("arguments") or [], side=3 - side)
        defend = _request(agent, "advocate", render(
            d3_prompt("more_advocate"), advocate_id=index, answer=answer, question=item.question,
            opponent_answer=opponent_answer, feedback=latest_feedback(state),
            opponent_argument=opponent["text"] if opponent else "",
            team_arguments=str([d["text"] if d else "" for d in team])))
        defense = yield defend
        return {"defenses": [{"side": side, "advocate": index, "agent": agent, "text": defense.message.text}],
                "histories": {agent: _exchange(defend, defense)},
                "transcript": [_said(agent, defense.message.text, round=1)]}

    return agent_node(body, name)


def make_more_aggregator_node(side: int, name: str) -> RunnableLambda:
    """MORE's aggregator of group ``side``: merges its advocates' defenses (in advocate order) into the group's
    argument, which the judge, the scorer, the other group and the jury hear."""
    agent = f"{group_name(side)}_Aggregator"

    def body(state: dict[str, Any]):
        item = pairwise_item(state)
        answer, opponent_answer = _sides(item, side)
        own = sorted((d for d in state.get("defenses") or [] if d["side"] == side), key=lambda d: d["advocate"])
        aggregate = _request(agent, "aggregator", render(
            d3_prompt("more_aggregator"), answer=answer, question=item.question, opponent_answer=opponent_answer,
            defenses="\n".join(d["text"] for d in own), feedback=latest_feedback(state)))
        merged = yield aggregate
        return {"arguments": [{"round": 1, "side": side, "speaker": group_name(side), "agent": agent,
                               "text": merged.message.text}],
                "histories": {agent: _exchange(aggregate, merged)},
                "transcript": [_said(agent, merged.message.text, round=1)]}

    return agent_node(body, name)


def _more_defenses(state: dict[str, Any]) -> dict[str, str]:
    arguments = state.get("arguments") or []
    return {"defense1": argument(arguments, side=1), "defense2": argument(arguments, side=2)}


def make_more_judge_node(name: str = "judge") -> RunnableLambda:
    """MORE's judge: feedback on the two merged arguments, no score (the scorer scores)."""

    def body(state: dict[str, Any]):
        item = pairwise_item(state)
        judge = _request(JUDGE, "judge", render(
            d3_prompt("more_judge"), question=item.question, answer1=item.response_1, answer2=item.response_2,
            current_round=1, total_rounds=1, previous_scores=python_scores([]), **_more_defenses(state)))
        reply = yield judge
        return {"histories": {JUDGE: _exchange(judge, reply)},
                "transcript": [_said(JUDGE, reply.message.text, round=1)]}

    return agent_node(body, name)


def make_more_scorer_node(unreadable: Unreadable | str, name: str = "scorer") -> RunnableLambda:
    """MORE's scorer: the score tuple of the two merged arguments (its reply's first tuple). The round's record is the
    judge's feedback with the scorer's scores, as the code's transcript pairs them."""
    form = judge_form("more")

    def body(state: dict[str, Any]):
        item = pairwise_item(state)
        score = _request(SCORER, "scorer", render(
            d3_prompt("more_scorer"), question=item.question, answer1=item.response_1, answer2=item.response_2,
            total_rounds=1, previous_scores=python_scores([]), **_more_defenses(state)),
            form if unreadable == "missing" else None)
        reply = yield score
        judgment = reply.judgment if unreadable == "missing" else code_reading(form, SCORER, reply.message.text)
        judgment = judgment or Judgment.missing_for(SCORER, TaskKind.PAIRWISE, reply.message.text, "no reply", 1)
        feedback = (state.get("histories") or {}).get(JUDGE, [])
        record = {"round": 1, "feedback": feedback[-1].text if feedback else "", **_scores_of(judgment)}
        return {"judge_rounds": [record], "round": 1, "histories": {SCORER: _exchange(score, reply)},
                "transcript": [_said(SCORER, reply.message.text, round=1)],
                "judgments": {SCORER: judgment.to_state()}}

    return agent_node(body, name)


def make_transcript_node(name: str = "transcript") -> RunnableLambda:
    """Transcript compilation: the anonymized record of the debate the jury reads (no model call)."""

    def run(state: dict[str, Any]) -> dict[str, Any]:
        item = pairwise_item(state)
        return {"anonymized_transcript": compile_transcript(item, state.get("arguments") or [],
                                                            state.get("judge_rounds") or [])}

    return RunnableLambda(run, name=name)


def make_juror_node(juror: Juror, mode: Mode | str, reading: VoteReading | str, unread_summary: bool,
                    unreadable: Unreadable | str, name: str) -> RunnableLambda:
    """A juror: reads the anonymized transcript (SAMRE: as its memory's only message, ``Transcript: ANONYMIZED
    DEBATE TRANSCRIPT:`` then the text; MORE: the text itself) and votes; SAMRE's juror then summarises its vote
    (``unread_summary``), as the code does."""
    form = vote_form(mode, reading)

    def body(state: dict[str, Any]):
        item = pairwise_item(state)
        transcript = str(state.get("anonymized_transcript") or "")
        context = f"Transcript: ANONYMIZED DEBATE TRANSCRIPT:\n{transcript}" if mode == "samre" else transcript
        vote = _request(juror.agent, "juror", render(d3_prompt(f"{mode}_juror"), identity=juror.identity,
                                                     question=item.question, context=context),
                        form if unreadable == "missing" else None)
        reply = yield vote
        judgment = reply.judgment if unreadable == "missing" else code_reading(form, juror.agent, reply.message.text)
        judgment = judgment or Judgment.missing_for(juror.agent, TaskKind.PAIRWISE, reply.message.text, "no reply", 1)
        history = _exchange(vote, reply)
        if unread_summary:
            summarize = _request(juror.agent, "juror", render(d3_prompt("summarizer"), content=reply.message.text))
            summary = yield summarize
            history += _exchange(summarize, summary)
        return {"judgments": {juror.agent: judgment.to_state()}, "histories": {juror.agent: history},
                "transcript": [_said(juror.agent, reply.message.text, persona=juror.persona)]}

    return agent_node(body, name)


def make_verdict_node(mode: Mode | str, jurors: Sequence[Juror], *, verdict: Literal["jury", "judge"] = "jury",
                      ties: Ties | str = "keep", detail: dict[str, Any] | None = None,
                      name: str = "verdict") -> RunnableLambda:
    """The verdict: the jury's tally (each readable vote tuple added up, as the code adds them), the answer with
    more votes; equal votes a tie (``ties="code"``: the second answer, as the code's ``else "Defense B"``). With
    ``verdict="judge"``: the judge's own result instead (SAMRE's mean round scores, MORE's scorer). The detail
    records the jury, the rounds, why the debate stopped, the round scores and both results."""
    judge_agent = JUDGE if mode == "samre" else SCORER
    static = dict(detail or {})

    def label_of(first: float, second: float) -> PairwiseLabel:
        label = pairwise_label(first, second)
        return "2" if label == "tie" and ties == "code" else label

    def run(state: dict[str, Any]) -> dict[str, Any]:
        stored = state.get("judgments") or {}
        votes = [Judgment.model_validate(stored[j.agent]) for j in jurors if j.agent in stored]
        readable = [v for v in votes if not v.missing]
        n_missing = len(jurors) - len(readable)
        tally = {"1": int(sum(v.score_1 or 0 for v in readable)), "2": int(sum(v.score_2 or 0 for v in readable))}
        judge = Judgment.model_validate(stored[judge_agent]) if judge_agent in stored else None
        judge_label = None if judge is None or judge.missing else label_of(judge.score_1 or 0, judge.score_2 or 0)
        judge_result = None if judge_label is None else {
            "score_1": judge.score_1, "score_2": judge.score_2, "label": judge_label}  # type: ignore[union-attr]
        info = {**static, "rounds": int(state.get("round") or 0), "stopped": state.get("stopped"),
                "round_scores": [list(s) if s else None for s in round_scores(state)],
                "jury_votes": tally, "judge": judge_result, "verdict_by": verdict}
        if verdict == "judge":
            if judge_result is None:
                result = Verdict(kind=TaskKind.PAIRWISE, method="judge", missing=True, n_missing=1,
                                 detail={**info, "reason": judge.reason if judge else "the judge gave no judgment"})
            else:
                result = Verdict(kind=TaskKind.PAIRWISE, method="judge", label=judge_label,
                                 score_1=judge.score_1, score_2=judge.score_2, n_judgments=1,  # type: ignore[union-attr]
                                 detail=info)
        elif not readable:
            result = Verdict(kind=TaskKind.PAIRWISE, method="jury vote", missing=True, n_missing=n_missing,
                             detail={**info, "reason": "no juror's vote could be read"})
        else:
            result = Verdict(kind=TaskKind.PAIRWISE, method="jury vote", label=label_of(tally["1"], tally["2"]),
                             score_1=tally["1"], score_2=tally["2"], votes=tally, n_judgments=len(readable),
                             n_missing=n_missing, detail=info)
        return {"verdict": result.to_state()}

    return RunnableLambda(run, name=name)


__all__ = ["D3_PARAMS", "JUDGE", "MODES", "PERSONA_CHOICES", "SCORER", "TIES", "UNREADABLE", "VOTE_READINGS", "Juror",
           "Stopping", "TupleForm", "anonymize", "argument", "compile_transcript", "converged", "court_result",
           "d3_prompt", "draw_jury", "judge_form", "make_juror_node", "make_more_advocate_node",
           "make_more_aggregator_node", "make_more_judge_node", "make_more_scorer_node", "make_samre_advocate_node",
           "make_samre_judge_node", "make_transcript_node", "make_verdict_node", "persona_pool", "python_scores",
           "stop_reason", "vote_form"]
