"""Communication failures from logs: each comm.* cause named from real text, with its culprit.

Every case writes real torch/NCCL/gloo output (as the libraries print it; the gloo crash and
the store failures were captured from runs of torch 2.15 here, NCCL lines follow NCCL's
source and public reports) to files and runs the real engine: collect_files, scan_logs and
every rule, as `triage analyze` does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import analyze_files, hypothesis
from triage.models import Report
from triage.readers.signatures import matches

# --- real text --------------------------------------------------------------------------

GLOO_CLOSED = (
    "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] "
    "Connection closed by peer [127.0.0.1]:{port}. This is typically caused by a remote worker "
    "crashing. Check the logs of the remote worker before reporting an error. GLHF! 🏖️"
)


def gloo_victim(rank: int, port: int) -> list[str]:
    """A rank that waits in all_reduce when its peer dies (torch 2.15, gloo)."""
    lines = [
        "Traceback (most recent call last):",
        '  File "/home/alice/proj/train.py", line 22, in <module>',
        "    main()",
        '  File "/home/alice/proj/train.py", line 18, in main',
        "    dist.all_reduce(x)",
        '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", '
        "line 83, in wrapper",
        "    return func(*args, **kwargs)",
        "           ^^^^^^^^^^^^^^^^^^^^^",
        '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", '
        "line 4181, in all_reduce",
        "    work.wait()",
        GLOO_CLOSED.format(port=port),
    ]
    return [f"[rank{rank}]: {line}" for line in lines]


def gloo_culprit(rank: int) -> list[str]:
    lines = [
        "Traceback (most recent call last):",
        '  File "/home/alice/proj/train.py", line 22, in <module>',
        "    main()",
        '  File "/home/alice/proj/train.py", line 17, in main',
        "    x = step(rank)",
        "        ^^^^^^^^^^",
        '  File "/home/alice/proj/train.py", line 7, in step',
        '    raise ValueError("bad batch on rank 2")',
        "ValueError: bad batch on rank 2",
    ]
    return [f"[rank{rank}]: {line}" for line in lines]


ELASTIC_REPORT = """\
E1121 20:56:32.896000 6635 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 2 (pid: 6659) of binary: /opt/venv/bin/python3.11
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-21_20:56:32
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 6657)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 6657
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-21_20:56:32
  host      : localhost
  rank      : 2 (local_rank: 2)
  exitcode  : 1 (pid: 6659)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def interleave(*blocks: list[str]) -> list[str]:
    """Ranks write at once: their lines alternate in the shared console log."""
    out: list[str] = []
    longest = max(len(b) for b in blocks)
    for i in range(longest):
        out += [b[i] for b in blocks if i < len(b)]
    return out


def nccl_setup(host: str, pid: int, rank: int, nranks: int = 4, dev: int | None = None) -> str:
    """NCCL 2.18 INFO lines of one rank up to communicator setup (NCCL_DEBUG=INFO)."""
    dev = rank if dev is None else dev
    p = f"{host}:{pid}:{pid} [{dev}]"
    t = f"{host}:{pid}:{pid + 40} [{dev}]"
    return "\n".join(
        [
            f"{p} NCCL INFO Bootstrap : Using eth0:10.1.0.{5 + rank}<0>",
            f"{p} NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : "
            "libnccl-net.so: cannot open shared object file: No such file or directory",
            f"{p} NCCL INFO cudaDriverVersion 12020",
            f"{p} NCCL INFO NCCL version 2.18.1+cuda12.1",
            f"{t} NCCL INFO Failed to open libibverbs.so[.1]",
            f"{t} NCCL INFO NET/Socket : Using [0]eth0:10.1.0.{5 + rank}<0>",
            f"{t} NCCL INFO Using network Socket",
            f"{t} NCCL INFO ncclCommInitRank comm 0x55d9607ee240 rank {rank} nranks {nranks} "
            f"cudaDev {dev} nvmlDev {dev} busId {dev + 1}000 commId 0x5f1e2b3c4d5e6f70 - Init START",
            f"{t} NCCL INFO Setting affinity for GPU {dev} to ffff",
            f"{t} NCCL INFO Channel 00/0 : {rank}[{dev}] -> {(rank + 1) % nranks}"
            f"[{(dev + 1) % nranks}] via P2P/IPC/read",
            f"{t} NCCL INFO Channel 01/0 : {rank}[{dev}] -> {(rank + 1) % nranks}"
            f"[{(dev + 1) % nranks}] via P2P/IPC/read",
        ]
    )


def nccl_error(kind: str, last: str, version: str = "2.18.1", rank: int | None = None) -> str:
    """torch's DistBackendError for a failed NCCL call, with NCCL's last WARN after it."""
    text = (
        "torch.distributed.DistBackendError: NCCL error in: "
        f"../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1331, {kind}, NCCL version {version}\n"
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
        "device error. \nLast error:\n"
        f"{last}"
    )
    if rank is None:
        return text
    return "\n".join(f"[rank{rank}]: {line}" for line in text.splitlines())


def init_traceback(rank: int) -> str:
    lines = [
        "Traceback (most recent call last):",
        '  File "/home/alice/proj/train.py", line 31, in <module>',
        "    main()",
        '  File "/home/alice/proj/train.py", line 12, in main',
        "    dist.barrier()",
        '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", '
        "line 4815, in barrier",
        "    work = group.barrier(opts=opts)",
        "           ^^^^^^^^^^^^^^^^^^^^^^^^",
    ]
    return "\n".join(f"[rank{rank}]: {line}" for line in lines)


# --- harness ----------------------------------------------------------------------------


def causes(report: Report) -> list[str]:
    return [h.cause_id for h in report.hypotheses]


# --- peer failure -----------------------------------------------------------------------


def test_peer_crash_names_the_rank_that_failed_first(tmp_path: Path) -> None:
    console = interleave(
        gloo_victim(3, 7871), gloo_culprit(2), gloo_victim(1, 43438), gloo_victim(0, 29411)
    )
    report = analyze_files(tmp_path, {"console.log": "\n".join(console) + "\n" + ELASTIC_REPORT})
    top = report.verdict
    assert top is not None and top.cause_id == "comm.peer_failure"
    assert top.ranks == [2]
    assert top.location is not None
    assert (top.location.file, top.location.line, top.location.function) == (
        "/home/alice/proj/train.py",
        7,
        "step",
    )
    assert "ValueError" in top.summary
    assert 0.55 <= top.confidence < 0.8


@pytest.mark.parametrize(
    "closed",
    [
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:201] Socket unexpectedly"
        " closed [127.0.0.1]:{port}",
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:812] Socket closed"
        " [127.0.0.1]:{port}",
    ],
)
def test_gloos_other_words_for_a_closed_socket_are_victims_too(tmp_path: Path, closed: str) -> None:
    """gloo's pair reports a peer that went away in three wordings (pair.cc); each is a
    witness, so the rank that raised on its own is still the one named."""
    victims = [
        [line.replace(GLOO_CLOSED.format(port=port), closed.format(port=port)) for line in block]
        for block, port in ((gloo_victim(0, 29411), 29411), (gloo_victim(1, 43438), 43438))
    ]
    console = interleave(victims[0], gloo_culprit(2), victims[1])
    report = analyze_files(tmp_path, {"console.log": "\n".join(console)})
    top = report.verdict
    assert top is not None and top.cause_id == "comm.peer_failure" and top.ranks == [2], top


@pytest.mark.parametrize(
    "timeout",
    [
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:523] Read timeout"
        " [10.0.0.2]:45123",
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:314] Write timeout"
        " [10.0.0.2]:45123",
        "RuntimeError: Application timeout caused pair closure",
    ],
)
def test_gloos_pair_deadlines_are_collective_timeouts(tmp_path: Path, timeout: str) -> None:
    report = analyze_files(tmp_path, {"rank0.log": timeout})
    top = report.verdict
    assert top is not None and top.cause_id == "hang.collective_timeout", top


def test_launcher_seeing_a_victim_exit_first_does_not_make_it_the_culprit(
    tmp_path: Path,
) -> None:
    """The launcher may reap a victim before the crashed rank; its own words still decide."""
    report_rank3_first = (
        ELASTIC_REPORT.replace("rank      : 2 (local_rank: 2)", "rank      : 3 (local_rank: 3)")
        .replace("local_rank: 2 (pid: 6659)", "local_rank: 3 (pid: 6660)")
        .replace("exitcode  : 1 (pid: 6659)", "exitcode  : 1 (pid: 6660)")
    )
    console = interleave(gloo_culprit(2), gloo_victim(3, 7871))
    report = analyze_files(
        tmp_path, {"console.log": "\n".join(console) + "\n" + report_rank3_first}
    )
    top = report.verdict
    assert top is not None and top.cause_id == "comm.peer_failure"
    assert top.ranks == [2]


def test_peer_symptoms_alone_name_witnesses_and_ask_for_the_other_logs(tmp_path: Path) -> None:
    report = analyze_files(
        tmp_path,
        {
            "rank1.log": "\n".join(gloo_victim(1, 43438)),
            "rank3.log": "\n".join(gloo_victim(3, 7871)),
        },
    )
    top = report.verdict
    assert top is not None and top.cause_id == "comm.peer_failure"
    assert top.ranks == []
    assert "1" in top.summary and "3" in top.summary
    assert "logs of the other ranks" in top.fix
    assert top.confidence < 0.5


def test_shm_origin_leads_and_peer_failure_follows(tmp_path: Path) -> None:
    """Two comm hypotheses compete: rank 1's shm failure explains itself and leads; the
    peers' closed sockets make comm.peer_failure second, naming rank 1 as well."""
    warn = "node1:2002:2050 [1] misc/shmutils.cc:{line} NCCL WARN {text}"
    rank1 = "\n".join(
        [
            nccl_setup("node1", 2002, 1),
            warn.format(
                line=72, text="Error: failed to extend /dev/shm/nccl-UbzKZ9 to 9637892 bytes"
            ),
            warn.format(
                line=113,
                text="Error while creating shared memory segment /dev/shm/nccl-UbzKZ9 (size 9637888)",
            ),
            "node1:2002:2050 [1] NCCL INFO transport/shm.cc:114 -> 2",
            init_traceback(1),
            nccl_error(
                "unhandled system error (run with NCCL_DEBUG=INFO for details)",
                "Error while creating shared memory segment /dev/shm/nccl-UbzKZ9 (size 9637888)",
                rank=1,
            ),
        ]
    )
    files = {"rank1.log": rank1}
    for rank in (0, 2, 3):
        pid = 2001 + rank
        files[f"rank{rank}.log"] = "\n".join(
            [
                nccl_setup("node1", pid, rank),
                f"node1:{pid}:{pid + 30} [{rank}] misc/socket.cc:49 NCCL WARN socketProgress: "
                "Connection closed by remote peer node1<57557>",
                f"node1:{pid}:{pid + 30} [{rank}] NCCL INFO misc/socket.cc:749 -> 6",
            ]
        )
    report = analyze_files(tmp_path, files)
    assert causes(report)[:2] == ["comm.shm_exhausted", "comm.peer_failure"]
    shm = hypothesis(report, "comm.shm_exhausted")
    assert shm.ranks == [1]
    assert shm.confidence >= 0.85
    assert shm.location is not None and shm.location.line == 12
    peer = hypothesis(report, "comm.peer_failure")
    assert peer.ranks == [1]
    assert peer.confidence < shm.confidence


# --- wrong interface --------------------------------------------------------------------

GLOO_NO_IF = (
    "RuntimeError: [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"
    "device.cc:84] ifa != nullptr. Unable to find address for: ib0"
)


def test_gloo_interface_that_does_not_exist(tmp_path: Path) -> None:
    lines = [f"[rank{r}]: {GLOO_NO_IF}" for r in (0, 1)]
    report = analyze_files(tmp_path, {"console.log": "\n".join(lines)})
    top = report.verdict
    assert top is not None and top.cause_id == "comm.wrong_interface"
    assert top.ranks == [0, 1]
    assert "ib0" in top.title
    assert "GLOO_SOCKET_IFNAME" in top.fix


def test_ifname_override_matching_nothing_beats_the_override_hypothesis(tmp_path: Path) -> None:
    """NCCL_SOCKET_IFNAME names no interface: the specific rule leads, the generic
    override hypothesis stays below it."""
    log = "\n".join(
        [
            "gpu7:501:501 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ens9f0",
            "gpu7:501:501 [0] bootstrap.cc:42 NCCL WARN Bootstrap : no socket interface found",
            "gpu7:501:501 [0] NCCL INFO init.cc:82 -> 3",
            nccl_error(
                "internal error - please report this issue to the NCCL developers",
                "Bootstrap : no socket interface found",
            ),
        ]
    )
    report = analyze_files(tmp_path, {"train.log": log}, symptom="comm")
    assert causes(report)[0] == "comm.wrong_interface"
    top = hypothesis(report, "comm.wrong_interface")
    assert "NCCL_SOCKET_IFNAME=ens9f0" in top.title
    assert top.confidence == pytest.approx(0.9)
    override = hypothesis(report, "comm.nccl_env_override")
    assert override.confidence < top.confidence
    assert "comm.unknown" not in causes(report)


def test_connect_to_docker_bridge_address(tmp_path: Path) -> None:
    log = "\n".join(
        [
            "e57377aacbb6:1203:1203 [0] NCCL INFO Bootstrap : Using eth0:172.17.0.2<0>",
            "e57377aacbb6:1203:1227 [0] misc/socket.cc:480 NCCL WARN socketStartConnect: "
            "Connect to 172.17.0.3<38847> failed : Software caused connection abort",
            "e57377aacbb6:1203:1227 [0] NCCL INFO misc/socket.cc:561 -> 2",
        ]
    )
    report = analyze_files(tmp_path, {"node1.log": log})
    top = report.verdict
    assert top is not None and top.cause_id == "comm.wrong_interface"
    assert "docker" in top.title
    assert top.confidence >= 0.7


# --- shared memory ----------------------------------------------------------------------


def test_dataloader_bus_error_is_shared_memory(tmp_path: Path) -> None:
    log = (
        "ERROR: Unexpected bus error encountered in worker. This might be caused by "
        "insufficient shared memory (shm).\n"
        "RuntimeError: DataLoader worker (pid 4412) is killed by signal: Bus error. It is "
        "possible that dataloader's workers are out of shared memory. Please try to raise "
        "your shared memory limit.\n"
    )
    report = analyze_files(tmp_path, {"rank0.log": log})
    top = report.verdict
    assert top is not None and top.cause_id == "comm.shm_exhausted"
    assert top.ranks == [0]
    assert "shm-size" in top.fix


@pytest.mark.parametrize(
    ("crash", "shm"),
    [
        ("[node3:4410 :0:4466] Caught signal 7 (Bus error: nonexistent physical address)", True),
        ("/var/spool/slurm/job42/slurm_script: line 9: 4410 Bus error (core dumped) python", True),
        ("[node3:4410 :0:4466] Caught signal 11 (Segmentation fault: address not mapped)", False),
    ],
)
def test_a_rank_reporting_its_own_bus_error_suspects_shared_memory(
    tmp_path: Path, crash: str, shm: bool
) -> None:
    """A signal handler's or the shell's own report of a bus error (no launcher naming
    SIGBUS) is the usual /dev/shm overrun, at the weight of a bare SIGBUS; a segfault is not."""
    log = "\n".join(
        [
            crash,
            "==== backtrace (tid:   4466) ====",
            " 0 0x0000000000059e97 ncclGetUniqueId()  ???:0",
            " 1 0x00000000000489b1 ???()  /usr/lib/x86_64-linux-gnu/libnccl.so.2:0",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        ]
    )
    report = analyze_files(tmp_path, {"rank0.log": log})
    assert ("comm.shm_exhausted" in causes(report)) is shm
    if shm:
        assert report.verdict is not None and report.verdict.cause_id == "comm.shm_exhausted"
        assert report.verdict.confidence == 0.5


def _nvls_setup(host: str, pid: int, rank: int) -> list[str]:
    return [
        nccl_setup(host, pid, rank, nranks=4, dev=rank),
        f"{host}:{pid}:{pid + 40} [{rank}] NCCL INFO NVLS multicast support is available on dev {rank}",
        f"{host}:{pid}:{pid + 40} [{rank}] NCCL INFO NVLS comm 0x55d0c2a3e0a0 headRank {rank}"
        " nHeads 4 buffSize 4194304 memSize 2097152 nvlsPerRankSize 201326592",
        f"{host}:{pid}:{pid + 40} [{rank}] NCCL INFO NVLS Bind mem 0xac0000000 UC handle"
        " 0x7f3310ccb240 MC handle 0x7f3310ccaa20 size 1073741824",
    ]


def test_a_log_that_stops_in_nvls_setup_is_the_fabric(tmp_path: Path) -> None:
    """Every rank's last word is a step of NVLS multicast setup, with no error: NVLS waits
    for an NVSwitch fabric it cannot use."""
    files = {f"rank{r}.log": "\n".join(_nvls_setup("hgx1", 3100 + r, r)) for r in range(4)}
    report = analyze_files(tmp_path, files)
    assert report.verdict is not None and report.verdict.cause_id == "comm.fabric"
    assert "NVLS" in report.verdict.title and "NCCL_NVLS_ENABLE=0" in report.verdict.fix
    assert hypothesis(report, "comm.p2p_unsupported").confidence < report.verdict.confidence


def test_nvls_setup_that_completes_is_no_fabric_failure(tmp_path: Path) -> None:
    done = "hgx1:3100:3140 [0] NCCL INFO comm 0x55d0c2a3e0a0 rank 0 nranks 4 cudaDev 0 busId"
    log = _nvls_setup("hgx1", 3100, 0) + [
        f"{done} 18000 commId 0x5c1e - Init COMPLETE",
        "step 1 loss 2.31",
        "step 2 loss 2.28",
        "step 3 loss 2.25",
        "step 4 loss 2.21",
        "step 5 loss 2.19",
        "step 6 loss 2.16",
    ]
    report = analyze_files(tmp_path, {"rank0.log": "\n".join(log)})
    assert "comm.fabric" not in causes(report)


_RAY_SHM = (
    "2025-03-02 10:11:12,283 WARNING services.py:1996 -- WARNING: The object store is using"
    " /tmp instead of /dev/shm because /dev/shm has only {size} bytes available. This will"
    " harm performance! You may be able to free up space by deleting files in /dev/shm."
)


@pytest.mark.parametrize(("size", "shm"), [(67108864, True), (8 << 30, False)])
def test_ray_measuring_a_small_dev_shm(tmp_path: Path, size: int, shm: bool) -> None:
    """Ray's start-up warning gives the container's /dev/shm: 64 MB is Docker's default."""
    log = _RAY_SHM.format(size=size) + "\nINFO worker.py:1673 -- Started a local Ray instance.\n"
    report = analyze_files(tmp_path, {"serve.log": log})
    found = {h.cause_id: h for h in report.hypotheses}
    assert ("comm.shm_exhausted" in found) is shm
    if shm:
        assert found["comm.shm_exhausted"].confidence == 0.5
        assert "64 MB" in found["comm.shm_exhausted"].title


def test_the_raylet_refusing_a_request_larger_than_dev_shm(tmp_path: Path) -> None:
    log = (
        "[2026-03-25 05:44:29,435 W 39 39] (raylet) store_runner.cc:83: System memory request"
        " exceeds memory available in /dev/shm. The request is for 10200547328 bytes, and the"
        " amount available is 9663676416 bytes.\n"
    )
    verdict = analyze_files(tmp_path, {"raylet.out": log}).verdict
    assert verdict is not None and (verdict.cause_id, verdict.confidence) == (
        "comm.shm_exhausted",
        0.75,
    )


# --- InfiniBand -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "warning",
    [
        "NET/OFI Request 0x7fbb944701b8 completed with error. RC: 20. Error: unknown error."
        " Completed length: 0, Request: { buffer_index: 255, dev: 1, size: 0 }",
        "NET/OFI Unable to insert remote address into address vector for device 0. RC: -22",
        "NET/OFI Remote write completed with error. RC: 5. Flags: 0. Error: 5 (Input/output"
        " error). Completed length: 0",
    ],
)
def test_efa_plugin_failures_are_the_rdma_fabric(tmp_path: Path, warning: str) -> None:
    """aws-ofi-nccl's NCCL_OFI_WARN lines (its source's wording): EFA could not reach a peer."""
    log = "\n".join(
        [
            "node-1:35:89 [5] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)",
            f"node-1:35:89 [5] ofi_process_cq:1039 NCCL WARN {warning}",
        ]
    )
    verdict = analyze_files(tmp_path, {"rank5.log": log}).verdict
    assert verdict is not None and (verdict.cause_id, verdict.confidence) == (
        "comm.infiniband",
        0.6,
    )
    assert "security group" in verdict.fix


def test_efa_provider_selection_alone_is_no_failure(tmp_path: Path) -> None:
    log = "node-1:35:89 [5] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)"
    report = analyze_files(tmp_path, {"rank5.log": log})
    assert "comm.infiniband" not in causes(report)


def test_ibv_reg_mr_out_of_locked_memory(tmp_path: Path) -> None:
    log = "\n".join(
        [
            nccl_setup("ib-node3", 7100, 0, nranks=16),
            "ib-node3:7100:7140 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; "
            "OOB ib0:192.168.10.3<0>",
            "ib-node3:7100:7140 [0] misc/ibvwrap.cc:153 NCCL WARN Call to ibv_reg_mr failed "
            "with error Cannot allocate memory",
            "ib-node3:7100:7140 [0] NCCL INFO transport/net_ib.cc:1069 -> 2",
            nccl_error(
                "unhandled system error (run with NCCL_DEBUG=INFO for details)",
                "Call to ibv_reg_mr failed with error Cannot allocate memory",
                rank=0,
            ),
        ]
    )
    report = analyze_files(tmp_path, {"rank0.log": log}, symptom="comm")
    top = report.verdict
    assert top is not None and top.cause_id == "comm.infiniband"
    assert top.ranks == [0]
    assert "memlock" in top.fix
    assert "mlx5_0" in top.summary


def test_ib_retry_exceeded_after_a_peer_died_yields_to_the_peer(tmp_path: Path) -> None:
    """Retry-exceeded completions follow a dead peer: the dead rank's own error leads."""
    survivor = "\n".join(
        [
            nccl_setup("gpu-a", 9001, 0, nranks=2),
            "gpu-a:9001:9060 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion "
            "from peer 10.2.0.5<33092> with error 12, opcode 0, len 0, vendor err 129 (Recv)",
            "[rank0]:[E ProcessGroupNCCL.cpp:1414] [PG 0 Rank 0] Process group watchdog thread "
            "terminated with exception: NCCL error: remote process exited or there was a network "
            "error, NCCL version 2.18.1",
        ]
    )
    dead = "\n".join(
        [
            "[rank1]: Traceback (most recent call last):",
            '[rank1]:   File "/home/alice/proj/train.py", line 40, in <module>',
            "[rank1]:     batch = next(loader)",
            "[rank1]: KeyError: 'pixel_values'",
        ]
    )
    report = analyze_files(tmp_path, {"rank0.log": survivor, "rank1.log": dead})
    top = report.verdict
    assert top is not None and top.cause_id == "comm.peer_failure"
    assert top.ranks == [1]
    assert top.location is not None and top.location.line == 40
    assert hypothesis(report, "comm.infiniband").confidence < top.confidence


# --- P2P --------------------------------------------------------------------------------


def test_setup_that_stops_on_one_host_is_the_p2p_hang(tmp_path: Path) -> None:
    """All ranks on one host stop in setup without an error; the user then pressed Ctrl-C."""
    files = {f"rank{r}.log": nccl_setup("ws-a6000", 3300 + r, r, nranks=2) for r in (0, 1)}
    files["console.log"] = (
        "W1121 11:02:41.000000 3290 torch/distributed/elastic/agent/server/api.py:704] "
        "Received Signals.SIGINT death signal, shutting down workers\n"
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/home/alice/proj/train.py", line 12, in main\n'
        "[rank0]:     dist.barrier()\n"
        "[rank0]: KeyboardInterrupt\n"
    )
    report = analyze_files(tmp_path, files)
    top = report.verdict
    assert top is not None and top.cause_id == "comm.p2p_unsupported"
    assert "NCCL_P2P_DISABLE=1" in top.fix
    assert 0.5 <= top.confidence <= 0.7


def test_setup_that_stops_after_loading_a_topology_file_is_one_of_two(tmp_path: Path) -> None:
    """NCCL read a topology XML (NCCL_TOPO_FILE, from /etc/nccl.conf or an image) instead of
    probing the host: a file that does not fit stalls setup just as blocked P2P does."""
    loaded = "ws-a6000:3300:3310 [0] NCCL INFO Loading topology file /opt/vendor/topo.xml\n"
    files = {f"rank{r}.log": nccl_setup("ws-a6000", 3300 + r, r, nranks=2) for r in (0, 1)}
    files["rank0.log"] = loaded + files["rank0.log"]
    report = analyze_files(tmp_path, files)
    override = hypothesis(report, "comm.nccl_env_override")
    p2p = hypothesis(report, "comm.p2p_unsupported")
    assert override.confidence == p2p.confidence == 0.4
    assert "NCCL_TOPO_FILE=/opt/vendor/topo.xml" in override.title
    assert "/etc/nccl.conf" in override.fix and "/opt/vendor/topo.xml" in p2p.summary
    assert any("close calls" in step for step in report.next_steps)


def test_setup_that_traces_a_bootstrap_failure_is_no_silent_p2p_stall(tmp_path: Path) -> None:
    """NCCL_DEBUG=INFO traces a failed call up its callers (`bootstrap.cc:270 -> 2`): the
    setup did not stop silently, its bootstrap sockets failed."""
    trace = "".join(
        f"ws-a6000:3301:3310 [1] NCCL INFO {where} -> 2\n"
        for where in ("misc/socket.cc:567", "misc/socket.cc:618", "bootstrap.cc:270")
    )
    files = {f"rank{r}.log": nccl_setup("ws-a6000", 3300 + r, r, nranks=2) for r in (0, 1)}
    files["rank1.log"] += trace
    report = analyze_files(tmp_path, files)
    assert "comm.p2p_unsupported" not in causes(report)
    top = report.verdict
    assert top is not None and top.cause_id == "comm.wrong_interface"
    assert top.title.startswith("NCCL's bootstrap failed in its socket calls")


def test_setup_that_stops_across_hosts_points_at_the_network(tmp_path: Path) -> None:
    files = {
        "rank0.log": nccl_setup("node-a", 3300, 0, nranks=2, dev=0),
        "rank1.log": nccl_setup("node-b", 3300, 1, nranks=2, dev=0),
    }
    report = analyze_files(tmp_path, files)
    assert "comm.p2p_unsupported" not in causes(report)
    assert causes(report)[0] == "comm.wrong_interface"


def test_p2p_channels_then_a_collective_timeout_on_one_host(tmp_path: Path) -> None:
    """P2P set up, Init COMPLETE, then the watchdog fires: the hang rules lead and the P2P
    hypothesis follows as a close call the report tells apart."""
    files = {}
    for r in (0, 1):
        files[f"rank{r}.log"] = "\n".join(
            [
                nccl_setup("ws1", 3300 + r, r, nranks=2),
                f"ws1:{3300 + r}:{3340 + r} [{r}] NCCL INFO ncclCommInitRank comm 0x55d9607ee240 "
                f"rank {r} nranks 2 cudaDev {r} nvmlDev {r} busId {r + 1}000 commId "
                "0x5f1e2b3c4d5e6f70 - Init COMPLETE",
                f"[rank{r}]:[E1121 10:40:12.231000000 ProcessGroupNCCL.cpp:616] [Rank {r}] "
                "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, "
                "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600031 milliseconds before "
                "timing out.",
                f"[rank{r}]:[E1121 10:40:12.232000000 ProcessGroupNCCL.cpp:630] [Rank {r}] Some NCCL "
                "operations have failed or timed out. Due to the asynchronous nature of CUDA "
                "kernels, subsequent GPU operations might run on corrupted/incomplete data.",
            ]
        )
    report = analyze_files(tmp_path, files)
    p2p = hypothesis(report, "comm.p2p_unsupported")
    assert p2p.confidence == pytest.approx(0.45)
    assert "NCCL_P2P_DISABLE=1" in p2p.confirm


def test_gloo_peer_on_a_loopback_address(tmp_path: Path) -> None:
    log = (
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] connect "
        "[127.0.1.1]:27129: Connection refused\n"
    )
    report = analyze_files(tmp_path, {"rank1.log": log})
    top = report.verdict
    assert top is not None and top.cause_id == "comm.wrong_interface"
    assert top.ranks == [1]
    assert "GLOO_SOCKET_IFNAME" in top.fix


def test_cuda_ipc_peer_access_error(tmp_path: Path) -> None:
    log = "\n".join(
        [
            "z-pc:909608:910337 [0] NCCL INFO Channel 00 : 0[2d000] -> 1[2e000] via P2P/IPC",
            "z-pc:909608:910337 [0] transport/p2p.cc:238 NCCL WARN failed to open CUDA IPC "
            "handle : 217 peer access is not supported between these two devices",
            "z-pc:909608:910337 [0] NCCL INFO transport.cc:68 -> 1",
            "RuntimeError: NCCL error in: /opt/conda/conda-bld/pytorch_1603729062494/work/torch/"
            "lib/c10d/ProcessGroupNCCL.cpp:784, unhandled cuda error, NCCL version 2.7.8",
        ]
    )
    report = analyze_files(tmp_path, {"train.log": log})
    top = report.verdict
    assert top is not None and top.cause_id == "comm.p2p_unsupported"
    assert top.confidence >= 0.8


# --- rendezvous -------------------------------------------------------------------------


def test_store_port_in_use(tmp_path: Path) -> None:
    log = (
        "Traceback (most recent call last):\n"
        '  File "/home/alice/proj/launch.py", line 6, in <module>\n'
        '    dist.init_process_group("gloo")\n'
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any "
        "local network address. port: 29611, useIpv6: false, code: -98, name: EADDRINUSE, "
        "message: address already in use\n"
    )
    report = analyze_files(tmp_path, {"console.log": log})
    top = report.verdict
    assert top is not None and top.cause_id == "comm.rendezvous"
    assert "29611" in top.title
    assert top.confidence == pytest.approx(0.9)
    assert top.location is not None and top.location.line == 6


_STORE_UP = [
    "Using distributed PyTorch with gloo backend",
    "[I socket.cpp:462] [c10d - debug] The server socket is attempting to listen on [::]:23456.",
    "[I socket.cpp:522] [c10d] The server socket has started to listen on [::]:23456.",
]


def test_a_log_that_stops_once_the_store_listens_waits_for_ranks_to_join(tmp_path: Path) -> None:
    verdict = analyze_files(tmp_path, {"rank0.log": "\n".join(_STORE_UP)}).verdict
    assert verdict is not None and (verdict.cause_id, verdict.confidence) == (
        "comm.rendezvous",
        0.2,
    )
    assert "MASTER_ADDR" in verdict.fix


def test_a_store_that_listens_and_a_job_that_trains_is_no_rendezvous_failure(
    tmp_path: Path,
) -> None:
    log = _STORE_UP + [f"Train Epoch: 1 [{i * 640}/60000] Loss: 2.{i:02d}" for i in range(30)]
    report = analyze_files(tmp_path, {"rank0.log": "\n".join(log)})
    assert "comm.rendezvous" not in causes(report)


def test_a_torch_build_without_libuv(tmp_path: Path) -> None:
    """torch >= 2.4 asks for the store's libuv backend by default; Windows wheels lack it."""
    log = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "C:\\venv\\Lib\\site-packages\\torch\\distributed\\rendezvous.py",'
            " line 189, in _create_c10d_store",
            "    return TCPStore(",
            "RuntimeError: use_libuv was requested but PyTorch was build without libuv support",
        ]
    )
    verdict = analyze_files(tmp_path, {"rank0.log": log}).verdict
    assert verdict is not None and (verdict.cause_id, verdict.confidence) == (
        "comm.rendezvous",
        0.85,
    )
    assert "USE_LIBUV=0" in verdict.fix


def test_store_unreachable(tmp_path: Path) -> None:
    log = (
        "[E1121 20:59:25.734252655 socket.cpp:1028] [c10d] The client socket has timed out "
        "after 2000ms while trying to connect to (10.9.8.7, 29612).\n"
        "[W1121 20:59:25.734539696 TCPStore.cpp:340] [c10d] TCP client failed to "
        "connect/validate to host 10.9.8.7:29612 - retrying (try=0, timeout=2000ms, "
        "delay=1395ms): The client socket has timed out after 2000ms while trying to connect "
        "to (10.9.8.7, 29612).\n"
        "torch.distributed.DistNetworkError: The client socket has timed out after 2000ms "
        "while trying to connect to (10.9.8.7, 29612).\n"
    )
    report = analyze_files(tmp_path, {"rank1.log": log})
    top = report.verdict
    assert top is not None and top.cause_id == "comm.rendezvous"
    assert "10.9.8.7" in top.title
    assert "MASTER_ADDR" in top.fix


def test_ipv6_localhost_warning_is_not_a_rendezvous_failure(tmp_path: Path) -> None:
    log = (
        "[W socket.cpp:601] [c10d] The client socket has failed to connect to [localhost]:29500 "
        "(errno: 99 - Cannot assign requested address).\n"
    )
    report = analyze_files(tmp_path, {"rank0.log": log}, symptom="comm")
    assert "comm.rendezvous" not in causes(report)


def test_dns_and_ports_of_user_code_are_not_the_rendezvous(tmp_path: Path) -> None:
    log = (
        "socket.gaierror: [Errno -3] Temporary failure in name resolution\n"
        "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', "
        "port=443): Max retries exceeded with url: /api/models (Caused by "
        'NameResolutionError("<urllib3.connection.HTTPSConnection object at 0x7f>: Failed to '
        "resolve 'huggingface.co' ([Errno -3] Temporary failure in name resolution)\"))\n"
        "OSError: [Errno 98] Address already in use\n"
    )
    report = analyze_files(tmp_path, {"rank0.log": log}, symptom="comm")
    assert "comm.rendezvous" not in causes(report)


@pytest.mark.parametrize(
    "line",
    [
        "socket.gaierror: [Errno -2] Name or service not known",
        "OSError: [Errno 113] No route to host",
    ],
)
def test_a_name_or_route_with_no_context_is_a_weak_rendezvous(tmp_path: Path, line: str) -> None:
    """Nothing ties the lookup to torch.distributed or to a download: MASTER_ADDR is the
    usual name a distributed job resolves, said at 0.3."""
    report = analyze_files(tmp_path, {"rank1.log": line + "\n"})
    top = report.verdict
    assert top is not None and (top.cause_id, top.confidence) == ("comm.rendezvous", 0.3)


def test_nodes_that_never_join(tmp_path: Path) -> None:
    log = (
        "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. "
        "1/2 clients joined.\n"
    )
    report = analyze_files(tmp_path, {"node0.log": log})
    top = report.verdict
    assert top is not None and top.cause_id == "comm.rendezvous"
    assert "1/2" in top.title


# --- versions, overrides, unknown -------------------------------------------------------


def test_different_nccl_versions_across_ranks(tmp_path: Path) -> None:
    files = {
        f"rank{rank}.log": init_traceback(rank)
        + "\n"
        + nccl_error(
            "unhandled system error (run with NCCL_DEBUG=INFO for details)",
            "socketProgress: Connection closed by remote peer node2<40127>",
            version=version,
            rank=rank,
        )
        for rank, version in ((0, "2.18.1"), (1, "2.21.5"))
    }
    report = analyze_files(tmp_path, files, symptom="comm")
    top = report.verdict
    assert top is not None and top.cause_id == "comm.version_mismatch"
    assert "2.18.1" in top.title and "2.21.5" in top.title


def test_env_override_alone_is_not_a_finding(tmp_path: Path) -> None:
    log = "\n".join(
        [
            "gpu1:800:800 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to NVL",
            "gpu1:800:820 [0] NCCL INFO comm 0x7f8e90002e20 rank 0 nranks 2 cudaDev 0 busId 1000 "
            "- Init COMPLETE",
        ]
    )
    report = analyze_files(tmp_path, {"rank0.log": log}, symptom="comm")
    assert "comm.nccl_env_override" not in causes(report)


def test_forced_algorithm_with_a_failure_is_a_hypothesis(tmp_path: Path) -> None:
    log = "\n".join(
        [
            "gpu1:800:800 [0] NCCL INFO NCCL_ALGO set by environment to Tree",
            "gpu1:800:800 [0] NCCL INFO NCCL_PROTO set by environment to LL128",
            nccl_error(
                "invalid usage (run with NCCL_DEBUG=WARN for details)",
                "Error : no algorithm/protocol available for function AllGather with datatype "
                "ncclInt8. NCCL_ALGO was set to Tree.",
            ),
        ]
    )
    report = analyze_files(tmp_path, {"rank0.log": log}, symptom="comm")
    top = report.verdict
    assert top is not None and top.cause_id == "comm.nccl_env_override"
    assert "NCCL_ALGO=Tree" in top.title
    assert 0.4 <= top.confidence <= 0.55


def test_unexplained_nccl_error_asks_for_nccl_debug(tmp_path: Path) -> None:
    log = nccl_error("internal error - please report this issue to the NCCL developers", "", rank=0)
    report = analyze_files(tmp_path, {"rank0.log": log}, symptom="comm")
    top = report.verdict
    assert top is not None and top.cause_id == "comm.unknown"
    assert top.rule_id == "logs.comm_unknown"
    assert "NCCL_DEBUG=INFO" in top.fix
    assert top.confidence < 0.4


@pytest.mark.parametrize(
    "line",
    [
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1331, unhandled"
        " cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.5",
        "UnknownError (see above for traceback): ncclCommInitRank failed: unhandled cuda error",
    ],
    ids=["torch", "horovod"],
)
def test_a_bare_unhandled_cuda_error_suspects_the_versions(tmp_path: Path, line: str) -> None:
    """No line names the CUDA call NCCL made: the NCCL/CUDA/driver versions lead, weakly."""
    verdict = analyze_files(tmp_path, {"rank0.log": line}).verdict
    assert verdict is not None and (verdict.cause_id, verdict.confidence) == (
        "comm.version_mismatch",
        0.3,
    )
    assert "torch.cuda.nccl.version()" in verdict.fix


def test_an_unhandled_cuda_error_with_its_cause_named_is_that_cause(tmp_path: Path) -> None:
    log = "\n".join(
        [
            "gpu1:800:820 [0] NCCL WARN Cuda failure 'out of memory'",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            "RuntimeError: NCCL Error 1: unhandled cuda error",
        ]
    )
    report = analyze_files(tmp_path, {"rank0.log": log})
    assert "comm.version_mismatch" not in causes(report)


def test_a_crash_beside_nccls_own_failure_trace_is_a_communication_failure(
    tmp_path: Path,
) -> None:
    """A segfault names no cause; NCCL's trace of a failed transport setup beside it puts the
    failure in the communication layer, not in a rank that merely exited."""
    log = "\n".join(
        [
            "[worker-0:5665 :0:5665] Caught signal 11 (Segmentation fault: address not mapped to"
            " object at address (nil))",
            "worker-0:5667:5814 [4] NCCL INFO transport.cc:166 -> 2",
            "worker-0:5667:5814 [4] NCCL INFO transport/generic.cc:29 -> 2",
            "worker-0:5667:5814 [4] NCCL INFO group.cc:147 -> 2",
        ]
    )
    verdict = analyze_files(tmp_path, {"rank4.log": log}).verdict
    assert verdict is not None and verdict.cause_id == "comm.unknown"


def test_a_crash_alone_is_a_rank_that_exited(tmp_path: Path) -> None:
    log = "[worker-0:5665 :0:5665] Caught signal 11 (Segmentation fault: address not mapped)"
    verdict = analyze_files(tmp_path, {"rank4.log": log}).verdict
    assert verdict is not None and verdict.cause_id == "hang.rank_exited"


# --- signatures across versions ---------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "name", "fields"),
    [
        (
            "host:1:1 [0] NCCL INFO NET/IB : Got completion from peer 10.2.0.5<33092> with "
            "error 12, opcode 0, len 0, vendor err 129 (Recv)",
            "nccl.ib_completion_error",
            {"status": 12, "status_name": "IBV_WC_RETRY_EXC_ERR"},
        ),
        (
            "NET/IB: Got completion from peer 10.153.235.13<40554> with "
            "status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_RECV_RDMA_WITH_IMM(129) vendor_err=129",
            "nccl.ib_completion_error",
            {"status": 12, "peer": "10.153.235.13"},
        ),
        (
            "socketPollConnect: Connect to 10.0.0.4<56849> returned 113(No route to host) errno "
            "115(Operation now in progress)",
            "nccl.connect_failed",
            {"reason": "No route to host"},
        ),
        (
            "Connect to 127.0.0.1<34457> failed : Connection refused",
            "nccl.connect_failed",
            {"address_kind": "loopback"},
        ),
        (
            "Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx5_3:1, curr "
            "state INIT, next state RTR, local GID index 3",
            "nccl.ib_verbs_failed",
            {"call": "ibv_modify_qp", "reason": "Connection timed out"},
        ),
        (
            "include/shm.h:28 NCCL WARN Call to posix_fallocate failed: No space left on device",
            "nccl.shm_failed",
            {"reason": "No space left on device"},
        ),
        (
            "[W socket.cpp:401] [c10d] The server socket has failed to bind to [::]:29500 "
            "(errno: 98 - Address already in use).",
            "c10d.bind_failed",
            {"port": "29500", "errno": "98"},
        ),
        (
            "[E socket.cpp:860] [c10d] The client socket has timed out after 60s while trying "
            "to connect to 192.0.2.1:1234",
            "c10d.client_timeout",
            {"host": "192.0.2.1"},
        ),
        (
            "NCCL INFO comm 0x7f8e90002e20 rank 3 nranks 8 cudaDev 3 busId 3d000 - Init COMPLETE",
            "nccl.init",
            {"rank": 3, "stage": "COMPLETE", "bus_id": "3d000"},
        ),
        (
            "NCCL INFO comm 0x55d9607ee240 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 "
            "MNNVL 0",
            "nccl.comm_topology",
            {"nnodes": 2},
        ),
        (
            "NCCL INFO NCCL_IB_DISABLE set by environment to 1.",
            "nccl.env_override",
            {"variable": "NCCL_IB_DISABLE", "value": "1"},
        ),
        (
            "RuntimeError: unable to write to file </torch_1234_5678_0>: No space left on device "
            "(28)",
            "shm.torch_file",
            {"errno": "28"},
        ),
    ],
)
def test_signature_variants(line: str, name: str, fields: dict[str, object]) -> None:
    found = {sig.name: got for sig, got in matches(line)}
    assert name in found, sorted(found)
    assert fields.items() <= found[name].items()


def test_peer_symptoms_are_marked() -> None:
    peer = {
        sig.name
        for line in (
            GLOO_CLOSED.format(port=7871),
            "misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer n1<5>",
            "NCCL error: remote process exited or there was a network error, NCCL version 2.20.5",
            "torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was "
            "likely closed. Did the remote server shutdown or crash?",
        )
        for sig, _ in matches(line)
        if sig.peer_symptom
    }
    assert peer == {
        "gloo.connection_closed",
        "nccl.socket_closed",
        "nccl.remote_error",
        "c10d.recv_closed",
    }


def test_ranks_the_launcher_stopped_are_victims_of_the_rank_that_failed(tmp_path: Path) -> None:
    """torchrun may SIGTERM the other ranks before they see the peer go: no connection error
    is logged, yet the failing rank is still the cause (the shape of a real CI run here)."""
    text = (Path(__file__).parent / "fixtures" / "launcher_stopped_peer.log").read_text()
    report = analyze_files(tmp_path, {"console.log": text})
    top = report.hypotheses[0]
    assert (top.cause_id, top.ranks) == ("comm.peer_failure", [1])
    assert top.location is not None and top.location.line == 30


def test_no_net_plugin_without_nccl_debug_is_read_from_the_last_error(tmp_path: Path) -> None:
    """Without NCCL_DEBUG, torch's `Last error:` copy is the only line that names it."""
    text = (
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/"
        "c10d/NCCLUtils.cpp:93, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL"
        " version 2.28.9\n"
        "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
        "Last error:\n"
        "Failed to initialize any NET plugin\n"
    )
    report = analyze_files(tmp_path, {"rank0.log": text})
    assert report.hypotheses[0].cause_id == "comm.nccl_env_override"
    assert "config.device_assignment" not in [h.cause_id for h in report.hypotheses]
