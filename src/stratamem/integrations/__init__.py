"""Adapters for agent frameworks, each over any `stratamem.Memory` or `stratamem.client.Client`:
`langgraph` (a LangGraph `BaseStore` and memory tools) and `openai_agents` (an OpenAI Agents SDK
`Session`). Install them with the `integrations` extra."""
