"""Reading the user's source to tell loops and rank-dependent branches apart.

A line number alone cannot say whether a rank left the training loop or took a
rank-dependent branch inside it; the source can. Files are only read, never
changed, and a missing file (another host) just means no answer.

Paths in logs and dumps are the job's own (`/home/alice/proj/train.py` on a cluster
node); triage often runs in a checkout of the same code elsewhere. A path that does not
exist is looked up under the working directory by its longest existing tail
(`proj/train.py`, then `train.py`).
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MAX_SOURCE_BYTES = 2_000_000
#: torch.distributed calls whose skipping on one rank leaves the others waiting.
_COLLECTIVE_CALLS = frozenset(
    {
        "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "broadcast",
        "broadcast_object_list", "reduce", "reduce_scatter", "reduce_scatter_tensor",
        "all_to_all", "all_to_all_single", "barrier", "gather", "scatter",
    }
)  # fmt: skip
_EXCLUDES = re.compile(r"\bnot\b|!=")
#: Tests every rank answers alike: the job's setup, and the model's structure (which
#: parameters have gradients is the same on every replica).
_UNIFORM = re.compile(
    r"is_initialized|is_available|world_size|get_world_size|distributed|\bddp\b|n_?gpus?\b"
    r"|\.grad\b|requires_grad",
    re.I,
)
_RANKISH = re.compile(r"rank|is_main|main_process|is_master|local_rank|get_rank|master", re.I)


@dataclass(frozen=True)
class Block:
    start: int
    end: int
    text: str
    #: The line lies in the `else:` of this `if`: the ranks there are those the test let out.
    negated: bool = False


def _resolve(path: str) -> Path | None:
    """The file at `path`, or the working directory's file with the longest same tail."""
    file = Path(path)
    if file.is_file():
        return file
    parts = file.parts[1:] if file.is_absolute() else file.parts
    base = Path.cwd()
    for start in range(len(parts)):
        candidate = base.joinpath(*parts[start:])
        if candidate.is_file():
            return candidate
    return None


@functools.lru_cache(maxsize=256)
def _module(path: str) -> tuple[ast.Module, str] | None:
    try:
        file = _resolve(path)
        if file is None or file.stat().st_size > MAX_SOURCE_BYTES:
            return None
        source = file.read_text(encoding="utf-8", errors="replace")
        return ast.parse(source), source
    except (OSError, SyntaxError, ValueError):
        return None


@functools.lru_cache(maxsize=256)
def _statements(path: str) -> tuple[tuple[int, int, ast.stmt], ...]:
    """Every statement of the file with its first and last line: one walk of the tree
    per file, however many ranks and frames ask about it."""
    parsed = _module(path)
    if parsed is None:
        return ()
    return tuple(
        (node.lineno, node.end_lineno or node.lineno, node)
        for node in ast.walk(parsed[0])
        if isinstance(node, ast.stmt)
    )


@functools.lru_cache(maxsize=4096)  # a job's ranks stand at the same few lines
def _enclosing(path: str, line: int, kinds: tuple[type[ast.stmt], ...]) -> tuple[ast.stmt, ...]:
    """The statements of `kinds` around `line`, innermost first."""
    found = [
        node
        for start, end, node in _statements(path)
        if start <= line <= end and isinstance(node, kinds)
    ]
    return tuple(sorted(found, key=lambda n: -n.lineno))


def innermost_loop(path: str, line: int) -> Block | None:
    """The innermost for/while loop of the function holding `line`."""
    loops = enclosing_loops(path, line)
    return loops[0] if loops else None


def innermost_function(path: str, line: int) -> Block | None:
    nodes = _enclosing(path, line, (ast.FunctionDef, ast.AsyncFunctionDef))
    return _block(path, nodes[0]) if nodes else None


def enclosing_loops(path: str, line: int) -> list[Block]:
    """The for/while loops around `line` in its function, innermost first."""
    function = innermost_function(path, line)
    return [
        _block(path, node)
        for node in _enclosing(path, line, (ast.For, ast.AsyncFor, ast.While))
        if function is None or function.start <= node.lineno <= function.end
    ]


def _conditions(path: str, line: int) -> Iterator[Block]:
    """The `if` blocks around `line`, innermost first, each with its test as text."""
    parsed = _module(path)
    if parsed is None:
        return
    for node in _enclosing(path, line, (ast.If,)):
        assert isinstance(node, ast.If)
        test = ast.get_source_segment(parsed[1], node.test) or ""
        negated = bool(node.orelse) and line >= node.orelse[0].lineno
        text = f"if {test}: ... else:" if negated else f"if {test}:"
        yield Block(node.lineno, node.end_lineno or node.lineno, text, negated)


def condition(path: str, line: int, within: Block | None = None) -> Block | None:
    """The innermost `if` around `line` (inside `within` when given), whatever its test:
    a collective under it runs on the ranks where the test holds, rank- or data-dependent."""
    inside = (
        b
        for b in _conditions(path, line)
        if within is None or within.start <= b.start <= within.end
    )
    return next(inside, None)


def guard(path: str, line: int, within: Block | None) -> Block | None:
    """The innermost `if` around `line` inside `within` whose test may differ across ranks:
    tests every rank answers alike (`dist.is_initialized()`, `world_size > 1`) guard a
    collective on all ranks or none, so they are left out."""
    found = condition(path, line, within=within)
    return None if found is None or _UNIFORM.search(found.text) else found


def excludes_ranks(block: Block) -> bool:
    """A rank-dependent test that lets most ranks in and leaves some out (`if not (rank ==
    2 ...)`, `if rank != 0`, the `else:` of `if rank == 0`): the ranks that wait under it
    are the many, the ones it left out went elsewhere."""
    return is_rank_dependent(block) and bool(_EXCLUDES.search(block.text)) != block.negated


def is_rank_dependent(block: Block) -> bool:
    """Whether an `if` block's test names the rank (or the main process)."""
    return bool(_RANKISH.search(block.text))


def rank_condition(path: str, line: int) -> Block | None:
    """The innermost `if` around `line` whose test depends on the rank, if any."""
    return next((b for b in _conditions(path, line) if is_rank_dependent(b)), None)


def leaves_loop(path: str, ahead: int, behind: int) -> bool | None:
    """Whether a rank at line `ahead` left a loop that a rank at `behind` (same function)
    is still in; None when `behind` is in no loop.

    It did when `ahead` lies later, outside `behind`'s innermost loop. It did not when
    either line sits under a rank-dependent `if` (a rank skipped a collective), or when
    `ahead` is still in an outer loop they share, under an `if` of its own inside it (only
    ranks whose own data said so entered a collective).
    """
    if ahead <= behind or rank_condition(path, ahead) or rank_condition(path, behind):
        return False
    loops = enclosing_loops(path, behind)
    if not loops:
        return None
    shared = [loop for loop in loops if loop.start <= ahead <= loop.end]
    if len(shared) == len(loops):
        return False
    skipped = skippable_collective(path, loops[0], before=behind)
    if skipped is not None:
        return False  # a rank that skipped the collective under the `if` ran out early too
    return not (shared and condition(path, ahead, within=shared[0]))


def skippable_collective(
    path: str, loop: Block, before: int | None = None
) -> tuple[Block, int] | None:
    """A collective called under a rank-dependent `if` that leaves some ranks out (`not`,
    `!=`) inside `loop` (above line `before`, where the other ranks wait, when given): the
    `if` and the call's line. A rank that skipped it runs out of collectives one call early,
    which looks like leaving the loop early (uneven inputs) from the stacks alone; an `if
    rank == 0:` runs on one rank only and cannot explain the others' wait."""
    parsed = _module(path)
    if parsed is None:
        return None
    for node in ast.walk(parsed[0]):
        if not (isinstance(node, ast.Call) and loop.start <= node.lineno <= loop.end):
            continue
        if before is not None and node.lineno >= before:
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        if name not in _COLLECTIVE_CALLS:
            continue
        block = rank_condition(path, node.lineno)
        if block is not None and loop.start <= block.start <= loop.end and excludes_ranks(block):
            return block, node.lineno
    return None


def reshaped_input(path: str, line: int) -> tuple[Block, int] | None:
    """A rank-dependent `if` above the collective at `line`, in its function but not around
    it, that changes a name the call's arguments read (assigns it, or appends, extends,
    resizes or concatenates onto it): the `if` and the changing statement's line.

    Every rank then calls the same collective from the same line, but the ranks that took
    the branch pass a tensor of another size or dtype: a shape mismatch that stacks alone
    cannot see.
    """
    parsed = _module(path)
    function = innermost_function(path, line)
    if parsed is None or function is None:
        return None
    call = next(
        (
            node
            for node in ast.walk(parsed[0])
            if isinstance(node, ast.Call)
            and node.lineno == line
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _COLLECTIVE_CALLS
        ),
        None,
    )
    if call is None:
        return None
    read = {
        n.id for arg in [*call.args, *(k.value for k in call.keywords)] for n in ast.walk(arg)
        if isinstance(n, ast.Name)
    }  # fmt: skip
    around = {b.start for b in _conditions(path, line)}
    for node in ast.walk(parsed[0]):
        if not (
            isinstance(node, ast.If)
            and function.start <= node.lineno < line
            and node.lineno not in around
        ):
            continue
        test = ast.get_source_segment(parsed[1], node.test) or ""
        block = Block(node.lineno, node.end_lineno or node.lineno, f"if {test}:")
        if not is_rank_dependent(block):
            continue
        changed = next((n for stmt in node.body for n in ast.walk(stmt) if _changes(n, read)), None)
        if isinstance(changed, ast.stmt | ast.expr):
            return block, changed.lineno
    return None


_MUTATORS = frozenset({"append", "extend", "insert", "resize_", "copy_", "update"})


def _changes(node: ast.AST, names: set[str]) -> bool:
    """Whether a statement assigns one of `names` or mutates it in place."""
    if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(isinstance(t, ast.Name) and t.id in names for t in targets)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        owner = node.func.value
        return node.func.attr in _MUTATORS and isinstance(owner, ast.Name) and owner.id in names
    return False


def source_line(path: str, line: int) -> str | None:
    """The stripped text of one line of a readable Python file."""
    parsed = _module(path)
    lines = parsed[1].splitlines() if parsed else []
    return lines[line - 1].strip() if 0 < line <= len(lines) else None


def source_available(path: str) -> bool:
    return _module(path) is not None


def _block(path: str, node: ast.stmt) -> Block:
    parsed = _module(path)
    first = parsed[1].splitlines()[node.lineno - 1].strip() if parsed else ""
    return Block(node.lineno, node.end_lineno or node.lineno, first)
