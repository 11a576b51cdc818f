"""DeepSpeed's own words at run time (its launcher, runner, ZeRO and pipeline engines, its
elastic and inference checks; each message as its source formats it, or as a user pasted
it): each reads as its cause instead of a generic exception."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import analyze_files


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        (
            "RuntimeError: Using hostfile at /job/hostfile but host=node-02 was not reachable via"
            " ssh. If you are running with a single node please remove /job/hostfile or setup"
            " passwordless ssh.",
            "config.launcher_args",
        ),
        ("pdsh@node-01: node-02: ssh exited with exit code 255", "config.launcher_args"),
        ("RuntimeError: launcher 'pdsh' not installed.", "config.launcher_args"),
        (
            "AssertionError: Mismatch in local rank setting, args.local_rank=0 but"
            " env['LOCAL_RANK']=3.",
            "config.launcher_args",
        ),
        (
            "AssertionError: LOCAL_RANK (1) != OMPI_COMM_WORLD_LOCAL_RANK (0), not sure how to"
            " proceed as we're seeing conflicting local rank info.",
            "config.launcher_args",
        ),
        (
            "AssertionError: DeepSpeed requires the LOCAL_RANK environment variable, it is set by"
            " the deepspeed launcher, deepspeed.init_distributed, or the torch's launcher. If"
            " using a different launcher please ensure LOCAL_RANK is set prior to initializing"
            " deepspeed.",
            "config.env_missing",
        ),
        (
            "RuntimeError: Detected a disagreement on list length between rank0 and rank3: \n"
            " rank0: 112 \n rank3: 110",
            "hang.mismatched_collective",
        ),
        # hiyouga/LlamaFactory#4428: ZeRO-3's trace of the modules each rank ran (before 0.16)
        (
            "RuntimeError: disagreement between rank0 and rank6: rank0: [-4829058278667240489,"
            " 4394031851561860485], rank6: [-4829058278667240489, 4278486279158906243]",
            "hang.mismatched_collective",
        ),
        (
            "AssertionError: The parameter 447 has already been reduced.             Gradient"
            " computed twice for this partition.             Multiple gradient reduction is"
            " currently not supported",
            "config.ddp_reducer",
        ),
        (
            "RuntimeError: num_stages (3) must divide distributed world size (8)",
            "config.world_size_mismatch",
        ),
        ("ValueError: Invalid ep_size=16 for world_size=8", "config.world_size_mismatch"),
        (
            "AssertionError: checkpoint count 4 is different from saved mp_world_size 8",
            "config.world_size_mismatch",
        ),
        (
            "deepspeed.elasticity.config.ElasticityIncompatibleWorldSize: World size (12) is not"
            " valid with the current list of valid GPU counts: [1, 2, 4, 8, 16, 32]",
            "config.world_size_mismatch",
        ),
        # the launcher's report of the first worker that ended: a SIGABRT is a crash
        (
            "[2024-05-01 10:31:07,948] [ERROR] [launch.py:341:sigkill_handler]"
            " ['/usr/bin/python3', '-u', 'train.py', '--local_rank=3', '--deepspeed',"
            " '--deepspeed_config', 'ds_config.json'] exits with return code = -6",
            "hang.rank_exited",
        ),
    ],
    ids=[
        "ssh-unreachable",
        "pdsh-255",
        "pdsh-missing",
        "local-rank-arg",
        "local-rank-ompi",
        "local-rank-env",
        "zero-lists",
        "zero-trace-lists",
        "zero-reduced-twice",
        "pipe-stages",
        "ep-size",
        "mp-checkpoint",
        "elastic-world",
        "abort-exit",
    ],
)
def test_deepspeeds_words_name_their_cause(tmp_path: Path, line: str, cause: str) -> None:
    top = analyze_files(tmp_path, {"rank0.log": line + "\n"}).hypotheses[0]
    assert top.cause_id == cause, top.title


def test_zero_names_its_reducer_not_ddps(tmp_path: Path) -> None:
    line = (
        "AssertionError: The parameter model.language_model.layers.35.mlp.down_proj.weight has"
        " already been reduced.             Gradient computed twice for this partition."
    )
    top = analyze_files(tmp_path, {"rank0.log": line + "\n"}).hypotheses[0]
    assert top.title.startswith("ZeRO marked a parameter ready twice")


def test_pdsh_reporting_the_remote_commands_own_exit_is_no_ssh_failure(tmp_path: Path) -> None:
    """Exit code 255 is ssh's own; any other is the command it ran on that host."""
    line = "pdsh@node-01: node-02: ssh exited with exit code 1"
    causes = [h.cause_id for h in analyze_files(tmp_path, {"launch.log": line + "\n"}).hypotheses]
    assert "config.launcher_args" not in causes
