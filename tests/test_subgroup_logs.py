"""A group created lazily, on a path only some ranks take, read from the logs the job left.

The logs are a real 4-rank gloo job's (the fault matrix's lazy_group fault, rank 2 without
auxiliary labels; its checkout path replaced, so the source is not readable here): ranks
0, 1 and 3 time out in `dist.new_group`'s store wait (`DistStoreError: wait timeout`), rank
2 in the next all_reduce. The members waited for a rank that never called new_group.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import analyze_files

LOGS = Path(__file__).parent / "fixtures" / "lazy_group_logs"


def test_members_timed_out_in_new_group_name_the_rank_that_never_called_it(
    tmp_path: Path,
) -> None:
    files = {p.name: p.read_text() for p in LOGS.glob("rank*.log")}
    report = analyze_files(tmp_path, files)
    top = report.hypotheses[0]
    assert (top.cause_id, top.ranks) == ("hang.subgroup_mismatch", [2])
    assert top.location is not None and top.location.line == 24
    assert "never called it" in top.summary
    assert all(h.cause_id != "hang.mismatched_collective" for h in report.hypotheses)
    assert all(h.cause_id != "hang.rank_not_in_collective" for h in report.hypotheses)


def test_without_the_rank_elsewhere_it_is_no_subgroup_finding(tmp_path: Path) -> None:
    """Only members' timeouts in new_group: who never called it is not in the text."""
    files = {p.name: p.read_text() for p in LOGS.glob("rank*.log") if p.name != "rank2.log"}
    report = analyze_files(tmp_path, files)
    assert all(h.cause_id != "hang.subgroup_mismatch" for h in report.hypotheses)
