"""Vector-store backends behind one adapter protocol (:mod:`.vector_stores`): FAISS, LlamaIndex's simple
store, and Qdrant (whose collection also holds the cluster payloads, :mod:`.qdrant_store`)."""
