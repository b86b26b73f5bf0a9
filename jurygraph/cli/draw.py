"""``jurygraph draw``: a protocol's graph as mermaid, ASCII or PNG, built from the same options as ``eval``."""

from __future__ import annotations

import argparse

from jurygraph.cli.preflight import validate_numbers
from jurygraph.cli.protocols import add_protocol_arguments, build_protocol, check_ranges
from jurygraph.graphs.registry import short_name


def add_arguments(draw: argparse.ArgumentParser) -> None:
    add_protocol_arguments(draw)
    draw.add_argument("--format", choices=("mermaid", "png", "ascii"), default="mermaid")
    draw.add_argument("--out", help="file to write (default: stdout for mermaid/ascii, <protocol>.png for png)")
    draw.set_defaults(handler=cmd_draw)


def cmd_draw(args: argparse.Namespace) -> int:
    from jurygraph.cli.diagrams import render_graph

    validate_numbers(args)
    check_ranges(args)
    setup = build_protocol(args)
    text_or_path = render_graph(setup.graph, args.format, args.out or (f"{short_name(args.protocol)}.png"
                                                                          if args.format == "png" else None))
    print(text_or_path)
    return 0
