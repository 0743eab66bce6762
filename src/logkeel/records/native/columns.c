/* logkeel.records._columns: decodes the records of v2 batches into Arrow-layout column buffers.
 *
 * The compiled twin of logkeel/records/columns.py's PyColumnBuilder, which is the reference: the
 * same records are accepted, with the same values, and everything the pure-Python decoder
 * (records/record.py) rejects is rejected here too. The caller words the error: on a rejection it
 * decodes the batch again in Python, which raises with the message readers show.
 *
 * Columns (all little-endian, as Arrow lays them out): per record its int64 offset and epoch-ms
 * timestamp, the int32 index of the batch it came from, and key and value as Arrow binary
 * columns (int32 offsets, data, validity bitmap). With headers, an Arrow list<struct<key string,
 * value binary>> in pieces: the list offsets and validity (a record without headers is null),
 * then the header keys (offsets, data) and values (offsets, data, validity).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MIN_RECORD_SIZE 7

static PyObject *DecodeError;

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra)
        cap *= 2;
    char *p = PyMem_Realloc(b->p, (size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0)
        return -1;
    memcpy(b->p + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

static inline int put_i64(Buf *b, int64_t v) { return buf_put(b, &v, 8); }
static inline int put_i32(Buf *b, int32_t v) { return buf_put(b, &v, 4); }

/* Bit i of a validity bitmap; the bitmap's bytes beyond i may hold stale bits after a rollback,
 * so the bit is written either way. */
static inline int bit_put(Buf *b, Py_ssize_t i, int valid) {
    Py_ssize_t byte = i >> 3;
    if (byte >= b->len) {
        if (buf_reserve(b, 1) < 0)
            return -1;
        b->p[b->len++] = 0;
    }
    if (valid)
        b->p[byte] |= (char)(1 << (i & 7));
    else
        b->p[byte] &= (char)~(1 << (i & 7));
    return 0;
}

/* An Arrow binary column being built: offsets start with 0. */
typedef struct {
    Buf offsets, data, valid;
    Py_ssize_t n, nulls;
} BinCol;

typedef struct {
    Py_ssize_t offsets, data, valid, n, nulls;
} BinMark;

static int bincol_init(BinCol *c) {
    memset(c, 0, sizeof(*c));
    return put_i32(&c->offsets, 0);
}

static void bincol_free(BinCol *c) {
    PyMem_Free(c->offsets.p);
    PyMem_Free(c->data.p);
    PyMem_Free(c->valid.p);
}

static BinMark bincol_mark(const BinCol *c) {
    BinMark m = {c->offsets.len, c->data.len, c->valid.len, c->n, c->nulls};
    return m;
}

static void bincol_rollback(BinCol *c, BinMark m) {
    c->offsets.len = m.offsets;
    c->data.len = m.data;
    c->valid.len = m.valid;
    c->n = m.n;
    c->nulls = m.nulls;
}

static int bincol_add(BinCol *c, const uint8_t *src, Py_ssize_t n) {
    /* n < 0: null */
    if (n > 0) {
        if (c->data.len + n > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "one chunk of records holds more than 2 GiB");
            return -1;
        }
        if (buf_put(&c->data, src, n) < 0)
            return -1;
    }
    if (bit_put(&c->valid, c->n, n >= 0) < 0 || put_i32(&c->offsets, (int32_t)c->data.len) < 0)
        return -1;
    if (n < 0)
        c->nulls++;
    c->n++;
    return 0;
}

/* Arrow ignores the bits past the last row, but rolled-back rows may have left some set: cleared,
 * so that both decoders give the same bytes. */
static void bitmap_trim(Buf *b, Py_ssize_t n) {
    if (n & 7)
        b->p[n >> 3] &= (char)((1 << (n & 7)) - 1);
}

static PyObject *bincol_take(BinCol *c) {
    bitmap_trim(&c->valid, c->n);
    PyObject *t = Py_BuildValue("(y#y#y#n)", c->offsets.p, c->offsets.len, c->data.p ? c->data.p : "", c->data.len,
                                c->valid.p ? c->valid.p : "", c->valid.len, c->nulls);
    c->offsets.len = 4; /* keeps the leading 0 */
    c->data.len = c->valid.len = 0;
    c->n = c->nulls = 0;
    return t;
}

typedef struct {
    PyObject_HEAD
    int with_headers;
    Py_ssize_t rows;
    int32_t batches;
    Buf batch_index, offsets, timestamps;
    BinCol keys, values;
    /* headers */
    Buf list_offsets, list_valid;
    Py_ssize_t list_nulls;
    BinCol hkeys, hvalues;
} Builder;

/* -- decoding, as records/record.py does it -------------------------------------------------- */

typedef struct {
    const uint8_t *d;
    Py_ssize_t p, end;
} Cursor;

/* Zigzag varint of at most max_bytes bytes whose raw value fits in `bits` bits (32 or 64). */
static inline int read_varint(Cursor *c, int max_bytes, int bits, int64_t *out) {
    if (c->p >= c->end)
        return -1;
    uint8_t b = c->d[c->p++];
    uint64_t z;
    if (b < 0x80) {
        z = b;
    } else {
        z = b & 0x7F;
        int shift = 7, nbytes = 1;
        for (;;) {
            if (c->p >= c->end)
                return -1;
            b = c->d[c->p++];
            nbytes++;
            uint64_t part = b & 0x7F;
            if (shift == 63 && part > 1)
                return -1; /* bits beyond 64 */
            z |= part << shift;
            if (b < 0x80)
                break;
            shift += 7;
            if (nbytes >= max_bytes)
                return -1;
        }
        if (bits == 32 && (z >> 32))
            return -1;
    }
    *out = (int64_t)((z >> 1) ^ (~(z & 1) + 1));
    return 0;
}

/* Strict UTF-8, as Python's codec: no overlong forms, no surrogates, nothing above U+10FFFF. */
static int valid_utf8(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int len;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (i + len > n)
            return 0;
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += len;
    }
    return 1;
}

/* 0: decoded; -1: a Python error is set (memory); -2: the batch does not decode. */
/* `self` NULL: check only (scan_records), nothing stored; the record's timestamp and whether
 * its key is null are reported through `ts_out` and `null_key_out` either way. */
static int decode_one(Builder *self, Cursor *c, int64_t base_offset, int64_t base_ts,
                      Py_ssize_t last_delta, int has_append_time, int64_t append_time,
                      int64_t *prev_delta, int64_t *ts_out, int *null_key_out) {
    int64_t length, ts_delta, offset_delta, n;
    if (read_varint(c, 5, 32, &length) < 0)
        return -2;
    if (length < MIN_RECORD_SIZE - 1 || length > c->end - c->p)
        return -2;
    Py_ssize_t rec_end = c->p + (Py_ssize_t)length;
    c->p++; /* attributes */
    if (read_varint(c, 10, 64, &ts_delta) < 0 || read_varint(c, 5, 32, &offset_delta) < 0)
        return -2;
    if (offset_delta <= *prev_delta || offset_delta > last_delta)
        return -2;
    *prev_delta = offset_delta;

    const uint8_t *key = NULL, *value = NULL;
    int64_t key_len, value_len;
    if (read_varint(c, 5, 32, &key_len) < 0)
        return -2;
    if (key_len >= 0) {
        if (c->p + key_len > rec_end)
            return -2;
        key = c->d + c->p;
        c->p += (Py_ssize_t)key_len;
    }
    if (read_varint(c, 5, 32, &value_len) < 0)
        return -2;
    if (value_len >= 0) {
        if (c->p + value_len > rec_end)
            return -2;
        value = c->d + c->p;
        c->p += (Py_ssize_t)value_len;
    }

    int64_t header_count = 0;
    if (c->p >= c->end)
        return -2;
    if (c->d[c->p] == 0) {
        c->p++;
    } else {
        if (read_varint(c, 5, 32, &header_count) < 0)
            return -2;
        if (header_count < 0 || header_count > rec_end - c->p)
            return -2;
        for (int64_t h = 0; h < header_count; h++) {
            if (read_varint(c, 5, 32, &n) < 0)
                return -2;
            if (n < 0 || c->p + n > rec_end)
                return -2;
            const uint8_t *hkey = c->d + c->p;
            if (!valid_utf8(hkey, (Py_ssize_t)n))
                return -2;
            c->p += (Py_ssize_t)n;
            int64_t hkey_len = n;
            if (read_varint(c, 5, 32, &n) < 0)
                return -2;
            const uint8_t *hvalue = NULL;
            if (n >= 0) {
                if (c->p + n > rec_end)
                    return -2;
                hvalue = c->d + c->p;
                c->p += (Py_ssize_t)n;
            } else {
                n = -1;
            }
            if (self && self->with_headers && (bincol_add(&self->hkeys, hkey, (Py_ssize_t)hkey_len) < 0 ||
                                       bincol_add(&self->hvalues, hvalue, (Py_ssize_t)n) < 0))
                return -1;
        }
    }
    if (c->p != rec_end)
        return -2;

    int64_t offset, ts;
    if (__builtin_add_overflow(base_offset, offset_delta, &offset))
        return -2;
    if (has_append_time)
        ts = append_time;
    else if (__builtin_add_overflow(base_ts, ts_delta, &ts))
        return -2;
    *ts_out = ts;
    *null_key_out = key == NULL;
    if (self == NULL)
        return 0;

    if (put_i64(&self->offsets, offset) < 0 || put_i64(&self->timestamps, ts) < 0 ||
        put_i32(&self->batch_index, self->batches) < 0 ||
        bincol_add(&self->keys, key, key ? (Py_ssize_t)key_len : -1) < 0 ||
        bincol_add(&self->values, value, value ? (Py_ssize_t)value_len : -1) < 0)
        return -1;
    if (self->with_headers) {
        int has = header_count > 0;
        if (bit_put(&self->list_valid, self->rows, has) < 0 ||
            put_i32(&self->list_offsets, (int32_t)self->hkeys.n) < 0)
            return -1;
        if (!has)
            self->list_nulls++;
    }
    self->rows++;
    return 0;
}

static PyObject *Builder_add(Builder *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, end, count, last_delta;
    long long base_offset, base_ts;
    PyObject *append_obj;
    if (!PyArg_ParseTuple(args, "y*nnnLLnO", &view, &start, &end, &count, &base_offset, &base_ts,
                          &last_delta, &append_obj))
        return NULL;
    int has_append_time = append_obj != Py_None;
    int64_t append_time = 0;
    if (has_append_time) {
        append_time = PyLong_AsLongLong(append_obj);
        if (append_time == -1 && PyErr_Occurred()) {
            PyBuffer_Release(&view);
            return NULL;
        }
    }
    if (start < 0 || end > view.len || start > end) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "start/end outside the buffer");
        return NULL;
    }
    /* What to go back to if the batch does not decode: a batch is added whole or not at all. */
    Py_ssize_t rows = self->rows, n_index = self->batch_index.len, n_off = self->offsets.len,
               n_ts = self->timestamps.len, n_lo = self->list_offsets.len,
               n_lv = self->list_valid.len, list_nulls = self->list_nulls;
    BinMark mk = bincol_mark(&self->keys), mv = bincol_mark(&self->values),
            mhk = bincol_mark(&self->hkeys), mhv = bincol_mark(&self->hvalues);

    Cursor c = {(const uint8_t *)view.buf, start, end};
    int rc = 0;
    if (count * MIN_RECORD_SIZE > end - start) {
        rc = -2;
    } else {
        int64_t prev_delta = -1, ts;
        int null_key;
        for (Py_ssize_t i = 0; i < count && rc == 0; i++)
            rc = decode_one(self, &c, base_offset, base_ts, last_delta, has_append_time,
                            append_time, &prev_delta, &ts, &null_key);
        if (rc == 0 && c.p != end)
            rc = -2;
    }
    PyBuffer_Release(&view);
    if (rc < 0) {
        self->rows = rows;
        self->batch_index.len = n_index;
        self->offsets.len = n_off;
        self->timestamps.len = n_ts;
        self->list_offsets.len = n_lo;
        self->list_valid.len = n_lv;
        self->list_nulls = list_nulls;
        bincol_rollback(&self->keys, mk);
        bincol_rollback(&self->values, mv);
        bincol_rollback(&self->hkeys, mhk);
        bincol_rollback(&self->hvalues, mhv);
        if (rc == -2)
            PyErr_SetString(DecodeError, "records do not decode");
        return NULL;
    }
    self->batches++;
    return PyLong_FromSsize_t(self->rows - rows);
}

static PyObject *take_buf(Buf *b) {
    PyObject *o = PyBytes_FromStringAndSize(b->p ? b->p : "", b->len);
    b->len = 0;
    return o;
}

static PyObject *Builder_take(Builder *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *headers = Py_None, *result = NULL;
    Py_INCREF(Py_None);
    if (self->with_headers) {
        Py_DECREF(Py_None);
        PyObject *lo = PyBytes_FromStringAndSize(self->list_offsets.p, self->list_offsets.len);
        bitmap_trim(&self->list_valid, self->rows);
        PyObject *lv = take_buf(&self->list_valid);
        PyObject *hk = bincol_take(&self->hkeys), *hv = bincol_take(&self->hvalues);
        headers = (lo && lv && hk && hv) ? Py_BuildValue("(OOnOO)", lo, lv, self->list_nulls, hk, hv)
                                         : NULL;
        Py_XDECREF(lo);
        Py_XDECREF(lv);
        Py_XDECREF(hk);
        Py_XDECREF(hv);
        self->list_offsets.len = 4;
        self->list_nulls = 0;
        if (headers == NULL)
            return NULL;
    }
    PyObject *bi = take_buf(&self->batch_index), *off = take_buf(&self->offsets),
             *ts = take_buf(&self->timestamps), *k = bincol_take(&self->keys),
             *v = bincol_take(&self->values);
    if (bi && off && ts && k && v)
        result = Py_BuildValue("(nOOOOOO)", self->rows, bi, off, ts, k, v, headers);
    Py_XDECREF(bi);
    Py_XDECREF(off);
    Py_XDECREF(ts);
    Py_XDECREF(k);
    Py_XDECREF(v);
    Py_DECREF(headers);
    self->rows = 0;
    self->batches = 0;
    return result;
}

static PyObject *Builder_get_rows(Builder *self, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(self->rows);
}

static PyObject *Builder_get_nbytes(Builder *self, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(self->keys.data.len + self->values.data.len + self->hkeys.data.len +
                              self->hvalues.data.len);
}

static int Builder_init(Builder *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"with_headers", NULL};
    int with_headers = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p", kwlist, &with_headers))
        return -1;
    self->with_headers = with_headers;
    if (bincol_init(&self->keys) < 0 || bincol_init(&self->values) < 0 ||
        bincol_init(&self->hkeys) < 0 || bincol_init(&self->hvalues) < 0 ||
        put_i32(&self->list_offsets, 0) < 0)
        return -1;
    return 0;
}

static void Builder_dealloc(Builder *self) {
    PyMem_Free(self->batch_index.p);
    PyMem_Free(self->offsets.p);
    PyMem_Free(self->timestamps.p);
    PyMem_Free(self->list_offsets.p);
    PyMem_Free(self->list_valid.p);
    bincol_free(&self->keys);
    bincol_free(&self->values);
    bincol_free(&self->hkeys);
    bincol_free(&self->hvalues);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Builder_methods[] = {
    {"add", (PyCFunction)Builder_add, METH_VARARGS,
     "add(buf, start, end, count, base_offset, base_timestamp, last_offset_delta, append_time)"
     " -> rows added; raises DecodeError (nothing added) when the records do not decode"},
    {"take", (PyCFunction)Builder_take, METH_NOARGS, "the columns so far, and a fresh start"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Builder_getset[] = {
    {"rows", (getter)Builder_get_rows, NULL, "records added since the last take", NULL},
    {"nbytes", (getter)Builder_get_nbytes, NULL, "key, value and header bytes held", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject BuilderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "logkeel.records._columns.ColumnBuilder",
    .tp_basicsize = sizeof(Builder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Builder_init,
    .tp_dealloc = (destructor)Builder_dealloc,
    .tp_methods = Builder_methods,
    .tp_getset = Builder_getset,
};

/* scan_records(data, start, end, count, base_offset, base_ts, last_delta, append_time or None)
 * -> (min timestamp, max timestamp, null keys, index of the first null key or -1): the checks
 * of Builder.add without storing anything (a produced batch's validation). */
static PyObject *scan_records(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, end, count, last_delta;
    long long base_offset, base_ts;
    PyObject *append_obj;
    if (!PyArg_ParseTuple(args, "y*nnnLLnO", &view, &start, &end, &count, &base_offset, &base_ts,
                          &last_delta, &append_obj))
        return NULL;
    int has_append_time = append_obj != Py_None;
    int64_t append_time = 0;
    if (has_append_time) {
        append_time = PyLong_AsLongLong(append_obj);
        if (append_time == -1 && PyErr_Occurred()) {
            PyBuffer_Release(&view);
            return NULL;
        }
    }
    if (start < 0 || end > view.len || start > end) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "start/end outside the buffer");
        return NULL;
    }
    Cursor c = {(const uint8_t *)view.buf, start, end};
    int rc = 0;
    int64_t min_ts = INT64_MAX, max_ts = INT64_MIN, prev_delta = -1, ts;
    Py_ssize_t null_keys = 0, first_null = -1;
    int null_key;
    if (count * MIN_RECORD_SIZE > end - start) {
        rc = -2;
    } else {
        for (Py_ssize_t i = 0; i < count && rc == 0; i++) {
            rc = decode_one(NULL, &c, base_offset, base_ts, last_delta, has_append_time,
                            append_time, &prev_delta, &ts, &null_key);
            if (rc == 0) {
                if (ts < min_ts)
                    min_ts = ts;
                if (ts > max_ts)
                    max_ts = ts;
                if (null_key && null_keys++ == 0)
                    first_null = i;
            }
        }
        if (rc == 0 && c.p != end)
            rc = -2;
    }
    PyBuffer_Release(&view);
    if (rc < 0) {
        PyErr_SetString(DecodeError, "records do not decode");
        return NULL;
    }
    return Py_BuildValue("LLnn", (long long)min_ts, (long long)max_ts, null_keys, first_null);
}

static PyMethodDef module_methods[] = {
    {"scan_records", scan_records, METH_VARARGS,
     "check a records section without storing it: (min ts, max ts, null keys, first null key)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "logkeel.records._columns",
    "Compiled record decoder into column buffers (see logkeel.records.columns).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__columns(void) {
    if (PyType_Ready(&BuilderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    DecodeError = PyErr_NewException("logkeel.records._columns.DecodeError", PyExc_ValueError, NULL);
    Py_XINCREF(DecodeError);
    if (DecodeError == NULL || PyModule_AddObject(m, "DecodeError", DecodeError) < 0) {
        Py_XDECREF(DecodeError);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&BuilderType);
    if (PyModule_AddObject(m, "ColumnBuilder", (PyObject *)&BuilderType) < 0) {
        Py_DECREF(&BuilderType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
