"""A launcher's own word that a worker exited, recorded from real launches: mp.spawn's
ProcessExitedException, subprocess's CalledProcessError for the launched interpreter (as
accelerate's and the old torch.distributed.launch's launchers raise it) and torchrun's
failure report. The worker's reason is elsewhere, so the reading is a lost rank whose own
output holds the answer, not the launcher's exception read as a configuration error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import analyze_files, requires_torch
from triage.scenarios import free_port

SILENT_EXIT = "import sys\nsys.exit(3)\n"

SEGFAULT = "import ctypes\nctypes.string_at(0)\n"

#: terminated from outside the launcher (a person, a memory watchdog): the launcher's
#: exception reports the first worker that ended, so this is no cleanup of its own
TERMINATED = "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n"


def launched(tmp_path: Path, launcher: str, worker: str) -> str:
    """What the launcher printed when its worker ended as `worker` makes it end."""
    child = tmp_path / "worker.py"
    child.write_text(worker)
    parent = tmp_path / "launch.py"
    parent.write_text(launcher.format(child=str(child)))
    done = subprocess.run(
        [sys.executable, str(parent)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=dict(os.environ, OMP_NUM_THREADS="1", MASTER_PORT=str(free_port())),
    )
    assert done.returncode != 0, done.stdout + done.stderr
    return done.stdout + done.stderr


SUBPROCESS_LAUNCHER = """\
import subprocess, sys
subprocess.run([sys.executable, {child!r}], check=True)
"""


@pytest.mark.parametrize(
    ("worker", "said"),
    [
        (SILENT_EXIT, "exit code 3"),
        (SEGFAULT, "SIGSEGV"),
        (TERMINATED, "SIGTERM"),
    ],
)
def test_the_interpreter_a_launcher_ran_failed_is_a_lost_rank(
    tmp_path: Path, worker: str, said: str
) -> None:
    output = launched(tmp_path, SUBPROCESS_LAUNCHER, worker)
    assert "subprocess.CalledProcessError" in output
    top = analyze_files(tmp_path, {"launch.log": output}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("hang.rank_exited", 0.2)
    assert said in top.summary


def test_another_commands_failure_is_not_a_lost_rank(tmp_path: Path) -> None:
    """`git` or a shell tool that a script runs is not a worker of the job."""
    output = launched(
        tmp_path, "import subprocess\nsubprocess.run(['false', {child!r}], check=True)\n", ""
    )
    assert "returned non-zero exit status 1" in output
    causes = [h.cause_id for h in analyze_files(tmp_path, {"launch.log": output}).hypotheses]
    assert "hang.rank_exited" not in causes[:1]


SPAWN_LAUNCHER = """\
import runpy
import torch.multiprocessing as mp


def worker(index):
    if index == 1:
        runpy.run_path({child!r})


if __name__ == "__main__":
    mp.spawn(worker, nprocs=2)
"""


@requires_torch
def test_a_spawned_process_that_exited_is_a_lost_rank(tmp_path: Path) -> None:
    output = launched(tmp_path, SPAWN_LAUNCHER, SILENT_EXIT)
    assert "process 1 terminated with exit code 3" in output
    top = analyze_files(tmp_path, {"spawn.log": output}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("hang.rank_exited", 0.2)
    assert "process 1 terminated with exit code 3" in top.summary


def test_torchruns_report_without_its_table_is_a_lost_rank(tmp_path: Path) -> None:
    """The report's header alone (its per-rank table cut from the paste)."""
    text = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n" + "=" * 60
    text += "\ntrain.py FAILED\n"
    top = analyze_files(tmp_path, {"torchrun.log": text}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("hang.rank_exited", 0.2)


def test_torchruns_report_beside_the_workers_exception_reads_the_exception(
    tmp_path: Path,
) -> None:
    text = (
        'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n'
        "    main()\nValueError: bad config key 'lr'\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\ntrain.py FAILED\n"
    )
    top, *rest = analyze_files(tmp_path, {"torchrun.log": text}).hypotheses
    assert top.cause_id == "config.unknown" and "bad config key" in top.summary
    assert "logs.rank_crashed" not in [h.rule_id for h in rest]


@pytest.mark.parametrize(
    "line",
    [
        # a Ray TorchTrainer crash's dmesg, as a public write-up quotes it
        "NVRM: Xid (PCI:0000:2a:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0):"
        " Out Of Range Address",
        "NVRM: Xid (PCI:0000:32:00): 31, pid=11572, name=glm5-hyper-ppn-, channel 0x00000002,"
        " intr 00000000. MMU Fault: ENGINE GRAPHICS GPC0 GPCCLIENT_T1_0 faulted @ 0x33_8404d000.",
    ],
)
def test_the_drivers_record_of_a_kernel_fault_is_a_crash_not_a_lost_gpu(
    tmp_path: Path, line: str
) -> None:
    top = analyze_files(tmp_path, {"dmesg.log": line + "\n"}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("hang.rank_exited", 0.2)
    assert "CUDA_LAUNCH_BLOCKING=1" in top.fix and "GPU" not in top.title


def test_an_uncorrectable_nvlink_error_is_the_hardware(tmp_path: Path) -> None:
    """CUDA's cudaErrorNvlinkUncorrectable (its runtime's own text)."""
    text = "RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution\n"
    top = analyze_files(tmp_path, {"rank3.log": text}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("hang.rank_exited", 0.45)
    assert "stopped answering" in top.title


def test_the_old_launchers_teardown_without_its_prefix_is_a_worker_gone(tmp_path: Path) -> None:
    """torch 1.8's torch.distributed.launch printed a bare `Killing subprocess N` for each
    worker after one died (facebookresearch/swav#61): with no traceback, a signal took it."""
    text = "Killing subprocess 1085\nKilling subprocess 1086\n"
    top = analyze_files(tmp_path, {"launch.log": text}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("oom.host", 0.3)
