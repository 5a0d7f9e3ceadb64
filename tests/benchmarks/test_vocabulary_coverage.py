"""The OOV report (benchmarks/vocabulary_coverage.py), on a toy corpus."""

from benchmarks import vocabulary_coverage


def test_vocabulary_coverage_counts_out_of_vocabulary_tokens(tmp_path, capsys):
    train = tmp_path / "train.txt"
    train.write_text("a a a b b c <unk>\na d\n")
    valid = tmp_path / "valid.txt"
    valid.write_text("a b e e\n")
    vocabulary_coverage.main(
        ["--train", str(train), "--eval", str(valid), "--caps", "1", "2", "10"]
    )
    output = capsys.readouterr().out
    assert "9 tokens, 5 distinct words" in output
    # cap 1: {a}; train has 4 a of 9 tokens -> 5/9 out (incl. 1/9 <unk>); valid 3/4 out.
    assert "| 1 | 1 | 55.56% (incl. 11.11% `<unk>` in the text) | 75.00% |" in output
    assert "| 2 | 2 | 33.33% (incl. 11.11% `<unk>` in the text) | 50.00% |" in output
    assert "| 10 | 4 | 11.11% (incl. 11.11% `<unk>` in the text) | 50.00% |" in output
