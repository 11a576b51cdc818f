"""Generic failure markers: lines that show a failure of one kind without naming its cause.

When no specific signature matches, these still tell which kind of failure the text shows
(a collective that timed out or mismatched, a communication library's error, memory
running out, a process killed), so a report says "a hang, cause not visible" with the next
step that would show it, instead of nothing at all.
"""

from __future__ import annotations

from triage.readers.signatures import signature

signature(
    "generic.collective_stall",
    r"collective operation timeout|Detected mismatch between collectives|"
    r"Timeout\(ms\)=\d+|ncclCommWatchdog|checkTimeout|[Ss]tall(?:ed)? (?:[Ii]nspector|ranks?)|"
    r"missing ranks:|due to a collective timeout|ranks timed out during dispatch|"
    r"due to collective timeout or exception|Observed flight recorder dump signal|"
    # DeepEP's expert-parallel kernels and CPU waits (`DeepEP timeout for dispatch receivers,
    # rank 3, ...`, `DeepEP error: timeout (dispatch CPU)`), TransformerEngine's userbuffers
    # (`[userbuffers.cu:...] ... expecting 1287 got 1286`, `CE deadlock DETECTED`)
    r"DeepEP\b[^\n]{0,60}?\btimeout|\[userbuffers\.cu:[^\]]+\][^\n]*?expecting \d+,? (?:got|observed) \d+|"
    r"CE deadlock DETECTED|"
    # torch 1.7's NCCL timeouts: NCCL_BLOCKING_WAIT's `Operation timed out!`, the async error
    # handler's `NCCL Operation Timed Out`
    r"^(?:RuntimeError: )?Operation timed out!|NCCL Operation Timed Out|"
    # vLLM's message queue from the driver to its workers: a worker stopped reading
    # (`No available shared memory broadcast block found in 60 seconds`; before 0.6.4 `No
    # available block found in 60 second.`)
    r"No available (?:shared memory broadcast )?block found in \d+ seconds?|"
    # Ascend's HCCL: `EI0006: Getting socket times out. Reason: Remote Rank did not send the
    # data in time`, `EI0002: The wait execution of the Notify register times out`
    r"Remote Rank did not send the data in time|The wait execution of the Notify register times out|"
    # SGLang's scheduler watchdog: a forward batch that did not finish in time
    r"[Ww]atchdog timeout \(self\.watchdog_timeout=\d+",
    anchors=(
        "collective operation timeout",
        "Detected mismatch between collectives",
        "Timeout(ms)=",
        "ncclCommWatchdog",
        "checkTimeout",
        "tall inspector",
        "tall Inspector",
        "tall rank",
        "talled rank",
        "missing ranks:",
        # ProcessGroupNCCL (torch >= 2.3): `Received a dump signal due to a collective
        # timeout from rank 0 and we will try our best to dump the debug info.`
        "due to a collective timeout",
        # vLLM's expert-parallel all2all: `Fault detected in EP all2all communication: one or
        # more ranks timed out during dispatch/combine.`
        "ranks timed out during dispatch",
        # the monitor thread ending the process after a watchdog's timeout (torch >= 2.6),
        # and a rank told by another's watchdog to dump its Flight Recorder buffer
        "due to collective timeout or exception",
        "Observed flight recorder dump signal",
        "DeepEP",
        "[userbuffers.cu:",
        "CE deadlock DETECTED",
        "Operation timed out!",
        "NCCL Operation Timed Out",
        "No available shared memory broadcast block found",
        "No available block found in",
        "Remote Rank did not send the data in time",
        "wait execution of the Notify register times out",
        "atchdog timeout (self.watchdog_timeout=",
    ),
    summary="a collective timed out, stalled or mismatched across ranks (cause not named)",
)

signature(
    "generic.comm_failure",
    r"NCCL (?:failure|error)|nccl(?:Internal|System|UnhandledCuda|Remote)Error|"
    r"nccl(?:InvalidUsage|InvalidArgument)|unhandled (?:system|cuda) error|"
    r"internal error - please report this issue to the NCCL developers|"
    r"Connection (?:refused|reset by peer|closed by peer)|DistNetworkError|"
    r"RendezvousConnectionError|RendezvousTimeoutError|c10d::.*?Store|"
    # a non-blocking communicator's own deadline (`NCCL timeout in communicator
    # initialization.`, `NCCL timeout in: .../NCCLUtils.cpp:197`)
    r"NCCL timeout in\b|"
    # ProcessGroupNCCL's watchdog died on an error of the collectives' stream; a custom
    # all-reduce kernel's CUDA check (vLLM's, SGLang's `custom_all_reduce.cuh:455`)
    r"watchdog thread terminated with exception|"
    r"Cuda error \S*all_?(?:reduce|gather)\S*:\d+ '[^']+'",
    anchors=(
        "NCCL timeout in",
        "NCCL failure",
        "NCCL error",
        "ncclInternalError",
        "ncclSystemError",
        "ncclUnhandledCudaError",
        "ncclRemoteError",
        "ncclInvalidUsage",
        "ncclInvalidArgument",
        "unhandled system error",
        "unhandled cuda error",
        "internal error - please report",
        "Connection refused",
        "Connection reset by peer",
        "Connection closed by peer",
        "c10d::",
        "watchdog thread terminated with exception",
        "Cuda error ",
    ),
    summary="a communication library or the rendezvous failed (cause not named)",
)

signature(
    "generic.out_of_memory",
    r"[Oo]ut of memory|OutOfMemory|OUT_OF_MEMORY|oom-kill|STATUS_ALLOC_FAILED|"
    r"[Nn]ot enough (?:(?:CPU|GPU|host|device|system) )?memory|"
    r"terminated with signal (?:Signals\.)?SIGKILL|exitcode\s*:\s*-9\b",
    anchors=(
        "ut of memory",
        "OutOfMemory",
        "OUT_OF_MEMORY",
        "oom-kill",
        "STATUS_ALLOC_FAILED",
        "ot enough memory",
        "ot enough CPU memory",
        "ot enough GPU memory",
        "ot enough host memory",
        "ot enough device memory",
        "ot enough system memory",
        "terminated with signal",
        "exitcode",
    ),
    summary="memory ran out, or a process was SIGKILLed as the OOM killer does (cause not named)",
)

# cuBLAS or cuDNN could not create its handle: the handle's workspace is allocated then,
# so a GPU whose memory is already full (another process, every rank on one device) fails
# here first; a CUDA build the driver or the card does not support is the other reading.
signature(
    "generic.cuda_library_init",
    r"(?:CUBLAS|CUDNN|CUSOLVER|CUSPARSE)_STATUS_NOT_INITIALIZED",
    anchors="_STATUS_NOT_INITIALIZED",
    summary="cuBLAS/cuDNN could not start on the GPU (memory already full, or a CUDA mismatch)",
)

_NUMBER = r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"

# Wrong results: a numerical comparison that failed (torch.testing, numpy, an assertion
# that two numbers are equal), or a metric reported per number of GPUs (`1 gpu: 0.7729`,
# `8 GPUs: 53.7%`): results that depend on the world size are the defining symptom of the
# wrong.* causes.
signature(
    "generic.values_differ",
    r"Tensor-likes are not (?:close|equal)|Mismatched elements: \d+ / \d+|"
    r"Arrays are not (?:almost )?equal|Not equal to tolerance|Scalars are not (?:close|equal)|"
    # unittest's assertEqual/assertAlmostEqual and pytest's assert on two numbers
    rf"(?:AssertionError: |^E\s+)(?:assert )?{_NUMBER} (?:!=|==) {_NUMBER}(?:$| within )",
    anchors=(
        "Tensor-likes are not",
        "Mismatched elements: ",
        "Arrays are not",
        "Not equal to tolerance",
        "Scalars are not",
        "AssertionError: ",
        "       assert ",
    ),
    summary="a numerical comparison failed: two results that should match do not",
)

signature(
    "generic.metric_per_world_size",
    r"^\W{0,4}(?P<gpus>\d{1,4}) ?(?:x ?)?(?:gpus?|GPUs?|GPU\(s\)|cards?)\b\W{0,4}"
    r"(?:\w+\W{1,3}){0,3}?(?P<value>\d+(?:\.\d+)?)\s*%?\s*$",
    anchors=("gpu", "GPU", "card"),
    summary="a metric reported for one number of GPUs (compare the lines for others)",
    extract=lambda found: {"gpus": int(found["gpus"]), "value": float(found["value"])},
)

# An evaluation's sample count beside the world size it ran at (torchvision's reference
# scripts: `Acc@1 69.760 Acc@5 89.075, 50004 samples processed -- world_size = 6`).
signature(
    "generic.samples_per_world_size",
    r"\b(?P<samples>\d+) (?:samples|images|examples|sequences|utterances|sentences)\b[^\n]{0,60}?"
    r"\bworld[_ ]size\s*[=:]?\s*(?P<gpus>\d+)",
    anchors=("world_size", "world size"),
    summary="an evaluated-sample count at one world size (compare the lines for others)",
    extract=lambda found: {"gpus": int(found["gpus"]), "samples": int(found["samples"])},
)

# A line a logger marked as an error (`ERROR`, `FATAL`, `CRITICAL` as its level, `error:`
# opening it) that no other signature reads: the last generic marker, so that a failure in
# words no rule knows is still a failure. (glog's `[E1125 ...]` prefix is left out: its
# anchor, `[E`, is in every `[Epoch 3/100]` line.)
signature(
    "generic.error_line",
    r"(?:^|[\s\[|(<])(?:ERROR|FATAL|CRITICAL)(?:$|[\]\s:|)>-])"
    r"|^\s*(?:[Ee]rror|FATAL|[Ff]atal)(?:\[[\w-]+\])?: ",
    anchors=("ERROR", "FATAL", "CRITICAL", "rror:", "atal:"),
    summary="a line marked as an error, in words no other signature reads",
)

# A line that says in plain words that something failed, with no level marking it (`Number
# of local shards (1) does not match ...`, `Failed to create QP`, `Connect to server ended
# with timeout`): the last marker of all, so that a failure no signature knows, pasted
# without its exception, is still a failure. Lines a logger marks as information or a
# warning (`INFO`, `WARN`, `UserWarning:`, glog's `I1125`/`W1125`, TensorFlow's and Horovod's
# `...: W `, logfmt's `level=warning`) are not failures, nor
# are counts and metrics (`failed: 0`, `Invalid: 1.000`, `0 failed`, `no failures`).
signature(
    "generic.failure_words",
    r"^(?!.*(?:\b(?:INFO|DEBUG|TRACE|WARN|WARNING)\b|Warning\b|\bwarn(?:ing)?:|"
    r"(?:^|[\s\[:])[IWD]\d{3,4} \d\d:|\d: [IWD] |level=(?:warn|info|debug)))"
    r".*?(?<!\b0 )(?<!\bno )\b(?P<phrase>(?i:failed|failure|fails to|"
    r"do(?:es)?(?:n't| not) match|mismatch(?:ed)?|but (?:got|found|received|current(?: state)? is)|"
    r"could(?:n't| not)|cannot|can't|unable to|not supported|invalid|illegal|unexpected(?:ly)?|"
    r"abort(?:ed|ing)|terminated|crashed|timed out|timeout|exceeded|refused|denied|killed))\b"
    r"(?!\s*[:=]\s*-?[\d.]+%?\s*(?:$|[,;|]))",
    anchors=(
        "ailed",
        "ailure",
        "ails to",
        " match",
        "ismatch",
        "but got",
        "but found",
        "but received",
        "but current",
        "ould not",
        "ouldn't",
        "annot",
        "an't",
        "nable to",
        "not supported",
        "nvalid",
        "llegal",
        "nexpected",
        "bort",
        "erminated",
        "rashed",
        "imed out",
        "imeout",
        "xceeded",
        "efused",
        "enied",
        "illed",
    ),
    summary="a line that says something failed, in words no other signature reads",
)
