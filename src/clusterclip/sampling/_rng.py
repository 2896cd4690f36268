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
