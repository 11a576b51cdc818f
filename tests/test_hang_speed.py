"""The shortcuts that make `triage hang` and the probe-snapshot reader fast give the answers
the plain ways give: no timing here, only equality (bench/hang_latency.py and
bench/probe_snapshots.py measure).

- host facts: library versions found on the few lines of /proc/PID/maps that name the
  library, and read once per file however many ranks map it;
- process discovery: the launcher above a parent found once for all its ranks;
- probe snapshots: tensor records split out of the probe's JSON and validated once per
  distinct record, read exactly as a whole validation reads them, and tallied once per
  tensor list that ranks share.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from pydantic import ValidationError

from tests.conftest import wait_for_environ
from triage.observations import MeshRecord, ProbeSnapshot, TensorRecord, TensorStats
from triage.readers import host_facts, probe_snapshots, processes
from triage.readers.probe_snapshots import (
    SnapshotHead,
    SnapshotReader,
    UnusableSnapshot,
    _invalid,
)
from triage.registry import REGISTRY

# --- host facts --------------------------------------------------------------------------

MAPS = """\
7f00-7f01 r--p 00000000 08:01 11  /usr/lib/x86_64-linux-gnu/libc.so.6
7f01-7f02 r-xp 00000000 08:01 12  /opt/other/torch/lib/notes.txt
7f02-7f03 r--p 00000000 08:01 13  /venv/site-packages/torch/lib/libtorch_cpu.so
7f03-7f04 r-xp 00000000 08:01 13  /venv/site-packages/torch/lib/libtorch_cpu.so
7f04-7f05 r--p 00000000 08:01 14  /venv/site-packages/nvidia/nccl/lib/libnccl.so.2.21.5
7f05-7f06 rw-p 00000000 00:00 0   [heap]
"""


def test_library_lines_are_found_as_a_search_of_the_whole_text_finds_them() -> None:
    for pattern, needle in (
        (host_facts._TORCH_LIB, "/lib/libtorch"),
        (host_facts._NCCL_LIB, "/libnccl.so"),
    ):
        for text in (MAPS, MAPS.replace("\n", " \n"), "", "no libraries here\n"):
            whole = pattern.search(text)
            found = host_facts._search_lines(pattern, text, needle)
            assert (found and found.group(0)) == (whole and whole.group(0))


def test_versions_are_read_once_per_file_for_every_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch_dir = tmp_path / "venv/site-packages/torch"
    (torch_dir / "lib").mkdir(parents=True)
    (torch_dir / "version.py").write_text("__version__ = '2.14.0+cpu'\n")
    nccl_dir = tmp_path / "venv/site-packages/nvidia/nccl/lib"
    nccl_dir.mkdir(parents=True)
    (tmp_path / "venv/site-packages/nvidia_nccl_cu13-2.30.7.dist-info").mkdir()
    maps = MAPS.replace("libnccl.so.2.21.5", "libnccl.so")
    reads: list[str] = []
    real = host_facts._torch_version

    def counted(path: str) -> str | None:
        reads.append(path)
        return real(path)

    monkeypatch.setattr(host_facts, "_torch_version", counted)
    versions = {host_facts._versions(maps, str(tmp_path)) for _ in range(8)}
    assert versions == {("2.14.0+cpu", "2.30.7")}
    assert len(reads) == 1
    (torch_dir / "version.py").write_text("__version__ = '2.15.0'\n")  # a new file: read again
    assert host_facts._versions(maps, str(tmp_path))[0] == "2.15.0"


# --- process discovery -------------------------------------------------------------------

LAUNCHER = """\
import subprocess, sys, time  # torchrun stands in for the launcher by its name
ranks = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]) for _ in range(3)]
print(" ".join(str(rank.pid) for rank in ranks), flush=True)
time.sleep(600)
"""


@pytest.fixture
def launched() -> Iterator[tuple[int, list[int]]]:
    """A launcher (named torchrun in its command line) and its three ranks."""
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER], stdout=subprocess.PIPE, text=True)
    try:
        assert launcher.stdout is not None
        ranks = [int(pid) for pid in launcher.stdout.readline().split()]
        wait_for_environ(ranks)
        yield launcher.pid, ranks
    finally:
        for child in psutil.Process(launcher.pid).children(recursive=True):
            child.kill()
        launcher.kill()
        launcher.wait()


def test_ranks_of_one_launcher_share_what_was_found_above_them(
    launched: tuple[int, list[int]],
) -> None:
    launcher, ranks = launched
    found: processes.Launchers = {}
    shared = [processes.read_process(pid, "host", found) for pid in ranks]
    alone = [processes.read_process(pid, "host") for pid in ranks]
    assert shared == alone
    assert {(p.launcher, p.launcher_pid) for p in shared} == {("torchrun", launcher)}
    assert found == {launcher: ("torchrun", launcher)}


# --- probe snapshots ---------------------------------------------------------------------

DDP = ["DistributedDataParallel"]
MESH = MeshRecord(device_type="cpu", shape=[2, 2], dim_names=["dp", "tp"], ranks=[0, 1, 2, 3])


def stats(content: object, nonfinite: int = 0) -> TensorStats:
    digest = hashlib.blake2b(repr(content).encode(), digest_size=16).hexdigest()
    return TensorStats(checksum=digest, sum=1.0, norm=1.0, nonfinite=nonfinite)


def record(name: str, value: object, grad: object = None, **fields: Any) -> TensorRecord:
    """A parameter whose content is `value` (and gradient `grad`; None: no .grad)."""
    return TensorRecord(
        name=name,
        kind="parameter",
        shape=[4, 4],
        dtype="torch.float32",
        device="cpu",
        requires_grad=True,
        value=value if isinstance(value, TensorStats) else stats(value),
        grad=grad if isinstance(grad, TensorStats) or grad is None else stats(grad),
        **fields,
    )


def write(folder: Path, rank: int, call: int, tensors: list[TensorRecord], **fields: Any) -> None:
    """One rank's snapshot twice: in `folder/probe` as triage.probe writes it (json.dumps'
    separators), in `folder/whole` indented (which the reader reads whole)."""
    snapshot = ProbeSnapshot(
        rank=rank,
        world_size=4,
        host="node0",
        pid=100 + rank,
        time=1e9 + call,
        call=call,
        tag=f"step {call}",
        tensors=tensors,
        **fields,
    )
    name = f"triage-probe-rank{rank}-call{call:04d}-pid{100 + rank}.json"
    data = snapshot.model_dump(mode="json")
    for sub, text in (("probe", json.dumps(data)), ("whole", json.dumps(data, indent=1))):
        (folder / sub).mkdir(parents=True, exist_ok=True)
        (folder / sub / name).write_text(text)


def ddp(folder: Path, rank: int) -> None:
    """Replicas, one rank's gradients of one parameter unreduced."""
    for call in range(2):
        tensors = [record("fc.weight", call, grad=0.5), record("fc.bias", call, grad=rank == 2)]
        write(folder, rank, call, tensors, wrappers=DDP)


def fsdp1(folder: Path, rank: int) -> None:
    """FSDP1's flat shards: never compared."""
    write(folder, rank, 0, [record("flat", rank, grad=rank)], wrappers=["FullyShardedDataParallel"])


def tensor_parallel(folder: Path, rank: int) -> None:
    """DTensors on a 2x2 mesh: replicated over dp, sharded over tp."""
    tensors = [
        record("w", rank // 2, grad=rank % 2, placements=["Replicate()", "Shard(dim=0)"], mesh=0)
    ]
    write(folder, rank, 0, tensors, meshes=[MESH])


def nan(folder: Path, rank: int) -> None:
    grad = stats("nan", nonfinite=4) if rank == 1 else 0.5
    write(folder, rank, 0, [record("fc.weight", 1.0, grad=grad)], wrappers=DDP)


def unused(folder: Path, rank: int) -> None:
    tensors = [
        record("fc.weight", 1.0, grad=0.5),
        record("head", 2.0, grad=None if rank == 3 else 1.0),
    ]
    write(folder, rank, 0, tensors, wrappers=DDP)


def empty(folder: Path, rank: int) -> None:
    write(folder, rank, 0, [])


JOBS = {job.__name__: job for job in (ddp, fsdp1, tensor_parallel, nan, unused, empty)}


def read_whole(path: Path) -> tuple[object, object]:
    """A file's head and snapshot as a whole validation reads them (or the errors)."""
    data = path.read_bytes()
    try:
        head: object = SnapshotHead.model_validate_json(data)
    except ValidationError as exc:
        head = str(_invalid(exc))
    try:
        snapshot: object = ProbeSnapshot.model_validate_json(data).model_dump()
    except ValidationError as exc:
        snapshot = str(_invalid(exc))
    return head, snapshot


def read_split(path: Path, reader: SnapshotReader | None = None) -> tuple[object, object]:
    """The same through SnapshotReader."""
    reader = reader or SnapshotReader()
    heads, unreadable = reader.heads([str(path)])
    head = heads[0][1] if heads else unreadable[0][1]
    try:
        snapshot: object = reader.load(str(path)).model_dump()
    except UnusableSnapshot as exc:
        snapshot = str(exc)
    return head, snapshot


def evidence(folder: Path) -> str:
    """The tool's evidence and gaps, with the folder's path taken out."""
    run = REGISTRY.run("read_probe_snapshots", {"snapshot_files": [str(folder)]})
    items = [e.model_dump() for e in run.evidence] + [g.model_dump() for g in run.gaps]
    return json.dumps(items, sort_keys=True).replace(str(folder), "FOLDER")


@pytest.mark.parametrize("job", list(JOBS))
def test_snapshots_as_the_probe_writes_them_read_as_whole_ones(tmp_path: Path, job: str) -> None:
    for rank in range(4):
        JOBS[job](tmp_path, rank)
    reader = SnapshotReader()
    for path in sorted((tmp_path / "probe").glob("*.json")):
        assert reader._split(path.read_bytes()) is not None, path  # read the fast way
        assert read_split(path, reader) == read_whole(path)
    assert evidence(tmp_path / "probe") == evidence(tmp_path / "whole")


def test_beyond_the_records_it_keeps_the_reader_reads_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sharded model's records differ on every rank: kept, they would only cost memory."""
    monkeypatch.setattr(probe_snapshots, "MAX_RECORDS", 2)
    for rank in range(4):
        fsdp1(tmp_path, rank)
    reader = SnapshotReader()
    for path in sorted((tmp_path / "probe").glob("*.json")):
        assert read_split(path, reader) == read_whole(path)
    assert len(reader._records) == 2
    assert evidence(tmp_path / "probe") == evidence(tmp_path / "whole")


def test_replicas_share_records_and_lists(tmp_path: Path) -> None:
    for rank in range(4):
        ddp(tmp_path, rank)
    reader = SnapshotReader()
    rank0, rank1, rank2 = (
        reader.load(str(tmp_path / "probe" / f"triage-probe-rank{r}-call0001-pid{100 + r}.json"))
        for r in range(3)
    )
    assert rank0.tensors is rank1.tensors and reader.shares(rank0)
    assert rank2.tensors is not rank0.tensors  # its gradient differs: a list of its own
    assert rank2.tensors[0] is rank0.tensors[0]  # its other record is theirs


def text_of(**fields: Any) -> str:
    data: dict[str, Any] = {"format": "triage.probe/1", "rank": 0, "host": "h", "pid": 1}
    tensors = [record("a", 1).model_dump(mode="json"), record("b", 2).model_dump(mode="json")]
    return json.dumps(data | {"time": 1.0, "call": 0, "tensors": tensors} | fields)


def named(name: str) -> dict[str, Any]:
    return record(name, 1).model_dump(mode="json")


ODD_FILES = {
    "a separator inside a name": text_of(tensors=[named('x, {"name": "y"}')]),
    "the list's end inside the last name": text_of(tensors=[named("a"), named("x}]y")]),
    "a list named tensors in the optimizer": text_of(optimizer={"tensors": [named("c")]}),
    "tensors given twice": text_of()[:-1] + ', "tensors": []}',
    "tensors given twice, once escaped": text_of()[:-1] + ', "tensor\\u0073": []}',
    "an escape elsewhere": text_of(host="n\u00f6de"),
    "an invalid record": text_of(tensors=[named("a"), {"name": "b"}]),
    "broken JSON in a record": text_of().replace('"kind"', '"kind",,', 1),
    "broken JSON after the list": text_of() + " trailing",
    "cut short": text_of()[:150],
    "no tensors": text_of().replace('"tensors"', '"other"'),
}


@pytest.mark.parametrize("name", list(ODD_FILES))
def test_odd_files_read_as_whole_ones_with_the_same_errors(tmp_path: Path, name: str) -> None:
    path = tmp_path / "triage-probe-rank0-call0000-pid1.json"
    path.write_text(ODD_FILES[name])
    assert read_split(path) == read_whole(path)


def test_no_slurm_job_imports_no_slurm_collector() -> None:
    """`--slurm-job`'s check imports the collector only when the option is given: a plain
    `triage hang` paid 95 ms for it."""
    code = (
        "import sys\nfrom triage.whole_job_args import slurm_job_arg\n"
        "slurm_job_arg(None)\nprint('triage.collection.slurm' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
