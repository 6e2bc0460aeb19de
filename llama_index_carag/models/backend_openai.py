"""The OpenAI-compatible backend: LlamaIndex's ``OpenAILike`` on a server (:class:`OpenAICompatibleBackend`).

Resolves ``"openai-compatible:URL"`` (:mod:`~llama_index_carag.models.openai_compatible`).  Scoring goes
through the completions endpoint: the chat prompt (the LLM's ``messages_to_prompt``) is sent followed by
each option string with ``echo=True, logprobs=1, max_tokens=1``; the server returns the log-probability of
every prompt token, and the option's log-likelihood is the sum over its own tokens (the echoed tail, the
generated token left out).  Generation sends the prompt and its continuation as a completion request.

``max_tokens`` is 1, not 0: llama-cpp-python's server reads 0 as "up to the context window".  The
option's tokens are those the server's tokenizer makes of it after the prompt (the local backends
tokenize the option on its own; for the usual BPE tokenizers both are the same).

Not every server returns usable prompt log-probabilities (only llama-cpp-python's server was tested
here; vLLM's completions endpoint takes ``echo`` with ``logprobs``; llama.cpp's own ``llama-server``,
Ollama and LM Studio do not document prompt log-probabilities).  llama-cpp-python's server returns
them (unless started with ``--logits_all false``), but reads them one position off where the prompt does
not start with the BOS token (measured: SmolLM2 with a generic prompt, and Qwen2.5 even with its own chat
template, whose ``<|im_start|>`` is not its BOS; SmolLM2's own template starts with its BOS and scores
correctly).  Each server and model is probed once (:func:`supports_prompt_logprobs`: a counting sequence
must score as near-certain; logged); where the numbers are missing or implausible,
:meth:`OpenAICompatibleBackend.supports_logprobs` is ``False`` and verdicts are read from the text answer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from llama_index_carag.models.backend import LLMBackend, LLMRequest, loaded_class
from llama_index_carag.models.openai_compatible import (
    PREFIX,
    is_openai_compatible,
    request_json,
    resolve_openai_compatible,
)

logger = logging.getLogger(__name__)
K = TypeVar("K")

__all__ = ["OpenAICompatibleBackend", "supports_prompt_logprobs", "echoed_tail_logprobs", "MIN_PROBE_LOGPROB"]

#: The probe (:func:`supports_prompt_logprobs`): a question, its answer after the chat prompt, the part scored.
_PROBE_QUESTION = "Count from 1 to 12."
_PROBE_ANSWER = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12"
_PROBE_TAIL = " 8, 9, 10, 11, 12"
#: Mean log-probability a token (nats) the probe's tail must reach for the server's numbers to be used.
MIN_PROBE_LOGPROB = -2.0
#: ``(api_base, model)`` → whether that server returns usable prompt log-probabilities (asked once each).
_SUPPORT: dict[tuple[str, str], bool] = {}
_SUPPORT_GUARD = threading.Lock()


def echoed_tail_logprobs(choice: Mapping[str, Any], tail: str, n_generated: int) -> list[float]:
    """The log-probabilities of the echoed prompt tokens that spell ``tail``, in order (pure).

    ``choice`` is one completions choice whose ``logprobs`` (``tokens``, ``token_logprobs``) hold the
    echoed prompt, followed by its ``n_generated`` generated tokens on most servers (llama-cpp-python
    leaves them out where the prompt does not start with the BOS token).  The tokens are walked back
    from the end of the prompt until their text covers ``tail``.

    Raises:
        ValueError: no log-probabilities, or the prompt's tokens do not end with ``tail``.
    """
    logprobs = choice.get("logprobs") or {}
    tokens, values = logprobs.get("tokens") or [], logprobs.get("token_logprobs") or []
    if not tokens or len(tokens) != len(values):
        raise ValueError("The server returned no prompt log-probabilities (echo with logprobs).")
    for end in dict.fromkeys((len(tokens) - max(int(n_generated), 0), len(tokens))):
        text, i = "", end
        out: list[float] = []
        while i > 0 and len(text) < len(tail) and values[i - 1] is not None:  # the first token has none
            i -= 1
            text, out = tokens[i] + text, [float(values[i]), *out]
        if out and text.lstrip() == tail.lstrip():
            return out
    raise ValueError(f"The server's echoed tokens {tokens[-8:]!r} do not end with the scored text {tail!r}.")


def _generated_count(response: Mapping[str, Any]) -> int:
    usage = response.get("usage") or {}
    return int(usage.get("completion_tokens") or 0)


def supports_prompt_logprobs(llm: Any) -> bool:
    """Whether the LLM's server returns usable prompt log-probabilities; asked once per server and model, logged.

    Raises:
        ConnectionError: the server cannot be reached.
    """
    key = (str(llm.api_base), str(llm.model))
    with _SUPPORT_GUARD:
        if key not in _SUPPORT:
            _SUPPORT[key] = _probe(llm)
        return _SUPPORT[key]


def _probe(llm: Any) -> bool:
    """Score a counting sequence after the chat prompt; whether its log-probabilities are usable (reason logged).

    Any model predicts ``… 8, 9, 10, 11, 12`` after ``1, 2, 3`` almost surely (mean about -0.01 nats a
    token for SmolLM2-135M), while log-probabilities read one position off (llama-cpp-python's server on a
    prompt that does not start with the BOS token) average about -10: a mean below
    :data:`MIN_PROBE_LOGPROB` means the server's numbers are not what scoring needs.
    """
    from llama_index.core.llms import ChatMessage

    prompt = llm.messages_to_prompt([ChatMessage(role="user", content=_PROBE_QUESTION)]) + _PROBE_ANSWER
    status, payload = _complete(llm, prompt, echo=True, logprobs=1, max_tokens=1)
    reason = f"HTTP {status}" if status != 200 else None
    if reason is None:
        try:
            values = echoed_tail_logprobs(payload["choices"][0], _PROBE_TAIL, _generated_count(payload))
            mean = sum(values) / len(values)
            if not mean >= MIN_PROBE_LOGPROB:
                reason = f"implausible: {mean:.2f} nats a token on a counting sequence, they look misaligned"
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            reason = str(exc)
    if reason is None:
        logger.info(
            "%s returns prompt log-probabilities (counting probe: %.2f nats a token): verdict labels are scored.",
            llm.api_base,
            mean,
        )
        return True
    logger.warning(
        "%s returns no usable prompt log-probabilities (%s): verdict labels are read from the text answer.",
        llm.api_base,
        reason,
    )
    return False


def _complete(llm: Any, prompt: str, **fields: Any) -> tuple[int, Any]:
    """``POST {api_base}/completions`` with the LLM's model, key and read timeout."""
    body = {"model": llm.model, "prompt": prompt, "temperature": 0.0, **fields}
    return request_json(
        "POST", f"{llm.api_base}/completions", api_key=llm.api_key, body=body, read_timeout=float(llm.timeout)
    )


class OpenAICompatibleBackend(LLMBackend):
    """An ``OpenAILike`` LLM on an OpenAI-compatible server; scores strings where the server echoes prompt
    log-probabilities (:func:`supports_prompt_logprobs`), else text only.

    Args:
        llm: a LlamaIndex ``OpenAILike`` LLM (its ``api_base``, ``model``, ``api_key``, ``timeout`` and
            ``messages_to_prompt`` are used).
        max_new_tokens: budget of generated explanations (default: the LLM's, at most 72).
    """

    name = "openai-compatible"
    logprobs = True

    # ------------------------------------------------------------ resolving
    @classmethod
    def matches(cls, llm: Any) -> bool:
        found = loaded_class("llama_index.llms.openai_like", "OpenAILike")
        return found is not None and isinstance(llm, found)

    @classmethod
    def claims(cls, request: LLMRequest) -> bool:
        return is_openai_compatible(request.spec)

    @classmethod
    def check(cls, request: LLMRequest) -> None:
        if not is_openai_compatible(request.spec):
            raise ValueError(f"backend='openai-compatible' runs {PREFIX}URL; got {request.spec!r}.")

    @classmethod
    def load(cls, request: LLMRequest) -> Any:
        """``OpenAILike`` on the server (asked once for its models; :func:`~.openai_compatible.openai_compatible_llm`)."""
        cls.check(request)
        return resolve_openai_compatible(str(request.spec), **request.generation_options())

    # ------------------------------------------------------------ describing
    def llm_budget(self) -> int:
        return int(self.llm.max_tokens or 72)

    def supports_logprobs(self) -> bool:
        """Whether the server returns usable prompt log-probabilities (probed once per server and model)."""
        return supports_prompt_logprobs(self.llm)

    # ------------------------------------------------------------ scoring
    def _request(self, prompt: str, **fields: Any) -> dict[str, Any]:
        status, payload = _complete(self.llm, prompt, **fields)
        if status != 200 or not isinstance(payload, dict) or not payload.get("choices"):
            detail = payload.get("error") if isinstance(payload, dict) else payload
            raise ValueError(f"{self.llm.api_base}/completions answered HTTP {status}: {detail}")
        return payload

    def score_options(
        self, messages: Sequence[Any], options: Mapping[K, str], prefix: str
    ) -> tuple[dict[K, float], str, list[int]]:
        """``(logprobs, prompt, [])``: one echo request per option; the state is the prompt text (token ids do
        not travel over this API, so ``prompt_ids`` is empty)."""
        prompt = self.render(messages, prefix)
        logprobs: dict[K, float] = {}
        for key, text in options.items():
            if not text:
                raise ValueError(f"Option {key!r} is empty.")
            payload = self._request(prompt + text, echo=True, logprobs=1, max_tokens=1)
            logprobs[key] = sum(echoed_tail_logprobs(payload["choices"][0], text, _generated_count(payload)))
        return logprobs, prompt, []

    def generate(
        self, state: Any, prompt_ids: list[int], text: str, done: Callable[[str], bool], stop: Sequence[str]
    ) -> str:
        """One completion request after the prompt (``state``) and ``text``; the server stops at ``stop``
        (``done`` is not asked: the text arrives whole)."""
        extra = dict((self.llm.additional_kwargs or {}).get("extra_body") or {})
        fields = {"max_tokens": self.max_new_tokens, "stop": list(stop), **extra}
        payload = self._request(f"{state}{text}", **fields)
        return str(payload["choices"][0].get("text") or "")
