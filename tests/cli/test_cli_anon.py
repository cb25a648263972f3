import json

import pandas as pd
import pytest

from veil.cli.main import main

QIS = ["sex", "age", "race", "marital-status", "education", "native-country", "workclass",
       "salary-class"]


@pytest.fixture
def adult_dir(adult_available):
    from veil.datasets.files import locate

    return locate("adult/adult.csv").parent


def _qi_args(folder):
    args = []
    for col in QIS:
        args += ["--qi", f"{col}={folder / f'adult_hierarchy_{col}.csv'}"]
    return args


def test_arx_optimum_from_the_cli(adult_dir, tmp_path, capsys):
    out = tmp_path / "released.csv"
    code = main(["anonymize", str(adult_dir / "adult.csv"), *_qi_args(adult_dir),
                 "--sensitive", "occupation", "--k", "5", "--algorithm", "optimal",
                 "--out", str(out), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["levels"] == {"sex": 1, "age": 1, "race": 1, "marital-status": 1,
                                 "education": 3, "native-country": 2, "workclass": 2,
                                 "salary-class": 1}
    assert summary["entropy"] == 324620.5269918692
    assert summary["discernibility"] == 55170356
    assert summary["classes"] == 30 and summary["k"] == 16
    released = pd.read_csv(out, sep=";", dtype=str)
    assert released.shape == (30162, 9) and set(released["sex"]) == {"*"}
    # check the released file from the CLI
    assert main(["anonymize", "check", str(out), *sum([["--qi", c] for c in QIS], []),
                 "--sensitive", "occupation", "--l", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["k"] == 16 and report["classes"] == 30 and report["l_distinct"] == 7


def test_summary_table_and_other_algorithms(tmp_path, capsys):
    table = tmp_path / "t.csv"
    rows = [(20 + i % 40, f"4760{i % 7}", "MF"[i % 2], ["flu", "ulcer", "cancer"][i % 3])
            for i in range(120)]
    pd.DataFrame(rows, columns=["age", "zip", "sex", "disease"]).to_csv(table, index=False)
    sex = tmp_path / "sex.csv"
    sex.write_text("M;*\nF;*\n")
    qis = ["--qi", "age=intervals:5,10,20", "--qi", "zip=mask"]
    assert main(["anonymize", str(table), *qis, "--qi", f"sex={sex}", "--sensitive",
                 "disease", "--k", "4", "--l", "2", "--suppress", "0.05"]) == 0
    printed = capsys.readouterr().out
    assert "levels" in printed and "entropy" in printed and "classes" in printed
    assert main(["anonymize", str(table), "--qi", "age", "--qi", "zip", "--qi", "sex",
                 "--sensitive", "disease", "--k", "4", "--algorithm", "mondrian",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["k"] >= 4
    # Mondrian cuts numbers by value: a hierarchy for one is refused, not ignored
    assert main(["anonymize", str(table), *qis, "--qi", "sex", "--sensitive", "disease",
                 "--k", "4", "--algorithm", "mondrian"]) == 2
    assert "hierarchy was given for a numeric column" in capsys.readouterr().err
    out = tmp_path / "qit.csv"
    assert main(["anonymize", str(table), *qis, "--qi", "sex", "--sensitive", "disease",
                 "--l", "3", "--algorithm", "anatomy", "--out", str(out)]) == 0
    assert "group" in pd.read_csv(out).columns
    assert pd.read_csv(tmp_path / "qit_sensitive.csv")["count"].sum() == 120
    capsys.readouterr()
    assert main(["anonymize", "check", str(table), "--qi", "sex", "--sensitive", "disease",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == pytest.approx({
        "records": 120, "classes": 2, "k": 60, "l_distinct": 3, "l_entropy": 3.0,
        "t": 0.0, "t_distance": "equal"})


def test_cli_errors_are_messages(tmp_path, capsys):
    table = tmp_path / "t.csv"
    table.write_text("a,b\n1,x\n2,y\n")
    hier = tmp_path / "h.csv"
    hier.write_text("1;*\n")
    cases = [
        (["anonymize", str(tmp_path / "missing.csv"), "--qi", "a", "--k", "2"],
         "not a readable CSV"),
        (["anonymize", str(table), "--qi", "zzz", "--k", "2"], "no such column"),
        (["anonymize", str(table), "--qi", f"a={hier}"], "--k, --l, --t, --beta"),
        (["anonymize", str(table), "--qi", f"a={hier}", "--k", "2"],
         "value '2' of column 'a' is missing"),
        (["anonymize", str(table), "--qi", "a", "--sensitive", "a", "--k", "1",
          "--algorithm", "mondrian"], "also a quasi-identifier"),
        (["anonymize", str(table), "--qi", "a=intervals:x", "--k", "2"], "intervals"),
    ]
    for argv, message in cases:
        assert main(argv) == 2
        assert message in capsys.readouterr().err.replace("\n", " ")


def test_arx_hierarchy_files_with_commas_and_other_separators(tmp_path, capsys):
    """ARX hierarchies are ';'-separated and their labels hold commas (``[20,24]``)."""
    table = tmp_path / "t.csv"
    rows = [(20 + i % 20, "FM"[i % 3 > 0], ["flu", "ulcer", "cancer"][i % 3])
            for i in range(90)]
    pd.DataFrame(rows, columns=["age", "sex", "disease"]).to_csv(table, index=False)
    age = tmp_path / "age.csv"
    age.write_text("".join(f"{a};[{a - a % 5},{a - a % 5 + 4}];[{a - a % 10},"
                           f"{a - a % 10 + 9}];*\n" for a in range(20, 40)))
    out = tmp_path / "out.csv"
    assert main(["anonymize", str(table), "--qi", f"age={age}", "--sensitive", "disease",
                 "--k", "10", "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["levels"] == {"age": 1} and summary["k"] >= 10
    assert set(pd.read_csv(out, dtype=str)["age"]) == {"[20,24]", "[25,29]", "[30,34]",
                                                       "[35,39]"}
    sex = tmp_path / "sex.csv"
    sex.write_text("M,*\nF,*\nM,*\n")          # comma-separated, one row repeated
    args = ["anonymize", str(table), "--qi", f"sex={sex}", "--sensitive", "disease",
            "--k", "50", "--json"]
    assert main(args) == 2
    assert "pass sep=','" in capsys.readouterr().err.replace("\n", " ")
    assert main([*args, "--hierarchy-sep", ","]) == 0
    assert json.loads(capsys.readouterr().out)["levels"] == {"sex": 1}
    assert main([*args, "--hierarchy-sep", ",", "--suppress", "0.5", "--metric",
                 "discernibility", "--monotonic"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["levels"] == {"sex": 0} and summary["suppressed"] == 30
    assert summary["discernibility"] == 60 ** 2 + 30 ** 2     # monotonic: as if kept


def test_risk_before_and_after_and_arx_models_from_the_cli(adult_dir, capsys):
    """``--risk`` reports prosecutor, journalist and marketer risk, sample and population
    uniqueness before and after; ARX's k-map case (k=3, USA, 5% suppression) from the CLI."""
    code = main(["anonymize", str(adult_dir / "adult.csv"), *_qi_args(adult_dir),
                 "--sensitive", "occupation", "--k-map", "3", "--population-size",
                 "317238626", "--suppress", "0.05", "--risk", "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["entropy"] == pytest.approx(130804.5332092598, rel=1e-9)
    risk = summary["risk"]
    assert risk["prosecutor_highest"] == {"before": 1.0, "after": 0.5}
    assert risk["sample_uniqueness"]["before"] > 0.2 and risk["sample_uniqueness"]["after"] == 0
    assert risk["population_uniqueness"]["after"] < risk["population_uniqueness"]["before"]
    assert set(risk) >= {"journalist_highest", "marketer", "prosecutor_average"}
    assert main(["anonymize", str(adult_dir / "adult.csv"), *_qi_args(adult_dir),
                 "--k-map", "3"]) == 2
    assert "--k-map needs --population-size" in capsys.readouterr().err
