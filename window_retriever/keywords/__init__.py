"""The keyword (BM25) index beside a store (private; its public helpers are in ``stores``).

``_index``: keeping one index per collection current (fingerprints, the change feed, the
saved copy) and answering searches under a filter; ``_engine``: the words, tantivy and the
saved folder; ``_rows``: each chunk's id, length, metadata and words as arrays. It reaches the
collection only through its ``KeywordSource`` protocol, which the Chroma store implements.
"""
