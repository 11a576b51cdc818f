"""Typed payloads of the evidence kinds that tools produce and rules read, one module per source.

Tools and rules never import each other; they meet here. Each Evidence item carries
the payload of its kind in `data`:

- `process`: RankProcess, `missing_rank`: MissingRank, `stack`: RankState,
  `unseen_ranks`: UnseenRanks (live ranks)
- `log_signal`: LogSignal, `traceback`: TracebackRecord, `log_file`: LogFile (logs)
- `environment`: EnvironmentFacts (a rank's environment or this host's facts)
- `memory_dump`: MemoryDump, `memory_growth`: MemoryGrowth (CUDA memory dumps)
- `fr_stuck`: FRStuckGroup, `fr_outlier`: FROutlier, `fr_p2p`: FRP2PWait,
  `fr_overview`: FROverview (Flight Recorder dumps)
- `probe_snapshot`: SnapshotSummary, `replica_check`: ReplicaCheck (triage.probe files),
  `probe_request`: ProbeRequest (ranks asked for a snapshot with the probe's signal)
"""

from __future__ import annotations

from triage.observations.collectives import (
    FROp,
    FROutlier,
    FROverview,
    FRP2PWait,
    FRSide,
    FRStuckGroup,
)
from triage.observations.host import (
    EnvironmentFacts,
    Gpu,
    GpuProcess,
    IbPort,
    Interface,
    MasterCheck,
)
from triage.observations.log_lines import LogFile, LogSignal, TracebackRecord
from triage.observations.memory_use import AllocationSite, GrowthPoint, MemoryDump, MemoryGrowth
from triage.observations.payload import Payload
from triage.observations.ranks import (
    Frame,
    MissingRank,
    RankActivity,
    RankProcess,
    RankState,
    UnseenRanks,
)
from triage.observations.replicas import (
    PROBE_FORMAT,
    Divergence,
    GroupRecord,
    MeshRecord,
    ProbeRequest,
    ProbeSnapshot,
    ReplicaCheck,
    SnapshotSummary,
    TensorDivergence,
    TensorRecord,
    TensorStats,
    ThreadStack,
    WorldIssue,
    is_probe_snapshot,
)

__all__ = [
    "AllocationSite",
    "Divergence",
    "EnvironmentFacts",
    "FROp",
    "FROutlier",
    "FROverview",
    "FRP2PWait",
    "FRSide",
    "FRStuckGroup",
    "Frame",
    "Gpu",
    "GpuProcess",
    "GroupRecord",
    "GrowthPoint",
    "IbPort",
    "Interface",
    "LogFile",
    "LogSignal",
    "MasterCheck",
    "MemoryDump",
    "MemoryGrowth",
    "MeshRecord",
    "MissingRank",
    "PROBE_FORMAT",
    "Payload",
    "ProbeRequest",
    "ProbeSnapshot",
    "RankActivity",
    "RankProcess",
    "RankState",
    "ReplicaCheck",
    "SnapshotSummary",
    "TensorDivergence",
    "TensorRecord",
    "TensorStats",
    "ThreadStack",
    "TracebackRecord",
    "UnseenRanks",
    "WorldIssue",
    "is_probe_snapshot",
]
