"""One retrieval, from the query to the windows (private).

The retriever is ``window_retriever.ContextWindowRetriever``.
``_retriever``: the LangChain retriever, which checks its options (``_params``) and drives a
flow of requests; ``_candidates``: where hits come from; ``_pool``: what a retrieval knows
and the one filtered read by id; ``_strategies`` and ``_adaptive_strategy``: a plan, a fetch
and a selection per strategy; ``_records``: stored documents in, windows out as documents.
"""
