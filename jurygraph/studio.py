"""Compiled protocol graphs for LangGraph Studio / ``langgraph dev`` (declared in ``langgraph.json``).

    pip install -e '.[studio]'      # langgraph-cli[inmem], in the environment where jurygraph is installed
    langgraph dev --no-browser      # from the repository root; serves every graph on 127.0.0.1:2024

Each graph is compiled with its paper's default settings and no checkpointer (the LangGraph server
brings its own). Its ``context_schema`` is :class:`~jurygraph.llm.models.JuryContext`, which the server
builds from the run's JSON context, so model specs are plain strings::

    {"default": "openai:gpt-4o-mini", "models": {"Critic": "google_genai:gemini-2.0-flash"}}
    {"default": "openai:llama3@http://127.0.0.1:8000/v1"}

With no context, every agent uses the embedded offline model when ``jurygraph[local]`` is installed
(a smoke-test model: its ratings carry no signal). The input is ``{"item": {...}}``: an
:class:`~jurygraph.judging.items.EvalItem` as JSON, e.g. a FairEval question (``task: "pairwise"``) for ChatEval
and the ChatEval baselines, a SummEval or Topical-Chat item (``task: "score"``) for DEBATE, ReFeR
and G-Eval.

Two graphs route the items their panel (the Ensemble: General Public and Critic) is unsure of
(:mod:`jurygraph.graphs.escalation`): ``ensemble_escalation`` sends an item whose referees disagree
(``agreement<1``) to ChatEval's single agent on the context's ``"escalation"`` model
(``{"models": {"escalation": "openai:gpt-4o"}}``); ``ensemble_review`` stops such an item at the ``review`` node,
which calls ``interrupt()``: Studio shows the panel's verdict, its doubt signals and the transcript, and the run
goes on with a resume value such as ``{"verdict": "1", "reviewer": "ada", "note": "..."}`` (``"1"``, ``"2"``,
``"tie"``, a score, a choice's answer).
"""

from __future__ import annotations

from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph

from jurygraph.graphs.chateval import create_chateval, create_chateval_devil
from jurygraph.graphs.debate import create_debate
from jurygraph.graphs.ensemble import create_ensemble
from jurygraph.graphs.escalation import route_doubtful
from jurygraph.graphs.geval import create_analyze_rate, create_geval
from jurygraph.graphs.refer import create_refer, create_refer_discussion
from jurygraph.graphs.single import create_single_agent


def _compiled(builder: StateGraph, name: str) -> CompiledStateGraph:
    return builder.compile(name=name)


# ChatEval (Chan et al.): 2 referees (General Public, Critic), 2 turns, one graph per strategy
chateval_one_by_one = _compiled(create_chateval(strategy="one-by-one"), "chateval_one_by_one")
chateval_simultaneous = _compiled(create_chateval(strategy="simultaneous"), "chateval_simultaneous")
chateval_summarizer = _compiled(create_chateval(strategy="summarizer"), "chateval_summarizer")
# DEBATE (Kim et al.): strict Critic, n = 4 iterations (its Figure 2 best), the Scorer's last score decides
debate = _compiled(create_debate(), "debate")
# ReFeR (Narsupalli et al.): 3 peers, area chair with n = 20 samples (Turbo) or 1 (Lite)
refer_turbo = _compiled(create_refer(variant="turbo"), "refer_turbo")
refer_lite = _compiled(create_refer(variant="lite"), "refer_lite")
# beyond the papers (jurygraph's own, opt-in): ChatEval stopping at consensus, ChatEval with DEBATE's Critic as
# a devil's advocate, ReFeR whose peers discuss one round before the area chair
chateval_early_stop = _compiled(create_chateval(stop_when="consensus"), "chateval_early_stop")
chateval_devil = _compiled(create_chateval_devil(), "chateval_devil")
refer_peer_discussion = _compiled(create_refer_discussion(rounds=1), "refer_peer_discussion")
# baselines
single_agent = _compiled(create_single_agent(), "single_agent")
ensemble = _compiled(create_ensemble(), "ensemble")
geval = _compiled(create_geval(), "geval")
analyze_rate = _compiled(create_analyze_rate(), "analyze_rate")
# doubtful items (jurygraph's own, opt-in): the ensemble's disagreements go to a stronger judge, or to a person
ensemble_escalation = _compiled(route_doubtful(create_ensemble(), escalate_when="agreement<1",
                                               escalation=create_single_agent()), "ensemble_escalation")
ensemble_review = _compiled(route_doubtful(create_ensemble(), review_when="agreement<1"), "ensemble_review")

GRAPHS: dict[str, CompiledStateGraph] = {
    "chateval_one_by_one": chateval_one_by_one,
    "chateval_simultaneous": chateval_simultaneous,
    "chateval_summarizer": chateval_summarizer,
    "debate": debate,
    "refer_turbo": refer_turbo,
    "refer_lite": refer_lite,
    "chateval_early_stop": chateval_early_stop,
    "chateval_devil": chateval_devil,
    "refer_peer_discussion": refer_peer_discussion,
    "single_agent": single_agent,
    "ensemble": ensemble,
    "geval": geval,
    "analyze_rate": analyze_rate,
    "ensemble_escalation": ensemble_escalation,
    "ensemble_review": ensemble_review,
}
