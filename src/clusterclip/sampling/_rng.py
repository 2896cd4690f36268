"""Counter-based randomness: every random quantity is a pure function of its key.

The schedule must not depend on how it is cut into blocks, on the number of
ranks, or on where a run was resumed. So nothing here is a stateful stream
that advances with use: the uniform variate of global draw ``t`` lives in a
fixed-size chunk ``t // CHUNK`` generated from the key ``(seed, tag, chunk)``,
and the permutations of a cluster's passes come from ``(seed, tag, cluster,
group)``.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import queue
import struct
import threading
from typing import Any

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


def _state_view(bitgen: np.random.SFC64) -> np.ndarray | None:
    """Writable uint64 view of ``bitgen``'s C state (s[4], then the buffered-uint32
    word), or None where its layout is not that: setting the ``state`` dict
    costs about 6 us, this 0.3 us. Checked against the ``state`` property."""
    try:
        view = np.ctypeslib.as_array(
            (ctypes.c_uint64 * 5).from_address(bitgen.ctypes.state_address))
        probe = np.array([0x0123456789ABCDEF, 2, 3, 4], np.uint64)
        bitgen.state = {"bit_generator": "SFC64", "state": {"state": probe},
                        "has_uint32": 1, "uinteger": 7}
        ok = np.array_equal(view[:4], probe) and int(view[4]) in (1 | 7 << 32, 1 << 32 | 7)
        view[:4], view[4] = probe[::-1], 0
        st = bitgen.state
        ok = ok and np.array_equal(st["state"]["state"], probe[::-1]) \
            and st["has_uint32"] == 0 and st["uinteger"] == 0
    except Exception:  # no ctypes interface: the dict setter
        return None
    return view if ok else None


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
        self._raw = _state_view(self._bitgen)

    def __call__(self, a: int, b: int = 0) -> np.random.Generator:
        """The generator positioned at the start of stream ``(a, b)`` (shared object)."""
        digest = hashlib.blake2b(struct.pack("<4Q", self.seed, self.tag, a, b),
                                 digest_size=32, person=b"clusterclip").digest()
        if self._raw is not None:
            self._raw[:4] = np.frombuffer(digest, dtype="<u8")
            self._raw[4] = 0  # no buffered uint32
        else:
            state = np.frombuffer(digest, dtype="<u8").astype(np.uint64)
            self._bitgen.state = {"bit_generator": "SFC64", "state": {"state": state},
                                  "has_uint32": 0, "uinteger": 0}
        self._bitgen.random_raw(16)  # mix the hashed state before use
        return self._gen

    def states(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(S, 4) uint64 hashed start states of streams (a[i], b[i]), before the
        16 discarded outputs (for :class:`SFC64Lanes`)."""
        # the same BLAKE2b as __call__, (seed, tag) absorbed once
        h0 = hashlib.blake2b(struct.pack("<2Q", self.seed, self.tag), digest_size=32,
                             person=b"clusterclip")
        pack, out = struct.Struct("<2Q").pack, []
        for x, y in zip(a.tolist(), b.tolist(), strict=True):
            h = h0.copy()
            h.update(pack(x, y))
            out.append(h.digest())
        blob = b"".join(out)
        return np.frombuffer(blob, dtype="<u8").astype(np.uint64).reshape(-1, 4)

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


_AHEAD: tuple[int, Any] | None = None  # (pid, queue) of the thread making chunks ahead
_AHEAD_LOCK = threading.Lock()


def _ahead_thread_put(job: tuple[Any, int, list[np.ndarray], Any]) -> bool:
    """Queue ``job`` = (make, chunk, out, done) for this process's thread making chunks
    ahead (started on first use, again in a forked child): it appends ``make(chunk)`` to
    ``out`` (nothing on an error: the chunk is then made on demand) and sets ``done``.
    False when no thread can be started (the interpreter shutting down)."""
    global _AHEAD
    with _AHEAD_LOCK:
        if _AHEAD is None or _AHEAD[0] != os.getpid():
            jobs: Any = queue.SimpleQueue()
            thread = threading.Thread(target=_make_ahead, args=(jobs,),
                                      name="choice_variates", daemon=True)
            try:
                thread.start()
            except RuntimeError:
                return False
            _AHEAD = (os.getpid(), jobs)
        _AHEAD[1].put(job)
    return True


def _make_ahead(jobs: Any) -> None:
    while True:
        make, cid, out, done = jobs.get()
        try:
            out.append(make(cid))
        except BaseException:  # noqa: BLE001, S110 - the caller makes the chunk itself
            pass
        finally:
            done.set()
        del make, out, done


class ChoiceVariates:
    """Uniform uint32 variates indexed by global draw position.

    ``get(t, n)`` returns variates ``t .. t+n-1`` as a read-only view; callers
    keep ``n`` within one chunk (``n <= CHUNK - t % CHUNK``) so no copy is made.
    One chunk (4 MiB) is cached. Once two consecutive chunks were asked for (a
    stream), the next one is generated ahead in a thread while the caller draws
    from this one (numpy generates without the GIL): the same variates, off the
    caller's time. One thread per process serves every instance (starting a thread per
    chunk cost the caller a scheduling wait each time the cores were busy).
    """

    def __init__(self, seed: int) -> None:
        self.seed = int(seed)
        self._chunk_id = -1
        self._chunk = np.empty(0, np.uint32)
        self._ahead: tuple[int, Any, list[np.ndarray]] | None = None  # chunk, done, out

    def _make(self, cid: int) -> np.ndarray:
        bitgen = keyed_generator(self.seed, TAG_CHOICE, cid).bit_generator
        # random_raw gives 64 random bits per call: two uint32 variates each.
        # Split them little-endian whatever the platform, so the schedule
        # is the same everywhere (a no-op view on little-endian machines).
        raw = bitgen.random_raw(CHUNK // 2).astype("<u8", copy=False)
        return raw.view("<u4").astype(np.uint32, copy=False)

    def _generate_ahead(self, cid: int) -> None:
        out: list[np.ndarray] = []
        done = threading.Event()
        if _ahead_thread_put((self._make, cid, out, done)):
            self._ahead = (cid, done, out)

    def get(self, t: int, n: int) -> np.ndarray:
        cid, off = divmod(int(t), CHUNK)
        if off + n > CHUNK:
            raise ValueError("variate request crosses a chunk boundary")
        if cid != self._chunk_id:
            ahead, self._ahead = self._ahead, None
            if ahead is not None:
                ahead[1].wait()
            streaming = cid == self._chunk_id + 1 and cid > 0  # two in a row: a stream
            self._chunk = (ahead[2][0] if ahead is not None and ahead[0] == cid and ahead[2]
                           else self._make(cid))
            self._chunk_id = cid
            if streaming:
                self._generate_ahead(cid + 1)
        return self._chunk[off : off + n]

    def __getstate__(self) -> dict:
        return {"seed": self.seed}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["seed"])


_U64 = np.uint64


class SFC64Lanes:
    """Many SFC64 streams stepped together: numpy's ``SFC64`` + ``Generator``
    arithmetic, one lane per stream, bit for bit (checked by the tests).

    ``state`` : (S, 4) uint64 as in ``SFC64.state['state']`` (e.g.
    :meth:`KeyedStreams.states`), no buffered uint32; 16 outputs are discarded
    first, as :class:`KeyedStreams` does.
    """

    def __init__(self, state: np.ndarray) -> None:
        st = np.array(state, dtype=np.uint64).reshape(-1, 4)
        self.a, self.b, self.c, self.w = (np.ascontiguousarray(st[:, i]) for i in range(4))
        self.has32 = np.zeros(st.shape[0], bool)
        self.buf = np.zeros(st.shape[0], np.uint64)
        for _ in range(16):  # as KeyedStreams: 16 outputs discarded
            self.next64()

    def next64(self, idx: np.ndarray | None = None) -> np.ndarray:
        """The next 64-bit output of lanes ``idx`` (all if None)."""
        if idx is None:
            a, b, c, w = self.a, self.b, self.c, self.w
        else:
            a, b, c, w = self.a[idx], self.b[idx], self.c[idx], self.w[idx]
        tmp = a + b
        tmp += w
        w = w + _U64(1)
        a = b ^ (b >> _U64(11))
        b = c + (c << _U64(3))
        c = ((c << _U64(24)) | (c >> _U64(40))) + tmp
        if idx is None:
            self.a, self.b, self.c, self.w = a, b, c, w
        else:
            self.a[idx], self.b[idx], self.c[idx], self.w[idx] = a, b, c, w
        return tmp

    def uint32s(self, m: int) -> np.ndarray:
        """(m, S) uint32: the next m ``next_uint32`` outputs of every lane (m even,
        no buffered half): the low half of each 64-bit output, then the high half."""
        out = np.empty((m // 2, 2, self.a.size), np.uint32)
        for r in range(m // 2):
            x = self.next64()
            out[r, 0] = x  # truncates to the low 32 bits
            out[r, 1] = x >> _U64(32)
        return out.reshape(m, self.a.size)

    def shuffle_flat(self, buf: np.ndarray, offs: np.ndarray, n: np.ndarray,
                     G: np.ndarray) -> None:
        """``Generator.shuffle`` by lane s of each of its G[s] passes of n[s] >= 2 items,
        ``buf[offs[s]:offs[s] + G[s] n[s]]`` (int64), pass after pass, in place.

        Fisher-Yates from the last item, ``j = random_interval(i)`` by masked
        rejection on ``next_uint32``, exactly as numpy. Each lane's uint32
        stream is generated ahead in bulk; step t of every lane is taken
        together, each lane at its own item i, pass and place in its stream.
        Lanes must come by number of steps G (n - 1), longest first: the lanes
        still shuffling at step t are then a prefix.
        """
        S = offs.size
        steps = G * (n - 1)
        if S == 0:
            return
        if (np.diff(steps) > 0).any():
            raise ValueError("lanes must come longest first")
        longest = int(steps[0])
        m = 2 * ((3 * longest) // 4 + 8)  # ~1.4 draws per step expected; more made if short
        stream = self.uint32s(m).T.copy()  # (S, m)
        flat = stream.ravel()
        lanes = np.arange(S)
        base = lanes * m
        ptr = np.zeros(S, np.int64)
        top = int(n.max())
        lut = np.array([(1 << v.bit_length()) - 1 for v in range(top)], np.uint32)
        i = n - 1  # item each lane swaps next (its pass restarts at n - 1)
        row = offs.astype(np.int64)  # start of each lane's current pass
        active = S - np.searchsorted(steps[::-1], np.arange(longest), side="right")
        for t in range(longest):
            A = int(active[t])
            ia, ra = i[:A], row[:A]
            mask = lut.take(ia)
            if int(ptr[:A].max()) >= m:  # rare: extend every lane's stream
                stream = np.concatenate([stream, self.uint32s(m).T], axis=1)
                m *= 2
                flat, base = stream.ravel(), lanes * m
            j = flat.take(base[:A] + ptr[:A]) & mask
            ptr[:A] += 1
            bad = np.flatnonzero(j > ia)
            while bad.size:  # rejected: those lanes draw again
                if int(ptr[bad].max()) >= m:
                    stream = np.concatenate([stream, self.uint32s(m).T], axis=1)
                    m *= 2
                    flat, base = stream.ravel(), lanes * m
                j[bad] = flat.take(base[bad] + ptr[bad]) & mask[bad]
                ptr[bad] += 1
                bad = bad[j[bad] > ia[bad]]
            at_i = ra + ia
            at_j = ra + j
            vi = buf.take(at_i)
            buf[at_i] = buf.take(at_j)
            buf[at_j] = vi
            ia -= 1
            done = np.flatnonzero(ia == 0)  # pass complete: the next one starts
            if done.size:
                ia[done] = n[done] - 1
                ra[done] += n[done]
