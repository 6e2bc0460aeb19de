"""The OpenAI-compatible backend: bring your own LLM server (vLLM, Ollama, LM Studio, llama.cpp's server).

``resolve_llm("openai-compatible:http://127.0.0.1:8080/v1")`` (and ``--llm openai-compatible:URL`` on
the command line) returns LlamaIndex's ``OpenAILike`` LLM on that server:

* the model is the URL's fragment or ``model`` query (``…/v1#qwen2.5-7b``, ``…/v1?model=qwen2.5-7b``),
  else the first model the server lists at ``GET /v1/models``;
* a URL without a path means ``/v1``; the API key is ``OPENAI_API_KEY``, else a dummy;
* the server is asked once, at resolve time, for ``/v1/models`` (short connect and read timeouts), so a
  malformed URL fails with a :class:`ValueError` and a server that is down or silent with a
  :class:`ConnectionError`, both naming the URL, before any verdict is attempted;
* requests use the chat endpoint (the server applies the model's chat template), greedy decoding, a
  read timeout (:data:`READ_TIMEOUT`) and no retries by default.

Scored labels need the prompt as text, rendered with the model's chat template: ``chat_template=`` (Jinja,
e.g. from the GGUF), else the template the server reports at ``GET /props`` (llama.cpp's server), else
LlamaIndex's generic ``role: content`` lines.

Needs the optional ``llama-index-llms-openai-like`` package (the ``openai`` extra).  Nothing here runs
at import time.

**Scoring** (:class:`OpenAICompatibleBackend` on the ``OpenAILike``) goes
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
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit, urlunsplit

from llama_index_carag.models.backend import EXPLANATION_TOKENS, LLMBackend, LLMRequest, loaded_class

logger = logging.getLogger(__name__)
K = TypeVar("K")

#: What ``resolve_llm`` strings for a server start with.
PREFIX = "openai-compatible:"
#: Seconds to wait for a generation (a CPU server may take a while on a long prompt).
READ_TIMEOUT = 120.0
#: Seconds to wait for a TCP connection.
CONNECT_TIMEOUT = 5.0
#: Read timeout of the resolve-time ``GET /v1/models`` (it does no work on the server).
PROBE_TIMEOUT = 10.0
#: Sent as the API key when ``OPENAI_API_KEY`` is unset (local servers ignore it; the client needs one).
DUMMY_API_KEY = "not-needed"


def is_openai_compatible(spec: Any) -> bool:
    """Whether a ``resolve_llm`` argument names an OpenAI-compatible server (``"openai-compatible:URL"``)."""
    return isinstance(spec, str) and spec.strip().lower().startswith(PREFIX)


def parse_server_url(url: str) -> tuple[str, str | None]:
    """Take a server URL (optionally ``#model`` or ``?model=``); return ``(api_base, model or None)`` (pure).

    ``"http://127.0.0.1:8080/v1#smol"`` → ``("http://127.0.0.1:8080/v1", "smol")``;
    ``"http://localhost:11434"`` → ``("http://localhost:11434/v1", None)``.

    Raises:
        ValueError: not an ``http(s)://host[:port][/path]`` URL, a bad port, or a query other than ``model``.
    """
    text = url.strip()
    if text.lower().startswith(PREFIX):
        text = text[len(PREFIX) :].strip()
    parts = urlsplit(text)
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ValueError(f"Malformed OpenAI-compatible server URL {url!r}: bad port.") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"Malformed OpenAI-compatible server URL {url!r}: expected http(s)://host:port/v1, "
            "e.g. openai-compatible:http://127.0.0.1:8080/v1#model-name."
        )
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - {"model"})
    if unknown:
        raise ValueError(f"OpenAI-compatible server URL {url!r}: unknown query {unknown}; only ?model= is read.")
    model = parts.fragment.strip() or (query.get("model") or [""])[-1].strip() or None
    path = parts.path.rstrip("/") or "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path, "", "")), model


def _api_key(api_key: str | None) -> str:
    return api_key or os.environ.get("OPENAI_API_KEY") or DUMMY_API_KEY


def request_json(
    method: str,
    url: str,
    *,
    api_key: str | None = None,
    body: dict[str, Any] | None = None,
    read_timeout: float = READ_TIMEOUT,
    connect_timeout: float = CONNECT_TIMEOUT,
) -> tuple[int, Any]:
    """One HTTP request to an OpenAI-compatible server; return ``(status, decoded JSON or None)``.

    Raises:
        ConnectionError: the server cannot be reached at ``url`` or did not answer within ``read_timeout``.
    """
    import httpx

    timeout = httpx.Timeout(read_timeout, connect=min(connect_timeout, read_timeout))
    headers = {"Authorization": f"Bearer {_api_key(api_key)}"}
    try:
        response = httpx.request(method, url, json=body, headers=headers, timeout=timeout)
    except httpx.TimeoutException as exc:
        raise ConnectionError(
            f"The OpenAI-compatible server at {url} did not answer within {read_timeout:g} s ({type(exc).__name__})."
        ) from exc
    except httpx.HTTPError as exc:
        raise ConnectionError(f"No OpenAI-compatible server answers at {url}: {exc}. Is it running?") from exc
    try:
        return response.status_code, response.json()
    except ValueError:
        return response.status_code, None


def list_models(api_base: str, *, api_key: str | None = None, read_timeout: float = PROBE_TIMEOUT) -> list[dict]:
    """The server's models (``GET {api_base}/models``): the ``data`` rows, each with at least an ``id``.

    Raises:
        ConnectionError: the server is down or silent.
        ValueError: it answers, but not as an OpenAI-compatible API (wrong path, error status, no ``data``).
    """
    url = f"{api_base}/models"
    status, payload = request_json("GET", url, api_key=api_key, read_timeout=read_timeout)
    rows = payload.get("data") if isinstance(payload, dict) else None
    if status != 200 or not isinstance(rows, list):
        raise ValueError(
            f"{url} answered HTTP {status} without a model list: not an OpenAI-compatible API "
            "(the URL usually ends in /v1)."
        )
    return [r for r in rows if isinstance(r, dict) and r.get("id")]


def _server_chat_template(api_base: str, api_key: str | None) -> str | None:
    """The chat template llama.cpp's server reports at ``GET /props``; ``None`` where there is none."""
    parts = urlsplit(api_base)
    root = urlunsplit((parts.scheme, parts.netloc, parts.path.rsplit("/v1", 1)[0] + "/props", "", ""))
    try:
        status, payload = request_json("GET", root, api_key=api_key, read_timeout=PROBE_TIMEOUT)
    except ConnectionError:
        return None
    template = payload.get("chat_template") if status == 200 and isinstance(payload, dict) else None
    return template if isinstance(template, str) and template.strip() else None


class ChatTemplatePrompt:
    """A Hugging Face style chat template (Jinja) as a LlamaIndex ``messages_to_prompt`` callable.

    ``bos_token`` renders empty: servers add the begin-of-sequence token when they tokenize a prompt.

    Args:
        template: the ``tokenizer.chat_template`` text (a GGUF's, or a tokenizer's).
        eos_token: the model's end-of-sequence text, for templates that write it.
    """

    def __init__(self, template: str, eos_token: str = "") -> None:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise ValueError(f"chat template: {message}")

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        self._template = env.from_string(template)
        self.eos_token = eos_token

    def __call__(self, messages: Sequence[Any]) -> str:
        """LlamaIndex ``ChatMessage``s → the prompt text, ending with the assistant's turn."""
        rows = [{"role": m.role.value, "content": m.content or ""} for m in messages]
        return self._template.render(messages=rows, add_generation_prompt=True, bos_token="", eos_token=self.eos_token)


def openai_compatible_llm(
    url: str,
    *,
    model: str | None = None,
    api_key: str | None = None,
    context_window: int = 4096,
    max_new_tokens: int = 128,
    system_prompt: str = "",
    chat_template: str | None = None,
    generate_kwargs: dict[str, Any] | None = None,
    timeout: float = READ_TIMEOUT,
    max_retries: int = 0,
) -> Any:
    """Take a server URL (see :func:`parse_server_url`) and options; return an ``OpenAILike`` LLM on it.

    Args:
        url: ``http(s)://host:port/v1``, optionally with ``#model`` or ``?model=``.
        model: the model name (overrides the URL's); default: the URL's, else the server's first.
        api_key: default ``OPENAI_API_KEY``, else a dummy.
        context_window: prompt budget in tokens (lowered to the server's ``max_model_len`` where it says).
        max_new_tokens: generation budget.
        system_prompt: the LLM's system prompt.
        chat_template: Jinja chat template for scored labels (default: the server's ``/props``, else generic).
        generate_kwargs: extra request-body fields (``extra_body``), e.g. ``{"repeat_penalty": 1.1}``.
        timeout: read timeout of a generation, in seconds.
        max_retries: retries of a failed request (0 or 1 are sensible for a local server).

    Raises:
        ImportError: ``llama-index-llms-openai-like`` is not installed.
        ValueError: a malformed URL, a server that is not OpenAI-compatible, or no model to use.
        ConnectionError: the server is down or does not answer ``GET /v1/models`` in time.
    """
    api_base, url_model = parse_server_url(url)
    try:
        from llama_index.llms.openai_like import OpenAILike
    except ImportError:
        raise ImportError("OpenAI-compatible servers need: pip install llama-index-llms-openai-like") from None
    rows = list_models(api_base, api_key=api_key, read_timeout=min(timeout, PROBE_TIMEOUT))
    name = model or url_model or (rows[0]["id"] if rows else None)
    if not name:
        raise ValueError(f"{api_base}/models lists no model; name one: openai-compatible:{api_base}#MODEL.")
    limits = [int(r["max_model_len"]) for r in rows if r["id"] == name and isinstance(r.get("max_model_len"), int)]
    template = chat_template or _server_chat_template(api_base, api_key)
    extra = {"messages_to_prompt": ChatTemplatePrompt(template)} if template else {}
    if not template:
        logger.info(
            "%s reports no chat template: scored labels render the prompt as generic 'role: content' "
            "lines (pass chat_template= for the model's own).",
            api_base,
        )
    logger.info("Using model %r on the OpenAI-compatible server %s", name, api_base)
    return OpenAILike(
        model=name,
        api_base=api_base,
        api_key=_api_key(api_key),
        context_window=min([context_window, *limits]),
        max_tokens=max_new_tokens,
        temperature=0.0,
        is_chat_model=True,
        is_function_calling_model=False,
        system_prompt=system_prompt or None,
        timeout=timeout,
        max_retries=max_retries,
        reuse_client=True,
        additional_kwargs={"extra_body": dict(generate_kwargs)} if generate_kwargs else {},
        **extra,
    )


def resolve_openai_compatible(spec: str, **options: Any) -> Any:
    """``resolve_llm``'s ``"openai-compatible:URL"`` → :func:`openai_compatible_llm` (``options``: its keywords)."""
    if not is_openai_compatible(spec):
        raise ValueError(f"Expected {PREFIX}URL, got {spec!r}.")
    rest = spec.strip()[len(PREFIX) :].strip()
    if not rest:
        raise ValueError(f"{PREFIX} needs a server URL, e.g. {PREFIX}http://127.0.0.1:8080/v1.")
    return openai_compatible_llm(rest, **options)


# ------------------------------------------------------------------ scoring: prompt log-probabilities
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


def _server(url: str) -> str:
    """``scheme://host[:port]/path`` of a server URL (no user name or password, no query)."""
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # resolve_llm reports the bad URL itself
        return "(bad URL)"
    return f"{parts.scheme}://{host}{port}{parts.path}"


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
        max_new_tokens: budget of generated explanations (default: the LLM's, at most 96).
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
    def describe_load(cls, request: LLMRequest) -> tuple[str, str] | None:
        """``connecting to the LLM server URL`` (no user name, password or query) for ``"openai-compatible:URL"``."""
        if not is_openai_compatible(request.spec):
            return None
        return f"connecting to the LLM server {_server(str(request.spec).strip()[len(PREFIX) :])}", ""

    @classmethod
    def load(cls, request: LLMRequest) -> Any:
        """``OpenAILike`` on the server (asked once for its models; :func:`openai_compatible_llm`)."""
        cls.check(request)
        return resolve_openai_compatible(str(request.spec), **request.generation_options())

    # ------------------------------------------------------------ describing
    def llm_budget(self) -> int:
        return int(self.llm.max_tokens or EXPLANATION_TOKENS)

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
