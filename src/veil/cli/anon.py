"""``veil anonymize``: anonymize a CSV file, or check what privacy a file achieves.

    veil anonymize IN.csv --qi age=HIER.csv --qi sex=HIER.csv ... --sensitive occupation \\
        --k 5 [--l 3] [--t 0.2] [--suppress 0.04] --algorithm optimal --out OUT.csv
    veil anonymize check IN.csv --qi age --qi sex ... --sensitive occupation [--l 3]

A ``--qi`` is ``COLUMN`` (no hierarchy), ``COLUMN=FILE.csv`` (an ARX hierarchy file),
``COLUMN=intervals:5,10,20`` (nested intervals of those widths) or ``COLUMN=mask``
(character masking, for codes such as ZIP). The table's separator is detected; hierarchy
files are read as ARX writes them, ``;``-separated (labels may hold commas, ``[0,4]``), or
with ``--hierarchy-sep``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pandas as pd
import typer

from veil._io import atomic_write
from veil.anon import (
    ALGORITHMS,
    AverageReidentificationRisk,
    BasicBetaLikeness,
    DeltaDisclosure,
    EnhancedBetaLikeness,
    Hierarchy,
    KAnonymity,
    KMap,
    LDiversity,
    PopulationUniqueness,
    PrivacyModel,
    SampleUniqueness,
    TCloseness,
    anonymize,
    check,
)
from veil.anon.hierarchy import sniff_separator
from veil.anon.metrics import OBJECTIVES
from veil.cli._groups import DefaultGroup
from veil.cli._output import (
    check_new_files,
    parse_list,
    print_json,
    print_mapping,
    progress,
    say,
)
from veil.errors import ConfigError, DataError

app = typer.Typer(cls=DefaultGroup, no_args_is_help=True,
                  help="Anonymize a table (k-anonymity, l-diversity, t-closeness), or check "
                       "one: `veil anonymize IN.csv ...`, `veil anonymize check IN.csv ...`.")

QI_HELP = ("Quasi-identifier: COLUMN, COLUMN=HIERARCHY.csv, COLUMN=intervals:W1,W2,... or "
           "COLUMN=mask.")


def read_table(path: Path, sep: str | None) -> tuple[pd.DataFrame, str]:
    """A CSV file as strings (empty cells missing) and its separator."""
    try:
        with open(path, encoding="utf-8-sig") as handle:
            sample = handle.read(65536)
        sep = sep or sniff_separator(sample, default=",")
        table = pd.read_csv(path, sep=sep, dtype=str, keep_default_na=False, na_values=[""],
                            encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError, pd.errors.ParserError,
            pd.errors.EmptyDataError) as exc:
        raise DataError(f"{str(path)!r} is not a readable CSV file: {exc}") from None
    return table, sep


def parse_qis(specs: list[str], table: pd.DataFrame,
              hierarchy_sep: str = ";") -> dict[str, Hierarchy | None]:
    """``--qi`` options to {column: hierarchy or None}."""
    qis: dict[str, Hierarchy | None] = {}
    for spec in specs:
        column, _, source = spec.partition("=")
        if not column:
            raise ConfigError(f"--qi {spec!r} is not allowed: expected COLUMN[=HIERARCHY]")
        if column in qis:
            raise ConfigError(f"--qi {column!r} is given twice")
        if column not in table.columns:
            raise DataError(f"--qi {column!r}: the table has no such column (columns: "
                            f"{list(table.columns)})")
        values = table[column].dropna()
        if not source:
            qis[column] = None
        elif source == "mask":
            qis[column] = Hierarchy.masking(values.unique(), name=column)
        elif source.startswith("intervals:"):
            widths = parse_list(source.split(":", 1)[1], f"--qi {column} intervals")
            try:
                numbers = pd.to_numeric(pd.Series(values.unique()))
            except ValueError:
                raise ConfigError(f"--qi {spec!r} is not allowed: intervals need numeric "
                                  "widths and a numeric column") from None
            qis[column] = Hierarchy.intervals(numbers, widths, name=column)
        else:
            qis[column] = Hierarchy.from_csv(source, sep=hierarchy_sep, name=column)
    if not qis:
        raise ConfigError("give at least one --qi")
    return qis


def _models(k: int | None, l: int | None, l_variant: str, c: float | None, t: float | None,
            t_distance: str, sensitive_hierarchy: Hierarchy | None, *,
            sensitive: str | None = None, beta: float | None = None,
            beta_variant: str = "basic", delta: float | None = None,
            k_map: int | None = None, average_risk: float | None = None,
            sample_uniqueness: float | None = None,
            population_uniqueness: float | None = None, population_size: int | None = None,
            population_model: str = "dankar") -> list[PrivacyModel]:
    models: list[PrivacyModel] = []
    if c is not None and l is None:
        raise ConfigError(f"--c={c!r} is not allowed without --l: it is the c of recursive "
                          "(c,l)-diversity (--l L --l-variant recursive --c C)")
    if k is not None:
        models.append(KAnonymity(k))
    if l is not None:
        models.append(LDiversity(l, variant=l_variant, c=c))
    if t is not None:
        models.append(TCloseness(t, distance=t_distance, hierarchy=sensitive_hierarchy))
    if beta is not None:
        kind = {"basic": BasicBetaLikeness, "enhanced": EnhancedBetaLikeness}.get(beta_variant)
        if kind is None:
            raise ConfigError(f"--beta-variant={beta_variant!r} is not allowed: basic or "
                              "enhanced")
        models.append(kind(sensitive, beta))
    if delta is not None:
        models.append(DeltaDisclosure(sensitive, delta))
    needs_population = [flag for flag, value in (("--k-map", k_map),
                        ("--population-uniqueness", population_uniqueness)) if value is not None]
    if needs_population and population_size is None:
        raise ConfigError(f"{needs_population[0]} needs --population-size")
    if k_map is not None:
        models.append(KMap(k_map, population_size=population_size))
    if average_risk is not None:
        models.append(AverageReidentificationRisk(average_risk))
    if sample_uniqueness is not None:
        models.append(SampleUniqueness(sample_uniqueness))
    if population_uniqueness is not None:
        models.append(PopulationUniqueness(population_uniqueness, population_model,
                                           population_size=population_size))
    if not models:
        raise ConfigError("give at least one privacy model: --k, --l, --t, --beta, --delta, "
                          "--k-map, --average-risk, --sample-uniqueness or "
                          "--population-uniqueness")
    return models


def _risk_rows(result) -> dict[str, object]:
    """The risk analysis before and after, one row per estimate."""
    before, after = result.risk["before"], result.risk["after"]
    rows: dict[str, object] = {}
    for key, value in before.as_dict().items():
        if key in ("threshold", "population_model") or value is None:
            continue
        rows[key] = {"before": value, "after": getattr(after, key)}
    return rows


def _fmt(value: object) -> object:
    return repr(value) if isinstance(value, float) else value


Input = Annotated[Path, typer.Argument(help="The table (CSV; separator detected).")]
Sensitive = Annotated[str | None, typer.Option("--sensitive", help="Sensitive column.")]
TDistance = Annotated[str, typer.Option("--t-distance",
                                        help="EMD: auto, equal, ordered or hierarchical.")]
SensitiveHierarchy = Annotated[Path | None, typer.Option(
    "--sensitive-hierarchy", help="Hierarchy of the sensitive column (hierarchical EMD).")]
Sep = Annotated[str | None, typer.Option("--sep", help="Field separator (default: detect).")]
HierarchySep = Annotated[str, typer.Option(
    "--hierarchy-sep", help="Field separator of hierarchy files (ARX: ';').")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


@app.command("run")
def run(
    input: Input,
    qi: Annotated[list[str], typer.Option("--qi", help=QI_HELP)],
    sensitive: Sensitive = None,
    k: Annotated[int | None, typer.Option("--k", help="k-anonymity.")] = None,
    l: Annotated[int | None, typer.Option("--l", help="l-diversity (sensitive column).")] = None,
    l_variant: Annotated[str, typer.Option(
        "--l-variant", help="distinct, entropy or recursive.")] = "distinct",
    c: Annotated[float | None, typer.Option("--c", help="c of recursive (c,l).")] = None,
    t: Annotated[float | None, typer.Option("--t", help="t-closeness (sensitive).")] = None,
    t_distance: TDistance = "auto",
    sensitive_hierarchy: SensitiveHierarchy = None,
    suppress: Annotated[float, typer.Option(
        "--suppress", help="Share of records that may be suppressed (optimal).")] = 0.0,
    algorithm: Annotated[str, typer.Option(
        "--algorithm", help=f"One of {', '.join(ALGORITHMS)}.")] = "optimal",
    metric: Annotated[str, typer.Option(
        "--metric", help=f"Objective of optimal: {', '.join(OBJECTIVES)}.")] = "entropy",
    strict: Annotated[bool, typer.Option("--strict", help="Strict Mondrian cuts.")] = False,
    out: Annotated[Path | None, typer.Option(
        "--out", help="Write the released table here (anatomy: also OUT_sensitive.csv).")
    ] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace an existing --out file (never the input).")] = False,
    sep: Sep = None,
    hierarchy_sep: HierarchySep = ";",
    monotonic: Annotated[bool, typer.Option(
        "--monotonic", help="ARX's monotonic entropy / discernibility under suppression: "
                            "suppressed records cost as if kept.")] = False,
    beta: Annotated[float | None, typer.Option(
        "--beta", help="beta-likeness of the sensitive column.")] = None,
    beta_variant: Annotated[str, typer.Option(
        "--beta-variant", help="basic or enhanced beta-likeness.")] = "basic",
    delta: Annotated[float | None, typer.Option(
        "--delta", help="delta-disclosure privacy of the sensitive column.")] = None,
    k_map: Annotated[int | None, typer.Option(
        "--k-map", help="k-map, estimated (needs --population-size).")] = None,
    average_risk: Annotated[float | None, typer.Option(
        "--average-risk", help="Highest average re-identification risk.")] = None,
    sample_uniqueness: Annotated[float | None, typer.Option(
        "--sample-uniqueness", help="Highest share of records unique in the table.")] = None,
    population_uniqueness: Annotated[float | None, typer.Option(
        "--population-uniqueness", help="Highest estimated share of population uniques "
                                        "(needs --population-size).")] = None,
    population_size: Annotated[int | None, typer.Option(
        "--population-size", help="People the table was sampled from.")] = None,
    population_model: Annotated[str, typer.Option(
        "--population-model", help="dankar, pitman, zayatz or snb.")] = "dankar",
    risk: Annotated[bool, typer.Option(
        "--risk", help="Show the re-identification risks before and after.")] = False,
    json_: Json = False,
) -> None:
    """Anonymize IN.csv and print a summary (levels, classes, metrics)."""
    if not 0 <= suppress <= 1:
        raise ConfigError(f"--suppress={suppress!r} is not allowed: must be a share in [0, 1]")
    if out is not None:
        if out.is_dir():
            raise DataError(f"--out={str(out)!r} is a directory; expected a file name")
        if out.resolve() == input.resolve():
            raise ConfigError(f"--out={str(out)!r} is the input: choose another name")
        check_new_files([out] + ([out.with_name(out.stem + "_sensitive" + out.suffix)]
                                 if algorithm == "anatomy" else []), force=force)
    table, sep = read_table(input, sep)
    qis = parse_qis(qi, table, hierarchy_sep)
    sens_h = None if sensitive_hierarchy is None else Hierarchy.from_csv(
        sensitive_hierarchy, sep=hierarchy_sep, name=sensitive)
    models = _models(k, l, l_variant, c, t, t_distance, sens_h, sensitive=sensitive,
                     beta=beta, beta_variant=beta_variant, delta=delta, k_map=k_map,
                     average_risk=average_risk, sample_uniqueness=sample_uniqueness,
                     population_uniqueness=population_uniqueness,
                     population_size=population_size, population_model=population_model)
    with progress(f"anonymize ({algorithm})", transient=True):
        result = anonymize(table, qis, sensitive, models, algorithm=algorithm,
                           suppression_limit=suppress, metric=metric,
                           monotonic=monotonic, strict=strict,
                           population_size=population_size)
    if out is not None:
        try:
            atomic_write(out, result.table.to_csv(sep=sep, index=False))
            if result.sensitive_table is not None:
                st_path = out.with_name(out.stem + "_sensitive" + out.suffix)
                atomic_write(st_path, result.sensitive_table.to_csv(sep=sep, index=False))
        except OSError as exc:
            raise DataError(f"cannot write {str(out)!r}: {exc}") from None
    summary: dict[str, object] = {"algorithm": algorithm,
                                  "models": ", ".join(map(str, models)),
                                  "records": len(table)}
    if result.levels is not None:
        summary["levels"] = result.levels
    summary.update(result.metrics)
    if result.search:
        summary.update({f"search_{key}": value for key, value in result.search.items()})
    if risk:
        summary["risk"] = _risk_rows(result)
    if json_:
        print_json(summary)
        return
    rows = {key: value for key, value in summary.items() if key != "risk"}
    if result.levels is not None:
        rows["levels"] = ", ".join(f"{col}={lv}" for col, lv in result.levels.items())
    print_mapping({key: _fmt(value) for key, value in rows.items()},
                  title=f"veil anonymize ({algorithm})")
    if risk:
        print_mapping({key: f"{_fmt(v['before'])} -> {_fmt(v['after'])}"
                       for key, v in summary["risk"].items()},
                      title="re-identification risk (before -> after)")
    if out is not None:
        say(f"released table written to {out}")


@app.command("check")
def check_cmd(
    input: Input,
    qi: Annotated[list[str], typer.Option("--qi", help="Quasi-identifier column.")],
    sensitive: Sensitive = None,
    l: Annotated[int | None, typer.Option("--l", help="l for the c of recursive (c,l).")] = None,
    t_distance: TDistance = "auto",
    sensitive_hierarchy: SensitiveHierarchy = None,
    sep: Sep = None,
    hierarchy_sep: HierarchySep = ";",
    json_: Json = False,
) -> None:
    """Report the k, l (distinct, entropy), c and t that IN.csv achieves."""
    table, _ = read_table(input, sep)
    columns = list(parse_qis(qi, table, hierarchy_sep))
    sens_h = None if sensitive_hierarchy is None else Hierarchy.from_csv(
        sensitive_hierarchy, sep=hierarchy_sep, name=sensitive)
    report = check(table, columns, sensitive, l=l, distance=t_distance,
                   sensitive_hierarchy=sens_h)
    if json_:
        print_json(report.as_dict())
    else:
        print_mapping({key: _fmt(value) for key, value in report.as_dict().items()},
                      title="veil anonymize check")
