"""Shared pieces of the host programs: config parsing, deterministic tensors,
framed TCP with timeouts, and JSON-lines results."""
