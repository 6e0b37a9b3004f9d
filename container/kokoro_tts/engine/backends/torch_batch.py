"""Several streams' token batches through KModel's decoder as one padded batch (the torch backend's ``batch``).

On a GPU one decoder call per chunk waits on kernel launches, not arithmetic; chunks due together share one call
here. Padding to the longest chunk must not change any chunk's audio, so everything that looks along time sees each
item as the unbatched decoder does: instance-norm statistics over the item's own frames only, zeros past its end
before every convolution (the unbatched convolution zero-pads there), and the random harmonic source and the final
iSTFT (normalized by the window envelope at the ends) per item. The front (ALBERT, the duration and prosody LSTMs)
runs per item, as ``KModel.forward_with_tokens`` does: its LSTMs are not padding-safe, and it is the cheap part.

The code mirrors kokoro's ``istftnet.py`` forward methods and calls KModel's own modules (weight norm included), with
the masks added; anything not listed above is per frame and needs none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Front:
    """One item's decoder input, as ``forward_with_tokens`` computes it (T: predicted frames)."""

    asr: torch.Tensor  # [1, 512, T] text encoding, aligned to frames
    f0: torch.Tensor  # [1, 2T] pitch curve
    n: torch.Tensor  # [1, 2T] energy curve
    style: torch.Tensor  # [1, 128] the decoder's half of the voice's style row
    pred_dur: torch.Tensor  # [tokens] frames per token, the two pad tokens included


@torch.inference_mode()
def front(model: Any, input_ids: torch.Tensor, ref_s: torch.Tensor, speed: float) -> Front:
    """``KModel.forward_with_tokens`` up to the decoder, for one item ([1, tokens] ids, [1, 256] style)."""
    input_lengths = torch.full((1,), input_ids.shape[-1], device=input_ids.device, dtype=torch.long)
    text_mask = torch.zeros_like(input_ids, dtype=torch.bool)  # one item: no token is padding
    bert_dur = model.bert(input_ids, attention_mask=(~text_mask).int())
    d_en = model.bert_encoder(bert_dur).transpose(-1, -2)
    s = ref_s[:, 128:]
    d = model.predictor.text_encoder(d_en, s, input_lengths, text_mask)
    x, _ = model.predictor.lstm(d)
    duration = torch.sigmoid(model.predictor.duration_proj(x)).sum(dim=-1) / speed
    pred_dur = torch.round(duration).clamp(min=1).long().squeeze()
    indices = torch.repeat_interleave(torch.arange(input_ids.shape[1], device=input_ids.device), pred_dur)
    pred_aln_trg = torch.zeros((input_ids.shape[1], indices.shape[0]), device=input_ids.device)
    pred_aln_trg[indices, torch.arange(indices.shape[0])] = 1
    pred_aln_trg = pred_aln_trg.unsqueeze(0)
    en = d.transpose(-1, -2) @ pred_aln_trg
    f0, n = model.predictor.F0Ntrain(en, s)
    t_en = model.text_encoder(input_ids, input_lengths, text_mask)
    return Front(t_en @ pred_aln_trg, f0, n, ref_s[:, :128], pred_dur)


@torch.inference_mode()
def harmonic_source(generator: Any, f0_curve: torch.Tensor) -> torch.Tensor:
    """The generator's excitation features [1, n_fft + 2, frames] for one item's [1, 2T] pitch curve.

    SineGen draws a random initial phase and noise, so with the same seed this is what the unbatched generator uses.
    """
    f0 = generator.f0_upsamp(f0_curve[:, None]).transpose(1, 2)
    har_source, _, _ = generator.m_source(f0)
    har_spec, har_phase = generator.stft.transform(har_source.transpose(1, 2).squeeze(1))
    return torch.cat([har_spec, har_phase], dim=1)


@dataclass(frozen=True)
class _Valid:
    """Which frames of a padded batch are real at one time resolution."""

    lengths: list[int]
    mask: torch.Tensor  # [B, 1, L]: 1 on each item's frames, 0 past its end
    count: torch.Tensor  # [B, 1, 1]

    @classmethod
    def of(cls, lengths: list[int], size: int, device: torch.device) -> _Valid:
        counts = torch.tensor(lengths, device=device, dtype=torch.float32)
        mask = torch.arange(size, device=device)[None, :] < counts[:, None]
        return cls(lengths, mask.float()[:, None, :], counts[:, None, None])


def _transposed_lengths(conv: Any, lengths: list[int]) -> list[int]:
    """A ConvTranspose1d's output length for each input length."""
    (stride,), (padding,), (dilation,), (kernel,), (extra,) = (
        conv.stride,
        conv.padding,
        conv.dilation,
        conv.kernel_size,
        conv.output_padding,
    )
    return [(n - 1) * stride - 2 * padding + dilation * (kernel - 1) + extra + 1 for n in lengths]


def _adain(ada: Any, x: torch.Tensor, s: torch.Tensor, valid: _Valid) -> torch.Tensor:
    """AdaIN1d with InstanceNorm1d's statistics (mean, biased variance) over each item's own frames."""
    gamma, beta = ada.fc(s)[:, :, None].chunk(2, dim=1)
    frames = valid.mask.transpose(1, 2)  # [B, L, 1]: a matmul sums over the valid frames without a masked copy
    centred = x - (x @ frames) / valid.count
    invstd = torch.rsqrt((centred.square() @ frames) / valid.count + ada.norm.eps)
    scale, shift = (1 + gamma) * invstd, beta
    if ada.norm.affine:
        scale, shift = scale * ada.norm.weight[:, None], (1 + gamma) * ada.norm.bias[:, None] + beta
    return torch.addcmul(shift, centred, scale)  # the norm's and the style's affine maps as one pass


def _adain_res_blk(block: Any, x: torch.Tensor, s: torch.Tensor, valid: _Valid, valid_out: _Valid) -> torch.Tensor:
    """AdainResBlk1d (the decoder's blocks); ``valid_out`` differs from ``valid`` where the block upsamples."""
    r = block.actv(_adain(block.norm1, x, s, valid))
    if block.upsample_type != "none":
        r = block.pool(r.mul_(valid.mask))  # a transposed conv, which would read past the end
    r = block.conv1(block.dropout(r.mul_(valid_out.mask)))
    r = block.actv(_adain(block.norm2, r, s, valid_out))
    r = block.conv2(block.dropout(r.mul_(valid_out.mask)))
    return (r + block._shortcut(x)) * torch.rsqrt(torch.tensor(2))  # the shortcut is per frame


def _adain_res_block1(block: Any, x: torch.Tensor, s: torch.Tensor, valid: _Valid) -> torch.Tensor:
    """AdaINResBlock1 (the generator's blocks), Snake activations included."""
    for c1, c2, n1, n2, a1, a2 in zip(
        block.convs1, block.convs2, block.adain1, block.adain2, block.alpha1, block.alpha2, strict=True
    ):
        xt = _adain(n1, x, s, valid)
        xt = xt + (1 / a1) * (torch.sin(a1 * xt) ** 2)
        xt = c1(xt.mul_(valid.mask))
        xt = _adain(n2, xt, s, valid)
        xt = xt + (1 / a2) * (torch.sin(a2 * xt) ** 2)
        xt = c2(xt.mul_(valid.mask))
        x = xt + x
    return x


def _pad_stack(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """[1, ..., L_i] tensors zero-padded at the end of time to the longest, stacked along the batch."""
    size = max(t.shape[-1] for t in tensors)
    return torch.cat([F.pad(t, (0, size - t.shape[-1])) for t in tensors])


def _generate(
    generator: Any, x: torch.Tensor, s: torch.Tensor, har: torch.Tensor, har_frames: list[int], valid: _Valid
) -> list[torch.Tensor]:
    """Generator.forward after its harmonic source; one waveform per item."""
    device = x.device
    for i in range(generator.num_upsamples):
        x = F.leaky_relu(x, negative_slope=0.1)
        # har is zero past each item's frames, as the unbatched strided conv's own padding is (it reads there)
        x_source = generator.noise_convs[i](har)
        x = generator.ups[i](x.mul_(valid.mask))
        lengths = _transposed_lengths(generator.ups[i], valid.lengths)
        if i == generator.num_upsamples - 1:
            x = generator.reflection_pad(x)  # the left edge, which every item shares
            lengths = [n + sum(generator.reflection_pad.padding) for n in lengths]
        valid = _Valid.of(lengths, x.shape[-1], device)
        if i == generator.num_upsamples - 1 and lengths != har_frames:
            raise RuntimeError(f"the generator's frames {lengths} do not match its source's {har_frames}")
        x = x + _adain_res_block1(generator.noise_res[i], x_source, s, valid)
        xs = _adain_res_block1(generator.resblocks[i * generator.num_kernels], x, s, valid)
        for j in range(1, generator.num_kernels):
            xs += _adain_res_block1(generator.resblocks[i * generator.num_kernels + j], x, s, valid)
        x = xs / generator.num_kernels
    x = generator.conv_post(F.leaky_relu(x).mul_(valid.mask))
    bins = generator.post_n_fft // 2 + 1
    audio = []
    for b, frames in enumerate(valid.lengths):
        # per item on its own frames: the iSTFT divides by the window envelope, which is thin at either end
        item = x[b : b + 1, :, :frames]
        audio.append(generator.stft.inverse(torch.exp(item[:, :bins]), torch.sin(item[:, bins:])).reshape(-1))
    return audio


@torch.inference_mode()
def decode(decoder: Any, fronts: Sequence[Front], sources: Sequence[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """KModel's decoder over several items in one padded batch: each item's waveform, as the unbatched decoder gives.

    ``sources``: each item's ``harmonic_source``, made beforehand (to compare with the unbatched decoder under the
    same seed); by default made here, per item, with the global random generator.
    """
    generator = decoder.generator
    if sources is None:
        sources = [harmonic_source(generator, f.f0) for f in fronts]
    device = fronts[0].asr.device
    asr = _pad_stack([f.asr for f in fronts])
    f0_curve = _pad_stack([f.f0 for f in fronts])
    n_curve = _pad_stack([f.n for f in fronts])
    s = torch.cat([f.style for f in fronts])
    har = _pad_stack(sources)
    frames = [f.asr.shape[-1] for f in fronts]
    valid = _Valid.of(frames, asr.shape[-1], device)

    # Decoder.forward. The curves are zero past each item's end, where the stride-2 convs pad them too.
    f0 = decoder.F0_conv(f0_curve[:, None])
    n = decoder.N_conv(n_curve[:, None])
    x = _adain_res_blk(decoder.encode, torch.cat([asr, f0, n], dim=1), s, valid, valid)
    asr_res = decoder.asr_res(asr)
    res = True
    for block in decoder.decode:
        if res:
            x = torch.cat([x, asr_res, f0, n], dim=1)
        valid_out = valid
        if block.upsample_type != "none":
            size = _transposed_lengths(block.pool, [x.shape[-1]])[0]
            valid_out = _Valid.of(_transposed_lengths(block.pool, valid.lengths), size, device)
            res = False
        x = _adain_res_blk(block, x, s, valid, valid_out)
        valid = valid_out
    return _generate(generator, x, s, har, [h.shape[-1] for h in sources], valid)
