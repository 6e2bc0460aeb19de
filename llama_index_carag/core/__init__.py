"""The method itself, on plain arrays: Gaussian-mixture clustering, the Subset of Interest, the fitted
thematic context and where its cluster members live, the claim table, vector helpers, provenance, atomic
file writing (:mod:`.atomic`), text normalisation (:mod:`.text`) and the on-disk state. Imports nothing
else from the package: every other layer builds on it."""
