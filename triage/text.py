"""Bounded text: evidence can be gigabytes, reports and LLM prompts cannot."""

from __future__ import annotations

MAX_OUTPUT_CHARS = 4000


def bound_text(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    """Keep the head and the tail, and say how much was left out between them."""
    if len(text) <= limit:
        return text
    half = limit // 2
    omitted = len(text) - 2 * half
    return f"{text[:half]}\n[... {omitted} characters omitted ...]\n{text[-half:]}"


def rank_label(ranks: list[int]) -> str:
    """'rank 2' or 'ranks 1,3'."""
    return ("rank " if len(ranks) == 1 else "ranks ") + format_ranks(ranks)


def format_ranks(ranks: list[int] | set[int]) -> str:
    """Compress rank lists the way people write them: [0,1,2,3,7] -> '0-3,7'."""
    ordered = sorted(set(ranks))
    if not ordered:
        return "none"
    spans: list[str] = []
    start = prev = ordered[0]
    for rank in ordered[1:]:
        if rank == prev + 1:
            prev = rank
            continue
        spans.append(f"{start}-{prev}" if prev > start else str(start))
        start = prev = rank
    spans.append(f"{start}-{prev}" if prev > start else str(start))
    return ",".join(spans)
