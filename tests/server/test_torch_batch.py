"""The torch backend's batched decoder (engine/backends/torch_batch.py): several token batches of different lengths,
padded into one decoder call, each come out as its own single call would, on the CPU with the derived weights.

Measured on this machine (2 cores), three items of 11, 33 and 72 tokens: with the same harmonic sources, the largest
absolute difference between an item's batched and single-call audio is 2.3e-6 to 4.4e-6 of that item's peak (float
rounding: the masked statistics are summed in another order than InstanceNorm's); the bound, 2e-5, leaves about 4x.
Dropping the masked norm (InstanceNorm over the padded frames) puts the shortest item 0.98 of its peak away, and the
middle one 0.99; the longest item, which has no padding, stays at 2e-6. With its own random excitation,
``synthesize_batch`` is 0.38-0.42 dB (log-mel L1, support.audio_metrics) from the single calls: what two single
calls with different seeds differ by (0.38-0.46 dB); another voice is 10-15 dB away. The bound is 0.7 dB.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from kokoro_tts.engine.backends import ChunkInput, torch_batch, torch_weights
from kokoro_tts.engine.backends.torch import TorchBackend
from kokoro_tts.engine.voices import VoiceBank
from kokoro_tts.text.phonemes import Phonemizer
from kokoro_tts.weights.layout import WeightLayout
from support.audio_metrics import log_mel_l1_db

pytestmark = pytest.mark.slow

PARITY_BOUND = 2e-5  # of each item's peak
PADDING_UNMASKED_MIN = 0.1  # the shortest item's error without the masked norm, at least
LOG_MEL_BOUND_DB = 0.7

TEXTS = (  # clearly different lengths: the shorter items get most of the padding
    "Hello there.",
    "Turn left at the next corner.",
    "Please call Stella and ask her to bring these things with her from the store.",
)

Single = tuple[np.ndarray, np.ndarray]  # audio, frames per token


@pytest.fixture(scope="module")
def layout(torch_layout: WeightLayout) -> WeightLayout:
    return torch_layout


@pytest.fixture(scope="module")
def backend(layout: WeightLayout) -> TorchBackend:
    return TorchBackend(layout.config_path, torch_weights(layout), device="cpu", threads=2, batch=4)


@pytest.fixture(scope="module")
def items(layout: WeightLayout) -> list[ChunkInput]:
    phonemizer = Phonemizer(layout.config()["vocab"])
    voice = VoiceBank(layout).resolve("af_heart")
    tokens = [phonemizer.tokens(phonemizer.phonemes(text, "a")) for text in TEXTS]
    return [ChunkInput(t, voice.style(len(t)), 1.0) for t in tokens]


@pytest.fixture(scope="module")
def singles(backend: TorchBackend, items: list[ChunkInput]) -> list[Single]:
    """One call each, item k under seed k."""
    out = []
    for k, item in enumerate(items):
        torch.manual_seed(k)
        out.append(backend.synthesize_timed(item.tokens, item.style, item.speed))
    return out


@pytest.fixture(scope="module")
def fronts(backend: TorchBackend, items: list[ChunkInput]) -> list[torch_batch.Front]:
    out = []
    for item in items:
        input_ids = torch.tensor([[0, *item.tokens, 0]], dtype=torch.long)
        ref_s = torch.from_numpy(item.style).float().reshape(1, -1)
        out.append(torch_batch.front(backend.model, input_ids, ref_s, item.speed))
    return out


@pytest.fixture(scope="module")
def sources(backend: TorchBackend, fronts: list[torch_batch.Front]) -> list[torch.Tensor]:
    """The harmonic sources the single calls drew: item k under seed k."""
    out = []
    for k, front in enumerate(fronts):
        torch.manual_seed(k)
        out.append(torch_batch.harmonic_source(backend.model.decoder.generator, front.f0))
    return out


def relative_errors(
    backend: TorchBackend, singles: list[Single], fronts: list[torch_batch.Front], sources: list[torch.Tensor]
) -> list[float]:
    """Each item's largest difference, batched against single, as a fraction of the single call's peak."""
    batched = torch_batch.decode(backend.model.decoder, fronts, sources)
    errors = []
    for (single, _), audio in zip(singles, batched, strict=True):
        assert audio.shape == (len(single),)
        errors.append(float(np.abs(audio.numpy() - single).max() / np.abs(single).max()))
    return errors


def test_the_batched_decoder_gives_each_item_its_single_call_audio(
    backend: TorchBackend, singles: list[Single], fronts: list[torch_batch.Front], sources: list[torch.Tensor]
) -> None:
    assert len({f.asr.shape[-1] for f in fronts}) == len(fronts)
    for (_, durations), front in zip(singles, fronts, strict=True):
        np.testing.assert_array_equal(front.pred_dur.numpy(), durations)
    errors = relative_errors(backend, singles, fronts, sources)
    print("batched vs single, max |diff| / peak:", [f"{e:.2g}" for e in errors])
    assert max(errors) <= PARITY_BOUND, errors  # the shortest item (the most padding) and the longest alike


def test_padding_without_the_masked_norm_changes_the_shorter_items(
    monkeypatch: pytest.MonkeyPatch,
    backend: TorchBackend,
    singles: list[Single],
    fronts: list[torch_batch.Front],
    sources: list[torch.Tensor],
) -> None:
    # AdaIN1d's own forward: InstanceNorm's statistics over every frame, the padding included
    monkeypatch.setattr(torch_batch, "_adain", lambda ada, x, s, valid: ada(x, s))
    errors = relative_errors(backend, singles, fronts, sources)
    print("without the masked norm:", [f"{e:.2g}" for e in errors])
    assert errors[0] >= PADDING_UNMASKED_MIN, errors
    assert errors[-1] <= PARITY_BOUND, errors  # the longest item has no padding: the check itself is sound


def test_synthesize_batch_sounds_like_one_call_each(
    backend: TorchBackend, items: list[ChunkInput], singles: list[Single]
) -> None:
    torch.manual_seed(100)  # its own excitation: as close as two single calls with different seeds are
    batched = backend.synthesize_batch(items)
    assert len(batched) == len(items)
    for (single, durations), (audio, frames) in zip(singles, batched, strict=True):
        assert audio.dtype == np.float32 and audio.shape == single.shape
        assert frames is not None
        np.testing.assert_array_equal(frames, durations)
        distance = log_mel_l1_db(single, audio)
        assert distance <= LOG_MEL_BOUND_DB, f"log-mel L1 {distance:.2f} dB"


def test_more_items_than_the_batch_limit_is_an_error(backend: TorchBackend, items: list[ChunkInput]) -> None:
    assert backend.batch_limit == 4
    with pytest.raises(ValueError, match="at most 4"):
        backend.synthesize_batch([*items, *items])
