"""Kubernetes resource quantities (``100Gi``, ``500m``, ``1e3``), read exactly as the apiserver reads them.

A port of ``resource.ParseQuantity`` (k8s.io/apimachinery/pkg/api/resource/quantity.go), quirks included
(``1.`` and ``+`` parse, ``K`` does not: the decimal kilo is ``k``), so the model accepts the strings the
apiserver accepts. The CRD checks the same fields with Kubernetes' own CEL quantity library
(``isQuantity``/``quantity``), and tests/e2e/test_admission_renders.py asks the real apiserver.

Values are exact (``Decimal``). Kubernetes rounds a value up to whole nanounits and silently caps it at
2^63-1; :func:`in_range` refuses a value that would be capped (and the cap itself, which CEL cannot tell
apart from a capped value), so a quantity is never stored as something other than what the user wrote.
"""

from __future__ import annotations

from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal

MAX = Decimal(2**63 - 1)
"""Kubernetes' largest quantity (math.MaxInt64 units); larger values are capped to it."""
NANO = Decimal("1e-9")
_LIMIT = MAX - NANO  # 28 digits: exact in the default context
_DIGITS = "0123456789"
_SUFFIX_CHARS = "eEinumkKMGTP"
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}


def _scan(text: str, pos: int, chars: str) -> int:
    while pos < len(text) and text[pos] in chars:
        pos += 1
    return pos


def _split(text: str) -> tuple[bool, str, str, str] | None:
    """(positive, numerator, denominator, suffix), as parseQuantityString cuts a quantity; None if it
    refuses it."""
    pos = 1 if text[:1] in ("-", "+") else 0
    positive = text[:1] != "-"
    pos = _scan(text, pos, "0")  # leading zeros
    start = pos
    pos = _scan(text, pos, _DIGITS)
    num = text[start:pos] or "0"
    denom = ""
    if text[pos : pos + 1] == ".":
        start = pos + 1
        pos = _scan(text, start, _DIGITS)
        denom = text[start:pos]
    suffix_start = pos
    pos = _scan(text, pos, _SUFFIX_CHARS)
    if pos < len(text) and text[pos] in "-+":
        pos += 1
    pos = _scan(text, pos, _DIGITS)
    if pos < len(text):
        return None  # something after the suffix
    return positive, num, denom, text[suffix_start:]


def _exponent(suffix: str) -> tuple[int, int] | None:
    """(base, exponent) of a suffix: a decimal or binary SI suffix, or e<integer>."""
    if suffix in _DECIMAL:
        return 10, _DECIMAL[suffix]
    if suffix in _BINARY:
        return 2, _BINARY[suffix]
    digits = suffix[1:]
    body = digits[1:] if digits[:1] in ("-", "+") else digits
    if len(suffix) > 1 and suffix[0] in "eE" and body and all(c in _DIGITS for c in body):
        value = int(digits)
        if not -(2**63) <= value < 2**63:
            return None  # strconv.ParseInt's range
        return 10, (value + 2**31) % 2**32 - 2**31  # Go's int32() conversion wraps
    return None


def parse_quantity(text: str) -> Decimal | None:
    """The exact value of a quantity (before Kubernetes' rounding and cap), or None if Kubernetes refuses
    the string."""
    if not text:
        return None
    parts = _split(text)
    if parts is None:
        return None
    positive, num, denom, suffix = parts
    base_exp = _exponent(suffix)
    if base_exp is None:
        return None
    base, exponent = base_exp
    exact = Context(prec=len(text) + 64, Emax=MAX_EMAX, Emin=MIN_EMIN)  # no rounding, no overflow
    magnitude = Decimal(f"{num}.{denom or '0'}")
    if base == 10:
        value = magnitude.scaleb(exponent, context=exact)
    else:
        value = exact.multiply(magnitude, Decimal(2**exponent))
    return value if positive else -value


def in_range(value: Decimal) -> bool:
    """Whether Kubernetes keeps ``value`` as written: below 2^63-1 once rounded up to whole nanounits."""
    return value <= _LIMIT


def is_size(text: str) -> bool:
    """A quantity Kubernetes accepts as a size (not negative) and keeps as written."""
    value = parse_quantity(text)
    return value is not None and value >= 0 and in_range(value)
