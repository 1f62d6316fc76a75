"""Token counts and contexts as a reader reads them, formatted in this one place (K = 1,024 tokens and
M = 1,048,576, as data/reference counts them).

A context is identified by its token count (``context_tokens``; a scaled run also by its ``scale_factor``);
a label such as '64K' names it for display and is never a join key.
"""

from __future__ import annotations

import math

K, M = 1 << 10, 1 << 20


def context_label(tokens: float) -> str:
    """The name a context is stored under (a run's ``context_label``): '64K' for 65,536 and '1024K' for
    1,048,576 (whole K), the plain count otherwise ('74', '3000')."""
    t = int(round(tokens))
    return f"{t // K}K" if t % K == 0 else str(t)


def tokens_label(tokens: float) -> str:
    """A context as a reader names it: 65,536 → '64K', 204,800 → '200K', 1,048,576 → '1M', 3,000 → '3,000'."""
    t = int(round(tokens))
    if t >= M and t % M == 0:
        return f"{t // M}M"
    if t % K == 0:
        return f"{t // K}K"
    return f"{t:,}"


def k_label(tokens: float) -> str:
    """A context in whole K, rounded, grouped like every other count: 127,963 → '125K'; 1,048,576 → '1,024K'."""
    return f"{tokens / K:,.0f}K"


def token_range(lo: float, hi: float) -> str:
    """A range of modelled contexts in whole K and what K is: '108K–737K tokens (K = 1,024)' for 110,629 to 754,399.
    A model whose crossover moves over a range this wide supports no more digits than that (issue 39)."""
    return f"{approx_label(lo)}–{approx_label(hi)} tokens (K = 1,024)"


def approx_label(tokens: float) -> str:
    """A context rounded for the eye: 127,963 → '125K'; 1,027,165 → '0.98M'."""
    return f"{tokens / M:.2g}M" if tokens >= 0.9 * M else k_label(tokens)


def approx_tokens(tokens: float) -> str:
    """An estimated context, rounded to whole K: '≈125K tokens' for 127,963 (a fit's or an interpolation's
    crossover, never exact to the token)."""
    return f"≈{approx_label(tokens)} tokens"


def nominal_tokens(label: str) -> set[int]:
    """The token counts a context label names: '64K' → {65,536, 64,000}; '3,200' → {3,200}; nothing unparsable."""
    text = str(label).strip().replace(",", "")
    try:
        if text[-1:] in "Kk":
            return {int(float(text[:-1]) * K), int(float(text[:-1]) * 1000)}
        if text[-1:] in "Mm":
            return {int(float(text[:-1]) * M), int(float(text[:-1]) * 1000**2)}
        return {int(float(text))}
    except ValueError:
        return set()


def scaled_context(label: str, tokens: int | None, sep: str = " ") -> str:
    """A context named by its label, with its real tokens when the run was scaled (its tokens are not what the
    label names): '64K', or '64K (1,024 tok)' (``sep`` before the parenthesis: a newline on an axis)."""
    named = nominal_tokens(label)
    if tokens is None or not named or tokens in named:
        return str(label)
    return f"{label}{sep}({tokens:,} tok)"


def minus(text: str) -> str:
    """A formatted number with a true minus sign ('−0.49', not '-0.49')."""
    return "−" + text[1:] if text.startswith("-") else text


def sig2(x: float) -> str:
    """A ratio to two significant figures, trailing zero kept: 2.0, 1.9, 14, 0.93 (how n=1 numbers are shown); a
    negative one with a true minus ('−32')."""
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return minus(f"{round(x, 1 - int(math.floor(math.log10(abs(x))))):,.0f}")
    return minus(f"{x:#.2g}".rstrip("."))


def measured(x: float, n: int | None = None) -> str:
    """A measured quantity (req/s, tokens/s, a margin): two significant figures where it rests on one run
    (``n`` = 1: :func:`sig2`), else three; never in e-notation (1,290, not 1.29e+03)."""
    if n == 1:
        return sig2(x)
    if x == 0:
        return "0"
    mag = int(math.floor(math.log10(abs(x))))
    return minus(f"{round(x, 2 - mag):,.0f}" if mag >= 2 else f"{x:#.3g}".rstrip("."))


def ratio(x: float, n: int | None = None, digits: int = 2) -> str:
    """A measured or published ratio as a reader reads it: two significant figures where it rests on one run a
    side (``n`` = 1: :func:`sig2`), else ``digits`` decimals (published values, n = None; repeats)."""
    return sig2(x) if n == 1 else minus(f"{x:.{digits}f}")


def direction(factor: float, bold: bool = False, n: int | None = None) -> str:
    """A decay factor (throughput at the short context ÷ at the long one) as a direction and size: 2.94 →
    'falls 2.94×', 0.94 → 'rises 1.06×', 1.0 → 'stays the same'; two significant figures where ``n`` = 1."""
    b = "**" if bold else ""
    if abs(factor - 1) < 0.005:
        return f"stays {b}the same{b}"
    return f"falls {b}{ratio(factor, n)}×{b}" if factor > 1 else f"rises {b}{ratio(1 / factor, n)}×{b}"


def change(factor: float | None, noun: str, bold: bool = False, n: int | None = None) -> str:
    """``noun`` with its decay factor's direction: 2.94 → 'requests/s falls 2.94×', 0.94 → 'prompt tokens/s rises
    1.06×'; None → 'noun: not available'."""
    if factor is None:
        return f"{noun}: not available"
    return f"{noun} {direction(factor, bold, n)}".strip()


def time_against(saved: float, noun: str = "batch time") -> str:
    """A time saved (1 - on/off) as a comparison a reader takes in at once: 0.32 → '32% less batch time than',
    -0.21 → '21% more batch time than', and from twice as long on, a factor: -4.74 → '5.7× as much batch time as'
    (not '474% more')."""
    if saved <= -1:
        return f"{sig2(1 - saved)}× as much {noun} as"
    return f"{abs(saved):.0%} {'less' if saved > 0 else 'more'} {noun} than"


def apart(saved: float) -> str:
    """How far apart two times are, given 1 - a/b: '31%' below a factor of two, else the factor ('5.7×')."""
    return f"{sig2(1 - saved)}×" if saved <= -1 else f"{abs(saved):.0%}"


def modelled_count(x: float | None) -> int | None:
    """A count the model predicts (a KV capacity in tokens) to the three significant figures a model that misses its
    held-out points by 40% supports: 2,370,790 → 2,370,000 (issue 39); None stays None."""
    if x is None:
        return None
    if x == 0:
        return 0
    return int(round(x, 2 - int(math.floor(math.log10(abs(x))))))


def sentence_start(text: str) -> str:
    """``text`` with its first letter capitalised to start a sentence, unless its first word is a name written
    lower-camel ('vLLM's batch time …' stays, never 'VLLM's')."""
    if not text or text[1:2].isupper():
        return text
    return text[0].upper() + text[1:]


def count(n: int, one: str, many: str | None = None) -> str:
    """A count with its noun in the right number: '1 figure', '3 figures', '2 run folders' (``many``: an irregular
    plural); never 'figure(s)'."""
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def signed_pct(x: float) -> str:
    """+0.016 → '+1.6%', −0.35 → '−35%' (a true minus sign; one decimal below 10%)."""
    text = f"{x:+.1%}" if abs(x) < 0.1 else f"{x:+.0%}"
    return text.replace("-", "−")
