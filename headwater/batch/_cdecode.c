/*
 * headwater.batch._cdecode: the per-record loops of turning a decoded batch into Python
 * objects, in C.
 *
 * Contract (the module docstring below says the same):
 *
 * binary_list(validity, offsets, data, start, stop) -> list[bytes | None]
 *     Entries ``start..stop`` of an Arrow binary column as exact bytes objects (None where the
 *     validity bitmap has a 0 bit). ``validity``: a bytes-like Arrow bitmap (LSB first,
 *     1 = present) or None (every entry present); ``offsets``: a contiguous buffer of
 *     little-endian int32, at least ``stop + 1`` of them; ``data``: a contiguous buffer.
 *     ValueError, and no list, if ``0 <= start <= stop`` does not hold, a buffer is too short,
 *     or an entry's offsets are not ``0 <= offsets[i] <= offsets[i + 1] <= len(data)``.
 *
 * rows(cls, prefix, columns) -> list[cls]
 *     ``[cls(*prefix, *(c[i] for c in columns)) for i in range(n)]`` built as tuple.__new__
 *     would build them, without a Python call per row: ``cls`` a subclass of tuple whose
 *     instances are plain tuples (a NamedTuple; no __init__ is run), ``prefix`` a tuple,
 *     ``columns`` a tuple of lists of one length n. TypeError otherwise.
 *
 * Why hand-written C: a consumer building ConsumerRecord for 1 KiB values spent 0.85 us per
 * record in FetchedBatch.records() (pyarrow's to_pylist makes a scalar object per value, and
 * zip + tuple.__new__ make an intermediate tuple and a call per record), the largest share of
 * the per-record consumer's CPU (py-spy, docs/benchmarks.md session 36). Neither pyarrow nor
 * numpy has a call that turns a binary column into bytes objects without the scalar step.
 * The Python paths (pyarrow, map over zip) stay as the fallback and the reference:
 * tests/batch/test_cdecode.py checks one against the other.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static int32_t
get_i32le(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

static PyObject *
binary_list(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "binary_list(validity, offsets, data, start, stop) takes 5 arguments");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[3]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t stop = PyLong_AsSsize_t(args[4]);
    if (stop == -1 && PyErr_Occurred())
        return NULL;
    if (start < 0 || stop < start) {
        PyErr_Format(PyExc_ValueError, "entries %zd..%zd: not 0 <= start <= stop", start, stop);
        return NULL;
    }
    Py_buffer valid = {0}, offs = {0}, data = {0};
    PyObject *out = NULL;
    int have_valid = args[0] != Py_None;
    if (have_valid && PyObject_GetBuffer(args[0], &valid, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[1], &offs, PyBUF_SIMPLE) < 0)
        goto done;
    if (PyObject_GetBuffer(args[2], &data, PyBUF_SIMPLE) < 0)
        goto done;
    if (offs.len / 4 < stop + 1) {
        PyErr_Format(PyExc_ValueError, "%zd offsets for entries up to %zd", offs.len / 4, stop);
        goto done;
    }
    if (have_valid && valid.len < (stop + 7) / 8) {
        PyErr_Format(PyExc_ValueError, "a %zd-byte validity bitmap for %zd entries", valid.len,
                     stop);
        goto done;
    }
    const unsigned char *o = (const unsigned char *)offs.buf;
    const unsigned char *v = (const unsigned char *)valid.buf;
    const char *d = (const char *)data.buf;
    out = PyList_New(stop - start);
    if (out == NULL)
        goto done;
    for (Py_ssize_t i = start; i < stop; i++) {
        PyObject *item;
        if (have_valid && !(v[i >> 3] >> (i & 7) & 1)) {
            item = Py_NewRef(Py_None);
        }
        else {
            int32_t lo = get_i32le(o + 4 * i), hi = get_i32le(o + 4 * (i + 1));
            if (lo < 0 || hi < lo || hi > data.len) {
                PyErr_Format(PyExc_ValueError, "entry %zd: offsets %d..%d outside 0..%zd", i, lo,
                             hi, data.len);
                Py_CLEAR(out);
                goto done;
            }
            item = PyBytes_FromStringAndSize(d + lo, hi - lo);
            if (item == NULL) {
                Py_CLEAR(out);
                goto done;
            }
        }
        PyList_SET_ITEM(out, i - start, item);
    }
done:
    if (have_valid && valid.obj != NULL)
        PyBuffer_Release(&valid);
    if (offs.obj != NULL)
        PyBuffer_Release(&offs);
    if (data.obj != NULL)
        PyBuffer_Release(&data);
    return out;
}

static PyObject *
rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "rows(cls, prefix, columns) takes 3 arguments");
        return NULL;
    }
    PyObject *cls = args[0], *prefix = args[1], *columns = args[2];
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "rows: cls must be a subclass of tuple");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    if (type->tp_basicsize != PyTuple_Type.tp_basicsize) {
        /* instances with more than a tuple's fields (__dict__, slots): not ours to build */
        PyErr_SetString(PyExc_TypeError, "rows: cls adds fields to tuple");
        return NULL;
    }
    if (!PyTuple_CheckExact(prefix) || !PyTuple_CheckExact(columns)) {
        PyErr_SetString(PyExc_TypeError, "rows: prefix and columns must be tuples");
        return NULL;
    }
    Py_ssize_t np = PyTuple_GET_SIZE(prefix), nc = PyTuple_GET_SIZE(columns);
    Py_ssize_t n = 0;
    for (Py_ssize_t c = 0; c < nc; c++) {
        PyObject *col = PyTuple_GET_ITEM(columns, c);
        if (!PyList_CheckExact(col)) {
            PyErr_SetString(PyExc_TypeError, "rows: every column must be a list");
            return NULL;
        }
        if (c == 0)
            n = PyList_GET_SIZE(col);
        else if (PyList_GET_SIZE(col) != n) {
            PyErr_Format(PyExc_TypeError, "rows: column %zd has %zd entries, column 0 %zd", c,
                         PyList_GET_SIZE(col), n);
            return NULL;
        }
    }
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = type->tp_alloc(type, np + nc);
        if (row == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        /* an allocation may run the garbage collector, and a finalizer it calls may change a
         * column: look again before reading the i-th items (nothing else here runs Python) */
        for (Py_ssize_t c = 0; c < nc; c++) {
            if (PyList_GET_SIZE(PyTuple_GET_ITEM(columns, c)) != n) {
                PyErr_SetString(PyExc_RuntimeError, "rows: a column changed size");
                Py_DECREF(row);
                Py_DECREF(out);
                return NULL;
            }
        }
        for (Py_ssize_t k = 0; k < np; k++)
            PyTuple_SET_ITEM(row, k, Py_NewRef(PyTuple_GET_ITEM(prefix, k)));
        for (Py_ssize_t c = 0; c < nc; c++)
            PyTuple_SET_ITEM(row, np + c,
                             Py_NewRef(PyList_GET_ITEM(PyTuple_GET_ITEM(columns, c), i)));
        PyList_SET_ITEM(out, i, row);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"binary_list", (PyCFunction)(void (*)(void))binary_list, METH_FASTCALL,
     "binary_list(validity, offsets, data, start, stop) -> list: an Arrow binary column's "
     "entries as bytes (None for nulls)."},
    {"rows", (PyCFunction)(void (*)(void))rows, METH_FASTCALL,
     "rows(cls, prefix, columns) -> list: cls(*prefix, *row) for each row of the columns."},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(module_doc,
"The per-record loops of turning a decoded batch into Python objects, in C\n"
"(headwater/batch/_cdecode.c).\n"
"\n"
"binary_list(validity, offsets, data, start, stop): entries start..stop of an Arrow binary\n"
"column (validity bitmap or None, int32 LE offsets, data) as bytes, None for nulls;\n"
"ValueError for offsets outside the data. rows(cls, prefix, columns): a list of cls (a tuple\n"
"subclass such as a NamedTuple) holding prefix's items then the columns' i-th items.");

static struct PyModuleDef cdecode_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "headwater.batch._cdecode",
    .m_doc = module_doc,
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__cdecode(void)
{
    return PyModule_Create(&cdecode_module);
}
