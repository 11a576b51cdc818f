"""`triage chat`: the on-call assistant, in a terminal.

It starts from the rules' report over the evidence given, then reads lines from stdin:
slash commands run tools and show playbooks whether or not a model is configured, and
free text goes to the model (with ANTHROPIC_API_KEY) with the report, the conversation so
far and the read-only tools. Evidence gathered by either is added to the report and the
rules decide again, so `/report` and `/save` always show the rules' current view. At a
terminal it edits lines, keeps a history and completes commands (`triage.chat_lines`);
from a pipe it reads plain lines, so a script or a test drives it as a person would.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from triage.chat_inputs import missing_inputs, opening_context, parse_params, tool_inputs
from triage.chat_lines import line_reader
from triage.engine import follow, job_targets, redecide
from triage.llm import prompt
from triage.llm.client import LlmError, MessagesClient
from triage.llm.config import LlmConfig, unavailable_reason
from triage.llm.loop import AUTO, account
from triage.llm.merge import add_runs
from triage.llm.toolbox import (
    ToolBox,
    describe,
    is_pid_param,
    job_pids,
    pid_values,
    with_cache_breakpoint,
)
from triage.models import LlmRun, Report, ToolStatus
from triage.playbooks import Playbook, load_playbooks, select_playbook, symptom_playbooks
from triage.printable import plain_text
from triage.redact import redact_text
from triage.redacted import redacted
from triage.registry import REGISTRY, Registry, ToolRun, is_path_param, path_values
from triage.render.html import render_html
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
                              inputs left out come from the session: the evidence and
                              pids it started from, and what earlier tools found
  /report                     the report as the rules see it now
  /playbook [NAME]            the playbooks, or one playbook's steps
  /save [PATH]                write the report and this transcript as markdown
  /help                       this list
  /quit                       leave (also Ctrl-D)
Anything else is a question for the model (needs ANTHROPIC_API_KEY). Tab completes the
commands, tool names and their inputs; arrow keys recall earlier lines."""
QUIT = ("quit", "exit", "q")


@dataclass
class Turn:
    """One entry of the transcript; `detail` is what a tool printed (its first lines)."""

    who: str
    text: str
    detail: str = ""

    def markdown(self) -> list[str]:
        if self.who != "tool":
            return [f"- **{self.who}:** " + self.text.replace("\n", "\n  ")]
        if not self.detail:
            return [f"- tool: `{self.text}`"]
        fence = "`" * max([3, *(len(run) + 1 for run in re.findall("`+", self.detail))])
        body = [f"  {line}" for line in self.detail.splitlines()]
        return [f"- tool: `{self.text}`", "", f"  {fence}text", *body, f"  {fence}"]


def transcript_markdown(turns: list[Turn]) -> str:
    """The conversation as the incident ticket shows it: each question and answer, each
    tool run with the lines it printed."""
    return "\n".join(["## Transcript", "", *(line for turn in turns for line in turn.markdown())])


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
        self.context = opening_context(report)
        self.evidence: list[str] = list(report.targets.get("paths") or [])
        self.toolbox = ToolBox(registry, config, scope=list(self.evidence), pids=job_pids(report))
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

    def answer(self, text: str, style: str | None = None) -> None:
        """Say something the transcript must keep: an answer, or why there is none."""
        self.say(text, style)
        self.transcript.append(Turn("triage", text))

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
        if command in QUIT:
            return False
        action = self.commands().get(command)
        if action is None:
            self.answer(f"unknown command /{command}; /help lists them", "yellow")
        else:
            action(rest.strip())
        return True

    def commands(self) -> dict[str, Callable[[str], None]]:
        """Each slash command, given the rest of its line."""
        return {
            "help": lambda _: self.say(HELP),
            "tools": lambda _: self.list_tools(),
            "run": self.run_tool,
            "report": lambda _: print_report(self.current(), self.console),
            "playbook": self.show_playbook,
            "save": self.save,
        }

    def complete(self, before: str, word: str) -> list[str]:
        """What Tab may make of `word`, given the words `before` it on the line."""
        return [option for option in self.options(before.split()) if option.startswith(word)]

    def options(self, words: list[str]) -> list[str]:
        """A command first; after /run a tool's name, then its inputs; after /playbook a
        playbook's name."""
        if not words:
            return [f"/{name} " for name in [*self.commands(), QUIT[0]]]
        if words == ["/playbook"]:
            return [f"{name} " for name in self.playbooks]
        if words == ["/run"]:
            return [f"{spec.name} " for spec in self.registry.all()]
        if words[0] != "/run":
            return []
        try:
            return [f"{name}=" for name in sorted(self.registry.get(words[1]).parameter_names())]
        except KeyError:  # no such tool: nothing to offer
            return []

    def list_tools(self) -> None:
        for spec in self.registry.all():
            acts = "" if spec.read_only else "  [acts on the job: never offered to the model]"
            params = ", ".join(sorted(spec.parameter_names()))
            self.say(f"{spec.name}({params}){acts}", "bold")
            self.say(f"    {spec.description.split('. ')[0]}")

    def run_tool(self, rest: str) -> None:
        """Run a tool with the inputs typed, the rest filled from the session."""
        name, _, raw = rest.partition(" ")
        if not name:
            self.answer("usage: /run NAME key=value ...  (see /tools)", "yellow")
            return
        try:
            typed = parse_params(raw)
            spec = self.registry.get(name)
        except (ValueError, KeyError) as exc:
            self.answer(f"/run: {exc.args[0] if exc.args else exc}", "yellow")
            return
        params = tool_inputs(spec, typed, self.context, self.evidence)
        missing = missing_inputs(spec, params)
        if missing is not None:
            self.answer(f"/run: {missing}", "yellow")
            return
        self.toolbox.widen(
            [p for k, v in params.items() if is_path_param(k) for p in path_values(v)],
            [p for k, v in params.items() if is_pid_param(k) for p in pid_values(v)],
        )
        run = self.registry.run(name, params)
        self.context.update(run.context)
        self.absorb(run)
        self.show_run(name, run)
        shown = bound_text(describe(run), self.config.result_chars)
        self.pending.append(prompt.evidence(f"tool {name}, run by the person on call", shown))

    def show_run(self, name: str, run: ToolRun) -> None:
        """The run's status, its first lines and what it could not see, on screen and in
        the transcript alike."""
        result = run.result
        line = f"{name}: {result.status.value}, {len(run.evidence)} evidence, {len(run.gaps)} gaps"
        line += f" ({result.error})" if result.error else ""
        self.say(line, "cyan")
        shown = result.output.splitlines()
        if result.status is not ToolStatus.error:  # a failed run's one gap is its error
            shown += [f"gap: {gap.source}: {gap.reason}" for gap in run.gaps]
        if len(shown) > SHOWN_LINES:
            shown = [*shown[:SHOWN_LINES], f"... {len(shown) - SHOWN_LINES} more lines (/report)"]
        for text in shown:
            self.say(f"  {text}", "dim")
        self.transcript.append(Turn("tool", line, "\n".join(shown)))

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
        """The report and the transcript for the incident ticket, one file per format,
        secrets masked (a ticket is read by many)."""
        path = Path(target or time.strftime("triage-chat-%Y%m%d-%H%M%S.md")).expanduser()
        self.write(path, self.markdown())
        transcript = redact_text(transcript_markdown(self.transcript))
        self.write(path.with_suffix(".html"), render_html(redacted(self.current()), transcript))

    def markdown(self) -> str:
        report = render_markdown(redacted(self.current())).rstrip()
        return f"{report}\n\n{redact_text(transcript_markdown(self.transcript))}\n"

    def write(self, path: Path, body: str) -> None:
        """Write one saved file; never over an existing one, which may be someone's notes."""
        try:
            with path.open("x", encoding="utf-8") as out:
                out.write(plain_text(body))
        except OSError as exc:
            self.say(f"/save: cannot write {path}: {exc.strerror or exc}", "yellow")
            return
        self.say(f"saved {path}", "green")

    def ask(self, question: str) -> None:
        """One model turn: it may call read-only tools before it answers."""
        if self.unavailable is not None:
            self.answer(
                f"No model ({self.unavailable}); use /tools, /run, /report, /playbook, /save."
            )
            return
        try:
            if self.client is None:
                from triage.llm.client import AnthropicClient

                self.client = AnthropicClient(self.config)
            self.turn(self.client, question)
        except LlmError as exc:
            self.answer(f"model unavailable: {exc}; the commands still work (/help)", "yellow")

    def turn(self, client: MessagesClient, question: str) -> None:
        mark = len(self.messages)
        self.toolbox.deadline_at = time.monotonic() + self.config.deadline_s
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
                    self.answer(f"token budget of {self.config.token_budget} spent", "yellow")
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
                    self.answer(reply.text())
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
    with line_reader(session.complete) as read:
        while True:
            try:
                line = read()
            except (EOFError, KeyboardInterrupt):
                break
            try:
                if not session.handle(line):
                    break
            except KeyboardInterrupt:
                session.say("(interrupted)", "yellow")
