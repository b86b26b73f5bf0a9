"""How a protocol's panel members are read from a results line (or a state): who the judges are whose judgments the
verdict combines. A protocol's spec says it for its own panel (``ProtocolSpec.panel``, :mod:`jurygraph.graphs.spec`);
:mod:`jurygraph.measuring.members` reads the members with it (metaeval's panel diagnostics, ``rank``'s same-family
warning)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# a results line -> each member's judgment of its item (a Judgment as a dict, stated for the original answer order)
MemberReader = Callable[[Mapping[str, Any]], dict[str, dict[str, Any]]]
# a results line -> per episode (answer order, MEC sample), member -> round -> its judgment as a number or label
RoundsReader = Callable[[Mapping[str, Any]], list[dict[str, dict[int, Any]]]]


def judgments_key(key: str) -> tuple[str | None, str]:
    """A key of a state's ``judgments`` as (run, agent): a calibration's ``original_order/Critic`` ->
    (``original_order``, ``Critic``); ``Critic`` -> (None, ``Critic``)."""
    run, sep, agent = key.rpartition("/")
    return (run, agent) if sep else (None, key)


@dataclass(frozen=True)
class PanelMembers:
    """Who the members of a protocol's panel are, read from a results line (metaeval's panel diagnostics).

    By default every agent with a judgment in ``judgments`` is a member (a calibration's runs of one agent are
    one member), but those in ``non_members`` (a summarizer, an advocate, an area chair that decides rather
    than votes...). ``member_of`` maps a judgments key to (run, member), or None for a key that is no member's;
    ``read`` replaces the reading whole (DEBATE: one Scorer, before and after the critique), and
    ``agent_of_member`` then says whose usage (model) a member is. ``rounds``: each member's judgment per round,
    when the protocol records rounds its own way (conformity)."""

    non_members: tuple[str, ...] = ()
    member_of: Callable[[str], tuple[str | None, str] | None] = judgments_key
    read: MemberReader | None = None
    agent_of_member: Callable[[str], str] | None = None
    rounds: RoundsReader | None = None

    def key(self, key: str) -> tuple[str | None, str] | None:
        """(run, member) of a judgments key; None when it is no member's."""
        found = self.member_of(key)
        return None if found is None or found[1] in self.non_members else found
