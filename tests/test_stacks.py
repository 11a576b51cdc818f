"""Stack classification on hand-built frames shaped like py-spy's output."""

from __future__ import annotations

from pathlib import Path

from triage.observations import Frame, RankActivity
from triage.readers.stacks import build_stack_tree, classify, gil_holder, is_user_code

SITE = "/venv/lib/python3.11/site-packages"
C10D = f"{SITE}/torch/distributed/distributed_c10d.py"
LOGGER = f"{SITE}/torch/distributed/c10d_logger.py"


def stack(*frames: tuple[str, str, int], **locals_: str) -> list[Frame]:
    """Innermost first, like py-spy; locals go on the innermost frame."""
    out = [Frame(function=f, file=p, line=n) for f, p, n in frames]
    if out and locals_:
        out[0].locals = dict(locals_)
    return out


def collective(op: str, user_line: int, **locals_: str) -> list[Frame]:
    return stack(
        (op, C10D, 2500),
        ("_exception_logger.<locals>.wrapper", LOGGER, 81),
        ("train", "/work/job/train.py", user_line),
        ("main", "/work/job/train.py", 90),
        ("<module>", "/work/job/train.py", 100),
        **locals_,
    )


def test_collective_names_op_and_user_frame() -> None:
    state = classify(collective("all_reduce", 42, group="None"), pid=1, rank=0)
    assert state.activity is RankActivity.collective
    assert state.op == "all_reduce"
    assert state.group == "default"
    assert state.user_frame is not None and state.user_frame.line == 42
    assert [f.function for f in state.call_path] == ["<module>", "main", "train"]


def test_p2p_reads_peer_from_locals() -> None:
    state = classify(collective("recv", 10, src="1", group="None"), pid=1, rank=0)
    assert state.activity is RankActivity.p2p
    assert state.peer == 1


def test_resolved_group_object_is_not_guessed() -> None:
    sub = classify(
        collective("all_reduce", 10, group="<torch._C._distributed_c10d.ProcessGroup at 0x7f>"),
        pid=1,
        rank=0,
    )
    assert sub.group is None


def test_outermost_c10d_op_wins() -> None:
    frames = stack(
        ("all_gather", C10D, 3000),
        ("all_gather_object", C10D, 2800),
        ("gather_metrics", "/work/job/train.py", 12),
    )
    assert classify(frames, pid=1, rank=0).op == "all_gather_object"


def test_new_group_is_group_setup() -> None:
    frames = stack(
        ("_store_based_barrier", C10D, 100), ("new_group", C10D, 200), ("setup", "/job/t.py", 5)
    )
    state = classify(frames, pid=1, rank=0)
    assert state.activity is RankActivity.group_setup
    assert state.op == "new_group"


def test_idle_user_code_is_not_a_collective() -> None:
    frames = stack(("slow_loader", "/work/job/train.py", 30), ("main", "/work/job/train.py", 60))
    assert classify(frames, pid=1, rank=0, active=False).activity is RankActivity.idle
    assert classify(frames, pid=1, rank=0, active=True).activity is RankActivity.compute


def test_data_loading_and_debugger_frames() -> None:
    loader = stack(
        ("_MultiProcessingDataLoaderIter._next_data", f"{SITE}/torch/utils/data/dataloader.py", 1),
        ("train", "/job/train.py", 3),
    )
    assert classify(loader, pid=1, rank=0).activity is RankActivity.data_loading
    pdb = stack(("Pdb.interaction", "/usr/lib/python3.11/pdb.py", 1), ("train", "/job/train.py", 3))
    assert classify(pdb, pid=1, rank=0).activity is RankActivity.debugger


def test_idle_backward_counts_as_waiting_for_gradient_reduction() -> None:
    frames = stack(
        ("_engine_run_backward", f"{SITE}/torch/autograd/graph.py", 1),
        ("Tensor.backward", f"{SITE}/torch/_tensor.py", 2),
        ("train", "/job/train.py", 3),
    )
    assert classify(frames, pid=1, rank=0, active=False).activity is RankActivity.collective
    assert classify(frames, pid=1, rank=0, active=True).activity is RankActivity.compute


def test_user_code_excludes_torch_stdlib_and_site_packages() -> None:
    assert is_user_code("/work/job/train.py")
    assert not is_user_code(C10D)
    assert not is_user_code("/usr/lib/python3.11/threading.py")
    assert not is_user_code(f"{SITE}/accelerate/accelerator.py")


def test_stack_tree_finds_divergence() -> None:
    states = [classify(collective("all_reduce", 42), pid=r, rank=r) for r in range(3)]
    states.append(classify(collective("broadcast", 45), pid=3, rank=3))
    root = build_stack_tree(states)
    assert root.ranks == {0, 1, 2, 3}
    (module,) = root.children.values()
    (point,) = module.children.values()
    assert point.frame == ("main", "/work/job/train.py", 90)
    split = {key[2]: node.ranks for key, node in point.children.items()}
    assert split == {42: {0, 1, 2}, 45: {3}}


def test_a_wait_on_async_work_is_a_collective_and_irecv_wait_a_p2p(tmp_path: Path) -> None:
    """Work.wait() is C++: the user's line is the innermost frame py-spy shows."""
    script = tmp_path / "train.py"
    script.write_text(
        "def finish(pending):\n"
        "    for work in pending:\n"
        "        work.wait()\n"
        "def fetch(buf):\n"
        "    dist.irecv(buf, src=1).wait()\n"
        "def think():\n"
        "    total = sum(range(10))\n"
    )
    at = str(script)
    waiting = classify(stack(("finish", at, 3), ("main", at, 9)), pid=1, rank=0, active=False)
    assert (waiting.activity, waiting.op) == (RankActivity.collective, "wait")
    assert waiting.activity.waits_on_peers
    receiving = classify(stack(("fetch", at, 5)), pid=1, rank=0, active=False)
    assert (receiving.activity, receiving.op) == (RankActivity.p2p, "irecv")
    busy = classify(stack(("think", at, 7)), pid=1, rank=0, active=False)
    assert busy.activity is RankActivity.idle
    running = classify(stack(("finish", at, 3)), pid=1, rank=0, active=True)
    assert running.activity is RankActivity.compute  # on CPU: not blocked in the wait


def test_a_dtensor_gather_is_a_collective_named_by_the_users_call() -> None:
    """DTensor.full_tensor() waits through torch's op dispatch: the innermost frame is in
    torch/_ops.py, a functional-collectives wait lies below, the user called full_tensor
    (frames as py-spy read them from a hung 4-rank gloo job)."""
    frames = stack(
        ("OpOverload.redispatch", f"{SITE}/torch/_ops.py", 926),
        ("make_autograd_impl.<locals>.autograd_impl", f"{SITE}/torch/_library/autograd.py", 147),
        ("wait_tensor", f"{SITE}/torch/distributed/_functional_collectives.py", 142),
        (
            "AsyncCollectiveTensor.wait",
            f"{SITE}/torch/distributed/_functional_collectives.py",
            1126,
        ),
        ("redistribute_local_tensor", f"{SITE}/torch/distributed/tensor/_redistribute.py", 1841),
        ("DTensor.redistribute", f"{SITE}/torch/distributed/tensor/_api.py", 813),
        ("DTensor.full_tensor", f"{SITE}/torch/distributed/tensor/_api.py", 856),
        ("main", "/job/train.py", 32),
    )
    state = classify(frames, pid=1, rank=0, active=False)
    assert state.activity is RankActivity.collective
    assert state.op == "full_tensor"
    assert state.user_frame is not None and state.user_frame.line == 32


def test_dtensor_compute_without_a_collective_wait_is_not_a_collective() -> None:
    frames = stack(
        ("OpOverload.__call__", f"{SITE}/torch/_ops.py", 800),
        ("DTensor.__torch_dispatch__", f"{SITE}/torch/distributed/tensor/_api.py", 350),
        ("main", "/job/train.py", 30),
    )
    state = classify(frames, pid=1, rank=0, active=True)
    assert state.activity is not RankActivity.collective


def test_the_thread_holding_the_gil_is_the_line_that_matters() -> None:
    """py-spy's threads of a rank whose worker thread sits in a C call that keeps the GIL:
    the main thread waits on an Event; the holder's user frame is the culprit line."""
    main = {
        "thread_name": "MainThread",
        "owns_gil": False,
        "frames": [
            {"name": "wait", "filename": "/usr/lib/python3.11/threading.py", "line": 629},
            {"name": "main", "filename": "/job/train.py", "line": 38},
        ],
    }
    holder = {
        "thread_name": "Thread-1 (compress_in_c)",
        "owns_gil": True,
        "frames": [
            {"name": "compress_in_c", "filename": "/job/train.py", "line": 25},
            {"name": "run", "filename": "/usr/lib/python3.11/threading.py", "line": 982},
        ],
    }
    found = gil_holder([main, holder], main)
    assert found is not None
    name, frame = found
    assert name == "Thread-1 (compress_in_c)" and frame.line == 25
    assert gil_holder([main, {**holder, "owns_gil": False}], main) is None
