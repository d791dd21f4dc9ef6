/*
 * headwater.client._cproduce: the common case of the per-record produce call, in C.
 *
 * Contract (the module docstring below says the same):
 *
 * FastProduce(fallback, acc, tps, sticky, seq, max_request_size, record_future, batch_type)
 * is a callable with the signature of AsyncProducer.produce. Called as f(topic, value) with
 * value an exact bytes object, for a topic whose partitions are known and whose sticky
 * partition is chosen, it appends the record to the open, non-sealed batch of that partition
 * when that append neither seals the batch nor needs buffer memory that is not free, and
 * returns a RecordFuture(batch.outcome, index) -- all under the accumulator's lock, taken and
 * released by calling its acquire/release. Every other case -- other arguments, another value
 * type, an unknown topic, no sticky choice, a record over max_request_size, a closed
 * accumulator, the idempotent producer's ``seq.failed`` set, buffer memory short or writers
 * waiting for it, no open batch, a batch this record would seal, a batch's first record, a
 * timestamp that differs from the batch's uniform one, anything unexpected -- is handed,
 * unchanged and before anything was modified, to ``fallback`` (the Python produce), whose
 * semantics are therefore the only ones. The C path mutates exactly what the Python path's
 * append_record does for the same case: used, the batch's values/timestamps/keys/headers
 * columns, count and nbytes.
 *
 * Cached at construction (fixed for the producer's life): the accumulator's __dict__ (``used``
 * and ``closed`` are read and written through it), its ``queues`` dict, ``_mem_waiters``
 * deque, ``lock`` and ``buffer_memory``; the producer's topic -> partitions dict and the
 * sticky partitioner's topic -> partition dict; the Sequencer's __dict__ (``failed``).
 * ProducerBatch's slots are read at their member offsets (its type is checked exactly on every
 * call); a batch is sealed at its own ``limit`` (the producer's batch_size, or less for a
 * topic whose max.message.bytes is smaller).
 *
 * RecordFutureBase: the two fields of a RecordFuture (``_outcome``, ``_index``), the base of
 * headwater.client.record_future.RecordFuture so that this module creates futures without a
 * Python frame.
 *
 * Why hand-written C: the path is ~60 lines of dict/list operations on CPython objects shared
 * with Python code under one lock; Cython or mypyc would add a build dependency and generate
 * code that goes through the generic attribute protocol this module avoids (slot offsets,
 * a cached instance dict), and cffi/ctypes cannot touch PyObjects cheaply.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <time.h>

#define RECORD_OVERHEAD 12

/* ------------------------------------------------------------------ RecordFutureBase */

typedef struct {
    PyObject_HEAD
    PyObject *outcome;
    Py_ssize_t index;
} RFBase;

static int
rf_traverse(RFBase *self, visitproc visit, void *arg)
{
    Py_VISIT(self->outcome);
    return 0;
}

static int
rf_clear(RFBase *self)
{
    Py_CLEAR(self->outcome);
    return 0;
}

static void
rf_dealloc(RFBase *self)
{
    PyObject_GC_UnTrack(self);
    rf_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
rf_init(RFBase *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"outcome", "index", NULL};
    PyObject *outcome;
    Py_ssize_t index;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "On", kwlist, &outcome, &index))
        return -1;
    Py_INCREF(outcome);
    Py_XSETREF(self->outcome, outcome);
    self->index = index;
    return 0;
}

static PyMemberDef rf_members[] = {
    {"_outcome", T_OBJECT_EX, offsetof(RFBase, outcome), 0, "the batch's BatchOutcome"},
    {"_index", T_PYSSIZET, offsetof(RFBase, index), 0, "the record's index in its batch"},
    {NULL},
};

static PyTypeObject RFBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "headwater.client._cproduce.RecordFutureBase",
    .tp_doc = PyDoc_STR("RecordFutureBase(outcome, index): a record future's two fields"),
    .tp_basicsize = sizeof(RFBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)rf_init,
    .tp_dealloc = (destructor)rf_dealloc,
    .tp_traverse = (traverseproc)rf_traverse,
    .tp_clear = (inquiry)rf_clear,
    .tp_members = rf_members,
};

/* ------------------------------------------------------------------ FastProduce */

enum { S_VALUES, S_KEYS, S_HEADERS, S_TIMESTAMPS, S_TS_UNIFORM, S_COUNT, S_NBYTES, S_LIMIT,
       S_SEALED, S_OUTCOME, S_N };
static const char *slot_names[S_N] = {"values", "keys", "headers", "timestamps", "ts_uniform",
                                      "count", "nbytes", "limit", "sealed", "outcome"};

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fallback;
    PyObject *acc_dict;
    PyObject *queues;
    PyObject *mem_waiters;
    PyObject *lock_acquire;
    PyObject *lock_release;
    PyObject *tps;
    PyObject *sticky;
    PyObject *seq_dict; /* NULL when not idempotent */
    PyTypeObject *rf_type;
    PyTypeObject *batch_type;
    Py_ssize_t off[S_N];
    long long buffer_memory;
    long long max_request_size;
} FastProduce;

static PyObject *str_used, *str_closed, *str_failed, *empty_tuple;

#define SLOT(obj, self, i) (*(PyObject **)((char *)(obj) + (self)->off[i]))

static int
fp_traverse(FastProduce *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fallback);
    Py_VISIT(self->acc_dict);
    Py_VISIT(self->queues);
    Py_VISIT(self->mem_waiters);
    Py_VISIT(self->lock_acquire);
    Py_VISIT(self->lock_release);
    Py_VISIT(self->tps);
    Py_VISIT(self->sticky);
    Py_VISIT(self->seq_dict);
    Py_VISIT(self->rf_type);
    Py_VISIT(self->batch_type);
    return 0;
}

static int
fp_clear(FastProduce *self)
{
    /* calls go to fp_call (which refuses) until __init__ succeeds again: fp_vectorcall reads
     * the fields cleared below (a failed re-init or the GC's clear left it on NULLs) */
    self->vectorcall = NULL;
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->acc_dict);
    Py_CLEAR(self->queues);
    Py_CLEAR(self->mem_waiters);
    Py_CLEAR(self->lock_acquire);
    Py_CLEAR(self->lock_release);
    Py_CLEAR(self->tps);
    Py_CLEAR(self->sticky);
    Py_CLEAR(self->seq_dict);
    Py_CLEAR(self->rf_type);
    Py_CLEAR(self->batch_type);
    return 0;
}

static void
fp_dealloc(FastProduce *self)
{
    PyObject_GC_UnTrack(self);
    fp_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static long long
now_ms(void)
{
    struct timespec t;
    timespec_get(&t, TIME_UTC);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* 1: under the limits and appended; 0: hand over to the fallback (nothing changed); -1: error
 * (an exception is set). Called with the lock held. */
static int
append_locked(FastProduce *self, PyObject *tp, PyObject *value, Py_ssize_t nbytes,
              long long ts, PyObject **outcome, Py_ssize_t *index)
{
    PyObject *closed = PyDict_GetItemWithError(self->acc_dict, str_closed);
    if (closed != Py_None)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *used_obj = PyDict_GetItemWithError(self->acc_dict, str_used);
    if (used_obj == NULL || !PyLong_CheckExact(used_obj))
        return PyErr_Occurred() ? -1 : 0;
    long long used = PyLong_AsLongLong(used_obj);
    if (used == -1 && PyErr_Occurred())
        return -1;
    if (used + nbytes > self->buffer_memory)
        return 0;
    Py_ssize_t waiting = PyObject_Length(self->mem_waiters);
    if (waiting != 0)
        return waiting < 0 ? -1 : 0;
    PyObject *dq = PyDict_GetItemWithError(self->queues, tp);
    if (dq == NULL)
        return PyErr_Occurred() ? -1 : 0;
    Py_ssize_t dlen = PyObject_Length(dq);
    if (dlen <= 0)
        return dlen < 0 ? -1 : 0;
    PyObject *batch = PySequence_GetItem(dq, dlen - 1);
    if (batch == NULL)
        return -1;
    int rc = 0;
    PyObject *count_new = NULL, *nbytes_new = NULL, *used_new = NULL, *ts_obj = NULL;
    if (Py_TYPE(batch) != self->batch_type || SLOT(batch, self, S_SEALED) != Py_False)
        goto done;
    PyObject *values = SLOT(batch, self, S_VALUES);
    PyObject *keys = SLOT(batch, self, S_KEYS);
    PyObject *headers = SLOT(batch, self, S_HEADERS);
    PyObject *timestamps = SLOT(batch, self, S_TIMESTAMPS);
    PyObject *count_obj = SLOT(batch, self, S_COUNT);
    PyObject *nbytes_obj = SLOT(batch, self, S_NBYTES);
    PyObject *limit_obj = SLOT(batch, self, S_LIMIT);
    PyObject *outcome_obj = SLOT(batch, self, S_OUTCOME);
    if (values == NULL || !PyList_CheckExact(values) || keys == NULL || headers == NULL ||
        timestamps == NULL || count_obj == NULL || nbytes_obj == NULL || limit_obj == NULL ||
        outcome_obj == NULL || !PyLong_CheckExact(count_obj) || !PyLong_CheckExact(nbytes_obj) ||
        !PyLong_CheckExact(limit_obj) ||
        (keys != Py_None && !PyList_CheckExact(keys)) ||
        (headers != Py_None && !PyList_CheckExact(headers)) ||
        (timestamps != Py_None && !PyList_CheckExact(timestamps)))
        goto done;
    Py_ssize_t count = PyLong_AsSsize_t(count_obj);
    long long size = PyLong_AsLongLong(nbytes_obj);
    long long limit = PyLong_AsLongLong(limit_obj);
    if (PyErr_Occurred()) {
        rc = -1;
        goto done;
    }
    size += nbytes;
    /* the batch's first record (sets ts_uniform) and a record that seals: the Python path */
    if (count == 0 || size + nbytes > limit)
        goto done;
    if (timestamps == Py_None) {
        PyObject *uniform = SLOT(batch, self, S_TS_UNIFORM);
        if (uniform == NULL || !PyLong_CheckExact(uniform))
            goto done;
        long long u = PyLong_AsLongLong(uniform);
        if (u == -1 && PyErr_Occurred()) {
            rc = -1;
            goto done;
        }
        if (u != ts)
            goto done;
    }
    else if ((ts_obj = PyLong_FromLongLong(ts)) == NULL) {
        rc = -1;
        goto done;
    }
    if ((count_new = PyLong_FromSsize_t(count + 1)) == NULL ||
        (nbytes_new = PyLong_FromLongLong(size)) == NULL ||
        (used_new = PyLong_FromLongLong(used + nbytes)) == NULL) {
        rc = -1;
        goto done;
    }
    /* the mutations, in append_record's order (only an out-of-memory error can stop them) */
    if (PyDict_SetItem(self->acc_dict, str_used, used_new) < 0 ||
        (ts_obj != NULL && PyList_Append(timestamps, ts_obj) < 0) ||
        PyList_Append(values, value) < 0 ||
        (keys != Py_None && PyList_Append(keys, Py_None) < 0) ||
        (headers != Py_None && PyList_Append(headers, empty_tuple) < 0)) {
        rc = -1;
        goto done;
    }
    Py_SETREF(SLOT(batch, self, S_COUNT), count_new);
    count_new = NULL;
    Py_SETREF(SLOT(batch, self, S_NBYTES), nbytes_new);
    nbytes_new = NULL;
    Py_INCREF(outcome_obj);
    *outcome = outcome_obj;
    *index = count;
    rc = 1;
done:
    Py_XDECREF(count_new);
    Py_XDECREF(nbytes_new);
    Py_XDECREF(used_new);
    Py_XDECREF(ts_obj);
    Py_DECREF(batch);
    return rc;
}

static PyObject *
fp_vectorcall(FastProduce *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0))
        goto fallback;
    PyObject *topic = args[0], *value = args[1];
    if (!PyBytes_CheckExact(value) || !PyUnicode_CheckExact(topic))
        goto fallback;
    if (self->seq_dict != NULL) {
        PyObject *failed = PyDict_GetItemWithError(self->seq_dict, str_failed);
        if (failed != Py_None) {
            PyErr_Clear();
            goto fallback;
        }
    }
    PyObject *parts = PyDict_GetItemWithError(self->tps, topic);
    if (parts == NULL || !PyList_CheckExact(parts)) {
        PyErr_Clear();
        goto fallback;
    }
    PyObject *pobj = PyDict_GetItemWithError(self->sticky, topic);
    if (pobj == NULL || !PyLong_CheckExact(pobj)) {
        PyErr_Clear();
        goto fallback;
    }
    Py_ssize_t p = PyLong_AsSsize_t(pobj);
    if (p < 0 || p >= PyList_GET_SIZE(parts)) {
        PyErr_Clear();
        goto fallback;
    }
    Py_ssize_t nbytes = RECORD_OVERHEAD + PyBytes_GET_SIZE(value);
    if (nbytes > self->max_request_size)
        goto fallback;
    PyObject *tp = PyList_GET_ITEM(parts, p);
    Py_INCREF(tp); /* taking the lock may let other threads run */
    long long ts = now_ms();
    PyObject *r = PyObject_CallNoArgs(self->lock_acquire);
    if (r == NULL) {
        Py_DECREF(tp);
        return NULL;
    }
    Py_DECREF(r);
    PyObject *outcome = NULL;
    Py_ssize_t index = 0;
    int rc = append_locked(self, tp, value, nbytes, ts, &outcome, &index);
    Py_DECREF(tp);
    /* release with any exception of append_locked kept aside */
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    r = PyObject_CallNoArgs(self->lock_release);
    if (r == NULL) {
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        Py_XDECREF(outcome);
        return NULL;
    }
    Py_DECREF(r);
    PyErr_Restore(et, ev, tb);
    if (rc < 0)
        return NULL;
    if (rc == 0)
        goto fallback;
    RFBase *fut = (RFBase *)self->rf_type->tp_alloc(self->rf_type, 0);
    if (fut == NULL) {
        Py_DECREF(outcome);
        return NULL;
    }
    fut->outcome = outcome;
    fut->index = index;
    return (PyObject *)fut;
fallback:
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static long long
int_attr(PyObject *obj, const char *name)
{
    PyObject *v = PyObject_GetAttrString(obj, name);
    if (v == NULL)
        return -1;
    long long r = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return r;
}

static int
fp_init(FastProduce *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"fallback", "acc", "tps", "sticky", "seq", "max_request_size",
                             "record_future", "batch_type", NULL};
    PyObject *fallback, *acc, *tps, *sticky, *seq, *rf_type, *batch_type;
    long long max_request_size;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO!O!OLO!O!", kwlist, &fallback, &acc,
                                     &PyDict_Type, &tps, &PyDict_Type, &sticky, &seq,
                                     &max_request_size, &PyType_Type, &rf_type, &PyType_Type,
                                     &batch_type))
        return -1;
    if (!PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "fallback must be callable");
        return -1;
    }
    if (!PyType_IsSubtype((PyTypeObject *)rf_type, &RFBaseType) ||
        ((PyTypeObject *)rf_type)->tp_basicsize != sizeof(RFBase)) {
        PyErr_SetString(PyExc_TypeError,
                        "record_future must subclass RecordFutureBase with no fields of its own");
        return -1;
    }
    fp_clear(self);
    for (int i = 0; i < S_N; i++) {
        PyObject *d = PyObject_GetAttrString(batch_type, slot_names[i]);
        if (d == NULL)
            return -1;
        int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) &&
                 ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
        if (ok)
            self->off[i] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_DECREF(d);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "batch_type.%s is not a __slots__ member",
                         slot_names[i]);
            return -1;
        }
    }
    PyObject *lock;
    if ((self->acc_dict = PyObject_GetAttrString(acc, "__dict__")) == NULL ||
        (self->queues = PyObject_GetAttrString(acc, "queues")) == NULL ||
        (self->mem_waiters = PyObject_GetAttrString(acc, "_mem_waiters")) == NULL ||
        (lock = PyObject_GetAttrString(acc, "lock")) == NULL)
        return -1;
    self->lock_acquire = PyObject_GetAttrString(lock, "acquire");
    self->lock_release = PyObject_GetAttrString(lock, "release");
    Py_DECREF(lock);
    if (self->lock_acquire == NULL || self->lock_release == NULL)
        return -1;
    if (!PyDict_CheckExact(self->acc_dict) || !PyDict_CheckExact(self->queues)) {
        PyErr_SetString(PyExc_TypeError, "acc.__dict__ and acc.queues must be dicts");
        return -1;
    }
    if ((self->buffer_memory = int_attr(acc, "buffer_memory")) == -1 && PyErr_Occurred())
        return -1;
    if (seq != Py_None) {
        self->seq_dict = PyObject_GetAttrString(seq, "__dict__");
        if (self->seq_dict == NULL)
            return -1;
        if (!PyDict_CheckExact(self->seq_dict)) {
            PyErr_SetString(PyExc_TypeError, "seq.__dict__ must be a dict");
            return -1;
        }
    }
    Py_INCREF(fallback);
    self->fallback = fallback;
    Py_INCREF(tps);
    self->tps = tps;
    Py_INCREF(sticky);
    self->sticky = sticky;
    Py_INCREF(rf_type);
    self->rf_type = (PyTypeObject *)rf_type;
    Py_INCREF(batch_type);
    self->batch_type = (PyTypeObject *)batch_type;
    self->max_request_size = max_request_size;
    self->vectorcall = (vectorcallfunc)fp_vectorcall;
    return 0;
}

static PyObject *
fp_call(FastProduce *self, PyObject *args, PyObject *kwargs)
{
    /* the tp_call slot (vectorcall is what CPython uses once __init__ succeeded): fall back
     * to the Python path */
    if (self->vectorcall == NULL || self->fallback == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "FastProduce not initialised");
        return NULL;
    }
    return PyObject_Call(self->fallback, args, kwargs);
}

static PyObject *
fp_get_fallback(FastProduce *self, void *closure)
{
    if (self->fallback == NULL)
        Py_RETURN_NONE;
    Py_INCREF(self->fallback);
    return self->fallback;
}

static PyGetSetDef fp_getset[] = {
    {"fallback", (getter)fp_get_fallback, NULL, "the Python produce this call falls back to",
     NULL},
    {NULL},
};

static PyObject *
fp_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    FastProduce *self = (FastProduce *)type->tp_alloc(type, 0);
    if (self != NULL)
        self->vectorcall = NULL; /* set by __init__; until then tp_call runs (and refuses) */
    return (PyObject *)self;
}

static PyTypeObject FastProduceType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "headwater.client._cproduce.FastProduce",
    .tp_doc = PyDoc_STR("FastProduce(fallback, acc, tps, sticky, seq, max_request_size, "
                        "record_future, batch_type): the produce call's common case in C "
                        "(see the module docstring)"),
    .tp_basicsize = sizeof(FastProduce),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = fp_new,
    .tp_init = (initproc)fp_init,
    .tp_dealloc = (destructor)fp_dealloc,
    .tp_traverse = (traverseproc)fp_traverse,
    .tp_clear = (inquiry)fp_clear,
    .tp_call = (ternaryfunc)fp_call,
    .tp_vectorcall_offset = offsetof(FastProduce, vectorcall),
    .tp_getset = fp_getset,
};

/* ------------------------------------------------------------------ module */

PyDoc_STRVAR(module_doc,
"The common case of the per-record produce call in C (issue 17).\n"
"\n"
"FastProduce(fallback, acc, tps, sticky, seq, max_request_size, record_future, batch_type)\n"
"is called like AsyncProducer.produce. f(topic, value) with value an exact bytes object, a\n"
"topic whose partitions are known and whose sticky partition is chosen, appends the record\n"
"to that partition's open batch under the accumulator's lock when the append neither seals\n"
"the batch nor waits for buffer memory, and returns record_future(batch.outcome, index).\n"
"Every other case is passed unchanged, before anything is modified, to fallback (the\n"
"Python produce), whose semantics are the only ones. Cached at construction and fixed for\n"
"the producer's life: acc's __dict__, queues, _mem_waiters, lock, buffer_memory; the tps\n"
"and sticky dicts; seq's __dict__ (None: not idempotent). A batch is sealed at its own\n"
"limit (the batch's limit slot).\n"
"\n"
"RecordFutureBase(outcome, index): the fields of a RecordFuture (_outcome, _index), its\n"
"base class, so that futures are created here without a Python frame.");

static struct PyModuleDef cproduce_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "headwater.client._cproduce",
    .m_doc = module_doc,
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__cproduce(void)
{
    if (PyType_Ready(&RFBaseType) < 0 || PyType_Ready(&FastProduceType) < 0)
        return NULL;
    str_used = PyUnicode_InternFromString("used");
    str_closed = PyUnicode_InternFromString("closed");
    str_failed = PyUnicode_InternFromString("failed");
    empty_tuple = PyTuple_New(0);
    if (str_used == NULL || str_closed == NULL || str_failed == NULL || empty_tuple == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&cproduce_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&RFBaseType);
    if (PyModule_AddObject(m, "RecordFutureBase", (PyObject *)&RFBaseType) < 0) {
        Py_DECREF(&RFBaseType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&FastProduceType);
    if (PyModule_AddObject(m, "FastProduce", (PyObject *)&FastProduceType) < 0) {
        Py_DECREF(&FastProduceType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
