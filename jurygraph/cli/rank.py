"""``jurygraph rank RUN_DIR [RUN_DIR ...] [--json]``: rank the systems of pairwise runs whose items name them
(``meta.model_1`` / ``meta.model_2``, e.g. FairEval's gpt35 and vicuna; ``--map meta.model_1=COLUMN`` when
you run ``eval`` on your own data): Bradley–Terry strengths with bootstrap CIs, wins that do not survive the
answer swap counted as ties, the human ranking beside the judges' when there are human labels, and Elo as an
option. The computation is :mod:`jurygraph.measuring.ranking`; the items' systems are read from each results
line's ``systems`` (runs written before results kept them: from the runs' checkpoints, through ``cli.show``)."""

from __future__ import annotations

import argparse
import json
import sys

from jurygraph.cli.metaeval import panels_of, read_runs, run_systems
from jurygraph.cli.preflight import UsageError
from jurygraph.measuring.families import FAMILIES, parse_rules
from jurygraph.measuring.panel import same_family
from jurygraph.measuring.ranking import ELO_K, bradley_terry, collect, elo, elo_table, ranking_json, ranking_table


def add_arguments(rank: argparse.ArgumentParser) -> None:
    rank.add_argument("run_dir", nargs="+", metavar="RUN_DIR",
                      help="pairwise run directories (NAME=DIR to name one); a --reverse run after its forward run "
                           "gives the swapped order")
    rank.add_argument("--json", action="store_true", help="print the ranking as one JSON object")
    rank.add_argument("--elo", action="store_true", help="also an online Elo table (depends on the battles' order)")
    rank.add_argument("--elo-k", type=float, default=ELO_K, help=f"Elo's K factor (default {ELO_K:g}, Chatbot "
                                                                 "Arena's)")
    rank.add_argument("--resamples", type=int, default=1000,
                      help="bootstrap resamples of the strengths' CIs (default 1000; 0 = no CI)")
    rank.add_argument("--confidence", type=float, default=0.95, help="CI level (default 0.95)")
    rank.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    rank.add_argument("--family", action="append", metavar="NAME=REGEX",
                      help="a model family rule for the same-family warning (as in metaeval; repeatable)")
    rank.set_defaults(handler=cmd_rank)


def cmd_rank(args: argparse.Namespace) -> int:
    if args.resamples < 0 or not 0 < args.confidence < 1:
        raise UsageError("--resamples must be at least 0 and --confidence between 0 and 1")
    rules = [*parse_rules(args.family), *FAMILIES]
    named, paths, manifests = read_runs(args.run_dir)
    names = [name for name, _ in named]
    systems = []
    for (_, records), path, manifest in zip(named, paths, manifests, strict=True):
        if not any(r.get("task") == "pairwise" for r in records):
            raise UsageError(f"{path}: no pairwise items: rank needs runs that compare two answers")
        systems.append(run_systems(path, records, manifest))
    found = collect(names, [r for _, r in named], manifests, systems)
    if not found.battles:
        raise UsageError(f"{', '.join(paths)}: no pairwise item names its two systems with a verdict "
                         f"({found.unnamed} name none, {found.missing} have no verdict); the systems are "
                         "meta.model_1 / meta.model_2 of each item, read from the run's checkpoints: give them with "
                         "--map meta.model_1=COLUMN --map meta.model_2=COLUMN when you run eval")
    judges = bradley_terry(found.battles, resamples=args.resamples, confidence=args.confidence, seed=args.seed)
    labelled = [b for b in found.battles if b.human is not None]
    human = bradley_terry(labelled, human=True, resamples=args.resamples, confidence=args.confidence,
                          seed=args.seed) if labelled else None
    ratings = elo(found.battles, k=args.elo_k) if args.elo else None
    panels = panels_of(manifests, [records for _, records in named])
    for (name, records), named_systems, panel in zip(named, systems, panels, strict=True):
        for warning in same_family(name, records, named_systems, rules, panel):
            print(f"jurygraph: warning: {name}: judge {warning.member} ({warning.model}) is of the family of "
                  f"{warning.system} ({warning.family}), which it ranks", file=sys.stderr)
    if args.json:
        print(json.dumps(ranking_json(judges, found, names, human, ratings), indent=2, ensure_ascii=False))
        return 0
    print(ranking_table(judges, found, names, human).text())
    if ratings is not None:
        print("\n" + elo_table(ratings, args.elo_k).text())
    return 0
