"""FairEval's own evaluator (Wang et al. 2023, released FairEval.py): one request per answer order that
samples k reviews with FairEval's system prompt, its rating template and its answer form
("Score of the Assistant 1: <score>").

FairEval.py sends ``[system, user]`` with ``temperature=1, max_tokens=512, n=k`` (MEC: k evidence samples in
ONE request); with BPC it sends the same request with the two answers swapped, and reads each review's
scores back in the original order.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableLambda

from jurygraph.judging.extraction import AnswerForm
from jurygraph.judging.items import EvalItem, Scale, TaskKind, as_item
from jurygraph.judging.judgments import Judgment, pairwise_label
from jurygraph.llm.calls import ModelReply, ModelRequest, agent_node
from jurygraph.nodes.conversation import conversation_slots
from jurygraph.prompts import load_prompt, render, select_template

FAIREVAL_AGENT = "FairEval"
FAIREVAL_SCALE = Scale(low=1, high=10)  # "an overall score on a scale of 1 to 10"
# FairEval.py query_gpt: temperature=1, max_tokens=512, n=k
FAIREVAL_PARAMS: dict[str, Any] = {"temperature": 1, "max_tokens": 512}


def faireval_messages(item: EvalItem) -> tuple[SystemMessage, HumanMessage, AnswerForm]:
    """FairEval's gen_prompt(question, answer_1, answer_2): the system prompt, the user prompt, the form."""
    if item.task is not TaskKind.PAIRWISE:
        raise ValueError(f"item {item.id!r}: FairEval's evaluator compares two answers (pairwise items), "
                         f"not a {item.task.value} item")
    if item.conversational:  # jurygraph's conversation prompt, FairEval's answer form
        slots = conversation_slots(item, scale=item.scale or FAIREVAL_SCALE)
        rating = render(load_prompt("faireval/conversation_rating"), **slots)
        slots["prompt"] = rating
    else:
        rating = load_prompt("faireval/rating")
        slots = {"question": item.question or "", "answer_1": item.response_1 or "",
                 "answer_2": item.response_2 or "", "prompt": rating}
    template = select_template("faireval", task=TaskKind.PAIRWISE.value, conversation=item.conversational)
    assert template is not None  # the table has FairEval's template and its conversation form
    # the released template ends with "\n" after the rating prompt; the loader strips a file's last newline
    user = render(load_prompt(template), **slots) + "\n"
    reminder = rating[rating.index("Output with the following format:"):]
    form = AnswerForm(TaskKind.PAIRWISE, reminder, scale=item.scale or FAIREVAL_SCALE)
    return SystemMessage(load_prompt("faireval/system")), HumanMessage(user), form


def in_original_order(judgment: Judgment) -> Judgment:
    """A review of the swapped item, stated for the original order (FairEval: ``score2, score1 = parse(...)``)."""
    if judgment.missing or judgment.score_1 is None or judgment.score_2 is None:
        return judgment
    return judgment.model_copy(update={"score_1": judgment.score_2, "score_2": judgment.score_1,
                                       "label": pairwise_label(judgment.score_2, judgment.score_1)})


def make_faireval_node(order: str, *, swapped: bool, k: int = 3, params: dict[str, Any] | None = None,
                       agent: str = FAIREVAL_AGENT) -> RunnableLambda:
    """One answer order: ONE request for k sampled reviews (n = k). Each review is a judgment
    ``"<order> #<i>"`` as the model said it (in the order it was shown); unreadable reviews are missing."""
    if k < 1:
        raise ValueError("FairEval needs k >= 1 evidence samples")
    call_params = dict(FAIREVAL_PARAMS if params is None else params)

    def body(state: dict[str, Any]):
        item = as_item(state["item"])
        system, user, form = faireval_messages(item.swapped() if swapped else item)
        reply: ModelReply = yield ModelRequest(agent=agent, role="referee", messages=[system, user], form=form,
                                               n=k, params=call_params)
        if k > 1:
            texts, judgments = [m.text for m in reply.samples], list(reply.sample_judgments)
        else:
            assert reply.judgment is not None  # a form was given
            texts, judgments = [reply.message.text], [reply.judgment]
        spoken = [AIMessage(text, name=f"{order} #{i}") for i, text in enumerate(texts, 1)]
        named = {f"{order} #{i}": j.model_copy(update={"agent": f"{order} #{i}"}) for i, j in enumerate(judgments, 1)}
        return {"judgments": {name: j.to_state() for name, j in named.items()},
                "histories": {order: [system, user, *spoken]}, "transcript": spoken}

    return agent_node(body, order)
