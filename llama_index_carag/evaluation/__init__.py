"""Evaluation: the retrieval benchmark on new claims, what ``carag eval --protocol`` / ``--beir`` run.

* :mod:`~llama_index_carag.evaluation.new_claims` — the protocol: tasks (FactVer halves, BEIR folders),
  the stock baselines and the scores (nDCG@10, recall@6, MRR@10, theme precision@6).
* :mod:`~llama_index_carag.evaluation.beir` — reading a BEIR-format folder.
* :mod:`~llama_index_carag.evaluation.benchmark` — the table of every baseline and CARAG variant, written as
  CSV and Markdown.

The papers' comparison, its sweeps, the verdict and claim-extraction benchmarks and the papers'
thematic-alignment table are research code beside the package (``research/`` in the repository).
"""
