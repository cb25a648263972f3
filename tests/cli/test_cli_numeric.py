"""Issue #32: every numeric option is validated. 0, -1, nan, inf and huge values give one
line, ``error: ...`` naming the option (exit 2), never a traceback, a hang or a silently
ignored option; and the library paths they reach refuse them as ConfigError."""

from __future__ import annotations

import math

import numpy as np
import pytest

from veil.cli.main import main
from veil.errors import ConfigError

HUGE_INT = str(10**21)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("numeric")
    rows = ["id,age,ward"] + [f"{i},{20 + i % 50},{'ab'[i % 2]}" for i in range(120)]
    (root / "t.csv").write_text("\n".join(rows) + "\n")
    (root / "synth.csv").write_text("\n".join(r.split(",", 1)[1] for r in rows) + "\n")
    (root / "schema.toml").write_text(
        '[columns.ward]\ntype = "categorical"\ncategories = ["a", "b"]\n'
        '[columns.age]\ntype = "numeric"\nedges = [0, 30, 60, 100]\ninteger = true\n')
    from veil.learn.linear import LogisticRegression
    from veil.learn.model_format import save_model

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 3)), np.arange(40) % 2
    save_model(root / "model.npz", LogisticRegression().fit(X, y))
    np.savez(root / "members.npz", X=X[:20], y=y[:20])
    np.savez(root / "nonmembers.npz", X=X[20:], y=y[20:])
    return root


STATS = ["dp", "stats", "{t}", "--column", "age", "--bounds", "0,100", "--epsilon", "1"]
QUERY = ["dp", "query", "{t}", "--privacy-unit", "id", "--agg", "count", "--group-by", "ward",
         "--keys", "a,b", "--epsilon", "1", "--one-off"]
CALIBRATE = ["budget", "calibrate", "--epsilon", "1", "--delta", "1e-5", "--sample-rate",
             "0.01", "--steps", "100"]
SYNTH = ["synth", "fit", "{root}/synth.csv", "--schema", "{root}/schema.toml", "--epsilon",
         "1", "--delta", "1e-7", "--method", "independent", "--ledger", "{root}/new.db",
         "--budget-epsilon", "5", "--out", "{root}/never.csv"]
AUDIT = ["audit", "--model", "{root}/model.npz", "--members", "{root}/members.npz",
         "--nonmembers", "{root}/nonmembers.npz", "--out", "{root}/never"]
ANON = ["anonymize", "{t}", "--qi", "age", "--sensitive", "ward", "--k", "2", "--algorithm",
        "mondrian"]


def _with(base: list[str], option: str, value: str) -> list[str]:
    argv = list(base)
    if option in argv:
        argv[argv.index(option) + 1] = value
    else:
        argv += [option, value]
    return argv


CASES = [
    # (argv, words the one-line error must hold)
    *[(_with(CALIBRATE, "--epsilon", v), "epsilon") for v in ("0", "-1", "nan", "inf")],
    (_with(CALIBRATE, "--epsilon", "1e308"), "at most 1000"),     # never finished
    (_with(CALIBRATE, "--epsilon", "1e30"), "at most 1000"),
    (_with(CALIBRATE, "--steps", HUGE_INT), "steps"),            # OverflowError
    (_with(CALIBRATE, "--sample-rate", "nan"), "sample_rate"),
    (_with(QUERY, "--epsilon", "1e308"), "epsilon"),             # OverflowError traceback
    (_with(QUERY, "--epsilon", "nan"), "--epsilon"),
    (_with(QUERY, "--delta", "inf"), "--delta"),
    (_with(QUERY, "--max-groups", str(10**12)), "--max-groups"),  # never finished
    (_with(QUERY, "--max-rows", HUGE_INT), "--max-rows"),         # OverflowError
    (_with(QUERY, "--max-rows", "0"), "--max-rows"),
    (QUERY + ["--budget-delta", "1e-6"], "without --ledger"),     # silently ignored
    (STATS + ["--budget-epsilon", "5"], "without --ledger"),
    (STATS + ["--q", "0.3"], "--q"),                               # ignored by --query mean
    (_with(STATS, "--query", "quantile") + ["--q", "2"], "--q"),
    (_with(STATS, "--query", "quantile") + ["--q", "nan"], "--q"),
    (_with(STATS, "--bounds", "-1e308,1e308"), "--bounds"),
    (_with(STATS, "--epsilon", "inf"), "--epsilon"),
    (_with(STATS, "--ledger", "{root}/s.db") + ["--budget-epsilon", "nan"], "--budget-epsilon"),
    (_with(SYNTH, "--rows", str(10**9)), "--rows"),
    (_with(SYNTH, "--epsilon", "1e-300"), "too small"),          # rho underflowed to 0
    (_with(SYNTH, "--delta", "nan"), "delta"),
    (_with(AUDIT, "--n-shadow", "-1"), "--n-shadow"),
    (_with(AUDIT, "--n-shadow", HUGE_INT), "--n-shadow"),
    (_with(AUDIT, "--epsilon", "nan"), "--epsilon"),
    (_with(AUDIT, "--epsilon", "-1"), "--epsilon"),
    (_with(AUDIT, "--delta", "2"), "--delta"),
    (_with(AUDIT, "--confidence", "inf"), "confidence"),
    (ANON + ["--c", "nan"], "--c"),                                 # ignored without --l
    (_with(ANON, "--suppress", "nan"), "--suppress"),
    (["fl", "identities", "{root}/ids", "--parties", str(10**9)], "--parties"),
    (["fl", "identity", "--party", "-1", "--out", "{root}/id"], "--party"),
    (["fl", "submit", "{root}", "--timeout", "nan"], "--timeout"),
    (["net", "certs", "--hosts", "{root}/hosts.toml", "--days", str(10**9)], "days"),
]


@pytest.mark.parametrize(("argv", "words"), CASES,
                         ids=[" ".join(a[:2] + a[-2:]) for a, _ in CASES])
def test_bad_numbers_get_one_line(files, capsys, argv, words):
    (files / "hosts.toml").write_text('session = "n"\nca = "certs/ca.crt"\n' + "".join(
        f'[[party]]\nindex = {i}\nname = "p{i}"\naddress = "127.0.0.1:{9 + i}"\n'
        for i in range(2)))
    filled = [a.format(t=files / "t.csv", root=files) for a in argv]
    code = main(filled)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2, captured
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], lines
    assert not (files / "never.csv").exists() and not (files / "new.db").exists()


def test_a_huge_declared_epsilon_is_reported_not_a_traceback(files, capsys):
    """``veil audit --epsilon 1e30`` ended in an OverflowError (the MI ceiling's e^eps)."""
    argv = [a.format(root=files) for a in _with(AUDIT, "--out", "{root}/report")]
    assert main([*argv, "--epsilon", "1e30", "--json"]) == 0, capsys.readouterr().err


FL = """
[data]
dataset = "wine"
clients = {clients}
test_fraction = {fraction}

[model]
type = "logistic_regression"
alpha = {alpha}

[training]
rounds = 1
"""


@pytest.mark.parametrize(("clients", "fraction", "alpha", "words"), [
    (3, 1.0, 1e-4, "test_fraction"), (3, 0.0, 1e-4, "test_fraction"),
    (3, -0.5, 1e-4, "test_fraction"), (3, "nan", 1e-4, "test_fraction"),
    (0, 0.2, 1e-4, "clients"), (2**62, 0.2, 1e-4, "clients"),
    (3, 0.2, "inf", "alpha"), (3, 0.2, "nan", "alpha"),
])
def test_fl_config_numbers(tmp_path, clients, fraction, alpha, words):
    from veil.experiments.fl_config import load_config

    path = tmp_path / "run.toml"
    path.write_text(FL.format(clients=clients, fraction=fraction, alpha=alpha))
    with pytest.raises(ConfigError, match=words):
        load_config(path)


def test_vertical_config_numbers():
    from veil.experiments.vertical_config import check_section

    for bad in ({"test_fraction": 1.5}, {"test_fraction": math.nan}, {"alpha": math.inf}):
        with pytest.raises(ConfigError, match="is not allowed"):
            check_section(bad, "vertical")


def test_library_paths():
    """The library functions the options reach: refused as ConfigError, or finite."""
    from dp_accounting import dp_event as de

    from veil.audit.leakage import mi_ceiling
    from veil.dp.accounting import calibrate_noise, make_accountant
    from veil.dp.gaussian import zcdp_rho
    from veil.dp.query import Query

    pld = make_accountant("pld")      # a pure event off the PLD's grid: OverflowError before
    pld.compose(de.ComposedDpEvent([de.LaplaceDpEvent(1e-308), de.GaussianDpEvent(1.0)]))
    assert pld.get_epsilon(1e-6) >= 1e308
    with pytest.raises(ConfigError, match="at most 1000"):
        calibrate_noise(1e308, 1e-5)
    with pytest.raises(ConfigError, match="max_rows"):
        Query("id", max_rows=10**10)
    # rho-zCDP for (epsilon, delta): finite and within epsilon at the extremes
    for eps in (1e308, 1e30, 1e-20):
        rho = zcdp_rho(eps, 1e-7)
        assert 0 < rho and math.isfinite(rho)
        assert rho + 2 * math.sqrt(rho) * math.sqrt(math.log(1e7)) <= eps
    with pytest.raises(ConfigError, match="too small"):
        zcdp_rho(1e-300, 1e-7)
    assert mi_ceiling(1e308) == pytest.approx(math.log(2.0))
