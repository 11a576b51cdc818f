"""Results pasted once per GPU count: what moves with the count names the candidates, and
the two that the numbers cannot tell apart are ranked close, with the rerun that does."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import analyze_files

# Per-GPU-count results as reporters paste them (the shape of open-mmlab/mmsegmentation
# and pytorch/vision threads): a metric per count, and torchvision's evaluation summary.
BY_GPUS = "1 gpu: 0.7729\n2 gpus: 0.7750\n4 gpus: 0.7478\n8 gpus: 0.5373\n"
SAMPLES = (
    "Test:  Acc@1 69.762 Acc@5 89.076, 50000 samples processed -- world_size = 1\n"
    "Test:  Acc@1 69.760 Acc@5 89.075, 50004 samples processed -- world_size = 6\n"
    "Test:  Acc@1 69.761 Acc@5 89.074, 50001 samples processed -- world_size = 3\n"
)


def test_a_metric_that_falls_with_more_gpus_names_scaling_and_batchnorm_close(
    tmp_path: Path,
) -> None:
    found = analyze_files(tmp_path, {"results.txt": BY_GPUS}).hypotheses
    causes = [(h.cause_id, h.confidence) for h in found]
    assert causes == [("wrong.reduction_scaling", 0.3), ("wrong.batchnorm_sync", 0.25)], causes
    assert "`8 gpus: 0.5373`" in found[0].summary
    assert "SyncBatchNorm" in found[0].confirm and "global batch" in found[1].confirm


def test_an_evaluated_count_that_grows_with_the_ranks_is_sampler_padding(tmp_path: Path) -> None:
    top = analyze_files(tmp_path, {"results.txt": SAMPLES}).hypotheses[0]
    assert (top.cause_id, top.confidence) == ("wrong.eval_sharding", 0.55)
    assert "50004 at 6" in top.summary


def test_counts_of_different_datasets_are_no_padding(tmp_path: Path) -> None:
    other = SAMPLES.replace("50004 samples", "10000 samples")
    found = analyze_files(tmp_path, {"results.txt": other}).hypotheses
    assert "wrong.eval_sharding" not in [h.cause_id for h in found]


def test_a_metric_within_noise_across_gpu_counts_is_no_finding(tmp_path: Path) -> None:
    steady = "1 gpu: 0.7729\n8 gpus: 0.7701\n"
    assert analyze_files(tmp_path, {"results.txt": steady}).hypotheses == []


def test_a_failure_beside_the_table_is_read_instead(tmp_path: Path) -> None:
    text = BY_GPUS + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    causes = [h.cause_id for h in analyze_files(tmp_path, {"results.txt": text}).hypotheses]
    assert causes[0].startswith("oom.")
    assert "wrong.reduction_scaling" not in causes and "wrong.batchnorm_sync" not in causes
