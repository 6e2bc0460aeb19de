"""The claim verifier: a small cross-encoder trained for claim verification decides the label; the LLM explains it.

``ClaimVerifier`` (:mod:`.model`) scores (claim, passage) pairs; :mod:`.training` trains it (the shipped model,
``carag train-verifier``) and adapts it to an archive (``carag index --calibrate``); :mod:`.pairs` holds the
training pairs.
"""
