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
