"""PHub (Parameter Hub): a parameter server with fine-grained key chunking, per-core
chunk ownership, tall aggregation and the optimizer inside the server (docs/phub.md)."""
