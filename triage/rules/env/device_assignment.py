"""config.device_assignment from the environment: CUDA_VISIBLE_DEVICES and LOCAL_RANK map two
ranks to one GPU, or a rank to a GPU index it cannot see."""

from __future__ import annotations

from collections.abc import Iterator

from triage.models import Finding
from triage.readers.environment import EnvironmentView, Item, Problem, environment_view, who, worst
from triage.registry import EvidenceSet, rule
from triage.text import agree

_FIX = (
    "Give each local rank its own GPU: leave CUDA_VISIBLE_DEVICES the same for all ranks of a "
    "node (listing at least --nproc-per-node GPUs) and call torch.cuda.set_device(LOCAL_RANK), "
    "or give each rank one distinct GPU in CUDA_VISIBLE_DEVICES and use cuda:0."
)


@rule("env.device_assignment", "config.device_assignment")
def device_assignment(evidence: EvidenceSet) -> Iterator[Finding]:
    """CUDA_VISIBLE_DEVICES and LOCAL_RANK do not give each local rank its own GPU.

    What it detects:
    For the ranks of one job, node by node, assuming the usual cuda:LOCAL_RANK: two ranks
    of one node that resolve to the same physical GPU (same LOCAL_RANK, or one CUDA_VISIBLE_DEVICES
    value naming a single GPU for every rank); a LOCAL_RANK past the GPUs its
    CUDA_VISIBLE_DEVICES lists (or past the GPUs nvidia-smi shows); more local ranks
    than GPUs. Weaker: each rank sees exactly one GPU but has LOCAL_RANK > 0 (fine with
    cuda:0, `invalid device ordinal` with set_device(LOCAL_RANK)).

    Why it happens:
    CUDA_VISIBLE_DEVICES exported once for the whole job, --nproc-per-node larger than the
    GPU count, a scheduler that sets a per-task CUDA_VISIBLE_DEVICES while the script
    indexes devices with LOCAL_RANK.

    Evidence:
    LOCAL_RANK, LOCAL_WORLD_SIZE and CUDA_VISIBLE_DEVICES per rank; nvidia-smi's GPU list
    when available.

    Fix:
    Same CUDA_VISIBLE_DEVICES for all ranks of a node with enough GPUs plus
    set_device(LOCAL_RANK), or one distinct GPU per rank plus cuda:0.

    Known false positives:
    Scripts that pick devices some other way (a device map, RANK % device_count) are
    judged by the cuda:LOCAL_RANK convention; the per-rank single-GPU case scores low for
    that reason.

    References:
    CUDA_VISIBLE_DEVICES (CUDA programming guide); torchrun docs on LOCAL_RANK.
    """
    view = environment_view(evidence)
    for job in view.jobs():
        found = _problems(job, view)
        if not found:
            continue
        confidence, what, summary, ranks = worst(found)
        yield Finding(
            title=what,
            summary=summary,
            ranks=ranks,
            confidence=confidence,
            evidence=[e.id for e, _ in job] + ([view.host[0].id] if view.host else []),
            fix=_FIX,
            confirm="torch.cuda.current_device() and torch.cuda.device_count() printed on each "
            "rank show two ranks on one GPU or an index past the count",
        )


def _problems(job: list[Item], view: EnvironmentView) -> list[Problem]:
    """A GPU is one host's: ranks of a job gathered from several nodes (merged collections)
    share a device index only with the ranks of their own node, and this host's GPU count
    bounds only its own ranks."""
    found: list[Problem] = []
    here = view.host[1] if view.host else None
    host_gpus = len(here.gpus) if here is not None and here.gpus is not None else None
    physical: dict[tuple[str, str], list[Item]] = {}
    past: list[Item] = []
    single: list[Item] = []
    for e, f in job:
        visible = f.visible_devices()
        if f.local_rank is None:
            continue
        gpus = host_gpus if here is not None and f.host == here.host else None
        if visible is None:
            if gpus is not None and f.local_rank >= gpus:
                past.append((e, f))
            else:
                physical.setdefault((f.host, str(f.local_rank)), []).append((e, f))
            continue
        if len(visible) == 1 and f.local_rank > 0:
            single.append((e, f))
            physical.setdefault((f.host, visible[0]), []).append((e, f))
        elif f.local_rank < len(visible):
            physical.setdefault((f.host, visible[f.local_rank]), []).append((e, f))
        else:
            past.append((e, f))
    shared = {gpu: items for gpu, items in physical.items() if len(items) > 1}
    same_single = [
        items
        for items in shared.values()
        if all(len(f.visible_devices() or []) == 1 for _, f in items)
    ]
    if same_single:
        items = same_single[0]
        gpu = items[0][1].visible_devices() or ["?"]
        found.append(
            (
                0.8,
                f"{who(f for _, f in items)} all see only GPU {gpu[0]} (CUDA_VISIBLE_DEVICES)",
                items,
            )
        )
    elif shared:
        (_, device), items = next(iter(shared.items()))
        found.append((0.75, f"{who(f for _, f in items)} map to the same GPU {device}", items))
    if past:
        found.append(
            (
                0.75,
                f"{who(f for _, f in past)} {agree(len(past), 'have')} a LOCAL_RANK past the "
                f"GPUs {'it' if len(past) == 1 else 'they'} can see",
                past,
            )
        )
    if single and not same_single:
        found.append(
            (
                0.4,
                f"{who(f for _, f in single)} {agree(len(single), 'see')} one GPU but "
                f"{agree(len(single), 'have')} LOCAL_RANK > 0 "
                "(cuda:LOCAL_RANK would be an invalid ordinal)",
                single,
            )
        )
    locals_ = [
        f.local_world_size
        for _, f in job
        if f.local_world_size and (here is None or f.host == here.host)
    ]
    if host_gpus is not None and locals_ and max(locals_) > host_gpus:
        found.append(
            (
                0.78,
                f"LOCAL_WORLD_SIZE {max(locals_)} exceeds the {host_gpus} GPUs of this host",
                past or job,
            )
        )
    return found
