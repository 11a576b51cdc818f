from triage.text import bound_text, format_nodes, format_ranks


def test_format_ranks_compresses_runs() -> None:
    assert format_ranks([0, 1, 2, 3, 7, 9, 10]) == "0-3,7,9-10"
    assert format_ranks({5}) == "5"
    assert format_ranks([]) == "none"


def test_format_ranks_reads_4096_ranks_as_one_span() -> None:
    assert format_ranks(list(range(4096))) == "0-4095"


def test_a_width_cuts_scattered_ranks_and_nodes_and_counts_them() -> None:
    assert (
        format_ranks(list(range(0, 4096, 2)), width=40) == "0,2,4,6,8,10,12,14,16,... (2,048 ranks)"
    )
    assert format_ranks(list(range(4096)), width=10) == "0-4095"
    every_other = [f"node{n:03d}" for n in range(1, 513, 2)]
    assert format_nodes(every_other, width=30) == "node[001,003,...] (256 nodes)"


def test_bound_text_keeps_head_and_tail() -> None:
    text = "a" * 5000 + "TAIL"
    bounded = bound_text(text, 100)
    assert bounded.startswith("a" * 50)
    assert bounded.endswith("TAIL")
    assert "omitted" in bounded
    assert len(bounded) < 200
    assert bound_text("short", 100) == "short"
