"""Drop-in memory for agent frameworks; each module needs its extra and is imported
only on demand (``import contextledger`` never imports a framework):

- ``contextledger.integrations.agents.LedgerSession`` — OpenAI Agents SDK (``[agents]``)
- ``contextledger.integrations.langchain.LedgerChatMessageHistory`` — LangChain (``[langchain]``)
- ``contextledger.integrations.pydantic_ai.LedgerHistory`` — Pydantic AI (``[pydantic-ai]``)
"""
