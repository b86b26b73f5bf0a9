"""ChatEval's Single-Agent baseline: one referee, ChatEval's single-agent prompt.

The papers say the multi-agent template was used "except that we ignore some slot" (arXiv footnote 3;
ICLR Table 4: "ignore the chat history and role description slot"); blanking the slots leaves text that
still addresses other referees. The released code's single-agent config instead has its own prompt in
FairEval's style (no history, role or referee lines, the answer form inside): that is the default
(``prompts/chateval/single_faireval.txt``; the score templates ``single_*.txt`` are jurygraph's own in
the same shape). Pass ``template=`` for another. The code ran it at temperature 0 with 512 tokens. The
paper evaluates it with position calibration; wrap the graph with
:func:`jurygraph.graphs.calibration.calibrate` for that (``--protocol single`` on pairwise data does, and its
``--calibrate`` runs FairEval's own evaluator, :mod:`jurygraph.graphs.faireval`, unless ``--calibration-baseline
chateval``).
"""

from __future__ import annotations

import re
from typing import Any

from langgraph.graph import END, START, StateGraph

from jurygraph.graphs.calibration import NO_CALIBRATE
from jurygraph.graphs.faireval import create_faireval
from jurygraph.graphs.spec import Built, Option, OwnCalibration, PanelMembers, Params, ProtocolSpec, judgments_key
from jurygraph.judging.state import JuryState
from jurygraph.llm.models import JuryContext
from jurygraph.nodes.aggregator import make_aggregator_node
from jurygraph.nodes.common import node_id
from jurygraph.nodes.faireval import FAIREVAL_AGENT
from jurygraph.nodes.referee import ChatEvalTemplate
from jurygraph.nodes.solo import SINGLE_AGENT, make_solo_referee_node


def create_single_agent(
    *,
    agent: str = SINGLE_AGENT,
    template: str | None = None,
    final_prompt: str | None = None,
    state_schema: type[Any] = JuryState,
    context_schema: type[Any] = JuryContext,
) -> StateGraph:
    """An uncompiled graph where one referee judges the item (pairwise or score) with ChatEval's single-agent prompt.

    The model comes from the runtime context by ``agent`` name, else the ``"referee"`` role. The verdict
    is that referee's judgment (a missing judgment gives a missing verdict, never a default).
    """
    builder = StateGraph(state_schema, context_schema=context_schema)
    node = node_id(agent)
    frame = ChatEvalTemplate(template, final_prompt, single=True)
    builder.add_node(node, make_solo_referee_node(None, agent=agent, template=frame))
    builder.add_node("aggregate", make_aggregator_node([agent]))
    builder.add_edge(START, node)
    builder.add_edge(node, "aggregate")
    builder.add_edge("aggregate", END)
    return builder


# --- the protocol on the command line and around a run (graphs/spec.py) ---------------------------------------

CALIBRATION_BASELINE = Option(
    "calibration_baseline", str, "faireval",
    "--protocol single with --calibrate: faireval = FairEval's own evaluator prompt, k reviews in one request "
    "(default, the papers' baseline); chateval = wrap ChatEval's single-agent graph", choices=("faireval", "chateval"))
# FairEval's own evaluator names its reviews "<order> #<sample>": together they are one judge
_REVIEW = re.compile(r"^(original|swapped)_order\S* #\d+$")


def _faireval_baseline(built: Built, mode: str, values: Params) -> Built | None:
    """FairEval's calibrated single evaluator (FairEval.py): its own prompt, k reviews per order in ONE request at
    temperature 1, max_tokens 512; k = 1 without MEC, as ``FairEval.py -k 1``. None (``--calibration-baseline
    chateval``): the single agent's graph is wrapped as any protocol's is."""
    if values["calibration_baseline"] != "faireval":
        return None
    k = values["mec_k"] if "mec" in mode else 1
    graph = create_faireval(k=k, bpc="bpc" in mode,
                            params={"temperature": values["mec_temperature"], "max_tokens": 512})
    params = {**built.params, "calibrate": mode, "calibration_baseline": "faireval", "mec_k": k,
              "mec_temperature": values["mec_temperature"]}
    return Built(graph, params, built.models, built.every_agent_has_a_model)


def _member_of(key: str) -> tuple[str | None, str]:
    return (key, FAIREVAL_AGENT) if _REVIEW.match(key) else judgments_key(key)


SPEC = ProtocolSpec(
    name="single",
    factory=create_single_agent,
    help="Single-Agent baseline: one referee, ChatEval's single-agent prompt (released code; no history, role or "
         "referee lines)",
    options=(NO_CALIBRATE,),
    build=lambda values: Built(create_single_agent(), {}),
    tasks=("pairwise", "score"),
    conversations=("pairwise", "score"),
    plan=lambda params: 2,
    position_calibration=True,
    # judged in both orders by default, it is ChatEval's single agent that is calibrated, not FairEval's evaluator
    calibration=OwnCalibration(_faireval_baseline, (CALIBRATION_BASELINE,),
                               position_defaults={"calibration_baseline": "chateval"}),
    single_agent=lambda values: create_single_agent(),
    single_agent_plan=lambda values: 2,
    signals=lambda params, task: set(),
    panel=PanelMembers(member_of=_member_of),
    studio={"single_agent": lambda: create_single_agent()},
    order=40,
)
