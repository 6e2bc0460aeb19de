"""The method itself, on plain arrays: Gaussian-mixture clustering, the Subset of Interest, the fitted
thematic context and where its cluster members live, the claim table, vector helpers, provenance, and
the atomic on-disk state. Imports nothing above it in the package (only :mod:`llama_index_carag.settings`)."""
