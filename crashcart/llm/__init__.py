"""The LLM engine (DESIGN §5): swarm, reduce and vision roles over any OpenAI-compatible endpoint.

``LlmEngine`` implements the engine seam (``crashcart.engine.Engine``); ``client`` holds retries,
budgets, the cache and the ledger; ``windows`` decides what the swarm is shown; ``doctor`` checks an
endpoint. Log text always reaches a model redacted and inside data blocks; every citation is made by our
code from the bundle.
"""
