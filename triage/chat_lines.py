"""The chat's input lines. At a terminal: line editing, a history kept across sessions and
Tab completion, from the stdlib `readline` where the platform has it (arrow keys would
otherwise type `^[[A`). From a pipe: plain lines, so a script or a test drives the chat
the same way a person does.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import ModuleType

from triage.redact import redact_text

PROMPT = "triage> "
HISTORY_LENGTH = 1000
Completer = Callable[[str, str], list[str]]  # (the line before the word, the word) -> words


@contextmanager
def line_reader(complete: Completer) -> Iterator[Callable[[], str]]:
    """A function that returns the next line and raises EOFError at the end. At a terminal
    the history is loaded first and saved when the block ends, however it ends."""
    if not sys.stdin.isatty():
        yield _piped
        return
    editor = _readline()
    if editor is None:
        yield _prompted
        return
    history = history_path()
    _start(editor, complete, history)
    try:
        yield _prompted
    finally:
        if history is not None:
            save_history(editor, history)


def history_path() -> Path | None:
    """`$XDG_STATE_HOME/triage/chat_history`, else under `~/.local/state` as the XDG spec
    says (which ignores a relative $XDG_STATE_HOME); None without a home directory."""
    state = os.environ.get("XDG_STATE_HOME", "")
    if not Path(state).is_absolute():
        try:
            state = str(Path.home() / ".local" / "state")
        except RuntimeError:
            return None
    return Path(state) / "triage" / "chat_history"


def save_history(editor: ModuleType, history: Path) -> None:
    """Write the history, secrets masked (a token pasted into a question must not sit in
    a file); a file that cannot be written costs the history, never the session."""
    entries = [
        redact_text(editor.get_history_item(i) or "")
        for i in range(1, editor.get_current_history_length() + 1)
    ]
    editor.clear_history()
    for entry in entries:
        editor.add_history(entry)
    with suppress(OSError):
        history.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        history.touch(mode=0o600)  # only when it is created: what you typed is yours
        editor.write_history_file(str(history))


def _readline() -> ModuleType | None:
    """Not built on every platform (Windows has none), and imported only at a terminal."""
    try:
        import readline
    except ImportError:
        return None
    return readline


def _start(editor: ModuleType, complete: Completer, history: Path | None) -> None:
    editor.set_completer_delims(" \t\n")  # `/run` and `key=` are words of their own
    editor.set_completer(_completer(editor, complete))
    libedit = "libedit" in (editor.__doc__ or "")  # macOS's readline speaks another syntax
    editor.parse_and_bind("bind ^I rl_complete" if libedit else "tab: complete")
    editor.set_history_length(HISTORY_LENGTH)
    if history is not None:
        with suppress(OSError):
            editor.read_history_file(str(history))


def _completer(editor: ModuleType, complete: Completer) -> Callable[[str, int], str | None]:
    """readline's protocol: called with state 0, 1, ... until it returns None."""

    def candidate(word: str, state: int) -> str | None:
        options = complete(editor.get_line_buffer()[: editor.get_begidx()], word)
        return options[state] if state < len(options) else None

    return candidate


def _piped() -> str:
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line


def _prompted() -> str:
    try:
        return input(PROMPT)
    except EOFError:  # Ctrl-D: the shell's prompt goes on a line of its own
        print()
        raise
