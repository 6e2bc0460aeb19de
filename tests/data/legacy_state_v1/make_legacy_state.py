"""Write tests/data/legacy_state_v1 with the code of commit 603ae74 (BM25 in a side folder, old table keys).

Run from a `git archive 603ae74 llama_index_carag tests/helpers.py tests/__init__.py` export:
    PYTHONPATH=<export> python make_legacy_state.py <out dir>
"""

import json
import sys
from pathlib import Path

import numpy as np
from llama_index.core import VectorStoreIndex
from llama_index.core.schema import QueryBundle

import llama_index_carag
from llama_index_carag import ContextAwareRetriever
from tests.helpers import planted_corpus

print("package:", llama_index_carag.__file__)  # must be the 603ae74 export
out = Path(sys.argv[1])
evidence, claims, emb = planted_corpus(np.random.default_rng(20240607), claims_per_theme=3, evidence_per_claim=4)
index = VectorStoreIndex([n.model_copy() for n in evidence], embed_model=emb)
r = ContextAwareRetriever.from_index(
    index,
    "paper",
    claim_nodes=claims,
    n_clusters=3,
    alpha=0.8,
    rerank_candidates=10,
    lexical_weight=0.6,
    claim_contrast=0.3,
    contrast_threshold=0.9,
    hub_penalty=0.1,
    hub_k=3,
)
r.persist(out, persist_index=True)
queries = []
for k, claim in enumerate(claims):
    text = f"{claim.text} {evidence[(7 * k + 3) % len(evidence)].text}"  # a BM25 match from elsewhere
    bundle = QueryBundle(query_str=text, embedding=list(claim.embedding))
    hits = r.retrieve(bundle)
    queries.append(
        {
            "text": text,
            "lexical_id": evidence[(7 * k + 3) % len(evidence)].node_id,
            "embedding": list(claim.embedding),
            "expected": [[h.node.node_id, round(float(h.score), 6)] for h in hits],
        }
    )
(out / "queries.json").write_text(json.dumps({"made_with": "603ae74", "queries": queries}, indent=1))
print(sum(q["lexical_id"] in [i for i, _ in q["expected"]] for q in queries), "queries return their BM25 match")
print(sorted(p.name for p in (out / "carag").iterdir()), len(queries))
