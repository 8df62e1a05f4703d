"""Context offload's records: tool pairs, entries, refs, boundaries, task diagrams.

`port.py` is the `OffloadStore` contract, `records.py` its typed records, `store.py` the SQL."""
