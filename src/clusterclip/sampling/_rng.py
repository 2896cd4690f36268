"""Counter-based randomness: every random quantity is a pure function of its key.

The schedule must not depend on how it is cut into blocks, on the number of
ranks, or on where a run was resumed. So nothing here is a stateful stream
that advances with use: the uniform variate of global draw ``t`` lives in a
fixed-size chunk ``t // CHUNK`` generated from the key ``(seed, tag, chunk)``,
and the permutations of a cluster's passes come from ``(seed, tag, cluster,
group)``.
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np

# Tags keep the key spaces of the different random quantities apart.
TAG_CHOICE = 0x43484F49  # cluster-choice variates, one uint32 per global draw
TAG_PASS = 0x50415353  # within-cluster pass permutations
TAG_EPOCH = 0x45504F43  # `random` strategy epoch permutations
TAG_PACED = 0x50414345  # `paced` strategy: offset u of each cluster's j-th draw

CHUNK = 1 << 20  # variates per chunk; part of the schedule's definition, never change


def keyed_generator(*key: int) -> np.random.Generator:
    """A fresh ``numpy`` Generator (PCG64) that depends only on ``key`` (ints >= 0)."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(k) for k in key])))


class KeyedStreams:
    """Random streams indexed by ``(a, b)`` under a fixed ``(seed, tag)``.

    The stream of ``(a, b)`` is SFC64 started from a 256-bit state hashed
    (BLAKE2b) from ``(seed, tag, a, b)``, after 16 discarded outputs. One
    generator object is reused and only its state is assigned, about 10x
    cheaper than seeding a new generator: that matters for the many small
    clusters whose passes each need a stream.
    """

    def __init__(self, seed: int, tag: int) -> None:
        self.seed, self.tag = int(seed), int(tag)
        self._bitgen = np.random.SFC64(0)
        self._gen = np.random.Generator(self._bitgen)

    def __call__(self, a: int, b: int = 0) -> np.random.Generator:
        """The generator positioned at the start of stream ``(a, b)`` (shared object)."""
        digest = hashlib.blake2b(struct.pack("<4Q", self.seed, self.tag, a, b),
                                 digest_size=32, person=b"clusterclip").digest()
        state = np.frombuffer(digest, dtype="<u8").astype(np.uint64)
        self._bitgen.state = {"bit_generator": "SFC64", "state": {"state": state},
                              "has_uint32": 0, "uinteger": 0}
        self._bitgen.random_raw(16)  # mix the hashed state before use
        return self._gen

    def __getstate__(self) -> dict:
        return {"seed": self.seed, "tag": self.tag}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["seed"], state["tag"])


_GAMMA = np.uint64(0x9E3779B97F4A7C15)


def _mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's output function, in place on a uint64 array (returned)."""
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z


class CounterUniforms:
    """Uniform float64 ``u(a, j)`` in [0, 1), a pure function of ``(seed, tag, a, j)``.

    Stream ``a`` (one per cluster, ``a < n_streams``) is SplitMix64 started at a
    64-bit base hashed from ``(seed, tag, a)``: ``u(a, j)`` is the top 53 bits of
    ``mix(base_a + (j + 1) * gamma)``. Any ``(a, j)`` is computed directly,
    vectorised, with no state: random access for seeking at any position.
    """

    def __init__(self, seed: int, tag: int, n_streams: int) -> None:
        self.seed, self.tag, self.n_streams = int(seed), int(tag), int(n_streams)
        digest = hashlib.blake2b(struct.pack("<2Q", self.seed, self.tag), digest_size=8,
                                 person=b"clusterclip").digest()
        s0 = np.frombuffer(digest, dtype="<u8").astype(np.uint64)[0]
        base = np.arange(self.n_streams, dtype=np.uint64)
        base *= _GAMMA
        base += s0
        self._base = _mix64(_mix64(base) + s0)

    def __call__(self, a: np.ndarray, j: np.ndarray) -> np.ndarray:
        """(n,) float64 u for streams ``a`` and counters ``j`` (int arrays >= 0, same shape)."""
        z = j.astype(np.uint64)
        z += np.uint64(1)
        z *= _GAMMA
        z += self._base[a]
        z = _mix64(z)
        z >>= np.uint64(11)
        u = z.astype(np.float64)
        u *= 2.0**-53
        return u

    def __getstate__(self) -> dict:
        return {"seed": self.seed, "tag": self.tag, "n_streams": self.n_streams}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["seed"], state["tag"], state["n_streams"])


class ChoiceVariates:
    """Uniform uint32 variates indexed by global draw position.

    ``get(t, n)`` returns variates ``t .. t+n-1`` as a read-only view; callers
    keep ``n`` within one chunk (``n <= CHUNK - t % CHUNK``) so no copy is made.
    One chunk (4 MiB) is cached.
    """

    def __init__(self, seed: int) -> None:
        self.seed = int(seed)
        self._chunk_id = -1
        self._chunk = np.empty(0, np.uint32)

    def get(self, t: int, n: int) -> np.ndarray:
        cid, off = divmod(int(t), CHUNK)
        if off + n > CHUNK:
            raise ValueError("variate request crosses a chunk boundary")
        if cid != self._chunk_id:
            bitgen = keyed_generator(self.seed, TAG_CHOICE, cid).bit_generator
            # random_raw gives 64 random bits per call: two uint32 variates each.
            # Split them little-endian whatever the platform, so the schedule
            # is the same everywhere (a no-op view on little-endian machines).
            raw = bitgen.random_raw(CHUNK // 2).astype("<u8", copy=False)
            self._chunk = raw.view("<u4").astype(np.uint32, copy=False)
            self._chunk_id = cid
        return self._chunk[off : off + n]

    def __getstate__(self) -> dict:
        return {"seed": self.seed}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["seed"])
