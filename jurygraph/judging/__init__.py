"""Judging: items, judgments, graph state, aspects and scales, aggregation, reading a judgment from a reply."""
