/*
 * Store hot paths (twins: appliance/store/records.py encode_msgs / scan_frames / block_msgs).
 *
 * The record format is appliance/store/records.py's: frame = body_len u32 | crc u32 | body,
 * body = kind u8 | seq u64 | ts i64 | subject_len u16 | headers_len u32 | payload_len u32 |
 * subject | headers | payload, all little-endian; crc is CRC-32 (zlib's) of the body seeded with
 * body_len. A differential property test checks these functions against the Python twins.
 *
 * This file is linked into appliance._native but is its own module, `_store_native`
 * (PyInit__store_native), loaded from the same shared object by appliance/store/speedups.py, so
 * it needs no entry in another file's method table.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

enum {
    FRAME_BYTES = 8,
    BODY_HEAD_BYTES = 27,
    RECORD_HEAD_BYTES = FRAME_BYTES + BODY_HEAD_BYTES,
    KIND_MSG = 1,
    KIND_LAST = 3,
    SUBJECT_BYTES_MAX = 65535,
    RECORD_BYTES_MAX = 64 * 1024 * 1024, /* limits.STORE_RECORD_BYTES_MAX (checked by speedups.py) */
};
_Static_assert(RECORD_HEAD_BYTES == 35, "record head is 35 bytes");

static uint32_t crc_tables[8][256];

static void crc_tables_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_tables[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int t = 1; t < 8; t++) {
            uint32_t prev = crc_tables[t - 1][i];
            crc_tables[t][i] = (prev >> 8) ^ crc_tables[0][prev & 0xFF];
        }
    }
}

static uint32_t load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t load_u64(const uint8_t *p) { return (uint64_t)load_u32(p) | (uint64_t)load_u32(p + 4) << 32; }

static uint16_t load_u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static void store_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void store_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* zlib.crc32(data, seed) */
static uint32_t crc32_seeded(uint32_t seed, const uint8_t *p, size_t n) {
    uint32_t c = ~seed;
    while (n >= 8) {
        uint32_t one = load_u32(p) ^ c;
        uint32_t two = load_u32(p + 4);
        c = crc_tables[7][one & 0xFF] ^ crc_tables[6][(one >> 8) & 0xFF] ^ crc_tables[5][(one >> 16) & 0xFF] ^
            crc_tables[4][one >> 24] ^ crc_tables[3][two & 0xFF] ^ crc_tables[2][(two >> 8) & 0xFF] ^
            crc_tables[1][(two >> 16) & 0xFF] ^ crc_tables[0][two >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = crc_tables[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return ~c;
}

typedef struct {
    const char *subject;
    Py_ssize_t subject_len;
    const char *headers;
    Py_ssize_t headers_len;
    const char *payload;
    Py_ssize_t payload_len;
    int64_t ts;
} msg_view;

/* Borrow the fields of one (subject: str, headers: bytes, payload: bytes, ts: int) tuple. */
static int view_msg(PyObject *item, msg_view *view) {
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 4) {
        PyErr_SetString(PyExc_TypeError, "each message is a (subject, headers, payload, timestamp_ns) tuple");
        return -1;
    }
    view->subject = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(item, 0), &view->subject_len);
    if (view->subject == NULL) return -1;
    if (view->subject_len > SUBJECT_BYTES_MAX) {
        PyErr_SetString(PyExc_ValueError, "subject longer than 65535 bytes");
        return -1;
    }
    PyObject *headers = PyTuple_GET_ITEM(item, 1);
    PyObject *payload = PyTuple_GET_ITEM(item, 2);
    if (!PyBytes_Check(headers) || !PyBytes_Check(payload)) {
        PyErr_SetString(PyExc_TypeError, "headers and payload must be bytes");
        return -1;
    }
    view->headers = PyBytes_AS_STRING(headers);
    view->headers_len = PyBytes_GET_SIZE(headers);
    view->payload = PyBytes_AS_STRING(payload);
    view->payload_len = PyBytes_GET_SIZE(payload);
    view->ts = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 3));
    if (view->ts == -1 && PyErr_Occurred()) return -1;
    if (BODY_HEAD_BYTES + view->subject_len + view->headers_len + view->payload_len > RECORD_BYTES_MAX) {
        PyErr_SetString(PyExc_ValueError, "record larger than STORE_RECORD_BYTES_MAX");
        return -1;
    }
    return 0;
}

static Py_ssize_t body_bytes(const msg_view *v) {
    return BODY_HEAD_BYTES + v->subject_len + v->headers_len + v->payload_len;
}

static void write_record(uint8_t *out, const msg_view *v, uint64_t seq) {
    const uint32_t length = (uint32_t)body_bytes(v);
    uint8_t *body = out + FRAME_BYTES;
    body[0] = KIND_MSG;
    store_u64(body + 1, seq);
    store_u64(body + 9, (uint64_t)v->ts);
    body[17] = (uint8_t)(v->subject_len & 0xFF);
    body[18] = (uint8_t)(v->subject_len >> 8);
    store_u32(body + 19, (uint32_t)v->headers_len);
    store_u32(body + 23, (uint32_t)v->payload_len);
    uint8_t *cursor = body + BODY_HEAD_BYTES;
    memcpy(cursor, v->subject, (size_t)v->subject_len);
    cursor += v->subject_len;
    memcpy(cursor, v->headers, (size_t)v->headers_len);
    cursor += v->headers_len;
    memcpy(cursor, v->payload, (size_t)v->payload_len);
    store_u32(out, length);
    store_u32(out + 4, crc32_seeded(length, body, length));
}

/* nats-server fileStoreMsgSize */
static long long file_msg_size(const msg_view *v) {
    long long size = 22 + v->subject_len + v->payload_len + 8;
    return v->headers_len ? size + 4 + v->headers_len : size;
}

/* encode_msgs(msgs: list, first_seq: int, base_offset: int) -> (bytes, offsets, sizes, times) */
static PyObject *encode_msgs(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "encode_msgs(msgs: list, first_seq: int, base_offset: int)");
        return NULL;
    }
    const unsigned long long first_seq = PyLong_AsUnsignedLongLong(args[1]);
    const long long base_offset = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred()) return NULL;
    PyObject *msgs = args[0];
    const Py_ssize_t count = PyList_GET_SIZE(msgs);
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        msg_view v;
        if (view_msg(PyList_GET_ITEM(msgs, i), &v) < 0) return NULL;
        total += FRAME_BYTES + body_bytes(&v);
    }
    PyObject *buffer = PyBytes_FromStringAndSize(NULL, total);
    PyObject *offsets = PyList_New(count);
    PyObject *sizes = PyList_New(count);
    PyObject *times = PyList_New(count);
    if (buffer == NULL || offsets == NULL || sizes == NULL || times == NULL) goto fail;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(buffer);
    Py_ssize_t position = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        msg_view v;
        if (view_msg(PyList_GET_ITEM(msgs, i), &v) < 0) goto fail;
        write_record(out + position, &v, first_seq + (unsigned long long)i);
        PyObject *offset = PyLong_FromLongLong(base_offset + position);
        PyObject *size = PyLong_FromLongLong(file_msg_size(&v));
        PyObject *ts = PyLong_FromLongLong(v.ts);
        if (offset == NULL || size == NULL || ts == NULL) {
            Py_XDECREF(offset);
            Py_XDECREF(size);
            Py_XDECREF(ts);
            goto fail;
        }
        PyList_SET_ITEM(offsets, i, offset);
        PyList_SET_ITEM(sizes, i, size);
        PyList_SET_ITEM(times, i, ts);
        position += FRAME_BYTES + body_bytes(&v);
    }
    assert(position == total);
    return Py_BuildValue("(NNNN)", buffer, offsets, sizes, times);
fail:
    Py_XDECREF(buffer);
    Py_XDECREF(offsets);
    Py_XDECREF(sizes);
    Py_XDECREF(times);
    return NULL;
}

typedef struct {
    uint32_t length;
    uint32_t crc;
    uint8_t kind;
    uint64_t seq;
    int64_t ts;
    uint16_t subject_len;
    uint32_t headers_len;
    uint32_t payload_len;
} record_head;

static void read_head(const uint8_t *p, record_head *h) {
    h->length = load_u32(p);
    h->crc = load_u32(p + 4);
    h->kind = p[8];
    h->seq = load_u64(p + 9);
    h->ts = (int64_t)load_u64(p + 17);
    h->subject_len = load_u16(p + 25);
    h->headers_len = load_u32(p + 27);
    h->payload_len = load_u32(p + 31);
}

/* The record at offset is whole and consistent (lengths, kind; crc when check). */
static int record_ok(const uint8_t *data, Py_ssize_t size, Py_ssize_t offset, const record_head *h, int check) {
    const Py_ssize_t end = offset + FRAME_BYTES + (Py_ssize_t)h->length;
    if (end > size) return 0;
    if ((uint64_t)BODY_HEAD_BYTES + h->subject_len + h->headers_len + h->payload_len != h->length) return 0;
    if (h->kind < KIND_MSG || h->kind > KIND_LAST) return 0;
    if (check && crc32_seeded(h->length, data + offset + FRAME_BYTES, h->length) != h->crc) return 0;
    return 1;
}

/* scan_frames(buf, start) -> ([(offset, end, kind, seq, ts), ...], stop) */
static PyObject *scan_frames(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "scan_frames(buf, start)");
        return NULL;
    }
    Py_ssize_t offset = PyLong_AsSsize_t(args[1]);
    if (offset == -1 && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *data = view.buf;
    const Py_ssize_t size = view.len;
    PyObject *found = PyList_New(0);
    if (found == NULL) goto fail;
    while (offset >= 0 && offset + RECORD_HEAD_BYTES <= size) {
        record_head h;
        read_head(data + offset, &h);
        if (!record_ok(data, size, offset, &h, 1)) break;
        const Py_ssize_t end = offset + FRAME_BYTES + (Py_ssize_t)h.length;
        PyObject *frame = Py_BuildValue("(nnBKL)", offset, end, h.kind, (unsigned long long)h.seq, (long long)h.ts);
        if (frame == NULL || PyList_Append(found, frame) < 0) {
            Py_XDECREF(frame);
            goto fail;
        }
        Py_DECREF(frame);
        offset = end;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(Nn)", found, offset);
fail:
    Py_XDECREF(found);
    PyBuffer_Release(&view);
    return NULL;
}

/* factory(*fields); a tuple subclass (a NamedTuple) is allocated and filled directly, without its
 * Python __new__ (what tuple.__new__ does for a subclass, minus the intermediate tuples).
 * fields are always int, str, bytes, bytes, int. */
static PyObject *build(PyObject *factory, PyObject *const *fields) {
    if (!PyType_Check(factory) || !PyType_IsSubtype((PyTypeObject *)factory, &PyTuple_Type)) {
        return PyObject_Vectorcall(factory, fields, 5, NULL);
    }
    PyTypeObject *type = (PyTypeObject *)factory;
    PyObject *msg = type->tp_alloc(type, 5);
    if (msg == NULL) return NULL;
    for (Py_ssize_t i = 0; i < 5; i++) {
        Py_INCREF(fields[i]);
        PyTuple_SET_ITEM(msg, i, fields[i]);
    }
    /* ints, str and bytes cannot form a cycle: keep millions of messages out of the cyclic GC's
     * sight, as CPython does for plain tuples of atomic values (unless the subclass has a dict) */
    if (type->tp_dictoffset == 0 && PyType_IS_GC(type)) PyObject_GC_UnTrack(msg);
    return msg;
}

/* block_msgs(raw: bytes, start_seq: int, factory) -> [factory(seq, subject, headers, payload, ts), ...] */
static PyObject *block_msgs(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "block_msgs(raw: bytes, start_seq: int, factory)");
        return NULL;
    }
    const unsigned long long start_seq = PyLong_AsUnsignedLongLong(args[1]);
    if (PyErr_Occurred()) return NULL;
    PyObject *factory = args[2];
    const uint8_t *data = (const uint8_t *)PyBytes_AS_STRING(args[0]);
    const Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    PyObject *found = PyList_New(0);
    if (found == NULL) return NULL;
    Py_ssize_t offset = 0;
    /* consecutive messages on the same subject share one str (streams run on a few subjects) */
    const char *last_subject = NULL;
    Py_ssize_t last_subject_len = 0;
    PyObject *last_str = NULL;
    while (offset < size) {
        record_head h;
        if (offset + RECORD_HEAD_BYTES > size) goto malformed;
        read_head(data + offset, &h);
        if (!record_ok(data, size, offset, &h, 0)) goto malformed;
        const Py_ssize_t end = offset + FRAME_BYTES + (Py_ssize_t)h.length;
        if (h.kind == KIND_MSG && h.seq >= start_seq) {
            const char *subject = (const char *)data + offset + RECORD_HEAD_BYTES;
            PyObject *fields[5];
            fields[0] = PyLong_FromUnsignedLongLong(h.seq);
            if (last_str != NULL && last_subject_len == (Py_ssize_t)h.subject_len &&
                memcmp(last_subject, subject, h.subject_len) == 0) {
                Py_INCREF(last_str);
                fields[1] = last_str;
            } else {
                fields[1] = PyUnicode_DecodeUTF8(subject, h.subject_len, NULL);
                if (fields[1] != NULL) {
                    Py_XDECREF(last_str);
                    Py_INCREF(fields[1]);
                    last_str = fields[1];
                    last_subject = subject;
                    last_subject_len = (Py_ssize_t)h.subject_len;
                }
            }
            fields[2] = PyBytes_FromStringAndSize(subject + h.subject_len, h.headers_len);
            fields[3] = PyBytes_FromStringAndSize(subject + h.subject_len + h.headers_len, h.payload_len);
            fields[4] = PyLong_FromLongLong(h.ts);
            PyObject *msg = NULL;
            if (fields[0] && fields[1] && fields[2] && fields[3] && fields[4]) {
                msg = build(factory, fields);
            }
            for (int i = 0; i < 5; i++) Py_XDECREF(fields[i]);
            if (msg == NULL || PyList_Append(found, msg) < 0) {
                Py_XDECREF(msg);
                Py_XDECREF(last_str);
                Py_DECREF(found);
                return NULL;
            }
            Py_DECREF(msg);
        }
        offset = end;
    }
    Py_XDECREF(last_str);
    return found;
malformed:
    Py_XDECREF(last_str);
    Py_DECREF(found);
    PyErr_Format(PyExc_ValueError, "malformed record in block at %zd", offset);
    return NULL;
}

/* replay_frames(buf, start, check) -> ([(offset, end, kind, seq, ts, subject, size), ...], stop)
 * Recovery's view of each whole valid record: the subject (MSG only, else None) and the
 * nats-server accounted size (fileStoreMsgSize) so the index is rebuilt without the payloads. */
static PyObject *replay_frames(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "replay_frames(buf, start, check)");
        return NULL;
    }
    Py_ssize_t offset = PyLong_AsSsize_t(args[1]);
    if (offset == -1 && PyErr_Occurred()) return NULL;
    const int check = PyObject_IsTrue(args[2]);
    if (check < 0) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *data = view.buf;
    const Py_ssize_t size = view.len;
    PyObject *found = PyList_New(0);
    if (found == NULL) goto fail;
    while (offset >= 0 && offset + RECORD_HEAD_BYTES <= size) {
        record_head h;
        read_head(data + offset, &h);
        if (!record_ok(data, size, offset, &h, check)) break;
        const Py_ssize_t end = offset + FRAME_BYTES + (Py_ssize_t)h.length;
        PyObject *subject = Py_None;
        long long accounted = 0;
        if (h.kind == KIND_MSG) {
            subject = PyUnicode_DecodeUTF8((const char *)data + offset + RECORD_HEAD_BYTES, h.subject_len, NULL);
            if (subject == NULL) {
                PyErr_Clear();
                break; /* not a valid record: the caller treats it like a damaged one */
            }
            accounted = 22LL + h.subject_len + h.payload_len + 8 + (h.headers_len ? 4LL + h.headers_len : 0);
        } else {
            Py_INCREF(subject);
        }
        PyObject *frame = Py_BuildValue("(nnBKLNL)", offset, end, h.kind, (unsigned long long)h.seq,
                                        (long long)h.ts, subject, accounted);
        if (frame == NULL || PyList_Append(found, frame) < 0) {
            Py_XDECREF(frame);
            goto fail;
        }
        Py_DECREF(frame);
        offset = end;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(Nn)", found, offset);
fail:
    Py_XDECREF(found);
    PyBuffer_Release(&view);
    return NULL;
}

typedef struct {
    Py_ssize_t begin;
    Py_ssize_t end;
    unsigned long long first_seq;
    unsigned long long last_seq;
    long long ts_min;
    long long ts_max;
    unsigned long msg_count;
} block_plan;

static int append_plan(PyObject *plans, const block_plan *b) {
    PyObject *plan = Py_BuildValue("(nnKKLLk)", b->begin, b->end, b->first_seq, b->last_seq, b->ts_min, b->ts_max,
                                   b->msg_count);
    if (plan == NULL) return -1;
    const int failed = PyList_Append(plans, plan);
    Py_DECREF(plan);
    return failed;
}

/* plan_blocks(buf, start, block_raw_bytes) -> ([(begin, end, first_seq, last_seq, ts_min, ts_max, msgs)], stop)
 * Blocks over every whole valid record from start (checksums checked), split like
 * appliance/store/segment.py split_blocks: a record that would overflow a non-empty block starts
 * the next one. first/last seq and ts min/max describe the block's MSG records (0 without any). */
static PyObject *plan_blocks(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "plan_blocks(buf, start, block_raw_bytes)");
        return NULL;
    }
    Py_ssize_t offset = PyLong_AsSsize_t(args[1]);
    const Py_ssize_t block_raw_bytes = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *data = view.buf;
    const Py_ssize_t size = view.len;
    PyObject *plans = PyList_New(0);
    if (plans == NULL) goto fail;
    block_plan current = {0};
    int open = 0;
    while (offset >= 0 && offset + RECORD_HEAD_BYTES <= size) {
        record_head h;
        read_head(data + offset, &h);
        if (!record_ok(data, size, offset, &h, 1)) break;
        const Py_ssize_t end = offset + FRAME_BYTES + (Py_ssize_t)h.length;
        if (open && (current.end - current.begin) + (end - offset) > block_raw_bytes) {
            if (append_plan(plans, &current) < 0) goto fail;
            open = 0;
        }
        if (!open) {
            memset(&current, 0, sizeof current);
            current.begin = offset;
            open = 1;
        }
        current.end = end;
        if (h.kind == KIND_MSG) {
            if (current.msg_count == 0) {
                current.first_seq = h.seq;
                current.ts_min = h.ts;
                current.ts_max = h.ts;
            }
            current.last_seq = h.seq;
            if (h.ts < current.ts_min) current.ts_min = h.ts;
            if (h.ts > current.ts_max) current.ts_max = h.ts;
            current.msg_count++;
        }
        offset = end;
    }
    if (open && append_plan(plans, &current) < 0) goto fail;
    PyBuffer_Release(&view);
    return Py_BuildValue("(Nn)", plans, offset);
fail:
    Py_XDECREF(plans);
    PyBuffer_Release(&view);
    return NULL;
}

/* find_msg(raw: bytes, seq: int) -> offset of the MSG record with that seq in a verified block, or -1 */
static PyObject *find_msg(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "find_msg(raw: bytes, seq: int)");
        return NULL;
    }
    const unsigned long long seq = PyLong_AsUnsignedLongLong(args[1]);
    if (PyErr_Occurred()) return NULL;
    const uint8_t *data = (const uint8_t *)PyBytes_AS_STRING(args[0]);
    const Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    Py_ssize_t offset = 0;
    while (offset + RECORD_HEAD_BYTES <= size) {
        record_head h;
        read_head(data + offset, &h);
        if (!record_ok(data, size, offset, &h, 0)) break;
        if (h.kind == KIND_MSG && h.seq == seq) return PyLong_FromSsize_t(offset);
        offset += FRAME_BYTES + (Py_ssize_t)h.length;
    }
    return PyLong_FromLong(-1);
}

/* msg_index(raw: bytes) -> bytes: (seq u64, offset u64) little-endian pairs of the MSG records of
 * a verified block, in record order (ascending seq), for index_find. */
static PyObject *msg_index(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 1 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "msg_index(raw: bytes)");
        return NULL;
    }
    const uint8_t *data = (const uint8_t *)PyBytes_AS_STRING(args[0]);
    const Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    Py_ssize_t count = 0;
    Py_ssize_t offset = 0;
    while (offset + RECORD_HEAD_BYTES <= size) {
        record_head h;
        read_head(data + offset, &h);
        if (!record_ok(data, size, offset, &h, 0)) break;
        count += h.kind == KIND_MSG;
        offset += FRAME_BYTES + (Py_ssize_t)h.length;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, count * 16);
    if (out == NULL) return NULL;
    uint8_t *pairs = (uint8_t *)PyBytes_AS_STRING(out);
    Py_ssize_t k = 0;
    offset = 0;
    while (k < count) {
        record_head h;
        read_head(data + offset, &h);
        if (h.kind == KIND_MSG) {
            store_u64(pairs + 16 * k, h.seq);
            store_u64(pairs + 16 * k + 8, (uint64_t)offset);
            k++;
        }
        offset += FRAME_BYTES + (Py_ssize_t)h.length;
    }
    return out;
}

/* index_find(index: bytes, seq: int) -> offset of seq's record (binary search of msg_index), or -1 */
static PyObject *index_find(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "index_find(index: bytes, seq: int)");
        return NULL;
    }
    const unsigned long long seq = PyLong_AsUnsignedLongLong(args[1]);
    if (PyErr_Occurred()) return NULL;
    const uint8_t *pairs = (const uint8_t *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t lo = 0;
    Py_ssize_t hi = PyBytes_GET_SIZE(args[0]) / 16;
    while (lo < hi) {
        const Py_ssize_t mid = lo + (hi - lo) / 2;
        const uint64_t at = load_u64(pairs + 16 * mid);
        if (at == seq) return PyLong_FromUnsignedLongLong(load_u64(pairs + 16 * mid + 8));
        if (at < seq) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return PyLong_FromLong(-1);
}

/* msg_at(raw: bytes, offset: int, factory, check: bool = False) -> factory(seq, subject, headers,
 * payload, ts) of the MSG record at offset (its checksum verified when check: raw is not a
 * verified block); ValueError if no whole valid MSG record is there. */
static PyObject *msg_at(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if ((nargs != 3 && nargs != 4) || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "msg_at(raw: bytes, offset: int, factory, check=False)");
        return NULL;
    }
    const Py_ssize_t offset = PyLong_AsSsize_t(args[1]);
    if (PyErr_Occurred()) return NULL;
    const int check = nargs == 4 ? PyObject_IsTrue(args[3]) : 0;
    if (check < 0) return NULL;
    const uint8_t *data = (const uint8_t *)PyBytes_AS_STRING(args[0]);
    const Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    record_head h;
    if (offset < 0 || offset + RECORD_HEAD_BYTES > size) goto malformed;
    read_head(data + offset, &h);
    if (!record_ok(data, size, offset, &h, check) || h.kind != KIND_MSG) goto malformed;
    const char *subject = (const char *)data + offset + RECORD_HEAD_BYTES;
    PyObject *fields[5];
    fields[0] = PyLong_FromUnsignedLongLong(h.seq);
    fields[1] = PyUnicode_DecodeUTF8(subject, h.subject_len, NULL);
    fields[2] = PyBytes_FromStringAndSize(subject + h.subject_len, h.headers_len);
    fields[3] = PyBytes_FromStringAndSize(subject + h.subject_len + h.headers_len, h.payload_len);
    fields[4] = PyLong_FromLongLong(h.ts);
    PyObject *msg = NULL;
    if (fields[0] && fields[1] && fields[2] && fields[3] && fields[4]) msg = build(args[2], fields);
    for (int i = 0; i < 5; i++) Py_XDECREF(fields[i]);
    return msg;
malformed:
    PyErr_Format(PyExc_ValueError, "no MSG record at %zd", offset);
    return NULL;
}

/* msg_columns(buf, start, check) -> (seqs, stamps, subject_offsets, subjects, payload_offsets,
 * payloads, header_spans, others, stop): the MSG records of the whole valid records from start
 * (crc verified when check) as column buffers, for Arrow without a Python object per message.
 * seqs/stamps: i64 per message; *_offsets: i32, one more than messages (Arrow offsets);
 * subjects/payloads: the values back to back; header_spans: (row, offset, length) i64 triples of
 * the messages that carry headers; others: i64 offsets of the records of other kinds; stop: the
 * offset after the last whole valid record (the buffer's length when every record is). */
static PyObject *msg_columns(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "msg_columns(buf, start, check)");
        return NULL;
    }
    const Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred()) return NULL;
    const int check = PyObject_IsTrue(args[2]);
    if (check < 0) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *data = view.buf;
    const Py_ssize_t size = view.len;
    PyObject *result = NULL;
    if (start < 0 || start > size) {
        PyErr_SetString(PyExc_ValueError, "start outside the buffer");
        goto done;
    }
    /* pass 1: validate and size the columns */
    Py_ssize_t n = 0, n_headers = 0, n_others = 0, subject_total = 0, payload_total = 0;
    Py_ssize_t stop = start;
    while (stop + RECORD_HEAD_BYTES <= size) {
        record_head h;
        read_head(data + stop, &h);
        if (!record_ok(data, size, stop, &h, check)) break;
        if (h.kind == KIND_MSG) {
            n++;
            subject_total += h.subject_len;
            payload_total += h.payload_len;
            n_headers += h.headers_len != 0;
        } else {
            n_others++;
        }
        stop += FRAME_BYTES + (Py_ssize_t)h.length;
    }
    if (subject_total > INT32_MAX || payload_total > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "more than 2 GiB of subjects or payloads in one buffer");
        goto done;
    }
    PyObject *cols[8];
    const Py_ssize_t sizes[8] = {8 * n, 8 * n, 4 * (n + 1), subject_total, 4 * (n + 1), payload_total,
                                 24 * n_headers, 8 * n_others};
    for (int i = 0; i < 8; i++) cols[i] = PyBytes_FromStringAndSize(NULL, sizes[i]);
    for (int i = 0; i < 8; i++) {
        if (cols[i] == NULL) {
            for (int j = 0; j < 8; j++) Py_XDECREF(cols[j]);
            goto done;
        }
    }
    uint8_t *seqs = (uint8_t *)PyBytes_AS_STRING(cols[0]);
    uint8_t *stamps = (uint8_t *)PyBytes_AS_STRING(cols[1]);
    uint8_t *subject_offsets = (uint8_t *)PyBytes_AS_STRING(cols[2]);
    uint8_t *subjects = (uint8_t *)PyBytes_AS_STRING(cols[3]);
    uint8_t *payload_offsets = (uint8_t *)PyBytes_AS_STRING(cols[4]);
    uint8_t *payloads = (uint8_t *)PyBytes_AS_STRING(cols[5]);
    uint8_t *spans = (uint8_t *)PyBytes_AS_STRING(cols[6]);
    uint8_t *others = (uint8_t *)PyBytes_AS_STRING(cols[7]);
    /* pass 2: fill (the records up to stop are known valid) */
    Py_ssize_t row = 0, span = 0, other = 0, subject_at = 0, payload_at = 0;
    store_u32(subject_offsets, 0);
    store_u32(payload_offsets, 0);
    for (Py_ssize_t offset = start; offset < stop;) {
        record_head h;
        read_head(data + offset, &h);
        if (h.kind == KIND_MSG) {
            const uint8_t *subject = data + offset + RECORD_HEAD_BYTES;
            store_u64(seqs + 8 * row, h.seq);
            store_u64(stamps + 8 * row, (uint64_t)h.ts);
            memcpy(subjects + subject_at, subject, h.subject_len);
            subject_at += h.subject_len;
            memcpy(payloads + payload_at, subject + h.subject_len + h.headers_len, h.payload_len);
            payload_at += h.payload_len;
            if (h.headers_len) {
                store_u64(spans + 24 * span, (uint64_t)row);
                store_u64(spans + 24 * span + 8, (uint64_t)(offset + RECORD_HEAD_BYTES + h.subject_len));
                store_u64(spans + 24 * span + 16, h.headers_len);
                span++;
            }
            row++;
            store_u32(subject_offsets + 4 * row, (uint32_t)subject_at);
            store_u32(payload_offsets + 4 * row, (uint32_t)payload_at);
        } else {
            store_u64(others + 8 * other, (uint64_t)offset);
            other++;
        }
        offset += FRAME_BYTES + (Py_ssize_t)h.length;
    }
    result = Py_BuildValue("(NNNNNNNNn)", cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6], cols[7], stop);
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef store_methods[] = {
    {"plan_blocks", (PyCFunction)(void (*)(void))plan_blocks, METH_FASTCALL,
     "Contiguous blocks over valid records with their seq/time/count summary: (plans, stop)."},
    {"replay_frames", (PyCFunction)(void (*)(void))replay_frames, METH_FASTCALL,
     "Whole valid records from start with subject and accounted size: (frames, stop)."},
    {"find_msg", (PyCFunction)(void (*)(void))find_msg, METH_FASTCALL,
     "Offset of the MSG record with seq in a verified block, or -1."},
    {"encode_msgs", (PyCFunction)(void (*)(void))encode_msgs, METH_FASTCALL,
     "Encode MSG records for consecutive sequences: (buffer, offsets, sizes, times)."},
    {"scan_frames", (PyCFunction)(void (*)(void))scan_frames, METH_FASTCALL,
     "Whole valid records from start: ([(offset, end, kind, seq, ts)], stop)."},
    {"msg_index", (PyCFunction)(void (*)(void))msg_index, METH_FASTCALL,
     "(seq, offset) u64 pairs of the MSG records of a verified block, ascending."},
    {"index_find", (PyCFunction)(void (*)(void))index_find, METH_FASTCALL,
     "Offset of seq's record from a msg_index, or -1."},
    {"msg_at", (PyCFunction)(void (*)(void))msg_at, METH_FASTCALL,
     "The MSG record at offset of a verified block, built by factory."},
    {"msg_columns", (PyCFunction)(void (*)(void))msg_columns, METH_FASTCALL,
     "MSG records of the whole valid records from start as column buffers (for Arrow)."},
    {"block_msgs", (PyCFunction)(void (*)(void))block_msgs, METH_FASTCALL,
     "Messages of a verified block with seq >= start_seq, built by factory."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef store_module = {
    PyModuleDef_HEAD_INIT, "appliance._store_native", "Store hot paths (see native/store.c).", -1,
    store_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__store_native(void) {
    crc_tables_init();
    PyObject *module = PyModule_Create(&store_module);
    if (module != NULL && PyModule_AddIntConstant(module, "RECORD_BYTES_MAX", RECORD_BYTES_MAX) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
