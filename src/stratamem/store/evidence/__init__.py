"""The pipeline's evidence: the execution log, completion receipts and their retention."""
