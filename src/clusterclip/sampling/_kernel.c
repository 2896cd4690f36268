/* Compiled inner loops of the cluster engines (clusterclip.sampling._engine).
 *
 * Optional: without it (no C compiler at install time, or CLUSTERCLIP_KERNEL=off)
 * the engines run their numpy path, which is the reference; this file reproduces
 * it bit for bit (the tests compare the two):
 *
 *   - pass_state: BLAKE2b-256 of (seed, tag, a, b) as 4 little-endian uint64,
 *     personalised "clusterclip" (hashlib.blake2b in _rng.KeyedStreams);
 *   - a cluster's group g of passes (loaded on first use), each pass its
 *     documents shuffled by numpy's Generator.shuffle (Fisher-Yates from the last
 *     item, masked rejection on the buffered next_uint32 of SFC64) with stream
 *     (k, g), pass after pass, the stream's 16 first outputs discarded; the
 *     stream of (k, g + 1) is computed ahead at that load, 4 streams at a time
 *     (vectorised), and kept per cluster for the next load (ahead_fill: the
 *     first streams of a fresh engine);
 *   - draw: the per-draw loop of ClusterEngine.advance (cluster choice by
 *     multiply-shift or guide table, counts, the clip, the document), with a helper
 *     thread loading each cluster's next group ahead in a second buffer (nxt);
 *   - take_grouped: ClusterEngine._docs_grouped;
 *   - shuffle: EpochEngine's epoch permutations (Generator.shuffle, prefetched);
 *   - paced_window: one key window of PacedEngine (keys, counting sort, documents).
 *
 * Arrays come through the buffer protocol (C-contiguous, native byte order);
 * the Python side (_engine.py) checks dtypes. No numpy headers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <math.h>
#include <string.h>
#include <stddef.h>
#include <stdlib.h>
#ifndef _WIN32
#include <pthread.h>
#define HAVE_HELPER 1
#endif

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch((p), 1)
#else
#define PREFETCH(p) ((void)(p))
#endif

/* ------------------------------------------------------------------ BLAKE2b */
static const uint64_t B2_IV[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL,
    0xa54ff53a5f1d36f1ULL, 0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL,
    0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL};

static const uint8_t B2_SIGMA[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

/* A rotation of uint64_t words, or of GCC vectors of them (the 4-stream hash below). */
#define ROTR64(x, r) (((x) >> (r)) | ((x) << (64 - (r))))

#define B2_G(r, i, a, b, c, d)                           \
    do {                                                 \
        a = a + b + m[B2_SIGMA[r][2 * (i)]];             \
        d = ROTR64(d ^ a, 32);                           \
        c = c + d;                                       \
        b = ROTR64(b ^ c, 24);                           \
        a = a + b + m[B2_SIGMA[r][2 * (i) + 1]];         \
        d = ROTR64(d ^ a, 16);                           \
        c = c + d;                                       \
        b = ROTR64(b ^ c, 63);                           \
    } while (0)

/* Round r of BLAKE2b's compression on the working words v[16] with message m[16]. */
#define B2_ROUND(r)                                      \
    do {                                                 \
        B2_G(r, 0, v[0], v[4], v[8], v[12]);             \
        B2_G(r, 1, v[1], v[5], v[9], v[13]);             \
        B2_G(r, 2, v[2], v[6], v[10], v[14]);            \
        B2_G(r, 3, v[3], v[7], v[11], v[15]);            \
        B2_G(r, 4, v[0], v[5], v[10], v[15]);            \
        B2_G(r, 5, v[1], v[6], v[11], v[12]);            \
        B2_G(r, 6, v[2], v[7], v[8], v[13]);             \
        B2_G(r, 7, v[3], v[4], v[9], v[14]);             \
    } while (0)

/* "clusterclip" padded to 16 bytes, as two little-endian words */
static uint64_t PERSON[2];

static void init_person(void) {
    const char p[16] = "clusterclip";
    PERSON[0] = PERSON[1] = 0;
    for (int i = 0; i < 8; i++) PERSON[0] |= (uint64_t)(uint8_t)p[i] << (8 * i);
    for (int i = 0; i < 8; i++) PERSON[1] |= (uint64_t)(uint8_t)p[8 + i] << (8 * i);
}

/* BLAKE2b, digest 32 bytes, no key, personal "clusterclip", of the 32-byte message
 * struct.pack("<4Q", w0, w1, w2, w3); out: the digest as 4 little-endian words. */
static void blake2b_4q(const uint64_t w[4], uint64_t out[4]) {
    uint64_t h[8], v[16], m[16];
    for (int i = 0; i < 8; i++) h[i] = B2_IV[i];
    h[0] ^= 0x01010000ULL | 32u; /* digest length 32, key 0, fanout 1, depth 1 */
    h[6] ^= PERSON[0];
    h[7] ^= PERSON[1];
    for (int i = 0; i < 4; i++) m[i] = w[i];
    for (int i = 4; i < 16; i++) m[i] = 0;
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = B2_IV[i];
    }
    v[12] ^= 32;        /* bytes compressed */
    v[14] = ~v[14];     /* last block */
    /* unrolled: the schedule and the message's 12 zero words fold into constants
     * (one hash per group load: 10^5 clusters load 10^5 groups per ~6e6 draws) */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 12
#endif
    for (int r = 0; r < 12; r++) B2_ROUND(r);
    for (int i = 0; i < 4; i++) out[i] = h[i] ^ v[i] ^ v[i + 8];
}

/* -------------------------------------------------------------------- SFC64 */
typedef struct {
    uint64_t s[4];
    int has32;
    uint32_t buf;
} sfc64;

static inline uint64_t sfc_next64(sfc64 *r) {
    uint64_t *s = r->s;
    const uint64_t tmp = s[0] + s[1] + s[3]++;
    s[0] = s[1] ^ (s[1] >> 11);
    s[1] = s[2] + (s[2] << 3);
    s[2] = ((s[2] << 24) | (s[2] >> 40)) + tmp;
    return tmp;
}

static inline uint32_t sfc_next32(sfc64 *r) {
    if (r->has32) {
        r->has32 = 0;
        return r->buf;
    }
    uint64_t x = sfc_next64(r);
    r->has32 = 1;
    r->buf = (uint32_t)(x >> 32);
    return (uint32_t)x;
}

/* the smallest 2**b - 1 >= max */
static inline uint64_t mask_of(uint64_t max) {
    uint64_t mask = max;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    mask |= mask >> 32;
    return mask;
}

/* numpy's random_interval(max): uniform in [0, max] by masked rejection */
static inline uint64_t sfc_interval(sfc64 *r, uint64_t max) {
    uint64_t mask, v;
    if (max == 0) return 0;
    mask = mask_of(max);
    if (max <= 0xffffffffULL) {
        while ((v = (sfc_next32(r) & mask)) > max) {
        }
    } else {
        while ((v = (sfc_next64(r) & mask)) > max) {
        }
    }
    return v;
}

/* KeyedStreams(seed, tag)(a, b): hashed state, 16 outputs discarded */
static void sfc_keyed(sfc64 *r, uint64_t seed, uint64_t tag, uint64_t a, uint64_t b) {
    uint64_t w[4] = {seed, tag, a, b};
    blake2b_4q(w, r->s);
    r->has32 = 0;
    r->buf = 0;
    for (int i = 0; i < 16; i++) sfc_next64(r);
}

/* Four keyed streams at once (seed, tag, k[l], g[l]), l = 0..3: the BLAKE2b
 * state and its 16 discarded outputs, as sfc_keyed, in 4-lane vectors (GCC vector
 * extensions, built for AVX2 and AVX-512VL and chosen at import by the CPU; else
 * one stream at a time). Group
 * loads of many small clusters are dominated by this hash; each load computes the
 * state of the cluster's next group in batches of 4 (see load_group). */
#if defined(__GNUC__) || defined(__clang__)
typedef uint64_t v4u __attribute__((vector_size(32)));
#define SFC_KEYED_X4(NAME, ATTR)                                                      \
    ATTR static void NAME(uint64_t seed, uint64_t tag, const uint64_t ka[4],          \
                          const uint64_t ga[4], uint64_t st[4][4]) {                  \
        const v4u z = {0, 0, 0, 0};                                                   \
        v4u m[16], v[16], h[8];                                                       \
        for (int i = 0; i < 16; i++) m[i] = z;                                        \
        m[0] = z + seed;                                                              \
        m[1] = z + tag;                                                               \
        m[2] = (v4u){ka[0], ka[1], ka[2], ka[3]};                                     \
        m[3] = (v4u){ga[0], ga[1], ga[2], ga[3]};                                     \
        for (int i = 0; i < 8; i++) h[i] = z + B2_IV[i];                              \
        h[0] = h[0] ^ (0x01010000ULL | 32u);                                          \
        h[6] = h[6] ^ PERSON[0];                                                      \
        h[7] = h[7] ^ PERSON[1];                                                      \
        for (int i = 0; i < 8; i++) {                                                 \
            v[i] = h[i];                                                              \
            v[i + 8] = z + B2_IV[i];                                                  \
        }                                                                             \
        v[12] = v[12] ^ 32;                                                           \
        v[14] = ~v[14];                                                               \
        _Pragma("GCC unroll 12") for (int r = 0; r < 12; r++) B2_ROUND(r);            \
        v4u s0 = h[0] ^ v[0] ^ v[8], s1 = h[1] ^ v[1] ^ v[9];                         \
        v4u s2 = h[2] ^ v[2] ^ v[10], s3 = h[3] ^ v[3] ^ v[11];                       \
        for (int i = 0; i < 16; i++) { /* sfc_next64, outputs discarded */            \
            const v4u tmp = s0 + s1 + s3;                                             \
            s3 = s3 + 1;                                                              \
            s0 = s1 ^ (s1 >> 11);                                                     \
            s1 = s2 + (s2 << 3);                                                      \
            s2 = ((s2 << 24) | (s2 >> 40)) + tmp;                                     \
        }                                                                             \
        for (int l = 0; l < 4; l++) {                                                 \
            st[l][0] = s0[l];                                                         \
            st[l][1] = s1[l];                                                         \
            st[l][2] = s2[l];                                                         \
            st[l][3] = s3[l];                                                         \
        }                                                                             \
    }
/* per stream, here: scalar 110 ns; 4 lanes on SSE2 150 ns, AVX2 58 ns, AVX-512VL 43 ns */
#if defined(__x86_64__) && !defined(__clang__)
#define HAVE_X4 1
SFC_KEYED_X4(sfc_keyed_x4_avx2, __attribute__((target("avx2"))))
SFC_KEYED_X4(sfc_keyed_x4_avx512, __attribute__((target("avx512f,avx512vl"))))
#endif
#endif
/* the baseline: one at a time (4 lanes without AVX2 are slower than that) */
static void sfc_keyed_x4_base(uint64_t seed, uint64_t tag, const uint64_t ka[4],
                              const uint64_t ga[4], uint64_t st[4][4]) {
    for (int l = 0; l < 4; l++) {
        sfc64 r;
        sfc_keyed(&r, seed, tag, ka[l], ga[l]);
        memcpy(st[l], r.s, sizeof(r.s));
    }
}
static void (*sfc_keyed_x4)(uint64_t, uint64_t, const uint64_t *, const uint64_t *,
                            uint64_t (*)[4]) = sfc_keyed_x4_base;

/* ------------------------------------------------------------------ context */
/* The engine's arrays, in this order (a tuple from _engine.ClusterEngine._kctx):
 * docs, offsets, sizes, ppg, seg_off, group_len, cur, cur_group, seed, tag, ahead,
 * then nxt, nxt_group and last_group, or None, None and None.
 * ahead (uint64, 5 K): per cluster, a group g and the keyed stream (k, g) after its
 * discarded outputs (g = 2**64 - 1: none), computed ahead in batches of 4.
 * nxt (like cur) and nxt_group (int64, K): a group loaded ahead by draw's helper
 * thread: nxt[seg_off[k] : seg_off[k] + G n] holds group nxt_group[k] of cluster k
 * when that is >= 0 (written by the helper only, read once it is published);
 * last_group (int64, K): the last group of cluster k a draw can load (its clip). */
typedef struct helper helper_t;
typedef struct {
    Py_buffer b_docs, b_off, b_sizes, b_ppg, b_seg, b_glen, b_cur, b_cg;
    int nbuf;
    const void *docs;
    int docs32;
    const int64_t *offsets, *sizes, *ppg, *seg_off, *group_len;
    void *cur;
    int cur32;
    int64_t *cur_group;
    Py_ssize_t K, ncur, ndocs;
    uint64_t seed, tag;
    Py_buffer b_ahead;
    uint64_t *ahead;
    int nq; /* clusters (and groups) queued for the next batch of 4 streams */
    uint64_t qk[4], qg[4];
    Py_buffer b_nxt, b_ng, b_lg;
    void *nxt; /* NULL: no groups loaded ahead */
    int64_t *nxt_group;
    const int64_t *last_group;
    helper_t *helper; /* while draw's helper thread runs: where loads ask for the next */
} ctx_t;

static void ctx_release(ctx_t *c) {
    Py_buffer *bs[12] = {&c->b_docs, &c->b_off, &c->b_sizes, &c->b_ppg, &c->b_seg,  &c->b_glen,
                         &c->b_cur, &c->b_cg, &c->b_ahead, &c->b_nxt, &c->b_ng, &c->b_lg};
    for (int i = 0; i < c->nbuf; i++) PyBuffer_Release(bs[i]);
    c->nbuf = 0;
}

static int get_buf(PyObject *o, Py_buffer *b, int writable, Py_ssize_t itemsize,
                   const char *name) {
    if (PyObject_GetBuffer(o, b, (writable ? PyBUF_WRITABLE : 0) | PyBUF_FORMAT |
                                     PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (b->itemsize != itemsize || b->len % itemsize) {
        PyErr_Format(PyExc_TypeError, "_kernel: %s must have %zd-byte items", name, itemsize);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

static int ctx_get(PyObject *t, ctx_t *c) {
    memset(c, 0, sizeof(*c));
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 14) {
        PyErr_SetString(PyExc_TypeError, "_kernel: context must be a 14-tuple");
        return -1;
    }
    Py_buffer *bs[8] = {&c->b_docs, &c->b_off, &c->b_sizes, &c->b_ppg,
                        &c->b_seg, &c->b_glen, &c->b_cur, &c->b_cg};
    static const char *names[8] = {"docs", "offsets", "sizes", "ppg",
                                   "seg_off", "group_len", "cur", "cur_group"};
    for (int i = 0; i < 8; i++) {
        PyObject *o = PyTuple_GET_ITEM(t, i);
        Py_ssize_t isz = 8;
        if (i == 0 || i == 6) { /* docs, cur: int32 or int64 */
            Py_buffer probe;
            if (PyObject_GetBuffer(o, &probe, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
                ctx_release(c);
                return -1;
            }
            isz = probe.itemsize == 4 ? 4 : 8;
            PyBuffer_Release(&probe);
        }
        if (get_buf(o, bs[i], i == 6 || i == 7, isz, names[i]) < 0) {
            ctx_release(c);
            return -1;
        }
        c->nbuf = i + 1;
    }
    c->docs = c->b_docs.buf;
    c->docs32 = c->b_docs.itemsize == 4;
    c->ndocs = c->b_docs.len / c->b_docs.itemsize;
    c->offsets = c->b_off.buf;
    c->sizes = c->b_sizes.buf;
    c->ppg = c->b_ppg.buf;
    c->seg_off = c->b_seg.buf;
    c->group_len = c->b_glen.buf;
    c->cur = c->b_cur.buf;
    c->cur32 = c->b_cur.itemsize == 4;
    c->ncur = c->b_cur.len / c->b_cur.itemsize;
    c->cur_group = c->b_cg.buf;
    c->K = c->b_sizes.len / 8;
    if (c->b_off.len / 8 < c->K + 1 || c->b_ppg.len / 8 < c->K || c->b_seg.len / 8 < c->K + 1 ||
        c->b_glen.len / 8 < c->K || c->b_cg.len / 8 < c->K ||
        (c->K > 0 && (((const int64_t *)c->b_seg.buf)[c->K] > c->ncur ||
                      ((const int64_t *)c->b_off.buf)[c->K] > c->ndocs))) {
        PyErr_SetString(PyExc_ValueError, "_kernel: inconsistent engine arrays");
        ctx_release(c);
        return -1;
    }
    if (get_buf(PyTuple_GET_ITEM(t, 10), &c->b_ahead, 1, 8, "ahead") < 0) {
        ctx_release(c);
        return -1;
    }
    c->nbuf = 9;
    c->ahead = c->b_ahead.buf;
    if (c->b_ahead.len / 8 < 5 * c->K) {
        PyErr_SetString(PyExc_ValueError, "_kernel: inconsistent engine arrays");
        ctx_release(c);
        return -1;
    }
    if (PyTuple_GET_ITEM(t, 11) != Py_None) {
        if (get_buf(PyTuple_GET_ITEM(t, 11), &c->b_nxt, 1, c->b_cur.itemsize, "nxt") < 0) {
            ctx_release(c);
            return -1;
        }
        c->nbuf = 10;
        if (get_buf(PyTuple_GET_ITEM(t, 12), &c->b_ng, 1, 8, "nxt_group") < 0) {
            ctx_release(c);
            return -1;
        }
        c->nbuf = 11;
        if (get_buf(PyTuple_GET_ITEM(t, 13), &c->b_lg, 0, 8, "last_group") < 0) {
            ctx_release(c);
            return -1;
        }
        c->nbuf = 12;
        if (c->b_nxt.len != c->b_cur.len || c->b_ng.len / 8 < c->K || c->b_lg.len / 8 < c->K) {
            PyErr_SetString(PyExc_ValueError, "_kernel: inconsistent engine arrays");
            ctx_release(c);
            return -1;
        }
        c->nxt = c->b_nxt.buf;
        c->nxt_group = c->b_ng.buf;
        c->last_group = c->b_lg.buf;
    }
    c->seed = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(t, 8));
    c->tag = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(t, 9));
    if (PyErr_Occurred()) {
        ctx_release(c);
        return -1;
    }
    return 0;
}

/* The G passes of a group of cluster k (n > 1 documents) into dst (cur or nxt) at
 * seg_off[k], each its documents shuffled by r, pass after pass. */
static void group_into(const ctx_t *c, void *dst, int64_t k, sfc64 *r) {
    const int64_t n = c->sizes[k], G = c->ppg[k], o = c->offsets[k], so = c->seg_off[k];
    for (int64_t p = 0; p < G; p++) {
        int64_t at = so + p * n;
#define SHUFFLE(T, D)                                                   \
    {                                                                   \
        T *row = (T *)dst + at;                                         \
        const D *src = (const D *)c->docs + o;                          \
        for (int64_t i = 0; i < n; i++) row[i] = (T)src[i];             \
        int64_t i = n - 1;                                              \
        for (; i > 0xffffffffLL; i--) { /* beyond 32 bits: 64-bit draws */ \
            int64_t j = (int64_t)sfc_interval(r, (uint64_t)i);          \
            T x = row[i];                                               \
            row[i] = row[j];                                            \
            row[j] = x;                                                 \
        }                                                               \
        /* sfc_interval(i) with the mask kept across steps (i falls) */ \
        uint32_t mask = (uint32_t)mask_of((uint64_t)i);                 \
        for (; i > 0; i--) {                                            \
            uint32_t v;                                                 \
            if ((uint32_t)i <= (mask >> 1)) mask >>= 1;                 \
            while ((v = (sfc_next32(r) & mask)) > (uint32_t)i) {        \
            }                                                           \
            T x = row[i];                                               \
            row[i] = row[v];                                            \
            row[v] = x;                                                 \
        }                                                               \
    }
        if (c->cur32) {
            if (c->docs32) SHUFFLE(int32_t, int32_t) else SHUFFLE(int32_t, int64_t)
        } else {
            if (c->docs32) SHUFFLE(int64_t, int32_t) else SHUFFLE(int64_t, int64_t)
        }
#undef SHUFFLE
    }
}

/* ------------------------------------------------------- groups loaded ahead
 * While draw runs a long call with nxt (two CPUs or more), a helper thread loads
 * group g + 1 of a cluster into nxt as soon as the draws load its group g into cur;
 * the draws' next load of that cluster is then a copy. The helper publishes a group
 * in nxt_group after writing it (-1 while it writes: a sequence lock), and only the
 * helper writes nxt; what it computes is the same group, so the draws are the same
 * whether or not it came first. */
#ifdef HAVE_HELPER
#define LOAD_ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define HQ 4096 /* requests waiting at most; more are dropped (loaded by the draws) */
#define AHEAD_MIN_ITEMS 256 /* the smallest group loaded ahead */
static Py_ssize_t helper_min = 1 << 15; /* draws of a call from which a helper starts */
static int helper_drain = 0; /* tests: each call's requests loaded before it returns */
struct helper {
    ctx_t *c;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t head, tail; /* requests [head, tail) of the ring, under mu */
    int stop, idle, drain; /* drain: at stop, the requests waiting are loaded first */
    int64_t qk[HQ], qg[HQ];
};

/* Whether group g of cluster k is loaded ahead: one a draw can load, of enough items
 * to outweigh asking (a small one is loaded by the draws in about that time). */
static inline int worth_ahead(const ctx_t *c, int64_t k, int64_t g) {
    return g <= c->last_group[k] && c->group_len[k] >= AHEAD_MIN_ITEMS && c->sizes[k] > 1;
}

static void helper_ask(helper_t *h, int64_t k, int64_t g) {
    pthread_mutex_lock(&h->mu);
    if (h->tail - h->head < HQ) {
        h->qk[h->tail % HQ] = k;
        h->qg[h->tail % HQ] = g;
        h->tail++;
        if (h->idle) pthread_cond_signal(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
}

static void *helper_run(void *arg) {
    helper_t *h = arg;
    ctx_t *c = h->c;
    for (;;) {
        uint64_t ks[4], gs[4];
        int m = 0;
        pthread_mutex_lock(&h->mu);
        while (h->head == h->tail && !h->stop) {
            h->idle = 1;
            pthread_cond_wait(&h->cv, &h->mu);
            h->idle = 0;
        }
        const int quit = h->stop && (!h->drain || h->head == h->tail);
        for (; !quit && m < 4 && h->head < h->tail; h->head++) {
            const int64_t k = h->qk[h->head % HQ], g = h->qg[h->head % HQ];
            if (c->nxt_group[k] == g) continue; /* loaded already (it is ours to write) */
            ks[m] = (uint64_t)k;
            gs[m++] = (uint64_t)g;
        }
        pthread_mutex_unlock(&h->mu);
        if (quit) break;
        uint64_t st[4][4];
        if (m == 4) {
            sfc_keyed_x4(c->seed, c->tag, ks, gs, st);
        } else {
            for (int l = 0; l < m; l++) {
                sfc64 r;
                sfc_keyed(&r, c->seed, c->tag, ks[l], gs[l]);
                memcpy(st[l], r.s, sizeof(r.s));
            }
        }
        for (int l = 0; l < m; l++) {
            sfc64 r;
            memcpy(r.s, st[l], sizeof(r.s));
            r.has32 = 0;
            r.buf = 0;
            __atomic_store_n(&c->nxt_group[ks[l]], (int64_t)-1, __ATOMIC_RELAXED);
            __atomic_thread_fence(__ATOMIC_RELEASE);
            group_into(c, c->nxt, (int64_t)ks[l], &r);
            __atomic_store_n(&c->nxt_group[ks[l]], (int64_t)gs[l], __ATOMIC_RELEASE);
        }
    }
    return NULL;
}

/* A helper for the draws of c (NULL if no thread could start). */
static helper_t *helper_start(ctx_t *c) {
    helper_t *h = malloc(sizeof(helper_t));
    if (!h) return NULL;
    memset(h, 0, offsetof(helper_t, qk));
    h->c = c;
    h->drain = helper_drain;
    if (pthread_mutex_init(&h->mu, NULL)) {
        free(h);
        return NULL;
    }
    if (pthread_cond_init(&h->cv, NULL)) {
        pthread_mutex_destroy(&h->mu);
        free(h);
        return NULL;
    }
    if (pthread_create(&h->th, NULL, helper_run, h)) {
        pthread_cond_destroy(&h->cv);
        pthread_mutex_destroy(&h->mu);
        free(h);
        return NULL;
    }
    return h;
}

/* Stops the helper (its waiting requests dropped, the group it writes finished). */
static void helper_stop(helper_t *h) {
    pthread_mutex_lock(&h->mu);
    h->stop = 1;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->th, NULL);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    free(h);
}
#else
#define LOAD_ACQ(p) (*(p))
#endif

/* Group g of cluster k's passes into cur[seg_off[k] : seg_off[k] + G n]: a copy of
 * nxt's when the helper loaded it there, else computed here. */
static void load_group(ctx_t *c, int64_t k, int64_t g) {
    const int64_t n = c->sizes[k], G = c->ppg[k], o = c->offsets[k], so = c->seg_off[k];
    if (n == 1) {
        int64_t d = c->docs32 ? ((const int32_t *)c->docs)[o] : ((const int64_t *)c->docs)[o];
        for (int64_t p = 0; p < G; p++) {
            if (c->cur32)
                ((int32_t *)c->cur)[so + p] = (int32_t)d;
            else
                ((int64_t *)c->cur)[so + p] = d;
        }
    } else if (n > 1) {
        int done = 0;
        if (c->nxt && LOAD_ACQ(&c->nxt_group[k]) == g) {
            const size_t isz = c->cur32 ? 4 : 8;
            memcpy((char *)c->cur + so * isz, (const char *)c->nxt + so * isz,
                   (size_t)(G * n) * isz);
#ifdef HAVE_HELPER
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            done = __atomic_load_n(&c->nxt_group[k], __ATOMIC_RELAXED) == g;
#else
            done = 1;
#endif
        }
        if (!done) {
            sfc64 r;
            uint64_t *a = c->ahead + 5 * k;
            if (a[0] == (uint64_t)g) { /* computed ahead */
                memcpy(r.s, a + 1, sizeof(r.s));
                r.has32 = 0;
                r.buf = 0;
            } else {
                sfc_keyed(&r, c->seed, c->tag, (uint64_t)k, (uint64_t)g);
            }
            /* the stream of the cluster's next group, with 3 others */
            c->qk[c->nq] = (uint64_t)k;
            c->qg[c->nq] = (uint64_t)g + 1;
            if (++c->nq == 4) {
                uint64_t st[4][4];
                sfc_keyed_x4(c->seed, c->tag, c->qk, c->qg, st);
                for (int l = 0; l < 4; l++) {
                    uint64_t *al = c->ahead + 5 * c->qk[l];
                    al[0] = c->qg[l];
                    memcpy(al + 1, st[l], sizeof(st[l]));
                }
                c->nq = 0;
            }
            group_into(c, c->cur, k, &r);
        }
#ifdef HAVE_HELPER
        if (c->helper && worth_ahead(c, k, g + 1)) helper_ask(c->helper, k, g + 1);
#endif
    }
    c->cur_group[k] = g;
}

static inline int64_t doc_of(ctx_t *c, int64_t k, int64_t j) {
    const int64_t gl = c->group_len[k];
    int64_t d = j - c->cur_group[k] * gl;
    if ((uint64_t)d >= (uint64_t)gl) {
        int64_t g = j / gl;
        load_group(c, k, g);
        d = j - g * gl;
    }
    int64_t at = c->seg_off[k] + d;
    return c->cur32 ? ((const int32_t *)c->cur)[at] : ((const int64_t *)c->cur)[at];
}

static int check_cluster(ctx_t *c, int64_t k) {
    if (k < 0 || k >= c->K || c->group_len[k] <= 0) {
        PyErr_Format(PyExc_ValueError, "_kernel: bad cluster %lld", (long long)k);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ methods */
static PyObject *k_pass_state(PyObject *self, PyObject *args) {
    unsigned long long w[4];
    uint64_t in[4], out[4];
    if (!PyArg_ParseTuple(args, "KKKK", &w[0], &w[1], &w[2], &w[3])) return NULL;
    for (int i = 0; i < 4; i++) in[i] = w[i];
    blake2b_4q(in, out);
    return Py_BuildValue("(KKKK)", (unsigned long long)out[0], (unsigned long long)out[1],
                         (unsigned long long)out[2], (unsigned long long)out[3]);
}

/* take_grouped(ctx, k, hits, j0, vals int64): vals = documents of draws
 * j0[i] .. j0[i] + hits[i] - 1 of cluster k[i], concatenated. */
static PyObject *k_take_grouped(PyObject *self, PyObject *args) {
    PyObject *t, *o[4];
    Py_buffer b[4];
    ctx_t c;
    int got = 0;
    if (!PyArg_ParseTuple(args, "OOOOO", &t, &o[0], &o[1], &o[2], &o[3])) return NULL;
    if (ctx_get(t, &c) < 0) return NULL;
    for (; got < 4; got++)
        if (get_buf(o[got], &b[got], got == 3, 8, "take_grouped argument") < 0) break;
    PyObject *res = NULL;
    if (got == 4) {
        const int64_t *ks = b[0].buf, *hits = b[1].buf, *j0 = b[2].buf;
        int64_t *vals = b[3].buf;
        Py_ssize_t m = b[0].len / 8, nv = b[3].len / 8, need = 0;
        int bad = b[1].len != b[0].len || b[2].len != b[0].len;
        for (Py_ssize_t i = 0; i < m && !bad; i++) {
            bad = check_cluster(&c, ks[i]) < 0 || hits[i] < 0 || j0[i] < 0;
            need += hits[i];
        }
        if (!bad && need > nv) bad = 1;
        if (bad) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "_kernel: bad take");
        } else {
            Py_BEGIN_ALLOW_THREADS
            Py_ssize_t w = 0;
            for (Py_ssize_t i = 0; i < m; i++) {
                const int64_t k = ks[i], end = j0[i] + hits[i];
                for (int64_t j = j0[i]; j < end; j++) vals[w++] = doc_of(&c, k, j);
            }
            Py_END_ALLOW_THREADS
            res = Py_None;
            Py_INCREF(res);
        }
    }
    for (int i = 0; i < got; i++) PyBuffer_Release(&b[i]);
    ctx_release(&c);
    return res;
}

/* draw(ctx, u uint32, pool int64, bounds uint64|None, guide int64|None, shift,
 *      rem int64|None, counts int64, out int64|None, choice uint32|None,
 *      events int64|None)
 *
 * Draws t = 0 .. len(u) - 1: pool-local cluster from u[t] (uniform: u m >> 32;
 * weighted: guide[u >> shift], then right while bounds <= u); cluster k =
 * pool[local]; choice[t] = k; out[t] = the document of its draw counts[k]
 * (if out); counts[k] += 1; rem[local] -= 1. A draw that brings a rem to 0 clips
 * its cluster: with `events` (uniform choice only) it leaves pool and rem here
 * (the entries on its shorter side shift over it: the pool is then
 * pool[start : start + size], in the same order as ClusterEngine._drop_from_pool
 * leaves it) and (k, t) is recorded, while `events` has room; else the call stops
 * after that draw. Returns (draws done, local clipped at the stop or -1 (local to
 * the pool's new start), events recorded, start, pool size now). */
#define PD 8    /* prefetch distance of each pipeline stage of draw, in draws */
#define RING 64 /* ring of chosen clusters: a power of 2 above 4 PD */

static PyObject *k_draw(PyObject *self, PyObject *args) {
    PyObject *t, *ou, *op, *ob, *og, *orem, *oc, *oout, *och, *oev;
    int shift;
    if (!PyArg_ParseTuple(args, "OOOOOiOOOOO", &t, &ou, &op, &ob, &og, &shift, &orem, &oc,
                          &oout, &och, &oev))
        return NULL;
    ctx_t c;
    int gather = oout != Py_None;
    if (gather) {
        if (ctx_get(t, &c) < 0) return NULL;
    } else {
        memset(&c, 0, sizeof(c));
    }
    Py_buffer bu, bp, bb, bg, br, bc, bo, bch, bev;
    Py_buffer *held[9];
    int nh = 0, fail = 0;
#define GET(o, b, w, isz, nm)                              \
    if (!fail) {                                           \
        if (get_buf(o, &b, w, isz, nm) < 0) fail = 1;      \
        else held[nh++] = &b;                              \
    }
    GET(ou, bu, 0, 4, "u");
    int weighted = ob != Py_None;
    int clipped = orem != Py_None;
    /* events: the clips are handled here (uniform choice only: the pool shrinks in
     * place), each recorded as (cluster, draw) */
    int inplace = oev != Py_None && !weighted && clipped;
    GET(op, bp, inplace, 8, "pool");
    if (weighted) {
        GET(ob, bb, 0, 8, "bounds");
        GET(og, bg, 0, 8, "guide");
    }
    if (clipped) GET(orem, br, 1, 8, "rem");
    GET(oc, bc, 1, 8, "counts");
    if (gather) GET(oout, bo, 1, 8, "out");
    int keep = och != Py_None;
    if (keep) GET(och, bch, 1, 4, "choice");
    if (inplace) GET(oev, bev, 1, 8, "events");
#undef GET
    PyObject *res = NULL;
    if (!fail) {
        Py_ssize_t n = bu.len / 4, m = bp.len / 8, K = bc.len / 8;
        const uint32_t *u = bu.buf;
        int64_t *pool = bp.buf;
        int64_t *ev = inplace ? bev.buf : NULL;
        const Py_ssize_t evcap = inplace ? bev.len / 16 : 0;
        Py_ssize_t ne = 0;
        const uint64_t *bounds = weighted ? bb.buf : NULL;
        const int64_t *guide = weighted ? bg.buf : NULL;
        int64_t *rem = clipped ? br.buf : NULL;
        int64_t *counts = bc.buf;
        int64_t *out = gather ? bo.buf : NULL;
        uint32_t *choice = keep ? bch.buf : NULL;
        int bad = m == 0 || (clipped && br.len / 8 < m) || (gather && bo.len / 8 < n) ||
                  (keep && bch.len / 4 < n) || shift < 0 || shift > 31 ||
                  (weighted && (bb.len / 8 < m || bg.len / 8 < ((Py_ssize_t)1 << (32 - shift)) ||
                                ((const uint64_t *)bb.buf)[m - 1] <= 0xffffffffULL));
        if (bad) {
            PyErr_SetString(PyExc_ValueError, "_kernel: bad draw arguments");
        } else {
            /* Every index read is checked (cheap, predictable branches). The draws are
             * software-pipelined: the cluster of draw i + 3 PD is chosen ahead (and its
             * pool entry prefetched), its per-cluster fields at i + 2 PD, its next
             * document's place in the passes at i + PD; only prefetches run ahead, so
             * the result is that of the plain loop. */
            const Py_ssize_t KK = gather ? (c.K < K ? c.K : K) : K;
            Py_ssize_t i = 0, start = 0;
            int64_t hit = -1;
            Py_BEGIN_ALLOW_THREADS
#ifdef HAVE_HELPER
            if (gather && c.nxt && n >= helper_min) c.helper = helper_start(&c);
            if (c.helper) /* what the last call's helper left: the next group of each */
                for (Py_ssize_t k = 0; k < c.K; k++)
                    if (c.cur_group[k] >= 0 && LOAD_ACQ(&c.nxt_group[k]) != c.cur_group[k] + 1 &&
                        worth_ahead(&c, k, c.cur_group[k] + 1))
                        helper_ask(c.helper, k, c.cur_group[k] + 1);
#endif
            uint64_t mm = (uint64_t)m;
            int64_t ringL[RING], ringK[RING];
#define STAGE1(s)                                                           \
    do {                                                                    \
        const uint32_t v_ = u[s];                                           \
        int64_t l_;                                                         \
        if (!weighted) {                                                    \
            l_ = (int64_t)(((uint64_t)v_ * mm) >> 32);                      \
        } else {                                                            \
            l_ = guide[v_ >> shift];                                        \
            if ((uint64_t)l_ >= mm) l_ = -1;                                \
            else while (bounds[l_] <= v_) l_++;                             \
        }                                                                   \
        ringL[(s) & (RING - 1)] = l_;                                       \
        if (l_ >= 0) {                                                      \
            PREFETCH(pool + l_);                                            \
            if (rem) PREFETCH(rem + l_);                                    \
        }                                                                   \
    } while (0)
#define STAGE2(s)                                                           \
    do {                                                                    \
        const int64_t l_ = ringL[(s) & (RING - 1)];                         \
        int64_t k_ = l_ >= 0 ? pool[l_] : -1;                               \
        if ((uint64_t)k_ >= (uint64_t)KK) k_ = -1;                          \
        ringK[(s) & (RING - 1)] = k_;                                       \
        if (k_ >= 0) {                                                      \
            PREFETCH(counts + k_);                                          \
            if (out) {                                                      \
                PREFETCH(c.group_len + k_);                                 \
                PREFETCH(c.cur_group + k_);                                 \
                PREFETCH(c.seg_off + k_);                                   \
            }                                                               \
        }                                                                   \
    } while (0)
#define STAGE3(s)                                                           \
    do {                                                                    \
        const int64_t k_ = ringK[(s) & (RING - 1)];                         \
        if (k_ >= 0) {                                                      \
            const int64_t gl_ = c.group_len[k_];                            \
            const int64_t d_ = counts[k_] - c.cur_group[k_] * gl_;          \
            if ((uint64_t)d_ < (uint64_t)gl_) {                             \
                const int64_t at_ = c.seg_off[k_] + d_;                     \
                PREFETCH(c.cur32 ? (void *)((int32_t *)c.cur + at_)         \
                                 : (void *)((int64_t *)c.cur + at_));       \
            } else { /* it will load a group: what the load reads */        \
                PREFETCH(c.sizes + k_);                                     \
                PREFETCH(c.ppg + k_);                                       \
                PREFETCH(c.offsets + k_);                                   \
                PREFETCH(c.ahead + 5 * k_);                                 \
                PREFETCH(c.ahead + 5 * k_ + 4);                             \
                ringK[(s) & (RING - 1)] = -2 - k_; /* for STAGE4 */         \
            }                                                               \
        }                                                                   \
    } while (0)
#define STAGE4(s)                                                           \
    do {                                                                    \
        const int64_t k_ = -2 - ringK[(s) & (RING - 1)];                    \
        if (k_ >= 0) { /* a load: its documents, where it writes */         \
            const int64_t o_ = c.offsets[k_], so_ = c.seg_off[k_];          \
            /* the first line of each; every line (8 at most) of a small    \
             * group, too short a stream for the hardware prefetcher */     \
            const int64_t gb_ = c.group_len[k_] << (c.cur32 ? 2 : 3);       \
            const int64_t lim_ = gb_ <= 512 ? gb_ : 1;                      \
            if ((uint64_t)o_ < (uint64_t)c.ndocs) {                         \
                const char *p_ = c.docs32 ? (const char *)((int32_t *)c.docs + o_) \
                                          : (const char *)((int64_t *)c.docs + o_); \
                for (int64_t b_ = 0; b_ < lim_ && b_ < 256; b_ += 64)       \
                    PREFETCH(p_ + b_);                                      \
            }                                                               \
            if ((uint64_t)so_ < (uint64_t)c.ncur) {                         \
                const char *p_ = c.cur32 ? (const char *)((int32_t *)c.cur + so_) \
                                         : (const char *)((int64_t *)c.cur + so_); \
                for (int64_t b_ = 0; b_ < lim_; b_ += 64)                   \
                    PREFETCH(p_ + b_);                                      \
            }                                                               \
            ringK[(s) & (RING - 1)] = k_;                                   \
        }                                                                   \
    } while (0)
            while (i < n) {
                /* (re)start the pipeline at draw i: at first, and after a clip */
                for (Py_ssize_t s = i; s < n && s < i + 4 * PD; s++) STAGE1(s);
                for (Py_ssize_t s = i; s < n && s < i + 3 * PD; s++) STAGE2(s);
                if (out) {
                    for (Py_ssize_t s = i; s < n && s < i + 2 * PD; s++) STAGE3(s);
                    for (Py_ssize_t s = i; s < n && s < i + PD; s++) STAGE4(s);
                }
                int again = 0;
                for (; i < n; i++) {
                    if (i + 4 * PD < n) STAGE1(i + 4 * PD);
                    if (i + 3 * PD < n) STAGE2(i + 3 * PD);
                    if (out && i + 2 * PD < n) STAGE3(i + 2 * PD);
                    if (out && i + PD < n) STAGE4(i + PD);
                    const int64_t local = ringL[i & (RING - 1)], k = ringK[i & (RING - 1)];
                    if (local < 0 || k < 0 || (gather && c.group_len[k] <= 0)) {
                        bad = 1;
                        break;
                    }
                    if (choice) choice[i] = (uint32_t)k;
                    const int64_t j = counts[k]++;
                    if (out) out[i] = doc_of(&c, k, j);
                    if (rem && --rem[local] == 0) { /* cluster k completed its last pass */
                        i++;
                        if (ne < evcap) { /* it leaves the pool here; the draws go on */
                            ev[2 * ne] = k;
                            ev[2 * ne + 1] = i - 1;
                            ne++;
                            if (local < m - 1 - local) {
                                /* the shorter side moves: entries before it one to
                                 * the right, and the pool now starts one further */
                                memmove(pool + 1, pool, (size_t)local * sizeof(int64_t));
                                memmove(rem + 1, rem, (size_t)local * sizeof(int64_t));
                                pool++;
                                rem++;
                                start++;
                            } else {
                                memmove(pool + local, pool + local + 1,
                                        (size_t)(m - local - 1) * sizeof(int64_t));
                                memmove(rem + local, rem + local + 1,
                                        (size_t)(m - local - 1) * sizeof(int64_t));
                            }
                            m--;
                            mm = (uint64_t)m;
                            again = m > 0;
                        } else {
                            hit = local;
                        }
                        break;
                    }
                }
                if (!again) break;
            }
#undef STAGE1
#undef STAGE2
#undef STAGE3
#undef STAGE4
#ifdef HAVE_HELPER
            if (c.helper) {
                helper_stop(c.helper);
                c.helper = NULL;
            }
#endif
            Py_END_ALLOW_THREADS
            if (bad)
                PyErr_SetString(PyExc_ValueError, "_kernel: bad pool or guide entry");
            else
                res = Py_BuildValue("(nLnnn)", i, (long long)hit, ne, start, m);
        }
    }
    for (int i = 0; i < nh; i++) PyBuffer_Release(held[i]);
    if (gather) ctx_release(&c);
    return res;
}

/* shuffle(buf int32|int64, seed, tag, a, b): numpy's Generator.shuffle of the 1-D
 * buffer by KeyedStreams(seed, tag)(a, b). The swap partners j are drawn LOOK steps
 * ahead (the same draws in the same order) so that their items can be prefetched:
 * a shuffle of millions of items waits on memory, not on the generator. */
#define LOOK 32
static PyObject *k_shuffle(PyObject *self, PyObject *args) {
    PyObject *ob;
    unsigned long long seed, tag, a, b;
    Py_buffer bb;
    if (!PyArg_ParseTuple(args, "OKKKK", &ob, &seed, &tag, &a, &b)) return NULL;
    if (PyObject_GetBuffer(ob, &bb, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (bb.itemsize != 4 && bb.itemsize != 8) {
        PyErr_SetString(PyExc_TypeError, "_kernel.shuffle: 4- or 8-byte items only");
        PyBuffer_Release(&bb);
        return NULL;
    }
    const int64_t n = bb.len / bb.itemsize;
    const int wide = bb.itemsize == 8;
    Py_BEGIN_ALLOW_THREADS
    sfc64 r;
    uint64_t ring[LOOK];
    sfc_keyed(&r, seed, tag, a, b);
    int64_t ahead = n - 1; /* next i whose partner is to be drawn */
    for (int q = 0; q < LOOK && ahead > 0; q++, ahead--) {
        uint64_t j = sfc_interval(&r, (uint64_t)ahead);
        ring[ahead & (LOOK - 1)] = j;
        PREFETCH(wide ? (void *)((int64_t *)bb.buf + j) : (void *)((int32_t *)bb.buf + j));
    }
    for (int64_t i = n - 1; i > 0; i--) {
        const uint64_t j = ring[i & (LOOK - 1)];
        if (ahead > 0) {
            uint64_t jj = sfc_interval(&r, (uint64_t)ahead);
            ring[ahead & (LOOK - 1)] = jj;
            PREFETCH(wide ? (void *)((int64_t *)bb.buf + jj) : (void *)((int32_t *)bb.buf + jj));
            ahead--;
        }
        if (wide) {
            int64_t *x = bb.buf, t = x[i];
            x[i] = x[j];
            x[j] = t;
        } else {
            int32_t *x = bb.buf, t = x[i];
            x[i] = x[j];
            x[j] = t;
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&bb);
    Py_RETURN_NONE;
}

static inline uint64_t mix64(uint64_t z) {
    z ^= z >> 30;
    z *= 0xBF58476D1CE4E5B9ULL;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return z;
}

/* PacedEngine._keys: key of draw j of a cluster with stream base bk and scale sc,
 * trunc((j + u) * sc) with u = _rng.CounterUniforms (top 53 bits of SplitMix64's
 * mix of bk + (j + 1) gamma, times 2**-53); the same IEEE operations as numpy's. */
static inline int64_t paced_key(uint64_t bk, int64_t j, double sc) {
    uint64_t z = mix64(((uint64_t)j + 1) * 0x9E3779B97F4A7C15ULL + bk);
    double u = (double)(z >> 11) * (1.0 / 9007199254740992.0); /* 2**-53 */
    double x = (double)j;
    x += u;
    x *= sc;
    return (int64_t)x;
}

/* paced_count(base, a, q, scale, inv, x, c): PacedEngine._count, c[i] = the draws of
 * cluster a[i] (quota q[i]) with key < x[i] (x of length 1: the same x for all). */
static PyObject *k_paced_count(PyObject *self, PyObject *args) {
    PyObject *o[7];
    Py_buffer b[7];
    int got = 0;
    if (!PyArg_ParseTuple(args, "OOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6]))
        return NULL;
    for (; got < 7; got++)
        if (get_buf(o[got], &b[got], got == 6, 8, "paced_count argument") < 0) break;
    PyObject *res = NULL;
    if (got == 7) {
        const uint64_t *base = b[0].buf;
        const int64_t *a = b[1].buf, *q = b[2].buf, *x = b[5].buf;
        const double *scale = b[3].buf, *inv = b[4].buf;
        int64_t *c = b[6].buf;
        const Py_ssize_t n = b[1].len / 8, nbase = b[0].len / 8, nx = b[5].len / 8;
        int bad = b[2].len / 8 != n || b[3].len / 8 != n || b[4].len / 8 != n ||
                  b[6].len / 8 != n || !(nx == n || nx == 1);
        for (Py_ssize_t i = 0; i < n && !bad; i++) bad = a[i] < 0 || a[i] >= nbase || q[i] < 0;
        if (bad) {
            PyErr_SetString(PyExc_ValueError, "_kernel.paced_count: bad arguments");
        } else {
            Py_BEGIN_ALLOW_THREADS
            for (Py_ssize_t i = 0; i < n; i++) {
                const int64_t xi = x[nx == 1 ? 0 : i], qi = q[i];
                const uint64_t bk = base[a[i]];
                const double sc = scale[i];
                double f = floor((double)xi * inv[i]);
                int64_t ci = f <= 0.0 ? 0 : f >= (double)qi ? qi : (int64_t)f;
                while (ci > 0 && paced_key(bk, ci - 1, sc) >= xi) ci--;
                while (ci < qi && paced_key(bk, ci, sc) < xi) ci++;
                c[i] = ci;
            }
            Py_END_ALLOW_THREADS
            res = Py_None;
            Py_INCREF(res);
        }
    }
    for (int i = 0; i < got; i++) PyBuffer_Release(&b[i]);
    return res;
}

/* paced_window(ctx, k, ma, j0, off, base uint64, scale float64, front, need, out, taken)
 *
 * One window of PacedEngine._windows: draws j0[i] .. j0[i] + ma[i] - 1 of clusters
 * k[i], each at key trunc((j + u(k, j)) * scale[i]) (u: _rng.CounterUniforms with
 * streams `base`), in [front, front + 2**16). The schedule takes them by (key,
 * cluster order, j): a counting sort. The first `need` go to out (documents: draw j
 * of cluster k[i] takes the document of its passes at j + off[i], off[i] the draws
 * of k[i] in earlier stages), their number per cluster to taken. Returns (draws in the window, key - front of the
 * last one taken, or -1). */
static PyObject *k_paced_window(PyObject *self, PyObject *args) {
    PyObject *t, *o[8];
    long long front, need;
    if (!PyArg_ParseTuple(args, "OOOOOOOLLOO", &t, &o[0], &o[1], &o[2], &o[7], &o[3], &o[4],
                          &front, &need, &o[5], &o[6]))
        return NULL;
    ctx_t c;
    if (ctx_get(t, &c) < 0) return NULL;
    Py_buffer b[8];
    int got = 0;
    static const int wr[8] = {0, 0, 0, 0, 0, 1, 1, 0};
    for (; got < 8; got++)
        if (get_buf(o[got], &b[got], wr[got], 8, "paced_window argument") < 0) break;
    PyObject *res = NULL;
    uint16_t *keys = NULL;
    uint32_t *start = NULL;
    if (got == 8) {
        const int64_t *ks = b[0].buf, *ma = b[1].buf, *j0 = b[2].buf, *off = b[7].buf;
        const uint64_t *base = b[3].buf;
        const double *scale = b[4].buf;
        int64_t *out = b[5].buf, *taken = b[6].buf;
        const Py_ssize_t A = b[0].len / 8, nbase = b[3].len / 8;
        int64_t M = 0;
        int bad = b[1].len / 8 != A || b[2].len / 8 != A || b[4].len / 8 != A ||
                  b[6].len / 8 != A || b[7].len / 8 != A || need < 0;
        for (Py_ssize_t i = 0; i < A && !bad; i++) {
            bad = check_cluster(&c, ks[i]) < 0 || ks[i] >= nbase || ma[i] < 0 || j0[i] < 0 ||
                  off[i] < 0;
            M += ma[i];
        }
        if (!bad && b[5].len / 8 < (M < need ? M : need)) bad = 1; /* out too short */
        if (!bad) {
            keys = PyMem_RawMalloc((size_t)(M > 0 ? M : 1) * sizeof(uint16_t));
            start = PyMem_RawCalloc((size_t)1 << 16, sizeof(uint32_t));
            if (!keys || !start) {
                PyErr_NoMemory();
                bad = 1;
            }
        }
        if (!bad) {
            int64_t last = -1, w = 0;
            Py_BEGIN_ALLOW_THREADS
            for (Py_ssize_t i = 0; i < A && !bad; i++) {
                const uint64_t bk = base[ks[i]];
                const double sc = scale[i];
                for (int64_t j = j0[i]; j < j0[i] + ma[i]; j++, w++) {
                    int64_t key = paced_key(bk, j, sc) - front;
                    if (key < 0 || key >= (1 << 16)) {
                        bad = 1;
                        break;
                    }
                    keys[w] = (uint16_t)key;
                    start[key]++;
                }
            }
            if (!bad) {
                uint32_t acc = 0;
                for (int q = 0; q < (1 << 16); q++) {
                    uint32_t h = start[q];
                    start[q] = acc;
                    acc += h;
                }
                w = 0;
                for (Py_ssize_t i = 0; i < A; i++) {
                    int64_t got_i = 0;
                    if (i + 4 < A) { /* the next documents of a cluster further on */
                        const int64_t k4 = ks[i + 4], gl4 = c.group_len[k4];
                        const int64_t d4 = j0[i + 4] + off[i + 4] - c.cur_group[k4] * gl4;
                        if ((uint64_t)d4 < (uint64_t)gl4) {
                            const int64_t at4 = c.seg_off[k4] + d4;
                            PREFETCH(c.cur32 ? (void *)((int32_t *)c.cur + at4)
                                             : (void *)((int64_t *)c.cur + at4));
                        }
                    }
                    for (int64_t j = j0[i]; j < j0[i] + ma[i]; j++, w++) {
                        const uint32_t key = keys[w];
                        const int64_t pos = start[key]++;
                        if (pos < need) {
                            out[pos] = doc_of(&c, ks[i], j + off[i]);
                            got_i++;
                            if (pos == need - 1) last = key;
                        }
                    }
                    taken[i] = got_i;
                }
            }
            Py_END_ALLOW_THREADS
            if (bad)
                PyErr_SetString(PyExc_ValueError, "_kernel.paced_window: key outside the window");
            else
                res = Py_BuildValue("(LL)", (long long)M, (long long)last);
        } else if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "_kernel.paced_window: bad arguments");
        }
    }
    PyMem_RawFree(keys);
    PyMem_RawFree(start);
    for (int i = 0; i < got; i++) PyBuffer_Release(&b[i]);
    ctx_release(&c);
    return res;
}

/* ahead_fill(ctx, counts int64): for every cluster of more than one document, the
 * stream of the group its next draw (counts[k]) falls in, computed ahead (4 at a
 * time): a fresh engine's first loads, 10^5 of them for 10^5 clusters, then
 * start as the later ones do. */
static PyObject *k_ahead_fill(PyObject *self, PyObject *args) {
    PyObject *t, *oc;
    if (!PyArg_ParseTuple(args, "OO", &t, &oc)) return NULL;
    ctx_t c;
    if (ctx_get(t, &c) < 0) return NULL;
    Py_buffer bc;
    if (get_buf(oc, &bc, 0, 8, "counts") < 0) {
        ctx_release(&c);
        return NULL;
    }
    PyObject *res = NULL;
    if (bc.len / 8 < c.K) {
        PyErr_SetString(PyExc_ValueError, "_kernel.ahead_fill: counts too short");
    } else {
        const int64_t *counts = bc.buf;
        Py_BEGIN_ALLOW_THREADS
        uint64_t qk[4], qg[4], st[4][4];
        int nq = 0;
        for (Py_ssize_t k = 0; k <= c.K; k++) {
            if (k < c.K) {
                const int64_t gl = c.group_len[k];
                if (c.sizes[k] <= 1 || gl <= 0 || counts[k] < 0) continue;
                qk[nq] = (uint64_t)k;
                qg[nq++] = (uint64_t)(counts[k] / gl);
                if (nq < 4) continue;
            }
            if (nq == 4) {
                sfc_keyed_x4(c.seed, c.tag, qk, qg, st);
            } else { /* the last few */
                for (int l = 0; l < nq; l++) {
                    sfc64 r;
                    sfc_keyed(&r, c.seed, c.tag, qk[l], qg[l]);
                    memcpy(st[l], r.s, sizeof(r.s));
                }
            }
            for (int l = 0; l < nq; l++) {
                uint64_t *a = c.ahead + 5 * qk[l];
                a[0] = qg[l];
                memcpy(a + 1, st[l], sizeof(st[l]));
            }
            nq = 0;
        }
        Py_END_ALLOW_THREADS
        res = Py_None;
        Py_INCREF(res);
    }
    PyBuffer_Release(&bc);
    ctx_release(&c);
    return res;
}

/* streams4([name]) -> (name in use, names available): which sfc_keyed_x4 the group
 * loads use ("avx512", "avx2", "scalar"); with a name, switch to it (tests). */
static PyObject *k_streams4(PyObject *self, PyObject *args) {
    const char *want = NULL;
    if (!PyArg_ParseTuple(args, "|s", &want)) return NULL;
    const char *names[3] = {"scalar", NULL, NULL};
    void (*fns[3])(uint64_t, uint64_t, const uint64_t *, const uint64_t *,
                   uint64_t (*)[4]) = {sfc_keyed_x4_base, NULL, NULL};
    int n = 1;
#ifdef HAVE_X4
    if (__builtin_cpu_supports("avx2")) {
        names[n] = "avx2";
        fns[n++] = sfc_keyed_x4_avx2;
    }
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")) {
        names[n] = "avx512";
        fns[n++] = sfc_keyed_x4_avx512;
    }
#endif
    int found = want == NULL;
    for (int i = 0; i < n && !found; i++)
        if (strcmp(want, names[i]) == 0) {
            sfc_keyed_x4 = fns[i];
            found = 1;
        }
    if (!found) {
        PyErr_Format(PyExc_ValueError, "_kernel.streams4: %s is not available here", want);
        return NULL;
    }
    const char *cur = "scalar";
    for (int i = 0; i < n; i++)
        if (fns[i] == sfc_keyed_x4) cur = names[i];
    PyObject *av = PyTuple_New(n);
    if (!av) return NULL;
    for (int i = 0; i < n; i++) PyTuple_SET_ITEM(av, i, PyUnicode_FromString(names[i]));
    return Py_BuildValue("(sN)", cur, av);
}

/* helper_min([n[, drain]]) -> (n, drain) as they were: the draws of a call from which
 * draw starts its helper thread, and whether a call waits for every group its helper
 * was asked for (tests: the helper on short calls, its groups used for certain). */
static PyObject *k_helper_min(PyObject *self, PyObject *args) {
    Py_ssize_t n = -1;
    int drain = -1;
    if (!PyArg_ParseTuple(args, "|ni", &n, &drain)) return NULL;
#ifdef HAVE_HELPER
    PyObject *old = Py_BuildValue("(ni)", helper_min, helper_drain);
    if (n >= 1) helper_min = n;
    if (drain >= 0) helper_drain = drain != 0;
    return old;
#else
    (void)n;
    (void)drain;
    return Py_BuildValue("(ni)", (Py_ssize_t)-1, 0);
#endif
}

static PyMethodDef methods[] = {
    {"helper_min", k_helper_min, METH_VARARGS,
     "helper_min([n[, drain]]) -> (n, drain): when draw's helper thread starts, and "
     "whether calls wait for its groups"},
    {"ahead_fill", k_ahead_fill, METH_VARARGS,
     "ahead_fill(ctx, counts): the streams of every cluster's next group, computed ahead"},
    {"streams4", k_streams4, METH_VARARGS,
     "streams4([name]) -> (in use, available): the 4-lane stream hashing of group loads"},
    {"pass_state", k_pass_state, METH_VARARGS,
     "pass_state(seed, tag, a, b) -> 4 ints: BLAKE2b state of KeyedStreams(seed, tag)(a, b)"},
    {"take_grouped", k_take_grouped, METH_VARARGS,
     "take_grouped(ctx, k, hits, j0, vals): ClusterEngine._docs_grouped into vals"},
    {"draw", k_draw, METH_VARARGS,
     "draw(ctx, u, pool, bounds, guide, shift, rem, counts, out, choice, events)"
     " -> (done, clipped, events, pool start, pool size)"},
    {"shuffle", k_shuffle, METH_VARARGS,
     "shuffle(buf, seed, tag, a, b): Generator.shuffle by KeyedStreams(seed, tag)(a, b)"},
    {"paced_count", k_paced_count, METH_VARARGS,
     "paced_count(base, a, q, scale, inv, x, c): PacedEngine._count into c"},
    {"paced_window", k_paced_window, METH_VARARGS,
     "paced_window(ctx, k, ma, j0, base, scale, front, need, out, taken) -> (M, last key)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernel",
                                    "Compiled inner loops of clusterclip's cluster engines.",
                                    -1, methods};

/* Bumped with every change of an entry point or of what it computes: _engine.py
 * ignores a stale build (an in-place .so older than its source) and says so. */
#define KERNEL_VERSION 10

PyMODINIT_FUNC PyInit__kernel(void) {
    init_person();
#ifdef HAVE_X4
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl"))
        sfc_keyed_x4 = sfc_keyed_x4_avx512;
    else if (__builtin_cpu_supports("avx2"))
        sfc_keyed_x4 = sfc_keyed_x4_avx2;
#endif
    PyObject *m = PyModule_Create(&module);
#ifdef HAVE_HELPER
    const int helper = 1;
#else
    const int helper = 0;
#endif
    if (m && (PyModule_AddIntConstant(m, "VERSION", KERNEL_VERSION) < 0 ||
              PyModule_AddIntConstant(m, "HELPER", helper) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
