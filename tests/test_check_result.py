"""CheckResult (``carag check --json``, ``POST /v1/check``) carries the full CaragSettings: a result can be reproduced."""

from __future__ import annotations

import json

import pytest

from llama_index_carag import PAPER, TUNED, CaragSettings, CheckResult, ContextAwareRetriever, check_claim
from llama_index_carag.verdicts.checking import CHECK_SCHEMA_VERSION, check_result_json_schema

CLAIM = "Offshore wind farms drive fish away."
pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "settings",
    [
        TUNED.replace(n_clusters=4, delta=0.5, random_state=3, soi_top_m=5),
        PAPER.replace(mode="supervised", n_clusters=2),
    ],
    ids=["tuned-variant", "paper-supervised"],
)
def test_a_results_settings_rebuild_the_retriever_and_its_evidence(demo_index, demo_corpus, settings):
    retriever = ContextAwareRetriever.from_index(demo_index, settings, claim_nodes=demo_corpus.claim_nodes)
    text = json.dumps(check_claim(retriever, CLAIM).to_json_dict())  # what a client stores

    data = json.loads(text)
    assert data["schema_version"] == CHECK_SCHEMA_VERSION
    rebuilt = CaragSettings.model_validate(data["settings"])
    assert rebuilt == retriever.settings == settings
    assert CheckResult.model_validate_json(text).settings == settings

    # nothing but the stored settings (clustering options included): a fresh fit gives the same evidence
    again = ContextAwareRetriever.from_index(demo_index, rebuilt, claim_nodes=demo_corpus.claim_nodes)
    redo = check_claim(again, CLAIM).to_json_dict()
    assert [(r["id"], r["score"]) for r in redo["evidence"]] == [(r["id"], r["score"]) for r in data["evidence"]]


def test_schema_names_every_settings_field():
    schema = check_result_json_schema()
    ref = schema["properties"]["settings"]["$ref"].rsplit("/", 1)[-1]
    assert set(schema["$defs"][ref]["properties"]) == set(CaragSettings.model_fields)
    assert schema["properties"]["schema_version"]["default"] == CHECK_SCHEMA_VERSION == 2
