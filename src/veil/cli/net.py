"""Parties on different hosts: ``veil net ca / csr / sign`` (each party's own TLS key, a CA
that signs requests, :mod:`veil.net.certs`), ``veil net certs`` (the single-machine demo),
``veil psi`` and ``veil keygen``.

Every command reads the same hosts file (:mod:`veil.net.hosts`: session, CA, each party's
index, name and address) and runs *one* party on this host; the parties find each other by
address and authenticate each other by certificate (mutual TLS, :mod:`veil.net.mesh`).
Certificates and keys default to ``NAME.crt`` / ``NAME.key`` beside the CA certificate.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer

from veil.cli._output import (
    check_input_file,
    check_new_files,
    print_json,
    print_mapping,
    print_table,
    say,
    say_replaced,
)
from veil.errors import ConfigError, DataError

app = typer.Typer(help="Parties on different hosts: certificates for the hosts file.",
                  no_args_is_help=True)

HOSTS = typer.Option(..., "--hosts", help="The hosts file (TOML): session, ca, [[party]] "
                                          "index, name, address.")
PARTY = typer.Option(..., "--party", help="This host's party: its index or name.")
CERT = typer.Option(None, "--cert", help="This party's certificate (default NAME.crt beside "
                                         "the CA).")
KEY = typer.Option(None, "--key", help="This party's private key (default NAME.key beside "
                                       "the CA).")
TIMEOUT = typer.Option(120.0, "--timeout", help="Seconds to wait for a silent peer (and for "
                                                "the others to connect) before naming it.")


FORCE = typer.Option(False, "--force", help="Replace an existing private key (it is named).")
DAYS = typer.Option(30, "--days", help="Validity of the certificate(s), in days.")


def _identity(hosts_path: str, party: str, cert: str | None, key: str | None):
    from veil.net import Identity, load_hosts
    hosts = load_hosts(hosts_path)
    me = hosts.party(party)
    return hosts, Identity(hosts, me.name, cert, key)


@app.command()
def certs(
    hosts_path: str = HOSTS,
    days: int = typer.Option(30, "--days", help="Validity of the certificates, in days."),
    force: bool = typer.Option(False, "--force", help="Replace an existing CA and the "
                               "parties' keys and certificates (each replaced key is "
                               "named)."),
) -> None:
    """Single-machine demo: issue the CA (the hosts file's ``ca`` path) and a certificate +
    private key for every party (and the driver) beside it, all in one folder. Across
    organisations each makes its own key instead: veil net csr, then the CA's veil net
    sign."""
    from veil._validation import check_int
    from veil.net import load_hosts
    from veil.net.certs import issue
    hosts = load_hosts(hosts_path, need_ca=False)
    days = check_int(days, "--days", low=1, high=3650)
    identities = {h.name: (h.host,) for h in hosts.parties}
    if hosts.driver:
        identities[hosts.driver] = ()
    folder = hosts.ca.parent
    replaced = check_new_files(
        [hosts.ca, folder / "ca.crt"] + [folder / f"{name}.{ext}" for name in identities
                                         for ext in ("key", "crt")], force=force,
        option="hosts file (its ca)")
    paths = issue(folder, identities, days=days, force=force)
    if paths["ca"] != hosts.ca:
        paths["ca"].replace(hosts.ca)
    print_mapping({"ca": str(hosts.ca), **{name: str(paths[name + ".crt"])
                                          for name in identities}},
                  title=f"certificates of session {hosts.session}")
    say_replaced(list(dict.fromkeys(replaced)))


@app.command()
def ca(hosts_path: str = HOSTS,
       days: int = typer.Option(365, "--days", help="Validity of the CA, in days."),
       force: bool = FORCE) -> None:
    """The CA's operator, once: the CA certificate (the hosts file's ``ca`` path, public:
    to every party) and its private key ca.key beside it (0600; it stays here and signs
    the parties' requests, veil net sign). It never sees a party's private key."""
    from veil.net import load_hosts
    from veil.net.certs import new_ca

    hosts = load_hosts(hosts_path, need_ca=False)
    replaced = check_new_files([hosts.ca, hosts.ca.with_name("ca.key")], force=force,
                               option="hosts file (its ca)")
    paths = new_ca(hosts.ca, name=f"veil CA {hosts.session}", days=days, force=force)
    print_mapping({"ca": str(paths["ca"]), "key (stays here)": str(paths["key"]),
                   "fingerprint": paths["fingerprint"]},
                  title=f"CA of session {hosts.session}")
    say_replaced(replaced)


@app.command()
def csr(name: Annotated[str, typer.Option("--name", help="This party's name (as in the "
                                          "hosts file).")],
        host: Annotated[list[str] | None, typer.Option(
            "--host", help="A DNS name or IP address this party is reached at (repeat).")]
        = None,
        out: Annotated[Path, typer.Option("--out", help="Folder for NAME.key and "
                                          "NAME.csr.")] = Path("."),
        force: bool = FORCE) -> None:
    """On this party's own machine: its private key NAME.key (0600, it never leaves this
    machine) and NAME.csr, the signing request to hand to the CA (veil net sign); tell the
    CA the printed fingerprint over another channel (phone, in person)."""
    from veil.net.certs import request

    replaced = check_new_files([out / f"{name}.key", out / f"{name}.csr"], force=force)
    made = request(out, name, host or (), force=force)
    print_mapping({"key (stays here)": str(made["key"]), "request (to the CA)":
                   str(made["csr"]), "fingerprint": made["fingerprint"]},
                  title=f"signing request of {name}")
    say_replaced(replaced)


@app.command()
def sign(requests: Annotated[list[Path], typer.Argument(help="The parties' NAME.csr files.")],
         hosts_path: str = HOSTS,
         out: Annotated[Path | None, typer.Option(
             "--out", help="Folder for NAME.crt (default: beside each request).")] = None,
         days: int = DAYS,
         force: bool = typer.Option(False, "--force", help="Replace existing NAME.crt files "
                                    "(they are named).")) -> None:
    """The CA: sign the parties' requests (veil net csr) with the hosts file's CA and its
    ca.key. A request must name a party (or the driver) of the hosts file and carry that
    party's address; compare each printed fingerprint with the one the party told you."""
    from veil.net import load_hosts
    from veil.net.certs import read_request
    from veil.net.certs import sign as sign_request

    hosts = load_hosts(hosts_path)
    names = {h.name: (h.host,) for h in hosts.parties}
    if hosts.driver:
        names[hosts.driver] = ()
    # every request is read (and checked) before any is signed
    targets = [(out or path.parent) / f"{read_request(path)[0]}.crt" for path in requests]
    replaced = check_new_files(targets, force=force)
    rows = []
    for path, target in zip(requests, targets):
        name = read_request(path)[0]
        done = sign_request(path, hosts.ca, names, target, days=days)
        rows.append([name, ", ".join(done["hosts"]), done["fingerprint"], str(target)])
    print_table(rows, ["name", "valid for", "key fingerprint", "certificate"],
                title=f"signed by the CA of session {hosts.session}")
    say_replaced(replaced)


def _read_ids(path: str, column: str) -> list[str]:
    check_input_file(Path(path), "--ids", text=True)
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, ValueError) as exc:
        raise DataError(f"--ids={path!r} cannot be read as CSV: {exc}") from None
    if column not in frame.columns:
        raise DataError(f"--column={column!r} is not a column of {path}: "
                        f"{', '.join(map(str, frame.columns))}")
    return frame[column].tolist()


def psi(
    hosts_path: str = HOSTS,
    party: str = PARTY,
    role: str = typer.Option(..., "--role", help="receiver (learns the intersection) or "
                                                 "sender (learns only its size)."),
    ids: str = typer.Option(..., "--ids", help="CSV file with this party's identifiers."),
    column: str = typer.Option("id", "--column", help="The identifier column of --ids."),
    peer: str | None = typer.Option(None, "--peer", help="The other party (index or name); "
                                    "default: the only other party of the hosts file."),
    output: str = typer.Option("intersection", "--output",
                               help="intersection, or cardinality (its size only)."),
    out: str | None = typer.Option(None, "--out", help="Receiver: write the intersection "
                                   "here (CSV, one column) instead of printing it."),
    max_request: int | None = typer.Option(None, "--max-request", help="Sender: the most "
                                           "identifiers a receiver may ask about (default: "
                                           "twice as many as --ids holds)."),
    cert: str | None = CERT,
    key: str | None = KEY,
    timeout: float = TIMEOUT,
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    force: bool = typer.Option(False, "--force", help="Replace an existing --out file."),
) -> None:
    """Private set intersection with a party on another host (ECDH-PSI over mutual TLS)."""
    from veil._validation import check_choice, check_positive
    from veil.crypto.hosts import psi_on_hosts
    check_choice(role, "--role", ("receiver", "sender"))
    check_choice(output, "--output", ("intersection", "cardinality"))
    check_positive(timeout, "--timeout")
    if max_request is not None and role != "sender":
        raise ConfigError("--max-request is not allowed here: only the sender caps requests")
    if out is not None and (role != "receiver" or output != "intersection"):
        raise ConfigError("--out is not allowed here: only the receiver of an intersection "
                          "has rows to write")
    replaced = check_new_files([] if out is None else [out], force=force)
    hosts, identity = _identity(hosts_path, party, cert, key)
    if peer is None:
        others = [h for h in hosts.parties if h.name != identity.name]
        if len(others) != 1:
            raise ConfigError(f"--peer is missing: the hosts file lists {len(hosts)} parties; "
                              "name the other one")
        peer = others[0].name
    items = _read_ids(ids, column)
    start = time.perf_counter()
    result = psi_on_hosts(hosts, identity, peer, role, items, output=output,
                          max_request=max_request, timeout=timeout, connect_timeout=timeout)
    seconds = time.perf_counter() - start
    summary = {"party": identity.name, "role": role, "items": len(items),
               "seconds": round(seconds, 3)}
    if role == "sender":
        summary["learned"] = "the receiver's set size only"
    elif output == "cardinality":
        summary["intersection_size"] = result
    else:
        summary["intersection_size"] = len(result)
        if out is not None:
            from veil._io import atomic_write
            atomic_write(out, pd.DataFrame({column: result}).to_csv(index=False))
            summary["out"] = out
            say_replaced(replaced)
        elif not as_json:
            for item in result:
                say(str(item))
        else:
            summary["intersection"] = result
    if as_json:
        print_json(summary)
    else:
        print_mapping(summary, title="PSI")


def keygen(
    hosts_path: str = HOSTS,
    party: str = PARTY,
    bits: int = typer.Option(2048, "--bits", help="Modulus bits (>= 2048 outside tests)."),
    honest: int = typer.Option(..., "--honest", help="t: the fewest honest parties assumed; "
                               "any threshold = n - t + 1 of the n parties decrypt."),
    out: str = typer.Option(..., "--out", help="This party's key-share file (written only "
                                               "when the whole key generation succeeds)."),
    stat_bits: int = typer.Option(40, "--stat-bits", help="Biprimality test security."),
    insecure_ok: bool = typer.Option(False, "--insecure-ok",
                                     help="Allow keys under 2048 bits (tests and demos)."),
    cert: str | None = CERT,
    key: str | None = KEY,
    timeout: float = TIMEOUT,
    force: bool = typer.Option(False, "--force", help="Replace an existing --out file (it is "
                               "named)."),
) -> None:
    """Dealer-free threshold Paillier key generation with the other parties of the hosts
    file; this party writes only its own share (public key + share, one file)."""
    from veil._validation import check_positive
    from veil.crypto.hosts import keygen_on_hosts
    from veil.crypto.keyfile import save_key_share
    from veil.dp.trust import Trust
    check_positive(timeout, "--timeout")
    target = Path(out)
    replaced = check_new_files([target], force=force)
    if not target.parent.is_dir():
        raise ConfigError(f"--out={out!r} is not allowed: its folder does not exist")
    hosts, identity = _identity(hosts_path, party, cert, key)
    try:
        trust = Trust(len(hosts), honest)
    except ConfigError as exc:
        raise ConfigError(f"--honest: {exc} (the hosts file has {len(hosts)} parties)") from None
    share, stats = keygen_on_hosts(hosts, identity, bits=bits, threshold=trust.threshold,
                                   stat_bits=stat_bits, insecure_ok=insecure_ok,
                                   timeout=timeout, connect_timeout=timeout)
    save_key_share(target, share, force=force)
    pk = share.public_key
    print_mapping({"party": identity.name, "share": share.index, "bits": pk.bits,
                   "honest": trust.honest, "threshold": f"{pk.threshold} of {pk.parties}",
                   "key": pk.fingerprint.hex()[:16], "out": out,
                   "seconds": round(stats["seconds"], 2),
                   "MB sent": round(stats["sent"] / 1e6, 2), "rounds": stats["rounds"]},
                  title="distributed key generation")
    say_replaced(replaced)
