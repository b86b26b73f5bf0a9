"""Writes the tutorial notebooks of this folder (``python notebooks/build_notebooks.py``).

The notebooks are generated so that their code stays reviewable as plain Python in one place and is
stored WITHOUT outputs: ``tests/test_notebooks.py`` executes every notebook with nbclient against
fake models (no network, no keys), so the outputs a reader sees are produced fresh each time.
Edit the cells here, rerun this script, commit both.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).parent
KERNEL = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
          "language_info": {"name": "python"}}

# A deterministic stand-in for a chat model, shared by the notebooks: it recognises each protocol's answer
# form in the prompt and replies in it. Shown in full in every notebook so a reader sees what "the model" does.
FAKE_MODEL = '''\
import re

from langchain_core.messages import AIMessage

from jurygraph.testing import FakeJudge, pairwise_reply


def speaker(prompt: str) -> str:
    """The ChatEval referee a prompt is addressed to ('... make your talk short and clear, Critic !')."""
    found = re.search(r"make your talk short and clear, (.*) !", prompt)
    return found.group(1) if found else ""


def respond(prompt: str, messages) -> str:
    """Reply in the answer form the prompt asks for (a real model would reason; this one is scripted)."""
    said_before = sum(isinstance(m, AIMessage) for m in messages)
    if "just say NO ISSUE" in prompt:  # DEBATE Critic: one objection, then satisfied
        return "NO ISSUE." if said_before else "The summary repeats itself; a 4 is too generous."
    if "End your reply with the line of the Evaluation Form filled in" in prompt:  # DEBATE Scorer
        return f"Rationale: the sentences mostly follow on.\\n- Coherence: {4 - said_before}"
    if "“Rating”" in prompt:  # ReFeR peers and area chair: "Analysis: ... Rating: N"
        return "Analysis: The reply follows the conversation and uses the fact.\\nRating: 2"
    if "Output with the following format strictly" in prompt:  # ChatEval-style referees, final answer
        if "The score of the response" in prompt:
            return "Evaluation evidence: fluent and on topic.\\nThe score of the response: 4"
        return pairwise_reply(6, 8, f"{speaker(prompt) or 'The referee'} finds Assistant 2 more complete.")
    if "Evaluation Form (scores ONLY)" in prompt:  # G-Eval: the score only
        return "4"
    return f"I ({speaker(prompt)}) think Assistant 2 covers more of the question."  # ChatEval discussion
'''


def notebook(cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    nb = new_notebook(metadata=KERNEL)
    nb.cells = [new_markdown_cell(src) if kind == "md" else new_code_cell(src) for kind, src in cells]
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:02d}"  # stable ids: regenerating gives the same files
    return nb


def md(text: str) -> tuple[str, str]:
    return ("md", text.strip("\n"))


def code(text: str) -> tuple[str, str]:
    return ("code", text.strip("\n"))


QUICKSTART = [
    md("""
# 1 · Quickstart: every protocol, its diagram, one item, every agent's history

jurygraph runs panels of LLM judges as LangGraph state graphs. Each `create_<protocol>(...)` returns an
**uncompiled** `StateGraph`; you compile it (optionally with a checkpointer) and invoke it on one item.
Models are not part of the graph: they come from the runtime context, `JuryContext`, at `invoke` time.

This notebook uses a **scripted fake model** so it runs offline in seconds. To use a real one, replace
`context` below with e.g. `JuryContext(default="openai:gpt-4o-mini")`,
`JuryContext(default="openai:llama3@http://127.0.0.1:8000/v1")`, or `JuryContext(default="local")`
(the embedded SmolLM2 smoke-test model: it runs offline, but its ratings carry no signal).
"""),
    code("""
from IPython.display import Image, display

from jurygraph import (
    JuryContext,
    create_chateval,
    create_debate,
    create_ensemble,
    create_geval,
    create_refer,
    create_single_agent,
    judgments_of,
    load_dataset,
    png_bytes,
    render_graph,
    verdict_of,
)
"""),
    md("""
## The model: a deterministic fake that answers in each protocol's format
"""),
    code(FAKE_MODEL),
    code("""
model = FakeJudge(respond=respond)
context = JuryContext(default=model)  # every agent uses this model unless named in JuryContext(models={...})

faireval = load_dataset("faireval").items      # pairwise: which of two answers is better
summeval = load_dataset("summeval", aspect="coherence").items  # score a summary on one aspect (1-5)
topical = load_dataset("topical-chat", aspect="coherence").items  # score a dialogue reply (1-3)
pairwise_item, summary_item, dialogue_item = faireval[0], summeval[0], topical[0]
print(pairwise_item.question)
"""),
    md("""
Two small helpers: one draws a graph (mermaid text, then a PNG rendered offline by Graphviz), one judges an
item and prints what every agent said, read from the final state's `histories` (agent name → the messages
that agent has in its context).
"""),
    code("""
def draw(builder):
    print(render_graph(builder, "mermaid"))
    display(Image(png_bytes(builder)))


def judge(builder, item):
    model.reset()
    state = builder.compile().invoke({"item": item}, context=context)
    for agent, history in state["histories"].items():
        print(f"=== history of {agent} ({len(history)} messages)")
        for message in history:
            print(f"  [{message.name or message.type}] {message.text[:110]!r}")
    print(f"model calls: {len(model.calls)}")
    return state
"""),
    md("""
## ChatEval (Chan et al.): referees with personas discuss over turns

Three communication strategies, three wirings of the same referee nodes. One-by-one: each referee hears
everyone who spoke before it.
"""),
    code("""
chateval = create_chateval(strategy="one-by-one", turns=2)
draw(chateval)
"""),
    code("""
state = judge(chateval, pairwise_item)
verdict = verdict_of(state)
print(verdict.label, verdict.votes, "human:", pairwise_item.human)
assert verdict.label == "2" and set(state["histories"]) == {"General Public", "Critic"}
"""),
    md("""
Simultaneous talk: the referees of a round run in one superstep (nobody hears a same-round message);
the summarizer strategy condenses each round into every history.
"""),
    code("""
for strategy in ("simultaneous", "summarizer"):
    print(f"--- {strategy}")
    draw(create_chateval(strategy=strategy, referees=3))
"""),
    md("""
## DEBATE (Kim et al.): Scorer, Critic, Commander

The Commander relays between the Scorer and a devil's-advocate Critic until the Critic says *NO ISSUE* or
the iteration limit is reached (dashed: conditional edges).
"""),
    code("""
debate = create_debate(max_iterations=3)
draw(debate)
"""),
    code("""
state = judge(debate, summary_item)
verdict = verdict_of(state)
print("score", verdict.score, verdict.method, verdict.detail["scores"], "human:", summary_item.human["coherence"])
assert verdict.score == 3 and verdict.detail["ended"] == "no_issue"
"""),
    md("""
## ReFeR (Narsupalli et al.): peers, then an area chair

K peers judge independently (one superstep), the area chair reads their evaluations and samples n answers
(Turbo); the verdict is the mean of the area chair's ratings.
"""),
    code("""
refer = create_refer(peers=3, variant="turbo", samples=5)
draw(refer)
"""),
    code("""
state = judge(refer, dialogue_item)
verdict = verdict_of(state)
print("score", verdict.score, "peers:", verdict.detail["peers"], "human:", dialogue_item.human["coherence"])
assert verdict.score == 2 and len(model.calls) == 3 + 5
"""),
    md("""
## Baselines: a single referee, an ensemble of independent referees, G-Eval
"""),
    code("""
single = create_single_agent()
ensemble = create_ensemble(personas=["General Public", "Critic", "Scientist"])
geval = create_geval(n=5)
for name, builder in [("single", single), ("ensemble", ensemble), ("G-Eval", geval)]:
    print(f"--- {name}")
    draw(builder)
"""),
    code("""
for builder, item in [(single, pairwise_item), (ensemble, pairwise_item), (geval, summary_item)]:
    state = judge(builder, item)
    print("verdict:", verdict_of(state).model_dump(mode="json", exclude_none=True), "\\n")
"""),
    md("""
Every judgment is kept too, with the raw reply it was read from (a reply that cannot be read after one re-ask
is a *missing* judgment with its reason, never a default score):
"""),
    code("""
for agent, judgment in judgments_of(state).items():
    print(agent, judgment.kind, judgment.score, "missing" if judgment.missing else "", judgment.raw[:40])
print("usage:", state["usage"])
"""),
]


COMPOSE = [
    md("""
# 2 · Compose a communication strategy by editing edges

In jurygraph a communication strategy *is* the wiring of the graph: a referee node reads its own history
and appends what it says to the histories of the agents that hear it, so **who speaks after whom decides
who hears what**. `create_chateval(...)` returns an uncompiled `StateGraph`; the helpers in
`jurygraph.graphs` (`edges_of`, `remove_edge`, `replace_edges`, `chain`, `wire_turns`) edit it before
`compile()`. Here we rewire ChatEval twice, draw before/after, run all three on the same item, and read from
the recorded prompts what each referee heard.
"""),
    code("""
import re

from IPython.display import Image, Markdown, display
from langgraph.graph import END, START, StateGraph

from jurygraph import JuryContext, create_chateval, load_dataset, png_bytes, render_graph, verdict_of
from jurygraph.graphs import ChatEvalState, chain, edges_of, remove_edge, replace_edges, wire_turns
from jurygraph.nodes.aggregator import make_aggregator_node
from jurygraph.nodes.referee import chateval_personas
from jurygraph.testing import FakeJudge, pairwise_reply

item = load_dataset("faireval").items[0]
"""),
    md("""
## A persuadable fake panel

To make the wiring visible in the verdict, the fake referees are scripted to be persuadable: the Critic
always prefers Assistant 1; everyone else follows the majority of the opinions they have heard so far
(Assistant 2 when they have heard none, or on a tie). What a referee heard is read from the history slot of
its prompt, exactly as a real model would see it.
"""),
    code("""
def speaker(prompt: str) -> str:
    return re.search(r"make your talk short and clear, (.*) !", prompt).group(1)


def heard(prompt: str) -> list[str]:
    \"\"\"The '[Name]: message' lines of the prompt's discussion history, in order.\"\"\"
    history = prompt.split("Here is your discussion history:\\n")[1].split("Now it’s your time to talk")[0]
    return re.findall(r"^\\[(.+?)\\]: (.*)$", history, flags=re.M)


def respond(prompt: str, messages) -> str:
    name = speaker(prompt)
    opinions = [re.search(r"Assistant (\\d)", text).group(1) for _, text in heard(prompt)
                if re.search(r"Assistant (\\d)", text)]
    majority = "1" if opinions.count("1") > opinions.count("2") else "2"
    choice = "1" if name == "Critic" else majority
    if "Output with the following format strictly" in prompt:  # final turn: the scores
        return pairwise_reply(8, 5, f"{name} prefers Assistant 1") if choice == "1" else \\
            pairwise_reply(5, 8, f"{name} prefers Assistant 2")
    return f"I prefer Assistant {choice}."


def run(builder):
    \"\"\"Judge the item; return the verdict and, per call in order, who spoke and whom they had heard.\"\"\"
    model = FakeJudge(respond=respond)
    state = builder.compile().invoke({"item": item}, context=JuryContext(default=model))
    rows = [(speaker(call.prompt), [who for who, _ in heard(call.prompt)]) for call in model.calls]
    return verdict_of(state), rows


def show(rows, title):
    lines = [f"**{title}**", "", "| call | speaker | had heard (in order) |", "|---|---|---|"]
    lines += [f"| {i} | {who} | {', '.join(h) or '—'} |" for i, (who, h) in enumerate(rows, 1)]
    display(Markdown("\\n".join(lines)))


def draw(builder):
    print(render_graph(builder, "mermaid"))
    display(Image(png_bytes(builder)))
"""),
    md("""
## Before: one-by-one, the Critic speaks first
"""),
    code("""
panel = ["Critic", "General Public", "Scientist"]
before = create_chateval(personas=panel, turns=2, strategy="one-by-one")
print(sorted(edges_of(before)))
draw(before)
"""),
    code("""
verdict_before, heard_before = run(before)
show(heard_before, f"Critic first — verdict {verdict_before.label}, votes {verdict_before.votes}")
"""),
    md("""
## After (1): the Critic speaks last in every turn — `replace_edges`

Five edges out, five in. The nodes are the same; only the order of speakers changes.
"""),
    code("""
critic_last = create_chateval(personas=panel, turns=2, strategy="one-by-one")
replace_edges(
    critic_last,
    remove=[(START, "critic_t1"), ("critic_t1", "general_public_t1"), ("scientist_t1", "critic_t2"),
            ("critic_t2", "general_public_t2"), ("scientist_t2", "aggregate")],
    add=[(START, "general_public_t1"), ("scientist_t1", "critic_t1"), ("critic_t1", "general_public_t2"),
         ("scientist_t2", "critic_t2"), ("critic_t2", "aggregate")],
)
print("removed:", sorted(edges_of(before) - edges_of(critic_last)))
print("added:  ", sorted(edges_of(critic_last) - edges_of(before)))
draw(critic_last)
"""),
    code("""
verdict_after, heard_after = run(critic_last)
show(heard_after, f"Critic last — verdict {verdict_after.label}, votes {verdict_after.votes}")
"""),
    md("""
The recorded prompts show the change: before, General Public and the Scientist heard the Critic first and
followed it; after, they form their opinion before the Critic speaks, and the panel's verdict flips.
"""),
    code("""
assert heard_before[1] == ("General Public", ["Critic"])   # heard the Critic first
assert heard_after[0] == ("General Public", [])              # now speaks first, has heard nobody
assert heard_after[2] == ("Critic", ["General Public", "Scientist"])
assert (verdict_before.label, verdict_after.label) == ("1", "2")
"""),
    md("""
## After (2): the same rewiring with `remove_edge` and `chain`

Drop every speaking edge, then chain the speakers in the new order (the `aggregate -> END` edge stays).
"""),
    code("""
rechained = create_chateval(personas=panel, turns=2, strategy="one-by-one")
for source, target in sorted(edges_of(rechained)):
    if target != END:
        remove_edge(rechained, source, target)
order = [f"{who}_t{t}" for t in (1, 2) for who in ("general_public", "scientist", "critic")]
chain(rechained, [*order, "aggregate"])
assert edges_of(rechained) == edges_of(critic_last)
"""),
    md("""
## A new strategy: independent first opinions, then one-by-one — `wire_turns`

`wire_turns` builds any mix of the paper's strategies from a *plan*: per turn, groups of referees that speak
one after another; a group of several speaks simultaneously (one LangGraph superstep, so nobody in it hears
the others; the round is delivered to everyone after it).
"""),
    code("""
referees = chateval_personas(panel, None)
plan = [[("Critic", "General Public", "Scientist")],            # turn 1: all at once
        [("General Public",), ("Scientist",), ("Critic",)]]      # turn 2: one by one, Critic last
mixed = StateGraph(ChatEvalState, context_schema=JuryContext)
last = wire_turns(mixed, referees, plan)
mixed.add_node("aggregate", make_aggregator_node(panel))
mixed.add_edge(last, "aggregate")
mixed.add_edge("aggregate", END)
draw(mixed)
"""),
    code("""
verdict_mixed, heard_mixed = run(mixed)
show(heard_mixed, f"simultaneous, then one-by-one — verdict {verdict_mixed.label}, votes {verdict_mixed.votes}")
first_turn = {who: h for who, h in heard_mixed[:3]}
assert first_turn == {"Critic": [], "General Public": [], "Scientist": []}  # nobody heard a same-round message
assert heard_mixed[3] == ("General Public", ["Critic", "General Public", "Scientist"])  # round 1 delivered
"""),
    md("""
## Beyond the papers: stop when the panel agrees, and a devil's advocate — `exit_when`, `insert_after`

None of the papers has these; each is a few edge edits. `turn_boundaries` finds where one turn hands over to
the next; `insert_after` puts a node there (here DEBATE's Critic as a devil's advocate, who objects to the
panel's majority and is heard by every referee); `exit_when` turns a hand-over into a conditional edge
(agreement, or the devil's NO ISSUE, goes straight to the aggregator). `judge_every_turn` asks every referee
for its scores each turn, so there is a majority to check. The whole protocol:
"""),
    code("""
from jurygraph.graphs import exit_when, insert_after, panel_agrees, turn_boundaries
from jurygraph.nodes.devil import make_devil_node

order = ["General Public", "Scientist", "Critic"]  # the Critic speaks last
own = create_chateval(personas=order, turns=3, judge_every_turn=True, record_rounds=True)
for end, _ in turn_boundaries(own):
    turn = int(end.rsplit("_t", 1)[1])
    insert_after(own, end, f"devil_t{turn}", make_devil_node(order, turn))
    exit_when(own, end, panel_agrees(order), "aggregate", label="agree")
    exit_when(own, f"devil_t{turn}", lambda s: s["reviews"][-1]["no_issue"], "aggregate", label="NO ISSUE")
draw(own)


def with_devil(prompt: str, messages) -> str:
    if "Object to the current majority" in prompt:  # the devil: one objection, then satisfied
        return "NO ISSUE" if "[Devil's Advocate]" in prompt else "Assistant 1 is more accurate than you think."
    return respond(prompt, messages)


model = FakeJudge(respond=with_devil)
state = own.compile().invoke({"item": item}, context=JuryContext(default=model))
print([m.name for m in state["transcript"]])
print(verdict_of(state).label, verdict_of(state).detail)
"""),
    md("""
The panel disagrees after turn 1 (the Critic alone prefers Assistant 1), so the devil objects and every
referee hears it in turn 2; after turn 2 the devil has no issue left and the discussion ends, one turn early.
The packaged versions are `create_chateval(stop_when="consensus")`, `create_chateval_devil(...)` and
`create_refer_discussion(rounds=R)` (ReFeR's peers discuss before the area chair), on the command line
`--stop-when consensus`, `--devil` and `--peer-discussion R`.
"""),
    code("""
assert [m.name for m in state["transcript"]].count("Devil's Advocate") == 2
assert verdict_of(state).detail["rounds"] == 2 and verdict_of(state).detail["stopped"] == "no_issue"
"""),
]


CHECKPOINTS = [
    md("""
# 3 · Checkpoints: interrupt, inspect, resume, time-travel and fork

Compile a protocol with a checkpointer and every step of a run is saved: a run can stop (a crash, a rate
limit, or on purpose) and resume where it stopped, and you can go back to an earlier turn, change what was
said, and continue from there in a new branch. Here: a real SQLite checkpointer on a temporary file.
"""),
    code("""
import sqlite3
import tempfile
from pathlib import Path

from langchain_core.messages import AIMessage
from langgraph.checkpoint.sqlite import SqliteSaver

from jurygraph import JuryContext, create_chateval, load_dataset, verdict_of
from jurygraph.testing import FakeJudge, pairwise_reply

path = Path(tempfile.mkdtemp()) / "checkpoints.sqlite"
saver = SqliteSaver(sqlite3.connect(path, check_same_thread=False))
item = load_dataset("faireval").items[0]
"""),
    md("""
The fake referees say Assistant 2 is better, unless someone in their history has said Assistant 1 is better
— then they are convinced and vote for Assistant 1.
"""),
    code("""
import re


def respond(prompt: str, messages) -> str:
    name = re.search(r"make your talk short and clear, (.*) !", prompt).group(1)
    convinced = "Assistant 1 is better" in prompt.split("Now it’s your time to talk")[0]
    if "Output with the following format strictly" in prompt:
        return pairwise_reply(8, 5, f"{name}: 1 wins") if convinced else pairwise_reply(5, 8, f"{name}: 2 wins")
    return "Assistant 1 is better, I am convinced." if convinced else f"{name} thinks Assistant 2 is better."


model = FakeJudge(respond=respond)
context = JuryContext(default=model)
"""),
    md("""
## Interrupt before the Critic's second turn

`interrupt_before` at compile time stops every run of this graph before the node `critic_t2`.
"""),
    code("""
graph = create_chateval(strategy="one-by-one", turns=2).compile(checkpointer=saver, interrupt_before=["critic_t2"])
config = {"configurable": {"thread_id": f"item-{item.id}"}}
# the item goes in as plain JSON: the first checkpoint stores the raw input, and checkpoints should hold
# plain data only (LangGraph warns when it loads a pickled-by-type pydantic object)
graph.invoke({"item": item.model_dump(mode="json")}, config, context=context)

snapshot = graph.get_state(config)
print("next:", snapshot.next)
for agent, history in snapshot.values["histories"].items():
    print(agent, "has heard:", [f"{m.name}: {m.text[:40]}" for m in history])
assert snapshot.next == ("critic_t2",) and len(model.calls) == 3
"""),
    md("""
## Resume: `invoke(None, config)` continues from the checkpoint

Only the Critic's second turn runs; nothing said before is asked again.
"""),
    code("""
model.reset()
final = graph.invoke(None, config, context=context)
original = graph.get_state(config)
print("calls on resume:", [re.search(r"clear, (.*) !", c.prompt).group(1) for c in model.calls])
print("verdict:", verdict_of(final).label, verdict_of(final).votes)
assert len(model.calls) == 1 and not original.next and verdict_of(final).label == "2"
"""),
    md("""
## A crash: the model fails in the middle of a run

Same thing without an interrupt: the Critic's model fails on its final turn (a timeout, a 500...). The
exception reaches the caller, the finished steps stay in SQLite, and `invoke(None, config)` with a working
model resumes at the failed node — the three calls that succeeded are not paid for again.
"""),
    code("""
plain = create_chateval(strategy="one-by-one", turns=2).compile(checkpointer=saver)
crash_config = {"configurable": {"thread_id": "crash-demo"}}
flaky = FakeJudge(respond=respond, fail_when=lambda prompt: "clear, Critic !" in prompt and "format strictly" in prompt)
try:
    plain.invoke({"item": item.model_dump(mode="json")}, crash_config, context=JuryContext(default=flaky))
except RuntimeError as err:
    print("the run failed:", err, "| next:", plain.get_state(crash_config).next)
working = FakeJudge(respond=respond)
resumed = plain.invoke(None, crash_config, context=JuryContext(default=working))
print("calls after resuming:", len(working.calls), "| verdict:", verdict_of(resumed).label)
assert plain.get_state(crash_config).next == () and len(working.calls) == 1
"""),
    md("""
## Time travel: every step is a checkpoint

`get_state_history` lists them, newest first. We go back to the end of turn 1 (the step whose next node is
`general_public_t2`).
"""),
    code("""
history = list(graph.get_state_history(config))
for past in history:
    print(past.metadata["step"], past.next, past.config["configurable"]["checkpoint_id"][-8:])
end_of_turn_1 = next(past for past in history if past.next == ("general_public_t2",))
"""),
    md("""
## Fork with an edited message

`update_state` on the old checkpoint writes a new checkpoint *beside* the original run (a branch). We rewrite
the Critic's turn-1 message in everyone's history (`{"replace": [...]}` replaces a history) as if the
Critic had said it, then continue the branch from there. The interrupt is part of the compiled graph, so the
branch also pauses before `critic_t2`: we resume it the same way.
"""),
    code("""
edited = AIMessage("Assistant 1 is better: answer 2 is padded.", name="Critic")
histories = {
    agent: {"replace": [edited if m.name == "Critic" else m for m in messages]}
    for agent, messages in end_of_turn_1.values["histories"].items()
}
fork = graph.update_state(end_of_turn_1.config, {"histories": histories}, as_node="critic_t1")
model.reset()
graph.invoke(None, fork, context=context)             # general_public_t2, then the interrupt
print("the branch paused before:", graph.get_state(config).next)  # the thread's newest checkpoint
forked = graph.invoke(None, graph.get_state(config).config, context=context)  # resume the branch
print("calls in the branch:", [re.search(r"clear, (.*) !", c.prompt).group(1) for c in model.calls])
"""),
    code("""
branch = graph.get_state(config)  # the thread's newest checkpoint is now the branch's end
print("original verdict:", verdict_of(original.values).label, verdict_of(original.values).votes)
print("forked verdict:  ", verdict_of(branch.values).label, verdict_of(branch.values).votes)
print("General Public heard in the branch:", [m.text for m in branch.values["histories"]["General Public"][:2]])
assert verdict_of(original.values).label == "2" and verdict_of(branch.values).label == "1"
assert len(model.calls) == 2  # turn 1 was not asked again: the branch reused its checkpoints
assert graph.get_state(original.config).values["verdict"]["label"] == "2"  # the original branch is still there
"""),
]


METAEVAL = [
    md("""
# 4 · Meta-evaluation: run a protocol over a benchmark slice, then measure it against humans

The runner (`jurygraph.running.runner`) judges many items concurrently and writes a run directory
(`results.jsonl`, `manifest.json`, a SQLite checkpoint and an LLM-call cache). The meta-evaluation
(`jurygraph.measuring.metaeval`) reads a finished run and compares its verdicts with the human ratings;
`jurygraph.measuring.tables` and `jurygraph.measuring.plots` lay the numbers out as in the papers.

The judges here are **fake** with a known relation to the human labels, so the numbers are meaningful:
- *noisy copy*: gives the human mean rounded half up, except that every fourth summary is one point off
  (one lower; one higher where the rounded mean is 1);
- *length judge*: scores the summary by its length only, unrelated to what humans rated.
"""),
    code("""
import re
import tempfile
from pathlib import Path

from IPython.display import Image, Markdown, display

from jurygraph import JuryContext, arun, create_geval, create_single_agent, load_dataset, metaeval, read_results
from jurygraph.measuring import plots, tables
from jurygraph.testing import FakeJudge, pairwise_reply

workdir = Path(tempfile.mkdtemp())
ASPECTS = ("coherence", "relevance")
slices = {}
for aspect in ASPECTS:
    items = load_dataset("summeval", aspect=aspect).items
    documents = sorted({i.group for i in items})[:4]
    slices[aspect] = [i for i in items if i.group in documents]
print({a: len(s) for a, s in slices.items()}, "items from", len(documents), "documents")
"""),
    code("""
def round_half_up(x: float) -> int:
    return int(x + 0.5)


def summary_in(prompt: str, aspect: str):
    return next(i for i in slices[aspect] if i.response in prompt)


def aspect_in(prompt: str) -> str:
    return re.search(r"- (\\w+):\\s*$", prompt).group(1).lower()


def noisy_copy(prompt: str, messages) -> str:
    aspect = aspect_in(prompt)
    item = summary_in(prompt, aspect)
    position = slices[aspect].index(item)
    score = round_half_up(item.human[aspect])
    if position % 4 == 0:
        score = score + 1 if score == 1 else score - 1
    return str(score)


def length_judge(prompt: str, messages) -> str:
    item = summary_in(prompt, aspect_in(prompt))
    return str(1 + len(item.response) % 5)
"""),
    md("""
## Run G-Eval with each judge, one run directory per aspect

In a notebook the event loop is already running, so use `await arun(...)` (the script form is `run(...)`).
"""),
    code("""
for name, respond in [("noisy-copy", noisy_copy), ("length", length_judge)]:
    for aspect in ASPECTS:
        summary = await arun(create_geval(n=1), slices[aspect], out_dir=workdir / name / aspect,
                             context=JuryContext(default=FakeJudge(respond=respond)), progress=False,
                             manifest={"protocol": f"G-Eval ({name} judge)"})
        print(name, aspect, summary.line())
record = read_results(workdir / "noisy-copy" / "coherence")[1]
print({k: record[k] for k in ("id", "status", "group", "human")}, "->", record["verdict"]["score"])
"""),
    md("""
## Load the finished runs and compute the tables

SummEval correlations are summary-level (per document, then averaged), as in G-Eval and DEBATE, with
bootstrap confidence intervals over documents.
"""),
    code("""
noisy = metaeval(workdir / "noisy-copy", name="G-Eval, noisy-copy judge", resamples=200)
length = metaeval(workdir / "length", name="G-Eval, length judge", resamples=200)
display(Markdown(tables.correlation_table([noisy, length]).markdown()))
display(Markdown(tables.detail_table([noisy, length]).markdown()))
display(Markdown(tables.distribution_table(noisy, scale=(1, 5)).markdown()))
"""),
    code("""
for aspect in ASPECTS:
    good, bad = noisy.aspects[aspect].value("spearman"), length.aspects[aspect].value("spearman")
    print(f"{aspect}: noisy copy rho={good:.3f}, length judge rho={bad:.3f}")
    assert 0.4 < good < 1.0 and good > bad + 0.3
"""),
    md("""
## Plots
"""),
    code("""
display(Image(str(plots.plot_aspect_bars([noisy, length], workdir / "bars.png"))))
display(Image(str(plots.plot_score_distribution(noisy, workdir / "distribution.png", scale=(1, 5)))))
"""),
    md("""
## Pairwise verdicts: accuracy and Cohen's kappa (ChatEval Table 1 layout)

A single referee on 40 FairEval questions; the fake agrees with the human verdict on three questions in
four and says the opposite on the fourth.
"""),
    code("""
questions = load_dataset("faireval").items[:40]


def mostly_right(prompt: str, messages) -> str:
    k, item = next((k, q) for k, q in enumerate(questions) if q.response_1 in prompt and q.response_2 in prompt)
    label = item.human["label"]
    if k % 4 == 3:
        label = {"1": "2", "2": "1", "tie": "1"}[label]
    return {"1": pairwise_reply(8, 4), "2": pairwise_reply(4, 8), "tie": pairwise_reply(6, 6)}[label]


summary = await arun(create_single_agent(), questions, out_dir=workdir / "faireval-single",
                     context=JuryContext(default=FakeJudge(respond=mostly_right)), progress=False,
                     manifest={"protocol": "Single agent"})
single = metaeval(workdir / "faireval-single", resamples=200)
display(Markdown(tables.label_table([single]).markdown()))
display(Image(str(plots.plot_confusion(single, workdir / "confusion.png"))))
assert single.labels.accuracy == 0.75 and single.labels.n == 40
"""),
]


AGENT_THREADS = [
    md("""
# 6 · Judge your LangGraph agent: its threads as items

What you most often need judged is not one answer but an agent's run: the user's request, the tools it called
with which arguments, what they returned, and its answer. jurygraph reads such runs straight from the agent's
checkpoints (`jurygraph.conversations.from_thread`) and judges them with any protocol; a cheap tool-call match
against a reference can decide the clear cases first.

Here: a small LangGraph agent with a scripted chat model (it calls a weather tool; for Oslo it misspells the
city), run on five tasks with a real SQLite checkpointer.
"""),
    code("""
import re
import sqlite3
import tempfile
from pathlib import Path

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from jurygraph.testing import FakeAgentModel


@tool
def weather(city: str) -> str:
    \"\"\"Today's weather in a city.\"\"\"
    return f"sunny in {city}" if city != "Olso" else "error: no such city 'Olso'"


def act(messages) -> AIMessage:
    \"\"\"The scripted model: call the weather tool for the city asked about, then answer from its result.\"\"\"
    city = re.sub(r"\\W", "", messages[0].content.split()[-1])
    results = [m for m in messages if isinstance(m, ToolMessage)]
    if not results:
        asked = "Olso" if city == "Oslo" else city  # its one mistake
        return AIMessage("", tool_calls=[{"name": "weather", "args": {"city": asked}, "id": "call-1"}])
    return AIMessage(f"Today in {city}: {results[-1].content}.")


model = FakeAgentModel(act=act)
builder = StateGraph(MessagesState)
builder.add_node("agent", lambda state: {"messages": [model.bind_tools([weather]).invoke(state["messages"])]})
builder.add_node("tools", ToolNode([weather]))
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", tools_condition)
builder.add_edge("tools", "agent")

store = Path(tempfile.mkdtemp()) / "agent.sqlite"
agent = builder.compile(checkpointer=SqliteSaver(sqlite3.connect(store, check_same_thread=False)))
TASKS = ["Weather in Paris?", "Weather in Oslo?", "Weather in Lima?", "Weather in Kyoto?", "Weather in Quito?"]
for i, task in enumerate(TASKS):
    agent.invoke({"messages": [HumanMessage(task)]}, {"configurable": {"thread_id": f"task-{i}"}})
print(agent.get_state({"configurable": {"thread_id": "task-1"}}).values["messages"][-1].content)
"""),
    md("""
## A thread as an item: `from_thread`

`from_thread(graph_or_checkpointer, config)` reads the thread's checkpoint history: the conversation as
OpenAI-style messages (tool calls and results included) and the node names of every superstep (a subgraph's
nodes too, named with their path). It returns an item's fields: add the task, the scale and the aspect.
"""),
    code("""
from jurygraph import EvalItem
from jurygraph.conversations import from_thread

fields = from_thread(agent, {"configurable": {"thread_id": "task-1"}})
for message in fields["messages"]:
    print(message["role"], message.get("content") or message.get("tool_calls"))
print("steps:", fields["steps"])
item = EvalItem(task="score", scale={"low": 1, "high": 10}, aspect="task_completion", **fields)
assert fields["steps"] == [["agent"], ["tools"], ["agent"]]
assert item.messages[1].tool_calls[0].arguments == {"city": "Olso"}
"""),
    md("""
## Judge every thread with a ChatEval panel

`load_threads(store)` makes a dataset of the store's threads (the store is only read); the panel is ChatEval's
two referees discussing for two turns. The fake referees here read the tool results in the prompt: a failed
tool call earns a low score.
"""),
    code("""
from jurygraph import JuryContext, arun, create_chateval, read_results
from jurygraph.conversations import load_threads
from jurygraph.testing import FakeJudge


def referee(prompt: str, messages) -> str:
    failed = "error: no such city" in prompt
    if "Output with the following format strictly" in prompt:
        evidence = "the weather tool failed" if failed else "the tool result backs the answer"
        return f"Evaluation evidence: {evidence}.\\nThe score of the response: {2 if failed else 9}"
    return "The weather tool failed; the answer repeats the error." if failed else "The tool result backs the answer."


out = Path(tempfile.mkdtemp()) / "threads-run"
threads = load_threads(str(store), aspect="task_completion")
judge = FakeJudge(respond=referee)
summary = await arun(create_chateval(), threads, out_dir=out, context=JuryContext(default=judge), progress=False)
print(summary.line())
scores = {r["id"]: r["verdict"]["score"] for r in read_results(out)}
print(scores)
assert scores == {"task-0": 9.0, "task-1": 2.0, "task-2": 9.0, "task-3": 9.0, "task-4": 9.0}
"""),
    md("""
On the command line the same run is
`jurygraph eval --from-threads agent.sqlite --protocol chateval --aspect task_completion --model openai:gpt-4o-mini`
(a `postgresql://` URL works too; `--thread-ids FILE` picks threads; `--resume RUN_DIR` continues a stopped run).

## Open one in `show`

`jurygraph show RUN_DIR ITEM` prints what the panel said about one item: who said what, each judgment and the
verdict.
"""),
    code("""
from jurygraph.cli import main

assert main(["show", str(out), "task-1"]) == 0
"""),
    md("""
## A cheap first stage: match the tool calls against a reference

When you know which tool calls a task needs, `match_first` puts agentevals' trajectory match (strict,
unordered, subset or superset) before the panel: a trajectory that matches its reference is decided at once
(the top of the scale), for no model call; the panel judges the rest (on the command line:
`--trajectory-match strict`).
"""),
    code("""
from jurygraph.conversations import match_first


def reference(task: str) -> list[dict]:
    city = task.split()[-1].rstrip("?")
    call = {"id": "call-1", "name": "weather", "arguments": {"city": city}}
    return [{"role": "user", "content": task}, {"role": "assistant", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call-1", "content": f"sunny in {city}"},
            {"role": "assistant", "content": f"Today in {city}: sunny in {city}."}]


items = [EvalItem.model_validate({**item.model_dump(), "reference": reference(task)})
         for item, task in zip(threads.items, TASKS, strict=True)]
judge.reset()
matched_out = Path(tempfile.mkdtemp()) / "matched-run"
await arun(match_first(create_chateval(), "strict"), items, out_dir=matched_out, context=JuryContext(default=judge),
           progress=False)
for record in read_results(matched_out):
    print(record["id"], record.get("decided_by", "panel"), record["verdict"]["score"])
assert len(judge.calls) == 4  # only task-1 (the misspelt city) went to the panel: 2 referees x 2 turns
"""),
]


EVALUATORS = [
    md("""
# 5 · A panel inside LangSmith evaluate and pytest

If you already evaluate your LLM application with a harness (LangSmith's `evaluate()` and its pytest
integration, MLflow, inspect_ai), `create_panel_evaluator` makes any jurygraph protocol a judge it takes as its
own: an openevals-shaped evaluator (`inputs`, `outputs`, `reference_outputs` in; a result for the panel and one
per member out), with an async twin, a comparative evaluator and a summary evaluator with the panel diagnostics.
With `run_dir=`, every evaluation is an item of a jurygraph run directory: `jurygraph show`, `report` and
`metaeval` read it, and a re-run is answered from it.

This notebook runs offline. LangSmith is jurygraph's local stand-in (`jurygraph.testing.fake_langsmith`: it
keeps what the `langsmith` client sends), and the judges are the scripted FairEval judges of docs/PANEL.md on a
local OpenAI-compatible server: `gpt-4o-mini` is an oracle (always the human label), `coin` a fixed coin. For the
real thing, drop the two servers, set `LANGSMITH_API_KEY` and give model specs such as `"openai:gpt-4o-mini"`.
"""),
    code("""
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from langsmith import Client, aevaluate, evaluate

from jurygraph import create_panel_evaluator, load_dataset
from jurygraph.cli import main as jurygraph
from jurygraph.running.rundir import read_spend
from jurygraph.testing import panel_judges
from jurygraph.testing.fake_langsmith import FakeLangSmith

logging.getLogger("langsmith.client").setLevel(logging.ERROR)  # the stand-in does not take compressed runs
judges = panel_judges.serve()          # the panel's models, on 127.0.0.1
langsmith = FakeLangSmith().start()    # LangSmith's stand-in, on 127.0.0.1
client = Client(api_url=langsmith.url, api_key="lsv2-local-stand-in")
workdir = Path(tempfile.mkdtemp())
"""),
    md("""
## The panel

ChatEval's two referees judge which of two answers is better; on a pairwise task ChatEval judges both answer
orders by default (its position calibration), decided as `jurygraph eval` decides it. The public is the oracle, the
Critic the coin. The protocol is named as `eval --protocol` takes it (a built-in, an installed package's,
`"module:factory"`, or a factory), and its options by the names `--param` takes (`turns=3`, `agents=3`,
`no_calibrate=True`...), typed and checked by the protocol's spec.
"""),
    code("""
referees = {"General Public": f"openai:gpt-4o-mini@{judges.base_url}", "Critic": f"openai:coin@{judges.base_url}"}
panel = create_panel_evaluator("chateval", task="pairwise", dataset="faireval", models=referees,
                               run_dir=workdir / "panel")

item = load_dataset("faireval").items[0]
results = panel(inputs={"question": item.question},
                outputs={"response_1": item.response_1, "response_2": item.response_2},
                reference_outputs=item.human)
for result in results:
    print(f"{result['key']:<25} score={result['score']}  {result['comment']}")
print("doubt signals:", results[0]["metadata"]["doubt"])
print("human label:", item.human["label"])
assert results[1]["value"] == item.human["label"]  # the oracle
"""),
    md("""
## Inside `langsmith.evaluate()`

A LangSmith dataset of six FairEval questions, the human label as each example's reference output. The target
(your application) gives two answers per question; LangSmith binds `inputs`, `outputs` and `reference_outputs`
to the evaluator by name. `panel.summary` sees the whole experiment and reports the panel diagnostics.
"""),
    code("""
items = load_dataset("faireval").items[:6]
dataset = client.create_dataset("faireval-6")
client.create_examples(dataset_id=dataset.id, examples=[
    {"inputs": {"question": i.question}, "reference_outputs": {"label": i.human["label"]}} for i in items])
answers = {i.question: (i.response_1, i.response_2) for i in items}


def app(inputs: dict) -> dict:
    first, second = answers[inputs["question"]]
    return {"response_1": first, "response_2": second}


experiment = evaluate(app, data="faireval-6", evaluators=[panel], summary_evaluators=[panel.summary],
                      client=client, max_concurrency=4)
client.flush()
paid = len(judges.requests)
print(f"{paid} model requests")
"""),
    md("""
What LangSmith received: per run, the panel's feedback and each referee's (so its dashboard shows every judge);
for the experiment, the summary. The coin drags the panel below its best member.
"""),
    code("""
feedback = langsmith.feedback_of(session=experiment.experiment_name)
for entry in sorted((e for e in feedback if e.get("run_id")), key=lambda e: (str(e["run_id"]), e["key"])):
    question = langsmith.runs[str(entry["run_id"])]["inputs"]["question"]
    print(f"{question[:40]:<42} {entry['key']:<25} {entry['score']}")
print()
summary = {entry["key"]: entry for entry in feedback if not entry.get("run_id")}
for key, entry in summary.items():
    print(f"{key:<36} {entry['score']:.3f}  {entry['comment']}")
assert summary["chateval/General Public/agreement"]["score"] == 1.0
assert summary["chateval/panel_minus_best"]["score"] < 0
"""),
    md("""
## `aevaluate()` with the async twin: a re-run is answered from the run directory

Every evaluation is an item of the run directory, its id a hash of what it holds; asked again, by any harness,
it is answered from its record: nothing is paid twice.
"""),
    code("""
async def async_app(inputs: dict) -> dict:
    return app(inputs)


again = await aevaluate(async_app, data="faireval-6", evaluators=[panel.acall], client=client, max_concurrency=4)
print("model requests:", paid, "->", len(judges.requests))
assert len(judges.requests) == paid
"""),
    md("""
## The run directory: `jurygraph show` and `jurygraph metaeval`

`panel.close()` writes the run's manifest (its totals) and releases it; the command line reads it as any run.
It is a `jurygraph eval` run's directory: every paid call went into its spend ledger before its answer was used,
so `spend.json` and the totals count each request the server answered, once, over every invocation.
"""),
    code("""
panel.close()
assert jurygraph(["show", str(workdir / "panel")]) == 0  # the run's totals and each invocation's
spend = read_spend(workdir / "panel")
print("spend.json:", spend, "| requests the server answered:", len(judges.requests))
assert spend["requests"] == len(judges.requests)
"""),
    code("""
assert jurygraph(["show", str(workdir / "panel"), results[0]["metadata"]["item_id"]]) == 0
"""),
    code("""
assert jurygraph(["metaeval", str(workdir / "panel"), "--resamples", "0"]) == 0
"""),
    md("""
## Inside pytest: `@pytest.mark.langsmith`

In a LangSmith test the evaluator also logs its results as the test's feedback, in a feedback run of its own
that holds the panel's calls. The test file below is run by pytest in a subprocess, as in a terminal:
`LANGSMITH_TEST_SUITE=faireval-panel pytest test_answers.py`.
"""),
    code("""
TEST = '''
import pytest
from langsmith import testing as t

from jurygraph import create_panel_evaluator, load_dataset

PANEL = create_panel_evaluator("chateval", task="pairwise", dataset="faireval", models=REFEREES)


@pytest.mark.langsmith
@pytest.mark.parametrize("item", load_dataset("faireval").items[:2], ids=lambda item: item.id)
def test_the_oracle_agrees_with_people(item):
    outputs = {"response_1": item.response_1, "response_2": item.response_2}
    t.log_inputs({"question": item.question})
    t.log_outputs(outputs)
    verdict, public, critic = PANEL(inputs={"question": item.question}, outputs=outputs,
                                    reference_outputs=item.human)
    assert public["value"] == item.human["label"]
'''
tests = Path(tempfile.mkdtemp())
(tests / "test_answers.py").write_text(TEST.replace("REFEREES", repr(referees)))
before = len(langsmith.feedback)
env = {**os.environ, "LANGSMITH_ENDPOINT": langsmith.url, "LANGSMITH_API_KEY": "lsv2-local-stand-in",
       "LANGSMITH_TRACING": "true", "LANGSMITH_TEST_SUITE": "faireval-panel"}
done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_answers.py"],
                      cwd=tests, env=env, capture_output=True, text=True, timeout=300)
print(done.stdout.strip().splitlines()[-1])
for entry in langsmith.feedback[before:]:
    print(f"{entry['key']:<25} {entry['score']}  {entry.get('comment') or ''}")
assert done.returncode == 0
assert {e["key"] for e in langsmith.feedback[before:]} >= {"chateval", "chateval/General Public", "chateval/Critic"}
"""),
    code("""
judges.stop()
langsmith.stop()
"""),
]


def main() -> None:
    for name, cells in [("01_quickstart", QUICKSTART), ("02_compose_a_strategy", COMPOSE),
                        ("03_checkpoints", CHECKPOINTS), ("04_metaeval", METAEVAL),
                        ("05_a_panel_inside_langsmith", EVALUATORS), ("06_agent_threads", AGENT_THREADS)]:
        nbformat.write(notebook(cells), HERE / f"{name}.ipynb")


if __name__ == "__main__":
    main()
