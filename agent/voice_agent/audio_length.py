"""How long a batch reply's audio plays, read from its bytes as they arrive (the server's synthesis_complete says it
on a session; an HTTP reply has no such frame, and the agent has no decoder).

Raw samples count by their width (pcm 2 bytes, G.711 one); WAV by its fmt chunk's block size after the data chunk's
header; MP3 and ADTS AAC by their frames (each header gives its length and its samples); Ogg Opus by its last page's
granule position less the pre-skip; FLAC by its last frame's number (frame headers are found by their sync code
and told from look-alikes in the data by their CRC-8).
"""

from __future__ import annotations

import struct

from kokoro_client.audio import SAMPLE_RATE, TELEPHONY_RATE

_G711 = ("mulaw", "alaw", "wav_mulaw", "wav_alaw")
_RAW_WIDTH = {"pcm": 2, "mulaw": 1, "alaw": 1}
_WAVS = ("wav", "wav_mulaw", "wav_alaw")

_MP3_BITRATES = {  # kbit/s by index, Layer III: MPEG-1, and MPEG-2/2.5 (the rates under 32 kHz)
    1: (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    2: (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_MP3_RATES = {3: (44_100, 48_000, 32_000), 2: (22_050, 24_000, 16_000), 0: (11_025, 12_000, 8_000)}
_AAC_RATES = (96_000, 88_200, 64_000, 48_000, 44_100, 32_000, 24_000, 22_050, 16_000, 12_000, 11_025, 8_000, 7_350)
_OPUS_RATE = 48_000  # Ogg Opus granule positions count 48 kHz samples whatever the rate encoded


def default_rate(fmt: str) -> int:
    """The rate the server sends ``fmt`` at when a request names none: 8 kHz for G.711, else the model's 24 kHz."""
    return TELEPHONY_RATE if fmt in _G711 else SAMPLE_RATE


class AudioLength:
    """Feed it the reply's bytes in order; ``ms()`` is the audio's length so far."""

    def __init__(self, fmt: str, rate: int) -> None:
        self.fmt, self.rate = fmt, rate
        self._buffer = bytearray()  # bytes not yet parsed (a header or frame cut by the transport)
        self._seconds = 0.0
        self._data_bytes = 0
        self._block = 0  # WAV: bytes per sample frame, once the fmt chunk is read; 0 until the data chunk starts
        self._granule, self._pre_skip, self._first_page = 0, 0, True
        self._flac_block = 0  # FLAC: the first frame's block size (every frame's but the last: fixed block size)

    def feed(self, data: bytes) -> None:
        if self.fmt in _RAW_WIDTH:
            self._data_bytes += len(data)
        elif self.fmt in _WAVS and self._block:
            self._data_bytes += len(data)
        else:
            self._buffer += data
            self._parse()

    def ms(self) -> float:
        if self.fmt in _RAW_WIDTH:
            return round(1000.0 * self._data_bytes / _RAW_WIDTH[self.fmt] / self.rate, 1)
        if self.fmt in _WAVS:
            return round(1000.0 * self._data_bytes / self._block / self.rate, 1) if self._block else 0.0
        if self.fmt == "opus":
            return round(1000.0 * max(0, self._granule - self._pre_skip) / _OPUS_RATE, 1)
        return round(1000.0 * self._seconds, 1)

    def _parse(self) -> None:
        parse = {"mp3": self._mp3, "aac": self._adts, "opus": self._ogg, "flac": self._flac}.get(self.fmt)
        if self.fmt in _WAVS:
            parse = self._wav_header
        if parse is None:
            self._buffer.clear()
            return
        with memoryview(self._buffer) as view:
            used = parse(view)
        del self._buffer[:used]

    def _wav_header(self, data: memoryview) -> int:
        """RIFF, WAVE, then chunks until ``data``: what follows its header is samples."""
        at, block = 12, 0
        while len(data) >= at + 8:
            kind, size = bytes(data[at : at + 4]), struct.unpack_from("<I", data, at + 4)[0]
            if kind == b"fmt " and len(data) >= at + 8 + 16:
                block = struct.unpack_from("<H", data, at + 8 + 12)[0]
            if kind == b"data":
                self._block = block or 1
                self._data_bytes = len(data) - (at + 8)
                return len(data)
            at += 8 + size + size % 2
        return 0  # the header is not all here yet

    def _mp3(self, data: memoryview) -> int:
        at = 0
        if bytes(data[:3]) == b"ID3":  # an ID3v2 tag first: its size is syncsafe (7 bits a byte)
            if len(data) < 10:
                return 0
            size = 10 + (data[6] << 21 | data[7] << 14 | data[8] << 7 | data[9])
            if len(data) < size:
                return 0
            at = size
        while len(data) >= at + 4:
            b1, b2 = data[at + 1], data[at + 2]
            version, layer = (b1 >> 3) & 3, (b1 >> 1) & 3
            if data[at] != 0xFF or b1 & 0xE0 != 0xE0 or layer != 1 or version == 1 or (b2 >> 2) & 3 == 3:
                at += 1  # not a Layer III frame header: resynchronize
                continue
            rate = _MP3_RATES[version][(b2 >> 2) & 3]
            bitrate = _MP3_BITRATES[1 if version == 3 else 2][b2 >> 4] * 1000
            samples = 1152 if version == 3 else 576
            length = samples // 8 * bitrate // rate + ((b2 >> 1) & 1)
            if length < 4:
                at += 1
                continue
            if len(data) < at + length:
                break
            frame = bytes(data[at : at + min(length, 64)])
            if b"Xing" not in frame and b"Info" not in frame:  # LAME's header frame is no audio
                self._seconds += samples / rate
            at += length
        return at

    def _adts(self, data: memoryview) -> int:
        at = 0
        while len(data) >= at + 7:
            if data[at] != 0xFF or data[at + 1] & 0xF0 != 0xF0:
                at += 1
                continue
            length = (data[at + 3] & 3) << 11 | data[at + 4] << 3 | data[at + 5] >> 5
            if length < 7:
                at += 1
                continue
            if len(data) < at + length:
                break
            rate = _AAC_RATES[min((data[at + 2] >> 2) & 0xF, len(_AAC_RATES) - 1)]
            self._seconds += 1024 * ((data[at + 6] & 3) + 1) / rate
            at += length
        return at

    def _ogg(self, data: memoryview) -> int:
        at = 0
        while len(data) >= at + 27:
            if bytes(data[at : at + 4]) != b"OggS":
                at += 1
                continue
            segments = data[at + 26]
            if len(data) < at + 27 + segments:
                break
            length = 27 + segments + sum(data[at + 27 : at + 27 + segments])
            if len(data) < at + length:
                break
            body = bytes(data[at + 27 + segments : at + length])
            if self._first_page and body.startswith(b"OpusHead") and len(body) >= 12:
                self._pre_skip = struct.unpack_from("<H", body, 10)[0]
                self._first_page = False
            granule = struct.unpack_from("<q", data, at + 6)[0]
            if granule > 0:
                self._granule = granule
            at += length
        return at

    def _flac(self, data: memoryview) -> int:
        raw = bytes(data)
        at = 0
        while (at := raw.find(b"\xff\xf8", at)) >= 0:
            if len(raw) < at + _FLAC_LONGEST_HEADER:
                return at  # a header may start here: wait for the rest
            header = _flac_frame(raw, at)
            if header is None:
                at += 1
                continue
            number, block, length = header
            if not self._flac_block:
                self._flac_block = block
            self._seconds = (number * self._flac_block + block) / self.rate
            at += length
        return max(0, len(raw) - 1)  # keep a last 0xFF: it may begin a sync code


_FLAC_LONGEST_HEADER = 16  # sync, codes, a 7-byte frame number, 16-bit block size and rate, CRC-8
_FLAC_BLOCKS = {
    1: 192,
    **{code: 576 << (code - 2) for code in range(2, 6)},
    **{c: 256 << (c - 8) for c in range(8, 16)},
}


def _flac_frame(raw: bytes, at: int) -> tuple[int, int, int] | None:
    """The frame header at ``at`` (fixed block size): its frame number, block size and length; None if the bytes
    there only look like one."""
    block_code, rate_code = raw[at + 2] >> 4, raw[at + 2] & 0xF
    if block_code == 0 or rate_code == 15 or raw[at + 3] & 1:
        return None
    first = raw[at + 4]  # the frame number, UTF-8 style: leading one bits count the bytes after the first
    ones = 8 - (~first & 0xFF).bit_length()
    if ones == 1 or ones == 8:
        return None
    extra = max(0, ones - 1)
    number = first & (0xFF >> (ones + 1)) if ones else first
    end = at + 5
    for byte in raw[end : end + extra]:
        if byte & 0xC0 != 0x80:
            return None
        number = number << 6 | byte & 0x3F
    end += extra
    if block_code in (6, 7):
        width = 1 if block_code == 6 else 2
        block = int.from_bytes(raw[end : end + width], "big") + 1
        end += width
    else:
        block = _FLAC_BLOCKS[block_code]
    end += {12: 1, 13: 2, 14: 2}.get(rate_code, 0)
    if _crc8(raw[at:end]) != raw[end]:
        return None
    return number, block, end + 1 - at


def _crc8(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc << 1 ^ 0x07) & 0xFF if crc & 0x80 else crc << 1 & 0xFF
    return crc
