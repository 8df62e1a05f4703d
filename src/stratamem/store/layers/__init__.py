"""The memory layers' records: session cursors, memory versions, scenes, the profile.

`port.py` is the `LayerStore` contract; `store.py` the code both databases share."""
