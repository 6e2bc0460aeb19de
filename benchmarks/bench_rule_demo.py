"""The measured label rule on out-of-domain data: the package's own demo corpus (21 fictional claims).

    python benchmarks/bench_rule_demo.py      # ~3 min on 2 cores, the offline Qwen under llama.cpp

Each demo claim is scored with its annotated evidence (6 passages); the label rule
(``label_rules.measured_rule``, fitted on FactVer's tuning half) and the plain arg-max decide from
the same label scores.  Prints one line per claim and the two counts.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import collections

from llama_index.core.schema import NodeWithScore

from llama_index_carag.datasets import load_demo_corpus
from llama_index_carag.models.resolve import resolve_embed_model, resolve_llm
from llama_index_carag.verdicts.labels.rules import evidence_cosines
from llama_index_carag.verdicts.prompts import evidence_texts
from llama_index_carag.verdicts.synthesizer import FactCheckSynthesizer

corpus = load_demo_corpus()
embed = resolve_embed_model("minilm")
llm = resolve_llm(None)
synth = FactCheckSynthesizer(llm, embed_model=embed)
rule = getattr(synth.decision, "rule", None)
if rule is None:
    raise SystemExit("No label rule applies: this needs llama-cpp-python (the llama.cpp Qwen) and MiniLM.")
by = collections.defaultdict(list)
for n in corpus.evidence_nodes:
    by[n.metadata.get("claim_id")].append(n)
fever = {"T": "SUPPORTED", "F": "REFUTED", "N": "NOT_ENOUGH_INFO"}
ok_rule = ok_raw = 0
rows = []
for c in corpus.claim_nodes:
    ev = [NodeWithScore(node=n, score=None) for n in by[c.node_id]][:6]
    s = synth.score_labels(c.text, ev)
    cos = evidence_cosines(embed, c.text, evidence_texts(ev))
    r, a = rule.predict(s.logprobs, cos).value, max(s.logprobs, key=s.logprobs.get).value
    g = fever[c.metadata["label"]]
    ok_rule += r == g
    ok_raw += a == g
    print(
        c.metadata["label"], "rule", r, "argmax", a, "n_ev", len(ev), "maxcos", round(float(cos.max()), 2), flush=True
    )
print(f"demo corpus, annotated evidence, {len(corpus.claim_nodes)} claims: rule {ok_rule}, plain arg-max {ok_raw}")
