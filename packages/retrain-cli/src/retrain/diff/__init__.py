"""Comparing runs and campaign conditions: final metrics, winners, performance, curves."""
