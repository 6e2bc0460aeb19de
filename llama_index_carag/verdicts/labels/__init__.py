"""How a verdict is decided from the scored label strings: the scores (:mod:`.label_scores`), the one label
scorer over every LLM backend (:mod:`.label_scorer`), per-passage stance, the label prior and the measured
decision rules."""
