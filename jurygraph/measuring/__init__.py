"""Measuring: agreement with human labels (metrics, meta-evaluation of runs, the papers' tables, plots)."""
