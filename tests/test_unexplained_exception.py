"""A text that shows an exception is never left without a hypothesis.

Reports often paste only a traceback's last line (`RuntimeError: ...`), and MPI-style
launchers prefix every line with `[1,3]<stderr>:`. The exception is read as a traceback
without frames; when no rule names its cause, a last-resort config.unknown says which kind
of failure it likely is, and gives way to any other rule's finding.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import analyze_files
from triage.readers.logscan import scan_file

UNREAD = "RuntimeError: expected scalar type Half but found Float"


def test_a_pasted_exception_line_is_a_traceback_without_frames(tmp_path: Path) -> None:
    log = tmp_path / "rank1.log"
    log.write_text(f"step 3 loss 2.31\n[rank1]:{UNREAD}\n")
    records = scan_file(log).tracebacks
    assert [(r.exception, r.message, r.rank, r.frames) for r in records] == [
        ("RuntimeError", UNREAD.split(": ", 1)[1], 1, [])
    ]


def test_an_exception_no_rule_reads_is_a_low_config_guess(tmp_path: Path) -> None:
    """Read alone, an exception does not say whether the job hung behind it: a setup error
    first, the rank that exited under its peers second."""
    report = analyze_files(tmp_path, {"rank1.log": f"[rank1]:{UNREAD}"})
    assert [(h.cause_id, h.rule_id) for h in report.hypotheses] == [
        ("config.unknown", "logs.unexplained_exception"),
        ("hang.rank_exited", "logs.rank_raised"),
    ]
    for hypothesis in report.hypotheses:
        assert hypothesis.confidence < 0.3 and hypothesis.ranks == [1]
    assert "scalar type Half" in report.hypotheses[0].title
    assert report.hypotheses[1].title.startswith("an exception ended rank 1:")


def test_the_guess_gives_way_to_any_other_finding(tmp_path: Path) -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    report = analyze_files(tmp_path, {"rank0.log": f"{UNREAD}\n{oom}"})
    assert report.hypotheses
    last_resorts = ("logs.unexplained_exception", "logs.rank_raised")
    assert all(h.rule_id not in last_resorts for h in report.hypotheses)
    assert report.hypotheses[0].cause_id.startswith("oom.")


def test_mpi_tagged_lines_name_their_rank(tmp_path: Path) -> None:
    text = (
        "[1,3]<stderr>:AssertError:check ack & check pt  cannot occur together with normal ops\n"
        "[1,3]<stderr>:zero size check point is not allowed\n"
    )
    report = analyze_files(tmp_path, {"job.log": text})
    assert report.hypotheses[0].rule_id == "logs.unexplained_exception"
    assert report.hypotheses[0].ranks == [3]
    assert "AssertError" in report.hypotheses[0].title


@pytest.mark.parametrize(
    "line",
    [
        "UserWarning: torch.cuda.amp.GradScaler is deprecated",
        "KeyboardInterrupt: ",
        "Error: see above",
        "[rank0]: the last Exception: was handled",
    ],
)
def test_warnings_stops_and_prose_are_no_exception(tmp_path: Path, line: str) -> None:
    log = tmp_path / "rank0.log"
    log.write_text(line + "\n")
    assert scan_file(log).tracebacks == []


CUT = """Traceback (most recent call last):
  File "/work/seg/main.py", line 541, in <module>
    model.train()
  File "/work/seg/trainer.py", line 187, in __train
    outputs = self.seg_net(*inputs)
  File "/opt/conda/lib/python3.7/site-packages/torch/nn/modules/module.py", line 889, in _call_impl
    result = self.forward(*input, **kwargs)
"""


def test_a_traceback_cut_before_its_exception_is_a_failure_without_a_name(tmp_path: Path) -> None:
    report = analyze_files(tmp_path, {"rank2.log": CUT})
    [top] = report.hypotheses
    assert (top.cause_id, top.confidence, top.ranks) == ("config.unknown", 0.08, [2])
    assert top.location is not None and (top.location.file, top.location.line) == (
        "/work/seg/trainer.py",
        187,
    )
    assert "cut before its exception line" in top.summary and "lines after" in top.fix
    # A guess this low names no symptom: the intake's next steps (every rank's log) stand.
    assert report.symptom == "unknown"
    assert any("every rank's log" in step for step in report.next_steps)


def test_an_exception_no_rule_reads_still_hands_over_to_its_playbook(tmp_path: Path) -> None:
    report = analyze_files(tmp_path, {"rank1.log": f"[rank1]:{UNREAD}"})
    assert report.symptom == "config"


@pytest.mark.parametrize(
    "line",
    [
        "2022-11-15 19:26:36,618\tERROR tune.py:773 -- Trials did not complete: [Trainer_0]",
        "FATAL: job step aborted",
    ],
)
def test_an_error_line_no_rule_reads_is_a_failure_without_a_name(tmp_path: Path, line: str) -> None:
    report = analyze_files(tmp_path, {"launcher.log": f"step 3 loss 2.31\n{line}\n"})
    [top] = report.hypotheses
    assert (top.cause_id, top.confidence) == ("config.unknown", 0.08)
    assert line.strip()[:60] in top.summary


@pytest.mark.parametrize("line", ["epoch 3: 0 errors", "INFO ERRORS_SEEN=0", "no error so far"])
def test_words_about_errors_are_no_error_line(tmp_path: Path, line: str) -> None:
    found = analyze_files(tmp_path, {"rank0.log": f"{line}\n"}).hypotheses
    # a logger's line may be where a log stopped; none is read as an error
    assert [h.rule_id for h in found if h.rule_id != "logs.log_stops"] == []


def test_an_exception_line_pytest_marked_is_an_exception(tmp_path: Path) -> None:
    """A test run's output pasted into a report marks the exception's lines with `E`
    (facebookresearch/fairscale#1173: an all-gather of a non-contiguous tensor)."""
    text = (
        "    work = group.allgather([tensor_list], [tensor])\n"
        "E       ValueError: Tensors must be contiguous\n"
    )
    log = tmp_path / "pytest.log"
    log.write_text(text)
    assert [(r.exception, r.message) for r in scan_file(log).tracebacks] == [
        ("ValueError", "Tensors must be contiguous")
    ]
