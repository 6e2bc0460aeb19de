"""Research code beside the package: what produces the docs/ tables and the papers' reproductions.

Not part of the ``llama-index-carag`` wheel (``pyproject.toml`` packages ``llama_index_carag*`` only): a
user of the retriever never imports it.  It imports the package and runs from the repository root:

* ``python -m research.eval`` — RAG, CARAG and CARAG-u at the papers' settings on FactVer's claims, the
  sweeps (``--sweep``), verdicts and explanations with an LLM (``--explain``), and the two-domain verdict
  benchmark (``--verdicts``); :mod:`research.runner`, :mod:`research.retrieval_metrics`,
  :mod:`research.verdict_metrics`, :mod:`research.verdict_decisions`, :mod:`research.verdict_cache`,
  :mod:`research.verdict_bench` (and the label-bias offsets it tunes, :mod:`research.label_bias`),
  :mod:`research.archive_bench`, :mod:`research.archive_evidence`.
* ``python -m research.paper`` — the papers' thematic-alignment tables from their own explanations
  (:mod:`research.alignment`).
* ``python -m research.claim_extraction`` — the claim-extraction benchmark
  (:mod:`research.claim_extraction_pools`).
* ``python -m research.archive_bench`` / ``python -m research.verdict_cache`` — the archive decision's
  tables; collecting the LLM outputs the verdict benchmarks replay.

The retrieval benchmark on new claims stays in the package (``carag eval --protocol`` / ``--beir``), and
so do the thematic maps (``carag map``).  The tests are in ``research/tests`` (run by ``pytest``).
"""
