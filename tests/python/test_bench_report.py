"""The results file and the table generated from it (python -m tigon.bench.report --markdown)."""

import json
import random
from pathlib import Path

import pytest

from tigon.bench import records, report

ENV = {"gpu": "NVIDIA H200", "torch": "2.11", "triton": "3.6", "liger": "0.8.5", "tigon": "0.1.0", "dtype": "bfloat16"}


def _row(op, impl, shape, sha, ts, dev=None, eager=None, **extra):
    return {
        "op": op,
        "impl": impl,
        "shape": list(shape),
        "full_dev_ms": dev,
        "fwd_dev_ms": dev and dev / 3,
        "full_ms": eager if eager is not None else dev,
        "fwd_ms": dev,
        "peak_mib": 10.0,
        "error": None,
        "git_sha": sha,
        "timestamp": ts,
        **ENV,
        **extra,
    }


def _full_run(sha, ts, scale):
    t = random.uniform(0.1, 1.0)
    return [
        _row("rms_norm", "tigon", (8, 16), sha, ts, dev=t),
        _row("rms_norm", "torch_eager", (8, 16), sha, ts, dev=t * scale),
        _row("rms_norm", "liger", (8, 16), sha, ts, dev=None, eager=t * 2),
        _row("cross_entropy", "tigon", (4, 32), sha, ts, dev=t),
        _row("cross_entropy", "torch_compile", (4, 32), sha, ts, dev=t * 1.5),
    ]


def test_append_keeps_earlier_rows_and_puts_the_environment_first(tmp_path):
    path = tmp_path / "r.jsonl"
    records.append(_full_run("aaa", "2026-01-01T00:00:00", 3.0), path)
    records.append(
        [
            {
                "op": "train_step",
                "impl": "hf",
                "batch": 4,
                "seq": 2048,
                "git_sha": "bbb",
                "timestamp": "2026-01-02T00:00:00",
            }
        ],
        path,
    )
    rows = records.read(path)
    assert len(rows) == 6
    assert list(json.loads(path.read_text().splitlines()[0]))[: len(records.ENV_KEYS)] == list(records.ENV_KEYS)
    assert rows[-1]["shape"] == [4, 2048] and rows[-1]["transformers"] is None


def test_table_comes_from_the_newest_full_run_with_ratios_of_that_run(tmp_path):
    rows = _full_run("old", "2026-01-01T00:00:00", 3.0) + _full_run("new", "2026-01-02T00:00:00", 5.0)
    rows.append(_row("cross_entropy", "tigon", (9, 9), "extra", "2026-01-03T00:00:00", dev=1.0))  # one op: not picked
    table = records.ops_markdown(rows)
    assert "git new" in table and "9×9" not in table
    rms = next(line for line in table.splitlines() if line.startswith("| rms_norm"))
    cells = [c.strip() for c in rms.strip("|").split("|")]
    assert cells[3] == "5.00×"  # torch eager's full time over tigon's, same run
    assert cells[4] == "-"  # no torch.compile row for this op
    assert cells[5] == "2.00×*"  # Liger eager only: compared with tigon's eager call
    ce = next(line for line in table.splitlines() if line.startswith("| cross_entropy"))
    assert "1.50×" in ce


def test_an_op_measured_again_beside_its_baselines_replaces_its_rows_and_names_its_commit():
    rows = _full_run("full", "2026-01-01T00:00:00", 3.0)
    again = [  # cross entropy after a kernel change, with its baseline: replaces the full run's rows
        _row("cross_entropy", "tigon", (4, 32), "fix", "2026-01-02T00:00:00", dev=1.0),
        _row("cross_entropy", "torch_compile", (4, 32), "fix", "2026-01-02T00:00:00", dev=4.0),
    ]
    alone = [_row("rms_norm", "tigon", (8, 16), "solo", "2026-01-03T00:00:00", dev=0.01)]  # no baselines: not taken
    table = records.ops_markdown(rows + again + alone)
    ce = next(line for line in table.splitlines() if line.startswith("| cross_entropy"))
    rms = next(line for line in table.splitlines() if line.startswith("| rms_norm"))
    assert "4.00×" in ce and ce.rstrip(" |").endswith("fix")
    assert rms.rstrip(" |").endswith("full") and "solo" not in table
    assert "git full" in table and "measured again later" in table
    assert "| git |" not in records.ops_markdown(rows + alone)  # one commit: no column


def test_a_benchmark_split_across_calls_of_one_commit_is_one_table_and_parts_split_it():
    first = _full_run("abc", "2026-01-01T00:00:00", 2.0)
    second = [
        _row("gemv", "tigon", (1, 64), "abc", "2026-01-01T00:05:00", dev=None, full_dev_ms=None, full_ms=None),
        _row("linear_act_relu", "tigon", (8, 8, 8), "abc", "2026-01-01T00:05:00", dev=1.0),
        _row("linear_act_gelu", "tigon", (8, 8, 8), "abc", "2026-01-01T00:05:00", dev=1.0),
    ]
    second[0]["fwd_dev_ms"] = second[0]["fwd_ms"] = 0.01
    again = _full_run("abc", "2026-01-01T00:09:00", 3.0)  # the same ops again: a run of its own, not joined
    table = records.ops_markdown(first + again)
    assert "3.00×" in table and "2.00× |" not in table.split("| cross")[0].split("| rms_norm")[1]
    table = records.ops_markdown(first + second)
    assert "| gemv |" in table and "| rms_norm |" in table
    training = records.ops_markdown(first + second, brief=True, part="training")
    assert "| gemv |" not in training and "linear_act_relu" in training and "linear_act_gelu" not in training
    inference = records.ops_markdown(first + second, part="inference")
    assert "| gemv |" in inference and "| rms_norm |" not in inference and "device ms" in inference


def test_cli_prints_markdown_and_names_a_missing_file(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    records.append(_full_run("abc", "2026-01-01T00:00:00", 2.0), path)
    assert report.main(["--markdown", "--file", str(path)]) == 0
    assert "| rms_norm | 8×16 |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        report.main(["--markdown", "--file", str(tmp_path / "missing.jsonl")])
    assert "--file" in capsys.readouterr().err


def test_the_repository_results_file_renders():
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "results" / "h200.jsonl"
    rows = records.read(path)
    assert all(r.get(k) for r in rows for k in ("git_sha", "timestamp", "gpu", "torch", "op", "impl", "shape"))
    assert "| rms_norm |" in records.ops_markdown(rows)
    assert "train_step" in records.train_step_markdown(rows)


def test_train_step_packed_batch_restarts_positions_and_ignores_each_documents_first_label():
    from types import SimpleNamespace

    import torch

    from tigon.bench import train_step

    model = SimpleNamespace(config=SimpleNamespace(vocab_size=50))
    plain = train_step._batch(model, 2, 8, None, torch.device("cpu"))
    assert set(plain) == {"input_ids", "labels"} and plain["labels"] is plain["input_ids"]
    packed = train_step._batch(model, 1, 8, (3, 5), torch.device("cpu"))
    assert packed["position_ids"].tolist() == [[0, 1, 2, 0, 1, 2, 3, 4]]
    assert (packed["labels"] == -100).nonzero()[:, 1].tolist() == [0, 3]
    for config, (model_name, batch, seq, docs) in train_step.CONFIGS.items():
        assert model_name in train_step.MODELS and (docs is None or sum(docs) == batch * seq), config


def test_train_step_table_compares_each_row_with_transformers_at_the_same_optimizer(capsys):
    from tigon.bench import train_step

    def row(impl, optimizer, tokens_per_s):
        return {
            "op": "train_step", "model": "llama", "impl": impl, "optimizer": optimizer, "batch": 4, "seq": 2048,
            "packed": None, "gpu": "GPU", "dtype": "bfloat16", "torch": "2", "transformers": "5", "git_sha": "abc",
            "step_ms": 8192e3 / tokens_per_s, "tokens_per_s": tokens_per_s, "peak_gib": 1.0, "peak_fwd_bwd_gib": 1.0,
            "states_gib": 1.0, "loss_first": 1.0, "loss_last": 0.5,
        }  # fmt: skip

    rows = [
        row("hf", "fused", 100.0),
        row("tigon", "fused", 150.0),
        row("hf", "foreach", 50.0),
        row("tigon", "foreach", 100.0),
    ]
    train_step.print_table(rows)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("llama")]
    assert [line.split()[-2] for line in lines] == ["1.00", "1.50", "1.00", "2.00"]
    table = records.train_step_markdown([dict(r, timestamp="t", **{"gpu": "GPU"}) for r in rows])
    assert "| fused | 4 × 2048 | tigon |" in table and "2.00×" in table


def test_sweep_takes_its_ops_shapes_and_implementations_and_flags_shapes_behind(capsys):
    from tigon.bench import __main__ as cli
    from tigon.bench import sweep

    args = cli.parse_args(["--sweep"])
    assert args.ops == list(sweep.SHAPES) and args.impls == sweep.IMPLS
    assert cli.parse_args(["--sweep", "--ops", "rms_norm,gemv"]).ops == ["rms_norm"]  # gemv has no sweep
    with pytest.raises(SystemExit):
        cli.parse_args(["--sweep", "--shapes", "4x4"])
    row = lambda impl, fwd, full: {
        "op": "rms_norm",
        "shape": [8192, 4096],
        "impl": impl,
        "fwd_dev_ms": fwd,
        "full_dev_ms": full,
    }  # noqa: E731
    sweep.print_summary([row("tigon", 0.10, 0.30), row("liger", 0.09, 0.40), row("torch_compile", 0.12, 0.35)])
    out = capsys.readouterr().out
    assert "0.90" in out and "1.17" in out  # fwd: liger's 0.09 / 0.10; full: compile's 0.35 / 0.30
    assert "behind (< 0.98x): rms_norm 8192x4096" in out


def test_ops_in_processes_of_their_own_make_one_run(tmp_path, monkeypatch):
    """Each op's process stamps its rows when it ends; the parent's timestamp replaces those, so one invocation stays
    one run for the report (else every op would be a run of its own and the table would pick one op)."""
    import subprocess

    import torch

    from tigon.bench import __main__ as cli

    def fake_op_process(cmd):
        out = Path(cmd[cmd.index("--out") + 1])
        op = cmd[cmd.index("--ops") + 1]
        row = {"op": op, "impl": "tigon", "shape": [4, 4], "timestamp": f"child-{op}", "git_sha": "abc"}
        (out / "results.jsonl").write_text(json.dumps(row) + "\n")
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(cli.subprocess, "run", fake_op_process)
    args = cli.parse_args(["--ops", "rms_norm,layer_norm", "--out", str(tmp_path)])
    env = {"timestamp": "parent", "git_sha": "abc"}
    ctx = cli.Context(device=torch.device("cpu"), dtype=torch.bfloat16, reps=1, warmup=0, copy_gbps=1.0, env=env)
    record = cli._Recorder(tmp_path / "record.jsonl")  # the results file, appended op by op
    rows, failed = cli._run_in_processes(args, ctx, record)
    assert not failed and [r["op"] for r in rows] == ["rms_norm", "layer_norm"]
    assert {r["timestamp"] for r in rows} == {"parent"} and len(records.runs(rows)) == 1
    assert record.rows == 2 and [r["op"] for r in records.read(tmp_path / "record.jsonl")] == ["rms_norm", "layer_norm"]
