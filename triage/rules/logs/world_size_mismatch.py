"""config.world_size_mismatch from logs: the mesh, the parallel dimensions, the rank numbers
or the number of processes that joined disagree with the world size."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import quoted_finding
from triage.rules.logs._signals import Found, signals, tracebacks
from triage.text import rank_subject

_TEXT = re.compile(r"[Mm]esh|world[ _]?size|WORLD_SIZE|divisible|out of range|interval|rank|stages")

#: signature -> (confidence, what went wrong)
_KINDS = {
    "setup.mesh_too_big": (0.9, "the DeviceMesh is larger than the world"),
    "setup.mesh_heterogeneous": (0.8, "the world size is not a multiple of the GPUs per host"),
    "setup.mesh_group_mismatch": (0.7, "the DeviceMesh does not match its process group's ranks"),
    "setup.parallel_dims": (0.88, "the parallel dimensions do not multiply to WORLD_SIZE"),
    "setup.parallel_product": (0.8, "the parallel sizes do not multiply to the job's GPU count"),
    "setup.world_not_divisible": (0.82, "the world size is not divisible by the parallel sizes"),
    "setup.rank_out_of_range": (0.8, "a rank number or group size is outside the world"),
    "setup.nccl_rank_count": (0.85, "NCCL's ranks disagree on the world size or a rank number"),
    "setup.world_sizes_differ": (0.75, "two layers of the launch count a different world size"),
    "lightning.world_differs": (
        0.85,
        "Lightning's devices, num_nodes or parallel sizes disagree with the launch's world",
    ),
    "setup.parallel_total_vs_processes": (
        0.85,
        "the parallelism sizes do not multiply to the number of processes",
    ),
    "setup.world_exceeds_gpus": (0.8, "the parallel sizes ask for more GPUs than there are"),
}
_FIX = (
    "Make the launch and the script agree on the world: nnodes x nproc-per-node must equal "
    "WORLD_SIZE and the product of the mesh / parallel sizes (dp x tp x pp x cp); size "
    "DistributedSampler and new_group from dist.get_world_size() and dist.get_rank() instead "
    "of config values; give every process a distinct RANK."
)
_FIX_PER_NODE = (
    "Start as many processes on each node as the list holds: the same number of GPUs on every"
    " node (Lightning and most launchers compute the world as nodes x devices), --ntasks-per-node"
    " or --nproc-per-node equal to the devices the job sees there (CUDA_VISIBLE_DEVICES), and the"
    " trainer's devices/gpus setting equal to that count."
)
_FIX_EXTRA_WORKERS = (
    "More processes joined than WORLD_SIZE: another job shares MASTER_ADDR:MASTER_PORT (pick a "
    "free port per job), or two layers launch processes (srun -n N plus mp.spawn, torchrun "
    "plus a script that spawns again). Launch exactly WORLD_SIZE processes per job."
)


_FIX_SAME_RANKS = (
    "Several processes took the same global rank: each node numbered its processes as if it"
    " were the first. Give the launch the real node count and a distinct node rank per node"
    " (Slurm: --nodes and --ntasks-per-node matching Trainer(num_nodes=..., devices=...);"
    " torchrun: --nnodes and --node_rank per node, or a c10d rendezvous endpoint)."
)

_FIX_SPLIT = (
    "Pick parallel sizes that divide the model: a tensor-parallel size that divides the"
    " attention (and key/value) heads, a pipeline size that divides the layers, an expert"
    " size that divides the experts (52 heads: TP 2 or 4, not 8); run the spare GPUs as"
    " data-parallel replicas or pipeline stages instead."
)

_FIX_BATCH = (
    "Let the batch follow the world size: set train_batch_size (and"
    ' train_micro_batch_size_per_gpu, gradient_accumulation_steps) to "auto" under the'
    " Hugging Face Trainer or accelerate, or recompute train_batch_size = micro-batch x"
    " accumulation x the number of GPUs of this launch."
)

_FIX_BUFFERS = (
    "Size a collective's buffers from the group it runs on, dist.get_world_size(group) (the"
    " global world size is wrong for a subgroup): all_gather takes a list of that many tensors"
    " shaped like the input; all_gather_into_tensor an output of that many times the input's"
    " elements; reduce_scatter_tensor an input of that many times the output; all_to_all_single"
    " split sizes that sum to the tensor's first dimension."
)

_FIX_MICROBATCHES = (
    "Give the pipeline at least as many micro-batches per step as its schedule needs (at"
    " least the pipeline-parallel size; global batch / (micro batch x data-parallel size)),"
    " by raising the global batch or gradient accumulation, or lowering the micro batch or the"
    " pipeline-parallel size; the data-parallel size changes with the GPU count."
)
_FIX_STAGES = (
    "Cut the model into one stage per rank of the pipeline group: pass split_spec (or place"
    " pipe_split() points) to pipeline() so it yields as many stages as the group has ranks"
    " (num_stages per rank for interleaved schedules), or launch only as many pipeline ranks as"
    " there are stages."
)

_FIX_CHECKPOINT = (
    "Launch with the parallel sizes the checkpoint was saved at (llama: --nproc_per_node equal"
    " to the number of consolidated.*.pth shards), or convert it to the new layout first"
    " (Megatron's tools/checkpoint converter, DeepSpeed's universal checkpoint,"
    " torch.distributed.checkpoint resharding on load)."
)

_FIX_DIVIDES = (
    "Pick parallel sizes that divide what the message names (the layers by the pipeline size,"
    " heads and hidden sizes by the tensor size, the sequence by 2 x cp, the global batch by"
    " micro-batch x data-parallel size; the data-parallel size is the world size over"
    " tp x pp x cp), or change that quantity (pad it, or set the batch for this world size)."
)
_FIX_UNEVEN = (
    "Give the sharded dimension a size its mesh dimension divides: pad it to a multiple of the"
    " parallel size (a vocabulary to a multiple of 64 x tp, a sequence to a multiple of"
    " 2 x cp), or pick a parallel size that divides it; before a view or reshape that needs"
    " even shards, redistribute the DTensor (to Replicate, or Shard another dimension)."
)


@rule("logs.world_size_mismatch", "config.world_size_mismatch")
def world_size_mismatch(evidence: EvidenceSet) -> Iterator[Finding]:
    """The job's world size disagrees with the mesh, the parallel plan or the processes started.

    What it detects:
    `Mesh should not be bigger than default world size N, but found M ranks!`, DeviceMesh's
    homogeneous-hardware and mesh/group checks (`Expects the number of devices in the mesh
    (16) to equal the world size (8)`, `WORLD_SIZE(8) != mesh size(4)`); `world size (N) is
    not divisible by ...`, torchtitan's `... != WORLD_SIZE(N)` and `dp_shard * dp_replicate *
    cp * tp * pp (16) != world_size (8)`; an inference engine's world larger than its GPUs
    (vLLM's `World size (8) is larger than the number of available GPUs (4)`, Ray's
    `Cannot provide a placement group requiring 8 GPUs`); `Invalid rank N, rank should be in the interval
    [0, M]` (DistributedSampler), new_group's `Rank N is out of range`; the store-based
    barrier counting more workers than world_size (`world_size=2, worker_count=4`); NCCL's
    bootstrap seeing a different rank count or one rank twice; a checkpoint's
    `tensor_model_parallel_size value from checkpoint (1) is not equal to ... (2)`, llama's
    `Loading a checkpoint for MP=1 but world size is 4`, `Checkpoint was saved with
    tensor_model_parallel_size=2 but is being loaded with ...=4`; load_state_dict's size mismatches
    that all differ by one whole factor in one dimension (a tensor-parallel shard loaded
    whole); DeepSpeed's `train_batch_size is not equal to micro_batch_per_gpu *
    gradient_acc_step * world_size 32 != 4 * 1 * 1` (and the Trainer's `ds
    train_batch_size=32 vs hf train_batch_size (calculated)=4`); a parallel size that does not divide
    the model (vLLM's `Total number of attention heads (52) must be divisible by tensor
    parallel size (8)`, `num_attention_heads (14) must be a multiple of
    tensor_model_parallel_size (4)`);
    a collective's buffers sized for another world (0.55: ProcessGroupNCCL's `output tensor
    size must be equal to world_size times input tensor size`, gloo's `invalid output tensor
    list at index 0 (expected length 1, got 2)`, all_to_all's `Split sizes doesn't match
    total dim 0 size`);
    torch.distributed.pipelining's `Pipeline group size 4 cannot be larger than number of
    stages 1` (0.75: the model was not split, or into fewer stages than ranks); a pipeline
    schedule with fewer micro-batches than it needs (0.6: Megatron's `number of contiguous
    micro-batches in a virtual pipeline stage should range in [PP=2 , M=1]`, nanotron's
    `Number of microbatches (1) must be at least PP_SIZE-1=7`);
    a sharded dimension its mesh dimension does not divide (0.6: DTensor's `Cannot flatten
    unevenly sharded tensor: dimension 0 (size 7) is not evenly divisible by mesh dimension
    0 (size 2)`, `Global dim 13 not divisible by mesh size 2`, FSDP2's `does not support
    uneven sharding on dim 0`, context parallel's sequence split); any other quantity a
    framework checks against a parallel size (0.7: Megatron's `number of layers should be
    divisible by the pipeline-model-parallel size`, `output_size (4096) must be divisible by
    tp_size (3)`, a global batch against micro-batch x data-parallel size, a parallel size
    that must divide one: `Tensor parallel world size must divide num heads.`), or a check
    that names only numbers or the GPU count (0.5: Megatron's ensure_divisibility, `151851
    is not divisible by 4`; `real_train_batch_size (12) must be divisible by total n_gpus
    (8)`), accelerate's
    `the batch size (6) needs to be a round multiple of the number of processes (4)` (0.7)
    and `ParallelismConfig total_size (8) does not match num_processes (4)` (0.85);
    Lightning's `You set devices=4 and num_nodes=2 in Lightning, but the product (4 * 2) does
    not match the world size (4)` and its checks against Slurm's --ntasks-per-node and
    --nodes (0.85); a sharded checkpoint's
    `Global world size at save time was 8, but at load time was 4` (0.8); the job's GPU
    count against the product of its parallel sizes, either way round (0.8: `num_gpus (6)
    must equal tp_size * ulysses_degree * ring_degree (4)`);
    weaker (0.5), processes that announce the same global rank (Lightning's `Initializing
    distributed: GLOBAL_RANK: 1, MEMBER: 2/8` twice) while fewer distinct ranks than the
    world's size announce themselves.

    Why it happens:
    --nnodes x --nproc-per-node differs from what the config's mesh or parallel sizes
    assume; a config hard-codes num_replicas or ranks; two jobs (or two launch layers)
    share one MASTER_PORT so more processes join than the world holds.

    Evidence:
    The error text with both numbers, on the ranks that report it.

    Fix:
    Derive sizes from dist.get_world_size(); launch nnodes x nproc-per-node processes to
    match the mesh; one MASTER_PORT per job.

    Known false positives:
    A store barrier that counts fewer workers than world_size usually means a rank failed
    or is slow to start (see hang.rank_exited, comm.rendezvous); it scores low here.

    References:
    torch.distributed.device_mesh (init_device_mesh); torch.utils.data.DistributedSampler;
    torchrun --nnodes/--nproc-per-node.
    """
    found: list[Found] = []
    for name, (confidence, what) in _KINDS.items():
        items = signals(evidence, name)
        if items:
            found.append((confidence, what, items, _FIX))
    found.extend(_local_rank_past_the_list(evidence))
    found.extend(_batch_for_another_world(evidence))
    found.extend(_sharded_checkpoint(evidence))
    split = signals(evidence, "setup.parallel_size_splits_model")
    if split:
        fields = split[0][1].fields
        what = (
            f"the {fields['by'].strip().rstrip('.')} does not divide the {fields['what'].lower()}"
        )
        found.append((0.8, what, split, _FIX_SPLIT))
    found.extend(_parallel_size_fits(evidence, bool(split)))
    buffers = signals(evidence, "setup.collective_buffer_size")
    if buffers:
        fields = buffers[0][1].fields
        sizes = (
            f" (expected {fields['expected']}, got {fields['got']})" if fields.get("got") else ""
        )
        what = f"a collective's buffers are not sized for its group's world{sizes}"
        found.append((0.55, what, buffers, _FIX_BUFFERS))
    stages = signals(evidence, "setup.pipeline_stages_fewer")
    if stages:
        fields = stages[0][1].fields
        what = (
            f"a pipeline group of {fields['group_size']} ranks runs a model cut into"
            f" {fields['stages']} stage(s)"
        )
        found.append((0.75, what, stages, _FIX_STAGES))
    micro = signals(evidence, "setup.microbatches_for_pipeline")
    if micro:
        what = "the pipeline schedule has fewer micro-batches than its stages need"
        found.append((0.6, what, micro, _FIX_MICROBATCHES))
    uneven = signals(evidence, "setup.dim_not_divisible_by_mesh")
    if uneven:
        what = "a sharded tensor dimension does not divide evenly over its mesh dimension's ranks"
        found.append((0.6, what, uneven, _FIX_UNEVEN))
    saved = signals(
        evidence,
        "setup.checkpoint_parallel_size",
        "setup.checkpoint_saved_with",
        "setup.checkpoint_mp_world",
        "setup.checkpoint_world_size",
    )
    if saved:
        fields = saved[0][1].fields
        sizes = f" ({fields['saved']} saved, {fields['now']} now)" if fields.get("now") else ""
        what = f"the checkpoint was saved at another {fields['dim']}{sizes}"
        found.append((0.8, what, saved, _FIX_CHECKPOINT))
    barrier = signals(evidence, "setup.store_barrier")
    # fewer than the world at a later group's barrier: new_group's (logs.subgroup_mismatch)
    short = [(e, s) for e, s in barrier if s.fields.get("group", 1) == 1]
    excess = [(e, s) for e, s in barrier if s.fields.get("excess")]
    if excess:
        fields = excess[0][1].fields
        found.append(
            (
                0.86,
                f"{fields['joined']} processes joined a world of {fields['world_size']}",
                excess,
                _FIX_EXTRA_WORKERS,
            )
        )
    elif short:
        fields = short[0][1].fields
        found.append(
            (
                0.35,
                f"only {fields['joined']} of {fields['world_size']} processes joined the world",
                short,
                _FIX,
            )
        )
    found.extend(_same_ranks(evidence))
    if not found:
        return
    yield quoted_finding(
        evidence,
        found,
        _TEXT,
        "WORLD_SIZE in the ranks' environment differs from the product of the mesh or "
        "parallel sizes the script builds (or from the number of processes started)",
    )


def _parallel_size_fits(evidence: EvidenceSet, named: bool) -> list[Found]:
    """A quantity of the model or the batch that a parallel size does not divide, in a
    framework's own check (0.7; the model dimensions the specific wording names read at 0.8;
    a check that names only numbers or the GPU count, 0.5), and accelerate's batch against
    the number of processes (0.7)."""
    found: list[Found] = []
    items = [] if named else signals(evidence, "setup.not_divisible_by_parallel_size")
    if items:
        fields = items[0][1].fields
        if fields.get("divisor"):
            what = f"the {fields['divisor']} does not divide the {fields['divided'].strip()}"
        else:
            subject = fields["what"].replace("`", "").strip(" :=")
            subject = subject if re.search(r"[A-Za-z]", subject) else "a quantity of the model"
            what = f"{subject} does not split evenly over the {fields['size']}"
        found.append((0.7, what, items, _FIX_DIVIDES))
    counts = [] if named or items else signals(evidence, "setup.count_not_divisible")
    if counts:
        fields = counts[0][1].fields
        what = (
            f"{fields['quantity'].strip()} does not divide evenly by {fields['divisor'].strip()}:"
            " a count the parallel layout splits"
        )
        found.append((0.5, what, counts, _FIX_DIVIDES))
    batch = signals(evidence, "setup.batch_not_multiple_of_processes")
    if batch:
        fields = batch[0][1].fields
        what = (
            f"the batch size {fields['batch']} is not a multiple of the {fields['processes']}"
            " processes"
        )
        found.append((0.7, what, batch, _FIX_DIVIDES))
    return found


def _batch_for_another_world(evidence: EvidenceSet) -> list[Found]:
    """DeepSpeed's global batch against this launch: a train_batch_size that is a whole
    multiple of micro-batch x accumulation (DeepSpeed's check), or of what the Trainer
    computed for this world, was written for another number of GPUs."""
    items = signals(evidence, "setup.batch_for_another_world")
    if not items:
        return []
    f = items[0][1].fields
    if f.get("train"):
        train, per_gpu, world = int(f["train"]), int(f["micro"]) * int(f["gas"]), int(f["world"])
        whole = per_gpu > 0 and train % per_gpu == 0
        fits = f"{train // per_gpu} GPUs" if whole else "no whole number of GPUs"
        now = f"it fits {fits}, this launch has {world}"
    else:
        train, computed = int(f["ds"]), int(f["hf"])
        whole = computed > 0 and max(train, computed) % min(train, computed) == 0
        now = f"the trainer computes {computed} for this launch"
    if whole:
        what = f"DeepSpeed's train_batch_size {train} was set for another world size ({now})"
        return [(0.75, what, items, _FIX_BATCH)]
    what = f"DeepSpeed's train_batch_size {train} does not fit this launch ({now})"
    return [(0.55, what, items, _FIX_BATCH)]


def _shard_factor(saved: str, now: str) -> tuple[int, bool] | None:
    """How many ways a tensor was split: its shapes differ in one dimension by a whole
    factor; True when the checkpoint holds the smaller piece."""
    a = [int(x) for x in saved.split(",") if x.strip()]
    b = [int(x) for x in now.split(",") if x.strip()]
    if len(a) != len(b):
        return None
    differ = [(x, y) for x, y in zip(a, b, strict=True) if x != y]
    if len(differ) != 1 or 0 in differ[0]:
        return None
    x, y = differ[0]
    if max(x, y) % min(x, y):
        return None
    return max(x, y) // min(x, y), x < y


def _sharded_checkpoint(evidence: EvidenceSet) -> list[Found]:
    """load_state_dict's size mismatches that all differ by one whole factor in one dimension
    of each tensor, a matrix among them: one tensor-parallel shard loaded into a whole model
    (or the reverse). A different model size changes both dimensions of a square weight, or
    by no whole factor."""
    items = signals(evidence, "setup.state_dict_shard")
    factors = {_shard_factor(s.fields["saved"], s.fields["now"]) for _, s in items}
    # a matrix split along one side, not a vector alone (a vocabulary twice the size)
    matrix = any("," in s.fields["saved"].strip(", ") for _, s in items)
    if not matrix or len(factors) != 1:
        return []
    (factor,) = factors
    if factor is None:
        return []
    ways, saved_smaller = factor
    what = (
        f"the checkpoint holds 1/{ways} of each tensor: it was saved at a parallel size {ways}"
        " times this run's"
        if saved_smaller
        else f"the model holds 1/{ways} of each checkpoint tensor: it runs at a parallel size"
        f" {ways} times the checkpoint's"
    )
    return [(0.75 if len(items) >= 3 else 0.6, what, items, _FIX_CHECKPOINT)]


def _same_ranks(evidence: EvidenceSet) -> list[Found]:
    """Processes that announce the same global rank while ranks of the world are missing:
    two sets of processes numbered themselves alike (every node took node rank 0)."""
    announced = [
        (e, s) for e, s in signals(evidence, "setup.init_announced") if "world_size" in s.fields
    ]
    counts = Counter(s.fields["rank"] for _, s in announced)
    twice = sorted(rank for rank, n in counts.items() if n > 1)
    world = max((s.fields["world_size"] for _, s in announced), default=0)
    if not twice or len(counts) >= world:
        return []
    return [
        (
            0.5,
            f"{rank_subject(twice, 'were')} announced twice in a world of {world}",
            [(e, s) for e, s in announced if s.fields["rank"] in twice],
            _FIX_SAME_RANKS,
        )
    ]


def _local_rank_past_the_list(evidence: EvidenceSet) -> list[Found]:
    """An IndexError at a list indexed by the local rank: more processes run on the node than
    the list (its devices, its per-process settings) holds (0.4: the list may also be short
    because devices are hidden from the process)."""
    indexed = signals(evidence, "setup.local_rank_index")
    if not indexed or not any(t.exception == "IndexError" for _, t in tracebacks(evidence)):
        return []
    what = "a list indexed by the local rank is shorter than the processes started on the node"
    return [(0.4, what, indexed, _FIX_PER_NODE)]
