"""config.launcher_args from logs: the launcher passes arguments the script does not accept,
or the script wants arguments the launcher no longer passes."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from triage.models import Finding, Location
from triage.observations import LogSignal, TracebackRecord
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import comm_view, quoted_finding
from triage.rules.logs._signals import Signal, ids, ranks_of, signals, tracebacks
from triage.text import rank_label

_ARGPARSE = (
    "setup.unrecognized_arguments",
    "setup.required_arguments",
    "setup.hf_unused_arguments",
)
_FIX_EXTRA = (
    "Accept what the launcher passes: `parser.add_argument('--local-rank', '--local_rank', "
    "type=int, default=int(os.environ.get('LOCAL_RANK', 0)))` (torch>=2.0's launch passes the "
    "dashed --local-rank=N), or launch with torchrun and read os.environ['LOCAL_RANK']."
)
_FIX_REQUIRED = (
    "torchrun sets LOCAL_RANK in the environment instead of passing --local_rank: make the "
    "argument optional with `default=int(os.environ.get('LOCAL_RANK', 0))`, or read "
    "os.environ['LOCAL_RANK'] directly."
)
#: The launchers' own command-line handling: an exception raised here is the launch command's.
_LAUNCHER_CODE = re.compile(
    r"torch/distributed/(?:run|launch)\.py$|deepspeed/launcher/\w+\.py$"
    r"|accelerate/commands/(?:launch|accelerate_cli)\.py$"
)
_FIX_OWN = (
    "Give the launcher the values it expects, in its own options before the script name: "
    "--nproc-per-node a number (or gpu, cpu, auto), --nnodes N or MIN:MAX; a wrapper script "
    "(dist_train.sh CONFIG GPUS ...) takes its positional arguments in order, so the GPU count "
    "must come right after the config."
)
_FIX_OTHER = (
    "Make the launch command and the script's argument parser agree: every argument after the "
    "script name goes to the script, launcher options (--nproc-per-node, --master-port, ...) "
    "go before it."
)


@rule("logs.launcher_args", "config.launcher_args")
def launcher_args(evidence: EvidenceSet) -> Iterator[Finding]:
    """The launcher and the script disagree on the script's command-line arguments.

    What it detects:
    Lightning's `You set --ntasks=8 in your SLURM bash script, but this variable is not
    supported` and `Lightning attempted to launch new distributed processes with local_rank >
    0` (0.75 each: Slurm's task count, or a launcher around Lightning's own);
    argparse's `error: unrecognized arguments: --local-rank=0` (or `--local_rank=0`),
    `error: the following arguments are required: --local_rank`, transformers'
    `Some specified arguments are not used by the HfArgumentParser: [...]`; an exception
    raised in the launcher's own code (torchrun's `int(nproc_per_node)` given `--work-dir`
    by a wrapper script's shifted arguments); argparse's usage block without its error line
    (0.4; 0.6 when it lists a --local-rank or --local_rank option); supported by
    the `torch.distributed.launch is deprecated` warning and by every worker exiting with
    code 2 (argparse's usage error) right away. torch's `Cannot re-initialize CUDA in forked
    subprocess` (0.7): the launch forks its processes (a notebook launcher, the fork start
    method) after the parent initialised CUDA; Lightning's `Lightning can't create new
    processes if CUDA is already initialized` (0.7) likewise. A trainer's settings against
    the launch's: transformers' `Please correct the following DeepSpeed config values that
    mismatch TrainingArguments values`, accelerate's `--mixed_precision arg cannot be set to
    bf16 when fp16 is set in the DeepSpeed config file`, Lightning's `Do not set
    gradient_accumulation_steps in the DeepSpeed config` (0.7: a batch size written for
    another world size reads above it); Lightning's `strategy='ddp' is not compatible with
    an interactive environment` (0.75); the spawn start method
    re-importing a main module without its `if __name__ == '__main__':` guard (`An attempt
    has been made to start a new process before the current process has finished its
    bootstrapping phase`, 0.7) or failing to pickle what a process runs (`Can't pickle local
    object` where spawn's frames or Lightning's ddp_spawn show it was starting processes,
    0.45; torch.save and deepcopy fail alike elsewhere); a launch option's value
    (torchrun's `Unsupported nproc_per_node value: ''`, accelerate's `The port number of the
    rendezvous endpoint 'None:None' must be an integer`, 0.55). The scheduler's or MPI's
    refusal of the launch line: srun's `Unable to create step for job 4123: More processors requested than
    permitted` (0.7), srun waiting on resources another step holds (`step creation
    temporarily disabled, retrying (Requested nodes are busy)`, 0.6: an srun inside a script
    srun started; not when `Step created for StepId=...` follows), mpirun's `There are not enough slots available in the system to satisfy
    the 8 slots` (0.75); a request no node can serve (0.65: Slurm's `Requested node
    configuration is not available`, Kubernetes' `0/4 nodes are available: 4 Insufficient
    nvidia.com/gpu`); Slurm refusing the request as written (0.6: sbatch's `Batch job
    submission failed: Requested GRES option unsupported`, `You must always specify a type
    when requesting gpu GRES`, an unrecognized option, srun's `Invalid generic resource
    (gres) specification` or a missing MPI plugin).

    Why it happens:
    `torch.distributed.launch` appends `--local-rank=N` to the script's argv (torch >= 2.0
    spells it with a dash, older versions `--local_rank`); scripts written for the other
    spelling, or for torchrun (which passes nothing and sets LOCAL_RANK instead), reject it
    or miss it. Arguments meant for the launcher placed after the script name reach the
    script instead.

    Evidence:
    The argparse error lines (the offending arguments, the script name), launcher exit
    reports with exit code 2.

    Fix:
    Declare both spellings (`--local-rank`, `--local_rank`) with a default from
    os.environ['LOCAL_RANK'], or switch to torchrun and read LOCAL_RANK from the
    environment; put launcher options before the script name.

    Known false positives:
    An argparse error about the script's own options (a typo in the command) is a launch
    error too, but not a launcher/script mismatch; it scores lower. Exit code 2 alone can
    come from other causes (it scores low without the argparse text).

    References:
    torch.distributed.launch / torchrun docs ("Transitioning from torch.distributed.launch
    to torchrun"); Python argparse.
    """
    yield from _forked_after_cuda(evidence)
    yield from _lightning_launch(evidence)
    yield from _trainer_settings(evidence)
    yield from _scheduler_launch(evidence)
    parsed = signals(evidence, *_ARGPARSE)
    deprecated = signals(evidence, "setup.launch_deprecated")
    exits = [
        (e, s)
        for e, s in signals(evidence, "elastic.worker_failed", "elastic.child_failed")
        if s.fields.get("exitcode") == 2
    ]
    if parsed:
        launcher = [(e, s) for e, s in parsed if s.fields.get("launcher_flags")]
        items = launcher or parsed
        first = items[0][1]
        flags = sorted({f for _, s in launcher for f in s.fields["launcher_flags"]})
        required = first.signature == "setup.required_arguments"
        if launcher:
            confidence = 0.92
            what = (
                f"the script requires {', '.join(flags)}, which the launcher does not pass"
                if required
                else f"the script rejects the launcher's {', '.join(flags)}"
            )
            local_rank = any("local" in f for f in flags)
            fix = _FIX_REQUIRED if required else _FIX_EXTRA if local_rank else _FIX_OTHER
        else:
            confidence = 0.65 if exits else 0.55
            what = "argparse rejected the script's command line"
            fix = _FIX_OTHER
        every = items + exits + deprecated
        ranks = ranks_of(s for _, s in items) or ranks_of(s for _, s in exits)
        yield Finding(
            title=what,
            summary=f"`{first.text[:200]}`" + _exit_note(exits) + _launch_note(deprecated),
            ranks=ranks,
            location=_script(first),
            confidence=confidence,
            evidence=ids(every)[:12],
            fix=fix,
            confirm="the workers' stderr shows argparse's usage line and error before any training output",
        )
        return
    own = [(e, t) for e, t in tracebacks(evidence, dumps=False) if _launchers_own(t)]
    if own:
        raised = own[0][1]
        frame = raised.frames[0]
        yield Finding(
            title="the launcher rejected its own command line",
            summary=f"{raised.exception}: {raised.message[:160]} raised in the launcher's own"
            f" {frame.function}() ({frame.file.rsplit('/', 1)[-1]}:{frame.line}), before any"
            " worker started.",
            ranks=[],
            location=frame.location(),
            confidence=0.6,
            evidence=ids([*own, *deprecated])[:12],
            fix=_FIX_OWN,
            confirm="the launch command (a wrapper script's positional arguments: the GPU count,"
            " --nproc-per-node) holds the value the message quotes",
        )
        return
    usage = signals(evidence, "setup.usage_printed")
    if usage:
        spelled = signals(evidence, "setup.usage_local_rank")
        flag = f" and it lists `{spelled[0][1].fields['flag']}`" if spelled else ""
        yield Finding(
            title="a script printed its usage: argparse rejected its command line",
            summary=f"`{usage[0][1].text.strip()[:160]}`: argparse prints the usage when it"
            f" rejects the command line{flag}"
            + (
                ", the option a launcher fills in (torch.distributed.launch passes"
                " --local_rank=N before torch 2.0, --local-rank=N since)"
                if spelled
                else ""
            )
            + "; the error line under it says which argument."
            + _exit_note(exits)
            + _launch_note(deprecated),
            ranks=ranks_of(s for _, s in usage + exits),
            location=_script(usage[0][1]),
            confidence=(0.6 if spelled else 0.4) + (0.05 if exits else 0.0),
            evidence=ids(usage + spelled + exits + deprecated)[:12],
            fix=_FIX_EXTRA if spelled else _FIX_OTHER,
            confirm="the line after the usage is `error: unrecognized arguments: ...` or"
            " `the following arguments are required: ...`",
        )
        return
    if exits:
        ranks = ranks_of(s for _, s in exits)
        who = rank_label(ranks).capitalize() if ranks else "Workers"
        yield Finding(
            title="workers exited with code 2 (argparse's usage error)",
            summary=f"{who} exited with code 2, the code argparse exits with when it rejects "
            "the command line." + _launch_note(deprecated),
            ranks=ranks,
            confidence=0.55 if deprecated else 0.35,
            evidence=ids(exits + deprecated)[:12],
            fix=_FIX_EXTRA,
            confirm="the workers' own stderr shows `error: unrecognized arguments` or a usage line",
        )


_FORKED = re.compile("re-initialize CUDA in forked subprocess")


def _forked_after_cuda(evidence: EvidenceSet) -> Iterator[Finding]:
    """The launch forks its processes after the parent touched CUDA: the start method (fork,
    a notebook launcher's only one) and the parent's early CUDA use disagree."""
    forked = signals(evidence, "setup.cuda_after_fork")
    if not forked:
        return
    ranks = ranks_of(s for _, s in forked)
    yield Finding(
        title="a process forked after CUDA was initialised tried to use CUDA",
        summary=f"`{forked[0][1].text.strip()[:160]}`: the processes were forked (a notebook"
        " launcher, the fork start method, a DataLoader worker) from a parent that had already"
        " initialised CUDA, and a forked process cannot initialise it again.",
        ranks=ranks,
        location=comm_view(evidence).location(ranks, _FORKED),
        confidence=0.7,
        evidence=ids(forked)[:12],
        fix="Touch nothing on CUDA in the parent before it forks: move every .cuda()/.to('cuda')"
        " and torch.cuda call (a constructor's or an import's too) into the function each process"
        " runs; or start the processes with spawn (mp.spawn or start method 'spawn', Lightning"
        " strategy='ddp' from a script instead of ddp_notebook); keep CUDA out of DataLoader"
        " workers (multiprocessing_context='spawn').",
        confirm="the parent calls CUDA (a model moved to the GPU, torch.cuda.is_available() at"
        " import) before the launcher forks",
    )


def _lightning_launch(evidence: EvidenceSet) -> Iterator[Finding]:
    """Lightning reading the launch it runs under: Slurm's --ntasks without --ntasks-per-node
    (it counts tasks per node), or a process that already has a local rank asked to start
    processes of its own (a second launcher around Lightning's)."""
    for name, title, fix in _LIGHTNING:
        found = signals(evidence, name)
        if found:
            yield quoted_finding(
                evidence,
                [(0.75, title, found, fix)],
                _LIGHTNING_TEXT,
                "the launch command and the Trainer's devices/num_nodes/strategy, side by side",
            )


_LIGHTNING_TEXT = re.compile(r"Lightning|SLURM|local_rank")


_LIGHTNING = (
    (
        "lightning.slurm_ntasks",
        "Slurm's --ntasks does not tell Lightning how many tasks run per node",
        "Ask Slurm for tasks per node: --ntasks-per-node equal to Trainer(devices=...) and --nodes"
        " equal to num_nodes (srun python train.py, one task per GPU).",
    ),
    (
        "lightning.relaunch",
        "Lightning was asked to launch processes from a process that already has a local rank",
        "Let one launcher start the processes: run the script with plain python and let"
        " Lightning launch them, or keep torchrun/srun and let Lightning detect it (its"
        " environment variables unchanged: no LOCAL_RANK set by hand or by a wrapper script).",
    ),
)


def _trainer_settings(evidence: EvidenceSet) -> Iterator[Finding]:
    """A trainer's settings against the launch's: transformers' and accelerate's arguments
    against the DeepSpeed config, a notebook with a strategy that starts scripts, a launch
    option's value, and the spawn start method (it re-imports the main module and pickles
    what each process runs)."""
    yield from _worded(
        evidence,
        _SETTINGS,
        _setting_refused,
        _SETTINGS_TEXT,
        "the launch command and the trainer's settings (its arguments, the DeepSpeed config"
        " file, the strategy) side by side",
    )


_SETTINGS_TEXT = re.compile(r"deepspeed|accelerate|Trainer|lightning|spawn|run\.py")
#: The spawn start method's own frames: what it could not pickle was a new process's target.
_SPAWNING = re.compile(r"multiprocessing/(?:reduction|popen_spawn_\w+|spawn)\.py$")


def _setting_refused(evidence: EvidenceSet, name: str) -> list[Signal]:
    """The refusals of `name`; a pickling failure only where the spawn start method was at
    work (its frames, or Lightning choosing ddp_spawn): torch.save and deepcopy of a model
    fail alike on a local object."""
    found = signals(evidence, name)
    if name != "spawn.unpicklable" or not found:
        return found
    spawning = signals(evidence, "spawn.started") or any(
        _SPAWNING.search(frame.file) for _, t in tracebacks(evidence) for frame in t.frames
    )
    return found if spawning else []


_SETTINGS = (
    (
        "trainer.deepspeed_config_differs",
        0.7,
        "the trainer's arguments and the DeepSpeed config file disagree",
        "Let one side own each value: set the DeepSpeed config's batch size, accumulation,"
        ' precision and optimizer values to "auto" (transformers and accelerate fill them from'
        " their own arguments), or make the arguments (--per_device_train_batch_size,"
        " --gradient_accumulation_steps, --bf16/--fp16, accelerate's --mixed_precision,"
        " Lightning's accumulate_grad_batches) say what the file says.",
    ),
    (
        "trainer.interactive_ddp",
        0.75,
        "a strategy that starts new scripts (ddp) was chosen inside a notebook",
        "In a notebook use strategy='ddp_notebook' (it forks the kernel; touch no CUDA before"
        " fit), or put the training in a script and run it with python or torchrun.",
    ),
    (
        "spawn.main_guard_missing",
        0.7,
        "a spawned process re-ran the main module's launch code (no `if __name__ == '__main__':`)",
        "Put the launch (mp.spawn, Trainer.fit, a DataLoader with workers, the call that starts"
        " training) under `if __name__ == '__main__':` in the main module: the spawn start"
        " method (the default on macOS and Windows, and mp.spawn's) imports the main module"
        " again in every new process.",
    ),
    (
        "trainer.launch_value",
        0.55,
        "a launch option's value the launcher cannot use",
        "Check the launch line's values as the shell expands them: --nproc_per_node a number"
        " (an unset variable leaves it empty), --main_process_port/--master_port a number and"
        " the options in the order the launcher expects.",
    ),
    (
        "spawn.unpicklable",
        0.45,
        "the spawn start method could not pickle what a new process runs",
        "Give spawned processes what pickle can send: module-level functions and classes (no"
        " lambdas, closures or classes defined inside a function), no open handles (loggers"
        " with connections, ctypes, open files) in the arguments or the module they pass; or"
        " launch with torchrun (strategy='ddp'), which starts scripts instead of pickling.",
    ),
)


def _scheduler_launch(evidence: EvidenceSet) -> Iterator[Finding]:
    """Slurm, MPI or a launcher's ssh refusing the launch line itself: it asks for more than
    the allocation or the hosts hold, for what another step of the job already holds, or for
    hosts the launching host cannot reach."""
    yield from _worded(
        evidence,
        _SCHEDULER,
        _still_refused,
        _SCHEDULER_TEXT,
        "the launch line (srun's or mpirun's options) beside the job's allocation"
        " (`scontrol show job`, the hostfile's slots)",
    )


def _worded(
    evidence: EvidenceSet,
    table: tuple[tuple[str, float, str, str], ...],
    found_by: Callable[[EvidenceSet, str], list[Signal]],
    about: re.Pattern[str],
    confirm: str,
) -> Iterator[Finding]:
    """The strongest of a table's refusals (signature, confidence, title, fix) that the
    text holds, quoted in its own words."""
    found = [
        (confidence, title, items, fix)
        for name, confidence, title, fix in table
        if (items := found_by(evidence, name))
    ]
    if found:
        yield quoted_finding(evidence, found, about, confirm)


def _still_refused(evidence: EvidenceSet, name: str) -> list[Signal]:
    """The refusals of `name`; srun's waits only where no step was created after them in
    the same file (a busy cluster makes srun wait, then start)."""
    items = signals(evidence, name)
    if name != "slurm.step_waiting":
        return items
    created = signals(evidence, "slurm.step_created")
    return [
        (e, s)
        for e, s in items
        if not any(c.path == s.path and c.line > s.line for _, c in created)
    ]


_SCHEDULER_TEXT = re.compile(r"srun|sbatch|salloc|mpirun|SLURM|nodes are available|ssh|pdsh")

_SCHEDULER = (
    (
        "slurm.step_refused",
        0.7,
        "srun asks for more than the job's allocation holds",
        "Ask srun for what the allocation holds: --ntasks or --ntasks-per-node, --gpus-per-task"
        " or --gres, --cpus-per-task and --mem within the sbatch/salloc request, or raise the"
        " request; one task per GPU.",
    ),
    (
        "slurm.step_waiting",
        0.6,
        "srun waits for resources another step of the same job holds",
        "Do not start a second step on resources a running step holds: run the script under"
        " one srun (no srun inside a script srun already started), or give the inner srun"
        " --overlap (Slurm 20.11 and later) and size each step with --exact.",
    ),
    (
        "scheduler.unsatisfiable",
        0.65,
        "the scheduler has no node that offers what the job requests",
        "Request what one node has: GPUs per node (Slurm --gres=gpu:N or --gpus-per-node,"
        " a pod's nvidia.com/gpu limit) at most a node's count (`sinfo -o '%N %G'`, `kubectl"
        " describe nodes`), memory and CPUs within a node's, and a partition or node selector"
        " whose nodes have GPUs; more GPUs come from more nodes, not more per node.",
    ),
    (
        "slurm.request_refused",
        0.6,
        "Slurm refused the job's request as written",
        "Write the request the way this cluster's Slurm takes it: the GPU request its"
        " configuration accepts (--gres=gpu:TYPE:N where a type is required, --gpus or"
        " --gpus-per-node where --gres is not), a partition, account and QoS the user may"
        " use, and an MPI plugin srun has (`srun --mpi=list`); `scontrol show config` and the"
        " site's documentation say which.",
    ),
    (
        "launcher.local_rank_disagrees",
        0.8,
        "the script's local rank disagrees with the launcher's",
        "Take the local rank from one place: read LOCAL_RANK from the environment the launcher"
        " sets (and drop a --local_rank default the script passes itself), or launch with the"
        " launcher whose variables the script reads (deepspeed, torchrun or mpirun, not one"
        " inside another).",
    ),
    (
        "launcher.ssh_failed",
        0.6,
        "the launcher could not start the job on another host over ssh",
        "Give the launching host passwordless ssh to every host in the hostfile (`ssh node-02"
        " true` must work from it without a prompt, on the port the hostfile's launcher uses),"
        " with the launcher tool (pdsh, mpirun) installed on every host; or start one launcher"
        " per node (torchrun, or DeepSpeed's --no_ssh with --node_rank).",
    ),
    (
        "mpi.not_enough_slots",
        0.75,
        "mpirun asks for more processes than its hosts offer slots",
        "Ask mpirun for at most the slots its hosts offer (-np against the hostfile's"
        " `host slots=N` or the allocation), one process per GPU; --oversubscribe only where"
        " more processes than slots are meant.",
    ),
)


def _launchers_own(record: TracebackRecord) -> bool:
    """An ordinary exception (not a worker's failure the launcher reports) raised in the
    launcher's own code: its argument handling."""
    return (
        bool(record.frames)
        and record.exception in ("ValueError", "TypeError", "KeyError", "AssertionError")
        and _LAUNCHER_CODE.search(record.frames[0].file) is not None
    )


def _script(signal: LogSignal) -> Location | None:
    prog = signal.fields.get("prog")
    return Location(file=str(prog)) if prog else None


def _exit_note(exits: list[Signal]) -> str:
    return " Workers exited with code 2, argparse's usage error." if exits else ""


def _launch_note(deprecated: list[Signal]) -> str:
    return (
        " The job uses torch.distributed.launch, which appends --local-rank=N to the script's arguments."
        if deprecated
        else ""
    )
