"""One convention for the console scripts: each reads the other tools' spelling, or answers it in
one line (fast_td3/command_line.py), never misreads it."""

import pytest

from fast_td3.command_line import ArgumentParser, as_key_values, key_value_hint, number, whole


def report_like_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="tool")
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--out", default=None)
    parser.add_argument("--sort-by", default="return")
    order = parser.add_mutually_exclusive_group()
    order.add_argument("--ascending", dest="descending", action="store_false", default=None)
    order.add_argument("--descending", dest="descending", action="store_true")
    parser.add_argument("--embed-images", action="store_true")
    return parser


def test_a_flags_tool_reads_key_value_as_its_flags():
    parser = report_like_parser()
    args = parser.parse_args(["run", "paths=other", "out=report.html", "sort_by=foot_slip", "sort-by=rmse",
                              "ascending=true", "embed_images=false"])
    assert (args.paths, args.out, args.sort_by, args.descending, args.embed_images) == (
        ["run", "other"], "report.html", "rmse", False, False)
    # its own spelling, also with "=" inside a value, is as it was
    args = parser.parse_args(["run", "--out", "a=b.html", "--descending", "--embed-images"])
    assert (args.paths, args.out, args.descending, args.embed_images) == (["run"], "a=b.html", True, True)


def test_a_flags_tool_keeps_a_path_that_holds_an_equals_sign(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lr=3e-4").mkdir()
    assert report_like_parser().parse_args(["lr=3e-4", "--", "out=x"]).paths == ["lr=3e-4", "out=x"]


@pytest.mark.parametrize("word, message", [
    ("ou=report.html", "ou=report.html: tool has no option ou (options: --ascending, --descending, --embed-images, "
                       "--help, --out, --sort-by)"),
    ("embed_images=maybe", "embed_images=maybe: --embed-images is a switch; write embed_images=true, "
                           "embed_images=false or --embed-images"),
])
def test_a_flags_tool_answers_an_unknown_key_in_one_line(word, message, capsys):
    with pytest.raises(SystemExit) as stopped:
        report_like_parser().parse_args(["run", word])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"tool: error: {message}"


def kinds_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="tool")
    parser.add_argument("path")
    parser.add_argument("--trials", type=whole(1, 100))
    parser.add_argument("--seed", type=whole(0))
    parser.add_argument("--seconds", type=number(0, 60))
    parser.add_argument("--margin", type=number(0, 1, above_minimum=False))
    return parser


@pytest.mark.parametrize("words, line", [
    (["--trials", "1.9"], "--trials 1.9: give a whole number from 1 to 100"),  # not truncated to 1
    (["--trials", "0"], "--trials 0: give a whole number from 1 to 100"),
    (["--trials", "101"], "--trials 101: give a whole number from 1 to 100"),
    (["--seed", "-1"], "--seed -1: give a whole number, 0 or more"),
    (["--seed", "2.7"], "--seed 2.7: give a whole number, 0 or more"),
    (["--seconds", "nan"], "--seconds nan: give a number above 0 up to 60"),
    (["--seconds", "inf"], "--seconds inf: give a number above 0 up to 60"),
    (["--seconds", "0"], "--seconds 0: give a number above 0 up to 60"),
    (["--seconds", "ten"], "--seconds ten: give a number above 0 up to 60"),
    (["--margin", "-0.1"], "--margin -0.1: give a number from 0 up to 1"),
    (["trials=-2"], "--trials -2: give a whole number from 1 to 100"),  # the key=value spelling too
])
def test_a_value_outside_its_kind_is_one_line_naming_the_option_and_the_range(words, line, capsys):
    with pytest.raises(SystemExit) as stopped:
        kinds_parser().parse_args(["run", *words])
    assert stopped.value.code == 2
    assert capsys.readouterr().err == f"tool: error: {line}\n"


def test_argparse_own_refusals_are_one_line_without_the_usage_block(capsys):
    for words in ([], ["run", "--nope"], ["run", "--trials"]):
        with pytest.raises(SystemExit) as stopped:
            kinds_parser().parse_args(words)
        assert stopped.value.code == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and "usage:" not in err and err.endswith("(tool --help lists the options)\n")


def test_values_inside_their_kind_are_read_as_numbers():
    args = kinds_parser().parse_args(["run", "--trials", "100", "--seed", str(2**64 - 1), "--seconds", "1e-3",
                                      "--margin", "0"])
    assert (args.trials, args.seed, args.seconds, args.margin) == (100, 2**64 - 1, 1e-3, 0.0)


def test_a_key_value_tool_reads_flags_and_leading_paths():
    words = ["run", "bundle", "--use", "latest", "--force", "--device=cpu"]
    assert as_key_values(words, switches=("force",), positionals=("checkpoint", "out")) == [
        "checkpoint=run", "out=bundle", "use=latest", "force=true", "device=cpu"]
    # a positional already given as key=value is not filled again; its own spelling passes unchanged
    assert as_key_values(["out=b", "run", "--min-pass-rate", "0.8"], positionals=("checkpoint", "out")) == [
        "out=b", "checkpoint=run", "min_pass_rate=0.8"]
    # a switch before the paths takes no path as its value; true/false after it are its value
    assert as_key_values(["--force", "run", "bundle"], switches=("force",), positionals=("checkpoint", "out")) == [
        "force=true", "checkpoint=run", "out=bundle"]
    assert as_key_values(["--robust", "false", "t1_flat"], switches=("robust",), positionals=("bundle",)) == [
        "robust=false", "bundle=t1_flat"]


def test_the_trainer_answers_flags_with_the_key_value_to_write():
    assert key_value_hint("fast-td3-train", ["--total-steps", "5"]) == (
        "--total-steps: fast-td3-train takes key=value, not --flags: write total_steps=5")
    assert key_value_hint("fast-td3-train", ["--seed=3"]).endswith("write seed=3")
    # Hydra's own flags are the trainer's
    assert key_value_hint("fast-td3-train", ["--cfg", "job", "-m", "--config-dir", "x", "--help"]) is None


def test_report_writes_the_page_named_in_the_other_spelling(tmp_path, capsys):
    """`fast-td3-report <run> out=report.html`, as a new user tries it, writes report.html."""
    from fast_td3.analysis.report import cli
    from fast_td3.training.metrics_log import METRICS_FILE

    run = tmp_path / "run"
    run.mkdir()
    (run / METRICS_FILE).write_text('{"step": 1, "eval/return_mean": 1.0}\n')
    cli([str(run), f"out={tmp_path / 'report.html'}"])
    assert (tmp_path / "report.html").is_file()


def test_export_and_the_gate_read_the_flags_spelling(capsys):
    from sim2real.export_cli import _parse

    assert _parse(["run", "--out", "bundle", "--force"]) == {"checkpoint": "run", "out": "bundle", "force": "true"}
    from sim2real import gate_cli

    assert gate_cli._parse(["some/bundle", "--seconds", "5", "--robust"]) == {
        "bundle": "some/bundle", "seconds": "5", "robust": "true"}
