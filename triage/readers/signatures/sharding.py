"""How tensors and checkpoints are laid over the ranks: torch's checks that a sharded
dimension divides by its mesh (or world) size, and that a checkpoint is loaded at the world
size it was saved at. Each is a parallel size that does not fit the data or the checkpoint."""

from __future__ import annotations

from triage.readers.signatures import first_of, signature
from triage.readers.signatures.hang import compared

# DTensor's view ops and shape helpers, context parallel's sequence split, FSDP2's sharding
# of a parameter, the functional collectives' first-dimension split: a dimension that the
# ranks of its mesh dimension cannot share evenly.
signature(
    "setup.dim_not_divisible_by_mesh",
    r"dimension \d+ \(size (?P<size>\d+)\) is not evenly divisible by mesh dimension \d+"
    r" \(size (?P<mesh_size>\d+)\)"
    r"|Global dim (?P<global_size>\d+) not divisible by mesh size (?P<global_mesh>\d+)"
    r"|does not have first dimension divisible by world_size: (?P<world_size>\d+)"
    r"|FSDP does not support uneven sharding on dim \d+: (?P<fsdp_size>\d+)"
    r" \(world size: (?P<fsdp_world>\d+)\)"
    r"|is not divisible by CP mesh world size",
    anchors=(
        "divisible by mesh",
        "divisible by world_size:",
        "does not support uneven sharding on dim",
        "divisible by CP mesh world size",
    ),
    summary="a sharded tensor dimension does not divide evenly over its mesh dimension's ranks",
)

# ShardedTensor's (and its checkpoints') check of the process group it is loaded into, and
# DeepSpeed's of a ZeRO checkpoint (`The checkpoint being loaded used a DP world size of 8 but
# the current world size is 4`).
signature(
    "setup.checkpoint_world_size",
    r"(?P<scope>Local|Global) world size at save time was (?P<saved>\d+), but at load time was"
    r" (?P<now>\d+)"
    r"|[Cc]heckpoint\b[^\n]{0,60}?\b(?P<kind>DP |MP |TP |PP )?world size (?:of |was |= ?)?"
    r"(?P<saved_as>\d+)\b[^\n]{0,20}?\bbut\b[^\n]{0,30}?\bworld size (?:is |of |= ?)?(?P<now_at>\d+)"
    # torchtitan's data loader state: `dp_degree is inconsistent before and after checkpoint`,
    # `cannot resume after changing the effective data-parallel degree`
    r"|(?P<loader>dp_degree is inconsistent before and after checkpoint"
    r"|cannot resume after changing the effective data-parallel degree)",
    anchors=(
        "world size at save time was",
        "world size of",
        "world size was",
        "world size =",
        "dp_degree is inconsistent before and after checkpoint",
        "cannot resume after changing the effective data-parallel degree",
    ),
    summary="a sharded checkpoint is loaded at another world size than it was saved at",
    extract=lambda m: {
        "dim": "data-parallel degree (its data loader's state)"
        if m["loader"]
        else f"{m['scope'].lower() if m['scope'] else (m['kind'] or '').strip()} world size".lstrip(),
        "saved": m["saved"] or m["saved_as"],
        "now": m["now"] or m["now_at"],
    },
)

#: A parallel size as configs and frameworks spell it: `tensor model parallel size`,
#: `pipeline-model-parallel size`, `data_parallel_size`, `tp_size`, `cp_size`, `world_size`.
_PARALLEL_SIZE = (
    r"(?:(?:tensor|pipeline|expert|context|sequence|data|model)[ _-](?:model[ _-])?parallel"
    r"(?:[ _-](?:size|degree|world[ _]size))?|(?:[tpcdes]p|mp|fsdp)[ _]?size|world[ _]?size"
    r"|ulysses[\w ]{0,24}?size|process group size"
    # a size of one group of a layout: `attn_tp_size`, `moe_dp_size`, `tp_world_size`
    r"|\w*_(?:[tpcdes]p|mp)_(?:world_)?size|tp[ _]world[ _]size"
    # the GPUs or nodes a job spans: `divisible by num_gpus`, `by number of nodes`
    r"|num[ _]gpus|number of (?:nodes|gpus)"
    # a bare abbreviation with its number: `divisible by tp (4)`, `by sp=2`
    r"|(?:[tpcdes]p)(?=\s*[(=]?\s*\d))"
)

# Megatron's, vLLM's and the model libraries' checks that a quantity of the model or the
# batch splits evenly over a parallel dimension (`number of layers should be divisible by
# the pipeline-model-parallel size`, `output_size (4096) must be divisible by tp_size (3)`,
# `eval_global_batch_size (8) must be divisible by eval_micro_batch_size (2) *
# data_parallel_size (3)`).
signature(
    "setup.not_divisible_by_parallel_size",
    r"(?i)(?P<what>[\w.()=` ]{0,60}?)\s(?:(?:must|should)\s+be|(?:(?:is|are)\s+)?not)\s+"
    r"(?:evenly\s+)?divisible\s*(?:by\s*)?"
    r"(?P<by>[^\n]{0,60}?\b(?P<size>" + _PARALLEL_SIZE + r")\b[^\n]{0,30})"
    # TRL's `tensor_parallel_size (4) must divide world size (6) evenly`, a model library's
    # `Tensor parallel world size must divide num heads.`
    r"|(?P<divisor>\b(?:" + _PARALLEL_SIZE + r"))\s*(?:\(\d+\))?\s+must\s+(?:evenly\s+)?divide\s+"
    r"(?:the\s+)?(?P<divided>[\w ]{1,40}?)(?:\s+evenly|\s*\(\d+\)|[.,;]|$)",
    anchors=("divisible", "must divide"),
    summary="a quantity of the model or the batch does not split evenly over a parallel size",
)

_COUNT = r"world[ _]size|num[ _]gpus|number of (?:GPUs|processes|devices)|nprocs?\w*"

# A size split over the parallel layout, in a check that names only numbers or the GPU
# count: Megatron's ensure_divisibility (`AssertionError: 151851 is not divisible by 4`, a
# vocabulary against the tensor-parallel size), a trainer's `real_train_batch_size (12)
# must be divisible by total n_gpus (8)`, `Global batch size 250 is not divisible by 8`.
signature(
    "setup.count_not_divisible",
    r"(?:^|[\s:(])(?P<what>(?:[A-Za-z_][\w ]{0,40}?\s)?\(?\d+\)?) is not (?:evenly )?divisible by"
    r" (?P<by>\d+)\b"
    r"|(?i:(?P<what2>[\w ()]{1,60}?) must be (?:evenly )?divisible by (?:the )?(?:total )?"
    r"(?P<by2>(?:" + _COUNT + r"|n_gpus)\b[^\n]{0,20}))",
    anchors=(
        "is not divisible by",
        "is not evenly divisible by",
        "divisible by total",
        "divisible by the total",
        "divisible by the number of",
        "divisible by world",
        "divisible by the world",
        "divisible by num",
        "divisible by n_gpus",
    ),
    summary="a count the parallel layout splits does not divide evenly",
    extract=first_of(quantity=("what", "what2"), divisor=("by", "by2")),
)
_PRODUCT = (
    r"[\w ()=]{0,40}?(?:"
    + _PARALLEL_SIZE
    + r"|\w+_degree)\s*(?:\(\d+\)\s*)?[*x×]\s*[\w ()*x×=]{1,120}?"
)

# A launch's GPU count against the product of its parallel sizes, either way round:
# `num_gpus (6) must equal tp_size * ulysses_degree * ring_degree (4)`, `tp_size *
# pp_size (8) must be equal to the world size (4)`.
signature(
    "setup.parallel_product",
    r"(?i)\b(?:" + _COUNT + r")\s*(?:\(\d+\)|=\s*\d+)?\s+(?:must|should)\s+(?:be\s+)?equal"
    r"(?:\s+to)?\s+(?:the\s+)?" + _PRODUCT + r"(?:\(\d+\)|$|[.,;])"
    r"|\b" + _PRODUCT + r"(?:\(\d+\)\s*)?\s+(?:must|should)\s+(?:be\s+)?equal"
    r"(?:\s+to)?\s+(?:the\s+)?(?:" + _COUNT + r")\b",
    anchors=("must equal", "must be equal", "should equal", "should be equal"),
    summary="the parallel sizes do not multiply to the job's GPU count",
)

# An inference engine's world (tensor x pipeline parallel) larger than the GPUs it can have:
# vLLM's `World size (8) is larger than the number of available GPUs (4) in this node` and
# Ray's placement that cannot be met (`Cannot provide a placement group requiring 8 GPUs`).
signature(
    "setup.world_exceeds_gpus",
    r"World size \((?P<world_size>\d+)\) is larger than the number of available GPUs"
    r" \((?P<gpus>\d+)\)|Cannot provide a placement group requiring (?P<required>\d+) GPUs"
    r"|Tensor parallel size may exceed available GPUs"
    # vLLM's config check, and the RL trainers' own counts of the Ray cluster (verl's,
    # NeMo-RL's): `Total available GPUs 8.0 is less than total desired GPUs 16`
    r"|Tensor parallel size \(\d+\) cannot be larger than the number of available GPUs"
    r"|Total available GPUs [\d.]+ is less than total desired GPUs \d+"
    r"|Not enough GPUs available\. Requested \d+ GPUs, but only \d+ are available",
    anchors=(
        "is larger than the number of available GPUs",
        "Cannot provide a placement group requiring",
        "Tensor parallel size may exceed available GPUs",
        "cannot be larger than the number of available GPUs",
        "is less than total desired GPUs",
        "Not enough GPUs available. Requested",
    ),
    summary="the engine's world (tensor x pipeline parallel) needs more GPUs than it can have",
)

# accelerate's checks of the world against the batch and the parallelism plan.
signature(
    "setup.batch_not_multiple_of_processes",
    r"the batch size \((?P<batch>\d+)\) needs to be a round multiple of the number of processes"
    r" \((?P<processes>\d+)\)",
    anchors="needs to be a round multiple of the number of processes",
    summary="accelerate's split_batches needs a batch size that is a multiple of the processes",
)

signature(
    "setup.parallel_total_vs_processes",
    r"ParallelismConfig total_size \((?P<total>\d+)\) does not match num_processes"
    r" \((?P<processes>\d+)\)",
    anchors="does not match num_processes",
    summary="accelerate's parallelism sizes do not multiply to the number of processes",
)


signature(
    "setup.checkpoint_parallel_size",
    r"(?i)\b(?P<dim>(?:tensor|pipeline|data|expert|context|sequence)[ _](?:model[ _])?parallel"
    r"[ _](?:size|degree|world[ _]size))\b[^\n]{0,80}?\bcheckpoint\b[^\n]{0,40}?"
    r"(?:\((?P<saved>\d+)\))?[^\n]{0,40}?(?:is not equal|does not match|doesn't match|"
    r"mismatch|!=)[^\n]{0,60}?(?:\((?P<now>\d+)\))?",
    anchors=("parallel_size", "parallel size", "parallel_degree", "parallel degree"),
    summary="a checkpoint saved at one parallel size is loaded at another",
)

# `Checkpoint was saved with tensor_model_parallel_size=2 but is being loaded with
# tensor_model_parallel_size=4`: the size it was saved with, then the size it is loaded at.
signature(
    "setup.checkpoint_saved_with",
    r"(?i)\b(?:saved|trained|sharded|created) (?:with|at|for) (?P<dim>\w*parallel\w*)"
    r"(?:=| of | )(?P<saved>\d+)\b[^\n]{0,60}?\b(?:load\w*|restor\w*|resum\w*|run\w*)"
    r" (?:with|at|for) (?:\w*parallel\w*(?:=| of | ))?(?P<now>\d+)\b",
    anchors=("parallel",),
    summary="a checkpoint saved at one parallel size is loaded at another",
)

# Meta's llama loaders: one process per model-parallel shard of the checkpoint.
signature(
    "setup.checkpoint_mp_world",
    r"[Cc]heckpoint for MP=(?P<saved>\d+) but world size is (?P<now>\d+)"
    # DeepSpeed's inference loader: `checkpoint count 4 is different from saved mp_world_size 8`
    r"|checkpoint count (?P<now_count>\d+) is different from saved mp_world_size (?P<saved_mp>\d+)",
    anchors=("checkpoint for MP=", "Checkpoint for MP=", "is different from saved mp_world_size"),
    summary="a checkpoint sharded for one model-parallel size is loaded by another number of"
    " processes",
    extract=lambda m: {
        "dim": "model-parallel size",
        "saved": m["saved"] or m["saved_mp"],
        "now": m["now"] or m["now_count"],
    },
)


# --- FSDP, DTensor and pipelining refusing what the ranks hold at run time ------------------

# FSDP's compute device against the rank's: `Inconsistent compute device and `device_id` on
# rank 0: cuda:1 vs cuda:0`, `Expected `FlatParameter` to be on the compute device cuda:1 but
# got cuda:0`, torch 2.1's `Expects tensor to be on the compute device cuda:1` (the current
# device not set to the local rank before wrapping).
signature(
    "fsdp.compute_device",
    r"Inconsistent compute device and `device_id` on rank \d+: cuda:\d+ vs cuda:\d+"
    r"|to be on the compute device cuda:\d+ but got cuda:\d+"
    r"|Expects tensor to be on the compute device cuda:\d+\s*$",
    anchors=("Inconsistent compute device", "to be on the compute device cuda:"),
    summary="FSDP's compute device differs from the GPU the rank's tensors are on",
)

# FSDP under TORCH_DISTRIBUTED_DEBUG=DETAIL compares the order the ranks all-gather their
# parameters in: `Forward order differs across ranks: rank 0 is all-gathering ... while rank 2
# is all-gathering ...`; without it, it can only warn that an iteration's order differs from
# the first's (`Collectives are unchecked and may give incorrect results or hang`).
signature(
    "fsdp.forward_order",
    r"Forward order differs across ranks: rank \d+ is all-gathering",
    anchors="Forward order differs across ranks",
    summary="FSDP found the ranks all-gathering different parameters at one step",
    extract=compared("forward order"),
)

signature(
    "fsdp.forward_order_changed",
    r"Forward order differs from that of the first iteration on rank \d+",
    anchors="Forward order differs from that of the first iteration",
    summary="FSDP warns that a rank's forward order changed since the first iteration",
    extract=compared("forward order"),
)

# A rank's local shard against the others' when a DTensor is built from local tensors
# (`DTensor.from_local(run_check=True)`), and a pipeline stage's received tensors against what
# it expected (the last, smaller microbatch; a sequence length that changed).
signature(
    "dtensor.ranks_disagree",
    r"Inconsistent tensor metadata \(including shape and stride\) across ranks"
    r"|Non-sharded dimensions should have identical size across ranks"
    r"|Pipelining(?:Shape|Metadata)Error: Stage \d+ (?:forward|backward) (?:inputs|outputs)"
    r"[^\n]{0,20}?:? (?:value \d+ has a )?(?:shape|dtype) mismatch",
    anchors=(
        "Inconsistent tensor metadata",
        "should have identical size across ranks",
        "PipeliningShapeError: Stage",
        "PipeliningMetadataError: Stage",
    ),
    summary="the ranks' (or the pipeline stages') tensors differ in shape where they must match",
    extract=compared("tensor shapes"),
)

# DTensor refusing an op on what it was given: a plain tensor among DTensors at one of torch's
# own ops (`aten.mm.default: got mixed torch.Tensor and DTensor`; a custom op's namespace,
# `npu.npu_fusion_attention`, is an op DTensor has no rule for, not a layout), DTensors on
# different meshes (`DTensor does not support cross-mesh operation`), a redistribution it
# cannot make, inputs whose placements no sharding rule of the op takes, placements for a
# mesh of another rank, a view across a sharded dimension.
signature(
    "dtensor.refused",
    r"(?P<mixed>\baten\.[\w.]+: got mixed torch\.Tensor and DTensor)"
    r"|(?P<mesh>DTensor does not support cross-mesh operation)"
    r"|(?P<redistribute>Can not redistribute from \S+ to \S+|redistribute from \S+ to \S+ not"
    r" supported|Redistribution from one partial type)"
    r"|(?P<strategy>Sharding propagation failed for Op)"
    r"|(?P<ndim>`placements` must have the same length as `device_mesh\.ndim`)"
    r"|(?P<view>Attempted to flatten sharded dimension)",
    anchors=(
        "got mixed torch.Tensor and DTensor",
        "DTensor does not support cross-mesh operation",
        "Can not redistribute from",
        "not supported yet",
        "Redistribution from one partial type",
        "Sharding propagation failed",
        "must have the same length as `device_mesh.ndim`",
        "Attempted to flatten sharded dimension",
    ),
    summary="DTensor refused an op on the placements or meshes it was given",
    extract=lambda found: {
        "what": next(
            text
            for group, text in (
                ("mixed", "a plain tensor mixed with DTensors"),
                ("mesh", "DTensors on different device meshes"),
                ("redistribute", "a redistribution DTensor cannot make"),
                ("strategy", "inputs whose placements no sharding rule of the op takes"),
                ("ndim", "placements for a mesh of another rank"),
                ("view", "a view across a sharded dimension"),
            )
            if found[group]
        )
    },
)
