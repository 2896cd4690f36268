/* Compiled inner loops of the fast embedder (clusterclip.embedding.static).
 *
 * Optional: without it (no C compiler at install time, or CLUSTERCLIP_KERNEL=off) the
 * embedder runs its Python path (dictionary lookups, then scipy's CSR product), which is
 * the reference; this file reproduces it bit for bit (the tests compare the two):
 *
 *   - word_rows: the cached row of every word of every text (-1 where not cached) and
 *     the distinct words not cached, in order of first appearance (``_PieceCache.rows``
 *     over the flattened words, then ``dict.fromkeys`` of those missing);
 *   - csr_sums: row i of the output is the sum of table[rows[k]] over
 *     k = indptr[i] .. indptr[i + 1] - 1, in that order, from zero, in float32 (what
 *     scipy's csr_matvecs does with data 1: y += 1 * x, exact products).
 *
 * Arrays come through the buffer protocol (C-contiguous, native byte order); the
 * Python side checks dtypes and shapes. No numpy headers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define VERSION 1

static int get_buf(PyObject *o, Py_buffer *b, int writable, Py_ssize_t itemsize,
                   const char *name) {
    if (PyObject_GetBuffer(o, b, (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (b->itemsize != itemsize || b->len % itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: expected items of %zd bytes", name, itemsize);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

/* word_rows(row_of: dict[str, int], words: list[list[str]], out: int64[total])
 *   -> list[str]: out[j] = row_of.get(word j, -1) over the words of all lists in order;
 *   returns the distinct words not in row_of, in order of first appearance. */
static PyObject *word_rows(PyObject *self, PyObject *args) {
    PyObject *row_of, *words, *out_obj, *missing = NULL, *seen = NULL;
    Py_buffer bo;
    if (!PyArg_ParseTuple(args, "O!O!O", &PyDict_Type, &row_of, &PyList_Type, &words,
                          &out_obj))
        return NULL;
    if (get_buf(out_obj, &bo, 1, 8, "out") < 0) return NULL;
    int64_t *out = (int64_t *)bo.buf;
    Py_ssize_t cap = bo.len / 8, j = 0;
    missing = PyList_New(0);
    seen = PySet_New(NULL);
    if (missing == NULL || seen == NULL) goto fail;
    for (Py_ssize_t t = 0; t < PyList_GET_SIZE(words); t++) {
        PyObject *ws = PyList_GET_ITEM(words, t);
        if (!PyList_Check(ws)) {
            PyErr_SetString(PyExc_TypeError, "words: expected a list of lists of str");
            goto fail;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ws); i++, j++) {
            PyObject *w = PyList_GET_ITEM(ws, i);
            if (j >= cap) {
                PyErr_SetString(PyExc_ValueError, "out: shorter than the words");
                goto fail;
            }
            PyObject *r = PyDict_GetItemWithError(row_of, w);  /* borrowed */
            if (r == NULL) {
                if (PyErr_Occurred()) goto fail;
                int had = PySet_Contains(seen, w);
                if (had < 0) goto fail;
                if (!had && (PySet_Add(seen, w) < 0 || PyList_Append(missing, w) < 0))
                    goto fail;
                out[j] = -1;
            } else {
                long long v = PyLong_AsLongLong(r);
                if (v == -1 && PyErr_Occurred()) goto fail;
                out[j] = (int64_t)v;
            }
        }
    }
    if (j != cap) {
        PyErr_SetString(PyExc_ValueError, "out: longer than the words");
        goto fail;
    }
    Py_DECREF(seen);
    PyBuffer_Release(&bo);
    return missing;
fail:
    Py_XDECREF(missing);
    Py_XDECREF(seen);
    PyBuffer_Release(&bo);
    return NULL;
}

/* csr_sums(indptr: int64[n+1], rows: int64[nnz], table: float32[V*d], d: int,
 *          out: float32[n*d], zeroed) -> None */
static PyObject *csr_sums(PyObject *self, PyObject *args) {
    PyObject *o[4];
    Py_ssize_t d;
    Py_buffer bp, br, bt, bo;
    if (!PyArg_ParseTuple(args, "OOOnO", &o[0], &o[1], &o[2], &d, &o[3])) return NULL;
    if (get_buf(o[0], &bp, 0, 8, "indptr") < 0) return NULL;
    if (get_buf(o[1], &br, 0, 8, "rows") < 0) goto f1;
    if (get_buf(o[2], &bt, 0, 4, "table") < 0) goto f2;
    if (get_buf(o[3], &bo, 1, 4, "out") < 0) goto f3;
    const int64_t *indptr = (const int64_t *)bp.buf, *rows = (const int64_t *)br.buf;
    const float *table = (const float *)bt.buf;
    float *out = (float *)bo.buf;
    Py_ssize_t n = bp.len / 8 - 1, nnz = br.len / 8;
    if (d < 1 || n < 0 || bt.len / 4 % d || bo.len / 4 != n * d) {
        PyErr_SetString(PyExc_ValueError, "csr_sums: inconsistent shapes");
        goto f4;
    }
    int64_t vocab = (int64_t)(bt.len / 4 / d);
    for (Py_ssize_t i = 0; i <= n; i++) {
        if (indptr[i] < 0 || indptr[i] > nnz || (i && indptr[i] < indptr[i - 1])) {
            PyErr_SetString(PyExc_ValueError, "csr_sums: indptr out of order or range");
            goto f4;
        }
    }
    for (Py_ssize_t k = 0; k < nnz; k++) {
        if (rows[k] < 0 || rows[k] >= vocab) {
            PyErr_SetString(PyExc_ValueError, "csr_sums: a row is outside the table");
            goto f4;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        float *y = out + i * d;
        for (int64_t k = indptr[i]; k < indptr[i + 1]; k++) {
            const float *x = table + rows[k] * d;
            for (Py_ssize_t c = 0; c < d; c++) y[c] += x[c];
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&bo);
    PyBuffer_Release(&bt);
    PyBuffer_Release(&br);
    PyBuffer_Release(&bp);
    Py_RETURN_NONE;
f4:
    PyBuffer_Release(&bo);
f3:
    PyBuffer_Release(&bt);
f2:
    PyBuffer_Release(&br);
f1:
    PyBuffer_Release(&bp);
    return NULL;
}

static PyMethodDef methods[] = {
    {"word_rows", word_rows, METH_VARARGS, "rows of cached words; the words not cached"},
    {"csr_sums", csr_sums, METH_VARARGS, "sums of table rows per document, in order"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_static",
                                    "inner loops of the fast embedder", -1, methods};

PyMODINIT_FUNC PyInit__static(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "VERSION", VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
