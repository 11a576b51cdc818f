"""Memory: CUDA memory snapshots, memory_stats() and growth across dumps."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from triage.observations.payload import Payload
from triage.observations.ranks import Frame


class AllocationSite(Payload):
    """Bytes held by allocations made from one user line."""

    frame: Frame
    bytes: int
    count: int = 0


class MemoryDump(Payload):
    """One device's memory as a snapshot or a memory_stats dump saw it; sizes in bytes."""

    EVIDENCE_KIND: ClassVar[str] = "memory_dump"

    path: str
    format: str = Field(
        description="'snapshot' (torch.cuda.memory._snapshot), 'memory_stats', or "
        "'memory_summary' (a torch.cuda.memory_summary() table in a log)."
    )
    label: str = Field(default="", description="Entry within the file: device, step or key.")
    rank: int | None = None
    device: int | None = None
    allocated: int | None = None
    reserved: int | None = None
    active: int | None = None
    inactive: int | None = Field(default=None, description="Reserved but not allocated.")
    inactive_split: int | None = Field(
        default=None, description="Free bytes inside segments that also hold live blocks."
    )
    largest_free_block: int | None = None
    peak_allocated: int | None = None
    peak_reserved: int | None = None
    segments: int | None = None
    num_ooms: int | None = None
    num_alloc_retries: int | None = None
    oom_requested: int | None = Field(default=None, description="Size of the request that failed.")
    oom_device_free: int | None = Field(default=None, description="Free on the device at the OOM.")
    oom_frames: list[Frame] = Field(
        default_factory=list, description="Where the failed request came from, innermost first."
    )
    top_sites: list[AllocationSite] = Field(
        default_factory=list, description="Live allocations grouped by user line, largest first."
    )
    trace_growth: int | None = Field(
        default=None, description="Rise of the memory floor across the recorded allocation trace."
    )
    unfreed_sites: list[AllocationSite] = Field(
        default_factory=list, description="Allocations of the trace never freed, by user line."
    )
    expandable_segments: bool | None = None


class GrowthPoint(Payload):
    """One dump of a series: its label and the memory it shows."""

    label: str
    allocated: int | None = None
    reserved: int | None = None


class MemoryGrowth(Payload):
    """One device's memory across several dumps in order: a leak grows, a working set does not."""

    EVIDENCE_KIND: ClassVar[str] = "memory_growth"

    rank: int | None = None
    device: int | None = None
    points: list[GrowthPoint]
    growth: int = Field(description="Allocated bytes, last minus first.")
    monotonic: bool
    growing_sites: list[AllocationSite] = Field(
        default_factory=list, description="User lines whose live bytes grew most, first to last."
    )
    paths: list[str] = Field(default_factory=list)
