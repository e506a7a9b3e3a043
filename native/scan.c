/*
 * The PUB/HPUB scanner. Contract (shared with appliance/protocol/_scan_py.py, checked by a
 * differential property test): starting at `pos`, consume consecutive complete, well-formed
 * `PUB `/`HPUB ` operations (upper case, single spaces, CRLF), appending their event tuples to
 * `out`; stop at the first byte that starts anything else and return its offset. Every error and
 * every unusual form is left to the general parser, so this file decides nothing about errors.
 */
#include "scan.h"

#include <stdint.h>
#include <string.h>

enum { TOKENS_MAX = 4, SIZE_DIGITS_MAX = 18 };

typedef struct {
    Py_ssize_t start[TOKENS_MAX];
    Py_ssize_t length[TOKENS_MAX];
    int count; /* TOKENS_MAX + 1 when there were too many */
} tokens_t;

/* Split data[from, to) on single spaces; return 0 if any token is empty or there are too many. */
static int split_tokens(const char *data, Py_ssize_t from, Py_ssize_t to, tokens_t *tokens) {
    tokens->count = 0;
    Py_ssize_t i = from;
    while (i <= to) {
        const char *space = memchr(data + i, ' ', (size_t)(to - i));
        Py_ssize_t j = space ? (Py_ssize_t)(space - data) : to;
        if (j == i || tokens->count == TOKENS_MAX) {
            return 0;
        }
        tokens->start[tokens->count] = i;
        tokens->length[tokens->count] = j - i;
        tokens->count++;
        i = j + 1;
    }
    return 1;
}

static int parse_size(const char *digits, Py_ssize_t length, Py_ssize_t *value) {
    if (length <= 0 || length > SIZE_DIGITS_MAX) {
        return 0;
    }
    Py_ssize_t result = 0;
    for (Py_ssize_t i = 0; i < length; i++) {
        char c = digits[i];
        if (c < '0' || c > '9') {
            return 0;
        }
        result = result * 10 + (c - '0');
    }
    *value = result;
    return 1;
}

/* Append one event tuple; returns -1 with a Python error set on failure. */
static int append_event(PyObject *out, const char *data, const tokens_t *t, int hpub, Py_ssize_t start,
                        Py_ssize_t header_size, Py_ssize_t size) {
    PyObject *subject = PyBytes_FromStringAndSize(data + t->start[0], t->length[0]);
    PyObject *reply = NULL;
    int with_reply = t->count == (hpub ? 4 : 3);
    if (with_reply) {
        reply = PyBytes_FromStringAndSize(data + t->start[1], t->length[1]);
    } else {
        reply = Py_None;
        Py_INCREF(reply);
    }
    PyObject *event = NULL;
    if (subject && reply) {
        if (hpub) {
            PyObject *header = PyBytes_FromStringAndSize(data + start, header_size);
            PyObject *whole = PyBytes_FromStringAndSize(data + start, size);
            if (header && whole) {
                event = Py_BuildValue("(iOOOO)", 2, subject, reply, header, whole);
            }
            Py_XDECREF(header);
            Py_XDECREF(whole);
        } else {
            PyObject *payload = PyBytes_FromStringAndSize(data + start, size);
            if (payload) {
                event = Py_BuildValue("(iOOO)", 1, subject, reply, payload);
            }
            Py_XDECREF(payload);
        }
    }
    Py_XDECREF(subject);
    Py_XDECREF(reply);
    if (!event) {
        return -1;
    }
    int rc = PyList_Append(out, event);
    Py_DECREF(event);
    return rc;
}

PyObject *appliance_scan_pubs(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5 || !PyBytes_Check(args[0]) || !PyList_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "scan_pubs(buf: bytes, pos: int, max_line: int, max_payload: int, out: list)");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t max_line = PyLong_AsSsize_t(args[2]);
    Py_ssize_t max_payload = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    const char *data = PyBytes_AS_STRING(args[0]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    if (pos < 0 || pos > n || max_line <= 0 || max_payload < 0) {
        PyErr_SetString(PyExc_ValueError, "scan_pubs: bad position or limits");
        return NULL;
    }
    PyObject *out = args[4];
    while (pos < n) {
        int hpub;
        Py_ssize_t arg_start;
        if (n - pos >= 4 && memcmp(data + pos, "PUB ", 4) == 0) {
            hpub = 0;
            arg_start = pos + 4;
        } else if (n - pos >= 5 && memcmp(data + pos, "HPUB ", 5) == 0) {
            hpub = 1;
            arg_start = pos + 5;
        } else {
            break;
        }
        Py_ssize_t limit = pos + max_line + 1 < n ? pos + max_line + 1 : n;
        const char *newline = memchr(data + pos, '\n', (size_t)(limit - pos));
        if (!newline) {
            break;
        }
        Py_ssize_t eol = newline - data;
        if (data[eol - 1] != '\r' || eol - 1 < arg_start) {
            break;
        }
        tokens_t t;
        if (!split_tokens(data, arg_start, eol - 1, &t)) {
            break;
        }
        int expected_min = hpub ? 3 : 2;
        if (t.count < expected_min || t.count > expected_min + 1) {
            break;
        }
        Py_ssize_t size = 0;
        Py_ssize_t header_size = 0;
        int last = t.count - 1;
        if (!parse_size(data + t.start[last], t.length[last], &size)) {
            break;
        }
        if (hpub && !parse_size(data + t.start[last - 1], t.length[last - 1], &header_size)) {
            break;
        }
        if (size > max_payload || header_size > size) {
            break;
        }
        Py_ssize_t start = eol + 1;
        Py_ssize_t stop = start + size;
        if (stop + 2 > n || data[stop] != '\r' || data[stop + 1] != '\n') {
            break;
        }
        if (append_event(out, data, &t, hpub, start, header_size, size) < 0) {
            return NULL;
        }
        pos = stop + 2;
    }
    return PyLong_FromSsize_t(pos);
}

enum { DIGITS_MAX = 20 };

/* Decimal digits of a non-negative value into buf (no terminator); returns how many. */
static Py_ssize_t put_decimal(char *buf, Py_ssize_t value) {
    char reversed[DIGITS_MAX];
    Py_ssize_t count = 0;
    do {
        reversed[count++] = (char)('0' + value % 10);
        value /= 10;
    } while (value > 0 && count < DIGITS_MAX);
    for (Py_ssize_t i = 0; i < count; i++) {
        buf[i] = reversed[count - 1 - i];
    }
    return count;
}

PyObject *appliance_append_msg(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 6 || !PyByteArray_Check(args[0]) || !PyBytes_Check(args[1]) || !PyBytes_Check(args[2]) ||
        (args[3] != Py_None && !PyBytes_Check(args[3])) || !PyBytes_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "append_msg(out: bytearray, subject: bytes, tail: bytes, reply: bytes | None, "
                        "header_size: int, data: bytes)");
        return NULL;
    }
    Py_ssize_t header_size = PyLong_AsSsize_t(args[4]);
    if (header_size == -1 && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *out = args[0];
    Py_ssize_t subject_len = PyBytes_GET_SIZE(args[1]);
    Py_ssize_t tail_len = PyBytes_GET_SIZE(args[2]);
    Py_ssize_t reply_len = args[3] == Py_None ? 0 : PyBytes_GET_SIZE(args[3]);
    Py_ssize_t data_len = PyBytes_GET_SIZE(args[5]);
    if (header_size > data_len) {
        PyErr_SetString(PyExc_ValueError, "append_msg: header larger than the message");
        return NULL;
    }
    Py_ssize_t old = PyByteArray_GET_SIZE(out);
    /* "HMSG " + subject + tail + reply + " " + 2 numbers with a space + CRLF + data + CRLF */
    Py_ssize_t room = 5 + subject_len + tail_len + reply_len + 1 + 2 * DIGITS_MAX + 1 + 2 + data_len + 2;
    if (PyByteArray_Resize(out, old + room) < 0) {
        return NULL;
    }
    char *p = PyByteArray_AS_STRING(out) + old;
    char *start = p;
    if (header_size >= 0) {
        memcpy(p, "HMSG ", 5);
        p += 5;
    } else {
        memcpy(p, "MSG ", 4);
        p += 4;
    }
    memcpy(p, PyBytes_AS_STRING(args[1]), (size_t)subject_len);
    p += subject_len;
    memcpy(p, PyBytes_AS_STRING(args[2]), (size_t)tail_len);
    p += tail_len;
    if (reply_len > 0) {
        memcpy(p, PyBytes_AS_STRING(args[3]), (size_t)reply_len);
        p += reply_len;
        *p++ = ' ';
    }
    if (header_size >= 0) {
        p += put_decimal(p, header_size);
        *p++ = ' ';
    }
    p += put_decimal(p, data_len);
    *p++ = '\r';
    *p++ = '\n';
    memcpy(p, PyBytes_AS_STRING(args[5]), (size_t)data_len);
    p += data_len;
    *p++ = '\r';
    *p++ = '\n';
    Py_ssize_t used = p - start;
    assert(used <= room);
    if (PyByteArray_Resize(out, old + used) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/*
 * The RMSG scanner (route protocol, twin: appliance/protocol/_scan_py.py scan_rmsgs): starting at `pos`,
 * consume consecutive complete `RMSG <account> <subject> [<reply>] <size>\r\n<payload>\r\n` operations
 * (upper case, single spaces, no tab, a reply without '@' that is not a queue marker `+`/`|`), appending
 * each as a PUB-shaped event (1, subject, reply | None, payload) to a run (ROUTE_RUN, account, [events])
 * at the end of `out` (a new run when the account changes); stop at anything else and return its offset.
 */
enum { ROUTE_RUN = 10 };

static PyObject *run_for(PyObject *out, const char *account, Py_ssize_t account_len) {
    Py_ssize_t count = PyList_GET_SIZE(out);
    if (count > 0) {
        PyObject *last = PyList_GET_ITEM(out, count - 1);
        if (PyTuple_Check(last) && PyTuple_GET_SIZE(last) == 3 && PyLong_CheckExact(PyTuple_GET_ITEM(last, 0)) &&
            PyLong_AsLong(PyTuple_GET_ITEM(last, 0)) == ROUTE_RUN) {
            PyObject *name = PyTuple_GET_ITEM(last, 1);
            PyObject *events = PyTuple_GET_ITEM(last, 2);
            if (PyBytes_Check(name) && PyList_Check(events) && PyBytes_GET_SIZE(name) == account_len &&
                memcmp(PyBytes_AS_STRING(name), account, (size_t)account_len) == 0) {
                return events; /* borrowed */
            }
        }
    }
    PyObject *events = PyList_New(0);
    PyObject *name = PyBytes_FromStringAndSize(account, account_len);
    PyObject *run = NULL;
    if (events && name) {
        run = Py_BuildValue("(iOO)", ROUTE_RUN, name, events);
    }
    Py_XDECREF(name);
    Py_XDECREF(events);
    if (!run) {
        return NULL;
    }
    int rc = PyList_Append(out, run);
    Py_DECREF(run);
    return rc < 0 ? NULL : events; /* borrowed: the run in `out` holds it */
}

PyObject *appliance_scan_rmsgs(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5 || !PyBytes_Check(args[0]) || !PyList_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "scan_rmsgs(buf: bytes, pos: int, max_line: int, max_payload: int, out: list)");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t max_line = PyLong_AsSsize_t(args[2]);
    Py_ssize_t max_payload = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    const char *data = PyBytes_AS_STRING(args[0]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    if (pos < 0 || pos > n || max_line <= 0 || max_payload < 0) {
        PyErr_SetString(PyExc_ValueError, "scan_rmsgs: bad position or limits");
        return NULL;
    }
    PyObject *out = args[4];
    while (pos < n) {
        if (n - pos < 5 || memcmp(data + pos, "RMSG ", 5) != 0) {
            break;
        }
        Py_ssize_t arg_start = pos + 5;
        Py_ssize_t limit = pos + max_line + 1 < n ? pos + max_line + 1 : n;
        const char *newline = memchr(data + pos, '\n', (size_t)(limit - pos));
        if (!newline) {
            break;
        }
        Py_ssize_t eol = newline - data;
        if (data[eol - 1] != '\r' || eol - 1 < arg_start) {
            break;
        }
        if (memchr(data + arg_start, '\t', (size_t)(eol - 1 - arg_start))) {
            break;
        }
        tokens_t t;
        if (!split_tokens(data, arg_start, eol - 1, &t) || t.count < 3 || t.count > 4) {
            break;
        }
        Py_ssize_t size = 0;
        if (!parse_size(data + t.start[t.count - 1], t.length[t.count - 1], &size) || size > max_payload) {
            break;
        }
        int with_reply = t.count == 4;
        if (with_reply) {
            const char *reply = data + t.start[2];
            if ((t.length[2] == 1 && (reply[0] == '+' || reply[0] == '|')) || memchr(reply, '@', (size_t)t.length[2])) {
                break;
            }
        }
        Py_ssize_t start = eol + 1;
        Py_ssize_t stop = start + size;
        if (stop + 2 > n || data[stop] != '\r' || data[stop + 1] != '\n') {
            break;
        }
        PyObject *events = run_for(out, data + t.start[0], t.length[0]);
        if (!events) {
            return NULL;
        }
        PyObject *subject = PyBytes_FromStringAndSize(data + t.start[1], t.length[1]);
        PyObject *reply = with_reply ? PyBytes_FromStringAndSize(data + t.start[2], t.length[2]) : Py_None;
        if (!with_reply) {
            Py_INCREF(reply);
        }
        PyObject *payload = PyBytes_FromStringAndSize(data + start, size);
        PyObject *event = NULL;
        if (subject && reply && payload) {
            event = Py_BuildValue("(iOOO)", 1, subject, reply, payload);
        }
        Py_XDECREF(subject);
        Py_XDECREF(reply);
        Py_XDECREF(payload);
        if (!event) {
            return NULL;
        }
        int rc = PyList_Append(events, event);
        Py_DECREF(event);
        if (rc < 0) {
            return NULL;
        }
        pos = stop + 2;
    }
    return PyLong_FromSsize_t(pos);
}
