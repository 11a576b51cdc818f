"""`triage chat`: the on-call assistant, in a terminal.

It starts from the rules' report over the evidence given, then reads lines from stdin:
slash commands run tools and show playbooks whether or not a model is configured, and
free text goes to the model (with ANTHROPIC_API_KEY) with the report, the conversation so
far and the read-only tools. Evidence gathered by either is added to the report and the
rules decide again, so `/report` and `/save` always show the rules' current view. It reads
plain lines, so a script or a test can drive it through a pipe as well as a person can.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from triage.engine import follow, job_targets, redecide
from triage.llm import prompt
from triage.llm.client import LlmError, MessagesClient
from triage.llm.config import LlmConfig, unavailable_reason
from triage.llm.loop import AUTO, account
from triage.llm.merge import add_runs
from triage.llm.toolbox import ToolBox, describe, is_path_param, with_cache_breakpoint
from triage.models import LlmRun, Report, ToolStatus
from triage.playbooks import Playbook, load_playbooks, select_playbook, symptom_playbooks
from triage.registry import REGISTRY, Registry, ToolRun
from triage.render.markdown import render_markdown
from triage.render.terminal import print_report
from triage.text import bound_text

Block = dict[str, Any]
NO_TOOLS: Block = {"type": "none"}
SHOWN_LINES = 12

HELP = """\
Commands:
  /tools                      the evidence tools and their inputs
  /run NAME key=value ...     run a tool (values are JSON or text; or one JSON object);
                              inputs left out come from the session, e.g. /run scan_logs
                              after /run collect_files paths='["logs/"]'
  /report                     the report as the rules see it now
  /playbook [NAME]            the playbooks, or one playbook's steps
  /save [PATH]                write the report and this transcript as markdown
  /help                       this list
  /quit                       leave (also Ctrl-D)
Anything else is a question for the model (needs ANTHROPIC_API_KEY)."""


@dataclass
class Turn:
    who: str
    text: str


class ChatSession:
    """One conversation: the report, the transcript, and the model's history."""

    def __init__(
        self,
        report: Report,
        playbook: Playbook,
        plugin_dirs: list[Path],
        console: Console,
        config: LlmConfig,
        registry: Registry = REGISTRY,
    ) -> None:
        self.report = report
        self.playbook = playbook
        self.plugin_dirs = plugin_dirs
        self.console = console
        self.config = config
        self.registry = registry
        self.playbooks = load_playbooks(plugin_dirs)
        self.context: dict[str, Any] = {k: v for k, v in report.targets.items() if v}
        self.toolbox = ToolBox(registry, config, scope=list(report.targets.get("paths") or []))
        self.transcript: list[Turn] = []
        self.messages: list[Block] = []
        self.pending: list[str] = []  # evidence the person gathered, for the model's next turn
        self.usage = LlmRun(model=config.model, outcome="chat")
        self.client: MessagesClient | None = None
        self.unavailable = unavailable_reason()

    def say(self, text: str, style: str | None = None) -> None:
        """Print text as it is: evidence may hold `[rank3]:` and must not read as markup,
        and long lines are left to the terminal to wrap, so they copy as one line."""
        self.console.print(text, style=style, markup=False, highlight=False, soft_wrap=True)

    def handle(self, line: str) -> bool:
        """Act on one input line; False when the person asked to leave."""
        line = line.strip()
        if not line:
            return True
        self.transcript.append(Turn("you", line))
        if not line.startswith("/"):
            self.ask(line)
            return True
        command, _, rest = line[1:].partition(" ")
        if command in ("quit", "exit", "q"):
            return False
        actions: dict[str, Callable[[], None]] = {
            "help": lambda: self.say(HELP),
            "tools": self.list_tools,
            "run": lambda: self.run_tool(rest),
            "report": lambda: print_report(self.current(), self.console),
            "playbook": lambda: self.show_playbook(rest.strip()),
            "save": lambda: self.save(rest.strip()),
        }
        action = actions.get(command)
        if action is None:
            self.say(f"unknown command /{command}; /help lists them", "yellow")
        else:
            action()
        return True

    def list_tools(self) -> None:
        for spec in self.registry.all():
            acts = "" if spec.read_only else "  [acts on the job: never offered to the model]"
            params = ", ".join(sorted(spec.parameter_names()))
            self.say(f"{spec.name}({params}){acts}", "bold")
            self.say(f"    {spec.description.split('. ')[0]}")

    def run_tool(self, rest: str) -> None:
        name, _, raw = rest.strip().partition(" ")
        if not name:
            self.say("usage: /run NAME key=value ...  (see /tools)", "yellow")
            return
        try:
            params = parse_params(raw)
            spec = self.registry.get(name)
        except (ValueError, KeyError) as exc:
            self.say(f"/run: {exc.args[0] if exc.args else exc}", "yellow")
            return
        known = spec.parameter_names()
        params = {k: v for k, v in self.context.items() if k in known} | params
        self.toolbox.widen([p for k, v in params.items() if is_path_param(k) for p in _paths(v)])
        run = self.registry.run(name, params)
        self.context.update(run.context)
        self.absorb(run)
        self.show_run(name, run)
        shown = bound_text(describe(run), self.config.result_chars)
        self.pending.append(prompt.evidence(f"tool {name}, run by the person on call", shown))

    def show_run(self, name: str, run: ToolRun) -> None:
        result = run.result
        line = f"{name}: {result.status.value}, {len(run.evidence)} evidence, {len(run.gaps)} gaps"
        self.say(line + (f" ({result.error})" if result.error else ""), "cyan")
        self.transcript.append(Turn("tool", line))
        shown = result.output.splitlines()
        for text in shown[:SHOWN_LINES]:
            self.say(f"  {text}", "dim")
        if len(shown) > SHOWN_LINES:
            self.say(f"  ... {len(shown) - SHOWN_LINES} more lines (/report)", "dim")

    def absorb(self, run: ToolRun) -> None:
        """New evidence into the report, and the rules decide again over all of it. A call
        that failed outright (a typo, a pid gone) was shown and stays out of the report."""
        if run.result.status is ToolStatus.error or not add_runs(self.report, [run]):
            return
        self.report = redecide(self.playbook, self.report, symptom_playbooks(self.playbooks))

    def show_playbook(self, name: str) -> None:
        if not name:
            for playbook in self.playbooks.values():
                self.say(f"{playbook.name:<14} {playbook.title}")
            return
        if name not in self.playbooks:
            self.say(f"no playbook {name!r}; /playbook lists them", "yellow")
            return
        self.say(prompt.playbook_text(self.playbooks[name]))

    def current(self) -> Report:
        """The report with what the model cost so far, when it was asked anything."""
        return self.report.model_copy(update={"llm": self.usage if self.usage.steps else None})

    def save(self, target: str) -> None:
        path = Path(target or time.strftime("triage-chat-%Y%m%d-%H%M%S.md")).expanduser()
        lines = [render_markdown(self.current()), "## Transcript", ""]
        for turn in self.transcript:
            if turn.who == "tool":
                lines.append(f"- tool: `{turn.text}`")
            else:
                quoted = turn.text.replace("\n", "\n  ")
                lines.append(f"- **{turn.who}:** {quoted}")
        try:
            with path.open("x", encoding="utf-8") as out:  # never overwrite a file
                out.write("\n".join(lines) + "\n")
        except OSError as exc:
            self.say(f"/save: cannot write {path}: {exc.strerror or exc}", "yellow")
            return
        self.say(f"saved {path}", "green")

    def ask(self, question: str) -> None:
        """One model turn: it may call read-only tools before it answers."""
        if self.unavailable is not None:
            self.say(f"No model ({self.unavailable}); use /tools, /run, /report, /playbook, /save.")
            return
        try:
            if self.client is None:
                from triage.llm.client import AnthropicClient

                self.client = AnthropicClient(self.config)
            self.turn(self.client, question)
        except LlmError as exc:
            self.say(f"model unavailable: {exc}; the commands still work (/help)", "yellow")

    def turn(self, client: MessagesClient, question: str) -> None:
        mark = len(self.messages)
        trailing = (
            self.messages[-1] if self.messages and self.messages[-1]["role"] == "user" else None
        )
        kept = len(trailing["content"]) if trailing else 0
        self.user([{"type": "text", "text": self.framed(question)}])
        system = prompt.system_blocks(prompt.CHAT_TASK, self.playbook_for_model())
        tools = with_cache_breakpoint(self.toolbox.definitions())
        try:
            for step in range(1, self.config.max_steps + 1):
                if self.usage.total_tokens >= self.config.token_budget:
                    self.say(f"token budget of {self.config.token_budget} spent", "yellow")
                    return
                reply = client.create(
                    system=system,
                    tools=tools,
                    messages=self.messages,
                    tool_choice=NO_TOOLS if step == self.config.max_steps else AUTO,
                    max_tokens=self.config.max_output_tokens,
                )
                account(self.usage, reply)
                self.messages.append({"role": "assistant", "content": reply.content})
                if reply.text():
                    self.say(reply.text())
                    self.transcript.append(Turn("triage", reply.text()))
                if not reply.tool_uses():
                    break
                self.user([self.call(block) for block in reply.tool_uses()])
        except BaseException:  # an API error or Ctrl-C: the question can be asked again
            del self.messages[mark:]
            if trailing is not None:
                del trailing["content"][kept:]
            raise
        self.pending = []

    def call(self, block: Block) -> Block:
        result, run = self.toolbox.execute(block)
        self.usage.tool_calls = list(self.toolbox.calls)
        if run is None:
            self.say(f"{block.get('name')}: refused ({result['content']})", "yellow")
            self.transcript.append(Turn("tool", f"{block.get('name')}: refused"))
        else:
            self.context.update(run.context)
            self.absorb(run)
            self.show_run(run.result.tool, run)
        return result

    def framed(self, question: str) -> str:
        """The question, after the report on the first turn and what the person ran since."""
        view = prompt.report_view(self.report, self.config.report_chars)
        parts = [] if self.messages else [prompt.evidence("rules report", view)]
        return "\n\n".join([*parts, *self.pending, question])

    def user(self, content: list[Block]) -> None:
        """Append to the history; consecutive user content stays one message."""
        if self.messages and self.messages[-1]["role"] == "user":
            self.messages[-1]["content"] += content
        else:
            self.messages.append({"role": "user", "content": content})

    def playbook_for_model(self) -> Playbook:
        return self.playbooks.get(self.report.playbook, self.playbook)


def parse_params(raw: str) -> dict[str, Any]:
    """`key=value ...` or one JSON object, as `tools run` takes them. A value is JSON when
    it reads as JSON (`paths=["a", "b"]`, spaces and all), else text up to the next space;
    single quotes hold either."""
    raw = raw.strip()
    if raw.startswith("{"):
        try:
            whole = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"inputs are not valid JSON: {exc}") from exc
        if not isinstance(whole, dict):
            raise ValueError("inputs must be a JSON object")
        return whole
    params: dict[str, Any] = {}
    pos = 0
    while pos < len(raw):
        key = _KEY.match(raw, pos)
        if key is None:
            raise ValueError(f"tool inputs are key=value, got {raw[pos:].split()[0]!r}")
        params[key[1]], pos = _value(raw, key.end())
        pos = len(raw) - len(raw[pos:].lstrip())
    return params


_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=")
_JSON = json.JSONDecoder()


def _value(raw: str, pos: int) -> tuple[Any, int]:
    """The value starting at `pos`, and where it ends."""
    if raw.startswith("'", pos):
        end = raw.find("'", pos + 1)
        if end < 0:
            raise ValueError("a quoted value has no closing quote")
        return _json_or_text(raw[pos + 1 : end]), end + 1
    try:
        value, end = _JSON.raw_decode(raw, pos)
    except json.JSONDecodeError:
        end = pos
    if end > pos and (end == len(raw) or raw[end].isspace()):
        return value, end
    token = raw[pos:].split(maxsplit=1)[0] if raw[pos:].strip() else ""
    return token, pos + len(token)


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _paths(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def start(evidence: list[str], pids: list[int], plugin_dirs: list[Path]) -> tuple[Report, Playbook]:
    """The rules' report to start from: over the evidence given, or live ranks' stacks
    when only pids are given (a live job is a hung one), or empty."""
    symptom = "hang" if pids and not evidence else None
    chosen, by_symptom = select_playbook(symptom, plugin_dirs)
    if not evidence and not pids:
        return Report(symptom="unknown", playbook=chosen.name, targets=job_targets()), chosen
    return follow(chosen, job_targets(evidence, pids), by_symptom=by_symptom), chosen


def run_chat(evidence: list[str], pids: list[int], model: str, plugin_dirs: list[Path]) -> None:
    console = Console(width=min(Console().width, 120))
    report, chosen = start(evidence, pids, plugin_dirs)
    session = ChatSession(report, chosen, plugin_dirs, console, LlmConfig(model=model))
    print_report(report, console)
    if not report.evidence:
        session.say("No evidence yet: start with /run collect_files paths='[\"DIR\"]'.")
    if session.unavailable is None:
        session.say(f"Ask about the report ({model}), or /help for the commands.", "bold")
    else:
        session.say(f"No model ({session.unavailable}): /help lists the commands.", "bold")
    interactive = sys.stdin.isatty()
    while True:
        try:
            line = input("triage> ") if interactive else sys.stdin.readline()
        except (EOFError, KeyboardInterrupt):
            break
        if not interactive and not line:
            break
        try:
            if not session.handle(line):
                break
        except KeyboardInterrupt:
            session.say("(interrupted)", "yellow")
