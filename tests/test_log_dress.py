"""A log reads the same whatever its collector or its paste put around each line: a
timestamp on every line (`kubectl logs --timestamps`), `srun --label`'s task number, a
report's quote marks or code-block indentation, HTML escapes from a web page's source.

The texts are dev cases of the corpus (public reports), dressed here the way those tools
dress them; the verdict must not change.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.eval_cases import DRESSES
from tests.conftest import REPO, analyze_files
from triage.readers.files import sniff
from triage.readers.log_dress import NAKED, Dress, detect
from triage.readers.log_wrap import wrap_width

CASES = [
    "comm/nccl-2-7-docker-default-64mb-dev-shm-posix-fallocate-no-space",
    "config/examples-imagenet-allreduce-cpu-tensor-nccl",
    "hang/lightning-modelcheckpoint-rank-zero-only-log-divergent-best-model-hang",
    "oom/transformer-lm-resume-optimizer-torch-load-all-ranks-onto-gpu0",
]


def case(name: str) -> tuple[str, str]:
    found = json.loads((REPO / "tests/cases" / f"{name}.json").read_text())
    assert found["split"] == "dev"
    return found["evidence"], found["cause"]


def top(folder: Path, text: str) -> str | None:
    folder.mkdir()
    report = analyze_files(folder, {"job.log": text + "\n"})
    return report.hypotheses[0].cause_id if report.hypotheses else None


@pytest.mark.parametrize("dress", sorted(DRESSES))
@pytest.mark.parametrize("name", CASES)
def test_a_dressed_log_reads_as_the_naked_one(tmp_path: Path, name: str, dress: str) -> None:
    evidence, cause = case(name)
    assert top(tmp_path / "naked", evidence) == cause
    assert top(tmp_path / "dressed", DRESSES[dress](evidence)) == cause


def test_what_only_some_lines_wear_is_no_dress(tmp_path: Path) -> None:
    """A framework that stamps its own lines (DeepSpeed) keeps its timestamps; a traceback
    indented under a message keeps its indentation."""
    log = tmp_path / "mixed.log"
    log.write_text(
        "[2023-05-01 10:00:00,000] [INFO] [comm.py:637:init_distributed] Initializing"
        " TorchBackend in DeepSpeed with backend nccl\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        "    main()\n"
        "RuntimeError: boom\n"
    )
    assert detect(log) == NAKED


def test_a_table_whose_rows_start_with_numbers_is_not_numbered(tmp_path: Path) -> None:
    """nccl-tests' rows start with their sizes, not with a count of the lines."""
    log = tmp_path / "allreduce.log"
    log.write_text(
        "           8             2     float     sum      -1    9.16    0.00    0.00      0\n"
        "          16             4     float     sum      -1    9.03    0.00    0.00      0\n"
        "          32             8     float     sum      -1    9.11    0.00    0.00      0\n"
        "          64            16     float     sum      -1    9.06    0.01    0.01      0\n"
    )
    assert all(piece != "number" for piece, _ in detect(log).pieces)


def test_escapes_beside_bare_quotes_are_the_text_itself(tmp_path: Path) -> None:
    log = tmp_path / "page.log"
    log.write_text('  File "a.py", line 1, in f\nprint("&quot; is how HTML writes a quote")\n')
    assert not detect(log).escaped


def test_dress_comes_off_outermost_first() -> None:
    dress = Dress(True, (("stamp", ""), ("quote", ""), ("label", ""), ("indent", "    ")))
    worn = "2024-05-01T10:00:00Z &gt; 3:     File &quot;train.py&quot;, line 7, in main"
    assert dress.undress(worn) == 'File "train.py", line 7, in main'


def test_a_quoted_log_in_an_indented_block_comes_off_in_its_order(tmp_path: Path) -> None:
    """A report quotes its log (`> `) inside a code block: the indentation is outermost."""
    log = tmp_path / "issue.md"
    log.write_text(
        '    >   File "env.py", line 27, in _init_dist_pytorch\n'
        "    >     rank = int(os.environ['RANK'])\n"
        "    > KeyError: 'RANK'\n"
    )
    dress = detect(log)
    assert [piece for piece, _ in dress.pieces] == ["indent", "quote"]
    assert dress.undress("    > KeyError: 'RANK'") == "KeyError: 'RANK'"


def test_lines_cut_at_a_terminals_width_are_read_joined(tmp_path: Path) -> None:
    evidence, cause = case(CASES[3])
    cut = DRESSES["cut-80"](evidence)
    log = tmp_path / "tmux.txt"
    log.write_text(cut + "\n")
    assert wrap_width(log, log.stat().st_size) == 80
    (tmp_path / "report").mkdir()
    report = analyze_files(tmp_path / "report", {"tmux.txt": cut + "\n"})
    assert report.hypotheses[0].cause_id == cause
    assert any("cut at 80 columns" in note for note in report.notes)


def test_long_lines_alike_are_not_a_cut(tmp_path: Path) -> None:
    """Four ranks' watchdog lines of one length, a table's rows: nothing to join."""
    watchdog = "".join(
        f"[rank{r}]:[E424 01:11:21.160832730 ProcessGroupNCCL.cpp:629] [Rank {r}] Watchdog"
        f" caught collective operation timeout: WorkNCCL(SeqNum=4, OpType=BROADCAST,"
        f" NumelIn=112, NumelOut=112, Timeout(ms)=1800000) ran for 1800010 milliseconds\n"
        for r in range(4)
    )
    table = "".join(
        f"|    {g}   N/A  N/A     2659{g}      C   python3     2885MiB |\n" for g in range(4)
    )
    for name, text in (("watchdog.log", watchdog), ("smi.txt", table)):
        log = tmp_path / name
        log.write_text(text)
        assert wrap_width(log, log.stat().st_size) is None


def test_one_long_line_cut_inside_a_word_is_joined(tmp_path: Path) -> None:
    """A pasted exception cut once by an 80-column terminal (a dev case's line)."""
    evidence, cause = case("config/apex-env-world-size-not-set")
    line = evidence.strip().splitlines()[-1]
    assert len(line) > 80
    cut = f"{line[:80]}\n{line[80:]}\n"
    log = tmp_path / "paste.txt"
    log.write_text(cut)
    assert wrap_width(log, log.stat().st_size) == 80
    whole = tmp_path / "whole.txt"
    whole.write_text("x" * 76 + "word\nNext line starts a sentence of its own.\n")
    assert wrap_width(whole, whole.stat().st_size) is None


@pytest.mark.parametrize(
    "name",
    [
        # two long lines, one cut on the space before ` in _compare`
        "config/megatron-ckpt-tp1-loaded-with-tp2",
        # four NCCL lines whose rests are two characters short of the width
        "hang/nccl-2-12-two-ranks-both-send-before-recv-on-concurrent-streams-hang",
        # two long lines, one cut just after the space before `service not known`
        "comm/torchelastic-k8s-pod-hostname-not-resolvable-tcpstore-host-not-found",
        # a quoted nvidia-smi table one character wider than the terminal: `|` alone
        "oom/ddp-imagenet-resume-extra-processes-on-gpu0-torch-load",
    ],
)
@pytest.mark.parametrize("quoted", [False, True], ids=["as-cut", "quoted-after-the-cut"])
def test_cut_lines_join_however_the_cut_fell(tmp_path: Path, name: str, quoted: bool) -> None:
    evidence, cause = case(name)
    cut = DRESSES["cut-80"](evidence)
    cut = DRESSES["quoted"](cut) if quoted else cut
    log = tmp_path / "tmux.txt"
    log.write_text(cut + "\n")
    assert wrap_width(log, log.stat().st_size) is not None
    assert top(tmp_path / "report", cut) == top(tmp_path / "plain", evidence) == cause


def test_a_cut_before_punctuation_no_line_starts_with_is_joined(tmp_path: Path) -> None:
    """A watchdog line cut inside `timeout` and again before `=1800000)` (a dev case's two
    lines): two cuts, both the rest of a line."""
    name = "hang/sagemaker-qlora-fsdp-mixtral-merged-model-save-allreduce-watchdog"
    evidence, _ = case(name)
    cut = DRESSES["cut-80"](evidence)
    assert "\n=1800000)" in cut
    log = tmp_path / "tmux.txt"
    log.write_text(cut + "\n")
    assert wrap_width(log, log.stat().st_size) == 80
    assert top(tmp_path / "report", cut) == top(tmp_path / "plain", evidence) is not None


@pytest.mark.parametrize(
    ("name", "width"),
    [
        # a frame cut inside `_pre_state_dict_hook`, its rest starting with `_`
        ("oom/bagel-fsdp-ema-full-state-dict-unshard-oom-at-checkpoint-save", 120),
        # a path cut after `pytorch_`, its rest starting with digits
        (
            "comm/examples-rpc-parameter-server-master-gloo-reset-by-peer-worker-forward-signature-crash",
            120,
        ),
        # a host name cut after `huggingface.`, its rest `co/models =)`
        ("hang/hf-trainer-early-stopping-per-rank-metrics-one-rank-hits-final-barrier", 80),
    ],
)
def test_a_cut_inside_a_name_is_joined(tmp_path: Path, name: str, width: int) -> None:
    """Two cuts in a paste, each inside an identifier, a path or a dotted name: both are
    the rest of their line, and the text reads as posted."""
    evidence, _ = case(name)
    cut = DRESSES[f"cut-{width}"](evidence)
    log = tmp_path / "tmux.txt"
    log.write_text(cut + "\n")
    assert wrap_width(log, log.stat().st_size) == width
    assert top(tmp_path / "report", cut) == top(tmp_path / "plain", evidence) is not None


def test_two_lines_cut_inside_a_word_at_one_width_are_joined(tmp_path: Path) -> None:
    """An OOM message posted cut at 280 characters, twice inside a word (`Includ` / `ing`,
    `T` / `rue`): no terminal's width, but two cuts of one length that each go on in the
    next line (a dev case as posted)."""
    evidence, cause = case("oom/llm-trainer-parallel-type-none-three-processes-share-gpu0-moe-oom")
    log = tmp_path / "paste.txt"
    log.write_text(evidence + "\n")
    assert wrap_width(log, log.stat().st_size) == 280
    assert top(tmp_path / "report", evidence) == cause
    once = tmp_path / "once.txt"
    once.write_text("x" * 276 + "word\nand the sentence goes on.\n")
    assert wrap_width(once, once.stat().st_size) is None


def test_an_indented_line_after_a_long_one_is_not_its_rest(tmp_path: Path) -> None:
    """A code block's next line starts with several spaces: that is not a cut's rest."""
    log = tmp_path / "trace.txt"
    first = '  File "/opt/conda/lib/python3.10/site-packages/torch/distributed/run.py", ln 1'
    log.write_text(f"{first:<80}\n    main()\nRuntimeError: boom\n")
    assert wrap_width(log, log.stat().st_size) is None


def test_json_records_come_off_and_their_escaped_quotes_are_found(tmp_path: Path) -> None:
    """Docker's json-file driver: each line a record; a traceback's `File \\"` frames are
    found in the raw bytes and read as the program wrote them."""
    lines = [
        "Traceback (most recent call last):",
        '  File "/home/u/train.py", line 9, in <module>',
        "    dist.all_reduce(t)",
        "RuntimeError: Tensors must be CUDA and dense",
    ]
    text = "\n".join(json.dumps({"log": f"{line}\n", "stream": "stderr"}) for line in lines)
    log = tmp_path / "container.log"
    log.write_text(text + "\n")
    assert detect(log) == Dress(record="log")
    report = analyze_files(tmp_path, {})
    assert report.hypotheses[0].cause_id == "config.backend_device"
    assert report.hypotheses[0].location is not None
    assert report.hypotheses[0].location.line == 9


def test_a_json_document_is_no_log_record(tmp_path: Path) -> None:
    """Only lines that are (nearly) all flat records with a line field wear the dress."""
    log = tmp_path / "mixed.log"
    log.write_text('{"log": "step 1\\n"}\nstep 2 plain\nstep 3 plain\n{"config": {"lr": 1}}\n')
    assert detect(log).record == ""


def test_a_one_line_json_log_is_a_log_not_a_document(tmp_path: Path) -> None:
    record = tmp_path / "one.log"
    record.write_text(json.dumps({"log": "RuntimeError: boom\n", "stream": "stderr"}) + "\n")
    document = tmp_path / "doc.json"
    document.write_text(json.dumps({"message": "x", "entries": [{"a": 1}]}))
    assert (sniff(record), sniff(document)) == ("log", "json")
