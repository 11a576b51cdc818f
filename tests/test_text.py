from triage.text import bound_text, format_ranks


def test_format_ranks_compresses_runs() -> None:
    assert format_ranks([0, 1, 2, 3, 7, 9, 10]) == "0-3,7,9-10"
    assert format_ranks({5}) == "5"
    assert format_ranks([]) == "none"


def test_format_ranks_reads_4096_ranks_as_one_span() -> None:
    assert format_ranks(list(range(4096))) == "0-4095"


def test_bound_text_keeps_head_and_tail() -> None:
    text = "a" * 5000 + "TAIL"
    bounded = bound_text(text, 100)
    assert bounded.startswith("a" * 50)
    assert bounded.endswith("TAIL")
    assert "omitted" in bounded
    assert len(bounded) < 200
    assert bound_text("short", 100) == "short"
