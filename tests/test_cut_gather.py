"""A traceback cut off before its exception line inside a gather: a weak collective_peak,
only when nothing else in the text names the failure."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import analyze_files

CUT = """\
Traceback (most recent call last):
  File "/home/u/train.py", line 88, in <module>
    main()
  File "/home/u/train.py", line 80, in main
    out = gather_losses(losses)
  File "/home/u/metrics.py", line 34, in gather_losses
    return torch.distributed.all_gather_into_tensor(buf, local)
"""


def test_a_cut_traceback_in_a_gather_is_a_weak_collective_peak(tmp_path: Path) -> None:
    top = analyze_files(tmp_path, {"rank0.log": CUT}).hypotheses[0]
    assert (top.cause_id, top.rule_id, top.confidence) == (
        "oom.collective_peak",
        "logs.cut_gather",
        0.15,
    )
    assert top.location is not None and top.location.line == 34


def test_a_traceback_with_its_exception_is_read_by_its_exception(tmp_path: Path) -> None:
    text = CUT + "ValueError: buffer has the wrong size\n"
    report = analyze_files(tmp_path, {"rank0.log": text})
    assert "logs.cut_gather" not in [h.rule_id for h in report.hypotheses]


def test_a_cut_traceback_elsewhere_is_no_gather(tmp_path: Path) -> None:
    text = CUT.replace("gather_losses", "compute_losses").replace(
        "all_gather_into_tensor", "all_reduce"
    )
    report = analyze_files(tmp_path, {"rank0.log": text})
    assert "logs.cut_gather" not in [h.rule_id for h in report.hypotheses]
