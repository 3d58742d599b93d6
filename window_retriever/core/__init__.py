"""The pure core: plain data in, plain data out, the standard library only (private).

Windows (``_windows``: chunks, hits, plans, growth, merging), adaptive selection
(``_adaptive``), the metadata filter language (``_filters``), rank fusion (``_fusion``) and
chunk ids (``_ids``). Nothing here knows a store, LangChain or the network.
"""
