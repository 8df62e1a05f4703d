"""Core records: turns (L0) and memories (L1), their embeddings, full-text and vector search.

`port.py` is the `Store` contract; `store.py` the code both databases share."""
