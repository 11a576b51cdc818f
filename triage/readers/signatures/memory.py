"""Out of memory, on the GPU and on the host: the lines that say so, with their numbers.

The CUDA caching allocator's message changed over the years; every version names
the request and most name the device's capacity, what is free, and what PyTorch
holds. Those numbers are what tell the causes apart (capacity, fragmentation,
memory held by other processes), so `memory.cuda_oom` extracts them all, as
bytes, from whichever format the line is in:

- torch <= 1.3: `Tried to allocate X (GPU 0; T total capacity; A already allocated;
  F free; C cached)`
- torch 1.4 - 2.0: `... F free; [L allowed; ]R reserved in total by PyTorch)`
- torch >= 2.1: `Tried to allocate X. GPU 0 has a total capacity of T of which F is
  free. [Process P has U memory in use. ][Including non-PyTorch memory, this process
  has U memory in use. ][L allowed; ]Of the allocated memory A is allocated by
  PyTorch, [with P allocated in private pools (e.g., CUDA Graphs), ]and U is
  reserved by PyTorch but unallocated.` (2.1 spelled it "total capacty")

Host OOM leaves fewer words (the kernel's OOM killer, a scheduler's memory limit, a
SIGKILLed worker, `std::bad_alloc`, `MemoryError`, ENOMEM): host_memory.py reads them.
Worker exits with -9 are the launcher's signatures (`elastic.*` in launcher.py).

What `read_memory` gathers from memory snapshots and `torch.cuda.memory_stats()`
dumps is typed in triage/observations.py (MemoryDump, MemoryGrowth); `user_frame` in
triage/readers/stacks.py picks the user line of a snapshot stack for the tool and the
rules alike.

Logs say the same in text. A `torch.cuda.memory_summary()` table (printed on OOM by
users, fairseq and others) holds the allocator's counters; the scanner joins its rows
into one line (`SummaryTable`) that `memory.summary` reads. Training loops print their
memory per step (DeepSpeed's `see_memory_usage`, torchtitan, torchtune, OpenMMLab,
detectron2, home-grown `step N ... mem: X GB`); the `memory.*_usage` lines of one rank, in order,
are the series the leak rule reads.
"""

from __future__ import annotations

import re
from typing import Any

from triage.readers.signatures import Series, parse_size, signature

SIZE = r"[\d.]+ ?(?:bytes|[KMGT]iB)"

# Ascend's torch_npu keeps torch 1.x's wording with its own device name: `(NPU 3; ...)`.
_LEGACY = re.compile(r"\((?:GPU|NPU) (?P<device>\d+); ")
_LEGACY_PARTS = {
    "capacity": re.compile(rf"(?P<size>{SIZE}) total capacity"),
    "allocated": re.compile(rf"(?P<size>{SIZE}) already allocated"),
    "free": re.compile(rf"; (?P<size>{SIZE}) free\b"),
    "allowed": re.compile(rf"(?P<size>{SIZE}) allowed;"),
    "reserved": re.compile(rf"(?P<size>{SIZE}) reserved in total by PyTorch"),
    "unallocated": re.compile(rf"(?P<size>{SIZE}) cached"),  # torch <= 1.3: reserved, unused
}
_CAPACITY = re.compile(
    rf"GPU (?P<device>\d+) has a total capac(?:i)?ty of (?P<capacity>{SIZE}) of which "
    rf"(?P<free>{SIZE}) is free"
)
_ALLOWED = re.compile(rf"(?P<allowed>{SIZE}) allowed;")
_SPLIT = re.compile(
    rf"Of the allocated memory (?P<allocated>{SIZE}) is allocated by PyTorch, "
    rf"(?:with (?P<private>{SIZE}) allocated in private pools[^,]*, )?"
    rf"and (?P<unallocated>{SIZE}) is reserved by PyTorch but unallocated"
)
_SELF = re.compile(rf"this process has (?P<used>{SIZE}) memory in use")
_PROCESS = re.compile(rf"Process (?P<pid>\d+) has (?P<used>{SIZE}) memory in use")


def format_size(size: int) -> str:
    """Bytes the way torch prints them in OOM messages: '962.69 MiB'."""
    if abs(size) < 1024:
        return f"{size} bytes"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(size) >= scale:
            return f"{size / scale:.2f} {unit}"
    return f"{size} bytes"


def cuda_oom_numbers(line: str) -> dict[str, Any]:
    """Every number of a caching-allocator OOM line, in bytes; absent ones are left out.

    `reserved` and `unallocated` are derived when the format gives only the other one.
    """
    out: dict[str, Any] = {}
    legacy = _LEGACY.search(line)
    if legacy:  # each part on its own: pasted messages are often cut short
        out["format"] = "legacy"
        out["device"] = int(legacy["device"])
        rest = line[legacy.end() - 2 :]
        for key, part in _LEGACY_PARTS.items():
            found = part.search(rest)
            if found:
                out[key] = parse_size(found["size"])
    capacity = _CAPACITY.search(line)
    if capacity:
        out["format"] = "2.x"
        out["device"] = int(capacity["device"])
        out["capacity"] = parse_size(capacity["capacity"])
        out["free"] = parse_size(capacity["free"])
        allowed = _ALLOWED.search(line)
        if allowed:
            out["allowed"] = parse_size(allowed["allowed"])
    split = _SPLIT.search(line)
    if split:
        out["allocated"] = parse_size(split["allocated"])
        out["unallocated"] = parse_size(split["unallocated"])
        if split["private"]:
            out["private_pools"] = parse_size(split["private"])
    own = _SELF.search(line)
    if own:
        out["this_process"] = parse_size(own["used"])
    processes = [
        {"pid": int(p["pid"]), "used": parse_size(p["used"])} for p in _PROCESS.finditer(line)
    ]
    if processes:
        out["processes"] = processes
    allocated, reserved, unallocated = (
        out.get("allocated"),
        out.get("reserved"),
        out.get("unallocated"),
    )
    if reserved is None and allocated is not None and unallocated is not None:
        out["reserved"] = allocated + unallocated
    elif unallocated is None and allocated is not None and reserved is not None:
        out["unallocated"] = max(0, reserved - allocated)
    return {k: v for k, v in out.items() if v is not None}


def _cuda_oom(found: re.Match[str]) -> dict[str, Any]:
    out = cuda_oom_numbers(found.string)
    requested = parse_size(found["requested_text"] or found["requested_wrapped"])
    if requested is not None:
        out["requested"] = requested
    return out


def bytes_field(name: str) -> Any:
    def extract(found: re.Match[str]) -> dict[str, Any]:
        value = found[name]
        return {name: int(value)} if value and value.isdigit() else {}

    return extract


def kb_field(found: re.Match[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"victim_pid": int(found["victim_pid"])}
    if found["anon_rss"]:
        out["anon_rss"] = int(found["anon_rss"]) * 1024
    return out


# --- the GPU ---------------------------------------------------------------------------

signature(
    "memory.cuda_oom",
    rf"(?P<api>CUDA|HIP|XPU|NPU) out of memory\.(?: Tried to allocate (?P<requested_text>{SIZE}|more than \S+))?"
    # Apple's MPS: `MPS backend out of memory (MPS allocated: 8.89 GB, other allocations:
    # 172.98 MB, max allowed: 9.07 GB). Tried to allocate 6.25 MB on private pool.`
    r"|(?P<mps>MPS) backend out of memory \(MPS allocated"
    # torch 1.x's numbers on a line of their own (the message wrapped after `CUDA out of
    # memory.`, or pasted from there): `Tried to allocate 216.00 MiB (GPU 0; 7.92 GiB total
    # capacity; ...)`
    rf"|^\s*Tried to allocate (?P<requested_wrapped>{SIZE}) \((?:GPU|NPU) \d+; ",
    anchors=("out of memory.", "MPS backend out of memory", "Tried to allocate"),
    summary="the CUDA caching allocator could not serve a request; the line holds its numbers",
    extract=_cuda_oom,
)

signature(
    "memory.oom_exception",
    r"(?<![\w.])(?P<exception>(?:torch\.)?(?:cuda\.)?OutOfMemoryError)\b",
    anchors="OutOfMemoryError",
    summary="torch raised OutOfMemoryError (the GPU ran out of memory)",
)

signature(
    "memory.cuda_error_oom",
    # vLLM's sleep-mode allocator (colocated RL rollouts) says `CUDA Error: out of memory at
    # .../cumem_allocator.cpp:62` when waking the engine finds the GPU full.
    r"(?P<error>CUDA [Ee]rror: out of memory|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation"
    r"|HIP error: out of memory|hipErrorOutOfMemory|cuda runtime error \(2\) : out of memory"
    r"|error=2 : out of memory"
    # TensorRT-LLM: `CUDA runtime error in ::cudaMallocAsync(ptr, n, ...): out of memory`
    r"|CUDA runtime error in ::cudaMalloc\w*\(.*?\): out of memory"
    # Intel's Level Zero (XPU, oneCCL) and Habana's device memory (Gaudi)
    r"|ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY|MODULE:PT_DEVMEM (?:Allocation failed|OOM))",
    anchors=(
        "CUDA error: out of memory",
        "CUDA Error: out of memory",
        "CUDA_ERROR_OUT_OF_MEMORY",
        "cudaErrorMemoryAllocation",
        "HIP error: out of memory",
        "hipErrorOutOfMemory",
        "cuda runtime error (2) : out of memory",
        "error=2 : out of memory",
        "CUDA runtime error in ::cudaMalloc",
        "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY",
        "MODULE:PT_DEVMEM",
    ),
    summary="a CUDA call outside the caching allocator (context, kernel, library) ran out of memory",
)

signature(
    "memory.library_alloc_failed",
    r"(?P<library>CUBLAS|CUDNN|CUSOLVER|CUSPARSE)_STATUS_ALLOC_FAILED",
    anchors="_STATUS_ALLOC_FAILED",
    summary="a CUDA library could not allocate its workspace or handle: the GPU is full",
)

signature(
    "memory.nccl_cuda_oom",
    r"Cuda failure (?:\d+ )?'out of memory'"
    r"|Failed to CUDA (?:calloc|malloc)(?: async)? (?P<requested>\d+) bytes",
    anchors=("'out of memory'", "Failed to CUDA calloc", "Failed to CUDA malloc"),
    summary="NCCL could not allocate its GPU buffers: the GPU is full",
    extract=bytes_field("requested"),
)

# An inference engine (vLLM, SGLang; the rollout engines of RL trainers) sizes its KV cache
# from a share of the GPU (gpu_memory_utilization, --mem-fraction-static) after loading the
# weights, and refuses to start when nothing or too little is left: the model, the engine's
# budget and what else holds the GPU do not fit together.
signature(
    "memory.kv_cache_budget",
    r"No available memory for the cache blocks|"
    r"maximum number of tokens that can be stored in KV cache|"
    r"Not enough memory\. Please try to increase --mem-fraction-static|"
    # vLLM V1: `To serve at least one request with the models's max seq len (131072), (4.54 GiB
    # KV cache is needed, which is larger than the available KV cache memory (1.71 GiB)`
    r"KV cache is needed, which is larger than the available KV cache memory|"
    r"CUDA out of memory occurred when warming up sampler|"
    # SGLang: the profile left no tokens (`... is larger than the profiled value -561981`), or
    # one request fills the pool
    r"is larger than the profiled value -\d+|No space left for only one request|"
    # text-generation-inference's warm-up: `Not enough memory to handle 4096 prefill tokens`
    r"Not enough memory to handle \d+ (?:total tokens|prefill tokens)",
    anchors=(
        "No available memory for the cache blocks",
        "can be stored in KV cache",
        "increase --mem-fraction-static",
        "which is larger than the available KV cache memory",
        "CUDA out of memory occurred when warming up sampler",
        "is larger than the profiled value -",
        "No space left for only one request",
        "Not enough memory to handle",
    ),
    summary="an inference engine found no GPU memory left for its KV cache within its budget",
)

# DeepSpeed ZeRO-3 counts the allocator's retries between steps (memory_stats'
# num_alloc_retries): `[stage3.py:2069:step] 27 pytorch allocator cache flushes since last
# step. this happens when there is high memory pressure and is detrimental to performance.`
signature(
    "memory.allocator_flushes",
    r"(?P<flushes>\d+) pytorch allocator cache flushes since last step",
    anchors="pytorch allocator cache flushes since last step",
    summary="the caching allocator emptied its cache to retry failed cudaMallocs (memory pressure)",
    extract=lambda found: {"flushes": int(found["flushes"])},
)

# vLLM checks at start-up that its share of the GPU (gpu_memory_utilization) is still free:
# `Free memory on device cuda:0 (21.5/79.1 GiB) on startup is less than desired GPU memory
# utilization (0.9, 71.2 GiB)`. What is missing is held by other processes.
# SGLang compares the memory free on each of its GPUs before it loads the model: `The memory
# capacity is unbalanced. Some GPUs may be occupied by other processes.`
signature(
    "memory.engine_unbalanced",
    r"The memory capacity is unbalanced\. Some GPUs may be occupied by other",
    anchors="The memory capacity is unbalanced",
    summary="an inference engine found much less memory free on some of its GPUs than others",
)

signature(
    "memory.engine_startup_free",
    r"Free memory on device ?(?P<device>[^\s(]*) ?\((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on"
    r" startup is less than (?:desired GPU memory utilization|the engine's budget)[^(]*"
    r"\((?P<utilization>[\d.]+), (?P<wanted>[\d.]+) GiB\)",
    anchors="on startup is less than",
    summary="an inference engine found less GPU memory free at start-up than its share",
    extract=lambda found: {
        key: float(found[key]) for key in ("free", "total", "utilization", "wanted")
    },
)

signature(
    "memory.gpu_process_usage",
    rf"Process (?P<process_pid>\d+) has (?P<used>{SIZE}) memory in use",
    anchors=" memory in use",
    summary="a process holds memory on the GPU that ran out (NVML's list in the OOM message)",
    extract=lambda found: {
        "used": parse_size(found["used"]),
        "process_pid": int(found["process_pid"]),
    },
)

CUDA_OOM_SIGNALS = (
    "memory.cuda_oom",
    "memory.oom_exception",
    "memory.cuda_error_oom",
    "memory.library_alloc_failed",
    "memory.nccl_cuda_oom",
    "memory.kv_cache_budget",
    "memory.engine_startup_free",
)
# --- the allocator's own report: torch.cuda.memory_summary() --------------------------

SUMMARY_TITLE = "PyTorch CUDA memory summary"
_SUMMARY_DEVICE = re.compile(r"PyTorch CUDA memory summary, device ID (?P<device>\d+)")
_SUMMARY_COUNTERS = re.compile(
    r"CUDA OOMs: *(?P<ooms>\d+) *\| *cudaMalloc retries: *(?P<retries>\d+)"
)
_SUMMARY_FIELDS = {  # row -> field of its current value (the peak is "peak_" + it)
    "Allocated memory": "allocated",
    "Active memory": "active",
    "GPU reserved memory": "reserved",
    "Non-releasable memory": "inactive_split",
    "Allocations": "allocations",
    "GPU reserved segments": "segments",
    "Non-releasable allocs": "inactive_split_allocs",
    "Oversize allocations": "oversize_allocations",
}
_SUMMARY_SIZES = frozenset({"allocated", "active", "reserved", "inactive_split"})
_SUMMARY_ROW = re.compile(
    r"(?P<name>[A-Z][A-Za-z -]+?): (?P<cur>\d+ ?[A-Za-z]*) cur, (?P<peak>\d+ ?[A-Za-z]*) peak"
)
_BINARY = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40, "p": 2**50}


def binary_size(value: str, unit: str) -> int | None:
    """A size whose unit is binary however it is spelled: torch's tables, DeepSpeed and most
    training loops divide by 1024 and write "MB" or "GB"."""
    try:
        number = float(value)
    except ValueError:
        return None
    scale = _BINARY.get(unit.strip().lower()[:1])
    return None if scale is None else int(number * scale)


class SummaryTable:
    """One memory_summary() table, read line by line: the device's counters and each metric's
    whole-device row (the per-pool rows are left out). `text()` joins them into one line."""

    def __init__(self, header: str) -> None:
        found = _SUMMARY_DEVICE.search(header)
        self.device = int(found["device"]) if found else None
        self.counters: tuple[str, str] | None = None
        self.rows: list[str] = []
        self.done = False

    def feed(self, line: str) -> bool:
        """Take the table's next line; False when the line is not the table's (it ended)."""
        text = line.strip()
        if not text.startswith("|"):
            return False
        counters = _SUMMARY_COUNTERS.search(text)
        if counters:
            self.counters = (counters["ooms"], counters["retries"])
        elif text.startswith("|===") and self.rows:
            self.done = True
        else:
            cells = [cell.strip() for cell in text.strip("|").split("|")]
            if len(cells) == 5 and cells[0] in _SUMMARY_FIELDS:
                self.rows.append(f"{cells[0]}: {cells[1]} cur, {cells[2]} peak")
        return True

    def text(self) -> str | None:
        """'PyTorch CUDA memory summary, device ID 0; CUDA OOMs: 1; cudaMalloc retries: 4;
        Allocated memory: 18032 MiB cur, 38297 MiB peak; ...', None without any row."""
        if not self.rows:
            return None
        parts = [SUMMARY_TITLE + (f", device ID {self.device}" if self.device is not None else "")]
        if self.counters:
            parts.append(f"CUDA OOMs: {self.counters[0]}; cudaMalloc retries: {self.counters[1]}")
        return "; ".join(parts + self.rows)


def _summary(found: re.Match[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if found["device"]:
        out["device"] = int(found["device"])
    counters = re.search(r"CUDA OOMs: (\d+); cudaMalloc retries: (\d+)", found.string)
    if counters:
        out["num_ooms"], out["num_alloc_retries"] = int(counters[1]), int(counters[2])
    for row in _SUMMARY_ROW.finditer(found.string):
        key = _SUMMARY_FIELDS.get(row["name"])
        if key is None:
            continue
        for prefix, cell in (("", row["cur"]), ("peak_", row["peak"])):
            number, _, unit = cell.partition(" ")
            if key in _SUMMARY_SIZES:
                value = binary_size(number, unit)
            else:  # counts: "1862 K" is thousands
                value = int(number) * {"K": 1000, "M": 10**6}.get(unit, 1)
            if value is not None:
                out[prefix + key] = value
    return out


signature(
    "memory.summary",
    r"PyTorch CUDA memory summary(?:, device ID (?P<device>\d+))?; ",
    anchors=SUMMARY_TITLE,
    summary="torch.cuda.memory_summary(): the allocator's counters on one device (allocated, "
    "reserved, non-releasable memory, OOMs, cudaMalloc retries)",
    context_after=48,  # the rest of the table, for the scanner to join
    extract=_summary,
)

# --- memory per step, as training loops print it ----------------------------------------

# A step or iteration number on the line. torchtitan colours its fields: "\x1b[31mstep: 10",
# "\x1b[38;2;54;234;195mmemory: 28.96GiB"; a digit and "m" end the colour code.
_STEP = (
    r"(?:(?<![A-Za-z_])|(?<=\dm))(?:global_step|[Ss]tep|STEP|[Ii]ter(?:ation)?|ITER)s?"
    r"\s*[:=#]?\s*\[?\s*(?P<step>\d+)"
)
# Names that say which figure: literal, so each is an anchor of its own.
_USAGE_NAMES = (
    "mem_allocated",
    "mem_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory allocated",
    "memory reserved",
    "Memory allocated",
    "Memory reserved",
)
_USAGE_KEY = re.compile(
    r"(?:(?<![A-Za-z])|(?<=\dm))(?P<measure>(?:(?:max|peak)_?)?(?:(?:mem|memory|Mem|Memory)(?=[:=])|"
    + "|".join(_USAGE_NAMES)
    + r")(?:\(\))?)[:=] *(?P<value>\d+(?:\.\d+)?) ?(?P<unit>[KMGT]i?B|[MG])(?![A-Za-z])"
)


def _metric(measure: str) -> str:
    """allocated, reserved (with peak_ when the name says max or peak), or memory: what the
    loop measured is not named (torchtitan's is peak reserved, detectron2's peak allocated)."""
    peak = "peak_" if measure.lower().startswith(("max", "peak")) else ""
    for kind in ("allocated", "reserved"):
        if kind in measure:
            return peak + kind
    return "memory"


def _step_usage(found: re.Match[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"step": int(found["step"])}
    for usage in _USAGE_KEY.finditer(found.string):
        size = binary_size(usage["value"], usage["unit"])
        if size is not None:
            out.setdefault(_metric(usage["measure"]), size)
    return out


#: The commonest wording of a per-step memory figure (`step 120 | loss 2.31 | memory:
#: 12.30GB`): its lines are taken by the run, as a series per writer (`Series`), so a
#: training log that prints it every step is counted in C, not read line by line.
STEP_MEMORY = "memory:"

signature(
    "memory.step_usage",
    rf"^(?=.*?{_STEP}).*?{_USAGE_KEY.pattern}",
    anchors=(STEP_MEMORY, "mem:", "mem=", "Mem:", "Mem=", "memory=", "Memory:", "Memory=")
    + _USAGE_NAMES,
    summary="a training step's GPU memory (step N ... mem: X GB, memory_allocated=X, "
    "max_mem: XM); one rank's lines in order show whether memory grows step over step",
    extract=_step_usage,
    # a step word first, so that a failure line that names memory is never taken for one
    series=Series(
        line=r"(?i:step|iter)[^\n]*memory: ?\d", key=None, token=STEP_MEMORY, anchor_is_line=False
    ),
)


def _deepspeed_usage(found: re.Match[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, name in (
        ("allocated", "ma"),
        ("peak_allocated", "max_ma"),
        ("reserved", "ca"),
        ("peak_reserved", "max_ca"),
    ):
        size = binary_size(found[name], found[f"{name}_unit"])
        if size is not None:
            out[key] = size
    return out


signature(
    "memory.deepspeed_usage",
    r"\bMA (?P<ma>[\d.]+) (?P<ma_unit>[KMG]?B) +Max_MA (?P<max_ma>[\d.]+) (?P<max_ma_unit>[KMG]?B)"
    r" +CA (?P<ca>[\d.]+) (?P<ca_unit>[KMG]?B) +Max_CA (?P<max_ca>[\d.]+) (?P<max_ca_unit>[KMG]?B)",
    anchors="Max_MA ",
    summary="DeepSpeed's see_memory_usage: allocated (MA) and reserved (CA) GPU memory now and "
    "at the peak since the last report",
    extract=_deepspeed_usage,
)

signature(
    "memory.mm_usage",
    r"\b(?:Epoch|Iter)(?:\(train\))?\s*(?:\[(?P<epoch>\d+)\])?\s*\[\s*(?P<step>\d+)/\s*\d+\]"
    r".*?\bmemory: (?P<mb>\d+)(?![\d.]| ?[KMGT]i?B)",
    anchors="memory: ",
    summary="an OpenMMLab (mmcv, mmengine) training log line: peak allocated GPU memory of the "
    "last iterations in MB",
    extract=lambda found: {
        "step": int(found["step"]),
        "peak_allocated": int(found["mb"]) * 2**20,
        **({"epoch": int(found["epoch"])} if found["epoch"] else {}),
    },
)

_TORCHTUNE_RESERVED = re.compile(r"\bpeak_memory_reserved:(?P<gb>\d+(?:\.\d+)?)")


def _torchtune_usage(found: re.Match[str]) -> dict[str, Any]:
    out = {"step": int(found["step"]), "peak_allocated": int(float(found["gb"]) * 10**9)}
    reserved = _TORCHTUNE_RESERVED.search(found.string)
    if reserved:
        out["peak_reserved"] = int(float(reserved["gb"]) * 10**9)
    return out


signature(
    "memory.torchtune_usage",
    r"\bStep (?P<step>\d+) \| .*?\bpeak_memory_alloc:(?P<gb>\d+(?:\.\d+)?)",
    anchors="peak_memory_alloc:",
    summary="a torchtune metrics line (log_peak_memory_stats): peak GPU memory since the last "
    "one, in GB",
    extract=_torchtune_usage,
)

USAGE_SIGNALS = (
    "memory.step_usage",
    "memory.deepspeed_usage",
    "memory.mm_usage",
    "memory.torchtune_usage",
    "memory.summary",
)
