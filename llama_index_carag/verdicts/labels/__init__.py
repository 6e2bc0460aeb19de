"""How a verdict is decided from the scored label strings: the scores and scorer protocol, the scorers for
transformers and llama.cpp, and the measured decision rules."""
