"""The fixed texts, and the prototype's published numbers the results are printed beside."""

from __future__ import annotations

from .client import LONG

# The 267-character customer-service reply every latency section speaks.
REPLY = LONG
assert len(REPLY) == 267, len(REPLY)
FIRST_SENTENCE = "Thanks for reaching out about your order."
assert REPLY.startswith(FIRST_SENTENCE)

# A multi-sentence reply short enough that the load section's 49 sessions of it (1+2+4+6+8+12+16) per server fit a
# 2-core run: two chunks, about 4 s of audio. Its second chunk is what the deadline scheduler lets wait while other
# sessions' first chunks go first. A stream slot comes free only when a reply has played out, after about 4 s: as
# long as the server's bound on the wait for one (KOKORO_MAX_FIRST_AUDIO_WAIT_S, 4 s), so a level's sessions past the
# slots are refused rather than served late.
LOAD_REPLY = "Sure, I can help with that. Your order ships today."

# Transport: ordinary English, one segment (utterance) each; common words so pocketsphinx's WER means something.
SEGMENTS: tuple[str, ...] = (
    "The weather today is mild, with a light breeze from the west.",
    "Please call me back when you have a moment.",
    "Our meeting has been moved to three o'clock on Friday.",
    "I would like a cup of coffee and a glass of water.",
    "The train to the city leaves every twenty minutes.",
    "She found her keys under the kitchen table.",
    "We are open from nine in the morning until six at night.",
    "Your package will arrive at the front door tomorrow.",
    "He reads the news on his phone every morning.",
    "The children played in the park until it got dark.",
    "Turn left at the next light and park behind the store.",
    "Thank you for waiting, your table is ready now.",
    "The report is due at the end of the week.",
    "It might rain later, so bring an umbrella with you.",
    "My brother works at a hospital in the north of town.",
    "Can you send me the address of the new office?",
    "The music was loud, but the food was very good.",
    "We need to buy bread, milk and eggs on the way home.",
    "The flight was delayed by almost two hours.",
    "Let me know if you have any other questions.",
    "The garden looks beautiful in the spring.",
    "I will be working from home on Monday.",
    "The store closes early on public holidays.",
    "Have a great day, and thanks again for your help.",
)
assert len(SEGMENTS) == 24

# The prototype's numbers (the "seed": the first version of this project, which this code replaces), printed beside
# ours so the change is visible. Its server synthesized a whole text at once, so splitting on the client paid.
SEED_WHOLE_MS, SEED_FIRST_SENTENCE_MS = 329.3, 156.7
SEED_FIRST_SENTENCE_GAIN_PCT = 52.4
SEED_BIDI_SPEEDUP = {"local": 2.4, "deployed": 3.5}

# A reply whose first sentence is 35 tokens as an LLM writes them (voice_agent.scripted_model.tokenize: sub-word
# pieces, punctuation alone): at 6 tokens/s its sentence end comes 5.8 s after the first token, the wait the
# first-piece policy (text/fragments.py's EarlyCut) shortens. Words Whisper spells one way only (no digits).
LONG_FIRST = (
    "Thanks for waiting while I looked through your account history, and I can now confirm that the refund you "
    "asked about was approved early on Tuesday morning by our billing team this week."
)
FIRST_PIECE_REPLY = LONG_FIRST + " It should reach your card within five business days. Is there anything else?"
