"""Readers of metrics JSONL files: one-pass aggregates and tail reads that tolerate torn lines."""
