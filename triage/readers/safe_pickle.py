"""Load pickles from untrusted files without running their code.

A pickle is a program: its GLOBAL/STACK_GLOBAL/INST opcodes import any callable
and REDUCE calls it, so `pickle.load` on a dump from someone's job can run
`os.system`. Memory snapshots and Flight Recorder dumps are plain data (dicts,
lists, tuples, strings, numbers), so the loader here resolves no global except a
short allow-list of data constructors, mapped to local stand-ins that never import
the module the pickle names. Everything else is refused with `UntrustedPickleError`
before any of it runs; so are files over the size limit, streams that would build more
containers than their size allows (`triage.readers.object_bounds`) and corrupt streams.
"""

from __future__ import annotations

import _compat_pickle
import io
import pickle
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from triage.readers.object_bounds import TooManyObjects, check_pickle

MAX_PICKLE_BYTES = 256 << 20


def _same(value: Any, *_: Any) -> Any:
    """torch.jit._pickle's list builders and type tags return their first argument."""
    return value


# (module, name) -> what the name resolves to. Only constructors of plain data.
ALLOWED_GLOBALS: dict[tuple[str, str], Callable[..., Any]] = {
    ("collections", "OrderedDict"): OrderedDict,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    # torch's C++ pickler (torch.jit) tags typed lists and containers with these;
    # torch defines each as the identity, and so do we, without importing torch.
    ("torch.jit._pickle", "build_intlist"): _same,
    ("torch.jit._pickle", "build_doublelist"): _same,
    ("torch.jit._pickle", "build_boollist"): _same,
    ("torch.jit._pickle", "restore_type_tag"): _same,
}


class UntrustedPickleError(Exception):
    """An untrusted pickle was not loaded: a refused global, too big, or corrupt.

    `refused` names the global ("os.system") when that was the reason.
    """

    def __init__(self, reason: str, refused: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.refused = refused


class RestrictedUnpickler(pickle.Unpickler):
    """An Unpickler that resolves only ALLOWED_GLOBALS and no persistent ids."""

    def find_class(self, module: str, name: str) -> Any:
        # Protocols 0-2 may spell Python 3 names the Python 2 way (__builtin__.set).
        module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        allowed = ALLOWED_GLOBALS.get((module, name))
        if allowed is None:
            refused = f"{module}.{name}"
            raise UntrustedPickleError(
                f"refused global {refused}: only plain data is loaded from untrusted pickles",
                refused=refused,
            )
        return allowed

    def persistent_load(self, pid: Any) -> Any:
        raise UntrustedPickleError(
            "refused persistent id: tensor storages (torch.save) are not loaded from untrusted pickles",
            refused="persistent_load",
        )


def read_bounded(path: Path, max_bytes: int) -> bytes:
    """The file's bytes, refusing files over `max_bytes` without reading them whole."""
    size = path.stat().st_size
    if size > max_bytes:
        raise UntrustedPickleError(f"{size} bytes is over the {max_bytes}-byte limit")
    with path.open("rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:  # grew while we read it
        raise UntrustedPickleError(f"more than the {max_bytes}-byte limit")
    return data


def load_untrusted(source: str | Path | bytes, max_bytes: int = MAX_PICKLE_BYTES) -> Any:
    """Unpickle plain data from a path or bytes; raises UntrustedPickleError, nothing else.

    OSError from reading the file passes through: the file, not its content, is the problem.
    """
    if isinstance(source, bytes):
        if len(source) > max_bytes:
            raise UntrustedPickleError(f"{len(source)} bytes is over the {max_bytes}-byte limit")
        data = source
    else:
        data = read_bounded(Path(source), max_bytes)
    try:
        check_pickle(data)
    except TooManyObjects as exc:
        raise UntrustedPickleError(str(exc)) from None
    try:
        # A buffered reader offers peek(): the C unpickler then reads in blocks instead of
        # calling back into Python once per opcode.
        stream = io.BufferedReader(io.BytesIO(data), max(8192, len(data)))
        return RestrictedUnpickler(stream).load()
    except UntrustedPickleError:
        raise
    except RecursionError as exc:
        raise UntrustedPickleError("corrupt pickle: nested too deeply") from exc
    except MemoryError as exc:
        raise UntrustedPickleError("corrupt pickle: claims more memory than it holds") from exc
    except Exception as exc:  # the stream is attacker-controlled: any failure is "corrupt"
        raise UntrustedPickleError(f"corrupt pickle: {type(exc).__name__}: {exc}") from exc
