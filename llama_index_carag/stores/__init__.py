"""Vector stores behind one adapter protocol (:mod:`.adapter_protocol`, picked by
:func:`.vector_stores.adapter_for`): FAISS (:mod:`.faiss_adapter`), LlamaIndex's simple store
(:mod:`.simple_adapter`), Qdrant (:mod:`.qdrant_adapter`; its collection also holds the cluster
payloads, :mod:`.qdrant_clusters`), and any other store whose nodes carry their embeddings
(:mod:`.base_adapter`).  A new vector store is one adapter class listed in
:data:`.vector_stores.ADAPTERS`.  The docstore (the passages' text) is chosen in :mod:`.docstores`
(LlamaIndex's simple store, DuckDB, Redis; :mod:`.batching_docstore` writes an insert's nodes in one call)."""
