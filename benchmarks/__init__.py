"""Benchmark scripts (run as ``python benchmarks/NAME.py``; not part of the wheel).

A regular package, not a namespace one: pysbd (a dependency) installs a top-level ``benchmarks`` package
of its own into site-packages, and a regular package anywhere on ``sys.path`` wins over a namespace
package, so ``carag serve --llm-factory benchmarks.bench_serve:make_stub_llm`` found pysbd's and failed.
"""
