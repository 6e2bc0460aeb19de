"""Property-based fuzzing of where strangers' input arrives: the claim files of ``carag check --claims``, the
corpus CSV loaders, the HTTP bodies of ``carag serve`` and the persisted state.  Each input either works or fails
with a clear error naming it; never another exception, a 500 or a hang.

Bounded for CI: ``FUZZ_EXAMPLES`` examples per property (default 60); ``benchmarks/bench_fuzz.py`` runs thousands.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llama_index_carag import ContextAwareRetriever
from llama_index_carag.cli.common import CLIError
from llama_index_carag.core.persistence import StateError
from llama_index_carag.datasets import load_claim_evidence_csv, load_factver
from tests.helpers import planted_corpus
from tests.serve_helpers import make_app

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "60"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
#: Text with the characters that break parsers: controls, bidi marks, NUL, quotes, separators, lone surrogates.
NASTY = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(["\x00", "\u202e", "\u200b", '"', ",", "\n", "\r", "{", "}", "\ud800", "\ufeff"]),
    ),
    max_size=300,
)
RAW = st.one_of(st.binary(max_size=400), NASTY.map(lambda t: t.encode("utf-8", "surrogatepass")))
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.integers() | NASTY,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(NASTY, inner, max_size=4),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@FUZZ
@given(data=RAW, suffix=st.sampled_from([".jsonl", ".csv", ".txt"]))
def test_claim_files_work_or_fail_clearly(work, data, suffix):
    from llama_index_carag.cli.check import read_claims

    path = work / f"claims{suffix}"
    path.write_bytes(data)
    try:
        claims, problems = read_claims(str(path))
    except CLIError as exc:
        assert str(exc).strip()
        return
    assert all(c.claim.strip() for c in claims)
    assert all(line >= 1 and why for line, why in problems)


@FUZZ
@given(header=st.lists(NASTY, min_size=1, max_size=5), rows=st.lists(st.lists(NASTY, max_size=6), max_size=5))
def test_corpus_csvs_work_or_fail_clearly(work, header, rows):
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    writer.writerows(rows)
    path = work / "corpus.csv"
    path.write_bytes(buffer.getvalue().encode("utf-8", "surrogatepass"))
    for load in (load_factver, load_claim_evidence_csv):
        try:
            corpus = load(path)
        except (ValueError, FileNotFoundError) as exc:
            assert str(exc).strip()
            continue
        assert all(n.get_content() for n in corpus.evidence_nodes)


@pytest.fixture(scope="module")
def client(demo_index, demo_corpus):
    retriever = ContextAwareRetriever.from_index(
        demo_index, "paper", claim_nodes=demo_corpus.claim_nodes, n_clusters=3, delta=0.5
    )
    with TestClient(make_app(retriever, max_claim_chars=300, max_body_bytes=4096)) as c:
        yield c


ROUTES = ["/v1/check", "/v1/graph", "/v1/check-batch", "/v1/check-text", "/v1/check/stream"]


@FUZZ
@given(route=st.sampled_from(ROUTES), body=st.one_of(RAW, JSON_VALUES.map(lambda v: json.dumps(v).encode())))
def test_http_bodies_get_an_answer_or_a_clear_error(client, route, body):
    r = client.post(route, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code in (200, 400, 413, 415, 422), (r.status_code, r.text[:300])
    if r.status_code != 200:
        error = r.json()["error"]
        assert error["code"] and error["message"]


@pytest.fixture(scope="module")
def persisted(tmp_path_factory):
    import numpy as np

    from tests.test_persist_journal import _fitted

    corpus = planted_corpus(np.random.default_rng(0), evidence_per_claim=4)
    folder = tmp_path_factory.mktemp("state") / "index"
    _fitted(corpus).persist(folder, persist_index=True)
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    return folder, files, corpus[2]


@settings(FUZZ, max_examples=max(10, EXAMPLES // 3))
@given(data=st.data())
def test_damaged_persisted_files_load_or_fail_with_a_state_error(persisted, work, data):
    folder, files, emb = persisted
    damaged = work / "damaged"
    shutil.rmtree(damaged, ignore_errors=True)
    shutil.copytree(folder, damaged)
    name = data.draw(st.sampled_from(files), label="file")
    raw = (damaged / name).read_bytes()
    how = data.draw(st.sampled_from(["truncate", "flip", "swap", "empty"]), label="how")
    if how == "truncate":
        raw = raw[: data.draw(st.integers(0, max(0, len(raw) - 1)), label="at")]
    elif how == "flip" and raw:
        at = data.draw(st.integers(0, len(raw) - 1), label="at")
        raw = raw[:at] + bytes([raw[at] ^ (1 << data.draw(st.integers(0, 7), label="bit"))]) + raw[at + 1 :]
    elif how == "swap":
        other = data.draw(st.sampled_from(files), label="with")
        raw = (folder / other).read_bytes()
    else:
        raw = b""
    (damaged / name).write_bytes(raw)
    try:
        ContextAwareRetriever.from_persist_dir(damaged, embed_model=emb)
    except (StateError, ValueError, FileNotFoundError) as exc:
        assert str(exc).strip()
