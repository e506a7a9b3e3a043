/*
 * Link records: `<u16 account><u16 subject><u16 reply><u16 queue><u32 header|0xFFFFFFFF><u32 data>`
 * little-endian, then the bytes of each, data last (data includes the header block). The Python
 * twins in appliance/server/links.py write and read the same bytes (a property test checks it).
 */
#include "records.h"

#include <stdint.h>
#include <string.h>

enum { RECORD_HEADER_BYTES = 16 };
#define NO_HEADER UINT32_C(0xFFFFFFFF)

_Static_assert(RECORD_HEADER_BYTES == 4 * 2 + 2 * 4, "record header layout");

static void put_u16(char *p, uint16_t v) {
    p[0] = (char)(v & 0xFF);
    p[1] = (char)(v >> 8);
}

static void put_u32(char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) {
        p[i] = (char)((v >> (8 * i)) & 0xFF);
    }
}

static uint16_t get_u16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static Py_ssize_t optional_len(PyObject *value) { return value == Py_None ? 0 : PyBytes_GET_SIZE(value); }

PyObject *appliance_append_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 7 || !PyByteArray_Check(args[0]) || !PyBytes_Check(args[1]) || !PyBytes_Check(args[2]) ||
        (args[3] != Py_None && !PyBytes_Check(args[3])) || (args[4] != Py_None && !PyBytes_Check(args[4])) ||
        !PyBytes_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError, "append_record(out: bytearray, account: bytes, subject: bytes, "
                                         "reply: bytes | None, queue: bytes | None, header_size: int, data: bytes)");
        return NULL;
    }
    Py_ssize_t header_size = PyLong_AsSsize_t(args[5]);
    if (header_size == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t lengths[4] = {PyBytes_GET_SIZE(args[1]), PyBytes_GET_SIZE(args[2]), optional_len(args[3]),
                             optional_len(args[4])};
    Py_ssize_t data_len = PyBytes_GET_SIZE(args[6]);
    for (int i = 0; i < 4; i++) {
        if (lengths[i] > UINT16_MAX) {
            PyErr_SetString(PyExc_ValueError, "append_record: a name longer than 65535 bytes");
            return NULL;
        }
    }
    if (data_len > (Py_ssize_t)UINT32_MAX - 1 || header_size > data_len || header_size < -1) {
        PyErr_SetString(PyExc_ValueError, "append_record: bad header or data size");
        return NULL;
    }
    PyObject *out = args[0];
    Py_ssize_t old = PyByteArray_GET_SIZE(out);
    Py_ssize_t added = RECORD_HEADER_BYTES + lengths[0] + lengths[1] + lengths[2] + lengths[3] + data_len;
    if (PyByteArray_Resize(out, old + added) < 0) {
        return NULL;
    }
    char *p = PyByteArray_AS_STRING(out) + old;
    for (int i = 0; i < 4; i++) {
        put_u16(p + 2 * i, (uint16_t)lengths[i]);
    }
    put_u32(p + 8, header_size < 0 ? NO_HEADER : (uint32_t)header_size);
    put_u32(p + 12, (uint32_t)data_len);
    p += RECORD_HEADER_BYTES;
    for (int i = 0; i < 4; i++) {
        if (lengths[i] > 0) {
            memcpy(p, PyBytes_AS_STRING(args[1 + i]), (size_t)lengths[i]);
            p += lengths[i];
        }
    }
    memcpy(p, PyBytes_AS_STRING(args[6]), (size_t)data_len);
    Py_RETURN_NONE;
}

static PyObject *bytes_or_none(const unsigned char *p, Py_ssize_t length, int present) {
    if (!present) {
        Py_RETURN_NONE;
    }
    return PyBytes_FromStringAndSize((const char *)p, length);
}

PyObject *appliance_decode_records(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "decode_records(payload: bytes)");
        return NULL;
    }
    const unsigned char *base = (const unsigned char *)PyBytes_AS_STRING(arg);
    Py_ssize_t end = PyBytes_GET_SIZE(arg);
    PyObject *records = PyList_New(0);
    if (!records) {
        return NULL;
    }
    Py_ssize_t pos = 0;
    while (pos < end) {
        if (end - pos < RECORD_HEADER_BYTES) {
            goto truncated;
        }
        const unsigned char *h = base + pos;
        Py_ssize_t a = get_u16(h), s = get_u16(h + 2), r = get_u16(h + 4), q = get_u16(h + 6);
        uint32_t header = get_u32(h + 8);
        Py_ssize_t d = (Py_ssize_t)get_u32(h + 12);
        pos += RECORD_HEADER_BYTES;
        if (end - pos < a + s + r + q + d || (header != NO_HEADER && (Py_ssize_t)header > d)) {
            goto truncated;
        }
        const unsigned char *p = base + pos;
        PyObject *items[6];
        items[0] = PyBytes_FromStringAndSize((const char *)p, a);
        items[1] = PyBytes_FromStringAndSize((const char *)p + a, s);
        items[2] = bytes_or_none(p + a + s, r, r > 0);
        items[3] = bytes_or_none(p + a + s + r, q, q > 0);
        const unsigned char *data = p + a + s + r + q;
        items[4] = bytes_or_none(data, (Py_ssize_t)header, header != NO_HEADER);
        items[5] = PyBytes_FromStringAndSize((const char *)data, d);
        pos += a + s + r + q + d;
        PyObject *record = NULL;
        if (items[0] && items[1] && items[2] && items[3] && items[4] && items[5]) {
            record = PyTuple_Pack(6, items[0], items[1], items[2], items[3], items[4], items[5]);
        }
        for (int i = 0; i < 6; i++) {
            Py_XDECREF(items[i]);
        }
        if (!record || PyList_Append(records, record) < 0) {
            Py_XDECREF(record);
            Py_DECREF(records);
            return NULL;
        }
        Py_DECREF(record);
    }
    return records;
truncated:
    Py_DECREF(records);
    PyErr_SetString(PyExc_ValueError, "truncated message record in a link frame");
    return NULL;
}

/* --- runs: many records in one call ------------------------------------------------------------- */

/* Fields of the record at `pos` of base[0:end]; 0 on success, -1 when it is truncated or its
 * header is longer than its data. `next` is the position after it. */
typedef struct {
    Py_ssize_t account, subject, reply, queue, data, next;
    uint32_t header;
    const unsigned char *fields; /* the account's first byte; subject, reply, queue and data follow */
} record_view;

static int view_record(const unsigned char *base, Py_ssize_t pos, Py_ssize_t end, record_view *r) {
    if (end - pos < RECORD_HEADER_BYTES) {
        return -1;
    }
    const unsigned char *h = base + pos;
    r->account = get_u16(h);
    r->subject = get_u16(h + 2);
    r->reply = get_u16(h + 4);
    r->queue = get_u16(h + 6);
    r->header = get_u32(h + 8);
    r->data = (Py_ssize_t)get_u32(h + 12);
    pos += RECORD_HEADER_BYTES;
    if (end - pos < r->account + r->subject + r->reply + r->queue + r->data ||
        (r->header != NO_HEADER && (Py_ssize_t)r->header > r->data)) {
        return -1;
    }
    r->fields = base + pos;
    r->next = pos + r->account + r->subject + r->reply + r->queue + r->data;
    return 0;
}

/* Same account, subject and queue (the routing key of a record). */
static int same_key(const record_view *a, const record_view *b) {
    return a->account == b->account && a->subject == b->subject && a->queue == b->queue &&
           memcmp(a->fields, b->fields, (size_t)(a->account + a->subject)) == 0 &&
           memcmp(a->fields + a->account + a->subject + a->reply,
                  b->fields + b->account + b->subject + b->reply, (size_t)a->queue) == 0;
}

PyObject *appliance_record_runs(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "record_runs(payload: bytes)");
        return NULL;
    }
    const unsigned char *base = (const unsigned char *)PyBytes_AS_STRING(arg);
    const Py_ssize_t end = PyBytes_GET_SIZE(arg);
    PyObject *runs = PyList_New(0);
    if (!runs) {
        return NULL;
    }
    Py_ssize_t pos = 0;
    while (pos < end) {
        record_view first;
        if (view_record(base, pos, end, &first) < 0) {
            goto truncated;
        }
        const Py_ssize_t start = pos;
        Py_ssize_t count = 1;
        pos = first.next;
        while (pos < end) {
            record_view next;
            if (view_record(base, pos, end, &next) < 0) {
                goto truncated;
            }
            if (!same_key(&first, &next)) {
                break;
            }
            count++;
            pos = next.next;
        }
        const char *f = (const char *)first.fields;
        PyObject *queue = first.queue > 0
                              ? PyBytes_FromStringAndSize(f + first.account + first.subject + first.reply, first.queue)
                              : Py_NewRef(Py_None);
        PyObject *run = queue ? Py_BuildValue("(y#y#Nnnn)", f, first.account, f + first.account, first.subject,
                                              queue, start, pos, count)
                              : NULL;
        if (!run || PyList_Append(runs, run) < 0) {
            Py_XDECREF(run);
            Py_DECREF(runs);
            return NULL;
        }
        Py_DECREF(run);
    }
    return runs;
truncated:
    Py_DECREF(runs);
    PyErr_SetString(PyExc_ValueError, "truncated message record in a link frame");
    return NULL;
}

enum { DECIMAL_DIGITS_MAX = 20 };

static Py_ssize_t put_decimal_u64(char *p, uint64_t value) {
    char digits[DECIMAL_DIGITS_MAX];
    Py_ssize_t n = 0;
    do {
        digits[n++] = (char)('0' + value % 10);
        value /= 10;
    } while (value != 0);
    for (Py_ssize_t i = 0; i < n; i++) {
        p[i] = digits[n - 1 - i];
    }
    return n;
}

/* One MSG/HMSG line at p (room checked by the caller): "MSG " subject tail [reply " "] [header " "]
 * size CRLF data CRLF; HMSG when header_len >= 0. Returns the position after it. */
static char *put_msg(char *p, const char *subject, Py_ssize_t subject_len, const char *tail, Py_ssize_t tail_len,
                     const char *reply, Py_ssize_t reply_len, Py_ssize_t header_len, const char *data,
                     Py_ssize_t data_len) {
    if (header_len >= 0) {
        memcpy(p, "HMSG ", 5);
        p += 5;
    } else {
        memcpy(p, "MSG ", 4);
        p += 4;
    }
    memcpy(p, subject, (size_t)subject_len);
    p += subject_len;
    memcpy(p, tail, (size_t)tail_len);
    p += tail_len;
    if (reply_len > 0) {
        memcpy(p, reply, (size_t)reply_len);
        p += reply_len;
        *p++ = ' ';
    }
    if (header_len >= 0) {
        p += put_decimal_u64(p, (uint64_t)header_len);
        *p++ = ' ';
    }
    p += put_decimal_u64(p, (uint64_t)data_len);
    *p++ = '\r';
    *p++ = '\n';
    memcpy(p, data, (size_t)data_len);
    p += data_len;
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

/* The last '@' of reply[0:length], or -1 (a relayed reply is `<ack>@<stream subject>`; the ack
 * subject may hold '@' itself, the stream subject does not). */
static Py_ssize_t last_at(const unsigned char *reply, Py_ssize_t length) {
    for (Py_ssize_t i = length - 1; i >= 0; i--) {
        if (reply[i] == '@') {
            return i;
        }
    }
    return -1;
}

/* The arguments append_msgs and append_relayed_msgs share:
 * (out: bytearray, payload: bytes, start: int, end: int, tail: bytes, headers: bool, limit: int),
 * checked, with payload[start:end] inside the payload. -1 with an exception set when not. */
typedef struct {
    Py_ssize_t start, end, limit, tail_len;
    int headers;
    const unsigned char *base;
} msgs_args;

static int parse_msgs_args(PyObject *const *args, Py_ssize_t nargs, const char *name, msgs_args *a) {
    if (nargs != 7 || !PyByteArray_Check(args[0]) || !PyBytes_Check(args[1]) || !PyBytes_Check(args[4])) {
        PyErr_Format(PyExc_TypeError, "%s(out: bytearray, payload: bytes, start: int, end: int, "
                                      "tail: bytes, headers: bool, limit: int)", name);
        return -1;
    }
    a->start = PyLong_AsSsize_t(args[2]);
    a->end = PyLong_AsSsize_t(args[3]);
    a->headers = PyObject_IsTrue(args[5]);
    a->limit = PyLong_AsSsize_t(args[6]);
    if (PyErr_Occurred() || a->headers < 0) {
        return -1;
    }
    if (a->start < 0 || a->end < a->start || a->end > PyBytes_GET_SIZE(args[1])) {
        PyErr_Format(PyExc_ValueError, "%s: bad range", name);
        return -1;
    }
    a->base = (const unsigned char *)PyBytes_AS_STRING(args[1]);
    a->tail_len = PyBytes_GET_SIZE(args[4]);
    return 0;
}

PyObject *appliance_append_msgs(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    msgs_args a;
    if (parse_msgs_args(args, nargs, "append_msgs", &a) < 0) {
        return NULL;
    }
    const Py_ssize_t start = a.start, end = a.end, limit = a.limit, tail_len = a.tail_len;
    const int headers = a.headers;
    const unsigned char *base = a.base;
    /* pass 1: validate and size */
    Py_ssize_t room = 0;
    Py_ssize_t count = 0;
    for (Py_ssize_t pos = start; pos < end && count < limit; count++) {
        record_view r;
        if (view_record(base, pos, end, &r) < 0) {
            PyErr_SetString(PyExc_ValueError, "truncated message record in a link frame");
            return NULL;
        }
        /* "HMSG " subject tail reply " " header " " size CRLF data CRLF */
        room += 5 + r.subject + tail_len + r.reply + 1 + 2 * DECIMAL_DIGITS_MAX + 1 + 2 + r.data + 2;
        pos = r.next;
    }
    PyObject *out = args[0];
    const Py_ssize_t old = PyByteArray_GET_SIZE(out);
    if (PyByteArray_Resize(out, old + room) < 0) {
        return NULL;
    }
    char *p = PyByteArray_AS_STRING(out) + old;
    const char *tail = PyBytes_AS_STRING(args[4]);
    unsigned long long data_bytes = 0;
    Py_ssize_t pos = start;
    for (Py_ssize_t i = 0; i < count; i++) {
        record_view r;
        (void)view_record(base, pos, end, &r); /* validated above */
        pos = r.next;
        const char *f = (const char *)r.fields;
        const char *data = f + r.account + r.subject + r.reply + r.queue;
        Py_ssize_t data_len = r.data;
        const int hmsg = r.header != NO_HEADER && headers;
        if (r.header != NO_HEADER && !headers) { /* a client without headers gets the payload alone */
            data += r.header;
            data_len -= (Py_ssize_t)r.header;
        }
        if (hmsg) {
            memcpy(p, "HMSG ", 5);
            p += 5;
        } else {
            memcpy(p, "MSG ", 4);
            p += 4;
        }
        memcpy(p, f + r.account, (size_t)r.subject);
        p += r.subject;
        memcpy(p, tail, (size_t)tail_len);
        p += tail_len;
        if (r.reply > 0) {
            memcpy(p, f + r.account + r.subject, (size_t)r.reply);
            p += r.reply;
            *p++ = ' ';
        }
        if (hmsg) {
            p += put_decimal_u64(p, r.header);
            *p++ = ' ';
        }
        p += put_decimal_u64(p, (uint64_t)data_len);
        *p++ = '\r';
        *p++ = '\n';
        memcpy(p, data, (size_t)data_len);
        p += data_len;
        *p++ = '\r';
        *p++ = '\n';
        data_bytes += (unsigned long long)data_len;
    }
    if (PyByteArray_Resize(out, p - PyByteArray_AS_STRING(out)) < 0) {
        return NULL;
    }
    return Py_BuildValue("(nnK)", count, pos, data_bytes);
}

PyObject *appliance_append_relayed_msgs(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    msgs_args a;
    if (parse_msgs_args(args, nargs, "append_relayed_msgs", &a) < 0) {
        return NULL;
    }
    const Py_ssize_t start = a.start, end = a.end, limit = a.limit, tail_len = a.tail_len;
    const int headers = a.headers;
    const unsigned char *base = a.base;
    /* pass 1: validate (whole record, `<ack>@<subject>` reply with a subject) and size */
    Py_ssize_t room = 0;
    Py_ssize_t count = 0;
    for (Py_ssize_t pos = start; pos < end && count < limit; count++) {
        record_view r;
        if (view_record(base, pos, end, &r) < 0) {
            PyErr_SetString(PyExc_ValueError, "truncated message record in a link frame");
            return NULL;
        }
        const Py_ssize_t at = last_at(r.fields + r.account + r.subject, r.reply);
        if (at < 0 || at == r.reply - 1) {
            PyErr_SetString(PyExc_ValueError, "relayed record without an <ack>@<subject> reply");
            return NULL;
        }
        /* "HMSG " subject tail ack " " header " " size CRLF data CRLF (subject + ack < reply) */
        room += 5 + r.reply + tail_len + 1 + 2 * DECIMAL_DIGITS_MAX + 1 + 2 + r.data + 2;
        pos = r.next;
    }
    PyObject *out = args[0];
    const Py_ssize_t old = PyByteArray_GET_SIZE(out);
    if (PyByteArray_Resize(out, old + room) < 0) {
        return NULL;
    }
    char *p = PyByteArray_AS_STRING(out) + old;
    const char *tail = PyBytes_AS_STRING(args[4]);
    unsigned long long data_bytes = 0;
    Py_ssize_t pos = start;
    for (Py_ssize_t i = 0; i < count; i++) {
        record_view r;
        (void)view_record(base, pos, end, &r); /* validated above */
        pos = r.next;
        const char *reply = (const char *)r.fields + r.account + r.subject;
        const Py_ssize_t at = last_at((const unsigned char *)reply, r.reply);
        const char *data = reply + r.reply + r.queue;
        Py_ssize_t data_len = r.data;
        Py_ssize_t header_len = r.header == NO_HEADER ? -1 : (Py_ssize_t)r.header;
        if (header_len >= 0 && !headers) { /* a client without headers gets the payload alone */
            data += header_len;
            data_len -= header_len;
            header_len = -1;
        }
        p = put_msg(p, reply + at + 1, r.reply - at - 1, tail, tail_len, reply, at, header_len, data, data_len);
        data_bytes += (unsigned long long)data_len;
    }
    if (PyByteArray_Resize(out, p - PyByteArray_AS_STRING(out)) < 0) {
        return NULL;
    }
    return Py_BuildValue("(nnK)", count, pos, data_bytes);
}

PyObject *appliance_append_pub_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 6 || !PyByteArray_Check(args[0]) || !PyList_Check(args[1]) || !PyBytes_Check(args[3]) ||
        !PyBytes_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "append_pub_records(out: bytearray, events: list, start: int, "
                                         "account: bytes, subject: bytes, bytes_max: int)");
        return NULL;
    }
    const Py_ssize_t start = PyLong_AsSsize_t(args[2]);
    const Py_ssize_t bytes_max = PyLong_AsSsize_t(args[5]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    PyObject *out = args[0];
    PyObject *events = args[1];
    PyObject *subject = args[4];
    const Py_ssize_t account_len = PyBytes_GET_SIZE(args[3]);
    const Py_ssize_t subject_len = PyBytes_GET_SIZE(subject);
    if (start < 0 || account_len > UINT16_MAX || subject_len > UINT16_MAX) {
        PyErr_SetString(PyExc_ValueError, "append_pub_records: bad start, account or subject");
        return NULL;
    }
    /* pass 1: how many events form the run, and the bytes they take */
    const Py_ssize_t total = PyList_GET_SIZE(events);
    Py_ssize_t stop = start;
    Py_ssize_t room = 0;
    Py_ssize_t filled = PyByteArray_GET_SIZE(out);
    unsigned long long data_bytes = 0;
    while (stop < total && filled + room < bytes_max) {
        PyObject *event = PyList_GET_ITEM(events, stop);
        if (!PyTuple_Check(event) || PyTuple_GET_SIZE(event) != 4) {
            break;
        }
        PyObject *op = PyTuple_GET_ITEM(event, 0);
        PyObject *event_subject = PyTuple_GET_ITEM(event, 1);
        PyObject *reply = PyTuple_GET_ITEM(event, 2);
        PyObject *data = PyTuple_GET_ITEM(event, 3);
        if (!PyLong_CheckExact(op) || PyLong_AsLong(op) != 1 || !PyBytes_Check(data) ||
            (reply != Py_None && !PyBytes_Check(reply)) || !PyBytes_Check(event_subject)) {
            break;
        }
        if (event_subject != subject && (PyBytes_GET_SIZE(event_subject) != subject_len ||
                                         memcmp(PyBytes_AS_STRING(event_subject), PyBytes_AS_STRING(subject),
                                                (size_t)subject_len) != 0)) {
            break;
        }
        const Py_ssize_t reply_len = reply == Py_None ? 0 : PyBytes_GET_SIZE(reply);
        const Py_ssize_t data_len = PyBytes_GET_SIZE(data);
        if (reply_len > UINT16_MAX || data_len > (Py_ssize_t)UINT32_MAX - 1) {
            break; /* the caller's general path reports it */
        }
        room += RECORD_HEADER_BYTES + account_len + subject_len + reply_len + data_len;
        data_bytes += (unsigned long long)data_len;
        stop++;
    }
    const Py_ssize_t old = filled;
    if (PyByteArray_Resize(out, old + room) < 0) {
        return NULL;
    }
    char *p = PyByteArray_AS_STRING(out) + old;
    for (Py_ssize_t i = start; i < stop; i++) {
        PyObject *event = PyList_GET_ITEM(events, i);
        PyObject *reply = PyTuple_GET_ITEM(event, 2);
        PyObject *data = PyTuple_GET_ITEM(event, 3);
        const Py_ssize_t reply_len = reply == Py_None ? 0 : PyBytes_GET_SIZE(reply);
        const Py_ssize_t data_len = PyBytes_GET_SIZE(data);
        put_u16(p, (uint16_t)account_len);
        put_u16(p + 2, (uint16_t)subject_len);
        put_u16(p + 4, (uint16_t)reply_len);
        put_u16(p + 6, 0);
        put_u32(p + 8, NO_HEADER);
        put_u32(p + 12, (uint32_t)data_len);
        p += RECORD_HEADER_BYTES;
        memcpy(p, PyBytes_AS_STRING(args[3]), (size_t)account_len);
        p += account_len;
        memcpy(p, PyBytes_AS_STRING(subject), (size_t)subject_len);
        p += subject_len;
        if (reply_len > 0) {
            memcpy(p, PyBytes_AS_STRING(reply), (size_t)reply_len);
            p += reply_len;
        }
        memcpy(p, PyBytes_AS_STRING(data), (size_t)data_len);
        p += data_len;
    }
    return Py_BuildValue("(nK)", stop - start, data_bytes);
}

PyObject *appliance_append_pub_msgs(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if ((nargs != 6 && nargs != 7) || !PyByteArray_Check(args[0]) || !PyList_Check(args[1]) ||
        !PyBytes_Check(args[3]) || !PyBytes_Check(args[4]) || (nargs == 7 && !PyBytes_Check(args[6]))) {
        PyErr_SetString(PyExc_TypeError, "append_pub_msgs(out: bytearray, events: list, start: int, "
                                         "subject: bytes, tail: bytes, limit: int[, op: bytes])");
        return NULL;
    }
    /* op: what starts each line, "MSG " for a client; "RMSG <account> " for a route */
    const char *op_text = nargs == 7 ? PyBytes_AS_STRING(args[6]) : "MSG ";
    const Py_ssize_t op_len = nargs == 7 ? PyBytes_GET_SIZE(args[6]) : 4;
    const Py_ssize_t start = PyLong_AsSsize_t(args[2]);
    const Py_ssize_t limit = PyLong_AsSsize_t(args[5]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (start < 0) {
        PyErr_SetString(PyExc_ValueError, "append_pub_msgs: start must be >= 0");
        return NULL;
    }
    PyObject *out = args[0];
    PyObject *events = args[1];
    PyObject *subject = args[3];
    const Py_ssize_t subject_len = PyBytes_GET_SIZE(subject);
    const Py_ssize_t tail_len = PyBytes_GET_SIZE(args[4]);
    /* pass 1: the run and the room it takes */
    const Py_ssize_t total = PyList_GET_SIZE(events);
    Py_ssize_t stop = start;
    Py_ssize_t room = 0;
    while (stop < total && stop - start < limit) {
        PyObject *event = PyList_GET_ITEM(events, stop);
        if (!PyTuple_Check(event) || PyTuple_GET_SIZE(event) != 4) {
            break;
        }
        PyObject *op = PyTuple_GET_ITEM(event, 0);
        PyObject *event_subject = PyTuple_GET_ITEM(event, 1);
        PyObject *reply = PyTuple_GET_ITEM(event, 2);
        PyObject *data = PyTuple_GET_ITEM(event, 3);
        if (!PyLong_CheckExact(op) || PyLong_AsLong(op) != 1 || !PyBytes_Check(data) ||
            (reply != Py_None && !PyBytes_Check(reply)) || !PyBytes_Check(event_subject)) {
            break;
        }
        if (event_subject != subject && (PyBytes_GET_SIZE(event_subject) != subject_len ||
                                         memcmp(PyBytes_AS_STRING(event_subject), PyBytes_AS_STRING(subject),
                                                (size_t)subject_len) != 0)) {
            break;
        }
        const Py_ssize_t reply_len = reply == Py_None ? 0 : PyBytes_GET_SIZE(reply);
        /* op subject tail reply " " size CRLF data CRLF */
        room += op_len + subject_len + tail_len + reply_len + 1 + DECIMAL_DIGITS_MAX + 2 + PyBytes_GET_SIZE(data) + 2;
        stop++;
    }
    const Py_ssize_t old = PyByteArray_GET_SIZE(out);
    if (PyByteArray_Resize(out, old + room) < 0) {
        return NULL;
    }
    char *p = PyByteArray_AS_STRING(out) + old;
    unsigned long long data_bytes = 0;
    for (Py_ssize_t i = start; i < stop; i++) {
        PyObject *event = PyList_GET_ITEM(events, i);
        PyObject *reply = PyTuple_GET_ITEM(event, 2);
        PyObject *data = PyTuple_GET_ITEM(event, 3);
        const Py_ssize_t data_len = PyBytes_GET_SIZE(data);
        memcpy(p, op_text, (size_t)op_len);
        p += op_len;
        memcpy(p, PyBytes_AS_STRING(subject), (size_t)subject_len);
        p += subject_len;
        memcpy(p, PyBytes_AS_STRING(args[4]), (size_t)tail_len);
        p += tail_len;
        if (reply != Py_None && PyBytes_GET_SIZE(reply) > 0) {
            memcpy(p, PyBytes_AS_STRING(reply), (size_t)PyBytes_GET_SIZE(reply));
            p += PyBytes_GET_SIZE(reply);
            *p++ = ' ';
        }
        p += put_decimal_u64(p, (uint64_t)data_len);
        *p++ = '\r';
        *p++ = '\n';
        memcpy(p, PyBytes_AS_STRING(data), (size_t)data_len);
        p += data_len;
        *p++ = '\r';
        *p++ = '\n';
        data_bytes += (unsigned long long)data_len;
    }
    if (PyByteArray_Resize(out, p - PyByteArray_AS_STRING(out)) < 0) {
        return NULL;
    }
    return Py_BuildValue("(nK)", stop - start, data_bytes);
}

PyObject *appliance_count_pubs(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4 || !PyList_Check(args[0]) || !PyBytes_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "count_pubs(events: list, start: int, subject: bytes, with_reply: bool)");
        return NULL;
    }
    const Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    const int with_reply = PyObject_IsTrue(args[3]);
    if (PyErr_Occurred() || with_reply < 0) {
        return NULL;
    }
    if (start < 0) {
        PyErr_SetString(PyExc_ValueError, "count_pubs: start must be >= 0");
        return NULL;
    }
    PyObject *events = args[0];
    PyObject *subject = args[2];
    const Py_ssize_t subject_len = PyBytes_GET_SIZE(subject);
    const Py_ssize_t total = PyList_GET_SIZE(events);
    Py_ssize_t stop = start;
    unsigned long long data_bytes = 0;
    while (stop < total) {
        PyObject *event = PyList_GET_ITEM(events, stop);
        if (!PyTuple_Check(event) || PyTuple_GET_SIZE(event) != 4) {
            break;
        }
        PyObject *op = PyTuple_GET_ITEM(event, 0);
        PyObject *event_subject = PyTuple_GET_ITEM(event, 1);
        PyObject *reply = PyTuple_GET_ITEM(event, 2);
        PyObject *data = PyTuple_GET_ITEM(event, 3);
        if (!PyLong_CheckExact(op) || PyLong_AsLong(op) != 1 || !PyBytes_Check(data) ||
            (!with_reply && reply != Py_None) || !PyBytes_Check(event_subject)) {
            break;
        }
        if (event_subject != subject && (PyBytes_GET_SIZE(event_subject) != subject_len ||
                                         memcmp(PyBytes_AS_STRING(event_subject), PyBytes_AS_STRING(subject),
                                                (size_t)subject_len) != 0)) {
            break;
        }
        data_bytes += (unsigned long long)PyBytes_GET_SIZE(data);
        stop++;
    }
    return Py_BuildValue("(nK)", stop - start, data_bytes);
}
