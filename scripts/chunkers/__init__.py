"""The sentence chunker's table of cases and the seed's baseline: `python -m scripts.chunkers` compares them."""
