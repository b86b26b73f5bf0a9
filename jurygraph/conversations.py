"""Conversations and agent trajectories as items: the public names.

>>> from jurygraph.conversations import from_thread
>>> fields = from_thread(agent, {"configurable": {"thread_id": "t1"}})
>>> item = EvalItem(task="score", scale={"low": 1, "high": 10}, aspect="task_completion", **fields)

- :func:`from_thread` / :func:`afrom_thread`: a LangGraph thread (a compiled graph with a checkpointer, or the
  checkpointer) as an item's ``id``, ``messages`` (OpenAI-style, tool calls included), ``steps`` (node names per
  superstep, subgraphs included) and ``meta``; :func:`load_threads` many threads of a store as a dataset
  (``jurygraph eval --from-threads``).
- :class:`Message`, :class:`ToolCall`: what an item's ``messages`` hold.
- :func:`match_trajectory`, :class:`TrajectoryMatch`: agentevals-style tool-call matches against a reference
  trajectory; :func:`match_first` puts one before a panel (``jurygraph eval --trajectory-match``).

The code lives in the layers (``jurygraph.running.threads``, ``jurygraph.judging.conversations``,
``jurygraph.judging.trajectory``, ``jurygraph.graphs.trajectory``); this module only gathers the names.
"""

from __future__ import annotations

from jurygraph.graphs.trajectory import match_first
from jurygraph.judging.conversations import Message, ToolCall
from jurygraph.judging.trajectory import TrajectoryMatch, match_trajectory
from jurygraph.running.threads import ThreadError, afrom_thread, from_thread, load_threads

__all__ = ["Message", "ThreadError", "ToolCall", "TrajectoryMatch", "afrom_thread", "from_thread", "load_threads",
           "match_first", "match_trajectory"]
