"""The members of a panel, read from a run's records: each judge whose judgment the verdict combines.

Who they are is the protocol's to say (:class:`~jurygraph.judging.panel.PanelMembers`, in its spec); by default:

- Per-agent ``judgments`` of a record: ChatEval's referees, the ensemble's personas, ReFeR's peers and area
  chair (the last judgment of each; ChatEval's judgments of every round are in ``verdict.detail``), but the
  panel's ``non_members``.
- Under a calibration (``--calibrate bpc`` / ``mec``, ChatEval's default on pairwise data) the judgments are
  ``RUN/agent``, as the agent said them in the order it was shown: each is mapped to the original answer
  order, and a member's judgment of the item is the combination of its runs the calibration makes of the
  verdict's (the mean scores, :func:`~jurygraph.judging.aggregation.aggregate`), its runs kept in
  ``detail.runs`` so that :mod:`jurygraph.measuring.position` pairs its two orders as it pairs the verdict's.

A protocol's panel may map judgments keys to members its own way (``member_of``: FairEval's reviews ``<order>
#<sample>`` are one judge) or read its members whole (``read``: DEBATE's one Scorer, before and after the
Critic). :func:`member_views` gives a run's records as each member would have them (its judgment as the
verdict), so a member is measured exactly as the verdict is, by
:func:`~jurygraph.measuring.metaeval.evaluate_records`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jurygraph.judging.aggregation import aggregate
from jurygraph.judging.items import TaskKind
from jurygraph.judging.judgments import Judgment, map_back
from jurygraph.judging.panel import PanelMembers
from jurygraph.measuring.position import SWAPPED

DEFAULT_PANEL = PanelMembers()
# what a member's record keeps of the run's record (its verdict is the member's judgment)
_ITEM_KEYS = ("id", "status", "task", "dataset", "aspect", "group", "human")


def in_original_order(run: str | None, judgment: Mapping[str, Any]) -> dict[str, Any]:
    """A calibration run's judgment stated for the original answer order (the run possibly inside a per-turn run,
    ``turn_2/swapped_order``)."""
    swapped = run is not None and run.rpartition("/")[2].startswith(SWAPPED)
    return map_back(dict(judgment)) if swapped else dict(judgment)


def member_judgments(record: Mapping[str, Any], panel: PanelMembers | None = None) -> dict[str, dict[str, Any]]:
    """Each member's judgment of the record's item, in the original answer order (see the module's doc);
    ``panel``: the run's protocol's (its spec's), else the default reading."""
    panel = panel or DEFAULT_PANEL
    if panel.read is not None:
        return panel.read(record)
    by_agent: dict[str, dict[str, dict[str, Any]]] = {}
    for key, judgment in (record.get("judgments") or {}).items():
        found = panel.key(key)
        if found is None:
            continue
        run, agent = found
        by_agent.setdefault(agent, {})[run or ""] = in_original_order(run, judgment)
    found_members = {}
    for agent, runs in by_agent.items():
        if list(runs) == [""]:
            found_members[agent] = runs[""]
            continue
        kind = TaskKind(next(iter(runs.values())).get("kind", "pairwise"))
        combined = aggregate([Judgment.model_validate(j) for j in runs.values()], kind, "mean").to_state()
        combined["detail"] = {"runs": runs}
        found_members[agent] = combined
    return found_members


def member_names(records: Iterable[Mapping[str, Any]], panel: PanelMembers | None = None) -> list[str]:
    """The members of a run, in the order they first appear."""
    return list(member_views(records, panel))


def member_views(records: Iterable[Mapping[str, Any]],
                 panel: PanelMembers | None = None) -> dict[str, list[dict[str, Any]]]:
    """Member -> the run's records with each verdict replaced by the member's judgment (missing where it gave
    none), for every member in the order they first appear (each record read once)."""
    records = list(records)
    judged = [member_judgments(record, panel) for record in records]
    names = list(dict.fromkeys(name for found in judged for name in found))
    return {name: [_view(record, found.get(name), name) for record, found in zip(records, judged, strict=True)]
            for name in names}


def _view(record: Mapping[str, Any], judgment: dict[str, Any] | None, member: str) -> dict[str, Any]:
    view = {key: record[key] for key in _ITEM_KEYS if key in record}
    view["verdict"] = judgment if judgment is not None else {"missing": True, "reason": f"no judgment by {member}"}
    return view


def member_models(records: Sequence[Mapping[str, Any]], members: Sequence[str],
                  panel: PanelMembers | None = None) -> dict[str, str | None]:
    """Each member's model (its spec's label, from the records' usage of the member's agent: the panel's
    ``agent_of_member``, e.g. DEBATE's two members are the Scorer)."""
    agent_of = (panel or DEFAULT_PANEL).agent_of_member or (lambda member: member)
    found: dict[str, str | None] = {}
    for member in members:
        agent = agent_of(member)
        found[member] = next((str(usage[agent]["model"]) for record in records
                              for usage in [record.get("usage") or {}]
                              if isinstance(usage.get(agent), Mapping) and usage[agent].get("model")), None)
    return found
