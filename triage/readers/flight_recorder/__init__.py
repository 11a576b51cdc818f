"""Flight Recorder dumps: read every rank's safely and fast, and align them per process group.

torch's Flight Recorder keeps each rank's last N collectives (op, process group, sequence
number, sizes, dtypes, state, the Python stack that called it). Dumped per rank, the
dumps show which collective every rank reached, including ranks on other hosts and
ranks whose Python stack cannot be read. torch's own analyzer (`fr_trace`) unpickles the
files with `pickle.load`, needs every rank's file, crashes on gloo dumps and holds every
entry of every rank; at a few thousand ranks it takes minutes.

Here each rank's dump is reduced, as it is read, to a compact summary per process group,
then dropped; the summaries are aligned per group by sequence number. Reading is linear
in total entries, memory is bounded by the summaries, and thousands of files are read on
every idle core. The pieces, in the order data flows through them:

- `dump_files`: which files are dumps (by their first bytes), reading one, and many in
  parallel (`read_dump`, `parse_dump`, `read_files`, `read_all`);
- `dump_bytes`: a file's bytes read lazily, at its head and its tail;
- `fast_pickle`: torch's own pickles decoded near the rank's frontier only, through the
  restricted unpickler (`triage.readers.safe_pickle`); other pickles are read whole;
- `dump_entries`: entries parsed and reduced into a `RankDump`, and the dump's rank;
- `dump_records`: what a dump is reduced to (`Entry`, `GroupTrack`, `RankDump`);
- `alignment`: the cross-rank match (`analyze_dumps`): stuck groups, the ranks not where
  their group waits, p2p waits no peer matches;
- `job_analysis`: the whole reader (`analyze_files`: read, align, then re-read the few
  files whose user-code line the report names);
- `evidence_payloads`: an alignment as observation payloads (overview, stuck groups,
  outliers, p2p waits).
- `evidence_items`: those payloads as the report's evidence items, and the gaps (ranks
  with no dump), for dumps read from files or fetched from a running job.
"""

from __future__ import annotations

from triage.readers.flight_recorder.alignment import (
    MAX_SIDES,
    MAX_STUCK,
    Analysis,
    GroupInfo,
    P2PWait,
    Side,
    StuckPoint,
    analyze_dumps,
)
from triage.readers.flight_recorder.dump_bytes import HEAD_BYTES, MAX_DUMP_BYTES, TAIL_BYTES
from triage.readers.flight_recorder.dump_bytes import _Bytes as _Bytes
from triage.readers.flight_recorder.dump_entries import _MEMBERS as _MEMBERS
from triage.readers.flight_recorder.dump_entries import _entry as _entry
from triage.readers.flight_recorder.dump_entries import _reduce as _reduce
from triage.readers.flight_recorder.dump_entries import rank_from_name
from triage.readers.flight_recorder.dump_files import (
    PARALLEL_FILES,
    ReadResult,
    dump_stem,
    find_dump_files,
    looks_like_dump,
    parse_dump,
    read_all,
    read_dump,
    read_files,
    unreadable_files,
)
from triage.readers.flight_recorder.dump_records import (
    P2P_KEEP,
    RECENT,
    WINDOW,
    Entry,
    GroupTrack,
    NotFlightRecorder,
    RankDump,
    UnreadableDump,
)
from triage.readers.flight_recorder.evidence_payloads import (
    outlier_payload,
    overview,
    p2p_payload,
    stuck_payload,
    summarize,
    to_op,
)
from triage.readers.flight_recorder.fast_pickle import _fast_pickle as _fast_pickle
from triage.readers.flight_recorder.fast_pickle import _Layout as _Layout
from triage.readers.flight_recorder.job_analysis import (
    JobDumps,
    analyze_files,
    locate,
    wanted_frames,
)

__all__ = [
    "HEAD_BYTES",
    "MAX_DUMP_BYTES",
    "MAX_SIDES",
    "MAX_STUCK",
    "P2P_KEEP",
    "PARALLEL_FILES",
    "RECENT",
    "TAIL_BYTES",
    "WINDOW",
    "Analysis",
    "Entry",
    "GroupInfo",
    "GroupTrack",
    "JobDumps",
    "NotFlightRecorder",
    "P2PWait",
    "RankDump",
    "ReadResult",
    "Side",
    "StuckPoint",
    "UnreadableDump",
    "analyze_dumps",
    "analyze_files",
    "dump_stem",
    "find_dump_files",
    "locate",
    "looks_like_dump",
    "outlier_payload",
    "overview",
    "p2p_payload",
    "parse_dump",
    "rank_from_name",
    "read_all",
    "read_dump",
    "read_files",
    "stuck_payload",
    "summarize",
    "to_op",
    "unreadable_files",
    "wanted_frames",
]
