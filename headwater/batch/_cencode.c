/*
 * headwater.batch._cencode: the per-record loops of encoding a batch, in C.
 *
 * Contract (the module docstring below says the same):
 *
 * crc32c_extend(crc, pieces) -> int
 *     The CRC-32C (Castagnoli) of the concatenation of ``pieces`` (a list or tuple of
 *     bytes-like objects), continued from ``crc`` exactly as ``crc32c.crc32c(piece, crc)``
 *     called piece by piece would be: ``crc32c_extend(0, [b])`` == ``crc32c.crc32c(b)``.
 *     The pieces are pinned (a tuple of the items, a buffer export for each item that is not
 *     exact bytes) and, when they total at least GIL_RELEASE_BYTES, the sum is computed with
 *     the GIL released. TypeError if an item has no contiguous buffer.
 *
 * value_offsets(items) -> bytes | None
 *     The ``len(items) + 1`` little-endian int32 offsets of the items' data laid end to end
 *     (0, len(items[0]), ...), when ``items`` is a list of exact bytes objects whose lengths
 *     total at most 2**31 - 1; None otherwise (nulls, other types, a larger total: the caller's
 *     general path decides).
 *
 * int32_deltas(values, first) -> bytes | None
 *     The little-endian int32 ``v - first`` of every int in the list ``values``, when
 *     ``first`` and every value are exact ints and every difference fits an int32; None
 *     otherwise.
 *
 * Why hand-written C: a producer batch of ~1 KiB values is encoded with one CRC call and one
 * length per value; through the ``crc32c`` package that is one Python call per value
 * (argument parsing, an int object for each result) and ``map(len, ...)`` makes an int object
 * per value, together a sixth of the producer's loop-thread GIL time at 1 KiB (py-spy --gil,
 * docs/benchmarks.md). The ``crc32c`` package has no call over a sequence of buffers, so the
 * checksum itself is here too: SSE4.2's crc32 instruction on x86-64 CPUs that have it (three
 * interleaved streams over blocks of 3 x 256 and 3 x 8192 bytes, combined with Mark Adler's
 * zeros operator, as the package does), slicing-by-8 tables elsewhere;
 * tests/batch/test_cencode.py checks both against the package.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define POLY 0x82F63B78u /* CRC-32C, reflected */
#define GIL_RELEASE_BYTES (64 * 1024)

static uint32_t table[8][256];

static void
make_tables(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = table[0][n];
        for (int k = 1; k < 8; k++) {
            c = table[0][c & 0xff] ^ (c >> 8);
            table[k][n] = c;
        }
    }
}

/* crc: the running register (pre- and post-inverted by the caller) */
static uint32_t
crc_sw(uint32_t crc, const unsigned char *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc; /* little-endian: the low four bytes take the register */
        crc = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
              table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^
              table[2][(w >> 40) & 0xff] ^ table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

/* Appending zeros to a message, as an operator on the register: a 32x32 matrix over GF(2),
 * applied a byte at a time through four 256-entry tables. Three independent crc32 streams
 * over adjacent blocks are combined with it (the instruction's latency is three times its
 * throughput). Mark Adler's method (his public-domain crc32c.c). */
static uint32_t
gf2_times(const uint32_t *mat, uint32_t vec)
{
    uint32_t sum = 0;
    for (; vec; vec >>= 1, mat++)
        if (vec & 1)
            sum ^= *mat;
    return sum;
}

static void
gf2_square(uint32_t *square, const uint32_t *mat)
{
    for (int n = 0; n < 32; n++)
        square[n] = gf2_times(mat, mat[n]);
}

/* zeros[k][b]: the operator for ``len`` zero bytes (a power of two) applied to byte k = b */
static void
make_zeros(uint32_t zeros[4][256], size_t len)
{
    uint32_t even[32], odd[32];
    odd[0] = POLY; /* one zero bit */
    for (int n = 1; n < 32; n++)
        odd[n] = 1u << (n - 1);
    gf2_square(even, odd); /* two */
    gf2_square(odd, even); /* four */
    const uint32_t *op = odd;
    for (;;) { /* eight bits, then doubling until len bytes */
        gf2_square(even, odd);
        op = even;
        len >>= 1;
        if (len == 0)
            break;
        gf2_square(odd, even);
        op = odd;
        len >>= 1;
        if (len == 0)
            break;
    }
    for (uint32_t n = 0; n < 256; n++) {
        zeros[0][n] = gf2_times(op, n);
        zeros[1][n] = gf2_times(op, n << 8);
        zeros[2][n] = gf2_times(op, n << 16);
        zeros[3][n] = gf2_times(op, n << 24);
    }
}

static inline uint32_t
shift(uint32_t zeros[4][256], uint32_t crc)
{
    return zeros[0][crc & 0xff] ^ zeros[1][(crc >> 8) & 0xff] ^ zeros[2][(crc >> 16) & 0xff] ^
           zeros[3][crc >> 24];
}

#define LONG_BLOCK 8192
#define SHORT_BLOCK 256
static uint32_t zeros_long[4][256], zeros_short[4][256];

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_HW 1
/* three blocks of ``block`` bytes at p, as three streams, folded into crc */
__attribute__((target("sse4.2"))) static inline uint64_t
three_streams(uint64_t crc, const unsigned char *p, size_t block, uint32_t zeros[4][256])
{
    uint64_t c1 = 0, c2 = 0, w0, w1, w2;
    for (const unsigned char *end = p + block; p < end; p += 8) {
        memcpy(&w0, p, 8);
        memcpy(&w1, p + block, 8);
        memcpy(&w2, p + 2 * block, 8);
        crc = __builtin_ia32_crc32di(crc, w0);
        c1 = __builtin_ia32_crc32di(c1, w1);
        c2 = __builtin_ia32_crc32di(c2, w2);
    }
    crc = shift(zeros, (uint32_t)crc) ^ c1;
    return shift(zeros, (uint32_t)crc) ^ c2;
}

__attribute__((target("sse4.2"))) static uint32_t
crc_hw(uint32_t crc, const unsigned char *p, size_t n)
{
    uint64_t c = crc;
    while (n && ((uintptr_t)p & 7)) {
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
        n--;
    }
    for (; n >= 3 * LONG_BLOCK; p += 3 * LONG_BLOCK, n -= 3 * LONG_BLOCK)
        c = three_streams(c, p, LONG_BLOCK, zeros_long);
    for (; n >= 3 * SHORT_BLOCK; p += 3 * SHORT_BLOCK, n -= 3 * SHORT_BLOCK)
        c = three_streams(c, p, SHORT_BLOCK, zeros_short);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
        p += 8;
        n -= 8;
    }
    while (n--)
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    return (uint32_t)c;
}
#else
#define HAVE_HW 0
#endif

typedef uint32_t (*crc_fn)(uint32_t, const unsigned char *, size_t);
static crc_fn crc_update = crc_sw;

typedef struct {
    const unsigned char *p;
    Py_ssize_t n;
} span;

static PyObject *
crc32c_extend(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "crc32c_extend(crc, pieces) takes 2 arguments");
        return NULL;
    }
    unsigned long start = PyLong_AsUnsignedLong(args[0]);
    if (start == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    if (start > 0xFFFFFFFFul) {
        PyErr_SetString(PyExc_ValueError, "crc must be a 32-bit unsigned value");
        return NULL;
    }
    if (!PyList_Check(args[1]) && !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "pieces must be a list or a tuple");
        return NULL;
    }
    /* a tuple holds every item for the duration, whatever happens to a list meanwhile */
    PyObject *items = PySequence_Tuple(args[1]);
    if (items == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    span *spans = PyMem_Malloc((n ? n : 1) * sizeof(span));
    Py_buffer *views = NULL;
    Py_ssize_t nviews = 0, total = 0;
    PyObject *result = NULL;
    if (spans == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PyTuple_GET_ITEM(items, i);
        if (PyBytes_CheckExact(it)) {
            spans[i].p = (const unsigned char *)PyBytes_AS_STRING(it);
            spans[i].n = PyBytes_GET_SIZE(it);
        }
        else {
            if (views == NULL && (views = PyMem_Malloc(n * sizeof(Py_buffer))) == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            if (PyObject_GetBuffer(it, &views[nviews], PyBUF_SIMPLE) < 0) {
                PyErr_Format(PyExc_TypeError,
                             "pieces must be bytes-like, got %.200s at index %zd",
                             Py_TYPE(it)->tp_name, i);
                goto done;
            }
            spans[i].p = views[nviews].buf;
            spans[i].n = views[nviews].len;
            nviews++;
        }
        total += spans[i].n;
    }
    uint32_t crc = ~(uint32_t)start;
    crc_fn update = crc_update;
    if (total >= GIL_RELEASE_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++)
            crc = update(crc, spans[i].p, (size_t)spans[i].n);
        Py_END_ALLOW_THREADS
    }
    else {
        for (Py_ssize_t i = 0; i < n; i++)
            crc = update(crc, spans[i].p, (size_t)spans[i].n);
    }
    result = PyLong_FromUnsignedLong(~crc);
done:
    for (Py_ssize_t i = 0; i < nviews; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    PyMem_Free(spans);
    Py_DECREF(items);
    return result;
}

static void
put_i32le(unsigned char *p, int32_t v)
{
    uint32_t u = (uint32_t)v;
    p[0] = u & 0xff;
    p[1] = (u >> 8) & 0xff;
    p[2] = (u >> 16) & 0xff;
    p[3] = u >> 24;
}

static PyObject *
value_offsets(PyObject *module, PyObject *items)
{
    if (!PyList_CheckExact(items))
        Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(items);
    PyObject *out = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    if (out == NULL)
        return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    int64_t at = 0;
    put_i32le(p, 0);
    /* the list cannot change under us: nothing here lets another thread run */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PyList_GET_ITEM(items, i);
        if (!PyBytes_CheckExact(it))
            goto general;
        at += PyBytes_GET_SIZE(it);
        if (at > INT32_MAX)
            goto general;
        put_i32le(p + 4 * (i + 1), (int32_t)at);
    }
    return out;
general:
    Py_DECREF(out);
    Py_RETURN_NONE;
}

static PyObject *
int32_deltas(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "int32_deltas(values, first) takes 2 arguments");
        return NULL;
    }
    PyObject *values = args[0];
    if (!PyList_CheckExact(values) || !PyLong_CheckExact(args[1]))
        Py_RETURN_NONE;
    int first_overflow = 0;
    long long first = PyLong_AsLongLongAndOverflow(args[1], &first_overflow);
    if (first_overflow || (first == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    /* first and every value within ±2**62 (any ms timestamp): no difference can overflow */
    if (first > (1LL << 62) || first < -(1LL << 62))
        Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(values);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * 4);
    if (out == NULL)
        return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PyList_GET_ITEM(values, i);
        if (!PyLong_CheckExact(it))
            goto general;
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(it, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            goto general;
        }
        if (v > (1LL << 62) || v < -(1LL << 62))
            goto general;
        long long d = v - first;
        if (d > INT32_MAX || d < INT32_MIN)
            goto general;
        put_i32le(p + 4 * i, (int32_t)d);
    }
    return out;
general:
    Py_DECREF(out);
    Py_RETURN_NONE;
}

static PyObject *
hardware(PyObject *module, PyObject *unused)
{
    return PyBool_FromLong(crc_update != crc_sw);
}

static PyObject *
use_hardware(PyObject *module, PyObject *flag)
{
    int on = PyObject_IsTrue(flag);
    if (on < 0)
        return NULL;
    crc_update = crc_sw;
#if HAVE_HW
    if (on && __builtin_cpu_supports("sse4.2"))
        crc_update = crc_hw;
#endif
    return PyBool_FromLong(crc_update != crc_sw);
}

static PyMethodDef methods[] = {
    {"crc32c_extend", (PyCFunction)(void (*)(void))crc32c_extend, METH_FASTCALL,
     "crc32c_extend(crc, pieces) -> int: CRC-32C over the pieces in order, from crc."},
    {"value_offsets", value_offsets, METH_O,
     "value_offsets(items) -> bytes | None: int32 LE offsets of a list of bytes."},
    {"int32_deltas", (PyCFunction)(void (*)(void))int32_deltas, METH_FASTCALL,
     "int32_deltas(values, first) -> bytes | None: int32 LE value - first of a list of ints."},
    {"hardware", hardware, METH_NOARGS,
     "hardware() -> bool: whether the crc32 instruction is in use."},
    {"use_hardware", use_hardware, METH_O,
     "use_hardware(flag) -> bool: choose the instruction (when the CPU has it) or the tables "
     "(for tests); returns hardware()."},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(module_doc,
"The per-record loops of encoding a batch, in C (headwater/batch/_cencode.c).\n"
"\n"
"crc32c_extend(crc, pieces): the CRC-32C of the pieces laid end to end, continued from crc\n"
"as crc32c.crc32c(piece, crc) piece by piece would be; the GIL is released for 64 KiB and\n"
"more. value_offsets(items): the int32 LE offsets (n + 1) of a list of exact bytes, or None\n"
"(nulls, other types, over 2 GiB). int32_deltas(values, first): int32 LE value - first of a\n"
"list of exact ints, or None if one does not fit. hardware() / use_hardware(flag): the\n"
"SSE4.2 crc32 instruction or slicing-by-8 tables.");

static struct PyModuleDef cencode_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "headwater.batch._cencode",
    .m_doc = module_doc,
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__cencode(void)
{
    make_tables();
    make_zeros(zeros_long, LONG_BLOCK);
    make_zeros(zeros_short, SHORT_BLOCK);
#if HAVE_HW
    if (__builtin_cpu_supports("sse4.2"))
        crc_update = crc_hw;
#endif
    return PyModule_Create(&cencode_module);
}
