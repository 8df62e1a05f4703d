"""Lineage: what each scene version and profile version was built from (memories, scenes), and
forgetting that reaches everything built on a forgotten source (`store.py`)."""
