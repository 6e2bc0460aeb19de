"""Verdicts through the command line, as a desk would get them: an archive CSV, ``carag index --calibrate``, then
``carag check --claims`` on claims the index never saw (new-claims protocol).

``make`` writes, from ``../shared/data`` (read there, nothing copied into the repository):

* FactVer: ``factver_archive.csv`` in FactVer's layout — the tuning half's rows with claim, label and links, the
  report half's rows as library passages (claim and label blanked) — and ``factver_report.jsonl`` (the report
  half's claims with at least one evidence row: ``{"id", "claim", "label"}``);
* SciFact: ``scifact_archive.csv`` (``claim_id, claim, evidence_id, evidence, label``) — each train claim on the
  row of every abstract it cites, every other abstract a library row — and ``scifact_report.jsonl`` (the 300
  test claims).

``score`` compares a results file with the claims' labels (accuracy, macro-F1, recall and share per label).

    python benchmarks/cli_verdicts.py make OUT
    carag index OUT/factver_archive.csv --out OUT/fv_index --calibrate --force
    carag check --claims OUT/factver_report.jsonl --index OUT/fv_index --out OUT/fv_results.jsonl --no-explanation
    python benchmarks/cli_verdicts.py score OUT/fv_results.jsonl OUT/factver_report.jsonl
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from bench_verdicts import metrics

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
sys.path.append(str(Path(__file__).resolve().parents[1]))  # research/ imports from the repository root
_FEVER = {"T": "SUPPORTED", "F": "REFUTED", "N": "NOT_ENOUGH_INFO"}


def make_factver(out: Path) -> None:
    from llama_index_carag.datasets import load_factver
    from research.runner import split_claims

    source = SHARED / "factver" / "factver_master.csv"
    claims = load_factver(source).claim_nodes
    tune, report = split_claims(claims, seed=0)
    tune_ids = {c.metadata["claim_id"] for c in tune}
    with open(source, newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        fields, rows = list(reader.fieldnames or []), list(reader)
    evidence_of: dict[str, int] = {}
    with open(out / "factver_archive.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            if row["Claim_topic_id"] not in tune_ids:
                evidence_of[row["Claim_topic_id"]] = evidence_of.get(row["Claim_topic_id"], 0) + bool(
                    row["Evidence_text"].strip()
                )
                row = {**row, "Claim_text": "", "Label": "", "Reason": "", "Reason_Type": ""}
            writer.writerow(row)
    with open(out / "factver_report.jsonl", "w", encoding="utf-8") as fh:
        for c in report:
            cid = c.metadata["claim_id"]
            if evidence_of.get(cid):
                label = _FEVER[str(c.metadata["label"])]
                fh.write(json.dumps({"id": cid, "claim": c.get_content(), "label": label}) + "\n")


def make_scifact(out: Path) -> None:
    folder = SHARED / "scifact"
    corpus = {}
    with open(folder / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            corpus[str(row["_id"])] = (row.get("title", "") + " " + row["text"]).strip()
    cited: set[str] = set()
    with (
        open(folder / "verdicts.jsonl", encoding="utf-8") as fh,
        open(out / "scifact_archive.csv", "w", newline="", encoding="utf-8") as archive,
        open(out / "scifact_report.jsonl", "w", encoding="utf-8") as report,
    ):
        writer = csv.writer(archive)
        writer.writerow(["claim_id", "claim", "evidence_id", "evidence", "label"])
        for line in fh:
            row = json.loads(line)
            if row["split"] == "test":
                report.write(json.dumps({"id": str(row["claim_id"]), "claim": row["claim"], "label": row["label"]}))
                report.write("\n")
                continue
            for doc in row["evidence_ids"]:
                if str(doc) in corpus:
                    cited.add(str(doc))
                    writer.writerow([f"c{row['claim_id']}", row["claim"], str(doc), corpus[str(doc)], row["label"]])
        for doc, text in corpus.items():
            if doc not in cited:
                writer.writerow(["", "", doc, text, ""])


def score(results: Path, claims: Path) -> dict[str, float]:
    gold = {}
    for line in claims.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        gold[row["claim"]] = row["label"]
    g, p = [], []
    for line in results.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row.get("claim") in gold and row.get("verdict"):
            g.append(gold[row["claim"]])
            p.append(row["verdict"]["label"])
    return metrics(g, p)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("make")
    m.add_argument("out")
    s = sub.add_parser("score")
    s.add_argument("results")
    s.add_argument("claims")
    args = parser.parse_args(argv)
    if args.command == "make":
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        make_factver(out)
        make_scifact(out)
    else:
        print(json.dumps(score(Path(args.results), Path(args.claims)), indent=1))


if __name__ == "__main__":
    main()
