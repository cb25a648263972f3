"""Paillier encryption with g = n + 1, CRT decryption, noise pools and a vector API.

Modules: :mod:`~veil.crypto.paillier.keys` (keys, encryption, decryption),
:mod:`~veil.crypto.paillier.keygen` (safe primes, the noise base),
:mod:`~veil.crypto.paillier.pool` (:class:`NoisePool`) and
:mod:`~veil.crypto.paillier.ciphertexts` (:class:`EncryptedNumber`, :class:`EncryptedArray`).

The scheme (Paillier, "Public-key cryptosystems based on composite degree residuosity
classes", EUROCRYPT 1999)
------------------------------------------------------------------------------------
Key: n = p q for primes p, q of ``bits / 2`` bits each (so gcd(n, phi(n)) = 1); veil's
:func:`keygen` uses safe primes p = 2p' + 1, q = 2q' + 1 (see "Noise" below).
Encryption of m in Z_n with randomness r uniform in Z_n^*::

    E(m) = g^m r^n mod n^2,  g = n + 1,  so  g^m = (1 + n)^m = 1 + m n  (mod n^2)

by the binomial theorem: the "exponentiation" g^m is one multiplication. Everything that
makes a ciphertext random is the *noise* r^n, an element of the subgroup of n-th residues.

Decryption with the Chinese remainder theorem (as Paillier 1999 suggests): the order of
r^n mod p^2 divides p - 1 and (1 + n)^(p-1) = 1 + (p - 1) n  (mod p^2), so with
L_p(x) = (x - 1) / p::

    m_p = L_p(c^(p-1) mod p^2) * h_p mod p,   h_p = L_p(g^(p-1) mod p^2)^(-1) = (-q)^(-1) mod p

and the same mod q; m = m_p + p ((m_q - m_p) p^(-1) mod q). Two exponentiations with
``bits/2``-bit exponents modulo ``bits``-bit moduli instead of one with a ``bits``-bit
exponent modulo n^2: about 3.5 times faster than the textbook L(c^lambda) mu.

Homomorphism: E(a) E(b) = E(a + b), E(a)^k = E(k a), E(a) (1 + b n) = E(a + b),
E(a)^(-1) = E(-a), all mod n^2, plaintexts mod n.

Signed plaintexts: an integer m is encrypted as m mod n, and a decryption d in [0, n) is
read as d if d <= (n - 1) / 2 and as d - n otherwise. The representable range is the
symmetric interval [-(n-1)/2, (n-1)/2] ("(-n/2, n/2]" for odd n); encrypting a value
outside it raises :class:`~veil.errors.CryptoError`. Results of homomorphic operations are
computed mod n: overflow detection is the job of :mod:`veil.crypto.encoding`.

Noise
-----
Reusing a noise value leaks: E(a) / E(b) = g^(a - b) when both use the same r^n. Noise is
therefore only ever *drawn*: fresh from the CSPRNG, or popped from a :class:`NoisePool`
(a deque that hands out each value once; there is no way to index it). Sources:

* **Fixed-base noise** (keys from :func:`keygen`, the default): following Damgard, Jurik &
  Nielsen ("A generalization of Paillier's public-key system with applications to
  electronic voting", IJIS 2010), the public key carries h_s = h^n mod n^2
  for h = -y^2 mod n, y random, and the noise is h_s^a = (h^a)^n, computed with a
  fixed-base table (no squarings). With safe primes, Z_n^* = Z_2 x Z_2 x Z_(p'q') and the
  Jacobi-symbol-1 subgroup J_n = {+-1} x QR_n is cyclic of order 2p'q'; the key owner
  checks that h generates it. With a uniform in [0, 2^(bits + 128)) (full length), a mod
  2p'q' is within 2^-128 of uniform, so the noise is statistically close to uniform over
  {r^n : r in J_n}: IND-CPA under DCR alone, because DCR restricted to Jacobi symbol 1 is
  equivalent to DCR (Jacobi symbols are public, and multiplying by w^n for a public w of
  symbol -1 moves any instance into J_n). About 8x faster than r^n in bulk (9-bit windows:
  242 multiplications, a ~63 MB table at 2048 bits). The table is built on first use and
  widened as the key draws more values (a window of ~log2 of the values drawn, kept under
  ``TABLE_BYTES`` = 100 MiB): one encryption builds a few kB, not the bulk table.
* **DJN short exponents** (``keygen(short_exponents=True)``): the same h_s with a uniform
  ``ceil(bits/2)``-bit a, DJN's original proposal, about 27x faster than r^n in bulk
  (11-bit windows: 94 multiplications, a ~99 MB table at 2048 bits). *Security assumption*:
  besides DCR, that h^a for such a short a is computationally indistinguishable from a
  uniform element of <h> (a short-exponent indistinguishability assumption in the
  hidden-order group J_n, under which DJN prove semantic security). Use it when that
  extra assumption is acceptable.
* **CRT noise** for the key owner (a pool given the private key, for keys without h_s):
  r^n mod p^2 is the unique element of order dividing p - 1 congruent to r^n mod p, i.e.
  ``a^p mod p^2`` for a uniform in Z_p^* (a -> a^n mod p is a bijection because
  gcd(n, p - 1) = 1), and the same mod q; CRT gives r^n mod n^2 with two ``bits/2``-bit
  exponentiations mod p^2, q^2: the standard distribution, about 3.5x faster. Only the key
  owner may use it, for data it encrypts itself.
* **Standard**: r^n mod n^2 with r uniform in [1, n), for public keys given as a bare n
  (e.g. from python-paillier). A non-unit r has probability about 2^(1 - bits/2).

With a filled pool, online encryption is one multiplication: (1 + m n) * r^n mod n^2.

Validation: a ciphertext built from outside integers (``EncryptedNumber(pk, c)``,
``EncryptedArray(pk, cs)``, deserialization) must satisfy 0 < c < n^2 and gcd(c, n) = 1;
ciphertexts combined by an operation must be under the same key. Violations raise
:class:`~veil.errors.CryptoError`. Results of operations are valid by construction.
"""

from veil.crypto.paillier.ciphertexts import EncryptedArray, EncryptedNumber
from veil.crypto.paillier.keygen import (
    check_safe_primes,
    generate_safe_primes,
    keygen,
    make_noise_base,
)
from veil.crypto.paillier.keys import (
    MIN_SECURE_BITS,
    PrivateKey,
    PublicKey,
    as_int_array,
    check_key_bits,
    key_fingerprint,
)
from veil.crypto.paillier.pool import NoisePool

__all__ = ["MIN_SECURE_BITS", "EncryptedArray", "EncryptedNumber", "NoisePool", "PrivateKey",
           "PublicKey", "as_int_array", "check_key_bits", "check_safe_primes",
           "generate_safe_primes", "key_fingerprint", "keygen", "make_noise_base"]
