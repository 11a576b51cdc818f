"""What a real GPU wrote (tests/fixtures/gpu, recorded on an H100): the verdicts a user
would get from those files, which no GPU-less test can produce."""

from __future__ import annotations

from tests.conftest import REPO, analyze_cli

GPU = REPO / "tests" / "fixtures" / "gpu"


def test_an_allocation_larger_than_the_gpu_is_capacity_with_the_snapshot_read() -> None:
    report = analyze_cli(GPU / "gpu_oom.log", GPU / "oom_snapshot.pickle")
    top = report["hypotheses"][0]
    assert top["cause_id"] == "oom.capacity" and top["confidence"] >= 0.8
    assert top["location"]["line"] == 7 and top["location"]["file"].endswith("gpu_oom.py")
    [dump] = [e for e in report["evidence"] if e["kind"] == "memory_dump"]
    assert dump["data"]["format"] == "snapshot"
    assert dump["data"]["oom_requested"] == 200 << 30 and dump["data"]["allocated"] == 32 << 30
    # The snapshot was given: the report does not ask for one.
    assert not any("Record a memory snapshot" in step for step in report["next_steps"])


def test_the_same_log_without_its_snapshot_asks_for_one() -> None:
    report = analyze_cli(GPU / "gpu_oom.log")
    assert report["hypotheses"][0]["cause_id"] == "oom.capacity"
    assert any("Record a memory snapshot" in step for step in report["next_steps"])


def test_two_ranks_on_one_gpu_are_named_from_nccls_refusal() -> None:
    report = analyze_cli(GPU / "dup_gpu.log")
    top = report["hypotheses"][0]
    assert top["cause_id"] == "config.device_assignment" and top["confidence"] >= 0.8
    assert top["ranks"] == [0, 1]
    assert "set_device" in top["fix"]


def test_two_ranks_without_set_device_share_gpu_0() -> None:
    report = analyze_cli(GPU / "same_device.log")
    top = report["hypotheses"][0]
    assert top["cause_id"] == "oom.same_device" and top["confidence"] >= 0.8
    assert top["ranks"] == [0, 1] and top["location"]["line"] == 18
    assert "pid 504 (rank 1)" in top["summary"] and "set_device" in top["fix"]


def test_a_real_nccl_coll_log_is_read_as_one_series_and_no_failure() -> None:
    """NCCL 2.28.9's own per-op lines: every one folded into its communicator's series (the
    frequent lines the scanner counts instead of reading), and a healthy run names nothing."""
    report = analyze_cli(GPU / "coll_1rank.log")
    assert report["hypotheses"] == []
    [series] = [e["data"] for e in report["evidence"] if e["kind"] == "log_series"]
    assert series["name"].startswith("comm 0x") and series["count"] == 601
    assert series["last"]["coll"] == "AllReduce" and series["last"]["nranks"] == 1
    [log] = [e["data"] for e in report["evidence"] if e["kind"] == "log_file"]
    assert log["aggregated"] == 601


def test_a_rank_past_the_hosts_gpus_is_an_invalid_ordinal() -> None:
    """torch 2.11 raises it as torch.AcceleratorError."""
    report = analyze_cli(GPU / "ordinal.log")
    top = report["hypotheses"][0]
    assert top["cause_id"] == "config.device_assignment" and top["confidence"] >= 0.85
    assert top["ranks"] == [1] and "LOCAL_RANK" in top["fix"]


def test_no_socket_interface_is_the_interface_not_two_ranks_on_one_gpu() -> None:
    """NCCL 2.28.9 under NCCL_SOCKET_IFNAME=nonexist0: torch raises `invalid usage` with
    NCCL's reason as its `Last error:`; the reason is read, the usual suspect of a bare
    `invalid usage` (two ranks on one GPU) is not."""
    report = analyze_cli(GPU / "wrong_iface.log")
    assert report["hypotheses"][0]["cause_id"] == "comm.wrong_interface"
    assert "config.device_assignment" not in [h["cause_id"] for h in report["hypotheses"]]


def test_no_network_transport_is_the_forced_nccl_net() -> None:
    """NCCL 2.28.9 under NCCL_NET=IB on a host without InfiniBand."""
    report = analyze_cli(GPU / "net_ib.log")
    top = report["hypotheses"][0]
    assert top["cause_id"] == "comm.nccl_env_override" and top["confidence"] >= 0.5
    assert "NCCL_NET=Socket" in top["fix"]
    assert "config.device_assignment" not in [h["cause_id"] for h in report["hypotheses"]]


def test_an_nccl_collective_on_a_cpu_tensor_is_the_backend_for_the_device() -> None:
    """torch 2.11's refusal: `No backend type associated with device type cpu`."""
    report = analyze_cli(GPU / "cpu_tensor.log")
    top = report["hypotheses"][0]
    assert top["cause_id"] == "config.backend_device" and top["confidence"] >= 0.85
    assert top["ranks"] == [0] and top["location"]["file"].endswith("nccl_refusals.py")


def test_a_real_nccl_flight_recorder_dump_of_a_collective_that_never_ran() -> None:
    """torch 2.11's NCCL dump (format 2.10) at the watchdog's timeout: a kernel spun ahead of
    all_reduce #6 on the rank's stream. Every member's dump agrees, so the report does not
    send the reader after a missing rank but below the Python calls."""
    report = analyze_cli(GPU / "fr_timeout")
    [overview] = [e["data"] for e in report["evidence"] if e["kind"] == "fr_overview"]
    assert overview["backends"] == ["nccl"] and overview["entries"] == 6
    [stuck] = [e["data"] for e in report["evidence"] if e["kind"] == "fr_stuck"]
    assert stuck["seq"] == 6 and stuck["sides"][0]["op"]["state"] == "scheduled"
    top = report["hypotheses"][0]
    assert top["cause_id"] == "hang.collective_timeout"
    assert top["title"] == "a collective timed out with every rank of its group inside it"
    assert "seq 6" in top["summary"] and top["fix"].startswith("Look below Python")
    assert top["location"]["line"] == 23


def test_nccl_without_room_for_its_buffers_is_told_to_leave_it_room() -> None:
    """NCCL 2.28.9 on a GPU the rank filled first: `Cuda failure 2 'out of memory'` in its
    allocator and torch's `unhandled cuda error`, no allocator numbers."""
    report = analyze_cli(GPU / "oom_init.log")
    top = report["hypotheses"][0]
    assert top["cause_id"] == "oom.capacity" and top["confidence"] < 0.5
    assert top["title"] == "NCCL ran out of GPU memory for its buffers"
    assert "NCCL_BUFFSIZE" in top["fix"] and "first collective" in top["fix"]


def test_a_topology_file_that_does_not_describe_the_machine() -> None:
    """NCCL 2.28.9 under NCCL_TOPO_FILE naming an XML whose CPU has no arch, NCCL_DEBUG=INFO:
    `Attribute arch of node cpu not found`, an internal error."""
    report = analyze_cli(GPU / "topo_file.log")
    top = report["hypotheses"][0]
    assert top["cause_id"] == "comm.nccl_env_override"
    assert "NCCL_TOPO_FILE" in top["title"]


def test_a_rank_that_sees_no_gpu() -> None:
    """torch 2.11 under CUDA_VISIBLE_DEVICES= : `No CUDA GPUs are available` at set_device."""
    report = analyze_cli(GPU / "no_gpu.log")
    top = report["hypotheses"][0]
    assert (top["cause_id"], top["confidence"]) == ("config.device_assignment", 0.6)
    assert "CUDA_VISIBLE_DEVICES" in top["fix"] and "--gpus" in top["fix"]


def test_a_kernels_own_assertion_names_what_the_rank_died_on() -> None:
    """A label past the classes in nll_loss: ATen's device-side assert, then the watchdog's
    abort; the assertion's check and kernel are the cause the report names."""
    report = analyze_cli(GPU / "device_assert.log")
    top = report["hypotheses"][0]
    assert top["cause_id"] == "hang.rank_exited" and top["ranks"] == [0]
    assert "`t >= 0 && t < n_classes`" in top["title"]
    assert "nll_loss_forward_reduce_cuda_kernel_2d" in top["title"]
    assert "CUDA_LAUNCH_BLOCKING=1" in top["fix"] and "n_classes" in top["fix"]


def test_cublas_without_memory_for_its_handle_is_out_of_memory() -> None:
    """`CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)` on a full GPU."""
    report = analyze_cli(GPU / "cublas_oom.log")
    top = report["hypotheses"][0]
    assert top["cause_id"] == "oom.capacity" and top["ranks"] == [0]


def test_cuda_in_a_process_forked_after_its_parent_used_cuda() -> None:
    """torch 2.11's `Cannot re-initialize CUDA in forked subprocess` in a forked child."""
    report = analyze_cli(GPU / "fork_cuda.log")
    top = report["hypotheses"][0]
    assert (top["cause_id"], top["confidence"]) == ("config.launcher_args", 0.7)
    assert top["location"]["function"] == "child" and "spawn" in top["fix"]


def test_a_collective_on_a_strided_view() -> None:
    """c10d's `Tensors must be contiguous` for all_reduce of a transposed slice on NCCL."""
    report = analyze_cli(GPU / "non_contiguous.log")
    top = report["hypotheses"][0]
    assert (top["cause_id"], top["confidence"]) == ("config.backend_device", 0.7)
    assert ".contiguous()" in top["fix"] and top["location"]["line"] == 40


def test_a_reduce_op_nccl_does_not_have() -> None:
    report = analyze_cli(GPU / "band.log")
    top = report["hypotheses"][0]
    assert top["cause_id"] == "config.backend_device" and "BAND" in top["title"]


def test_init_process_group_twice_is_the_jobs_setup() -> None:
    report = analyze_cli(GPU / "twice.log")
    assert report["hypotheses"][0]["cause_id"] == "config.unknown"
    assert "twice" in report["hypotheses"][0]["title"]


def test_a_checkpoint_that_names_a_gpu_the_host_lacks() -> None:
    """torch.load's `Attempting to deserialize object on CUDA device 1 but
    torch.cuda.device_count() is 1`."""
    top = analyze_cli(GPU / "ckpt_device.log")["hypotheses"][0]
    assert (top["cause_id"], top["confidence"]) == ("config.device_assignment", 0.8)
    assert "map_location" in top["fix"] and top["location"]["line"] == 25


def test_ddp_device_ids_for_a_module_left_on_the_cpu() -> None:
    top = analyze_cli(GPU / "ddp_cpu_module.log")["hypotheses"][0]
    assert (top["cause_id"], top["confidence"]) == ("config.device_assignment", 0.8)
    assert "model.to(local_rank)" in top["fix"]


def test_ddp_around_a_frozen_module() -> None:
    top = analyze_cli(GPU / "ddp_no_grad.log")["hypotheses"][0]
    assert (top["cause_id"], top["confidence"]) == ("config.unknown", 0.7)
    assert "nothing to train" in top["title"] and top["ranks"] == [0]


def test_sync_batchnorm_on_a_cpu_batch() -> None:
    top = analyze_cli(GPU / "syncbn_cpu.log")["hypotheses"][0]
    assert (top["cause_id"], top["confidence"]) == ("config.backend_device", 0.75)


def test_collective_buffers_sized_for_another_world() -> None:
    """ProcessGroupNCCL's own checks (and all_to_all's split sizes) on torch 2.11."""
    for name, line in (("gather_into", 23), ("reduce_scatter", 25), ("all_to_all", 30)):
        top = analyze_cli(GPU / f"buffers_{name}.log")["hypotheses"][0]
        assert (top["cause_id"], top["confidence"]) == ("config.world_size_mismatch", 0.55)
        assert top["location"]["line"] == line and "get_world_size(group)" in top["fix"]
