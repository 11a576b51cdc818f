"""config.launcher_args from logs, as a last resort: a failure inside nn.DataParallel."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._signals import ranks_of, tracebacks

#: nn.DataParallel's own modules: its forward scatters the batch, replicates the module on
#: every visible GPU and runs the replicas in threads.
_DATA_PARALLEL = re.compile(
    r"(^|/)torch/nn/parallel/(?:data_parallel|parallel_apply|replicate|scatter_gather|comm|_functions)\.py$"
)


@rule("logs.data_parallel", "config.launcher_args", last_resort=True)
def data_parallel(evidence: EvidenceSet) -> Iterator[Finding]:
    """A traceback runs through nn.DataParallel, and no rule reads its failure.

    What it detects:
    A traceback with frames in torch/nn/parallel/data_parallel.py (or its parallel_apply,
    replicate, scatter_gather helpers), with or without its exception line.

    Why it happens:
    One process is driving several GPUs: a script started with plain `python` on a machine
    with several visible GPUs, which the Hugging Face Trainer (and other trainers) then wrap
    in nn.DataParallel instead of running one process per GPU. DataParallel replicates the
    module on every GPU in each step; modules that cannot be replicated (8-bit and 4-bit
    quantized layers, models split with device_map, parameters created outside __init__)
    fail there with shape, device or dtype errors that have nothing to do with the model.

    Evidence:
    The traceback and its DataParallel frame.

    Fix:
    Launch one process per GPU (`torchrun --nproc_per_node=N script.py`, `accelerate
    launch`), which makes the trainer use DistributedDataParallel; or make one GPU visible
    (CUDA_VISIBLE_DEVICES=0) when the model is meant for one.

    Known false positives:
    A job that uses DataParallel on purpose and fails for a reason of its own; it stands
    only when no other rule finds anything.

    References:
    https://pytorch.org/docs/stable/notes/cuda.html#use-nn-parallel-distributeddataparallel-instead-of-multiprocessing-or-nn-dataparallel
    """
    for item, record in tracebacks(evidence, dumps=False):
        frame = next((f for f in record.frames if _DATA_PARALLEL.search(f.file)), None)
        if frame is None:
            continue
        failed = f" with `{record.exception}`" if record.exception else ""
        yield Finding(
            title="the model runs under nn.DataParallel: one process drives several GPUs",
            summary=f"The traceback fails inside nn.DataParallel{failed} ({frame.file.rsplit('/', 1)[-1]}"
            f":{frame.line} in {frame.function}): one process replicates the model on every"
            " visible GPU each step, which is what a trainer does when the script was started"
            " with plain python on a machine with several GPUs. Quantized, device-mapped or"
            " otherwise unreplicable models fail there.",
            ranks=ranks_of([record]),
            location=record.user_frame.location() if record.user_frame else None,
            confidence=0.3,
            evidence=[item.id],
            fix="Launch one process per GPU (`torchrun --nproc_per_node=N script.py` or"
            " `accelerate launch`) so the trainer uses DistributedDataParallel, or make one GPU"
            " visible (CUDA_VISIBLE_DEVICES=0) when the model is meant for one.",
            confirm="the same script under torchrun, or with CUDA_VISIBLE_DEVICES=0, gets past"
            " the failing step",
        )
        return
