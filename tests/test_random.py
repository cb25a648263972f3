import hashlib
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from veil.errors import ConfigError
from veil.random import Generator, check_rng, secure_rng


def test_seeded_is_deterministic_and_secure_is_not():
    assert np.array_equal(Generator(7).random_raw(16), Generator(7).random_raw(16))
    assert not np.array_equal(Generator(7).random_raw(16), Generator(8).random_raw(16))
    assert not np.array_equal(Generator().random_raw(16), Generator().random_raw(16))
    assert Generator(7).seeded and not Generator().seeded


def test_check_rng_resolution():
    assert check_rng(None) is secure_rng()
    g = Generator(1)
    assert check_rng(g) is g
    assert check_rng(3).seeded
    with pytest.raises(ConfigError, match="rng="):
        check_rng(np.random.default_rng(0))


def test_no_numpy_global_state_touched():
    before = np.random.get_state()[1].copy()
    g = check_rng(None)
    g.normal(size=100), g.laplace(size=100), g.integers(0, 10, 100), g.permutation(50)
    g.gamma(0.5, size=10), g.poisson(20.0, size=10), g.choice(10, 3, replace=False)
    assert np.array_equal(before, np.random.get_state()[1])


def test_bytes_are_uniform():
    data = np.frombuffer(Generator(11).bytes(256 * 4000), dtype=np.uint8)
    counts = np.bincount(data, minlength=256)
    assert stats.chisquare(counts).pvalue > 1e-4
    bits = np.unpackbits(data)
    # each bit position is 1 with probability 1/2: 5 sigma band
    assert abs(bits.mean() - 0.5) < 5 * 0.5 / np.sqrt(bits.size)


def test_integers_exactly_in_range_and_uniform():
    g = Generator(12)
    x = g.integers(3, 10, 70_000)
    assert x.min() == 3 and x.max() == 9
    assert stats.chisquare(np.bincount(x - 3)).pvalue > 1e-4
    wide = g.integers(-(2 ** 63), 2 ** 63 - 1, 1000)
    assert wide.dtype == np.int64
    with pytest.raises(ConfigError):
        g.integers(5, 5)


def test_randbelow_and_randbits():
    g = Generator(13)
    n = 10 ** 40 + 7
    values = [g.randbelow(n) for _ in range(200)]
    assert all(0 <= v < n for v in values)
    assert max(v.bit_length() for v in values) > 130
    assert all(0 <= g.randbits(5) < 32 for _ in range(100))


@pytest.mark.parametrize("name, draw, dist", [
    ("uniform", lambda g: g.uniform(-1, 3, 50_000), stats.uniform(-1, 4)),
    ("normal", lambda g: g.normal(2, 3, 50_000), stats.norm(2, 3)),
    ("laplace", lambda g: g.laplace(1, 2, 50_000), stats.laplace(1, 2)),
    ("exponential", lambda g: g.exponential(2, 50_000), stats.expon(scale=2)),
    ("gamma<1", lambda g: g.gamma(0.3, 2.0, 50_000), stats.gamma(0.3, scale=2.0)),
    ("gamma>1", lambda g: g.gamma(4.5, 1.5, 50_000), stats.gamma(4.5, scale=1.5)),
])
def test_continuous_distributions_ks(name, draw, dist):
    sample = draw(Generator(14))
    assert stats.kstest(sample, dist.cdf).pvalue > 1e-3, name


@pytest.mark.parametrize("lam", [0.5, 4.0, 30.0, 1e4])
def test_poisson_moments_and_pmf(lam):
    x = Generator(15).poisson(lam, 60_000)
    # mean within 5 standard errors; variance equals the mean
    assert abs(x.mean() - lam) < 5 * np.sqrt(lam / x.size)
    assert abs(x.var() / lam - 1) < 5 * np.sqrt(2 / x.size) + 0.01
    if lam <= 30:
        ks = np.arange(x.max() + 1)
        expected = stats.poisson(lam).pmf(ks) * x.size
        keep = expected > 5
        observed = np.bincount(x, minlength=ks.size)[keep]
        expected = expected[keep] * observed.sum() / expected[keep].sum()
        assert stats.chisquare(observed, expected).pvalue > 1e-4


def test_geometric_and_bernoulli():
    g = Generator(16)
    x = g.geometric(0.25, 40_000)
    assert x.min() >= 1 and abs(x.mean() - 4) < 5 * np.sqrt(12 / x.size)
    b = g.bernoulli(0.3, 40_000)
    assert abs(b.mean() - 0.3) < 5 * np.sqrt(0.21 / b.size)


def test_permutation_uniform_over_small_group():
    g = Generator(17)
    perms = [tuple(g.permutation(3)) for _ in range(6000)]
    _, counts = np.unique(np.array(perms), axis=0, return_counts=True)
    assert counts.size == 6 and stats.chisquare(counts).pvalue > 1e-4
    x = np.arange(10)
    g.shuffle(x)
    assert sorted(x) == list(range(10))


def test_choice():
    g = Generator(18)
    picked = g.choice(20, 20, replace=False)
    assert sorted(picked) == list(range(20))
    weighted = g.choice(3, 30_000, p=[0.2, 0.5, 0.3])
    assert stats.chisquare(np.bincount(weighted), [6000, 15000, 9000]).pvalue > 1e-4
    with pytest.raises(ConfigError):
        g.choice(3, 5, replace=False)


def test_spawn_children_are_independent_and_reproducible():
    a = [c.random_raw(4) for c in Generator(19).spawn(3)]
    b = [c.random_raw(4) for c in Generator(19).spawn(3)]
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], a[1])


def test_stream_is_aes_ctr_of_zeros_across_the_plaintext_slices():
    # a request longer than the 64 KiB plaintext buffer is encrypted in slices: the keystream
    # must be the one of a single AES-256-CTR pass, followed by the next key
    import hashlib

    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    n = 200_003
    key = hashlib.sha256(b"veil.random seed:" + (5).to_bytes(2, "big", signed=True)).digest()
    enc = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor()
    stream = enc.update(bytes(n + 32))
    g = Generator(5)
    assert g.bytes(n) == stream[:n]
    nxt = Cipher(algorithms.AES(stream[n:]), modes.CTR(bytes(16))).encryptor()
    assert g.bytes(10) == nxt.update(bytes(10))


@pytest.mark.parametrize("p", [0.0, 1e-12, 0.1, 256 / 1797, 0.5, 1 - 2 ** -40, 1.0, -0.5, 2.0])
def test_bernoulli_equals_the_comparison_of_a_uniform_with_p(p):
    # the integer threshold for a scalar p is the same event as U < p, U = (r >> 11) 2^-53
    draws = Generator(20).bernoulli(p, 5000)
    u = (Generator(20).random_raw(5000) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    assert np.array_equal(draws, u < p)


def test_ziggurat_strips_have_equal_areas():
    from veil.random import _ZIG_F, _ZIG_R, _ZIG_X

    v = _ZIG_R * _ZIG_F[1] + np.sqrt(2 * np.pi) * stats.norm.sf(_ZIG_R)  # base strip + tail
    areas = _ZIG_X[1:-1] * (_ZIG_F[2:] - _ZIG_F[1:-1])  # strips 1..255, [0, x_i] wide
    assert _ZIG_X.size == 257 and _ZIG_X[1] == _ZIG_R and _ZIG_X[-1] == 0
    assert np.allclose(areas, v, rtol=1e-10, atol=0)  # the top strip closes the table
    assert _ZIG_X[0] * _ZIG_F[1] == pytest.approx(v, rel=1e-12)  # the base strip's width


def test_standard_normal_tails_body_and_float32():
    g = Generator(21)
    z = g.standard_normal(2_000_000)
    # two-sided tail mass beyond r (the base strip's tail draws) and beyond 2: counts are
    # binomial, so within 5 standard deviations
    for c in (2.0, 3.6541528853610088, 4.5):
        p = 2 * stats.norm.sf(c)
        assert abs(np.count_nonzero(np.abs(z) > c) - z.size * p) < 5 * np.sqrt(z.size * p)
    tail = np.abs(z[np.abs(z) > 3.6541528853610088])
    truncated = stats.truncnorm(3.6541528853610088, np.inf)
    assert stats.kstest(tail, truncated.cdf).pvalue > 1e-3
    edges = np.linspace(-4, 4, 161)  # fine bins: strip boundaries and wedges
    observed = np.histogram(z, edges)[0]
    expected = np.diff(stats.norm.cdf(edges)) * z.size
    assert stats.chi2(edges.size - 2).sf(((observed - expected) ** 2 / expected).sum()) > 1e-4
    assert abs(np.mean(z > 0) - 0.5) < 5 * np.sqrt(0.25 / z.size) and not np.any(z == 0)
    # float32: the float64 draw rounded once, from the same stream
    assert np.array_equal(Generator(22).standard_normal((3, 70), dtype=np.float32),
                          Generator(22).standard_normal((3, 70)).astype(np.float32))
    assert Generator(22).standard_normal(dtype=np.float32).dtype == np.float32
    assert Generator(23).standard_normal(0).shape == (0,)
    with pytest.raises(ConfigError, match="dtype"):
        g.standard_normal(3, dtype=np.int64)


def test_small_normal_draws_use_their_spares_and_stay_normal():
    g = Generator(24)
    z = np.concatenate([g.standard_normal(k) for k in (1, 2, 3, 5) for _ in range(4000)])
    assert stats.kstest(z, "norm").pvalue > 1e-3


def test_rejected_places_beyond_the_spares_are_drawn_again(monkeypatch):
    real, sizes = Generator._ziggurat, []

    def reject_all_at_first(self, n):
        z, rejected = real(self, n)
        sizes.append(n)
        return (z, np.arange(n)) if len(sizes) == 1 else (z, rejected)

    monkeypatch.setattr(Generator, "_ziggurat", reject_all_at_first)
    z = Generator(25).standard_normal(640)
    assert sizes[:2] == [640 + 10 + 8, 640 + 10 + 8]  # no spare left: all 640 drawn again
    assert z.shape == (640,) and np.isfinite(z).all() and stats.kstest(z, "norm").pvalue > 1e-3


def _ziggurat_both_ways(monkeypatch, raw):
    from veil import _native, random

    fast = random._ziggurat_fast(raw.copy())
    monkeypatch.setattr(_native, "kernel", lambda name: None)
    slow = random._ziggurat_fast(raw.copy())
    monkeypatch.undo()
    return fast, slow


def test_compiled_ziggurat_gives_the_numpy_values_bit_for_bit(monkeypatch):
    import shutil

    from veil import _native

    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler on PATH: veil.random uses its numpy path")
    assert _native.kernel("veil_ziggurat") is not None  # with a compiler the kernels build
    edges = np.array([0, 1, 255, 256, 2**63 - 1, 2**63, 2**64 - 1, (2**53 - 1) << 11,
                      ((2**53 - 1) << 10) | 7, 1 << 10], dtype=np.uint64)
    raw = np.concatenate([edges, Generator(31).random_raw(300_000)])
    (z, slow, strip), (z0, slow0, strip0) = _ziggurat_both_ways(monkeypatch, raw)
    assert slow.size > 1000  # wedges and base strips were exercised
    assert np.array_equal(z.view(np.uint64), z0.view(np.uint64))
    assert np.array_equal(slow, slow0) and np.array_equal(strip, strip0)
    # the sampler's output for a seed is the numpy sampler's, and main's before the kernel
    ref = Generator(32).standard_normal(50_000)
    monkeypatch.setattr(_native, "kernel", lambda name: None)
    assert np.array_equal(ref, Generator(32).standard_normal(50_000))
    assert hashlib.sha256(ref.tobytes()).hexdigest()[:16] == "d1081ff2c1fefd76"


def test_native_kernels_fall_back_to_numpy_when_they_cannot_be_built(monkeypatch, tmp_path,
                                                                    caplog):
    from veil import _native

    monkeypatch.setattr(_native, "_loaded", {})
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("CC", "/bin/false")
    with caplog.at_level("INFO", logger="veil._native"):
        assert _native.kernel("veil_ziggurat") is None
    assert "unavailable" in caplog.text
    z = Generator(33).standard_normal(10_000)  # the numpy path
    assert stats.kstest(z, "norm").pvalue > 1e-3
    monkeypatch.setattr(_native, "_loaded", {})
    monkeypatch.delenv("CC")
    monkeypatch.setenv("VEIL_NATIVE", "0")
    assert _native.kernel("veil_ziggurat") is None


_PLANTED = r"""
#include <fcntl.h>
#include <stdlib.h>
__attribute__((constructor)) static void planted(void)
{ const char *m = getenv("VEIL_PLANTED_MARK"); if (m) close(open(m, O_CREAT | O_WRONLY, 0600)); }
"""


def test_a_planted_native_library_is_never_loaded(monkeypatch, tmp_path):
    """Attack (issue 29, item 7): someone who can write the kernel cache (a folder left
    group-writable, a shared $XDG_CACHE_HOME, a folder swapped for a symlink) plants a
    ``.so`` under the expected name; the old loader ``dlopen``-ed it, running its
    constructor in the victim's process. Now the folder must be this user's, mode 0700, not
    a symlink, and a library is loaded only if its SHA-256 matches the record this user
    wrote beside it when building it; otherwise the kernels are rebuilt."""
    import shutil
    import subprocess

    from veil import _native

    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler on PATH: nothing is ever loaded")
    (tmp_path / "planted.c").write_text(_PLANTED)
    planted = tmp_path / "planted.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(planted), str(tmp_path / "planted.c")],
                   check=True)
    mark = tmp_path / "ran"
    monkeypatch.setenv("VEIL_PLANTED_MARK", str(mark))
    monkeypatch.delenv("VEIL_NATIVE", raising=False)
    name = _native._library_name()

    def attempt(cache: Path) -> None:
        monkeypatch.setattr(_native, "_loaded", {})
        monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
        assert _native.kernel("veil_ziggurat") is not None   # the real kernels, rebuilt
        assert not mark.exists(), "the planted library was loaded"

    # 1. an open folder holding a library (and a matching record) planted by someone else
    loose = tmp_path / "loose" / "veil" / "native"
    loose.mkdir(parents=True)
    shutil.copy(planted, loose / name)
    (loose / f"{name}.sha256").write_text(hashlib.sha256(planted.read_bytes()).hexdigest())
    loose.chmod(0o777)
    attempt(tmp_path / "loose")
    # 2. the cache folder is a symlink to a folder holding the planted library
    (tmp_path / "linked" / "veil").mkdir(parents=True)
    (tmp_path / "linked" / "veil" / "native").symlink_to(loose)
    attempt(tmp_path / "linked")
    # 3. a private folder, but the library is not the one this user built and recorded
    own = tmp_path / "own"
    attempt(own)                                                # builds and records
    library = own / "veil" / "native" / name
    assert oct((own / "veil" / "native").stat().st_mode & 0o777) == "0o700"
    assert oct(library.with_name(f"{name}.sha256").stat().st_mode & 0o777) == "0o600"
    library.unlink()
    shutil.copy(planted, library)
    attempt(own)
    assert hashlib.sha256(library.read_bytes()).hexdigest() != \
        hashlib.sha256(planted.read_bytes()).hexdigest()          # rebuilt in its place
