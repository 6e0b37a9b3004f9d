"""Text in: normalization, cleaning with a map back to the client's characters, phonemes, chunks."""
