"""config.env_missing from logs: a launcher variable (RANK, WORLD_SIZE, MASTER_ADDR, ...)
that init_process_group or the script needs is not set."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import comm_view, quoted_finding
from triage.rules.logs._signals import Found, Signal, ids, ranks_of, signals, tracebacks

_ERROR_TEXT = re.compile(
    r"rendezvous|KeyError|expected, but not set|process group has not been initialized|mpi4py"
)
_FIX = (
    "Start the script with a launcher that sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and "
    "MASTER_PORT (torchrun, or srun with a wrapper that exports them), or pass rank, world_size "
    "and init_method to init_process_group explicitly; read optional variables with "
    "os.environ.get(NAME, default)."
)

_LOCAL_COORD = re.compile(r"local_coord|local_idx")
_CCL_TEXT = re.compile(r"init_process_group|ProcessGroup|ccl|xccl")
_CCL_LOCAL_FIX = (
    "oneCCL reads each process's local rank and count from its launcher: run under mpirun "
    "(MPI_LOCALRANKID/MPI_LOCALNRANKS), or set CCL_PROCESS_LAUNCHER=torchrun under torchrun "
    "(LOCAL_RANK/LOCAL_WORLD_SIZE), or CCL_PROCESS_LAUNCHER=none with CCL_LOCAL_RANK and "
    "CCL_LOCAL_SIZE exported per process (what a launcher such as accelerate must set)."
)
_CCL_PROVIDER_FIX = (
    "`fi_info -l` lists the libfabric providers the process sees: point FI_PROVIDER_PATH at "
    "the providers oneCCL ships (`lib/prov` beside its libfabric), name one that exists with "
    "FI_PROVIDER (tcp, shm, efa, ...), or use CCL_ATL_TRANSPORT=mpi under mpirun; in a "
    "container, give /dev/shm room (`--shm-size`) for the shm provider."
)

_EMPTY_FIX = (
    "Give the launcher the address instead of letting it derive one: `deepspeed --master_addr "
    "IP`, `torchrun --master-addr IP` or `--rdzv-endpoint IP:PORT`, MASTER_ADDR exported from "
    "the scheduler (`scontrol show hostnames $SLURM_NODELIST | head -n1`); the address must be "
    "one every node reaches. Where the launcher derives it (`hostname -I` on the first host of "
    "the hostfile), run that command there: it printed nothing."
)


@rule("logs.env_missing", "config.env_missing")
def env_missing(evidence: EvidenceSet) -> Iterator[Finding]:
    """A variable the launcher should have set is missing when the job starts.

    What it detects:
    `Error initializing torch.distributed using env:// rendezvous: environment variable
    RANK expected, but not set` (also WORLD_SIZE, MASTER_ADDR, MASTER_PORT; the tcp:// and
    file:// forms `rank parameter missing`, `world size parameter missing`); a script's
    `KeyError: 'LOCAL_RANK'` (RANK, WORLD_SIZE, MASTER_*, SLURM_*, OMPI_COMM_WORLD_*);
    a traceback through `os.environ["LOCAL_RANK"]` (its KeyError line lost or reworded);
    an exception naming the variable (torch's `LOCAL_RANK is not in the environment`,
    `environment variable MASTER_PORT is not set`; not the same words in a warning);
    a launch command or environment whose MASTER_ADDR / --master_addr is empty (DeepSpeed's
    `Using IP address of  for node`: the address it derived from `hostname -I` was blank);
    weaker: `Default process group has not been initialized` and DeepSpeed's `Not using
    the DeepSpeed or dist launchers` (the script ran without a launcher). Intel oneCCL's
    `could not get local_idx/count from environment variables` beside its failure (0.7 when
    the failure names the local coordinates, else 0.45), and its OFI transport finding no
    libfabric provider (`fi_getinfo error`, `can't find suitable provider`: 0.45).

    Why it happens:
    The script was started with plain `python` instead of torchrun/srun/deepspeed, a
    SLURM or MPI wrapper does not export the torch variables, or the init method expects
    env:// while the code passes no rank/world size; a launcher that derives MASTER_ADDR
    (from the hostfile's first host, SLURM_NODELIST) got nothing back.

    Evidence:
    The rendezvous error or KeyError naming the variable, on the ranks that report it.

    Fix:
    Launch with torchrun (or export RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    from the scheduler's variables), or pass rank/world_size/init_method explicitly.

    Known false positives:
    `Default process group has not been initialized` also follows a code path that skips
    init_process_group on purpose (single-process runs); it scores low.

    References:
    torch.distributed docs, "Environment variable initialization"; torchrun docs
    ("Environment variables").
    """
    explicit = signals(evidence, "setup.rendezvous_env_missing", "setup.env_key_error")
    explicit += _raised_named(evidence)
    # A traceback through `os.environ["LOCAL_RANK"]` whose KeyError line was lost or reworded.
    read = signals(evidence, "setup.env_read") if tracebacks(evidence) else []
    weak = signals(evidence, "setup.default_group_missing", "setup.deepspeed_no_launcher")
    empty = signals(evidence, "setup.empty_master_addr")
    items = explicit or read or empty or weak
    if not items:
        yield from _oneccl(evidence)
        return
    names = sorted(
        {
            str(s.fields.get("variable") or s.fields.get("parameter"))
            for _, s in explicit or read
            if s.fields.get("variable") or s.fields.get("parameter")
        }
    )
    ranks = ranks_of(s for _, s in items)
    fix = _FIX
    if explicit:
        what = f"{', '.join(names)} not set when the job started"
        confidence = (
            0.9 if any(s.signature == "setup.rendezvous_env_missing" for _, s in explicit) else 0.85
        )
    elif read:
        what = f"{', '.join(names)} not set when the job started (read in the failing traceback)"
        confidence = 0.6
    elif empty:
        what = "MASTER_ADDR is empty in the launch: the ranks have no rendezvous address"
        confidence, fix = 0.7, _EMPTY_FIX
    else:
        what = "the script ran without a distributed launcher"
        confidence = (
            0.45 if any(s.signature == "setup.default_group_missing" for _, s in weak) else 0.35
        )
    yield Finding(
        title=what,
        summary=f"`{items[0][1].text[:200]}`",
        ranks=ranks,
        location=comm_view(evidence).location(ranks, _ERROR_TEXT),
        confidence=confidence,
        evidence=ids(items)[:12],
        fix=fix,
        confirm="`cat /proc/PID/environ | tr '\\0' '\\n' | grep -E 'RANK|WORLD|MASTER'` on a rank "
        "lacks the variable (or the job was started with plain python)",
    )


def _raised_named(evidence: EvidenceSet) -> list[Signal]:
    """A library's words for a missing variable count where an exception carries them: the
    same words in a warning (`MASTER_ADDR is not set, using localhost`) are not a failure."""
    raised = [record.message for _, record in tracebacks(evidence)]
    return [
        (e, s)
        for e, s in signals(evidence, "setup.env_named_missing")
        if any(s.fields["variable"] in message for message in raised)
    ]


def _oneccl(evidence: EvidenceSet) -> Iterator[Finding]:
    """oneCCL's set-up from the environment: no launcher variable gave it the local rank
    and count (a warning that precedes success when its transport supplies them, so it
    counts only beside a failure), or libfabric offered its OFI transport no provider."""
    local = signals(evidence, "ccl.local_coord_missing")
    errors = signals(evidence, "ccl.error")
    failed = errors or tracebacks(evidence)
    providers = signals(evidence, "ccl.no_provider")
    if local and failed:
        about = any(_LOCAL_COORD.search(str(s.fields.get("message", ""))) for _, s in errors)
        what = "oneCCL found no launcher variable naming each process's local rank and count"
        found: list[Found] = [(0.7 if about else 0.45, what, local + errors, _CCL_LOCAL_FIX)]
    elif providers:
        what = "oneCCL's OFI transport found no usable libfabric provider"
        found = [(0.45, what, providers, _CCL_PROVIDER_FIX)]
    else:
        return
    yield quoted_finding(
        evidence,
        found,
        _CCL_TEXT,
        "the same launch with the variables set (or under mpirun) gets past oneCCL's "
        "initialisation",
    )
