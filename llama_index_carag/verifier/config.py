"""A verifier folder's ``verifier.json``, typed: how the verifier decides, and a record of what it was fitted on.

:class:`VerifierConfig` holds the settings :class:`~llama_index_carag.verifier.model.ClaimVerifier` reads (its
thresholds, rule, head, confidence map, chunking, and whose weights it runs on) and, apart from them, ``record``:
what produced it (``training``, ``archive``, ``domain_check``) and the ``reference_outputs`` its model card quotes.
Nothing in ``record`` changes a decision.  :func:`~llama_index_carag.verifier.model.write_verifier_folder` is its
one writer; :meth:`VerifierConfig.read` its one reader.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from llama_index_carag.verdicts.types import LABELS

#: The file of a verifier folder that makes it one (written last, read first).
CONFIG_NAME = "verifier.json"


class VerifierConfig(BaseModel):
    """The settings of a verifier folder and the record of its fit (validated on read and on write)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    labels: tuple[str, ...] = Field(default=LABELS, description="the cross-encoder's output order")
    threshold: float = Field(default=0.5, ge=0.0, le=1.0, description="SUPPORTED's threshold (and REFUTED's)")
    refuted_threshold: float | None = Field(default=None, ge=0.0, le=1.0, description="REFUTED's own, if any")
    rule: Literal["strongest", "mean"] = Field(default="strongest", description="how the passages are read")
    chunk_words: int = Field(default=64, ge=1, description="a longer passage is scored in chunks of sentences")
    max_length: int = Field(default=256, ge=8, description="the cross-encoder's tokens per pair")
    head: dict[str, Any] | None = Field(default=None, description="an archive's LabelHead.to_dict(), or null")
    confidence: dict[str, Any] | None = Field(default=None, description="LabelConfidence.to_dict(), or null")
    weights: Literal["own", "shipped"] = Field(
        default="own", description="the cross-encoder's files: this folder's, or the package's shipped model"
    )
    record: dict[str, Any] = Field(default_factory=dict, description="what produced it; read by people only")

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if tuple(value) != LABELS:
            raise ValueError(f"labels {list(value)} are not {list(LABELS)}")
        return tuple(value)

    @classmethod
    def read(cls, folder: str | Path) -> VerifierConfig:
        """The config of the verifier folder ``folder``.

        Raises:
            FileNotFoundError: ``folder`` has no ``verifier.json``.
            ValueError: the file is not valid JSON or not a valid config (the message names the file).
        """
        path = Path(folder) / CONFIG_NAME
        if not path.is_file():
            raise FileNotFoundError(
                f"{folder} is not a verifier folder (no {CONFIG_NAME}); train one with `carag train-verifier`."
            )
        try:
            return cls.model_validate(json.loads(path.read_text(encoding="utf-8")))
        except ValidationError as exc:
            why = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'file'}: {e['msg']}" for e in exc.errors())
            raise ValueError(
                f"{path}: not a valid verifier config: {why} (an index's verifier folder is written by carag index: "
                "run it again to re-fit it)"
            ) from None
        except ValueError as exc:  # not JSON
            raise ValueError(f"{path}: not a valid verifier config: {exc}") from None

    def to_json_text(self) -> str:
        """The file's text (sorted keys, one trailing newline)."""
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"

    def with_record(self, **entries: Any) -> VerifierConfig:
        """This config with ``entries`` added to (or replacing those of) its record."""
        return self.model_copy(update={"record": {**self.record, **entries}})
