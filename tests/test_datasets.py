import csv

import pytest
from llama_index.core.schema import MetadataMode

from llama_index_carag.datasets import (
    LABEL_METADATA_KEYS,
    LINKS_KEY,
    factver_theme,
    load_claim_evidence_csv,
    load_demo_corpus,
    load_factver,
)


def test_factver_theme_parsing():
    assert factver_theme("Claims_Electric_Vehicles_C_2.1_335") == "Electric_Vehicles"
    assert factver_theme("Claims_Covid_B2.0_105") == "Covid"
    assert factver_theme("Claims_Covid_C_2.2_458") == "Covid"
    assert factver_theme("Claims_Oceans_Demo_3") == "Oceans"
    with pytest.raises(ValueError):
        factver_theme("nounderscore")


def test_load_factver_counts_and_metadata(factver_corpus):
    c = factver_corpus
    assert c.n_rows == 3096
    assert len(c.evidence_nodes) == 3092 and len(c.claim_nodes) == 589
    assert [s.reason for s in c.skipped] == ["empty evidence text, its claim kept"] * 4
    assert c.themes == ["Climate", "Covid", "Electric_Vehicles"]
    node = c.evidence_nodes[0]
    assert node.node_id == "Evidence_Claims_Climate_B2.0_1_1"
    assert node.metadata["claim_id"] == "Claims_Climate_B2.0_1" and node.metadata["theme"] == "Climate"
    for n in c.evidence_nodes[:50] + c.claim_nodes[:50]:
        for key in LABEL_METADATA_KEYS:
            if key in n.metadata:
                assert key in n.excluded_embed_metadata_keys and key in n.excluded_llm_metadata_keys
        assert n.get_content(MetadataMode.EMBED) == n.text  # no label leaks into embeddings
        assert n.get_content(MetadataMode.LLM) == n.text
    assert "589 claims" in c.summary() and "4 rows skipped" in c.summary()


def test_factver_ids_are_stable(factver_path):
    a, b = load_factver(factver_path), load_factver(factver_path)
    assert [n.node_id for n in a.evidence_nodes] == [n.node_id for n in b.evidence_nodes]


def test_demo_corpus_shape():
    c = load_demo_corpus()
    assert len(c.claim_nodes) == 21 and len(c.evidence_nodes) == 126 and not c.skipped
    assert c.themes == ["Energy", "Nutrition", "Oceans"]
    assert {n.metadata["label"] for n in c.claim_nodes} == {"T", "F", "N"}


def write(path, rows, header=("claim", "evidence")):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_a_passage_cited_by_two_claims_links_both(tmp_path):
    rows = [
        ("c1", "Claim A", "e1", "shared abstract"),
        ("c2", "Claim B", "e1", "shared abstract"),  # the same passage cited by a second claim: a link
        ("c2", "Claim B", "e1", "shared abstract"),  # the same link again: a duplicate row
        ("c2", "Claim B", "e2", "own abstract"),
        ("c9", "", "e3", "library abstract"),  # no claim text: a library passage, whatever its claim id cell
        ("c3", "Claim C", "e3", "library abstract"),  # a claim linked to a library passage read before
        ("c3", "Claim C", "e2", "another text"),  # an id reused for a different text: not linked
    ]
    c = load_claim_evidence_csv(
        write(tmp_path / "x.csv", rows, ("claim_id", "claim", "evidence_id", "evidence")),
        claim_id_col="claim_id",
        evidence_id_col="evidence_id",
    )
    assert [n.node_id for n in c.evidence_nodes] == ["e1", "e2", "e3"]
    links = {n.node_id: n.metadata.get(LINKS_KEY) for n in c.claim_nodes}
    assert links == {"c1": ["e1"], "c2": ["e1", "e2"], "c3": ["e3"]}
    assert [(s.line, s.reason) for s in c.skipped] == [
        (4, "duplicate row"),
        (8, "evidence id reused for a different text"),
    ]
    assert c.evidence_nodes[0].metadata["claim_id"] == "c1"  # the passage's own claim: the first that cites it
    library = c.evidence_nodes[2]  # read as a library passage, then cited: it takes its first citing claim
    assert library.metadata["claim_id"] == "c3" and "c3" not in library.get_content(metadata_mode=MetadataMode.EMBED)
    assert "c9" not in {n.node_id for n in c.claim_nodes}
    claim = c.claim_nodes[1]
    assert "e1" not in claim.get_content(metadata_mode=MetadataMode.EMBED)  # links are never embedded
    assert "e1" not in claim.get_content(metadata_mode=MetadataMode.LLM)


def test_generic_loader_hash_ids_and_skips(tmp_path):
    p = write(
        tmp_path / "x.csv",
        [("Claim A", "ev 1"), ("Claim A", "ev 1"), ("Claim A", ""), ("Claim B", "ev 2"), ("", "library"), ("", "")],
    )
    c = load_claim_evidence_csv(p)
    assert len(c.evidence_nodes) == 3 and len(c.claim_nodes) == 2  # a row without a claim: a library passage
    library = c.evidence_nodes[-1]
    assert library.get_content() == "library" and "claim_id" not in library.metadata
    assert sorted(s.reason for s in c.skipped) == ["duplicate row", "empty evidence text, its claim kept", "empty row"]
    assert c.n_rows == 6
    again = load_claim_evidence_csv(p)
    assert [n.node_id for n in c.evidence_nodes] == [n.node_id for n in again.evidence_nodes]


def test_generic_loader_reused_evidence_id(tmp_path):
    p = write(tmp_path / "x.csv", [("c", "e1", "id1"), ("c", "e2", "id1")], header=("claim", "evidence", "eid"))
    c = load_claim_evidence_csv(p, evidence_id_col="eid")
    assert len(c.evidence_nodes) == 1
    assert c.skipped[0].reason == "evidence id reused for a different text" and c.skipped[0].line == 3


def test_missing_columns_bad_encoding_missing_file(tmp_path):
    p = write(tmp_path / "x.csv", [("a", "b")], header=("claim", "text"))
    with pytest.raises(ValueError, match=r"lacks column\(s\) evidence \(it has: claim, text\)"):
        load_claim_evidence_csv(p)
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"claim,evidence\n\xff\xfe caf\xe9,x\n")
    with pytest.raises(ValueError, match="not valid utf-8-sig"):
        load_claim_evidence_csv(bad)
    with pytest.raises(FileNotFoundError):
        load_claim_evidence_csv(tmp_path / "nope.csv")
    with pytest.raises(ValueError, match="lacks column"):
        load_factver(p)
