"""`triage run`: debug settings, a crashing and a hanging torchrun job, the probe's signal.

The jobs are real: torchrun with 2 gloo ranks. Every process a test starts carries a
token in its environment, and teardown kills whatever still carries it, whatever failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import requires_torch, triage_cli
from triage.job import debug_env, dumps, probe_protocol, probe_signal, run
from triage.readers import processes
from triage.readers.safe_pickle import load_untrusted
from triage.scenarios import free_port, main_thread, pid_alive, py_spy_dump
from triage.scenarios.failures import FAILURES

TOKEN_ENV = "TRIAGE_TEST_RUN_TOKEN"

#: Rank 0 enters one more all_reduce than rank 1, which waits in a barrier: a hang.
HANG_JOB = """\
import triage.probe  # the documented hook: dump the Flight Recorder on SIGUSR1
from datetime import timedelta
import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=600))
rank = dist.get_rank()
x = torch.ones(4)
for _ in range(3):
    dist.all_reduce(x)
if rank == 0:
    dist.all_reduce(x)  # the extra collective
else:
    dist.barrier()
"""

#: Reports the variables triage run sets, then waits for Ctrl-C like a training loop.
ENV_JOB = """\
import json, os, signal, sys, time
names = ["NCCL_DEBUG", "NCCL_DEBUG_FILE", "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE",
         "TRIAGE_FR_DIR", "TORCH_DISTRIBUTED_DEBUG"]
print("ENV " + json.dumps({n: os.environ.get(n) for n in names}), flush=True)
if sys.argv[1:] == ["wait"]:
    def stop(signum, frame):
        print(f"job got signal {signum}", flush=True)
        sys.exit(42)
    signal.signal(signal.SIGINT, stop)
    print("ready", flush=True)
    while True:
        time.sleep(0.05)
"""


def kill_tagged(token: str) -> None:
    """SIGKILL every process whose environment carries the token, then reap them."""
    tagged = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get(TOKEN_ENV) == token:
                tagged.append(proc)
    for proc in tagged:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(tagged, timeout=30)


@pytest.fixture
def env() -> Iterator[dict[str, str]]:
    token = uuid.uuid4().hex
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "TORCH_", "PET_"))}
    base.pop("TRIAGE_FR_DIR", None)
    yield dict(base, OMP_NUM_THREADS="1", **{TOKEN_ENV: token})
    kill_tagged(token)


def triage_run(
    env: dict[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        triage_cli("run", *args),
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def torchrun(script: Path | str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        str(script),
    ]


def read_report(out: Path) -> dict[str, Any]:
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    return report


# -- settings ------------------------------------------------------------------------------


def test_user_values_win_over_every_alias(tmp_path: Path) -> None:
    base = {"NCCL_DEBUG": "WARN", "TORCH_NCCL_TRACE_BUFFER_SIZE": "0", "PATH": "/bin"}
    job = debug_env.job_environment(base, tmp_path, debug_detail=False)
    assert job.env["NCCL_DEBUG"] == "WARN"
    # the user turned the recorder off under its old name: the new name must not turn it on
    assert "TORCH_FR_BUFFER_SIZE" not in job.env
    assert job.env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "0"
    assert job.kept == {
        "NCCL_DEBUG": ("WARN", "INFO"),
        "TORCH_NCCL_TRACE_BUFFER_SIZE": ("0", debug_env.FR_BUFFER_ENTRIES),
    }
    assert job.env["NCCL_DEBUG_FILE"] == str(tmp_path / "nccl" / "nccl.%h.%p")
    assert job.env["TORCH_FR_DUMP_TEMP_FILE"] == str(tmp_path / "fr" / "nccl_trace_rank_")
    assert job.env["TRIAGE_FR_DIR"] == str(tmp_path / "fr")
    assert "TORCH_DISTRIBUTED_DEBUG" not in job.env
    detail = debug_env.job_environment({}, tmp_path, debug_detail=True)
    assert detail.env["TORCH_DISTRIBUTED_DEBUG"] == "DETAIL"


def test_buffer_size_name_follows_the_torch_version(tmp_path: Path) -> None:
    def names(version: tuple[int, int] | None) -> set[str]:
        chosen = debug_env.settings(tmp_path, False, version)
        buffer = next(s for s in chosen if "TORCH_FR_BUFFER_SIZE" in s.names)
        return set(buffer.only or buffer.names)

    assert names((2, 15)) == {"TORCH_FR_BUFFER_SIZE"}  # no deprecation warning per rank
    assert names((2, 6)) == {"TORCH_NCCL_TRACE_BUFFER_SIZE"}
    assert names(None) == {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"}


def test_output_folder_must_be_new_or_empty(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "notes.txt").write_text("mine")
    with pytest.raises(debug_env.RunError, match="not an empty folder"):
        debug_env.output_dir(tmp_path / "old")
    out = debug_env.output_dir(tmp_path / "new")
    assert sorted(p.name for p in out.iterdir()) == ["fr", "nccl"]


def test_job_sees_the_settings_and_the_users_own_values(
    env: dict[str, str], tmp_path: Path
) -> None:
    script = tmp_path / "env_job.py"
    script.write_text(ENV_JOB)
    out = tmp_path / "run"
    done = triage_run(
        dict(env, NCCL_DEBUG="WARN"), "--out", str(out), "--", sys.executable, str(script)
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.split("ENV ", 1)[1].splitlines()[0])
    assert seen["NCCL_DEBUG"] == "WARN"
    assert seen["NCCL_DEBUG_FILE"] == str(out / "nccl" / "nccl.%h.%p")
    assert seen["TRIAGE_FR_DIR"] == str(out / "fr")
    assert seen["TORCH_DISTRIBUTED_DEBUG"] is None
    assert "kept your NCCL_DEBUG='WARN'" in done.stderr
    assert "ENV {" in (out / "launcher.log").read_text()  # tee'd to the log as well
    assert not (out / "report.json").exists()  # success: nothing to triage


def test_ctrl_c_goes_to_the_job(env: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "env_job.py"
    script.write_text(ENV_JOB)
    out = tmp_path / "run"
    proc = subprocess.Popen(
        triage_cli("run", "--out", str(out), "--", sys.executable, str(script), "wait"),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while "ready" not in _text(out / "launcher.log"):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 42, stderr
    assert f"job got signal {int(signal.SIGINT)}" in _text(out / "launcher.log")
    assert "interrupted" in stderr


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@pytest.mark.parametrize(
    ("argv", "launcher"),
    [
        (
            ["/venv/bin/python", "-m", "torch.distributed.run", "--nproc-per-node", "2", "t.py"],
            True,
        ),
        (["/usr/bin/python3", "/venv/bin/torchrun", "t.py"], True),
        (["python", "-m", "deepspeed.launcher.launch", "--world_info=x", "t.py"], True),
        (["python", "-u", "train.py", "--local_rank=0", "--deepspeed", "ds.json"], False),
        (["python", "-m", "trainer.main"], False),
        (["python"], False),
    ],
)
def test_launchers_are_told_from_ranks(argv: list[str], launcher: bool) -> None:
    assert processes.is_launcher(argv) is launcher


# -- the probe's signal --------------------------------------------------------------------


def test_signal_goes_only_to_processes_with_the_probe(env: dict[str, str], tmp_path: Path) -> None:
    fr = tmp_path / "fr"
    env = dict(env, TRIAGE_FR_DIR=str(fr), TRIAGE_DUMP_DIR=str(tmp_path / "probe"))
    sleeper = "import time; print('ready', flush=True); time.sleep(120)"
    probed_code = (
        "import triage.probe as p, time;"
        " print('ready', p.DIR_ENV, p.DUMP_DIR_ENV, p.DEFAULT_PREFIX, flush=True); time.sleep(120)"
    )
    plain = subprocess.Popen(
        [sys.executable, "-c", sleeper], env=env, stdout=subprocess.PIPE, text=True
    )
    probed = subprocess.Popen(
        [sys.executable, "-c", probed_code], env=env, stdout=subprocess.PIPE, text=True
    )
    assert plain.stdout is not None and probed.stdout is not None
    assert plain.stdout.readline().split() == ["ready"]
    # the two sides of the protocol agree (the sender never imports the probe)
    assert probed.stdout.readline().split() == [
        "ready",
        probe_protocol.FR_DIR_ENV,
        probe_protocol.DUMP_DIR_ENV,
        debug_env.FR_PREFIX,
    ]
    asked = probe_signal.request_snapshots([plain.pid, probed.pid], wait_s=5)
    assert plain.poll() is None and probed.poll() is None
    assert asked.sent == [] and asked.unprobed == [plain.pid]
    # no torch in the probed process: nothing to dump, so it is not signalled, and it says why
    assert [g.source for g in asked.probe_gaps()] == [f"pid:{probed.pid}"]
    assert "torch is not loaded" in asked.probe_gaps()[0].reason
    assert not fr.exists()  # the probe writes nothing until it is signalled


def test_a_signal_the_job_handles_itself_is_never_sent(env: dict[str, str], tmp_path: Path) -> None:
    """SLURM requeue handlers live on SIGUSR1: the probe leaves it to them."""
    before = (
        "import signal; signal.signal(signal.SIGUSR1, lambda *a: print('requeue!'));"
        " import triage.probe"
    )
    refused = subprocess.run(
        [sys.executable, "-c", before], env=env, capture_output=True, text=True, timeout=60
    )
    assert f"not installed: signal {int(signal.SIGUSR1)} already has a handler" in refused.stderr
    after = (
        "import triage.probe, signal, time;"
        " signal.signal(signal.SIGUSR1, lambda *a: print('requeue!', flush=True));"
        " print('ready', flush=True); time.sleep(120)"
    )
    taken = subprocess.Popen(
        [sys.executable, "-c", after], env=env, stdout=subprocess.PIPE, text=True
    )
    assert taken.stdout is not None and taken.stdout.readline() == "ready\n"
    deadline = time.monotonic() + 30
    while probe_signal.probe_signal(taken.pid) is not None:  # renamed within a second
        assert time.monotonic() < deadline
        time.sleep(0.05)
    asked = probe_signal.request_snapshots([taken.pid], wait_s=5)
    assert asked.sent == [] and "runs no triage.probe thread" in asked.gaps[0].reason
    taken.kill()
    assert "requeue!" not in taken.communicate()[0]


def test_nccl_dump_pipes_are_written_only_when_read(tmp_path: Path) -> None:
    listening, gone = tmp_path / ".nccl_pipe_rank_0.pipe", tmp_path / ".nccl_pipe_rank_1.pipe"
    os.mkfifo(listening)
    os.mkfifo(gone)
    reader = os.open(listening, os.O_RDONLY | os.O_NONBLOCK)  # as ProcessGroupNCCL holds it
    try:
        assert dumps.trigger_nccl_pipes(tmp_path) == 1  # and no block on the other one
        assert os.read(reader, 8) == b"1"
    finally:
        os.close(reader)


def test_dumps_written_elsewhere_by_the_users_settings_join(tmp_path: Path) -> None:
    out, theirs = tmp_path / "run", tmp_path / "theirs"
    theirs.mkdir()
    old, fresh = theirs / "trace_0", theirs / "trace_1"
    old.write_bytes(b"x")
    os.utime(old, (1_000_000, 1_000_000))
    fresh.write_bytes(b"x")
    env = {
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(theirs / "trace_"),
        "NCCL_DEBUG_FILE": str(out / "n.%h"),
    }
    assert dumps.outside_files(env, out, since=time.time() - 60) == [str(fresh)]


# -- real jobs -------------------------------------------------------------------------------


@pytest.mark.scenario
@requires_torch
def test_crash_exit_code_and_culprit(env: dict[str, str], tmp_path: Path) -> None:
    script = FAILURES["peer_crash"].script  # rank 1 raises; rank 0 loses its peer
    for attempt in range(3):
        out = tmp_path / f"run{attempt}"
        done = triage_run(env, "--out", str(out), "--json", "--", *torchrun(script))
        assert done.returncode == 1, done.stderr[-3000:]
        # Under load torchrun may stop rank 1 before its traceback reaches any log (the
        # recorder of these fixtures retries for the same reason): that run proves nothing.
        if "ValueError: corrupt sample" in (out / "launcher.log").read_text():
            break
    else:
        pytest.skip("rank 1's error never reached the logs in three runs")
    report = json.loads(done.stdout)  # the report alone; the job's output went to stderr
    assert report == read_report(out)
    summaries = [e["summary"] for e in report["evidence"]]
    assert report["hypotheses"], f"no hypothesis; evidence: {summaries}; gaps: {report['gaps']}"
    top = report["hypotheses"][0]
    assert top["ranks"] == [1], top
    assert top["location"]["line"] == FAILURES["peer_crash"].fault_line()
    assert report["targets"]["exit_code"] == 1 and report["targets"]["hung"] is False
    assert (out / "report.md").read_text().startswith("# triage")
    page = (out / "report.html").read_text()
    assert page.lower().startswith("<!doctype html>") and top["cause_id"] in page


def _last_op(dump_path: Path) -> str:
    dump = load_untrusted(dump_path)
    return str(dump["entries"][-1]["profiling_name"])


@pytest.mark.scenario
@requires_torch
def test_hang_is_reported_with_probe_dumps_and_the_job_left_running(
    env: dict[str, str], tmp_path: Path
) -> None:
    script = tmp_path / "hang_job.py"
    script.write_text(HANG_JOB)
    out = tmp_path / "run"
    done = triage_run(env, "--out", str(out), "--hang-after", "3", "--", *torchrun(script))
    assert done.returncode == run.HANG_EXIT_CODE, done.stderr[-3000:]
    report = read_report(out)
    top = report["hypotheses"][0]
    assert (top["cause_id"], top["ranks"]) == ("hang.mismatched_collective", [0])
    assert (
        top["location"]["line"]
        == HANG_JOB.splitlines().index("    dist.all_reduce(x)  # the extra collective") + 1
    )
    # each rank dumped its own recorder from inside the hung collective
    assert _last_op(out / "fr" / "nccl_trace_rank_0") == "gloo:all_reduce"
    assert _last_op(out / "fr" / "nccl_trace_rank_1") == "gloo:barrier"
    pids = report["targets"]["pids"]
    assert len(pids) == 2
    for pid in pids:  # still alive, and still blocked where they were
        assert pid_alive(pid)
        main = main_thread(json.loads(py_spy_dump(pid)), pid)
        assert main is not None and main["frames"][0]["name"] in {"all_reduce", "barrier"}
    assert pid_alive(report["targets"]["launcher_pid"])
    assert "still running" in done.stderr


@pytest.mark.scenario
@requires_torch
def test_kill_on_hang_without_probe_kills_the_tree_and_names_the_gap(
    env: dict[str, str], tmp_path: Path
) -> None:
    script = tmp_path / "hang_job.py"
    script.write_text(HANG_JOB.replace("import triage.probe", "import os"))
    out = tmp_path / "run"
    done = triage_run(
        env, "--out", str(out), "--hang-after", "3", "--kill-on-hang", "--", *torchrun(script)
    )
    assert done.returncode == run.HANG_EXIT_CODE, done.stderr[-3000:]
    report = read_report(out)
    assert report["hypotheses"][0]["cause_id"] == "hang.mismatched_collective"
    assert any("triage.probe" in gap["reason"] for gap in report["gaps"])
    assert not [p for p in (out / "fr").iterdir() if not p.name.startswith(".")]
    family = [report["targets"]["launcher_pid"], *report["targets"]["pids"]]
    assert not [pid for pid in family if pid_alive(pid)]
