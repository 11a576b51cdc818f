"""What a Ray actor prints reaches the driver under Ray's prefix on every line (`(WorkerDict
pid=7422) Traceback ...`): the prefix comes off before the line is read, so a worker's
traceback in a verl, OpenRLHF or vLLM-on-Ray log is a traceback, with its user frame."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import REPO, analyze_cli, analyze_files

CPU = REPO / "tests" / "fixtures" / "cpu"


def test_an_actors_traceback_under_rays_prefix_is_read() -> None:
    top = analyze_cli(CPU / "ray_actor_traceback.log")["hypotheses"][0]
    assert top["cause_id"] == "config.world_size_mismatch"
    assert (top["location"]["file"], top["location"]["line"]) == (
        "/tmp/s36/rayrec/ray_actor_traceback.py",
        24,
    )


def test_a_paste_that_lost_the_colour_escapes_and_the_repeat_counts_reads_the_same(
    tmp_path: Path,
) -> None:
    """Copied out of a web page, the colour codes lose their escape character; Ray's
    deduplication appends `[repeated 7x across cluster]`."""
    lines = (CPU / "ray_actor_traceback.log").read_text().replace("\x1b", "").splitlines()
    text = "\n".join(
        line + " [repeated 7x across cluster]" if "ValueError" in line else line for line in lines
    )
    top = analyze_files(tmp_path, {"driver.log": text + "\n"}).hypotheses[0]
    assert top.cause_id == "config.world_size_mismatch"
    assert top.location is not None and top.location.line == 24
