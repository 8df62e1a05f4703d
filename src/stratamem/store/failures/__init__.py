"""Failure records of the LLM stages: `records.py` the typed records, `rows.py` the table."""
