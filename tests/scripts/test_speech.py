"""The word error count that every listening test and the transport bench judge speech by."""

from __future__ import annotations

import pytest

from scripts.speech import word_errors


@pytest.mark.parametrize(
    ("reference", "hypothesis", "errors"),
    [
        ("Hello there! It is short.", "hello there it is short", 0),
        ("It is short.", "it is shirt", 1),
        ("It is short.", "it short", 1),
        ("It is short.", "it is very short", 1),
        ("It is short.", "", 3),
        ("Goodbye now.", "Good bye now.", 0),
        ("Good bye now.", "Goodbye now.", 0),
        ("Goodbye now.", "Good buy now.", 2),
        ("Goodbye now.", "Good by now.", 0),  # Whisper base's spelling, now and then, of the same sounds
        ("Put it onto it.", "put it on too it", 2),  # short words a letter apart are other words
        ("Hello there.", "Hell othere.", 2),
    ],
)
def test_word_errors_count_mishearings_not_spellings(reference: str, hypothesis: str, errors: int) -> None:
    assert word_errors(reference, hypothesis) == (errors, len(reference.split()))
