"""The hybrid approach's set-up as files, for parties on their own machines.

Who holds what (:mod:`veil.fl.hybrid.protocol` states the trust assumptions):

* every party and the aggregator hold the **public set-up** (:class:`PublicSetup`): the
  threshold Paillier public key and each party's Ed25519 identity public key, in the order
  of the party indices. Its :attr:`~PublicSetup.fingerprint` (SHA-256 of its bytes) is part
  of the run's plan, so a party whose set-up differs from the aggregator's refuses the run;
* party i alone holds its **key share** (:mod:`veil.crypto.keyfile`: the public key and
  share number i + 1, the format the dealer-free key generation writes too) and its
  **identity** file (:class:`PartyIdentity`: its index, its Ed25519 private key, and its
  own copy of the public set-up -- it never takes the set-up from the aggregator);
* the aggregator holds no share and no private identity.

:func:`deal` is the trusted dealer of the paper run as its own step (``veil fl deal``): it
makes the key (:func:`veil.fl.hybrid.protocol.deal_keys`) and every identity, writes
``public.bin`` and, per party, ``party-I.key`` and ``party-I.id`` (mode 0600), and keeps
nothing; each organisation receives its two files over a private channel.

Without a dealer every file is made by its owner: the parties generate the key together
(``veil keygen``, :mod:`veil.crypto.dkg`), each writing only its own ``party-I.key``; each
makes its own identity key (``veil fl identity``, :func:`veil.crypto.identity.write_identity`)
and publishes its public half; :func:`assemble` (``veil fl setup``) builds ``public.bin`` from
the public key inside a key-share file -- only its public part is read, so any party can
run it with its own file and every party gets the same bytes, the same fingerprint -- and
the published identity keys; :func:`enrol` (``veil fl enrol``) has party I check its own
share and identity key against its own ``public.bin`` and write its ``party-I.id``. The
aggregator receives ``public.bin`` from a party (or builds it from the published tables and
a party's ``public.bin``), and runs nothing that sees a share.

File formats: checksummed frames of :mod:`veil._codec` -- ``public.bin`` magic ``b"VHPS"``
(the public key blob of :mod:`veil.crypto.serialization`, then the identity keys, 32 bytes
each), ``party-I.id`` magic ``b"VHID"`` (the index u32, the 32-byte private key, the public
set-up's bytes). Every load checks what it can: the identity's private key must give the
public key the set-up lists for its index.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from veil._codec import Format
from veil._io import atomic_write, check_absent, write_private
from veil._validation import check_int
from veil.crypto import identity, keyfile, serialization, threshold
from veil.dp.trust import Trust, check_trust
from veil.errors import ConfigError, CryptoError
from veil.fl.hybrid.protocol import deal_keys, make_identities

__all__ = ["PartyIdentity", "PublicSetup", "assemble", "deal", "enrol", "load_party"]

_PUBLIC = Format(b"VHPS", 1, error=CryptoError, checksum=True, name="hybrid public set-up")
_IDENTITY = Format(b"VHID", 1, error=CryptoError, checksum=True, name="hybrid party identity")


def _read(path: str | os.PathLike, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{what} file {os.fspath(path)!r} cannot be read: "
                          f"{exc.strerror}") from None


@dataclass(frozen=True)
class PublicSetup:
    """The threshold public key and the parties' identity public keys (public)."""

    public_key: threshold.ThresholdPublicKey
    identities: tuple[bytes, ...]

    def __post_init__(self) -> None:
        if len(self.identities) != self.public_key.parties or not all(
                isinstance(k, bytes) and len(k) == 32 for k in self.identities):
            raise ConfigError(f"a set-up for {self.public_key.parties} parties needs as many "
                              f"32-byte identity keys; got {len(self.identities)}")

    def to_bytes(self) -> bytes:
        writer = _PUBLIC.writer().blob(serialization.dumps(self.public_key))
        writer.u32(len(self.identities))
        for key in self.identities:
            writer.raw(key)
        return writer.finish()

    @classmethod
    def assemble(cls, public_key: threshold.ThresholdPublicKey,
                 table: Mapping[int, bytes]) -> PublicSetup:
        """The set-up of ``public_key`` and an identity table (party index -> public key),
        which must list exactly the key's parties 0..n-1 (ConfigError naming the missing
        or extra indices)."""
        table = identity.check_table(table)
        expected = set(range(public_key.parties))
        if set(table) != expected:
            missing, extra = sorted(expected - set(table)), sorted(set(table) - expected)
            raise ConfigError(
                f"the identity table does not fit a key of {public_key.parties} parties: "
                + "; ".join(part for part in (
                    f"no identity for party {', '.join(map(str, missing))}" if missing else "",
                    f"party {', '.join(map(str, extra))} is not one of the key's" if extra
                    else "") if part))
        return cls(public_key, tuple(table[i] for i in range(public_key.parties)))

    @classmethod
    def from_bytes(cls, data: bytes, *, insecure_ok: bool = False) -> PublicSetup:
        reader = _PUBLIC.reader(data)
        public_key = serialization.loads(reader.blob(), insecure_ok=insecure_ok)
        if not isinstance(public_key, threshold.ThresholdPublicKey):
            raise CryptoError("the hybrid set-up holds no threshold public key")
        count = reader.u32()
        if count != public_key.parties:
            raise CryptoError(f"the hybrid set-up lists {count} identities for a key of "
                              f"{public_key.parties} parties")
        identities = tuple(bytes(reader.take(32)) for _ in range(count))
        reader.done()
        return cls(public_key, identities)

    @classmethod
    def load(cls, path: str | os.PathLike, *, insecure_ok: bool = False) -> PublicSetup:
        try:
            return cls.from_bytes(_read(path, "public set-up"), insecure_ok=insecure_ok)
        except CryptoError as exc:
            raise CryptoError(f"public set-up file {os.fspath(path)!r}: {exc}") from None

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the set-up's bytes, hex: what the parties compare."""
        return hashlib.sha256(self.to_bytes()).hexdigest()

    def save(self, path: str | os.PathLike) -> None:
        """Write the set-up to ``path`` (public: mode 0644)."""
        atomic_write(path, self.to_bytes())
        os.chmod(path, 0o644)


@dataclass(frozen=True)
class PartyIdentity:
    """Party ``index``'s identity: its Ed25519 private key and its copy of the set-up."""

    index: int
    private_key: bytes
    setup: PublicSetup

    def __post_init__(self) -> None:
        check_int(self.index, "index", low=0, high=len(self.setup.identities) - 1)
        public = Ed25519PrivateKey.from_private_bytes(self.private_key).public_key()
        if public.public_bytes_raw() != self.setup.identities[self.index]:
            raise ConfigError(f"the identity key of party {self.index} is not the one its "
                              "set-up lists for that party")

    def to_bytes(self) -> bytes:
        return (_IDENTITY.writer().u32(self.index).raw(self.private_key)
                .blob(self.setup.to_bytes()).finish())

    def save(self, path: str | os.PathLike, *, force: bool = False) -> None:
        """Write the identity to ``path``, readable by its owner only
        (:func:`veil._io.write_private`: an existing file is replaced only with ``force``)."""
        write_private(path, self.to_bytes(), force=force, what="identity file")

    @classmethod
    def load(cls, path: str | os.PathLike, *, insecure_ok: bool = False) -> PartyIdentity:
        try:
            reader = _IDENTITY.reader(_read(path, "identity"))
            index, private = reader.u32(), bytes(reader.take(32))
            setup = PublicSetup.from_bytes(reader.blob(), insecure_ok=insecure_ok)
            reader.done()
        except CryptoError as exc:
            raise CryptoError(f"identity file {os.fspath(path)!r}: {exc}") from None
        return cls(index, private, setup)


def deal(trust: Trust, out_dir: str | os.PathLike, *, bits: int = 2048,
         insecure_ok: bool = False, keygen: str = "dealer", force: bool = False) -> PublicSetup:
    """The dealer: make the key (for ``trust``: ``trust.threshold`` of ``trust.parties``
    decrypt) and identities, write ``public.bin`` and each party's
    ``party-I.key`` / ``party-I.id`` into ``out_dir``; returns the public set-up. Existing
    files are replaced only with ``force`` (ConfigError before any key is made otherwise).
    ``keygen="distributed"`` is refused: one process writing every share is a dealer
    whatever made the key; without a dealer each party runs the key generation itself
    (``veil keygen``, :mod:`veil.crypto.dkg`) and writes only its own files (module
    docstring)."""
    if keygen == "distributed":
        raise ConfigError("keygen='distributed' is not allowed for veil fl deal: one process "
                          "would write every party's share, which makes it a dealer. Without a "
                          "dealer, each party runs `veil keygen` (the distributed key "
                          "generation) on its own machine, then `veil fl identity`, "
                          "`veil fl setup` and `veil fl enrol`")
    trust = check_trust(trust)
    out = Path(out_dir)
    check_absent([out / "public.bin"] + [out / f"party-{i}.{ext}" for i in range(trust.parties)
                                          for ext in ("key", "id")], force=force,
                 what="set-up file")
    keys = deal_keys(trust, bits=bits, insecure_ok=insecure_ok, keygen=keygen)
    private, public = make_identities(trust.parties)
    setup = PublicSetup(keys.public_key, public)
    out.mkdir(parents=True, exist_ok=True)
    setup.save(out / "public.bin")
    for i, share in enumerate(keys.shares):
        keyfile.save_key_share(out / f"party-{i}.key", share, force=force)
        PartyIdentity(i, private[i], setup).save(out / f"party-{i}.id", force=force)
    return setup


def assemble(key_share: str | os.PathLike, tables: Sequence[str | os.PathLike],
             out: str | os.PathLike, *, insecure_ok: bool = False) -> PublicSetup:
    """Dealer-free: write ``public.bin`` to ``out`` from the threshold public key inside
    the key-share file ``key_share`` (its share is checked, then dropped: only
    ``share.public_key`` goes into the set-up) and the identity ``tables`` (JSON, merged:
    every party's published ``identity-I.json``, or one ``identities.json``). ConfigError,
    and nothing written, when the tables disagree or do not list exactly the key's parties."""
    public_key = keyfile.load_key_share(key_share, insecure_ok=insecure_ok).public_key
    setup = PublicSetup.assemble(public_key, identity.read_tables(tables))
    setup.save(out)
    return setup


def enrol(party: int, key_share: str | os.PathLike, identity_key: str | os.PathLike,
          setup: str | os.PathLike, out: str | os.PathLike, *,
          identities: Sequence[str | os.PathLike], insecure_ok: bool = False,
          force: bool = False) -> PartyIdentity:
    """Dealer-free: party ``party`` writes its ``party-I.id`` to ``out`` from its own
    identity key and its own copy of ``public.bin``, after checking that its key share is
    its own under the set-up's key, its identity key the one the set-up lists for it, and
    every other entry the key of the identity tables it holds itself (``identities``: the
    published ``identity-I.json``, or one ``identities.json``): a set-up that swaps another
    party's key for someone else's would let that someone sign as the party. ConfigError
    naming the file and the party otherwise; nothing written."""
    public = PublicSetup.load(setup, insecure_ok=insecure_ok)
    check_int(party, "party", low=0, high=public.public_key.parties - 1)
    held = PublicSetup.assemble(public.public_key, identity.read_tables(identities))
    wrong = [i for i, (a, b) in enumerate(zip(public.identities, held.identities)) if a != b]
    if wrong:
        raise ConfigError(f"setup={os.fspath(setup)!r} lists an identity key for party "
                          f"{', '.join(map(str, wrong))} that is not the one in the identity "
                          "tables this party holds: refused (get that party's published "
                          "identity-I.json over a channel it authenticates)")
    keyfile.load_key_share(key_share, party=party, insecure_ok=insecure_ok,
                           fingerprint=public.public_key.fingerprint)
    ident = PartyIdentity(party, identity.read_key(identity_key), public)
    ident.save(out, force=force)
    return ident


def load_party(party: int, key_share: str | os.PathLike, identity: str | os.PathLike, *,
               insecure_ok: bool = False) -> tuple[threshold.KeyShare, PartyIdentity]:
    """Party ``party``'s own key share and identity, checked against each other: the
    identity must be this party's and the share this party's under the set-up's key
    (ConfigError naming the file otherwise; a party started with another party's files is
    refused here, before it does anything)."""
    ident = PartyIdentity.load(identity, insecure_ok=insecure_ok)
    if ident.index != party:
        raise ConfigError(f"identity file {os.fspath(identity)!r} is party {ident.index}'s, "
                          f"not party {party}'s")
    share = keyfile.load_key_share(key_share, party=party, insecure_ok=insecure_ok,
                                   fingerprint=ident.setup.public_key.fingerprint)
    return share, ident
