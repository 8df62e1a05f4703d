"""What the LLM stages of the memory layers and of context offload share, between the LLM
client and the stages: strict reply envelopes whose items are checked one by one, the repair
round for a reply that fails those checks, batch bisection, and the minimum-content rule.

    llm  ←  stages  ←  layers · offload
"""
