/* Compiled key helpers for radixkv.keys: read a list of Python ints in place.
 *
 * The Python code in key_helpers.py is the reference (keys.py pairs each helper with its
 * Python counterpart; native.py declares the eight); these helpers never raise a usage
 * error of their own. Whatever they cannot decide (an item that is not an exact int or
 * bool, an id out of range) they report, and the caller hands the key to the reference
 * path (key_encoding.py, key_validation.py), which raises the documented error. So
 * behaviour and errors are the reference's by construction, and the differential test
 * (tests/keys/test_native_keys.py) checks the rest.
 *
 * An id is "plain" when the item is an exact int (or a bool: bools are the ints they
 * equal) in [0, 2**63). Stored key data is native int64 bytes (key_data.PACKED a token),
 * or native int32 bytes (key_data.COMPACT a token) when every id of a node fits.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* The value of ``item`` if it is a plain id, else -1 (ids are never negative). */
static inline int64_t plain_id(PyObject *item) {
    if (PyLong_CheckExact(item) || PyBool_Check(item)) {
#if PY_VERSION_HEX >= 0x030C0000
        if (PyUnstable_Long_IsCompact((PyLongObject *)item)) {
            Py_ssize_t v = PyUnstable_Long_CompactValue((PyLongObject *)item);
            return v < 0 ? -1 : (int64_t)v;
        }
#else
        Py_ssize_t size = Py_SIZE(item);
        if (size == 0) return 0;
        if (size == 1) return (int64_t)((PyLongObject *)item)->ob_digit[0];
        if (size < 0) return -1;
#endif
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(item, &overflow);
        if (overflow || v < 0) {
            PyErr_Clear(); /* no error is raised by the helpers: the reference decides */
            return -1;
        }
        return (int64_t)v;
    }
    return -1;
}

/* The items (borrowed) and length of an exact list or tuple: 0, or -1 with a TypeError.
 * (An empty list's item array is NULL, so NULL cannot signal the error.) */
static int sequence_items(PyObject *seq, PyObject ***items, Py_ssize_t *n) {
    if (PyList_CheckExact(seq)) {
        *n = PyList_GET_SIZE(seq);
        *items = ((PyListObject *)seq)->ob_item;
        return 0;
    }
    if (PyTuple_CheckExact(seq)) {
        *n = PyTuple_GET_SIZE(seq);
        *items = ((PyTupleObject *)seq)->ob_item;
        return 0;
    }
    PyErr_SetString(PyExc_TypeError, "expected a list or a tuple");
    return -1;
}

static int bounds(Py_ssize_t n, Py_ssize_t start, Py_ssize_t end) {
    if (start < 0 || end < start || end > n) {
        PyErr_SetString(PyExc_IndexError, "token range out of bounds");
        return -1;
    }
    return 0;
}

/* plain_ids(seq[, end[, start]]) -> bool: every item of the list or tuple in [start, end)
 * (default: all) is a plain id. A key limited to its first ``end`` ids (RadixKey's
 * ``limit``) is checked there and nowhere else: the items after it are not part of the key;
 * the items before ``start`` were read already (they equal stored ids). */
static PyObject *plain_ids(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t n, end, start = 0;
    PyObject **items;
    if (nargs < 1 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "plain_ids(seq[, end[, start]])");
        return NULL;
    }
    if (sequence_items(args[0], &items, &n) < 0) return NULL;
    end = n;
    if (nargs >= 2) {
        end = PyLong_AsSsize_t(args[1]);
        if (end == -1 && PyErr_Occurred()) return NULL;
    }
    if (nargs == 3) {
        start = PyLong_AsSsize_t(args[2]);
        if (start == -1 && PyErr_Occurred()) return NULL;
    }
    if (bounds(n, start, end) < 0) return NULL;
    for (Py_ssize_t i = start; i < end; i++) {
        if (plain_id(items[i]) < 0) Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

/* The items (borrowed) of ``seq`` in [start, end) from pack's and pack32's arguments:
 * 0, or -1 with an error set. */
static int pack_arguments(PyObject *const *args, Py_ssize_t nargs, const char *usage,
                          PyObject ***items, Py_ssize_t *start, Py_ssize_t *end) {
    Py_ssize_t n;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    if (sequence_items(args[0], items, &n) < 0) return -1;
    *start = PyLong_AsSsize_t(args[1]);
    *end = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred() || bounds(n, *start, *end) < 0) return -1;
    return 0;
}

/* pack(seq, start, end) -> bytes | None: items [start, end) as native int64, or None if
 * one is not a plain id (a key read before it was checked: the reference path decides). */
static PyObject *pack(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t start, end;
    PyObject **items;
    if (pack_arguments(args, nargs, "pack(seq, start, end)", &items, &start, &end) < 0)
        return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (end - start) * (Py_ssize_t)sizeof(int64_t));
    if (out == NULL) return NULL;
    int64_t *ids = (int64_t *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = start; i < end; i++) {
        int64_t v = plain_id(items[i]);
        if (v < 0) {
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        ids[i - start] = v;
    }
    return out;
}

/* pack32(seq, start, end) -> bytes | None: items [start, end) as native int32 (the compact
 * form a node stores), or None if one is not a plain id below 2**31: one pass over the
 * caller's ints, where pack and then narrow would be two. */
static PyObject *pack32(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t start, end;
    PyObject **items;
    if (pack_arguments(args, nargs, "pack32(seq, start, end)", &items, &start, &end) < 0)
        return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (end - start) * (Py_ssize_t)sizeof(int32_t));
    if (out == NULL) return NULL;
    char *slim = PyBytes_AS_STRING(out);
    for (Py_ssize_t i = start; i < end; i++) {
        int64_t v = plain_id(items[i]);
        if (v < 0 || v > INT32_MAX) {
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        int32_t w = (int32_t)v;
        memcpy(slim + (i - start) * sizeof w, &w, sizeof w);
    }
    return out;
}

/* shared(stored, seq, start, end) -> int: how many leading int64 ids of ``stored`` equal
 * seq[start], seq[start + 1], ... before ``end`` (read in place; a non-plain item ends it). */
static PyObject *shared(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t n, start, end;
    if (nargs != 4 || !PyBytes_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "shared(stored: bytes, seq, start, end)");
        return NULL;
    }
    PyObject **items;
    if (sequence_items(args[1], &items, &n) < 0) return NULL;
    start = PyLong_AsSsize_t(args[2]);
    end = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred() || bounds(n, start, end) < 0) return NULL;
    Py_ssize_t stored_n = PyBytes_GET_SIZE(args[0]) / (Py_ssize_t)sizeof(int64_t);
    const char *stored = PyBytes_AS_STRING(args[0]);
    Py_ssize_t limit = end - start < stored_n ? end - start : stored_n;
    Py_ssize_t i = 0;
    for (; i < limit; i++) {
        int64_t want;
        memcpy(&want, stored + i * sizeof(int64_t), sizeof want); /* bytes are not aligned */
        if (plain_id(items[start + i]) != want) break;
    }
    return PyLong_FromSsize_t(i);
}

/* narrow(buffer) -> bytes | None: native int64 ids (all >= 0) as native int32 ones, or None
 * if one is negative or 2**31 or more. The compact form a node stores when every id fits,
 * made straight from a view of the caller's array (no int64 copy in between). */
static PyObject *narrow(PyObject *self, PyObject *packed) {
    Py_buffer view;
    if (PyObject_GetBuffer(packed, &view, PyBUF_SIMPLE) < 0) return NULL;
    Py_ssize_t n = view.len / (Py_ssize_t)sizeof(int64_t);
    const char *wide = (const char *)view.buf;
    uint64_t any_high = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t v;
        memcpy(&v, wide + i * sizeof v, sizeof v);
        any_high |= v;
    }
    PyObject *out = NULL;
    if (any_high >> 31) {
        out = Py_NewRef(Py_None);
    } else if ((out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int32_t)))) {
        char *slim = PyBytes_AS_STRING(out);
        for (Py_ssize_t i = 0; i < n; i++) {
            uint64_t v;
            memcpy(&v, wide + i * sizeof v, sizeof v);
            int32_t w = (int32_t)v;
            memcpy(slim + i * sizeof w, &w, sizeof w);
        }
    }
    PyBuffer_Release(&view);
    return out;
}

/* shared32(stored, probe, start, end) -> int: how many leading int32 ids of ``stored``
 * equal the probe's ids start, start + 1, ... before ``end``. The probe is a list or tuple
 * (read in place, as in ``shared``) or a buffer of native int64 ids (a view of the caller's
 * array: no copy). */
static PyObject *shared32(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t start, end;
    if (nargs != 4 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "shared32(stored: bytes, probe, start, end)");
        return NULL;
    }
    start = PyLong_AsSsize_t(args[2]);
    end = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred()) return NULL;
    Py_ssize_t stored_n = PyBytes_GET_SIZE(args[0]) / (Py_ssize_t)sizeof(int32_t);
    const char *stored = PyBytes_AS_STRING(args[0]);
    Py_ssize_t i = 0;
    if (PyList_CheckExact(args[1]) || PyTuple_CheckExact(args[1])) {
        PyObject **items;
        Py_ssize_t n;
        if (sequence_items(args[1], &items, &n) < 0 || bounds(n, start, end) < 0) return NULL;
        Py_ssize_t limit = end - start < stored_n ? end - start : stored_n;
        for (; i < limit; i++) {
            int32_t want;
            memcpy(&want, stored + i * sizeof want, sizeof want);
            if (plain_id(items[start + i]) != (int64_t)want) break;
        }
        return PyLong_FromSsize_t(i);
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0) return NULL;
    Py_ssize_t n = view.len / (Py_ssize_t)sizeof(int64_t);
    if (bounds(n, start, end) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const char *probe = (const char *)view.buf + start * sizeof(int64_t);
    Py_ssize_t limit = end - start < stored_n ? end - start : stored_n;
    /* Blocks of BLOCK ids with no early exit inside, so the compiler vectorises them (an
     * id-by-id loop measured several times slower than the memcmp of int64 stored ids);
     * the id-by-id loop then finds the first difference. */
    enum { BLOCK = 16 };
    for (; i + BLOCK <= limit; i += BLOCK) {
        uint64_t diff = 0;
        for (int k = 0; k < BLOCK; k++) {
            int32_t want;
            int64_t got;
            memcpy(&want, stored + (i + k) * sizeof want, sizeof want);
            memcpy(&got, probe + (i + k) * sizeof got, sizeof got);
            diff |= (uint64_t)(got ^ (int64_t)want);
        }
        if (diff) break;
    }
    for (; i < limit; i++) {
        int32_t want;
        int64_t got;
        memcpy(&want, stored + i * sizeof want, sizeof want);
        memcpy(&got, probe + i * sizeof got, sizeof got);
        if (got != (int64_t)want) break;
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(i);
}

/* signs_clear(buffer, start) -> bool: no native int64 id from byte ``start`` on is negative
 * (key_helpers.signs_clear, on any buffer: a view of the caller's array is read in place). */
static PyObject *signs_clear(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "signs_clear(buffer, start)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    if (start < 0 || start > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_IndexError, "start out of bounds");
        return NULL;
    }
    const char *ids = (const char *)view.buf + start;
    Py_ssize_t n = (view.len - start) / (Py_ssize_t)sizeof(int64_t);
    uint64_t any = 0; /* no early exit: the compiler vectorises the OR */
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t v;
        memcpy(&v, ids + i * sizeof v, sizeof v);
        any |= v;
    }
    PyBuffer_Release(&view);
    return PyBool_FromLong(!(any >> 63));
}

/* widen(compact) -> bytes: native int32 ids as native int64 ones (dict keys of a node). */
static PyObject *widen(PyObject *self, PyObject *compact) {
    if (!PyBytes_Check(compact)) {
        PyErr_SetString(PyExc_TypeError, "widen(compact: bytes)");
        return NULL;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(compact) / (Py_ssize_t)sizeof(int32_t);
    const char *slim = PyBytes_AS_STRING(compact);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    if (out == NULL) return NULL;
    char *wide = PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t v;
        memcpy(&v, slim + i * sizeof v, sizeof v);
        int64_t w = v;
        memcpy(wide + i * sizeof w, &w, sizeof w);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"widen", widen, METH_O, "Native int32 ids as native int64 ones."},
    {"narrow", narrow, METH_O, "Native int64 ids as int32 ones, or None if one does not fit."},
    {"shared32", (PyCFunction)(void (*)(void))shared32, METH_FASTCALL,
     "Leading int32 ids of stored equal to the probe's ids from start."},
    {"plain_ids", (PyCFunction)(void (*)(void))plain_ids, METH_FASTCALL,
     "Every item in [start, end) (default: all) is an exact int or bool in [0, 2**63)."},
    {"signs_clear", (PyCFunction)(void (*)(void))signs_clear, METH_FASTCALL,
     "No native int64 id of the buffer from byte start on is negative."},
    {"pack", (PyCFunction)(void (*)(void))pack, METH_FASTCALL,
     "Items [start, end) as native int64 bytes, or None if one is not a plain id."},
    {"pack32", (PyCFunction)(void (*)(void))pack32, METH_FASTCALL,
     "Items [start, end) as native int32 bytes, or None if one is not a plain id below 2**31."},
    {"shared", (PyCFunction)(void (*)(void))shared, METH_FASTCALL,
     "Leading int64 ids of stored equal to seq[start:]."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "radixkv._keys", "Compiled key helpers (see keys.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__keys(void) { return PyModule_Create(&module); }
