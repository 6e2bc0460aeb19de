"""The llama.cpp backend: LlamaIndex's ``LlamaCPP`` on a GGUF file (:class:`LlamaCppBackend`).

Resolves ``.gguf`` files, and the offline Qwen on CPU where llama.cpp is installed and generates on this
CPU (loaded by :mod:`~llama_index_carag.models.llamacpp` with the GGUF's own chat template).  Scoring on
the ``llama_cpp.Llama``: the prompt (the LLM's ``messages_to_prompt``) is evaluated once, each option
string is scored token by token on top of it and cut off again, and generation continues the evaluated
prompt.  Each prompt is evaluated from its first token, so its scores do not depend on what the model
evaluated before (llama.cpp's batch kernels round a token slightly differently depending on where it
falls in a batch).  One model holds one evaluation state: :func:`model_lock` serialises calls.

``llama-cpp-python`` and ``llama-index-llms-llama-cpp`` are optional and imported inside the methods.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from llama_index_carag.models.backend import LLMBackend, LLMRequest, loaded_class
from llama_index_carag.models.files import qwen_gguf_path
from llama_index_carag.models.llm_names import gguf_model_name, is_offline_qwen

logger = logging.getLogger(__name__)

__all__ = ["LlamaCppBackend", "log_softmax", "model_lock"]

K = TypeVar("K")

_LOCKS: weakref.WeakKeyDictionary[Any, threading.RLock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def model_lock(model: Any) -> Any:
    """The one re-entrant lock of a ``llama_cpp.Llama``: it holds evaluation state, so one call at a time."""
    with _LOCKS_GUARD:
        lock = _LOCKS.get(model)
        if lock is None:
            lock = _LOCKS[model] = threading.RLock()
        return lock


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Natural-log probabilities of one row of logits, shape ``(n_vocab,)`` → ``(n_vocab,)``."""
    row = np.asarray(logits, dtype=np.float64)
    shifted = row - row.max()
    return shifted - np.log(np.exp(shifted).sum())


class LlamaCppBackend(LLMBackend):
    """A ``LlamaCPP`` LLM: its ``llama_cpp.Llama`` scores strings and generates in process.

    Args:
        llm: a LlamaIndex ``LlamaCPP`` LLM.
        max_new_tokens: budget of generated explanations (default: the LLM's, at most 72).
    """

    name = "llama.cpp"
    logprobs = True

    def __init__(self, llm: Any, max_new_tokens: int | None = None) -> None:
        super().__init__(llm, max_new_tokens)
        #: llama.cpp's repetition penalty for generation (1.1, as for transformers, unless the LLM says).
        self.repeat_penalty = float(dict(llm.generate_kwargs or {}).get("repeat_penalty", 1.1))

    # ------------------------------------------------------------ resolving
    @classmethod
    def matches(cls, llm: Any) -> bool:
        found = loaded_class("llama_index.llms.llama_cpp", "LlamaCPP")
        return found is not None and isinstance(llm, found)

    @classmethod
    def claims(cls, request: LLMRequest) -> bool:
        """``.gguf`` files; the offline Qwen on CPU where llama.cpp generates (not ``-hf``, ``-int8`` or int8)."""
        if request.int8 or request.variant == "-hf":
            return False
        if request.is_gguf:
            return True
        if not (is_offline_qwen(request.name) and request.device_map == "cpu"):
            return False
        from llama_index_carag.models.llamacpp import llamacpp_available

        return llamacpp_available()

    @classmethod
    def check(cls, request: LLMRequest) -> None:
        if request.int8:
            raise ValueError("quantize='int8' is for transformers; llama.cpp runs the GGUF's own Q4_K_M weights.")
        if not (request.is_gguf or is_offline_qwen(request.name)) or request.variant == "-hf":
            raise ValueError(
                f"backend='llama.cpp' runs a .gguf file or the offline Qwen; got {request.spec or request.name!r}."
            )

    @classmethod
    def load(cls, request: LLMRequest) -> Any:
        """``LlamaCPP`` on the ``.gguf`` file, or on the offline Qwen's GGUF (:func:`~.files.qwen_gguf_path`)."""
        cls.check(request)
        from llama_index_carag.models.llamacpp import load_llamacpp

        name = request.name
        path = qwen_gguf_path() if is_offline_qwen(name) else Path(name).expanduser()
        return load_llamacpp(str(path), **request.generation_options())

    # ------------------------------------------------------------ describing
    @property
    def model_name(self) -> str:
        """The offline Qwen as ``"Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, llama.cpp)"``; another GGUF by its file."""
        return gguf_model_name(str(self.llm.model_path))

    def llm_budget(self) -> int:
        return int(self.llm.max_new_tokens)

    @property
    def model(self) -> Any:
        """The ``llama_cpp.Llama`` behind the LLM."""
        return self.llm._model

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """The model's lock, held around a scoring and its generation."""
        with model_lock(self.model):
            yield

    # ------------------------------------------------------------ scoring
    def _ids(self, text: str, first: bool = False) -> list[int]:
        return list(self.model.tokenize(text.encode("utf-8"), add_bos=first, special=True))

    def _last_logprobs(self) -> np.ndarray:
        import llama_cpp

        model = self.model
        row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(model.ctx, -1), shape=(model.n_vocab(),))
        return log_softmax(row)

    def _evaluate(self, ids: list[int]) -> None:
        """Evaluate ``ids`` from the first token, in llama.cpp's batches.

        Nothing held from an earlier prompt is reused: llama.cpp's kernels give a token slightly
        different values depending on where it falls in a batch (0.1 nats on the label scores), so a
        reused prefix would make a prompt's scores depend on the prompt before it.
        """
        model = self.model
        model.n_tokens = 0
        model.eval(ids)

    def score_options(
        self, messages: Sequence[Any], options: Mapping[K, str], prefix: str
    ) -> tuple[dict[K, float], None, list[int]]:
        """The prompt evaluated from its first token, each option token by token on top of it and cut off again."""
        prompt_ids = self._ids(self.render(messages, prefix), first=True)
        if not prompt_ids:
            raise ValueError("The rendered prompt is empty.")
        self._check_room(prompt_ids)
        with model_lock(self.model):
            self._evaluate(prompt_ids)
            logprobs = self._options_here(prompt_ids, options)
        return logprobs, None, prompt_ids

    def score_after_prefix(
        self, prefix: str, prompts: Sequence[str], options: Mapping[K, str], suffix: str
    ) -> list[dict[K, float]]:
        """Each rendered prompt (text starting with ``prefix``, e.g. one claim's stance prompts), ``suffix``
        appended, its ``options`` scored; the shared ``prefix`` is evaluated once.

        Deterministic per prompt: the prefix is evaluated from the first token at every call (the same
        tokens in the same batches), and each prompt's remainder on top of exactly that, so a prompt's
        scores depend neither on the prompts scored before it nor on the others in ``prompts``.  A prompt
        whose tokens do not start with the prefix's tokens is evaluated whole.
        """
        model = self.model
        pre = self._ids(prefix, first=True)
        out: list[dict[K, float]] = []
        with model_lock(model):
            held = False  # whether the model holds exactly the evaluated prefix (and what follows is discarded)
            for text in prompts:
                ids = self._ids(text + suffix, first=True)
                self._check_room(ids)
                if len(ids) > len(pre) and ids[: len(pre)] == pre:
                    if not held:
                        self._evaluate(pre)
                        held = True
                    model.n_tokens = len(pre)
                    model.eval(ids[len(pre) :])
                else:
                    self._evaluate(ids)
                    held = False
                out.append(self._options_here(ids, options))
        return out

    def _check_room(self, prompt_ids: list[int]) -> None:
        model = self.model
        if model.n_ctx() - len(prompt_ids) - self.max_new_tokens - 16 < 0:
            raise ValueError(
                f"The fact-check prompt has {len(prompt_ids)} tokens; with the explanation budget it does not fit "
                f"the LLM's context window of {model.n_ctx()} tokens. Pass fewer or shorter passages."
            )

    def _options_here(self, prompt_ids: list[int], options: Mapping[K, str]) -> dict[K, float]:
        """Score ``options`` after the evaluated ``prompt_ids`` (each cut off again)."""
        model = self.model
        first = self._last_logprobs()
        logprobs: dict[K, float] = {}
        for key, text in options.items():
            ids = self._ids(text)
            if not ids:
                raise ValueError(f"Option {key!r} has no tokens.")
            total = float(first[ids[0]])
            for token, following in zip(ids[:-1], ids[1:]):
                model.eval([token])
                total += float(self._last_logprobs()[following])
            model.n_tokens = len(prompt_ids)
            logprobs[key] = total
        return logprobs

    def generate(
        self, state: Any, prompt_ids: list[int], text: str, done: Callable[[str], bool], stop: Sequence[str]
    ) -> str:
        """Greedy completion after the prompt and ``text`` (the prompt is reused if the model still holds it)."""
        from llama_cpp import StoppingCriteriaList

        model = self.model
        ids = prompt_ids + self._ids(text)
        start = len(ids)

        def complete(tokens: Any, logits: Any) -> bool:
            return done(model.detokenize([int(t) for t in tokens[start:]]).decode("utf-8", errors="ignore"))

        with model_lock(model):
            out = model.create_completion(
                ids,
                max_tokens=self.max_new_tokens,
                temperature=0.0,
                repeat_penalty=self.repeat_penalty,
                stop=list(stop),
                stopping_criteria=StoppingCriteriaList([complete]),
            )
        return str(out["choices"][0]["text"])
