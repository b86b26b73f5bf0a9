"""DEBATE's agents (Kim, Kim, Yoon): Commander, Scorer, Critic (Devil's Advocate), Tie-breaker.

Roles, as Section 2 and Appendix D.1 describe them:

- The Commander formulates the prompt from the predefined template (Algorithm 1 line 3) and *relays*:
  it passes the Scorer's response to the Critic (line 6) and the Critic's feedback to the Scorer
  (line 11); "the Commander acts as collective memory". The relays forward what was said, verbatim
  (the transcripts of Appendix H show no Commander words), so they make no model call. Framing is a
  *predefined* template (Section 2: "consistent debate standards"), so by default the Commander
  builds P itself: the template plus the zero-shot CoT request its G.1 system message describes
  ("tell other agents think step-by-step"). The paper also calls the Commander an LLM agent (D.1,
  E.2: an AutoGen AssistantAgent with that system message): ``commander_llm=True`` makes the framing
  a real Commander model call whose reply goes to the Scorer under the task.
  Its own chat -- everything it sent and received -- is kept in ``histories["Commander"]``.
- The Scorer and the Critic are LLM agents with their G.1 / Section 2 system messages. Each keeps its
  real chat (system, the Commander's messages as user turns, its replies) in ``histories[agent]``, and
  sends exactly that chat to its model: what is in the history is what the model saw.
- The Tie-breaker (Appendix E.3) reads the whole debate log and gives the final score.

Which agent speaks next is decided by :func:`next_step` from the iteration counter and the Critic's
last review; the graph (``graphs/debate.py``) routes the Commander's conditional edge by it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableLambda

from jurygraph.judging.aspects import aspect_title, get_aspect, scale_of
from jurygraph.judging.extraction import AnswerForm
from jurygraph.judging.items import EvalItem, Scale, TaskKind, as_item, format_number
from jurygraph.judging.judgments import Judgment, Verdict
from jurygraph.llm.calls import ModelRequest, agent_node
from jurygraph.nodes.common import render_history
from jurygraph.nodes.conversation import conversation_slots
from jurygraph.nodes.geval import RELEASED_SCALES
from jurygraph.prompts import load_prompt, render, select_template

COMMANDER, SCORER, CRITIC, TIE_BREAKER = "Commander", "Scorer", "Critic", "Tie-breaker"
Step = Literal["scorer", "critic", "tie_breaker", "finalize"]

CRITIC_PERSONAS: dict[str, str] = {
    "plain": "critic_plain",  # G.1 Critic(Plain): the paper's MultiAgent baseline
    "weak": "critic_weak",  # G.1 Critic(Weakly Negative)
    "moderate": "critic_moderate",  # G.1 Critic(Moderate Negative)
    "strict": "critic_strict",  # Section 2: DEBATE's Devil's Advocate (strictly negative), the default
    "sophisticated": "critic_sophisticated",  # Appendix C
}


def debate_prompt(name: str) -> str:
    """A ``prompts/debate`` template (the core loader drops its ``#:`` provenance lines)."""
    return load_prompt(f"debate/{name}")


# --- "NO ISSUE": when the Critic ends the debate ---------------------------------------------------

# The papers spell the Critic's all-clear "NO ISSUE" (Algorithm 1, D.1, H), "NO_ISSUES" (G.1) and
# "NO ISSUES" (Appendix C); 003's extraction even escapes it as "NO\_ISSUES".
_TOKEN = r"no[ _]issues?"
# what may stand before the token on its line: a short label ("Verdict:") or a concluding word
_LEAD_IN = r"[A-Za-z][\w ]{0,30}:\s*|(?:therefore|thus|hence|so|overall|finally|in (?:conclusion|summary)),?\s+"
_MARKUP = re.compile(r"[*`#>\\\"“”‘’]")


# the SummEval consistency/fluency/relevance templates: G-Eval's released ones (the paper's "Liu et al.") or the
# project's own in the G.2 frame
SummEvalTemplates = Literal["geval", "jurygraph"]
SUMMEVAL_TEMPLATES: tuple[str, ...] = ("geval", "jurygraph")

NoIssueRule = Literal["paper", "strict"]
NO_ISSUE_RULES: tuple[str, ...] = ("paper", "strict")
# Algorithm 1 line 8 tests 'NO ISSUE' in Feedback; the personas ask for "NO_ISSUES" (G.1), which that literal
# test would never find, so the paper rule also accepts the underscore spelling (and its markdown escape)
_PAPER_TOKENS = ("NO ISSUE", "NO_ISSUE")
# every DEBATE agent: temperature 0, top_p 1 (Appendix E.1; its frequency/presence penalties 0 are the providers'
# defaults and are not sent, since Gemini and local models have no such parameters)
DEBATE_PARAMS: dict[str, Any] = {"temperature": 0, "top_p": 1}


def no_issue_in(feedback: str) -> bool:
    """The paper's rule (Algorithm 1 line 8): the capitals NO ISSUE anywhere in the Critic's reply.

    "The score is accurate. NO ISSUES" ends the debate; "No issues." does not (not in capitals); a
    critique that writes "NO ISSUE with the first point, but ..." does end it, as in the paper.
    """
    text = feedback.replace("\\_", "_")
    return any(token in text for token in _PAPER_TOKENS)


def ends_debate(feedback: str, rule: NoIssueRule | str = "paper") -> bool:
    """Does this Critic reply end the debate under ``rule``: 'paper' (:func:`no_issue_in`, the default)
    or 'strict' (:func:`says_no_issue`, a project option)?"""
    if rule == "paper":
        return no_issue_in(feedback)
    if rule == "strict":
        return says_no_issue(feedback)
    raise ValueError(f"unknown NO ISSUE rule {rule!r}; choose one of {', '.join(NO_ISSUE_RULES)}")


def says_no_issue(feedback: str) -> bool:
    """The strict rule (an option, ``no_issue_rule="strict"``): the Critic's reply declares that the
    score has no issue.

    Algorithm 1 tests ``'NO ISSUE' in Feedback``. A bare substring test also fires on a critique such
    as "There is no issue with the grammar, however the score is too high", so the rule is: after
    markdown and quotes are removed,

    1. some line consists of the token alone, optionally after a short label and with final
       punctuation ("NO ISSUE.", "**NO_ISSUES**", "- No issues", "Verdict: NO ISSUE"), or after a
       concluding word ("Therefore, NO ISSUES."), any case; or
    2. the reply *opens* with the token in capitals, followed by the end, a line break, ".", "!" or
       ":" ("NO ISSUES. The score is accurate.").

    The token inside a sentence ("there is no issue with X", "I cannot say NO ISSUE here",
    "NO ISSUE with the first point, but ...") does not end the debate.
    """
    text = _MARKUP.sub("", feedback)
    for line in text.splitlines():
        core = line.strip().lstrip("-•").strip().strip("_'").strip()
        if re.fullmatch(rf"(?:{_LEAD_IN})?_*{_TOKEN}_*\s*[.!]*", core, flags=re.IGNORECASE):
            return True
    opening = text.lstrip().lstrip("-•_'").lstrip()
    return re.match(r"NO[ _]ISSUES?_*\s*(?:$|\n|[.!:])", opening) is not None


# --- the predefined template: the task and aspect the Commander frames ------------------------------


@dataclass(frozen=True)
class CriticPersona:
    """The Critic's system message: one of the paper's personas (by name) or your own text."""

    name: str
    text: str

    @classmethod
    def of(cls, persona: str | CriticPersona) -> CriticPersona:
        if isinstance(persona, CriticPersona):
            return persona
        if persona not in CRITIC_PERSONAS:
            raise KeyError(f"unknown critic persona {persona!r}; the paper's are {', '.join(CRITIC_PERSONAS)} "
                           "(or pass CriticPersona(name, text))")
        return cls(persona, debate_prompt(CRITIC_PERSONAS[persona]))

    @property
    def names_stop_token(self) -> bool:
        """Does the persona tell the Critic how to end the debate? (Section 2's strict prompt does not.)"""
        return re.search(_TOKEN, self.text.replace("\\", ""), flags=re.IGNORECASE) is not None


@dataclass(frozen=True)
class DebateFrame:
    """P = C(T, A) for one item: the filled predefined template and how its score is read."""

    task: str
    aspect_title: str
    scale: Scale
    answer_form: str
    form: AnswerForm
    tie_breaker_system: str



def _need(item: EvalItem, field: str, dataset: str) -> str:
    value = getattr(item, field)
    if not value:
        raise ValueError(f"item {item.id!r}: a {dataset} item for DEBATE needs {field!r}")
    return str(value)


def frame_task(item: EvalItem, template: str | None = None,
               summeval_templates: SummEvalTemplates | str = "geval") -> DebateFrame:
    """The predefined template for the item's dataset and aspect, filled with the item, from the table of
    templates. SummEval: coherence is G.2 (the paper prints it; it is G-Eval's ``coh_detailed.txt``), and the
    paper "refer[s] to the prompts used in Liu et al. (2023)" for the others, so consistency, fluency and
    relevance are G-Eval's released ``*_detailed.txt`` (``summeval_templates="geval"``; fluency on G-Eval's 1-3
    scale, as released) or the project's own in the G.2 frame (``"jurygraph"``, 1-5). Topical-Chat and other
    items: the project's own in the G.2 frame. A prompt that states its own scale is read on it. ``template``
    replaces the built-in text and may use the slots source_text, summary, generated_text, conversation, fact,
    response, aspect, aspect_title, aspect_definition, scale, scale_low, scale_high, form_header (a conversation
    item: jurygraph's conversation template, with the slots of
    :func:`jurygraph.nodes.conversation.conversation_slots`)."""
    if item.task is not TaskKind.SCORE:
        raise ValueError(f"item {item.id!r}: DEBATE scores one item on one aspect; {item.task.value} items are "
                         "not supported")
    if item.conversational:
        return _conversation_frame(item, template)
    if not item.aspect:
        raise ValueError(f"item {item.id!r}: DEBATE needs the aspect to score (item.aspect)")
    if summeval_templates not in SUMMEVAL_TEMPLATES:
        raise ValueError(f"unknown SummEval templates {summeval_templates!r}; choose one of "
                         f"{', '.join(SUMMEVAL_TEMPLATES)}")
    aspect = get_aspect(item.dataset, item.aspect)
    where = {"task": TaskKind.SCORE.value, "dataset": aspect.dataset if aspect else None, "aspect": item.aspect}
    builtin = select_template("debate", **where, variant=None if summeval_templates == "geval" else "jurygraph")
    tie_breaker = select_template("debate-tie-breaker", **where)
    assert builtin is not None and tie_breaker is not None  # the table has a generic one for score items
    # a released G-Eval prompt states its own scale in its text (fluency 1-3): the reply is read on it
    scale = RELEASED_SCALES.get(builtin, scale_of(item, aspect)) if template is None else scale_of(item, aspect)
    slots: dict[str, Any] = {
        "aspect": item.aspect, "aspect_title": aspect_title(item.aspect),
        "aspect_definition": (aspect.definition.split(" - ", 1)[-1] if aspect
                              else str(item.meta.get("aspect_definition", ""))),
        "scale": str(scale), "scale_low": format_number(scale.low), "scale_high": format_number(scale.high),
        "source_text": item.source or "", "summary": item.response or "", "conversation": item.source or "",
        "fact": item.context or "", "response": item.response or "", "generated_text": item.response or "",
        "form_header": load_prompt("geval/form").partition("\n")[0],
    }
    if aspect is not None and aspect.dataset == "summeval":
        _need(item, "response", "SummEval")
        if aspect.name != "fluency":
            _need(item, "source", "SummEval")
    elif aspect is not None and aspect.dataset == "topical-chat":
        for field in ("source", "context", "response"):
            _need(item, field, "Topical-Chat")
    task = render(template if template is not None else load_prompt(builtin), **slots)
    answer_form = render(debate_prompt("answer_form"), **slots)
    title = slots["aspect_title"]
    form = AnswerForm(TaskKind.SCORE, answer_form, scale=scale, labels=(title, f"{title} ({scale})"))
    return DebateFrame(task, title, scale, answer_form, form, load_prompt(tie_breaker))


def _conversation_frame(item: EvalItem, template: str | None) -> DebateFrame:
    """P = C(T, A) for a conversation item: jurygraph's conversation template, the rubric of its aspect."""
    slots = conversation_slots(item, scale=scale_of(item, None))
    where = {"task": TaskKind.SCORE.value, "conversation": True}
    builtin, tie_breaker = select_template("debate", **where), select_template("debate-tie-breaker", **where)
    assert builtin is not None and tie_breaker is not None  # the table has conversation templates for DEBATE
    task = render(template if template is not None else load_prompt(builtin), **slots)
    answer_form = render(debate_prompt("answer_form"), **slots)
    title, scale = slots["aspect_title"], scale_of(item, None)
    form = AnswerForm(TaskKind.SCORE, answer_form, scale=scale, labels=(title, f"{title} ({scale})"))
    return DebateFrame(task, title, scale, answer_form, form, load_prompt(tie_breaker))


# --- who speaks next: Algorithm 1 as a routing function ---------------------------------------------


def next_step(state: dict[str, Any], max_iterations: int, tie_breaker: bool) -> Step:
    """Algorithm 1: Score <- S(P); for i = 1..n: Feedback <- Cr(Score); break on NO ISSUE, else
    Score <- S(Feedback). ``iteration`` counts the Critic's reviews; after the n-th revision the debate
    is inconclusive: the n-th score stands (D.1) or the Tie-breaker decides (E.3)."""
    speaker = state.get("speaker")
    if speaker is None:
        return "scorer"
    if speaker == SCORER:
        if int(state.get("iteration") or 0) >= max_iterations:
            return "tie_breaker" if tie_breaker else "finalize"
        return "critic"
    if speaker == CRITIC:
        reviews = state.get("reviews") or []
        return "finalize" if reviews and reviews[-1]["no_issue"] else "scorer"
    return "finalize"


# --- the nodes --------------------------------------------------------------------------------------


def _last_said(state: dict[str, Any], agent: str) -> AIMessage:
    message = (state.get("histories") or {}).get(agent, [])[-1]
    assert isinstance(message, AIMessage), f"{agent} has not spoken yet"
    return message


def _sent(text: str, to: str) -> tuple[HumanMessage, AIMessage]:
    """A Commander message: as the receiver's user turn, and as the Commander's own (assistant) turn."""
    return HumanMessage(text, name=COMMANDER), AIMessage(text, name=COMMANDER, response_metadata={"to": to})


def make_commander_node(critic: CriticPersona, max_iterations: int, tie_breaker: bool,
                        template: str | None = None, llm: bool = False, name: str = "commander",
                        summeval_templates: SummEvalTemplates | str = "geval") -> RunnableLambda:
    """The Commander: frames the task, relays between Scorer and Critic, decides the next step.

    Relays are verbatim (Algorithm 1's C.send) and make no model call. Framing, P <- C(T, A), is
    the predefined template with the Commander's zero-shot CoT request; with ``llm=True`` the
    Commander's own model is called once there instead: it gets its G.1 system message and the task
    as the user typed it (D.1 step 1), and its reply is what it tells the Scorer, under the task.
    Every message it passes on is recorded in its own history and in the receiver's. ``summeval_templates``:
    see :func:`frame_task`.
    """
    stop_rule = "" if critic.names_stop_token else debate_prompt("stop_rule")

    def body(state: dict[str, Any]):
        frame = frame_task(as_item(state["item"]), template, summeval_templates)
        step = next_step(state, max_iterations, tie_breaker)
        speaker = state.get("speaker")
        heard: list[BaseMessage] = []
        histories: dict[str, list[BaseMessage]] = {}
        if speaker is None:  # Algorithm 1 line 3, D.1 step 2: P <- C(T, A), sent to the Scorer
            heard = [SystemMessage(debate_prompt("commander"))]
            if llm:
                task = HumanMessage(frame.task, name="user")
                reply = yield ModelRequest(agent=COMMANDER, role="commander", messages=[*heard, task],
                                           params=dict(DEBATE_PARAMS))
                heard += [task, AIMessage(reply.message.text, name=COMMANDER)]
                text = render(debate_prompt("commander_llm_to_scorer"), task=frame.task,
                              commander=reply.message.text, answer_form=frame.answer_form)
            else:
                text = render(debate_prompt("commander_to_scorer"), task=frame.task, answer_form=frame.answer_form)
            received, own = _sent(text, SCORER)
            histories[SCORER] = [SystemMessage(debate_prompt("scorer")), received]
            heard.append(own)
        else:
            heard.append(HumanMessage(_last_said(state, speaker).text, name=speaker))
        if speaker is not None and step == "critic":  # line 6, D.1 steps 4 and 6: the (revised) score
            first = int(state.get("iteration") or 0) == 0
            text = render(debate_prompt("commander_to_critic" if first else "commander_revision_to_critic"),
                          task=frame.task, scorer_reply=heard[0].text, stop_rule=stop_rule).rstrip()
            received, own = _sent(text, CRITIC)
            histories[CRITIC] = [SystemMessage(critic.text), received] if first else [received]
            heard.append(own)
        elif speaker is not None and step == "scorer":  # line 11, D.1 step 5: the feedback to the Scorer
            received, own = _sent(render(debate_prompt("commander_feedback_to_scorer"), feedback=heard[0].text,
                                         answer_form=frame.answer_form), SCORER)
            histories[SCORER] = [received]
            heard.append(own)
        elif step == "tie_breaker":  # E.3: the debate log goes to the Tie-breaker
            log = render_history([m for m in state.get("transcript") or [] if m.name in (SCORER, CRITIC)])
            received, own = _sent(render(debate_prompt("tie_breaker_task"), task=frame.task, debate_log=log,
                                         answer_form=frame.answer_form), TIE_BREAKER)
            histories[TIE_BREAKER] = [SystemMessage(frame.tie_breaker_system), received]
            heard.append(own)
        histories[COMMANDER] = heard
        return {"next_step": step, "histories": histories}

    return agent_node(body, name)


def _speaks(agent: str, text: str, iteration: int) -> AIMessage:
    return AIMessage(text, name=agent, response_metadata={"iteration": iteration})


def make_scorer_node(template: str | None = None, name: str = "scorer",
                     summeval_templates: SummEvalTemplates | str = "geval") -> RunnableLambda:
    """The Scorer: scores (iteration 0) or revises with the Critic's feedback, from its own chat."""

    def body(state: dict[str, Any]):
        frame = frame_task(as_item(state["item"]), template, summeval_templates)
        iteration = int(state.get("iteration") or 0)
        chat = list((state.get("histories") or {}).get(SCORER, []))
        reply = yield ModelRequest(agent=SCORER, role="scorer", messages=chat, form=frame.form,
                                   params=dict(DEBATE_PARAMS))
        message = _speaks(SCORER, reply.message.text, iteration)
        judgment = reply.judgment or Judgment.missing_for(SCORER, TaskKind.SCORE, message.text, "no judgment", 1)
        return {"histories": {SCORER: [message]}, "transcript": [message], "speaker": SCORER,
                "scores": [{**judgment.to_state(), "iteration": iteration}],
                "judgments": {SCORER: judgment.to_state()}}

    return agent_node(body, name)


def make_critic_node(name: str = "critic", no_issue_rule: NoIssueRule | str = "paper") -> RunnableLambda:
    """The Critic reviews the Scorer's latest response (Algorithm 1 line 7); its verdict on the
    debate (NO ISSUE or not) is read once, here, with :func:`ends_debate` under ``no_issue_rule``."""
    if no_issue_rule not in NO_ISSUE_RULES:
        raise ValueError(f"unknown NO ISSUE rule {no_issue_rule!r}; choose one of {', '.join(NO_ISSUE_RULES)}")

    def body(state: dict[str, Any]):
        iteration = int(state.get("iteration") or 0) + 1
        chat = list((state.get("histories") or {}).get(CRITIC, []))
        reply = yield ModelRequest(agent=CRITIC, role="critic", messages=chat, params=dict(DEBATE_PARAMS))
        message = _speaks(CRITIC, reply.message.text, iteration)
        return {"histories": {CRITIC: [message]}, "transcript": [message], "speaker": CRITIC,
                "iteration": iteration,
                "reviews": [{"iteration": iteration, "no_issue": ends_debate(message.text, no_issue_rule)}]}

    return agent_node(body, name)


def make_tie_breaker_node(template: str | None = None, name: str = "tie_breaker",
                          summeval_templates: SummEvalTemplates | str = "geval") -> RunnableLambda:
    """The Tie-breaker (E.3): reads the task and the debate log the Commander sent, gives the score."""

    def body(state: dict[str, Any]):
        frame = frame_task(as_item(state["item"]), template, summeval_templates)
        chat = list((state.get("histories") or {}).get(TIE_BREAKER, []))
        reply = yield ModelRequest(agent=TIE_BREAKER, role="tie_breaker", messages=chat, form=frame.form,
                                   params=dict(DEBATE_PARAMS))
        message = _speaks(TIE_BREAKER, reply.message.text, int(state.get("iteration") or 0))
        judgment = reply.judgment or Judgment.missing_for(TIE_BREAKER, TaskKind.SCORE, message.text,
                                                          "no judgment", 1)
        return {"histories": {TIE_BREAKER: [message]}, "transcript": [message], "speaker": TIE_BREAKER,
                "judgments": {TIE_BREAKER: judgment.to_state()}}

    return agent_node(body, name)


def make_finalize_node(critic: CriticPersona, max_iterations: int, name: str = "finalize") -> RunnableLambda:
    """The verdict: the Scorer's latest score after NO ISSUE, else the n-th iteration's score (D.1) or
    the Tie-breaker's (E.3). A missing score stays missing, with the reason; nothing is substituted."""

    def run(state: dict[str, Any]) -> dict[str, Any]:
        scores = state.get("scores") or []
        reviews = state.get("reviews") or []
        judgments = state.get("judgments") or {}
        if reviews and reviews[-1]["no_issue"]:
            ended, decided_by = "no_issue", SCORER
        elif TIE_BREAKER in judgments:
            ended, decided_by = "tie_breaker", TIE_BREAKER
        else:
            ended, decided_by = "iteration_limit", SCORER
        final = Judgment.model_validate(judgments[decided_by]) if decided_by in judgments else None
        missing = final is None or final.missing
        method = {"no_issue": "debate: no issue", "tie_breaker": "debate: tie-breaker",
                  "iteration_limit": "debate: iteration limit"}[ended]
        detail: dict[str, Any] = {
            "ended": ended, "decided_by": decided_by, "iterations": len(reviews), "max_iterations": max_iterations,
            "no_issue_at": reviews[-1]["iteration"] if ended == "no_issue" else None,
            "scores": [s.get("score") for s in scores], "critic": critic.name,
        }
        if missing:
            detail["reason"] = final.reason if final else f"{decided_by} gave no reply"
        verdict = Verdict(kind=TaskKind.SCORE, method=method, score=None if final is None else final.score,
                          n_judgments=0 if missing else 1, n_missing=1 if missing else 0, missing=missing,
                          detail=detail)
        return {"verdict": verdict.to_state()}

    return RunnableLambda(run, name=name)


__all__ = ["COMMANDER", "CRITIC", "CRITIC_PERSONAS", "DEBATE_PARAMS", "NO_ISSUE_RULES", "SCORER", "SUMMEVAL_TEMPLATES",
           "TIE_BREAKER",
           "CriticPersona", "DebateFrame", "debate_prompt", "ends_debate", "frame_task", "make_commander_node",
           "make_critic_node", "make_finalize_node", "make_scorer_node", "make_tie_breaker_node", "next_step",
           "no_issue_in", "says_no_issue"]
