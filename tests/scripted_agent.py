"""A small LangGraph agent with scripted models, for the thread tests: a ``research`` subgraph (its own model and a
``search`` tool) and then an assistant that calls a ``weather`` tool and answers. Deterministic: each model's reply
is a function of the conversation since the user's last message."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from jurygraph.testing import FakeAgentModel

TASKS = ["Weather in Paris?", "Weather in Oslo?", "Weather in Lima?", "Weather in Kyoto?", "Weather in Quito?"]
MISSPELT = {"Oslo": "Olso"}  # the assistant's one mistake: it asks the weather tool for "Olso"


@tool
def search(query: str) -> str:
    """Search travel notes."""
    return f"notes: {query.split()[-1].rstrip('?')} is worth a visit"


@tool
def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"sunny in {city}" if city != "Olso" else "no such city: Olso"


def since_user(messages: Sequence[BaseMessage]) -> tuple[str, list[BaseMessage]]:
    """The user's last message and what followed it."""
    last = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
    return str(messages[last].content), list(messages[last + 1:])


def called(messages: Sequence[BaseMessage], name: str) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage) and m.name == name]


def research(messages: Sequence[BaseMessage]) -> AIMessage:
    question, after = since_user(messages)
    if not called(after, "search"):
        return AIMessage("", tool_calls=[{"name": "search", "args": {"query": question}, "id": f"s{len(messages)}"}])
    return AIMessage("Notes ready.")


def assist(messages: Sequence[BaseMessage]) -> AIMessage:
    question, after = since_user(messages)
    city = re.sub(r"\W", "", question.split()[-1])
    results = called(after, "weather")
    if not results:
        asked = MISSPELT.get(city, city)
        return AIMessage("", tool_calls=[{"name": "weather", "args": {"city": asked}, "id": f"w{len(messages)}"}])
    return AIMessage(f"Today in {city}: {results[-1].content}.")


def build_agent(checkpointer: Any) -> Any:
    """The agent compiled with ``checkpointer``: START -> research (subgraph) -> agent <-> tools."""
    researcher, assistant = FakeAgentModel(act=research), FakeAgentModel(act=assist)
    sub = StateGraph(MessagesState)
    sub.add_node("look", lambda state: {"messages": [researcher.bind_tools([search]).invoke(state["messages"])]})
    sub.add_node("tools", ToolNode([search]))
    sub.add_edge(START, "look")
    sub.add_conditional_edges("look", tools_condition)
    sub.add_edge("tools", "look")
    graph = StateGraph(MessagesState)
    graph.add_node("research", sub.compile())
    graph.add_node("agent", lambda state: {"messages": [assistant.bind_tools([weather]).invoke(state["messages"])]})
    graph.add_node("tools", ToolNode([weather]))
    graph.add_edge(START, "research")
    graph.add_edge("research", "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=checkpointer)


def run_tasks(app: Any, tasks: Sequence[str] = TASKS) -> list[str]:
    """Each task in its own thread (``task-<i>``); the thread ids."""
    ids = []
    for i, task in enumerate(tasks):
        config = {"configurable": {"thread_id": f"task-{i}"}}
        app.invoke({"messages": [HumanMessage(task)]}, config)
        ids.append(config["configurable"]["thread_id"])
    return ids


# what a thread of one task holds (as from_thread reads it) and the supersteps it took
def expected_messages(task: str) -> list[dict[str, Any]]:
    city = task.split()[-1].rstrip("?")
    asked = MISSPELT.get(city, city)
    answer = f"sunny in {asked}" if asked == city else f"no such city: {asked}"
    return [{"role": "user", "content": task},
            {"role": "assistant", "tool_calls": [{"id": "s1", "name": "search", "arguments": {"query": task}}]},
            {"role": "tool", "content": f"notes: {city} is worth a visit", "tool_call_id": "s1", "name": "search"},
            {"role": "assistant", "content": "Notes ready."},
            {"role": "assistant", "tool_calls": [{"id": "w4", "name": "weather", "arguments": {"city": asked}}]},
            {"role": "tool", "content": answer, "tool_call_id": "w4", "name": "weather"},
            {"role": "assistant", "content": f"Today in {city}: {answer}."}]


STEPS = [["research"], ["research:look"], ["research:tools"], ["research:look"], ["agent"], ["tools"], ["agent"]]
