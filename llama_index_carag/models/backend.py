"""One way to run an LLM, as one class: :class:`LLMBackend`.

A backend says, in one place, everything the package needs to know about a kind of LlamaIndex LLM:

* **resolving** — :meth:`~LLMBackend.claims` (whether ``resolve_llm`` runs a requested name with it under
  ``backend="auto"``), :meth:`~LLMBackend.check` (whether it can when asked by name) and
  :meth:`~LLMBackend.load` (the LlamaIndex LLM);
* **recognising** a LlamaIndex LLM — :meth:`~LLMBackend.matches`, by class (``isinstance``);
* **the model name** results are filed under — :attr:`~LLMBackend.model_name`;
* **what loading it will do**, said before it starts — :meth:`~LLMBackend.describe_load` (the command
  line's stage line: llama.cpp says when it first probes this CPU, a server backend which server it calls);
* **what it supports** — :meth:`~LLMBackend.supports_logprobs`: log-likelihoods of given strings after a
  prompt, or text only;
* and, where it scores, the **scoring primitives** the label scorer composes:
  :meth:`~LLMBackend.score_options` (log-likelihood of each option string after a rendered prompt) and
  :meth:`~LLMBackend.generate` (the text that follows a prompt plus a given continuation).

Every feature is a method of the contract with a default for backends that lack it: callers ask the
backend (:func:`~llama_index_carag.models.resolve.backend_for`), never probe its attributes.

Why the scoring primitives live here, below ``verdicts``: the import layers put ``models`` left of
``verdicts``, so a backend may not name a verdict, a label or a label scorer.  Log-likelihoods of strings
and continued generation are model-level operations that need none of them; the one label scorer
(:mod:`~llama_index_carag.verdicts.label_scores`) turns them into scored labels, an explanation
and a verdict for every backend.  So a new backend is one subclass in one file, registered once
(:func:`~llama_index_carag.models.resolve.register_backend`), and nothing in ``verdicts`` changes.
Each built-in backend is one module holding its resolving, loading, probing and scoring:
:mod:`~llama_index_carag.models.huggingface`, :mod:`~llama_index_carag.models.llamacpp`,
:mod:`~llama_index_carag.models.openai_compatible`.

A backend imports its integration (torch, llama.cpp, the OpenAI client) inside its methods, never at
import time; :func:`loaded_class` recognises an LLM of an integration that was never imported without
importing it.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from llama_index_carag.models.files import alias_variant, generic_llm_name, load_name, wants_int8

logger = logging.getLogger(__name__)

K = TypeVar("K")

#: The default token budget of a generated explanation (an LLM's own smaller budget wins).  Generation stops at the
#: end of the second sentence before that; 96 let 3 of 24 SciFact explanations finish a second sentence that 72 cut,
#: at no cost in mean time (docs/VERDICTS.md, "Speed").
EXPLANATION_TOKENS = 96


def loaded_class(module: str, name: str) -> type | None:
    """The class ``module.name`` if ``module`` is already imported, else ``None`` (imports nothing).

    An LLM can only be an instance of a class whose module was imported, so ``matches`` can ask
    ``isinstance`` without importing torch or llama.cpp for an LLM of another kind.
    """
    found = getattr(sys.modules.get(module), name, None)
    return found if isinstance(found, type) else None


class PromptTooLong(ValueError):
    """The prompt (a claim with its passages) does not fit the LLM's context window: that claim cannot be
    checked with these passages; the backend is fine (a loop over claims reports it and goes on)."""


@dataclass(frozen=True)
class LLMRequest:
    """What ``resolve_llm`` was asked to load: the name as given and the loading options.

    Args:
        spec: the name as given (``None`` for the default; an alias, hub id, path, ``.gguf`` file or
            ``"openai-compatible:URL"``).
        max_new_tokens: generation budget.
        context_window: prompt budget in tokens.
        system_prompt: system message folded into the chat template.
        device_map: where to load Hugging Face weights.
        generate_kwargs: passed to generation.
        quantize: ``"auto"``, ``"int8"`` or ``"none"``.
    """

    spec: str | None = None
    max_new_tokens: int = 128
    context_window: int = 4096
    system_prompt: str = ""
    device_map: str = "cpu"
    generate_kwargs: dict[str, Any] | None = None
    quantize: str = "auto"

    @property
    def name(self) -> str:
        """The name to load (:func:`~.files.load_name`: the default for ``None``, aliases without suffix)."""
        return load_name(self.spec)

    @property
    def variant(self) -> str | None:
        """The alias suffix (``"-int8"``, ``"-hf"``) or ``None``."""
        return alias_variant(self.spec)

    @property
    def int8(self) -> bool:
        """Whether int8 decoder layers are asked for (:func:`~.files.wants_int8`; raises on bad options)."""
        return wants_int8(self.spec, self.quantize, self.device_map)

    @property
    def is_gguf(self) -> bool:
        """Whether the name is a ``.gguf`` file."""
        return self.name.lower().endswith(".gguf")

    def generation_options(self) -> dict[str, Any]:
        """The options every loader takes: context window, budget, system prompt, generation kwargs."""
        return {
            "context_window": self.context_window,
            "max_new_tokens": self.max_new_tokens,
            "system_prompt": self.system_prompt,
            "generate_kwargs": self.generate_kwargs,
        }


def loading_message(request: LLMRequest) -> str:
    """``"loading the LLM <name>"`` (``"(the default)"`` added for ``spec=None``): the usual stage line of a load."""
    return f"loading the LLM {request.name}" + (" (the default)" if request.spec is None else "")


class LLMBackend:
    """A kind of LlamaIndex LLM: how to resolve it, recognise it, name it, and score strings with it.

    Subclasses set :attr:`name`, implement :meth:`matches`, and, where they load models or score,
    :meth:`claims`/:meth:`check`/:meth:`load` and :meth:`score_options`/:meth:`generate` with
    :attr:`logprobs` ``True``.  An instance wraps one LLM.

    Args:
        llm: the LlamaIndex LLM (one :meth:`matches` accepts).
        max_new_tokens: the budget of generated explanations (default: the LLM's, at most 96).
    """

    #: The backend's name (``resolve_llm(..., backend=name)``).
    name: ClassVar[str] = ""
    #: Whether the backend returns log-likelihoods (``True``) or text only.
    logprobs: ClassVar[bool] = False

    def __init__(self, llm: Any, max_new_tokens: int | None = None) -> None:
        self.llm = llm
        self.max_new_tokens = int(max_new_tokens or min(self.llm_budget(), EXPLANATION_TOKENS))

    # ------------------------------------------------------------ resolving
    @classmethod
    def matches(cls, llm: Any) -> bool:
        """Whether ``llm`` is this backend's LlamaIndex LLM (by class)."""
        raise NotImplementedError(f"{cls.__name__}.matches")

    @classmethod
    def claims(cls, request: LLMRequest) -> bool:
        """Whether ``resolve_llm`` runs ``request`` with this backend under ``backend="auto"`` (default: never)."""
        return False

    @classmethod
    def check(cls, request: LLMRequest) -> None:
        """Raise :class:`ValueError` if this backend cannot run ``request`` (default: it can run none)."""
        raise ValueError(f"backend={cls.name!r} loads no model by name; pass its LlamaIndex LLM instead.")

    @classmethod
    def load(cls, request: LLMRequest) -> Any:
        """The LlamaIndex LLM for ``request`` (after :meth:`check`)."""
        cls.check(request)
        raise NotImplementedError(f"{cls.__name__}.load")

    @classmethod
    def describe_load(cls, request: LLMRequest) -> tuple[str, str] | None:
        """``(message, note)`` saying what loading ``request`` with this backend will do, or ``None`` where this
        backend would not load it (default: ``None``, the next backend in the registry says it).

        Asked before anything loads, so it must be cheap: it loads no model, calls no server and runs no probe.
        """
        return None

    # ------------------------------------------------------------ describing
    @property
    def model_name(self) -> str:
        """The name the LLM's results are filed under."""
        return generic_llm_name(self.llm)

    def llm_budget(self) -> int:
        """The LLM's own generation budget in tokens (default: ``metadata.num_output``)."""
        return int(getattr(getattr(self.llm, "metadata", None), "num_output", 0) or EXPLANATION_TOKENS)

    def supports_logprobs(self) -> bool:
        """Whether this LLM returns log-likelihoods of given strings (else its labels come from text)."""
        return self.logprobs

    # ------------------------------------------------------------ scoring
    def render(self, messages: Sequence[Any], prefix: str) -> str:
        """The prompt text: chat ``messages`` through the model's chat template, then ``prefix``."""
        return str(self.llm.messages_to_prompt(list(messages))) + prefix

    def score_options(
        self, messages: Sequence[Any], options: Mapping[K, str], prefix: str
    ) -> tuple[dict[K, float], Any, list[int]]:
        """``({key: log-likelihood}, state, prompt_ids)`` of each option string after the rendered prompt.

        A log-likelihood is the natural log summed over the option's tokens; ``state`` is whatever
        :meth:`generate` needs to continue this prompt (a KV cache, the prompt text, or ``None``).
        """
        raise NotImplementedError(f"{type(self).__name__} returns text only")

    def generate(
        self, state: Any, prompt_ids: list[int], text: str, done: Callable[[str], bool], stop: Sequence[str]
    ) -> str:
        """The text generated after the prompt of :meth:`score_options` followed by ``text``.

        Greedy, at most :attr:`max_new_tokens` tokens; it may stop once ``done(generated so far)`` or at
        one of the ``stop`` strings (the caller cleans the text up).
        """
        raise NotImplementedError(f"{type(self).__name__} returns text only")

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """Held around one scoring and its generation (default: nothing; llama.cpp: the model's lock)."""
        yield

    def hold_opening(self, messages: Sequence[Any]) -> None:
        """Evaluate the opening turn of the prompt of ``messages`` (its system message) ahead of the first
        explanation, where the model keeps it between prompts (default: nothing; llama.cpp: its KV cache)."""
