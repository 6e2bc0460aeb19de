"""Research code beside the package: what produces the docs/ tables and the papers' reproductions.

Not part of the ``llama-index-carag`` wheel (``pyproject.toml`` packages ``llama_index_carag*`` only): a
user of the retriever never imports it.  It imports the package and runs from the repository root:

* ``python -m research.retrieval_bench --protocol`` / ``--beir DIR`` — the retrieval benchmark on new claims
  (dense, BM25, hybrid RRF and the CARAG variants; formerly ``carag eval``): :mod:`research.new_claims`,
  :mod:`research.beir`.
* ``python -m research.eval`` — RAG, CARAG and CARAG-u at the papers' settings on FactVer's claims, the
  sweeps (``--sweep``), verdicts and explanations with an LLM (``--explain``); :mod:`research.runner`,
  :mod:`research.retrieval_metrics`, :mod:`research.verdict_metrics`.
* The verdict benchmarks' claims and evidence (``benchmarks/verdict_evidence.py``,
  ``benchmarks/verdict_subset.py``): :mod:`research.verdict_bench`, :mod:`research.archive_evidence`.
* ``python -m research.paper`` — the papers' thematic-alignment tables from their own explanations
  (:mod:`research.alignment`, :mod:`research.explanations`).
* ``python -m research.thematic_maps`` — the papers' thematic maps of explanations (formerly ``carag map``).
* ``python -m research.claim_extraction`` — the claim-extraction benchmark
  (:mod:`research.claim_extraction_pools`).

The tests are in ``research/tests`` (run by ``pytest``).
"""
