"""comm.fabric from logs: the NVSwitch fabric is not up (fabric manager stopped or mismatched)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.models import Finding
from triage.registry import EvidenceSet, rule
from triage.rules.logs._comm_view import comm_view, quote, stopped_in_nvls
from triage.rules.logs._signals import Found, ids, ranks_of, strongest
from triage.text import rank_label

_TEXT = re.compile(
    r"NCCL|nccl|CUDA|[Cc]uda|init_process_group|all_reduce|barrier|broadcast|device_count"
)
_FIX_SERVICE = (
    "Start the fabric manager and keep it running: `systemctl enable --now "
    "nvidia-fabricmanager`, then check `systemctl status nvidia-fabricmanager` and "
    "`nvidia-smi -q | grep -A2 Fabric` (State Completed, Status Success) before launching. "
    "In containers the host runs it (GPU operator: the driver container starts it)."
)
_FIX_VERSION = (
    "Install the nvidia-fabricmanager package of exactly the driver's version (`nvidia-smi` "
    "shows it), hold both against partial upgrades (`apt-mark hold`), and restart the "
    "service (a reboot or GPU reset if the driver was upgraded under a running job)."
)
_FIX_NVLS = (
    "Check the fabric manager (`systemctl status nvidia-fabricmanager`, its log in "
    "/var/log/fabricmanager.log) and the fabric state per GPU (`nvidia-smi -q | grep -A2 "
    "Fabric`); restart it or reset the GPUs. NCCL_NVLS_ENABLE=0 works around it (NCCL "
    "falls back to ring/tree over NVLink) until the host is repaired."
)

_FIX_IMEX = (
    "Multi-node NVLink needs the IMEX service on every node of the NVLink domain: check"
    " `nvidia-imex-ctl -N` (all nodes connected) and that the job sees its channel"
    " (/dev/nvidia-caps-imex-channels/channel0; in Kubernetes the ComputeDomain that grants it);"
    " NCCL_MNNVL_ENABLE=0 runs over the network instead until it is fixed."
)


@rule("logs.fabric", "comm.fabric")
def fabric(evidence: EvidenceSet) -> Iterator[Finding]:
    """The NVSwitch fabric is down: the fabric manager is stopped, failed or of another version.

    What it detects:
    CUDA error 802 in any of its wordings (`Error 802: system not yet initialized` from torch,
    NCCL's `Cuda failure 802 'system not yet initialized'`, `cudaErrorSystemNotReady`,
    `CUDA_ERROR_SYSTEM_NOT_READY`); NCCL's `Failed to bind NVLink SHARP (NVLS) Multicast
    memory ... This is usually caused by a system or configuration error in the Fabric
    Manager or NVSwitches`; the fabric manager's own `fabric manager NVIDIA GPU driver
    interface version X don't match with driver version Y` and its systemd failure
    (`nvidia-fabricmanager.service: Control process exited`, `Job for
    nvidia-fabricmanager.service failed`, `fabric manager config file item: X has an invalid
    value`); NCCL's `MNNVL (cliqueSize 72) is available but not working on this system`
    (0.75: multi-node NVLink without a working IMEX service or channel). Weaker (0.6), a
    log with no error whose last NCCL word is a step of NVLS setup
    (NCCL_DEBUG=INFO's `NVLS multicast support ...`, `NVLS comm ...`, `NVLS Bind mem ...`):
    the multicast setup waits for a fabric it cannot use instead of failing.

    Why it happens:
    On NVSwitch systems (HGX/DGX A100, H100, H200, B200) the GPUs accept no CUDA work until
    nvidia-fabricmanager has trained the NVLink fabric and programmed the switches. The
    service is not installed, not enabled, crashed, or refuses to start because its version
    differs from the driver's (an upgrade of one package without the other); NVLS multicast
    also needs it to form multicast teams on the switches.

    Evidence:
    The error line with the ranks that print it, the fabric manager's log line when it is
    among the inputs, and the user line of the CUDA or NCCL call that failed.

    Fix:
    Install the fabric manager of the driver's exact version, enable and start it, and wait
    for `nvidia-smi -q` to report the fabric State Completed / Status Success before
    launching; NCCL_NVLS_ENABLE=0 avoids NVLS while the host is repaired.

    Known false positives:
    Error 802 on a machine without NVSwitch (PCIe GPUs, consumer cards) has other causes
    (the CUDA release notes list kernel-level ones) and the rule still names the fabric. NVLS
    bind errors can also come from NVSwitch multicast resources exhausted by other jobs;
    the fabric manager's log tells them apart.

    References:
    NVIDIA Fabric Manager user guide; CUDA runtime API, cudaErrorSystemNotReady (802);
    pytorch/pytorch#35710; NVIDIA/nccl#1769; NVIDIA/gpu-operator#544.
    """
    view = comm_view(evidence)
    version = view.of("fabric.manager_version")
    service = view.of("fabric.manager_failed")
    not_ready = view.of("fabric.system_not_ready")
    nvls = view.of("fabric.nvls_failed")
    found: list[Found] = []
    if version:
        fields = version[0][1].fields
        what = "the NVSwitch fabric manager's version differs from the NVIDIA driver's"
        if fields.get("fm_version") and fields.get("driver_version"):
            what += f" ({fields['fm_version']} vs driver {fields['driver_version']})"
        found.append((0.95, what, version, _FIX_VERSION))
    if service:
        found.append((0.85, "the NVSwitch fabric manager service failed", service, _FIX_SERVICE))
    if not_ready:
        via = " in NCCL's NVLS setup" if any(s.fields.get("nvls") for _, s in not_ready) else ""
        confidence = 0.95 if version or service else 0.85
        found.append(
            (
                confidence,
                f"CUDA error 802 (system not yet initialized){via}: the NVSwitch fabric is not up",
                not_ready,
                _FIX_VERSION if version else _FIX_SERVICE,
            )
        )
    imex = view.of("nccl.mnnvl_unusable")
    if imex:
        clique = imex[0][1].fields["clique"]
        what = f"multi-node NVLink (a clique of {clique}) is present but the IMEX service is not"
        found.append((0.75, what + " usable", imex, _FIX_IMEX))
    bound = [(e, s) for e, s in nvls if "nvls_code" not in s.fields]
    if bound:
        found.append(
            (
                0.85,
                "NCCL could not bind NVLink SHARP (NVLS) multicast memory on the NVSwitch fabric",
                bound,
                _FIX_NVLS,
            )
        )
    elif nvls:  # a bare CUDA failure in the NVLS transport: the fabric, most often
        code = nvls[0][1].fields["nvls_code"]
        what = f"a CUDA call in NCCL's NVLS (NVSwitch multicast) transport failed (error {code})"
        found.append((0.6, what, nvls, _FIX_NVLS))
    if not found and view.silent():
        stopped = stopped_in_nvls(evidence)
        if stopped:
            what = "the log stops in NCCL's NVLink SHARP (NVLS) multicast setup"
            found.append((0.6, what, stopped, _FIX_NVLS))
    if not found:
        return
    (confidence, what, items, fix), every = strongest(found)
    ranks = ranks_of(s for _, s in not_ready + nvls + imex)
    hosts = sorted({s.host for _, s in every if s.host})
    where = f" on {', '.join(hosts[:4])}" if hosts else ""
    yield Finding(
        title=what + (f" ({rank_label(ranks)})" if ranks else ""),
        summary=(
            f"{what}{where}: `{quote(items)}`. On NVSwitch hosts the GPUs take no CUDA or "
            "NVLink work until nvidia-fabricmanager has brought the fabric up."
        ),
        ranks=ranks,
        location=view.location(ranks, _TEXT),
        confidence=confidence,
        evidence=(ids(every) + view.traceback_ids(ranks, _TEXT))[:10],
        fix=fix,
        confirm="`systemctl status nvidia-fabricmanager` shows it failed or inactive, or "
        "`nvidia-smi -q` reports the GPU fabric State other than Completed",
    )
