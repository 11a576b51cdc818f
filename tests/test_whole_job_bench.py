"""The whole-job benchmark's smoke test (`python bench/whole_job.py`), scored by its own code:
64 ranks over 8 nodes made from the real recorded collection, no timing asserted.

The verdict must name the planted culprit and its node, and the terminal report must fit
one screen with the nodes' names compressed; the 4,096-rank figures are the benchmark's.
"""

from __future__ import annotations

from bench.whole_job import SCREEN_LINES, job_of, measure, verdict


def test_64_ranks_on_8_nodes_name_the_culprit_and_its_node_on_one_screen() -> None:
    job = job_of(nodes=8, ranks_per_node=8, culprit_node=5)
    run = measure(job, repeat=1)
    text, right = verdict(job, run.report)
    assert right, text
    assert run.report.verdict is not None and run.report.verdict.ranks == [34]
    assert len(run.screen) <= SCREEN_LINES, "\n".join(run.screen)
    table = [line for line in run.screen if "│" in line and not line.startswith("│")]
    assert "node005" in table[0] and "node[001-008]" in table[1]  # the culprit's group first
