"""Bounded text: evidence can be gigabytes, reports and LLM prompts cannot."""

from __future__ import annotations

import re

MAX_OUTPUT_CHARS = 4000


def bound_text(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    """Keep the head and the tail, and say how much was left out between them."""
    if len(text) <= limit:
        return text
    half = limit // 2
    omitted = len(text) - 2 * half
    return f"{text[:half]}\n[... {omitted} characters omitted ...]\n{text[-half:]}"


def rank_label(ranks: list[int] | set[int]) -> str:
    """'rank 2' or 'ranks 1,3'; 'processes of unknown rank' when no rank is known."""
    if not ranks:
        return "processes of unknown rank"
    return ("rank " if len(set(ranks)) == 1 else "ranks ") + format_ranks(ranks)


def capitalized(text: str) -> str:
    """The first letter upper-cased, the rest as written: 'rank 2' -> 'Rank 2'."""
    return text[:1].upper() + text[1:]


def plural(count: int, noun: str) -> str:
    """'1 gap', '2 gaps', '4,096 ranks': the noun agrees with its count."""
    return f"{count:,} {noun if count == 1 else noun + 's'}"


_IRREGULAR = {"are": "is", "have": "has", "were": "was", "do": "does"}


def agree(count: int, verb: str) -> str:
    """The verb, given in its plural form ('stand'), agreeing with a subject of `count`:
    'stands' for one, 'stand' for several."""
    if count != 1:
        return verb
    head, _, rest = verb.partition(" ")  # 'wait on': only the verb itself changes
    if head in _IRREGULAR:
        head = _IRREGULAR[head]
    else:
        head += "es" if head.endswith(("s", "sh", "ch", "x")) else "s"
    return f"{head} {rest}" if rest else head


def rank_subject(ranks: list[int] | set[int], verb: str) -> str:
    """A rank list as the subject of a verb: 'rank 2 stands', 'ranks 0-1 stand'."""
    return f"{rank_label(ranks)} {agree(len(set(ranks)), verb)}"


def cut_at_word(text: str, limit: int) -> str:
    """`text` within `limit` characters, cut at a space with '…': a reader never sees half a
    token ('OpType=ALLR'). A text without a space early enough is cut at `limit`."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = head.rfind(" ")
    return (head[:space] if space > limit // 2 else head).rstrip(" ,;:") + "…"


def format_ranks(ranks: list[int] | set[int], width: int | None = None) -> str:
    """Compress rank lists the way people write them: [0,1,2,3,7] -> '0-3,7'. With a
    `width`, a list too scattered to fit is cut at a span and says how many ranks it holds:
    every other rank of 4,096 is '0,2,4,...' and '(2,048 ranks)'."""
    ordered = sorted(set(ranks))
    return _fit(_spans(ordered), width, f"{len(ordered):,} ranks")


def _spans(ordered: list[int]) -> str:
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


_NUMBERED = re.compile(r"^(.*?)(\d+)$")


def format_nodes(names: list[str] | set[str], width: int | None = None) -> str:
    """Compress node names the way Slurm writes host lists: node001..node512 -> 'node[001-512]'.

    A run joins numbers of one prefix that follow each other and are written alike: node9
    and node10 join, node09 and node10 join, node009 and node10 do not. With a `width`, a
    list too scattered to fit is cut at a name and says how many nodes it holds."""
    return _fit(_host_list(names), width, f"{len(set(names)):,} nodes")


def _host_list(names: list[str] | set[str]) -> str:
    groups: dict[tuple[str, bool], list[str]] = {}
    for name in sorted(set(names)):
        match = _NUMBERED.match(name)
        if match is None:
            groups[(name, False)] = []
        else:
            groups.setdefault((match[1], True), []).append(match[2])
    parts = []
    for (prefix, _), numbers in groups.items():
        if len(numbers) < 2:
            parts.append(prefix + "".join(numbers))
            continue
        numbers.sort(key=int)
        runs: list[list[str]] = [[numbers[0]]]
        for number in numbers[1:]:
            last = runs[-1][-1]
            padded = number.startswith("0") or last.startswith("0")
            if int(number) == int(last) + 1 and (len(number) == len(last) or not padded):
                runs[-1].append(number)
            else:
                runs.append([number])
        spans = [run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs]
        parts.append(f"{prefix}[{','.join(spans)}]")
    return ",".join(parts) or "none"


def _fit(text: str, width: int | None, count: str) -> str:
    """`text` cut at its last comma that leaves room for '...' and the count, brackets closed."""
    if width is None or len(text) <= width:
        return text
    tail = f" ({count})"
    room = max(width - len(tail) - 4, 1)
    cut = text.rfind(",", 0, room)
    head = text[: cut if cut > 0 else room]
    close = "]" if head.count("[") > head.count("]") else ""
    return f"{head},...{close}{tail}"
