"""Text normalization before G2P: what a reader says for "$1.2M", "3:30 pm", "2025-01-05", "km/h" or a URL.

misaki's English G2P already reads much of what an LLM writes, and this module leaves that to it (tested in
tests/server/test_normalize.py, so a misaki upgrade that loses one shows up): cardinals, decimals, negatives and
thousands separators ("1,234,567", "-5", "3.14"), money with cents or pence ("$42.50", "£3.50", "€10"), ordinals
("21st"), years ("1999"), "10%", "Dr.", "etc.", "vs.", "@" in an e-mail address. What it gets wrong is rewritten
here into words (and digits misaki does read well):

- money with a magnitude: "$1.2M" → "1.2 million dollars" (misaki: "one dollar and two cents M")
- times: "3:30 pm" → "three thirty PM", "15:45" → "fifteen forty-five", "9:05" → "nine oh five"
- dates: "2025-01-05" and "Jan 5, 2025" → "January fifth, 2025"; "01/05/2025" month first in US English, day
  first in British English
- units after a number: "60 km/h" → "60 kilometers per hour", "5 kg", "25°C" → "25 degrees Celsius"
- URLs and e-mail addresses: "https://www.example.com/docs" → "w w w dot example dot com slash docs"
- abbreviations misaki spells out or misreads: "e.g." → "for example", "i.e.", "St." (Saint before a name,
  Street after one), "Prof.", "Jr.", "approx.", "No. 5" ...
- telephone numbers: "555-1234" → "5 5 5, 1 2 3 4"

Numbers are spelled by num2words (misaki's own dependency). Other languages pass through unchanged: espeak-ng
reads digits, dates and currency signs in Spanish, French, Hindi, Italian and Portuguese itself, and misaki's
Mandarin front end normalizes numbers, dates, times, money and units (its zh_normalization, from PaddleSpeech).

``normalize`` returns the new text with a ``TextMap``: for any span of the new text, the span of the input it
came from (a whole rewritten piece maps to the whole original piece), so word timestamps can point into the text
the client sent.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

from num2words import num2words

from kokoro_tts.text.text_map import TextBuilder, TextMap

__all__ = ["ENGLISH", "TextMap", "longest_number", "normalize"]

ENGLISH = frozenset("ab")


# --- the English rules ---------------------------------------------------------------------------------------

_MONTHS = "January February March April May June July August September October November December".split()
_MONTH_NUMBER = {name[:3].lower(): number for number, name in enumerate(_MONTHS, 1)}
_MONTH_NAME = (
    "(?:January|February|March|April|May|June|July|August|September|October|November|December"
    r"|(?:Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept?|Oct|Nov|Dec)\.?)(?![\w])"
)

_CURRENCY_NAMES = {"$": "dollars", "£": "pounds", "€": "euros", "¥": "yen", "₹": "rupees"}
_MAGNITUDES = {
    suffix: word
    for word, suffixes in (("thousand", "k K"), ("million", "m M mm MM"), ("billion", "b B bn"), ("trillion", "t T tn"))
    for suffix in suffixes.split()
}

# Units read after a number: symbol → (singular, plural). Only unambiguous ones: "in", "s" (the 1990s) and "m"
# before a capital are left alone.
_UNITS: dict[str, tuple[str, str]] = {
    "km/h": ("kilometer per hour", "kilometers per hour"),
    "kph": ("kilometer per hour", "kilometers per hour"),
    "mph": ("mile per hour", "miles per hour"),
    "m/s": ("meter per second", "meters per second"),
    "km": ("kilometer", "kilometers"),
    "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"),
    "m": ("meter", "meters"),
    "mi": ("mile", "miles"),
    "ft": ("foot", "feet"),
    "kg": ("kilogram", "kilograms"),
    "mg": ("milligram", "milligrams"),
    "g": ("gram", "grams"),
    "lb": ("pound", "pounds"),
    "lbs": ("pound", "pounds"),
    "oz": ("ounce", "ounces"),
    "ml": ("milliliter", "milliliters"),
    "mL": ("milliliter", "milliliters"),
    "l": ("liter", "liters"),
    "L": ("liter", "liters"),
    "ms": ("millisecond", "milliseconds"),
    "sec": ("second", "seconds"),
    "min": ("minute", "minutes"),
    "h": ("hour", "hours"),
    "hr": ("hour", "hours"),
    "hrs": ("hour", "hours"),
    "KB": ("kilobyte", "kilobytes"),
    "MB": ("megabyte", "megabytes"),
    "GB": ("gigabyte", "gigabytes"),
    "TB": ("terabyte", "terabytes"),
    "Hz": ("hertz", "hertz"),
    "kHz": ("kilohertz", "kilohertz"),
    "MHz": ("megahertz", "megahertz"),
    "GHz": ("gigahertz", "gigahertz"),
    "W": ("watt", "watts"),
    "kW": ("kilowatt", "kilowatts"),
    "kWh": ("kilowatt hour", "kilowatt hours"),
    "V": ("volt", "volts"),
    "°C": ("degree Celsius", "degrees Celsius"),
    "°F": ("degree Fahrenheit", "degrees Fahrenheit"),
    "℃": ("degree Celsius", "degrees Celsius"),
    "℉": ("degree Fahrenheit", "degrees Fahrenheit"),
}

# Abbreviations read as words. Titles come before a name; the others may end a sentence (then the period stays).
# "etc." is here because misaki reads it but drops its period, and with it the sentence's end.
_TITLES = {"Prof.": "Professor", "Gov.": "Governor", "Sen.": "Senator", "Rep.": "Representative", "Mt.": "Mount"}
_ABBREVIATIONS = {
    "e.g.": "for example",
    "i.e.": "that is",
    "approx.": "approximately",
    "Jr.": "Junior",
    "Sr.": "Senior",
    "Ave.": "Avenue",
    "Blvd.": "Boulevard",
    "Rd.": "Road",
    "Dept.": "Department",
    "Inc.": "Incorporated",
    "Ltd.": "Limited",
    "Corp.": "Corporation",
    "est.": "established",
    "etc.": "et cetera",
}

_NUMBER = r"\d+(?:,\d{3})*(?:\.\d+)?"
_TLD = r"(?:com|org|net|edu|gov|io|ai|dev|app|co|uk|us|de|fr|info|biz|me|tv|ly|gg|xyz)"
# Labels of at most 63 characters, as DNS has them: bounded, so a long run of letters and dashes costs linear time.
_DOMAIN = rf"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{{0,61}}[A-Za-z0-9])?\.){{1,10}}{_TLD}\b"
_PATH = r"(?:/[\w\-.~%/?#=&+]*[\w/])?"


def _rule(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


# misaki reads a number through num2words, then looks each word up in its lexicon: from "nonillion" (31 digits) on
# the scale words are not there, and it spells them ("N-O-N-I-L-L-I-O-N"); such numbers are read here.
MISAKI_MAX_DIGITS = 30
_LONG_DIGITS = rf"\d{{{MISAKI_MAX_DIGITS + 1},}}|\d{{1,3}}(?:,\d{{3}}){{{MISAKI_MAX_DIGITS // 3},}}"
_LONG_NUMBER = rf"(?<![\w.,])(-?)({_LONG_DIGITS})(?![\w]|[.,]\d)"

_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("long_number", _rule(_LONG_NUMBER)),
    ("email", _rule(r"(?<![\w.+-])[\w.+-]+@" + _DOMAIN)),
    ("url", _rule(rf"(?<![\w@/.-])(?:https?://(?:[\w-]+\.)+[A-Za-z]{{2,}}|(?:www\.)?{_DOMAIN}){_PATH}")),
    ("money", _rule(rf"([$£€¥₹])({_NUMBER})\s?(bn|tn|mm|MM|[kKmMbBtT]|thousand|million|billion|trillion)\b")),
    ("iso_date", _rule(r"\b(\d{4})-(\d{2})-(\d{2})\b")),
    ("slash_date", _rule(r"\b(\d{1,2})/(\d{1,2})/(\d{4})\b")),
    ("month_date", _rule(rf"\b({_MONTH_NAME})\s(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s(\d{{4}})\b)?")),
    ("day_month", _rule(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s({_MONTH_NAME})(?:,?\s(\d{{4}})\b)?")),
    ("time", _rule(r"(?<![\d:.])(\d{1,2}):(\d{2})(?::(\d{2}))?(?![\d:])(?:\s?([AaPp])(?:\.[Mm]\.|[Mm]\b))?")),
    ("phone", _rule(r"(?<![\d-])(?:\(?(\d{3})\)?[\s-])?(\d{3})-(\d{4})(?![\d-])")),
    (
        "unit",
        _rule(
            rf"(?<![\w.])(-?{_NUMBER})\s?("
            + "|".join(re.escape(u) for u in sorted(_UNITS, key=len, reverse=True))
            + r")(?![\w/°])"
        ),
    ),
    ("title", _rule(r"\b(" + "|".join(re.escape(t) for t in _TITLES) + r")(?=\s+[A-Z])")),
    ("saint_street", _rule(r"\bSt\.(?=\s)")),
    ("abbreviation", _rule(r"(?<![\w.])(" + "|".join(re.escape(a) for a in _ABBREVIATIONS) + r")(?=\s|$|[,;:!?)])")),
    ("number_sign", _rule(r"\bNo\.(?=\s?\d)")),
]
_ANY = re.compile("|".join(f"(?P<{name}>{rule.pattern})" for name, rule in _RULES))


def normalize(text: str, lang: str) -> tuple[str, TextMap]:
    """``text`` as words the G2P reads well, and the map back to ``text``; unchanged for languages but English."""
    if lang not in ENGLISH:
        return text, TextMap.identity(len(text))
    british = lang == "b"
    out = TextBuilder()
    position = 0
    for match in _ANY.finditer(text):
        kind = match.lastgroup
        assert kind is not None
        # The rule's own pattern again, at the same place, for its group numbers (lookarounds see the whole text).
        own = _RULE_OF[kind].match(text, match.start())
        assert own is not None and own.end() == match.end()
        spoken = _SPEAK[kind](own, text, match.end(), british)
        if spoken is None:
            continue
        out.keep(text, position, match.start())
        out.add(spoken, match.start(), match.end())
        position = match.end()
    out.keep(text, position, len(text))
    return out.result()


_RULE_OF = dict(_RULES)


def _spell(n: int) -> str:
    return str(num2words(n))


def _ordinal(n: int) -> str:
    return str(num2words(n, to="ordinal"))


_NEXT_CHARACTER = re.compile(r"\s*(\S?)")


def _next_character(text: str, end: int) -> str:
    """The first character after ``end`` that is not a space ("" at the end); a match, not a copy of the rest."""
    match = _NEXT_CHARACTER.match(text, end)
    assert match is not None
    return match.group(1)


def _previous_word(text: str, start: int) -> str:
    """The word before ``start`` (spaces skipped): walks back over it only, never over the whole text before."""
    end = start
    while end > 0 and text[end - 1].isspace():
        end -= 1
    begin = end
    while begin > 0 and not text[begin - 1].isspace():
        begin -= 1
    return text[begin:end]


def _sentence_end(text: str, end: int) -> bool:
    """The period at ``end`` - 1 also ends the sentence: nothing but space before the end, or a capital next."""
    nxt = _next_character(text, end)
    return not nxt or (nxt.isupper() and end < len(text) and text[end].isspace())


def _long_number(m: re.Match[str], text: str, end: int, british: bool) -> str:
    words = _spell(int(m.group(2).replace(",", ""))).replace(" and ", " ")  # US style, as misaki reads numbers
    return f"minus {words}" if m.group(1) else words


def _email(m: re.Match[str], text: str, end: int, british: bool) -> str:
    local, domain = m.group().split("@", 1)
    return f"{_read_address(local)} at {_read_address(domain)}"


def _url(m: re.Match[str], text: str, end: int, british: bool) -> str:
    url = re.sub(r"^https?://", "", m.group())
    host, _, path = url.partition("/")
    words = _read_address(host)
    if path:
        words += " slash " + " slash ".join(_read_address(p) for p in path.rstrip("/").split("/"))
    return words


def _read_address(part: str) -> str:
    """ "www.example.co.uk" → "w w w dot example dot co dot uk"; short all-consonant pieces are spelled out."""
    words = []
    for piece in re.split(r"([.\-_])", part):
        if piece in (".", "-", "_"):
            words.append({".": "dot", "-": "dash", "_": "underscore"}[piece])
        elif piece:
            spelled = piece.lower() in ("www", "uk", "us", "io", "ai", "tv", "ly", "gg") or (
                len(piece) <= 3 and not re.search("[aeiouy]", piece.lower())
            )
            words.append(" ".join(piece.upper()) if spelled else piece)
    return " ".join(words)


def _money(m: re.Match[str], text: str, end: int, british: bool) -> str:
    sign, amount, magnitude = m.group(1), m.group(2), m.group(3)
    return f"{amount} {_MAGNITUDES.get(magnitude, magnitude)} {_CURRENCY_NAMES[sign]}"


def _date(month: int, day: int, year: str | None, british: bool) -> str | None:
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    name = _MONTHS[month - 1]
    spoken = f"the {_ordinal(day)} of {name}" if british else f"{name} {_ordinal(day)}"
    return f"{spoken}, {year}" if year else spoken


def _month(name: str) -> int:
    return _MONTH_NUMBER[name[:3].lower()]


def _iso_date(m: re.Match[str], text: str, end: int, british: bool) -> str | None:
    return _date(int(m.group(2)), int(m.group(3)), m.group(1), british)


def _slash_date(m: re.Match[str], text: str, end: int, british: bool) -> str | None:
    first, second = int(m.group(1)), int(m.group(2))
    month, day = (second, first) if british else (first, second)
    return _date(month, day, m.group(3), british)


def _month_date(m: re.Match[str], text: str, end: int, british: bool) -> str | None:
    return _date(_month(m.group(1)), int(m.group(2)), m.group(3), british)


def _day_month(m: re.Match[str], text: str, end: int, british: bool) -> str | None:
    return _date(_month(m.group(2)), int(m.group(1)), m.group(3), True)


def _time(m: re.Match[str], text: str, end: int, british: bool) -> str | None:
    hours, minutes, seconds, half = int(m.group(1)), int(m.group(2)), m.group(3), m.group(4)
    if hours > 24 or minutes > 59 or (half and not 1 <= hours <= 12) or (seconds and int(seconds) > 59):
        return None
    if minutes == 0 and not seconds:  # "7 PM", "twelve o'clock", "eighteen hundred"
        whole_hour = "o'clock" if 1 <= hours <= 12 else "hundred"
        spoken = _spell(hours) if half else f"{_spell(hours)} {whole_hour}"
    elif minutes < 10:
        spoken = f"{_spell(hours)} oh {_spell(minutes)}"
    else:
        spoken = f"{_spell(hours)} {_spell(minutes)}"
    if seconds:
        s = int(seconds)
        spoken += f" and {_spell(s)} second{'s' if s != 1 else ''}"
    if half:
        spoken += f" {half.upper()}M"
        if m.group().endswith(".") and _sentence_end(text, end):
            spoken += "."
    return spoken


def _phone(m: re.Match[str], text: str, end: int, british: bool) -> str:
    return ", ".join(" ".join(group) for group in m.groups() if group)


def _unit(m: re.Match[str], text: str, end: int, british: bool) -> str:
    number, unit = m.group(1), m.group(2)
    singular, plural = _UNITS[unit]
    return f"{number} {singular if number.lstrip('-') in ('1', '1.0') else plural}"


def _title(m: re.Match[str], text: str, end: int, british: bool) -> str:
    return _TITLES[m.group()]


def _saint_street(m: re.Match[str], text: str, end: int, british: bool) -> str:
    # "St. Louis" is a saint; "Main St." (after a capitalised word, not before one) a street.
    before = _previous_word(text, m.start())
    if _next_character(text, end).isupper() and not (before[:1].isupper() and _sentence_end(text, end)):
        return "Saint"
    return "Street." if _sentence_end(text, end) else "Street"


def _abbreviation(m: re.Match[str], text: str, end: int, british: bool) -> str:
    spoken = _ABBREVIATIONS[m.group()]
    return spoken + "." if _sentence_end(text, end) else spoken


def _number_sign(m: re.Match[str], text: str, end: int, british: bool) -> str:
    return "number"


_SPEAK: dict[str, Callable[[re.Match[str], str, int, bool], str | None]] = {
    "long_number": _long_number,
    "email": _email,
    "url": _url,
    "money": _money,
    "iso_date": _iso_date,
    "slash_date": _slash_date,
    "month_date": _month_date,
    "day_month": _day_month,
    "time": _time,
    "phone": _phone,
    "unit": _unit,
    "title": _title,
    "saint_street": _saint_street,
    "abbreviation": _abbreviation,
    "number_sign": _number_sign,
}


# --- what a number is read as ----------------------------------------------------------------------------------


class _AsRead(dict[int, str]):
    """``str.translate`` table: each character as the G2P reads it for numbers (misaki: NFKC, then every digit by
    its value), so "①", "¹", "１", "٣" and "⑳" are the digits they stand for. Filled on first sight of each."""

    def __missing__(self, code: int) -> str:
        folded = unicodedata.normalize("NFKC", chr(code))
        read = "".join(str(unicodedata.digit(c)) if c.isdigit() else c for c in folded)
        if len(self) < 65536:  # bounded: a client may send every code point once
            self[code] = read
        return read


_AS_READ = _AsRead()
_DIGIT_RUN = re.compile(r"[0-9][0-9,]*")  # commas inside a number are dropped when it is read: "1,000,000"


def longest_number(text: str) -> int:
    """The most digits any number in ``text`` is read with: what a digit cap must count, whatever digit characters
    (any script, superscript, circled, fullwidth) or thousands separators the number is written in."""
    read = text if text.isascii() else text.translate(_AS_READ)
    return max((len(run) - run.count(",") for run in _DIGIT_RUN.findall(read)), default=0)
