"""CARAG as LlamaIndex components: the ``ContextAwareRetriever`` and the postprocessor, the per-query plan,
fitting a corpus from an index, corpus edits, the saved state, and building the FAISS index."""
